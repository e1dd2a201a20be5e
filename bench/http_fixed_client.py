"""http_fixed_client.py PORT CONNS PER_CONN - a fixed number of the
bench/chat.lua request over keep-alive connections (for
bench_http_instr.sh, where the count, not the time, matters)."""
import http.client
import sys
import threading

BODY = (b'{"model":"mock","max_tokens":16,"messages":'
        b'[{"role":"user","content":"Which option is right?"}]}')


def main():
    port, conns, per = (int(a) for a in sys.argv[1:4])
    bad = []

    def worker():
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        for _ in range(per):
            c.request("POST", "/v1/chat/completions", BODY,
                      {"Content-Type": "application/json"})
            r = c.getresponse()
            r.read()
            if r.status != 200:
                bad.append(r.status)
        c.close()

    ts = [threading.Thread(target=worker) for _ in range(conns)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print(f"sent {conns * per} requests, {len(bad)} not 200")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
