"""`make release` and `mlxr upgrade` (issue 7), end to end.

Builds, once per module, a copy of mlxr with a TEST key set compiled in
(make RELEASE_KEYS=..., never a run-time switch) as version 1.0.0 with the
kill-point hooks (RELEASE_TEST=1), installs copies of it into temporary
"install" directories, and builds release 1.0.1 with `make release`, signed
with the test primary key. Test keys are made with Debian's `minisign -G`
(so the secret-key format is minisign's) and with mlxr-keygen.

Downloads go through the real fetcher against a local HTTPS release feed
(GitHub-releases-shaped JSON) using the fetcher tests' PKI helpers
(tests/tls/hubserver.py): the fetcher resolves hub.test through
MLXR_RESOLVE, trusts the test CA through SSL_CERT_FILE, and may connect to
HF_ENDPOINT's port only, so the feed is served on hub.test at that port.

Every refused upgrade is checked the same way: exit status 1 (or 0 for
"up to date"), a message naming the reason, the three installed files
byte-for-byte unchanged (SHA-256 before and after), no temporary or journal
left in the install directory, and no staging directory left in $MLXR_HOME.
The independent check of the release format is `minisign -V` (Debian).
"""
import hashlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "tls"))
import hubserver  # noqa: E402

FILES = ("mlxr", "mlxr-worker", "mlxr-fetcher")
OLD, NEW = "1.0.0", "1.0.1"
FEED_PATH = "/repos/mlxr/mlxr/releases"


def sh(*args, **kw):
    if args and args[0] == "make":  # not the outer make's jobserver or variables
        env = dict(kw.get("env") or os.environ)
        for k in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES"):
            env.pop(k, None)
        kw["env"] = env
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    return subprocess.run([str(a) for a in args], **kw)


def sha(p):
    return hashlib.sha256(Path(p).read_bytes()).hexdigest()


def minisign_keypair(d, name):
    pub, sec = d / f"{name}.pub", d / f"{name}.key"
    r = sh("minisign", "-G", "-W", "-f", "-p", pub, "-s", sec)
    assert r.returncode == 0, r.stderr
    return pub, sec, pub.read_text().splitlines()[1]


# ---------------------------------------------------------------- builds
@pytest.fixture(scope="module")
def rel():
    if not shutil.which("minisign"):
        pytest.fail("minisign not installed (tests/deps.sh installs it)")
    t = Path(tempfile.mkdtemp(prefix="mlxr-rel-"))
    os.chmod(t, 0o755)
    keys = t / "keys"
    keys.mkdir()
    ppub, pkey, pb64 = minisign_keypair(keys, "primary")
    bpub, bkey, bb64 = minisign_keypair(keys, "backup")
    inc = t / "test_keys.inc"
    inc.write_text(f'RS_TRUSTED_KEY("primary", "{pb64}")\nRS_TRUSTED_KEY("backup", "{bb64}")\n')
    base = t / "base"
    common = [f"RELEASE_KEYS={inc}", "RELEASE_TEST=1"]
    jobs = f"-j{os.cpu_count() or 2}"
    r = sh("make", "-C", REPO, jobs, f"BUILD={base}", f"VERSION_OVERRIDE={OLD}", *common,
           *[base / f for f in FILES], base / "mlxr-sign", base / "mlxr-keygen")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    # Release N+1 with `make release`: the base build's objects, only the
    # version object rebuilt (the version is one constant in one object).
    nxt = t / "next"
    shutil.copytree(base, nxt, symlinks=True)
    (nxt / "obj" / "common" / "version.o").unlink()
    dist = t / "dist"
    r = sh("make", "-C", REPO, "release", f"RELEASE_BUILD={nxt}", f"DIST={dist}", f"VERSION_OVERRIDE={NEW}", *common,
           env=dict(os.environ, MLXR_SIGN_KEY_FILE=str(pkey)))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    # a third key, made by mlxr-keygen, that the test build does not trust
    other_inc = t / "other_keys.inc"
    r = sh(base / "mlxr-keygen", "--secret", keys / "other.key", "--source", other_inc, "--pub", keys / "other.pub")
    assert r.returncode == 0, r.stderr
    yield dict(t=t, base=base, next=nxt, dist=dist, inc=inc, ppub=ppub, pkey=pkey, bpub=bpub, bkey=bkey,
               okey=keys / "other.key", opub=keys / "other.pub", other_inc=other_inc, sign=base / "mlxr-sign")
    shutil.rmtree(t, ignore_errors=True)


@pytest.fixture(scope="module")
def pki():
    d = tempfile.mkdtemp(prefix="mlxr-pki-")
    os.chmod(d, 0o755)
    yield hubserver.make_pki(d)
    shutil.rmtree(d, ignore_errors=True)


def make_release(rel, d, version=NEW, key="pkey", expires=None, platform=None, files=None):
    """A release directory: the 1.0.1 binaries (or `files`), SHA256SUMS, and
    SHA256SUMS.sig signed by mlxr-sign with the given claims."""
    d = Path(d)
    d.mkdir(parents=True, exist_ok=True)
    files = files or {f: (rel["dist"] / f).read_bytes() for f in FILES}
    for f, b in files.items():
        (d / f).write_bytes(b)
        os.chmod(d / f, 0o755)
    (d / "SHA256SUMS").write_text("".join(f"{hashlib.sha256(b).hexdigest()}  {f}\n" for f, b in files.items()))
    args = [rel["sign"], "--version", version]
    if expires is not None:
        args += ["--expires", str(expires)]
    if platform:
        args += ["--platform", platform]
    r = sh(*args, d / "SHA256SUMS", env=dict(os.environ, MLXR_SIGN_KEY_FILE=str(rel[key])))
    assert r.returncode == 0, r.stderr
    return d


# ---------------------------------------------------------------- feed
class Feed:
    """GET {FEED_PATH}/latest: a GitHub release object; GET /dl/NAME: an
    asset. Faults: tag, omit (asset names left out of the feed), missing
    (404), truncate {name: nbytes}, sizes {name: size} (what the feed
    claims), raw (the feed body as given)."""

    def __init__(self, pki, release_dir):
        self.dir = Path(release_dir)
        self.tag = "v" + NEW
        self.omit, self.missing, self.truncate, self.sizes = set(), set(), {}, {}
        self.raw = None
        self.log = []
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(pki["hub_cert"], pki["hub_key"])
        feed = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                feed.handle(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def base(self):
        return f"https://hub.test:{self.port}"

    def document(self):
        names = sorted(p.name for p in self.dir.iterdir())
        return {"tag_name": self.tag, "name": f"mlxr {self.tag}", "draft": False, "prerelease": False,
                "assets": [{"name": n, "size": self.sizes.get(n, (self.dir / n).stat().st_size),
                            "browser_download_url": f"{self.base}/dl/{n}", "content_type": "application/octet-stream"}
                           for n in names if n not in self.omit]}

    def handle(self, h):
        self.log.append(h.path)
        if h.path == FEED_PATH + "/latest":
            body = self.raw if self.raw is not None else json.dumps(self.document()).encode()
            return self.send(h, 200, body)
        if h.path.startswith("/dl/"):
            name = h.path[4:]
            p = self.dir / name
            if name in self.missing or not p.is_file():
                return self.send(h, 404, b"not found")
            body = p.read_bytes()
            if name in self.truncate:
                h.send_response(200)
                h.send_header("Content-Length", str(len(body)))
                h.end_headers()
                h.wfile.write(body[:self.truncate[name]])
                h.wfile.flush()
                h.close_connection = True
                try:
                    h.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                return
            return self.send(h, 200, body)
        return self.send(h, 404, b"{}")

    def send(self, h, status, body):
        h.send_response(status)
        h.send_header("Content-Type", "application/octet-stream")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def inst(rel, tmp_path):
    """An installation of version 1.0.0 and its $MLXR_HOME."""
    d = tmp_path / "inst"
    d.mkdir()
    for f in FILES:
        shutil.copy2(rel["base"] / f, d / f)
    return d


@pytest.fixture
def home(tmp_path):
    return tmp_path / "home"


@pytest.fixture
def feed(pki, rel):
    f = Feed(pki, rel["dist"])
    yield f
    f.close()


def env_for(feed, pki, home, **extra):
    e = dict(os.environ, MLXR_RELEASES_URL=feed.base + FEED_PATH, HF_ENDPOINT=feed.base, SSL_CERT_FILE=pki["ca"],
             MLXR_RESOLVE="hub.test:127.0.0.1", MLXR_HOME=str(home), HOME=str(home.parent),
             HF_HOME=str(home.parent / "hf"))
    e.pop("HF_TOKEN", None)
    e.pop("MLXR_UPGRADE_STOP_AT", None)
    e.update(extra)
    return e


def upgrade(inst, env, *args, timeout=120):
    return sh(inst / "mlxr", "upgrade", *args, env=env, timeout=timeout)


def snapshot(inst):
    return {f: sha(inst / f) for f in FILES}


def version(inst, env=None):
    r = sh(inst / "mlxr", "--version", env=env or os.environ)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def assert_untouched(inst, home, before, r, *reason):
    out = r.stdout + r.stderr
    assert snapshot(inst) == before, "installed binaries changed:\n" + out
    left = sorted(p.name for p in inst.iterdir() if p.name not in FILES)
    assert left == [], f"left in the install directory: {left}\n{out}"
    assert not (home / "upgrade" / "staging").exists(), "staging not cleaned"
    for s in reason:
        assert s in out, f"expected {s!r} in:\n{out}"


# ---------------------------------------------------------------- make release
def test_make_release_output_verifies_with_minisign(rel):
    dist = rel["dist"]
    assert sorted(p.name for p in dist.iterdir()) == sorted([*FILES, "SHA256SUMS", "SHA256SUMS.sig"])
    r = sh("minisign", "-V", "-p", rel["ppub"], "-m", dist / "SHA256SUMS", "-x", dist / "SHA256SUMS.sig")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Signature and comment signature verified" in r.stdout + r.stderr
    tc = [l for l in (dist / "SHA256SUMS.sig").read_text().splitlines() if l.startswith("trusted comment: ")][0]
    fields = dict(kv.split(":", 1) for kv in tc[len("trusted comment: "):].split("\t"))
    assert fields["version"] == NEW and fields["file"] == "SHA256SUMS"
    assert int(fields["expires"]) > time.time() + 170 * 86400
    # sha256sum's own format: `sha256sum -c` checks every file
    r = sh("sha256sum", "-c", "SHA256SUMS", cwd=dist)
    assert r.returncode == 0 and r.stdout.count(": OK") == 3, r.stdout
    # and the release binaries are the version they claim
    assert sh(dist / "mlxr", "--version").stdout.strip() == f"mlxr {NEW}"


def test_minisign_refuses_a_modified_release(rel, tmp_path):
    d = tmp_path / "r"
    shutil.copytree(rel["dist"], d)
    s = (d / "SHA256SUMS").read_text()
    (d / "SHA256SUMS").write_text(s.replace(s[0], "0" if s[0] != "0" else "1", 1))
    r = sh("minisign", "-V", "-p", rel["ppub"], "-m", d / "SHA256SUMS", "-x", d / "SHA256SUMS.sig")
    assert r.returncode != 0
    # a key mlxr-keygen wrote is a minisign key too
    r = sh("minisign", "-V", "-p", rel["opub"], "-m", rel["dist"] / "SHA256SUMS", "-x", rel["dist"] / "SHA256SUMS.sig")
    assert r.returncode != 0 and "key id in the public key" in r.stdout + r.stderr


def test_minisign_signature_over_our_key_verifies_in_mlxr(rel, tmp_path, inst, home):
    """The other direction: Debian's minisign signs with a key file and
    mlxr verifies (here via --from-dir: the same checks as the download)."""
    d = make_release(rel, tmp_path / "r")
    tc = f"timestamp:{int(time.time())}\tfile:SHA256SUMS\tversion:{NEW}\tplatform:linux-x86_64\texpires:{int(time.time()) + 86400}"
    (d / "SHA256SUMS.sig").unlink()
    r = sh("minisign", "-S", "-s", rel["pkey"], "-m", d / "SHA256SUMS", "-x", d / "SHA256SUMS.sig", "-t", tc)
    assert r.returncode == 0, r.stderr
    r = upgrade(inst, dict(os.environ, MLXR_HOME=str(home)), "--from-dir", d)
    assert r.returncode == 0, r.stdout + r.stderr
    assert version(inst) == f"mlxr {NEW}"


def test_make_release_refuses_a_key_inside_the_repository(rel, tmp_path):
    kd = Path(tempfile.mkdtemp(prefix="build-keytest-", dir=REPO))  # ignored by .gitignore (/build-*/)
    try:
        shutil.copy(rel["pkey"], kd / "k.key")
        r = sh(REPO / "release" / "make_release.sh", rel["next"], tmp_path / "d", "1",
               env=dict(os.environ, MLXR_SIGN_KEY_FILE=str(kd / "k.key")))
        assert r.returncode != 0 and "inside the repository" in r.stderr
        assert not (tmp_path / "d").exists()
    finally:
        shutil.rmtree(kd, ignore_errors=True)


def test_keygen_writes_the_compiled_in_key_source(rel):
    txt = rel["other_inc"].read_text()
    pub = rel["opub"].read_text().splitlines()[1]
    assert f'RS_TRUSTED_KEY("primary", "{pub}")' in txt
    assert oct(os.stat(rel["okey"]).st_mode & 0o777) == "0o600"
    # the committed key source has a primary and a backup line
    committed = (REPO / "release" / "trusted_keys.inc").read_text()
    assert committed.count('RS_TRUSTED_KEY("primary"') == 1 and committed.count('RS_TRUSTED_KEY("backup"') == 1


def test_version_is_one_constant():
    hits = sh("grep", "-rn", "--include=*.c", "--include=*.h", "define MLXR_VERSION ", REPO / "broker",
              REPO / "common", REPO / "worker", REPO / "fetcher", REPO / "release").stdout.splitlines()
    assert len(hits) == 1 and "common/version.h" in hits[0], hits


# ---------------------------------------------------------------- upgrade: success
def test_upgrade_from_n_to_n_plus_1(rel, feed, pki, inst, home):
    env = env_for(feed, pki, home)
    old = snapshot(inst)
    assert version(inst) == f"mlxr {OLD}"
    r = upgrade(inst, env, "--check")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"update available: {NEW}" in r.stdout and "primary key" in r.stdout
    assert snapshot(inst) == old, "--check only reports"
    feed.log.clear()
    r = upgrade(inst, env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"upgraded {OLD} -> {NEW}" in r.stdout
    assert version(inst) == f"mlxr {NEW}"
    assert snapshot(inst) == {f: sha(rel["dist"] / f) for f in FILES}
    assert {f: sha(inst / f"{f}.prev") for f in FILES} == old, "the old binaries are kept as .prev"
    assert sorted(p.name for p in inst.iterdir()) == sorted([*FILES, *(f + ".prev" for f in FILES)])
    assert not (home / "upgrade" / "staging").exists()
    accepted = (home / "upgrade" / "accepted").read_text()
    assert accepted.endswith(f" {NEW}\n") and len(accepted.splitlines()) == 1
    got = [p for p in feed.log if p.startswith("/dl/")]
    assert sorted(got) == sorted(f"/dl/{n}" for n in [*FILES, "SHA256SUMS", "SHA256SUMS.sig"])
    # the new binaries work together: the new mlxr finds its new siblings
    assert sh(inst / "mlxr", "doctor", env=env).returncode in (0, 1)
    # and now it is up to date
    r = upgrade(inst, env)
    assert r.returncode == 0 and "up to date" in r.stdout, r.stdout + r.stderr


def test_backup_key_is_trusted(rel, feed, pki, inst, home, tmp_path):
    feed.dir = make_release(rel, tmp_path / "r", key="bkey")
    r = upgrade(inst, env_for(feed, pki, home))
    assert r.returncode == 0, r.stdout + r.stderr
    assert version(inst) == f"mlxr {NEW}"


def test_feed_tag_is_only_a_hint_the_signed_version_wins(rel, feed, pki, inst, home):
    feed.tag = "v0.0.1"  # the feed undersells a real 1.0.1
    r = upgrade(inst, env_for(feed, pki, home))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "the signed version counts" in r.stderr
    assert version(inst) == f"mlxr {NEW}"


# ---------------------------------------------------------------- upgrade: refused
def test_refuses_a_signature_by_another_key(rel, feed, pki, inst, home, tmp_path):
    feed.dir = make_release(rel, tmp_path / "r", key="okey")
    before = snapshot(inst)
    r = upgrade(inst, env_for(feed, pki, home))
    assert r.returncode == 1
    assert_untouched(inst, home, before, r, "which this mlxr does not trust")


def test_refuses_a_modified_sha256sums(rel, feed, pki, inst, home, tmp_path):
    d = make_release(rel, tmp_path / "r")
    # point the sums at a different mlxr-worker (whose bytes are then served)
    evil = (rel["dist"] / "mlxr-worker").read_bytes() + b"\0evil"
    (d / "mlxr-worker").write_bytes(evil)
    s = (d / "SHA256SUMS").read_text().splitlines()
    s = [f"{hashlib.sha256(evil).hexdigest()}  mlxr-worker" if l.endswith(" mlxr-worker") else l for l in s]
    (d / "SHA256SUMS").write_text("\n".join(s) + "\n")
    feed.dir = d
    before = snapshot(inst)
    r = upgrade(inst, env_for(feed, pki, home))
    assert r.returncode == 1
    assert_untouched(inst, home, before, r, "does not verify")


def test_refuses_a_modified_trusted_comment(rel, feed, pki, inst, home, tmp_path):
    d = make_release(rel, tmp_path / "r")
    sig = (d / "SHA256SUMS.sig").read_text().replace(f"version:{NEW}", "version:9.0.0")
    (d / "SHA256SUMS.sig").write_text(sig)
    feed.dir = d
    before = snapshot(inst)
    r = upgrade(inst, env_for(feed, pki, home))
    assert r.returncode == 1
    assert_untouched(inst, home, before, r, "trusted comment's signature does not verify")


def test_refuses_a_binary_that_does_not_match_its_sum(rel, feed, pki, inst, home, tmp_path):
    d = make_release(rel, tmp_path / "r")
    b = bytearray((d / "mlxr-fetcher").read_bytes())
    b[len(b) // 2] ^= 1  # same size, one bit
    (d / "mlxr-fetcher").write_bytes(bytes(b))
    feed.dir = d
    before = snapshot(inst)
    r = upgrade(inst, env_for(feed, pki, home))
    assert r.returncode == 1
    assert_untouched(inst, home, before, r, "mlxr-fetcher")
    # the developer path checks the same from a directory
    r = upgrade(inst, dict(os.environ, MLXR_HOME=str(home)), "--from-dir", d)
    assert r.returncode == 1
    assert_untouched(inst, home, before, r, "mlxr-fetcher: SHA-256 does not match the signed SHA256SUMS")


def test_refuses_a_release_missing_a_file(rel, feed, pki, inst, home, tmp_path):
    env = env_for(feed, pki, home)
    before = snapshot(inst)
    feed.omit = {"mlxr-worker"}  # not in the feed
    r = upgrade(inst, env)
    assert r.returncode == 1
    assert_untouched(inst, home, before, r, "lists no mlxr-worker")
    feed.omit, feed.missing = set(), {"mlxr"}  # in the feed, but 404
    r = upgrade(inst, env)
    assert r.returncode == 1
    assert_untouched(inst, home, before, r, "downloading mlxr")
    feed.missing = {"SHA256SUMS.sig"}
    r = upgrade(inst, env)
    assert r.returncode == 1
    assert_untouched(inst, home, before, r, "SHA256SUMS.sig")
    # signed sums that do not list a binary
    d = make_release(rel, tmp_path / "r", files={f: (rel["dist"] / f).read_bytes() for f in FILES[:2]})
    feed.dir, feed.missing = d, set()
    r = upgrade(inst, env)
    assert r.returncode == 1
    assert_untouched(inst, home, before, r, "does not list mlxr-fetcher")


def test_refuses_a_truncated_download(rel, feed, pki, inst, home):
    before = snapshot(inst)
    feed.truncate = {"mlxr": 1000}
    r = upgrade(inst, env_for(feed, pki, home))
    assert r.returncode == 1
    assert_untouched(inst, home, before, r, "downloading mlxr")
    # a feed that announces a shorter size than the file cannot cut it short either
    feed.truncate, feed.sizes = {}, {"mlxr-worker": 4096}
    r = upgrade(inst, env_for(feed, pki, home))
    assert r.returncode == 1
    assert_untouched(inst, home, before, r, "downloading mlxr-worker")


def test_refuses_an_older_version(rel, feed, pki, inst, home, tmp_path):
    feed.dir = make_release(rel, tmp_path / "r", version="0.9.9")
    feed.tag = "v0.9.9"
    before = snapshot(inst)
    r = upgrade(inst, env_for(feed, pki, home))
    assert r.returncode == 1
    assert_untouched(inst, home, before, r, "0.9.9 is not newer than the running version 1.0.0")


def test_equal_version_is_up_to_date(rel, feed, pki, inst, home, tmp_path):
    feed.dir = make_release(rel, tmp_path / "r", version=OLD)
    before = snapshot(inst)
    r = upgrade(inst, env_for(feed, pki, home))
    assert r.returncode == 0
    assert_untouched(inst, home, before, r, f"mlxr {OLD} is up to date")
    r = upgrade(inst, dict(os.environ, MLXR_HOME=str(home)), "--from-dir", feed.dir)
    assert r.returncode == 1
    assert_untouched(inst, home, before, r, "is not newer than the running version")


def test_a_feed_lying_about_the_version_is_refused(rel, feed, pki, inst, home, tmp_path):
    feed.dir = make_release(rel, tmp_path / "r", version="0.5.0")
    feed.tag = "v9.9.9"
    before = snapshot(inst)
    r = upgrade(inst, env_for(feed, pki, home))
    assert r.returncode == 1
    assert_untouched(inst, home, before, r, "the feed says v9.9.9 but the signed release is 0.5.0",
                     "0.5.0 is not newer")


def test_refuses_an_expired_signature(rel, feed, pki, inst, home, tmp_path):
    feed.dir = make_release(rel, tmp_path / "r", expires=int(time.time()) - 60)
    before = snapshot(inst)
    r = upgrade(inst, env_for(feed, pki, home))
    assert r.returncode == 1
    assert_untouched(inst, home, before, r, "expired")
    r = upgrade(inst, env_for(feed, pki, home), "--check")
    assert r.returncode == 1 and "expired" in r.stderr


def test_refuses_another_platform(rel, feed, pki, inst, home, tmp_path):
    feed.dir = make_release(rel, tmp_path / "r", platform="linux-riscv64")
    before = snapshot(inst)
    r = upgrade(inst, env_for(feed, pki, home))
    assert r.returncode == 1
    assert_untouched(inst, home, before, r, "is for platform linux-riscv64")


def test_no_rollback_to_an_older_signed_release(rel, feed, pki, inst, home, tmp_path):
    env = env_for(feed, pki, home)
    feed.dir = make_release(rel, tmp_path / "r102", version="1.0.2")
    r = upgrade(inst, env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1.0.2" in (home / "upgrade" / "accepted").read_text()
    # someone puts the 1.0.0 binaries back; a genuinely signed 1.0.1 is
    # newer than what runs, but older than what this installation accepted
    for f in FILES:
        shutil.copy2(rel["base"] / f, inst / f)
        (inst / f"{f}.prev").unlink()
    feed.dir = rel["dist"]
    before = snapshot(inst)
    r = upgrade(inst, env)
    assert r.returncode == 1
    assert_untouched(inst, home, before, r, "older than 1.0.2", "rollback refused")
    # the floor holds across keys: the backup key cannot bring 1.0.1 back
    feed.dir = make_release(rel, tmp_path / "b101", key="bkey")
    r = upgrade(inst, env)
    assert r.returncode == 1
    assert_untouched(inst, home, before, r, "rollback refused")


def test_a_corrupt_state_file_is_not_reset(rel, feed, pki, inst, home):
    (home / "upgrade").mkdir(parents=True)
    (home / "upgrade" / "accepted").write_text("garbage\n")
    before = snapshot(inst)
    r = upgrade(inst, env_for(feed, pki, home))
    assert r.returncode == 1
    assert_untouched(inst, home, before, r, "refusing to guess")


def test_a_feed_that_is_not_a_release_is_refused(rel, feed, pki, inst, home):
    before = snapshot(inst)
    for raw, why in [(b"<html>", "not JSON"), (b"{}", "tag_name"),
                     (json.dumps({"tag_name": "v1", "assets": [{"name": "SHA256SUMS", "size": 1,
                                                               "browser_download_url": "http://x/y"}]}).encode(),
                      "not an https URL")]:
        feed.raw = raw
        r = upgrade(inst, env_for(feed, pki, home))
        assert r.returncode == 1
        assert_untouched(inst, home, before, r, why)


# ---------------------------------------------------------------- kill -9
STOP_POINTS = list(range(1, 18))  # rs_hook numbers in release/install.c
COMMIT_POINT = 6                  # the journal exists from here on


def run_until_stop(inst, home, src, n):
    env = dict(os.environ, MLXR_HOME=str(home), MLXR_UPGRADE_STOP_AT=str(n))
    p = subprocess.Popen([str(inst / "mlxr"), "upgrade", "--from-dir", str(src)], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stderr.readline()
    assert f"upgrade-hook: stopped at {n}" in line, line + p.stderr.read()
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert p.returncode == -signal.SIGKILL


@pytest.mark.parametrize("n", STOP_POINTS)
def test_kill_9_during_replacement_leaves_old_or_new(rel, inst, home, n):
    old = snapshot(inst)
    new = {f: sha(rel["dist"] / f) for f in FILES}
    run_until_stop(inst, home, rel["dist"], n)
    if n < COMMIT_POINT:
        assert snapshot(inst) == old, "before the commit point nothing installed changed"
    # the next start of mlxr (whichever mlxr is in place) finishes the job
    v = version(inst, dict(os.environ, MLXR_HOME=str(home)))
    after = snapshot(inst)
    if n < COMMIT_POINT:
        assert after == old and v == f"mlxr {OLD}"
    else:
        assert after == new and v == f"mlxr {NEW}", f"mixed installation after recovery: {after}"
    assert not (inst / ".mlxr-upgrade.journal").exists()
    # and an upgrade still works (or reports up to date) afterwards
    r = upgrade(inst, dict(os.environ, MLXR_HOME=str(home)), "--from-dir", rel["dist"])
    if n < COMMIT_POINT:
        assert r.returncode == 0, r.stdout + r.stderr
    assert snapshot(inst) == new
    assert sorted(p.name for p in inst.iterdir()) == sorted([*FILES, *(f + ".prev" for f in FILES)])


def test_kill_9_then_tampered_temporary_rolls_back(rel, inst, home):
    """A half-done swap whose remaining new file was altered on disk (no
    crash does that) is rolled back to the complete old set, not finished."""
    old = snapshot(inst)
    run_until_stop(inst, home, rel["dist"], 9)  # mlxr-worker swapped, two to go
    tmp = inst / ".mlxr-fetcher.upgrade-new"
    tmp.write_bytes(tmp.read_bytes() + b"x")
    r = sh(inst / "mlxr", "--version", env=dict(os.environ, MLXR_HOME=str(home)))
    assert "rolled back" in r.stderr
    assert snapshot(inst) == old
    assert not (inst / ".mlxr-upgrade.journal").exists()


def test_kill_9_during_download_leaves_installation_untouched(rel, feed, pki, inst, home):
    """kill -9 while the fetcher downloads; the next run cleans staging."""
    env = env_for(feed, pki, home)
    before = snapshot(inst)
    feed.truncate = {}
    p = subprocess.Popen([str(inst / "mlxr"), "upgrade"], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    line = p.stderr.readline()  # "downloading mlxr-worker ..." once the sums verified
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert "downloading" in line, line
    assert snapshot(inst) == before
    r = upgrade(inst, env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert version(inst) == f"mlxr {NEW}"
    assert not (home / "upgrade" / "staging").exists()
