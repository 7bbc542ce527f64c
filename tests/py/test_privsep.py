"""Privilege separation, proved from outside: the model runs in a separate,
locked-down mlxr-worker; each binary links only what its role needs; a
worker that breaks protocol, crashes or is killed is reported and replaced
while the broker keeps going; --sealed weights survive a file changed under
the worker, plain read-only mappings do not (and that only kills the worker).
The in-sandbox attempts (open, connect, exec, ptrace, ...) are in
test_sandbox.py."""
import os
import re
import select
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MLXR = os.environ.get("MLXR", str(ROOT / "build" / "mlxr"))
BIN = Path(MLXR).parent


@pytest.fixture(scope="module")
def smol(fixture_model):
    return Path(fixture_model("smollm2")["path"])


def children(pid):
    out = []
    for t in Path(f"/proc/{pid}/task").iterdir():
        kids = (t / "children").read_text().split()
        out += [int(k) for k in kids]
    return out


def status(pid):
    return dict(l.split(":\t", 1) for l in Path(f"/proc/{pid}/status").read_text().splitlines() if ":\t" in l)


def start_long(model, *extra, env=None):
    """A one-shot generation that runs for a while; returns (process, worker pid)."""
    p = subprocess.Popen([MLXR, "run", str(model), "--temp", "0", "--max", "3000", "--ctx", "4096", *extra,
                          "Write a very long story about a dragon and a clockmaker."],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    end = time.time() + 60
    while time.time() < end:
        kids = children(p.pid)
        if kids and "mlxr-worker" in Path(f"/proc/{kids[0]}/cmdline").read_bytes().decode(errors="replace"):
            return p, kids[0]
        time.sleep(0.05)
    p.kill()
    raise AssertionError("no worker process appeared")


def test_binaries_link_only_their_role():
    def symbols(name):
        out = subprocess.run(["nm", "--defined-only", str(BIN / name)], capture_output=True, text=True, check=True)
        return {l.split()[-1] for l in out.stdout.splitlines() if len(l.split()) == 3}
    broker, worker, fetcher = symbols("mlxr"), symbols("mlxr-worker"), symbols("mlxr-fetcher")
    kernel = {"k_table_ref", "kernels_best", "model_forward", "kpool_for"}
    http = {s for s in broker if s.startswith("http_")}
    assert http, "the broker has the HTTP server"
    assert not kernel & broker, "the broker never runs model code"
    assert kernel <= worker
    assert not {s for s in worker if s.startswith(("http_", "openai_", "serve_"))}, "no HTTP / request JSON in the worker"
    assert not kernel & fetcher and "tok_encode" not in fetcher and "gguf_parse" not in fetcher
    assert "policy_apply" in worker and "policy_apply" in fetcher
    # Untrusted model bytes the broker never parses: tokenizer.json, chat
    # templates, GGUF. `mlxr tokenize` / `chat-render` run in a worker
    # (--tool), `mlxr import` in an importer worker.
    parsers = {"tok_load", "tok_encode", "chat_config_load", "chat_render", "gguf_parse"}
    assert not parsers & broker, f"the broker links {parsers & broker}"
    assert parsers <= worker


def test_developer_verbs_run_in_a_sandboxed_worker(smol, tmp_path):
    """`mlxr tokenize` and `mlxr chat-render` hand the files to a worker
    started with --tool: it runs under the worker's sandbox (a verb that
    tried to open a file itself would fail), reads only what the broker
    opened, and its exit status is the verb's."""
    r = subprocess.run([MLXR, "tokenize", str(smol), "--ids", "Hello world"], capture_output=True, text=True)
    assert r.returncode == 0 and re.fullmatch(r"\d+( \d+)*\n", r.stdout), (r.stdout, r.stderr)
    # a FIFO in place of a file is refused by the broker before any worker starts
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    r = subprocess.run([MLXR, "tokenize", str(smol), "--file", str(fifo)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "not a regular file" in r.stderr, r.stderr
    r = subprocess.run([MLXR, "tokenize", str(smol), "--file", str(tmp_path / "absent")], capture_output=True,
                       text=True)
    assert r.returncode == 1 and "No such file" in r.stderr, r.stderr
    # usage errors come from the verb in the worker, status 2
    r = subprocess.run([MLXR, "tokenize", str(smol)], capture_output=True, text=True)
    assert r.returncode == 2 and "usage: mlxr tokenize" in r.stderr, r.stderr
    bad = tmp_path / "bad.json"
    bad.write_text('{"model": ')
    r = subprocess.run([MLXR, "tokenize", str(bad), "hi"], capture_output=True, text=True)
    assert r.returncode == 1 and "tokenizer.json: not valid JSON" in r.stderr, r.stderr
    msgs = tmp_path / "m.json"
    msgs.write_text('[{"role": "user", "content": "hi"}]')
    r = subprocess.run([MLXR, "chat-render", str(smol / "tokenizer_config.json"), str(msgs)], capture_output=True,
                       text=True)
    assert r.returncode == 0 and "hi" in r.stdout, r.stderr


def wait_streaming(p, t=60):
    """Until the answer starts: the worker has loaded the model, so it is
    past its lockdown (it starts before the broker has validated the model,
    and is still sandboxing itself in its first milliseconds)."""
    r, _, _ = select.select([p.stdout], [], [], t)
    assert r, "no output"


def test_the_model_runs_in_a_locked_down_worker(smol):
    p, w = start_long(smol)
    try:
        wait_streaming(p)
        st = status(w)
        assert st["Seccomp"].strip() == "2"
        assert st["NoNewPrivs"].strip() == "1"
        if os.geteuid() == 0:
            assert st["Uid"].split()[0] != "0", "the worker dropped root"
        assert os.readlink(f"/proc/{w}/ns/net") != os.readlink(f"/proc/{p.pid}/ns/net")
        # The worker holds no descriptor of the model directory by path other
        # than the read-only shard: every fd is a socket, memfd or a file
        # opened read-only.
        for fd in Path(f"/proc/{w}/fdinfo").iterdir():
            flags = int(re.search(r"flags:\s+(\d+)", fd.read_text()).group(1), 8)
            target = os.readlink(f"/proc/{w}/fd/{fd.name}")
            if target.endswith(".safetensors"):
                assert flags & 0o3 == os.O_RDONLY, f"{target} is open for writing"
    finally:
        p.kill()
        p.wait()


@pytest.mark.parametrize("how", ["flag", "env=1", "env=0"])
def test_fast_prefill_reaches_the_worker_which_ignores_it_on_the_cpu(smol, how):
    # --fast-prefill (or MLXR_FAST_PREFILL=1) is passed to the worker role;
    # on the CPU the worker accepts it, locks down and generates.
    extra = ["--fast-prefill"] if how == "flag" else []
    env = {**os.environ, "MLXR_FAST_PREFILL": how[4:]} if how.startswith("env") else None
    p, w = start_long(smol, "--device", "cpu", *extra, env=env)
    try:
        argv = Path(f"/proc/{w}/cmdline").read_bytes().split(b"\0")
        assert argv[1:3] == [b"--role", b"worker"], argv
        assert (b"--fast-prefill" in argv) == (how != "env=0"), argv
        wait_streaming(p)
        assert status(w)["Seccomp"].strip() == "2"
    finally:
        p.kill()
        p.wait()


def test_killed_worker_is_reported(smol):
    p, w = start_long(smol)
    time.sleep(1.0)
    os.kill(w, signal.SIGKILL)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 1
    assert "the model worker failed" in err and "killed by signal 9" in err, err


def tmux(*args):
    return subprocess.run(["tmux", *args], capture_output=True, text=True)


def test_malformed_message_ends_the_worker_not_the_broker(smol, tmp_path):
    """The worker answers the second request with a malformed packet: that
    turn fails with the reason, the third turn is served by a new worker."""
    session = f"mlxr-fault-{os.getpid()}"
    rc = tmp_path / "rc"
    cmd = f"MLXR_WORKER_FAULT_AFTER=1 {MLXR} run {smol} --temp 0 --max 20; echo EXIT=$? > {rc}"
    tmux("kill-session", "-t", session)
    tmux("new-session", "-d", "-s", session, "-x", "200", "-y", "50", cmd)
    try:
        def screen():
            return tmux("capture-pane", "-p", "-S", "-200", "-t", session).stdout

        def wait(pattern, t=60):
            end = time.time() + t
            while time.time() < end:
                s = screen()
                if re.search(pattern, s, re.S):
                    return s
                time.sleep(0.2)
            raise AssertionError(f"timeout waiting for {pattern!r}:\n{screen()}")
        wait(r"(?m)^>>>\s*$")  # tmux drops the prompt's trailing space
        tmux("send-keys", "-t", session, "Hi", "Enter")
        wait(r">>> Hi\n.+\n>>>")
        tmux("send-keys", "-t", session, "Hello again", "Enter")
        s = wait(r">>> Hello again\n.*\n>>>")
        assert "the model worker failed (ipc: header says 65535 payload bytes" in s
        tmux("send-keys", "-t", session, "What is the capital of France?", "Enter")
        s = wait(r"France\?\n.*Paris.*\n>>>")
        tmux("send-keys", "-t", session, "/bye", "Enter")
        end = time.time() + 20
        while not rc.exists() and time.time() < end:
            time.sleep(0.2)
        assert rc.read_text().strip() == "EXIT=0"
    finally:
        tmux("kill-session", "-t", session)


def truncate_during_generation(model_dir, *flags, env=None):
    p, w = start_long(model_dir, *flags, env=env)
    # Wait for the answer to start streaming, then cut the weights in half.
    os.set_blocking(p.stdout.fileno(), False)
    end = time.time() + 60
    got = ""
    while time.time() < end and len(got) < 20:
        try:
            got += p.stdout.read() or ""
        except TypeError:
            pass
        time.sleep(0.05)
    st = next(Path(model_dir).glob("*.safetensors"))
    with open(st, "r+b") as f:
        f.truncate(st.stat().st_size // 2)
    time.sleep(2.0)
    alive = p.poll() is None
    p.kill()
    out, err = p.communicate()
    return alive, p.returncode, err


def test_truncated_weights_kill_only_the_worker(smol, tmp_path):
    """By default the CPU worker's weights stay in the file mapping: a file
    cut under it kills the worker (SIGBUS), and only the worker."""
    d = tmp_path / "m"
    shutil.copytree(smol, d)
    alive, rc, err = truncate_during_generation(d)
    assert not alive and rc == 1, "the request fails"
    assert "the model worker failed" in err and "signal 7" in err, err


def test_resident_weights_survive_a_truncated_file(smol, tmp_path):
    """MLXR_WEIGHTS=copy: the CPU worker copies the weights into its own
    memory at load (st_make_resident): cutting the file afterwards changes
    nothing."""
    d = tmp_path / "m"
    shutil.copytree(smol, d)
    alive, rc, err = truncate_during_generation(d, env={**os.environ, "MLXR_WEIGHTS": "copy"})
    assert alive, f"the worker kept generating; stderr: {err}"


def thp_mode():
    try:
        return re.search(r"\[(\w+)\]", Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()).group(1)
    except (OSError, AttributeError):
        return "absent"


@pytest.mark.skipif(thp_mode() not in ("always", "madvise"), reason="transparent huge pages are off on this machine")
def test_resident_weights_are_in_huge_pages(smol):
    """MLXR_WEIGHTS=copy asks for 2 MiB pages (MADV_HUGEPAGE): the worker's
    anonymous huge pages cover at least half the weights while it
    generates; with the default file mapping there is no copy and far
    fewer."""
    weights = sum(f.stat().st_size for f in Path(smol).glob("*.safetensors"))
    huge = {}
    for mode in ("copy", "map"):
        p, w = start_long(smol, env={**os.environ, "MLXR_WEIGHTS": mode})
        try:
            end = time.time() + 60
            while time.time() < end and not p.stdout.read(1):
                time.sleep(0.05)  # the answer streams: the model is loaded
            kb = re.search(r"AnonHugePages:\s+(\d+) kB", Path(f"/proc/{w}/smaps_rollup").read_text())
            huge[mode] = int(kb.group(1)) * 1024
        finally:
            p.kill()
            p.communicate()
    assert huge["copy"] >= weights // 2, (huge, weights)
    assert huge["map"] < huge["copy"] - weights // 4, (huge, weights)


def test_sealed_weights_survive_a_truncated_file(smol, tmp_path):
    d = tmp_path / "m"
    shutil.copytree(smol, d)
    alive, rc, err = truncate_during_generation(d, "--sealed")
    assert alive, f"the sealed worker kept generating; stderr: {err}"


def test_sealed_mode_answers_the_same(smol):
    a = subprocess.run([MLXR, "run", str(smol), "--temp", "0", "--max", "30", "What is 2+2?"], capture_output=True,
                       text=True)
    b = subprocess.run([MLXR, "run", str(smol), "--temp", "0", "--max", "30", "--sealed", "What is 2+2?"],
                       capture_output=True, text=True)
    assert a.returncode == 0 and b.returncode == 0
    assert a.stdout == b.stdout and a.stdout.strip()


def run_copy(smol, tmp_path, change):
    d = tmp_path / "m"
    shutil.copytree(smol, d)
    change(d)
    return subprocess.run([MLXR, "run", str(d), "--temp", "0", "--max", "5", "hi"], capture_output=True, text=True,
                          timeout=60)


def test_a_tokenizer_or_config_that_is_not_json_is_refused(smol, tmp_path):
    """tokenizer.json is parsed only by the worker, in its sandbox (the
    broker never reads it); the small JSON files are checked by the broker
    while the worker loads. Either way the model is refused with the file's
    name and the reason, exit 1, no answer."""
    r = run_copy(smol, tmp_path, lambda d: (d / "tokenizer.json").write_text('{"model": {"vocab": {"a": 0,}}}'))
    assert r.returncode == 1 and not r.stdout
    assert "tokenizer.json: not valid JSON (offset 28: expected object key)" in r.stderr, r.stderr
    r = run_copy(smol, tmp_path / "2", lambda d: (d / "generation_config.json").write_text('{"eos_token_id": 2'))
    assert r.returncode == 1 and "generation_config.json: not valid JSON" in r.stderr, r.stderr
    r = run_copy(smol, tmp_path / "3", lambda d: (d / "tokenizer_config.json").write_text('{"chat_template": "x" "y"}'))
    assert r.returncode == 1 and not r.stdout
    assert "tokenizer_config.json: not valid JSON" in r.stderr, r.stderr


def test_the_broker_refuses_missing_and_oversized_small_files(smol, tmp_path):
    r = run_copy(smol, tmp_path, lambda d: (d / "tokenizer.json").unlink())
    assert r.returncode == 1 and "tokenizer.json: missing or unreadable" in r.stderr, r.stderr

    def dir_in_its_place(d):
        (d / "tokenizer.json").unlink()
        (d / "tokenizer.json").mkdir()
    r = run_copy(smol, tmp_path / "2", dir_in_its_place)
    assert r.returncode == 1 and "tokenizer.json: missing or unreadable" in r.stderr, r.stderr

    def big_template(d):
        with open(d / "chat_template.jinja", "wb") as f:
            f.truncate((256 << 10) + 1)  # MF_TEMPLATE_MAX + 1
    r = run_copy(smol, tmp_path / "3", big_template)
    assert r.returncode == 1 and "chat_template.jinja: larger than 256 KB" in r.stderr, r.stderr


def test_load_trace_names_every_step_of_both_processes(smol):
    """MLXR_TRACE=1 (common/trace.h): timestamps of the load steps from the
    broker and from the sandboxed worker, on one clock, in causal order."""
    r = subprocess.run([MLXR, "run", str(smol), "--temp", "0", "--max", "2", "hi"], capture_output=True, text=True,
                       env=dict(os.environ, MLXR_TRACE="1"), timeout=60)
    assert r.returncode == 0, r.stderr
    marks = [l.split(None, 2) for l in r.stderr.splitlines() if l.startswith("mlxr-trace ")]
    t = {m[2]: float(m[1]) for m in marks}
    steps = ["broker: load starts", "broker: worker forked", "worker: main", "worker: sandboxed",
             "broker: model validated, manifest sealed", "worker: LOAD received", "session: tokenizer parsed",
             "worker: session ready", "broker: READY received"]
    assert set(steps) <= set(t), sorted(t)
    for a, b in [(0, 1), (0, 2), (2, 3), (3, 5), (4, 5), (5, 6), (6, 7), (7, 8)]:
        assert t[steps[a]] <= t[steps[b]], (steps[a], steps[b], t)
    # and nothing without it
    r = subprocess.run([MLXR, "run", str(smol), "--temp", "0", "--max", "2", "hi"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and "mlxr-trace" not in r.stderr
