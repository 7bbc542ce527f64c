"""A local HTTPS imitation of the Hugging Face Hub for `mlxr pull` tests.

PKI: make_pki(dir) runs the `openssl` CLI at test time: a test CA, a
second (unknown) CA, a leaf for hub.test + cdn.test signed by the test CA,
a leaf for hub.test signed by the unknown CA, and a leaf for other.test
signed by the test CA.

Names: the fetcher resolves hub.test / cdn.test itself; tests pass
MLXR_RESOLVE=hub.test:127.0.0.1,cdn.test:127.0.0.1 (no /etc/hosts edits).
Hub and CDN share one port (one certificate names both), because the
fetcher's sandbox allows one extra TCP port: HF_ENDPOINT's.

Routes (Host decides hub or CDN):
  GET /api/models/ORG/REPO/revision/REV        {"id", "sha", "siblings"}
  GET /api/models/ORG/REPO/tree/SHA?recursive=1 [{type, path, size, oid, lfs}]
  GET /api/models?library=mlx...               search listing
  GET /ORG/REPO/resolve/REV/PATH   small files: 200; *.safetensors: 302 to
                                   https://cdn.test:PORT/lfs/SHA256?sig=N
  GET /lfs/SHA256 (cdn.test)       the bytes, with Range / If-Range (ETag)
Faults are switched on through Hub.faults (see the tests).
"""
import hashlib
import json
import os
import socket
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit, parse_qs

SHA = "0123456789abcdef0123456789abcdef01234567"


def _ossl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(d):
    os.makedirs(d, exist_ok=True)

    def ca(name, cn):
        _ossl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
              "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "3", "-subj", f"/CN={cn}",
              "-addext", "basicConstraints=critical,CA:TRUE",
              "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)

    def leaf(name, ca_name, names):
        with open(os.path.join(d, f"{name}.ext"), "w") as f:
            f.write("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                    "extendedKeyUsage=serverAuth\nsubjectAltName=" + ",".join("DNS:" + n for n in names) + "\n")
        _ossl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
              "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={names[0]}", cwd=d)
        _ossl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca_name}.pem", "-CAkey", f"{ca_name}.key",
              "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext", cwd=d)
        with open(os.path.join(d, f"{name}.pem"), "w") as f:
            f.write(open(os.path.join(d, f"{name}.crt")).read() + open(os.path.join(d, f"{ca_name}.pem")).read())

    ca("ca", "mlxr test CA")
    ca("evilca", "unknown test CA")
    leaf("hub", "ca", ["hub.test", "cdn.test"])
    leaf("evilhub", "evilca", ["hub.test", "cdn.test"])
    leaf("other", "ca", ["other.test"])
    return {k: os.path.join(d, v) for k, v in {
        "ca": "ca.pem", "hub_cert": "hub.pem", "hub_key": "hub.key", "evil_cert": "evilhub.pem",
        "evil_key": "evilhub.key", "other_cert": "other.pem", "other_key": "other.key"}.items()}


class Hub:
    """repos: {"org/repo": {path: bytes}}; LFS = *.safetensors."""

    def __init__(self, cert, key, repos, gated=()):
        self.repos = repos
        self.gated = set(gated)
        self.faults = {}
        self.log = []  # (host, method, path, headers dict)
        self.lock = threading.Lock()
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        hub = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                hub._handle(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def endpoint(self):
        return f"https://hub.test:{self.port}"

    def requests(self, host=None, path_part=None):
        with self.lock:
            return [r for r in self.log if (host is None or r[0] == host) and (path_part is None or path_part in r[2])]

    # ---- responses ----
    def _send(self, h, status, body=b"", headers=None, ctype="application/json"):
        h.send_response(status)
        h.send_header("Content-Type", ctype)
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def _json(self, h, obj, status=200):
        self._send(h, status, json.dumps(obj).encode())

    def _cut(self, h, status, headers, body, nbytes):
        """Announces the whole body, sends nbytes of it, then drops the TCP
        connection without a TLS close_notify."""
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body[:nbytes])
        h.wfile.flush()
        h.close_connection = True
        try:
            h.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _handle(self, h):
        host = (h.headers.get("Host") or "").split(":")[0]
        u = urlsplit(h.path)
        with self.lock:
            self.log.append((host, "GET", h.path, {k.lower(): v for k, v in h.headers.items()}))
        parts = u.path.strip("/").split("/")
        f = self.faults
        if f.get("huge_header"):
            h.send_response(200)
            for i in range(2000):
                h.send_header(f"X-Pad-{i}", "a" * 20)
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        if host == "cdn.test" and parts[0] == "lfs":
            return self._lfs(h, parts[1])
        if host != "hub.test":
            return self._send(h, 404, b"{}")
        if parts[:2] == ["api", "models"] and len(parts) == 2:
            q = parse_qs(u.query)
            out = [{"id": r, "modelId": r, "downloads": 100 - i, "likes": 7 + i, "library_name": "mlx"}
                   for i, r in enumerate(sorted(self.repos)) if not q.get("search") or q["search"][0] in r]
            return self._json(h, out)
        if parts[:2] == ["api", "models"] and len(parts) >= 6:
            repo = "/".join(parts[2:4])
            if repo in self.gated and h.headers.get("Authorization") != "Bearer good-token":
                return self._json(h, {"error": "Access to model is restricted."}, 401)
            if repo not in self.repos:
                return self._json(h, {"error": "Repository not found"}, 404)
            files = self.repos[repo]
            if parts[4] == "revision":
                return self._json(h, {"id": repo, "sha": SHA, "siblings": [{"rfilename": p} for p in files]})
            if parts[4] == "tree":
                out = []
                for p, b in sorted(files.items()):
                    size = len(b) + f.get("size_delta", {}).get(p, 0)
                    e = {"type": "file", "oid": hashlib.sha1(b).hexdigest(), "size": size, "path": p}
                    if p.endswith(".safetensors"):
                        e["lfs"] = {"oid": hashlib.sha256(b).hexdigest(), "size": size, "pointerSize": 134}
                    out.append(e)
                return self._json(h, out)
        if len(parts) >= 5 and parts[2] == "resolve":
            repo = "/".join(parts[:2])
            path = "/".join(parts[4:])
            if repo in self.gated and h.headers.get("Authorization") != "Bearer good-token":
                return self._json(h, {"error": "gated"}, 403)
            files = self.repos.get(repo, {})
            if path not in files:
                return self._send(h, 404, b"{}")
            b = files[path]
            if path in f.get("redirect_http", ()):
                return self._send(h, 302, b"", {"Location": f"http://cdn.test:{self.port}/lfs/x"})
            if path in f.get("redirect_loop", ()):
                return self._send(h, 302, b"", {"Location": h.path})
            if path in f.get("redirect_chain", ()):
                n = int(u.query or 0)
                return self._send(h, 302, b"", {"Location": f"{u.path}?{n + 1}"})
            if path in f.get("bad_chunked", ()):
                h.send_response(200)
                h.send_header("Transfer-Encoding", "chunked")
                h.end_headers()
                h.wfile.write(b"10\r\n0123456789abcdef\r\nzz\r\n")
                h.wfile.flush()
                h.close_connection = True
                return
            if path.endswith(".safetensors"):
                digest = hashlib.sha256(b).hexdigest()
                with self.lock:
                    self.sig = getattr(self, "sig", 0) + 1
                return self._send(h, 302, b"", {"Location": f"https://cdn.test:{self.port}/lfs/{digest}?sig={self.sig}",
                                                 "X-Linked-Etag": f'"{digest}"', "X-Linked-Size": str(len(b))})
            if path in f.get("chunked", ()):
                h.send_response(200)
                h.send_header("Transfer-Encoding", "chunked")
                h.send_header("ETag", '"%s"' % hashlib.sha1(b).hexdigest())
                h.end_headers()
                for i in range(0, len(b), 1000):
                    c = b[i:i + 1000]
                    h.wfile.write(b"%x\r\n" % len(c) + c + b"\r\n")
                h.wfile.write(b"0\r\n\r\n")
                return
            return self._send(h, 200, b, {"ETag": '"%s"' % hashlib.sha1(b).hexdigest()}, "application/octet-stream")
        return self._send(h, 404, b"{}")

    def _lfs(self, h, digest):
        blob = None
        for files in self.repos.values():
            for p, b in files.items():
                if hashlib.sha256(b).hexdigest() == digest:
                    blob, name = b, p
        if blob is None:
            return self._send(h, 404, b"")
        f = self.faults
        if name in f.get("corrupt", ()):
            blob = bytes([blob[0] ^ 0xff]) + blob[1:]
        if name in f.get("truncate", ()):
            blob = blob[:-10]
        etag = f'"{digest}"'
        rng = h.headers.get("Range")
        ir = h.headers.get("If-Range")
        start = 0
        if rng and rng.startswith("bytes=") and rng.endswith("-") and (ir is None or ir == etag) \
                and not f.get("ignore_range"):
            start = int(rng[6:-1])
        if start and f.get("bad_range_start"):
            start -= 1
        stall = f.get("stall", {}).get(name)
        if stall is not None:
            h.send_response(status if start else 200)
            h.send_header("ETag", etag)
            h.send_header("Content-Length", str(len(blob) - start))
            h.end_headers()
            h.wfile.write(blob[start:start + stall])
            h.wfile.flush()
            import time
            time.sleep(f.get("stall_seconds", 20))
            h.close_connection = True
            return
        cut = f.get("cut", {}).get(name)
        if start:
            body = blob[start:]
            hdr = {"ETag": etag, "Content-Range": f"bytes {start}-{len(blob) - 1}/{len(blob)}",
                   "Content-Type": "application/octet-stream"}
            status = 206
        else:
            body, hdr, status = blob, {"ETag": etag, "Content-Type": "application/octet-stream"}, 200
        if cut is not None:
            del f["cut"][name]
            return self._cut(h, status, hdr, body, cut)
        h.send_response(status)
        for k, v in hdr.items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)


def load_repo(model_dir):
    out = {}
    for name in sorted(os.listdir(model_dir)):
        p = os.path.join(model_dir, name)
        if os.path.isfile(p):
            out[name] = open(p, "rb").read()
    return out
