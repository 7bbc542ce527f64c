"""The sandbox, proven from inside the real, locked-down children.

Each binary has a hidden `--self-test` entry (policy/selftest.c) that applies
its role's real policy exactly as start-up does, then attempts each forbidden
thing and prints one JSON line per attempt. Attempts that must kill the
process (seccomp: SIGSYS) run one process each (`--only NAME`); the
pytest process is the "broker" they try to ptrace and signal. `--layers`
runs everything but seccomp, proving the layers under it on their own
(empty root, empty network namespace, Landlock). From outside, a held
worker's /proc/<pid>/status shows the filter, no_new_privs, uid and
namespace. Env: MLXR = path to build/mlxr (siblings are found next to it).
"""
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

WORKER_KILLERS = ["connect", "bind", "execve", "ptrace parent", "kill parent",
                  "mmap PROT_EXEC", "mprotect PROT_EXEC", "fork"]
FETCHER_KILLERS = ["bind", "execve", "ptrace parent", "kill parent", "fork"]


@pytest.fixture(scope="module")
def bins(mlxr):
    d = Path(mlxr).resolve().parent
    w, f = d / "mlxr-worker", d / "mlxr-fetcher"
    for b in (w, f):
        if not os.access(b, os.X_OK):
            pytest.fail(f"{b} not built (run `make`)")
    return {"worker": str(w), "importer": str(w), "fetcher": str(f)}


@pytest.fixture
def model(tmp_path):
    """A model directory with one file, opened read-only as the broker does."""
    d = tmp_path / "models" / "org" / "m"
    d.mkdir(parents=True)
    p = d / "model.safetensors"
    p.write_bytes(b"MLXRTEST" + bytes(8184))
    fd = os.open(p, os.O_RDONLY)
    yield d, fd
    os.close(fd)


@pytest.fixture
def listener():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(4)
    s.setblocking(False)
    yield s
    s.close()


def landlock_abi():
    """The running kernel's Landlock ABI (0: none), as the children see it:
    landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    v = libc.syscall(ctypes.c_long(444), None, ctypes.c_size_t(0), ctypes.c_uint(1))
    return max(v, 0)


def role_args(role):
    return ["--role", "importer"] if role == "importer" else []


def parse(out):
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def run(bins, role, args, fds=(), env=None, timeout=30):
    cmd = [bins[role], "--self-test"] + role_args(role) + args
    return subprocess.run(cmd, pass_fds=fds, capture_output=True, text=True,
                          env=env, timeout=timeout)


def check_lines(p, must_have):
    lines = parse(p.stdout)
    assert lines, f"no output (status {p.returncode}): {p.stderr}"
    assert "error" not in lines[0], lines[0]
    attempts = {line["attempt"]: line for line in lines if "attempt" in line}
    bad = [line for line in attempts.values() if not line["ok"]]
    assert not bad, "attempts with an unexpected result:\n" + "\n".join(map(str, bad))
    for name in must_have:
        assert name in attempts, f"attempt {name!r} missing: {sorted(attempts)}"
        assert attempts[name]["result"] != "skipped", attempts[name]
    assert p.returncode == 0, p.stdout + p.stderr
    return attempts, lines


def no_connection(listener):
    try:
        conn, _ = listener.accept()
    except BlockingIOError:
        return True
    conn.close()
    return False


# ---- worker and importer: soft failures and what must still work ----

@pytest.mark.parametrize("role", ["worker", "importer"])
def test_worker_attempts_fail_and_serving_still_works(bins, role, model, listener, tmp_path):
    mdir, mfd = model
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    socket.send_fds(a, [b"x"], [mfd])  # received after lockdown, like a real request
    out = tmp_path / "out.bin"
    wfd = os.open(out, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        args = ["--fd", str(mfd), "--path", str(mdir), "--sock", str(b.fileno()),
                "--port", str(listener.getsockname()[1])]
        if role == "importer":
            args += ["--wfd", str(wfd)]
        p = run(bins, role, args, fds=(mfd, b.fileno(), wfd))
        must = ["open /etc/passwd", "open /proc/self/mem", f"open {mdir}",
                "stat /etc/passwd", "create /tmp file",
                f"write model fd {mfd}", f"mprotect model mapping writable {mfd}",
                f"mmap model fd shared writable {mfd}",
                f"read model fd {mfd}", f"mmap model fd read-only {mfd}",
                "thread create and join", "sysconf nprocs", "getrandom",
                "receive fd on socket, map, reply"]
        if role == "importer":
            must.append("write through received fd")
        attempts, lines = check_lines(p, must)
        assert attempts["open /etc/passwd"]["result"] == "EACCES"
        assert attempts[f"write model fd {mfd}"]["result"] == "EBADF"
        assert attempts[f"mprotect model mapping writable {mfd}"]["result"] == "EACCES"
        assert a.recv(64) == b"MLXRTEST"  # the worker mapped the fd and replied
        assert lines[-1] == {"killers": WORKER_KILLERS}
        if role == "importer":
            assert out.read_bytes() == b"mlxr"
    finally:
        os.close(wfd)
        a.close()
        b.close()


@pytest.mark.parametrize("role", ["worker", "importer"])
@pytest.mark.parametrize("attempt", WORKER_KILLERS)
def test_worker_forbidden_attempt_is_killed(bins, role, attempt, listener):
    p = run(bins, role, ["--only", attempt, "--port", str(listener.getsockname()[1])])
    lines = parse(p.stdout)
    assert lines and lines[0].get("result") == "attempting", p.stdout + p.stderr
    assert len(lines) == 1, f"{attempt} returned instead of killing: {lines[1:]}"
    assert p.returncode == -signal.SIGSYS, (p.returncode, p.stderr)
    assert no_connection(listener)
    assert os.getpid()  # the "broker" (this process) is alive and untraced


@pytest.mark.parametrize("role", ["worker", "importer"])
def test_worker_layers_under_seccomp(bins, role, model, listener):
    """Without seccomp, the empty root, network namespace and Landlock alone
    still refuse files, sockets, exec and signals to the parent."""
    mdir, mfd = model
    port = str(listener.getsockname()[1])
    p = run(bins, role, ["--layers", "--fd", str(mfd), "--path", str(mdir), "--port", port],
            fds=(mfd,))
    attempts, _ = check_lines(p, ["open /etc/passwd", f"open {mdir}"])
    assert attempts["open /etc/passwd"]["result"] == "ENOENT"  # empty root
    for k in ["connect", "bind", "execve", "ptrace parent", "kill parent"]:
        q = run(bins, role, ["--layers", "--only", k, "--port", port])
        assert q.returncode == 0, q.stdout + q.stderr
        (line,) = parse(q.stdout)
        assert line["ok"], line
        assert line["result"] in ("EACCES", "EPERM", "ENOENT"), line
    assert no_connection(listener)


# ---- fetcher ----

@pytest.fixture
def fetcher_env(tmp_path):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    key = home / ".ssh" / "id_ed25519"
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    store = tmp_path / "mlxr-home"
    (store / "models" / "org" / "m").mkdir(parents=True)
    (store / "models" / "org" / "m" / "config.json").write_text("{}")
    env = dict(os.environ, HOME=str(home), MLXR_HOME=str(store))
    return env, key, store


def test_fetcher_attempts(bins, model, listener, fetcher_env, tmp_path):
    env, key, store = fetcher_env
    _, mfd = model
    staging = tmp_path / "staging.part"
    wfd = os.open(staging, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        args = ["--fd", str(mfd), "--wfd", str(wfd), "--path", str(key),
                "--path", str(key.parent), "--path", str(store / "models/org/m/config.json"),
                "--path", str(store), "--port", str(listener.getsockname()[1])]
        p = run(bins, "fetcher", args, fds=(mfd, wfd), env=env)
        must = ["open /etc/passwd", f"open {key}", f"open {key.parent}",
                f"open {store}", "create /tmp file", "connect 127.0.0.1 listener",
                "socket AF_UNIX", "mmap PROT_EXEC", "write through received fd",
                "read CA bundle", "resolve localhost", "UDP socket (DNS)",
                "connect 127.0.0.1:443 (allowed port)"]
        attempts, lines = check_lines(p, must)
        for name in (f"open {key}", f"open {store}", "connect 127.0.0.1 listener"):
            assert attempts[name]["result"] == "EACCES", attempts[name]
        assert staging.read_bytes() == b"mlxr"
        assert lines[-1] == {"killers": FETCHER_KILLERS}
        assert no_connection(listener)
    finally:
        os.close(wfd)


@pytest.mark.parametrize("attempt", FETCHER_KILLERS)
def test_fetcher_forbidden_attempt_is_killed(bins, attempt):
    p = run(bins, "fetcher", ["--only", attempt])
    lines = parse(p.stdout)
    assert len(lines) == 1 and lines[0]["result"] == "attempting", p.stdout + p.stderr
    assert p.returncode == -signal.SIGSYS, (p.returncode, p.stderr)


def test_fetcher_layers_under_seccomp(bins, listener, fetcher_env):
    env, key, _ = fetcher_env
    port = str(listener.getsockname()[1])
    p = run(bins, "fetcher", ["--layers", "--path", str(key), "--port", port], env=env)
    attempts, _ = check_lines(p, [f"open {key}", "connect 127.0.0.1 listener"])
    assert attempts["connect 127.0.0.1 listener"]["result"] == "EACCES"  # Landlock net
    q = run(bins, "fetcher", ["--layers", "--only", "bind"])
    (line,) = parse(q.stdout)
    assert line["result"] == "EACCES", line  # Landlock: no TCP bind
    assert no_connection(listener)


# ---- from outside ----

def status_of(pid):
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        k, _, v = line.partition(":")
        fields[k] = v.strip()
    return fields


def hold(bins, role):
    p = subprocess.Popen([bins[role], "--self-test", "--hold"] + role_args(role),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = json.loads(p.stdout.readline())
    assert line.get("ready") == p.pid, line
    return p


@pytest.mark.parametrize("role", ["worker", "importer", "fetcher"])
def test_proc_status_of_locked_down_child(bins, role):
    p = hold(bins, role)
    try:
        st = status_of(p.pid)
        assert st["Seccomp"] == "2"
        assert st["NoNewPrivs"] == "1"
        assert st["CapEff"] == "0000000000000000"
        uids = st["Uid"].split()
        if os.geteuid() == 0:
            assert uids == ["65534"] * 4, st["Uid"]
            assert st["Groups"] == ""
        else:
            assert uids == [str(os.geteuid())] * 4
        mine = os.readlink("/proc/self/ns/net")
        theirs = os.readlink(f"/proc/{p.pid}/ns/net")
        if role == "fetcher":
            assert theirs == mine  # by policy: the fetcher is the one with network
        else:
            assert theirs != mine
        for ns in ("mnt", "ipc", "user"):
            assert os.readlink(f"/proc/{p.pid}/ns/{ns}") != os.readlink(f"/proc/self/ns/{ns}"), ns
    finally:
        p.stdin.close()
        assert p.wait(timeout=10) == 0


def test_child_dies_with_its_parent(bins):
    """PR_SET_PDEATHSIG: a worker whose broker dies is killed."""
    r, w = os.pipe()
    # the worker's own report goes to /dev/null: on the shared pipe it could
    # land inside the pid line (seen in CI: '12411{"ready":12411}')
    code = ("import subprocess,sys; p=subprocess.Popen([sys.argv[1],'--self-test','--hold'],"
            "stdin=int(sys.argv[2]),stdout=subprocess.DEVNULL,pass_fds=(int(sys.argv[2]),));"
            " print(p.pid, flush=True); p.wait()")
    mid = subprocess.Popen([sys.executable, "-c", code, bins["worker"], str(r)],
                           stdout=subprocess.PIPE, text=True, pass_fds=(r,))
    os.close(r)
    try:
        pid = int(mid.stdout.readline())
        deadline = time.time() + 10
        while status_of(pid).get("Seccomp") != "2" and time.time() < deadline:
            time.sleep(0.05)
        mid.kill()
        mid.wait()
        while time.time() < deadline:
            try:
                if status_of(pid)["State"].startswith("Z"):
                    break
            except FileNotFoundError:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the worker outlived its parent")
    finally:
        os.close(w)


# ---- doctor and --no-sandbox ----

def test_doctor_reports_every_layer_per_role(mlxr):
    p = subprocess.run([mlxr, "doctor"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = {}
    for line in p.stdout.splitlines():
        parts = line.split(None, 3)
        if len(parts) >= 3 and parts[0] in ("worker", "importer", "fetcher"):
            rows[(parts[0], parts[1])] = parts[2]
    layers = ["userns", "netns", "mountns", "ipcns", "pidns", "uid", "pdeathsig", "nnp",
              "rlimits", "landlock-fs", "landlock-net", "landlock-scope", "seccomp"]
    for role in ("worker", "importer", "fetcher"):
        for layer in layers:
            assert (role, layer) in rows, f"doctor lacks {role} {layer}:\n{p.stdout}"
        for layer in ("seccomp", "nnp", "uid", "pdeathsig", "rlimits"):
            assert rows[(role, layer)] == "on", (role, layer, p.stdout)
    assert rows[("worker", "netns")] == "on"
    assert rows[("fetcher", "netns")] == "off"
    abi = landlock_abi()
    for role in ("worker", "importer", "fetcher"):
        assert rows[(role, "landlock-fs")] == ("on" if abi >= 1 else "off"), p.stdout
        assert rows[(role, "landlock-net")] == ("on" if abi >= 4 else "off"), p.stdout
        assert rows[(role, "landlock-scope")] == ("on" if abi >= 6 else "off"), p.stdout


def test_no_sandbox_warns_and_applies_nothing(bins):
    p = subprocess.run([bins["worker"], "--probe", "--no-sandbox"], capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 0
    assert "WARNING" in p.stderr and "--no-sandbox" in p.stderr
    assert " on " not in p.stdout
    assert "seccomp" in p.stdout


# ---- older kernels and unprivileged starts ----

def probe_rows(p):
    rows = {}
    for line in p.stdout.splitlines():
        parts = line.split(None, 3)
        if len(parts) >= 3:
            rows[parts[1]] = parts[2]
    return rows


@pytest.mark.parametrize("abi", [1, 2, 3, 4, 5, 6])
def test_older_landlock_abi_keeps_what_it_has(bins, abi, fetcher_env):
    """As on a kernel that stops at ABI N: the kernel accepts our ruleset
    (newer rights stripped), the report says which Landlock layers are off,
    and the files stay closed."""
    if landlock_abi() < abi:
        pytest.fail(f"this kernel's Landlock ABI is {landlock_abi()} < {abi}: "
                    "the fallback cannot be exercised here")
    for role in ("worker", "fetcher"):
        p = subprocess.run([bins[role], "--probe", "--landlock-abi", str(abi)],
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, p.stdout + p.stderr
        rows = probe_rows(p)
        assert rows["landlock-fs"] == "on"
        assert rows["landlock-net"] == ("on" if abi >= 4 else "off")
        assert rows["landlock-scope"] == ("on" if abi >= 6 else "off")
        assert rows["seccomp"] == "on"
    env, key, store = fetcher_env
    p = run(bins, "fetcher", ["--layers", "--landlock-abi", str(abi), "--path", str(key),
                              "--path", str(store), "--only", "open"], env=env)
    lines = parse(p.stdout)
    assert [line["result"] for line in lines] == ["EACCES", "EACCES"], p.stdout + p.stderr


def test_unprivileged_start_uses_a_user_namespace(bins, tmp_path):
    if os.geteuid() != 0:
        pytest.fail("run as root: the test starts the child as uid 1000")
    d = Path(bins["worker"]).parent
    if not all(os.access(x, os.X_OK, effective_ids=False) for x in (d, bins["worker"])):
        pytest.fail(f"{d} must be reachable by uid 1000")
    kw = dict(user=1000, group=1000, extra_groups=[], capture_output=True, text=True,
              timeout=30, cwd="/")
    p = subprocess.run([bins["worker"], "--probe"], **kw)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = probe_rows(p)
    for layer in ("userns", "netns", "mountns", "ipcns", "seccomp", "landlock-fs"):
        assert rows[layer] == "on", (layer, p.stdout)
    q = subprocess.run([bins["worker"], "--self-test"], **kw)
    attempts, _ = check_lines(q, ["open /etc/passwd", "thread create and join"])
    k = subprocess.run([bins["worker"], "--self-test", "--only", "fork"], **kw)
    assert k.returncode == -signal.SIGSYS
