"""nmt-serve as a real uvicorn process on a loopback port (one per module): the page in headless
Chromium (a sentence typed in through ``#text=...&go=1``, the heatmap's cells, a hovered
weight, the word links), one log line per batch, and SIGTERM with a request in flight: the
request completes, the exit status is 0."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from conftest import REPO_ROOT, free_port

pytestmark = pytest.mark.slow
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

CKPT = REPO_ROOT / "tests" / "data" / "tiny_transformer_2026-11-22.pt"
SENTENCE = "Ein großer Hund läuft im Park ."


def _post(url: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(url + "/v1/translate", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as reply:
        return reply.status, json.loads(reply.read())


def _health(url: str) -> dict:
    with urllib.request.urlopen(url + "/health", timeout=5) as reply:
        return json.loads(reply.read())


@pytest.fixture(scope="module")
def server():
    """``(process, url)`` of ``nmt-serve`` on the tiny checkpoint; each request waits 250 ms
    for others (``serve.max_wait_ms``), so one is surely in flight when the test signals."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "nmt.cli.serve", f"checkpoint={CKPT}", f"serve.port={port}",
         "serve.max_wait_ms=250", "max_len_a=0", "max_len_b=8", "device=cpu"],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"})
    url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 120
    while True:
        try:
            _health(url)
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"nmt-serve did not start: {proc.communicate()[1][-3000:]}")
            time.sleep(0.1)
    yield proc, url
    if proc.poll() is None:
        proc.kill()
        proc.communicate()


def test_page_translates_a_typed_sentence_and_draws_its_heatmap_in_chromium(server):
    from test_viewer import _chromium

    _, url = server
    status, body = _post(url, {"text": [SENTENCE], "beam_size": 5, "alignment": True})
    view = body["translations"][0]["view"]   # what the page will fetch and draw
    cross = view["kinds"]["cross"]
    weights = (np.frombuffer(base64.b64decode(cross["data"]), "<u2") / 65535).reshape(cross["shape"])
    rows, cols = cross["shape"][2:]
    hash_ = urllib.parse.urlencode({"text": SENTENCE, "go": 1, "cell": "1,2"}, quote_via=urllib.parse.quote)
    proc = subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={REPO_ROOT / '.pytest_cache' / 'chromium-serve'}",
         "--virtual-time-budget=20000", "--dump-dom", f"{url}/#{hash_}"],
        capture_output=True, timeout=120, check=False)
    dom = proc.stdout.decode("utf-8")
    state = re.search(r'id="status" data-state="(\w+)">([^<]*)<', dom)
    assert state and state.group(1) == "ok", state.group(2) if state else proc.stderr[-2000:]
    assert f'id="output">{view["translation"]}<' in dom
    assert dom.count('class="cell') == rows * cols and dom.count('class="cell link') == len(
        view["marks"])
    info = re.search(r'id="info">(.*?)</p>', dom).group(1)
    assert f"<b>{weights[-1].mean(0)[1, 2]:.3f}</b>" in info   # last layer, head mean
    assert view["tgt"][1] in info and view["src"][2] in info


def test_sigterm_finishes_the_request_in_flight_and_exits_0(server):
    proc, url = server
    with ThreadPoolExecutor(1) as pool:
        reply = pool.submit(_post, url, {"text": [SENTENCE, "Zwei Mädchen ."], "beam_size": 2})
        while not reply.done() and _health(url)["queued"] == 0:
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        status, body = reply.result(timeout=60)
    assert status == 200 and len(body["translations"]) == 2
    _, log = proc.communicate(timeout=60)
    assert proc.returncode == 0, log[-3000:]
    batches = re.findall(r"INFO batch: (\d+) requests, (\d+) sentences, \d+ tokens, "
                         r"wait [\d.]+ ms, decode [\d.]+ ms", log)
    assert ("1", "2") in batches and "Application shutdown complete" in log
