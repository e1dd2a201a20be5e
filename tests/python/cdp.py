"""cdp.py - a small Chrome DevTools Protocol client over --remote-debugging-pipe
(JSON messages separated by NUL on fds 3 and 4), enough to drive headless
Chromium in tests: evaluate JavaScript, navigate, reload, watch requests."""
import json
import os
import select
import subprocess
import time


class Browser:
    def __init__(self, chromium, user_dir):
        to_chrome_r, self._w = os.pipe()
        self._r, from_chrome_w = os.pipe()

        def fds():
            # via high numbers: either pipe end may itself be fd 3 or 4
            os.dup2(to_chrome_r, 1000)
            os.dup2(from_chrome_w, 1001)
            os.dup2(1000, 3)
            os.dup2(1001, 4)
            os.close(1000)
            os.close(1001)

        self.proc = subprocess.Popen(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-dev-shm-usage", "--remote-debugging-pipe", "--window-size=1280,1000",
             "--user-data-dir=" + user_dir, "about:blank"],
            preexec_fn=fds, close_fds=False, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf = b""
        self._id = 0
        self.events = []
        targets = self.call("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.call("Target.attachToTarget",
                                 {"targetId": page["targetId"], "flatten": True})["sessionId"]

    def _read(self, deadline):
        while b"\0" not in self._buf:
            left = deadline - time.time()
            if left <= 0 or not select.select([self._r], [], [], left)[0]:
                raise TimeoutError("no message from chromium")
            chunk = os.read(self._r, 1 << 16)
            if not chunk:
                raise EOFError("chromium closed the pipe")
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method, params=None, session=None, timeout=30):
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.time() + timeout
        while True:
            m = self._read(deadline)
            if m.get("id") == self._id:
                if "error" in m:
                    raise RuntimeError("%s: %s" % (method, m["error"]))
                return m.get("result", {})
            self.events.append(m)

    def page(self, method, params=None, timeout=30):
        return self.call(method, params, self.session, timeout)

    def js(self, expr):
        r = self.page("Runtime.evaluate", {"expression": expr, "returnByValue": True,
                                           "awaitPromise": True})
        if "exceptionDetails" in r:
            raise RuntimeError(r["exceptionDetails"])
        return r["result"].get("value")

    def wait_js(self, expr, timeout=30):
        """Poll expr until it is truthy; return its value."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            v = self.js(expr)
            if v:
                return v
            time.sleep(0.1)
        raise TimeoutError("never true: %s (last %r, at %r)" % (
            expr, v, self.js("location.href + ' ' + document.documentElement.outerHTML.slice(0, 300)")))

    def pump(self, seconds):
        """Read events for a while (requests the page makes, ...)."""
        deadline = time.time() + seconds
        try:
            while True:
                self.events.append(self._read(deadline))
        except TimeoutError:
            pass

    def close(self):
        try:
            self.call("Browser.close", timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._r)
        os.close(self._w)
