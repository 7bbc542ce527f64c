"""`mlxr pull` / `mlxr search` against a local HTTPS imitation of the Hub
(tests/tls/hubserver.py): offline, loopback only.

The fetcher resolves hub.test and cdn.test through MLXR_RESOLVE (a test
override read by the fetcher itself; no /etc/hosts edits), trusts only the
test CA through SSL_CERT_FILE, and may connect only to HF_ENDPOINT's port.

Run: MLXR=/path/to/mlxr python -m pytest -q tests/py/test_pull.py
"""
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tls"))
import hubserver  # noqa: E402

RESOLVE = "hub.test:127.0.0.1,cdn.test:127.0.0.1,other.test:127.0.0.1"


@pytest.fixture(scope="module")
def pki():
    if not shutil.which("openssl"):
        pytest.skip("openssl CLI not installed")
    d = tempfile.mkdtemp(prefix="mlxr-pki-")
    os.chmod(d, 0o755)
    yield hubserver.make_pki(d)
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def repo_files(fixture_model):
    return hubserver.load_repo(fixture_model("llama-q4g64-bf16")["path"])


@pytest.fixture
def hub(pki, repo_files):
    h = hubserver.Hub(pki["hub_cert"], pki["hub_key"], {"org/repo": repo_files, "org/gated": repo_files},
                      gated=["org/gated"])
    yield h
    h.close()


@pytest.fixture
def home(tmp_path):
    return tmp_path / "home"


def env_for(hub, pki, home, **extra):
    e = dict(os.environ, HF_ENDPOINT=hub.endpoint, SSL_CERT_FILE=pki["ca"], MLXR_RESOLVE=RESOLVE,
             MLXR_HOME=str(home), HOME=str(home.parent), HF_HOME=str(home.parent / "hf"))
    e.pop("HF_TOKEN", None)
    e.update(extra)
    return e


def pull(mlxr, env, *args, timeout=120):
    return subprocess.run([mlxr, "pull", *args], env=env, capture_output=True, text=True, timeout=timeout)


def installed(home, name="org/repo"):
    return (home / "models" / name).exists()


def partial(home, name="org/repo"):
    org, repo = name.split("/")
    return home / "models" / org / f".{repo}.pull"


def test_pull_then_run(mlxr, hub, pki, home, repo_files):
    r = pull(mlxr, env_for(hub, pki, home), "org/repo")
    assert r.returncode == 0, r.stderr
    d = home / "models" / "org" / "repo"
    for name, data in repo_files.items():
        assert (d / name).read_bytes() == data, name
    assert not partial(home).exists()
    # The weights came from the CDN host after a redirect.
    assert hub.requests("cdn.test", "/lfs/")
    r = subprocess.run([mlxr, "run", "org/repo", "--temp", "0", "--max", "4", "Hello"],
                       env=env_for(hub, pki, home), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_plain_progress_lines_when_not_a_terminal(mlxr, hub, pki, home):
    r = pull(mlxr, env_for(hub, pki, home), "org/repo")
    assert r.returncode == 0, r.stderr
    assert "pulling model.safetensors" in r.stderr and "model.safetensors: done" in r.stderr
    assert "\r" not in r.stderr


def test_resume_after_cut_sends_range(mlxr, hub, pki, home, repo_files):
    hub.faults["cut"] = {"model.safetensors": 1_000_000}
    r = pull(mlxr, env_for(hub, pki, home), "org/repo")
    assert r.returncode != 0
    assert "connection closed" in r.stderr and "after 1000000 of" in r.stderr, r.stderr
    assert not installed(home)
    part = partial(home) / "model.safetensors"
    assert part.stat().st_size == 1_000_000
    n_resolve = len(hub.requests("hub.test", "/resolve/") )
    r = pull(mlxr, env_for(hub, pki, home), "org/repo")
    assert r.returncode == 0, r.stderr
    lfs = hub.requests("cdn.test", "/lfs/")
    last = lfs[-1][3]
    assert last.get("range") == "bytes=1000000-"
    digest = hashlib.sha256(repo_files["model.safetensors"]).hexdigest()
    assert last.get("if-range") == f'"{digest}"'
    # The resolve URL was asked again (CDN links expire).
    assert len(hub.requests("hub.test", "/resolve/")) > n_resolve
    got = (home / "models/org/repo/model.safetensors").read_bytes()
    assert hashlib.sha256(got).hexdigest() == digest


def test_resume_200_restarts_the_file(mlxr, hub, pki, home, repo_files):
    hub.faults["cut"] = {"model.safetensors": 500_000}
    assert pull(mlxr, env_for(hub, pki, home), "org/repo").returncode != 0
    hub.faults["ignore_range"] = True
    r = pull(mlxr, env_for(hub, pki, home), "org/repo")
    assert r.returncode == 0, r.stderr
    assert (home / "models/org/repo/model.safetensors").read_bytes() == repo_files["model.safetensors"]


def test_resume_206_at_wrong_offset_refused(mlxr, hub, pki, home):
    hub.faults["cut"] = {"model.safetensors": 500_000}
    assert pull(mlxr, env_for(hub, pki, home), "org/repo").returncode != 0
    hub.faults["bad_range_start"] = True
    r = pull(mlxr, env_for(hub, pki, home), "org/repo")
    assert r.returncode != 0
    assert "partial response starts at byte 499999, the file has 500000" in r.stderr, r.stderr
    assert not installed(home)


def test_sha256_mismatch_refused(mlxr, hub, pki, home):
    hub.faults["corrupt"] = ["model.safetensors"]
    r = pull(mlxr, env_for(hub, pki, home), "org/repo")
    assert r.returncode != 0
    assert "SHA-256 mismatch" in r.stderr, r.stderr
    assert not installed(home)
    assert not (partial(home) / "model.safetensors").exists()


def test_wrong_size_refused(mlxr, hub, pki, home):
    hub.faults["truncate"] = ["model.safetensors"]
    r = pull(mlxr, env_for(hub, pki, home), "org/repo")
    assert r.returncode != 0
    assert "size is" in r.stderr and "expected" in r.stderr, r.stderr
    assert not installed(home)


def test_listed_size_is_the_authority_even_when_zero(mlxr, hub, pki, home, repo_files):
    # the Hub lists config.json as empty (its resolve URL would serve the
    # bytes): an empty file is what that listing allows, so nothing is
    # fetched for it, and the model's own validation then refuses the pull
    hub.faults["size_delta"] = {"config.json": -len(repo_files["config.json"])}
    r = pull(mlxr, env_for(hub, pki, home), "org/repo")
    assert r.returncode != 0
    assert "config.json: not valid JSON" in r.stderr, r.stderr
    assert hub.requests(host="hub.test", path_part="/tree/")  # the listing was read
    assert not [q for q in hub.requests() if q[2].split("?")[0].endswith("/resolve/%s/config.json" % hubserver.SHA)]
    assert not installed(home)


def test_unknown_ca_refused(mlxr, pki, repo_files, home):
    h = hubserver.Hub(pki["evil_cert"], pki["evil_key"], {"org/repo": repo_files})
    try:
        r = pull(mlxr, env_for(h, pki, home), "org/repo")
    finally:
        h.close()
    assert r.returncode != 0
    assert "not signed by a trusted CA" in r.stderr, r.stderr
    assert not installed(home)


def test_certificate_for_another_host_refused(mlxr, pki, repo_files, home):
    h = hubserver.Hub(pki["other_cert"], pki["other_key"], {"org/repo": repo_files})
    try:
        r = pull(mlxr, env_for(h, pki, home), "org/repo")
    finally:
        h.close()
    assert r.returncode != 0
    assert "certificate is for another host name" in r.stderr, r.stderr
    assert not installed(home)


def test_redirect_to_http_refused(mlxr, hub, pki, home):
    hub.faults["redirect_http"] = ["model.safetensors"]
    r = pull(mlxr, env_for(hub, pki, home), "org/repo")
    assert r.returncode != 0
    assert "redirect to plain http:// refused" in r.stderr, r.stderr
    assert not installed(home)


def test_redirect_loop_refused(mlxr, hub, pki, home):
    hub.faults["redirect_loop"] = ["model.safetensors"]
    r = pull(mlxr, env_for(hub, pki, home), "org/repo")
    assert r.returncode != 0
    assert "redirect loop" in r.stderr, r.stderr
    assert not installed(home)


def test_too_many_redirects_refused(mlxr, hub, pki, home):
    hub.faults["redirect_chain"] = ["model.safetensors"]
    r = pull(mlxr, env_for(hub, pki, home), "org/repo")
    assert r.returncode != 0
    assert "more than 5 redirects" in r.stderr, r.stderr
    assert not installed(home)


def test_oversized_header_refused(mlxr, hub, pki, home):
    hub.faults["huge_header"] = True
    r = pull(mlxr, env_for(hub, pki, home), "org/repo")
    assert r.returncode != 0
    assert "response header larger than" in r.stderr, r.stderr
    assert not installed(home)


def test_malformed_chunked_refused(mlxr, hub, pki, home):
    hub.faults["bad_chunked"] = ["tokenizer.json"]
    r = pull(mlxr, env_for(hub, pki, home), "org/repo")
    assert r.returncode != 0
    assert "malformed chunked body" in r.stderr, r.stderr
    assert not installed(home)


def test_chunked_body_accepted(mlxr, hub, pki, home, repo_files):
    hub.faults["chunked"] = ["tokenizer.json"]
    r = pull(mlxr, env_for(hub, pki, home), "org/repo")
    assert r.returncode == 0, r.stderr
    assert (home / "models/org/repo/tokenizer.json").read_bytes() == repo_files["tokenizer.json"]


def test_gated_repository_refused(mlxr, hub, pki, home):
    r = pull(mlxr, env_for(hub, pki, home), "org/gated")
    assert r.returncode != 0
    assert "HTTP 401" in r.stderr and "gated or private" in r.stderr and "HF_TOKEN" in r.stderr, r.stderr
    assert not installed(home, "org/gated")


def test_gated_repository_with_token(mlxr, hub, pki, home):
    r = pull(mlxr, env_for(hub, pki, home, HF_TOKEN="good-token"), "org/gated")
    assert r.returncode == 0, r.stderr


def test_token_file_is_used(mlxr, hub, pki, home):
    (home.parent / "hf").mkdir(parents=True)
    (home.parent / "hf" / "token").write_text("good-token\n")
    r = pull(mlxr, env_for(hub, pki, home), "org/gated")
    assert r.returncode == 0, r.stderr


def test_token_reaches_hub_not_redirect_target(mlxr, hub, pki, home):
    r = pull(mlxr, env_for(hub, pki, home, HF_TOKEN="good-token"), "org/repo")
    assert r.returncode == 0, r.stderr
    hub_reqs = hub.requests("hub.test")
    cdn_reqs = hub.requests("cdn.test")
    assert hub_reqs and cdn_reqs
    assert all(h[3].get("authorization") == "Bearer good-token" for h in hub_reqs)
    assert not any("authorization" in h[3] for h in cdn_reqs)


def test_unsupported_architecture_refused_before_weights(mlxr, pki, repo_files, home):
    files = dict(repo_files)
    files["config.json"] = files["config.json"].replace(b'"llama"', b'"mamba"')
    h = hubserver.Hub(pki["hub_cert"], pki["hub_key"], {"org/mamba": files})
    try:
        r = pull(mlxr, env_for(h, pki, home), "org/mamba")
        assert r.returncode != 0
        assert "cannot run it" in r.stderr and "mamba" in r.stderr and "--force" in r.stderr, r.stderr
        assert not h.requests("cdn.test")  # no weight was downloaded
        assert not installed(home, "org/mamba")
        r = pull(mlxr, env_for(h, pki, home), "org/mamba", "--force")
        assert r.returncode == 0, r.stderr
        assert h.requests("cdn.test")
    finally:
        h.close()


def test_second_pull_verifies_and_skips(mlxr, hub, pki, home):
    hub.faults["cut"] = {"model.safetensors": 100}
    assert pull(mlxr, env_for(hub, pki, home), "org/repo").returncode != 0
    r = pull(mlxr, env_for(hub, pki, home), "org/repo")
    assert r.returncode == 0
    assert "config.json: already downloaded" in r.stderr, r.stderr


def test_fetcher_cannot_read_home_or_write_outside_staging(mlxr, hub, pki):
    # World-readable planted key and world-writable target, so only the
    # sandbox (not file permissions) stands in the way.
    base = tempfile.mkdtemp(prefix="mlxr-escape-")
    try:
        os.chmod(base, 0o755)
        ssh = os.path.join(base, ".ssh")
        os.mkdir(ssh)
        os.chmod(ssh, 0o755)
        key = os.path.join(ssh, "id_ed25519")
        with open(key, "w") as f:
            f.write("-----BEGIN OPENSSH PRIVATE KEY-----\nplanted\n")
        os.chmod(key, 0o644)
        out = os.path.join(base, "out")
        os.mkdir(out)
        os.chmod(out, 0o777)
        target = os.path.join(out, "written-by-fetcher")
        home = __import__("pathlib").Path(base) / "home"
        env = env_for(hub, pki, home, HOME=base, MLXR_FETCHER_ESCAPE=f"{key}:{target}")
        r = pull(mlxr, env, "org/repo")
        assert r.returncode == 0, r.stderr
        assert f"escape probe: read {key}: " in r.stderr, r.stderr
        assert f"escape probe: read {key}: OPENED" not in r.stderr, r.stderr
        assert f"escape probe: write {target}: OPENED" not in r.stderr, r.stderr
        assert not os.path.exists(target)
        # The probe can succeed: without the sandbox it does (the test can fail).
        shutil.rmtree(str(home), ignore_errors=True)
        r = pull(mlxr, dict(env, MLXR_FETCHER_NO_SANDBOX="1"), "org/repo")
        assert f"escape probe: read {key}: OPENED" in r.stderr, r.stderr
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_search_lists_mlx_models(mlxr, hub, pki, home):
    r = subprocess.run([mlxr, "search", "repo", "--sort", "likes", "--limit", "5"], env=env_for(hub, pki, home),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("org/repo")]
    assert line, r.stdout
    assert "llama" in line[0] and "4-bit g64" in line[0] and line[0].rstrip().endswith("yes"), line[0]
    q = hub.requests("hub.test", "/api/models?")[0][2]
    assert "library=mlx" in q and "sort=likes" in q and "search=repo" in q and "limit=5" in q


def test_ctrl_c_keeps_a_resumable_partial_file(mlxr, hub, pki, home, repo_files):
    import signal
    import time
    hub.faults["stall"] = {"model.safetensors": 300_000}
    hub.faults["stall_seconds"] = 15
    p = subprocess.Popen([mlxr, "pull", "org/repo"], env=env_for(hub, pki, home), stderr=subprocess.PIPE, text=True)
    part = partial(home) / "model.safetensors"
    t0 = time.time()
    while time.time() - t0 < 30 and not (part.exists() and part.stat().st_size >= 300_000):
        time.sleep(0.05)
    assert part.exists() and part.stat().st_size == 300_000
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 130, err
    assert "run the same command to resume" in err
    assert not installed(home)
    del hub.faults["stall"]
    r = pull(mlxr, env_for(hub, pki, home), "org/repo")
    assert r.returncode == 0, r.stderr
    assert hub.requests("cdn.test", "/lfs/")[-1][3].get("range") == "bytes=300000-"
    assert (home / "models/org/repo/model.safetensors").read_bytes() == repo_files["model.safetensors"]


def test_run_with_pull_downloads_a_missing_model(mlxr, hub, pki, home):
    env = env_for(hub, pki, home)
    r = subprocess.run([mlxr, "run", "org/repo", "--temp", "0", "--max", "4", "Hello"], env=env,
                       capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert r.returncode != 0 and "--pull" in r.stderr, r.stderr
    assert not hub.requests()  # not a terminal: it did not ask and did not pull
    r = subprocess.run([mlxr, "run", "org/repo", "--pull", "--temp", "0", "--max", "4", "Hello"], env=env,
                       capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    assert installed(home)
