"""A black-box fuzzer of parley's HTTP front: mutated and hostile requests
over real sockets. After every input the server must still answer
GET /health, and every reply it sends must be HTTP/1.1 with a JSON body
(never libevent's HTML pages) or a stream. Prints counts per kind of input
and per reply status; exits 1 on a fault.

    python tests/fuzz/http_fuzz.py PARLEY_BIN [N] [SEED]
"""
import collections
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time

VALID = [
    b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n",
    b"GET /v1/models HTTP/1.1\r\nHost: localhost\r\n\r\n",
    b"HEAD /status HTTP/1.1\r\nHost: localhost\r\n\r\n",
    b"DELETE /v1/jobs/job-x HTTP/1.1\r\nHost: localhost\r\n\r\n",
    b"OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nOrigin: http://e.example\r\n\r\n",
]
BODY = json.dumps({"model": "mock", "max_tokens": 3,
                   "messages": [{"role": "user", "content": "hi"}]}).encode()
POST = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(BODY), BODY))
VALID.append(POST)
JUNK = [b"\x00", b"\r", b"\n", b"\r\n", b" ", b"\t", b":", b"%00", b"%", b"\xff", b"\x7f",
        b"Content-Length: 5\r\n", b"Content-Length: -1\r\n", b"Transfer-Encoding: chunked\r\n",
        b"Transfer-Encoding: gzip, chunked\r\n", b"Content-Length: 99999999999999999999\r\n",
        b"Expect: 100-continue\r\n", b" folded\r\n", b"X: " + b"a" * 70000 + b"\r\n",
        b"0\r\n\r\n", b"ffffffffffffffff\r\n", b"GET / HTTP/1.1\r\n\r\n", b"HTTP/9.9", b"\r\n\r\n"]


def mutate(rng, data):
    kind = rng.choice(["flip", "insert", "delete", "truncate", "dup_line", "junk", "random",
                       "repeat", "method", "version", "chunked"])
    d = bytearray(data)
    if kind == "flip" and d:
        for _ in range(rng.randint(1, 4)):
            d[rng.randrange(len(d))] = rng.randrange(256)
    elif kind == "insert":
        p = rng.randrange(len(d) + 1)
        d[p:p] = rng.choice(JUNK)
    elif kind == "delete" and d:
        p = rng.randrange(len(d))
        del d[p:p + rng.randint(1, 8)]
    elif kind == "truncate":
        d = d[:rng.randrange(len(d) + 1)]
    elif kind == "dup_line":
        lines = bytes(d).split(b"\r\n")
        if len(lines) > 2:
            i = rng.randrange(1, len(lines) - 1)
            lines.insert(i, lines[i])
        d = bytearray(b"\r\n".join(lines))
    elif kind == "junk":
        d = bytearray(b"".join(rng.choice(JUNK) for _ in range(rng.randint(1, 6))))
    elif kind == "random":
        d = bytearray(rng.randbytes(rng.randint(1, 300)))
    elif kind == "repeat":
        d = d * rng.randint(2, 5)
    elif kind == "method":
        sp = d.find(b" ")
        d[:max(sp, 0)] = rng.choice([b"FOO", b"TRACE", b"CONNECT", b"get", b"PUT", b"PATCH",
                                      b"G\x00T", b""])
    elif kind == "version":
        d = bytearray(bytes(d).replace(b"HTTP/1.1", rng.choice(
            [b"HTTP/1.0", b"HTTP/2.0", b"HTTP/1.12", b"HTTP/1", b"http/1.1", b""]), 1))
    elif kind == "chunked":
        body = BODY
        parts = []
        i = 0
        while i < len(body):
            n = rng.randint(1, 20)
            size = b"%x" % n if rng.random() > 0.1 else rng.choice([b"zz", b"-1", b"", b"1;x=y"])
            parts.append(size + b"\r\n" + body[i:i + n] + rng.choice([b"\r\n", b"\r\n", b"\n", b""]))
            i += n
        d = bytearray(b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
                      b"application/json\r\nTransfer-Encoding: chunked\r\n\r\n" +
                      b"".join(parts) + rng.choice([b"0\r\n\r\n", b"0\r\n", b""]))
    return kind, bytes(d)


def exchange(port, data, rng):
    c = socket.create_connection(("127.0.0.1", port))
    c.settimeout(3)
    mode = rng.choice(["all", "all", "slow", "close_early"])
    out = b""
    try:
        if mode == "slow":
            for i in range(0, len(data), 7):
                c.sendall(data[i:i + 7])
        else:
            c.sendall(data)
        if mode == "close_early":
            c.close()
            return mode, b""
        c.shutdown(socket.SHUT_WR)
        while True:
            b = c.recv(65536)
            if not b:
                break
            out += b
    except OSError:                     # timeouts, resets, a peer already gone
        pass
    c.close()
    return mode, out


def health(port):
    c = socket.create_connection(("127.0.0.1", port))
    c.settimeout(10)
    c.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    out = b""
    while True:
        b = c.recv(4096)
        if not b:
            break
        out += b
    c.close()
    return out


def check_replies(out, head_request):
    """Statuses of every reply in out; raises on a non-JSON error page."""
    statuses = []
    while out:
        head, sep, rest = out.partition(b"\r\n\r\n")
        if not sep:
            break
        lines = head.split(b"\r\n")
        assert lines[0].startswith(b"HTTP/1."), lines[0]
        st = int(lines[0].split()[1])
        h = {}
        for ln in lines[1:]:
            k, _, v = ln.partition(b":")
            h[k.strip().lower()] = v.strip()
        statuses.append(st)
        if st >= 400:
            assert h.get(b"content-type") == b"application/json", (st, head)
        assert b"<HTML>" not in out[:2000], out[:300]
        if b"transfer-encoding" in h:
            break                       # a stream; enough
        n = 0 if head_request else int(h.get(b"content-length", b"0"))
        if h.get(b"content-type") == b"application/json" and n:
            json.loads(rest[:n])
        out = rest[n:]
    return statuses


def main():
    binary = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    rng = random.Random(seed)
    p = subprocess.Popen([binary, "serve", "--backend", "mock", "--port", "0", "--log-level",
                          "error", "--no-access-log", "--header-timeout", "2",
                          "--body-timeout", "2", "--max-header-bytes", "8192"],
                         stdout=subprocess.PIPE, text=True)
    port = int(p.stdout.readline().split(":")[-1])
    kinds, modes, statuses = collections.Counter(), collections.Counter(), collections.Counter()
    faults = 0
    t0 = time.time()
    for i in range(n):
        kind, data = mutate(rng, rng.choice(VALID))
        kinds[kind] += 1
        try:
            mode, out = exchange(port, data, rng)
            modes[mode] += 1
            for st in check_replies(out, data.startswith(b"HEAD")):
                statuses[st] += 1
                if st >= 500 and st not in (501, 503, 505):  # TE other than chunked; busy; HTTP/2+
                    faults += 1
                    print("FAULT: %d for %r" % (st, data[:300]))
            if i % 50 == 0:
                h = health(port)
                assert b"200 OK" in h, h[:200]
        except Exception as e:          # a fault: report and count
            faults += 1
            print("FAULT on input %d (%s): %r\n  %r" % (i, kind, e, data[:200]))
        if p.poll() is not None:
            print("FAULT: the server exited with %s" % p.returncode)
            faults += 1
            break
    p.send_signal(signal.SIGTERM)
    rc = p.wait(timeout=30)
    print("inputs %d in %.0f s, seed %d; server exit %s; faults %d" %
          (n, time.time() - t0, seed, rc, faults))
    print("by mutation:", dict(sorted(kinds.items())))
    print("by send mode:", dict(sorted(modes.items())))
    print("reply statuses:", dict(sorted(statuses.items())))
    sys.exit(1 if faults or rc != 0 else 0)


if __name__ == "__main__":
    main()
