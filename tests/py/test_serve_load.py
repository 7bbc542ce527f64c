"""Bounded loopback load on `mlxr serve`: 16 concurrent keep-alive clients
x 20 chat requests each. Every answer is a 200 or the documented 429 of a
full queue, and the broker's resident memory is flat across the run
(measured after a warm-up round; the numbers are printed). Speed is not
asserted (DESIGN.md: no timed assertions)."""
import http.client
import json
import threading
import time

import pytest

from serve_util import Server

CLIENTS, REQUESTS = 16, 20


@pytest.fixture(scope="module")
def server(fixture_model):
    s = Server(fixture_model("smollm2")["path"])
    yield s
    s.stop()


def run_clients(port, n_req, statuses, errors):
    def client(i):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        for k in range(n_req):
            body = json.dumps({"messages": [{"role": "user", "content": f"Say a number: {i}-{k}"}],
                               "max_tokens": 8, "temperature": 0, "stream": k % 2 == 1})
            try:
                conn.request("POST", "/v1/chat/completions", body,
                             {"Content-Type": "application/json", "Authorization": "Bearer x"})
                r = conn.getresponse()
                data = r.read()
                statuses.append(r.status)
                if r.status == 200 and k % 2 == 1:
                    assert data.rstrip().endswith(b"data: [DONE]"), data[-200:]
                elif r.status == 200:
                    json.loads(data)["choices"][0]["message"]
            except Exception as e:  # noqa: BLE001 (recorded, asserted below)
                errors.append(repr(e))
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        conn.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_load_16_clients_x_20_requests(server):
    warm_s, warm_e = [], []
    run_clients(server.port, 2, warm_s, warm_e)
    assert not warm_e, warm_e
    rss0 = server.rss_kb()
    statuses, errors = [], []
    t0 = time.time()
    run_clients(server.port, REQUESTS, statuses, errors)
    dt = time.time() - t0
    rss1 = server.rss_kb()
    print(f"\nload: {len(statuses)} answers in {dt:.1f} s ({len(statuses) / dt:.1f} req/s), "
          f"200: {statuses.count(200)}, 429: {statuses.count(429)}, broker RSS {rss0} -> {rss1} kB")
    assert not errors, errors[:5]
    assert len(statuses) == CLIENTS * REQUESTS
    assert set(statuses) <= {200, 429}
    assert statuses.count(200) > 0
    # Flat: no per-request growth (320 requests; a leak of even 4 KiB each
    # would show as > 1 MiB).
    assert rss1 - rss0 < 1024, (rss0, rss1)
    assert server.proc.poll() is None
