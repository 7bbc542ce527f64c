"""Starting a real `mlxr serve` for the tests, and raw HTTP over a socket."""
import json
import os
import re
import socket
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MLXR = os.environ.get("MLXR", str(ROOT / "build" / "mlxr"))


class Server:
    """`mlxr serve MODEL --port 0 ARGS...`; stderr (listen line, model
    ready, the request log) goes to a file the tests read."""

    def __init__(self, model, *args, env=None, wait_ready=True):
        self.log = tempfile.NamedTemporaryFile("w+", prefix="mlxr-serve-", suffix=".log", delete=False)
        e = dict(os.environ)
        e.pop("MLXR_API_KEY", None)
        e.update(env or {})
        self.proc = subprocess.Popen([MLXR, "serve", str(model), "--port", "0", *map(str, args)],
                                     stdout=subprocess.DEVNULL, stderr=self.log, env=e)
        self.port = None
        deadline = time.time() + 60
        while time.time() < deadline:
            text = self.text()
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", text)
            if m:
                self.port = int(m.group(1))
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlxr serve exited {self.proc.returncode}:\n{text}")
            if self.port and (not wait_ready or "model ready" in text):
                break
            time.sleep(0.05)
        else:
            self.stop()
            raise RuntimeError(f"mlxr serve did not become ready:\n{self.text()}")
        self.base = f"http://127.0.0.1:{self.port}"

    def text(self):
        return Path(self.log.name).read_text(errors="replace")

    def rss_kb(self):
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        text = self.text()
        os.unlink(self.log.name)
        # Under an ASan/UBSan build (MLXR=build-asan/mlxr) a report fails the test.
        if "Sanitizer" in text or "runtime error:" in text:
            raise AssertionError(f"sanitizer report from mlxr serve:\n{text[-6000:]}")


def connect(port, timeout=10):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    return s


_leftover = {}


def read_response(s, timeout=10):
    """Reads one HTTP/1.1 response (Content-Length or chunked; or until
    close). Returns (status, headers dict lowercased, body bytes). Bytes of
    a following (pipelined) response are kept for the next call."""
    s.settimeout(timeout)
    buf = _leftover.pop(id(s), b"")

    def more():
        d = s.recv(65536)
        if not d:
            raise EOFError
        return d

    try:
        while b"\r\n\r\n" not in buf:
            buf += more()
    except EOFError:
        if not buf:
            return None, {}, b""
        raise
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for ln in lines[1:]:
        k, _, v = ln.partition(":")
        headers[k.strip().lower()] = v.strip()
    if "content-length" in headers:
        n = int(headers["content-length"])
        while len(rest) < n:
            rest += more()
        _leftover[id(s)] = rest[n:]
        return status, headers, rest[:n]
    if headers.get("transfer-encoding") == "chunked":
        body = b""
        while True:
            while b"\r\n" not in rest:
                rest += more()
            size_s, _, rest = rest.partition(b"\r\n")
            size = int(size_s, 16)
            while len(rest) < size + 2:
                rest += more()
            body += rest[:size]
            rest = rest[size + 2:]
            if size == 0:
                _leftover[id(s)] = rest
                return status, headers, body
    while True:
        try:
            rest += more()
        except EOFError:
            return status, headers, rest


def request(port, method, path, body=None, headers=None, host=None, timeout=30):
    """One request on a fresh connection; returns (status, headers, body)."""
    h = {"Host": host or f"127.0.0.1:{port}"}
    data = b""
    if body is not None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        h["Content-Type"] = "application/json"
        h["Content-Length"] = str(len(data))
    h.update(headers or {})
    raw = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items() if v is not None)
    with connect(port, timeout) as s:
        s.sendall(raw.encode() + b"\r\n" + data)
        return read_response(s, timeout)


def wait_log(server, text, timeout=60):
    """The request log line is written once the answer is out, so a client
    can read the answer before the line exists: wait for it (the timeout
    only bounds a hang)."""
    deadline = time.time() + timeout
    while text not in server.text():
        assert time.time() < deadline, f"{text!r} not in the server log:\n{server.text()[-3000:]}"
        time.sleep(0.05)
    return server.text()


def error_of(body):
    e = json.loads(body)["error"]
    assert set(e) >= {"message", "type", "param", "code"}, e
    return e
