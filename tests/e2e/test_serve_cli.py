"""nmt-serve as a real uvicorn process on a port the OS picks (``serve.port=0``; the server's
log line names it): the page in headless Chromium (a sentence typed in through
``#text=...&go=1``, the heatmap's cells, a hovered weight, the word links), one log line per
batch, a 5 MB body answered with 413 (not a reset connection), and SIGTERM with a request in
flight: the request completes, the exit status is 0."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from conftest import REPO_ROOT

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
    with urllib.request.urlopen(url + "/health", timeout=60) as reply:
        return json.loads(reply.read())


class Server:
    """``nmt-serve`` on the tiny checkpoint and port 0: ``url`` from its log line ``nmt-serve:
    listening on URL`` (connections wait in its backlog until it is ready), ``log`` its
    stderr lines so far."""

    def __init__(self, *overrides: str, checkpoint=CKPT) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "nmt.cli.serve", f"checkpoint={checkpoint}", "serve.port=0",
             "max_len_a=0", "max_len_b=8", "device=cpu", *overrides],
            cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"})
        self.log: list[str] = []
        for line in self.proc.stderr:
            self.log.append(line)
            if found := re.search(r"nmt-serve: listening on (http://\S+)/", line):
                self.url = found.group(1)
                break
        else:
            pytest.fail(f"nmt-serve did not start: {''.join(self.log)[-3000:]}")
        self._reader = threading.Thread(target=lambda: self.log.extend(self.proc.stderr))
        self._reader.start()

    def wait(self) -> str:
        """The exit status's wait, then the whole log."""
        self.proc.wait(timeout=60)
        self._reader.join(timeout=60)
        return "".join(self.log)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.wait()


@pytest.fixture(scope="module")
def server():
    started = Server()
    yield started
    started.kill()


def test_page_translates_a_typed_sentence_and_draws_its_heatmap_in_chromium(server):
    from test_viewer import _chromium

    url = server.url
    status, body = _post(url, {"text": [SENTENCE], "beam_size": 5, "alignment": True})
    view = body["translations"][0]["view"]   # what the page will fetch and draw
    cross = view["kinds"]["cross"]
    raw = np.frombuffer(base64.b64decode(cross["data"]), "<u2")
    weights = (raw / 65535).reshape(cross["shape"])
    rows, cols = cross["shape"][2:]
    hash_ = urllib.parse.urlencode({"text": SENTENCE, "go": 1, "cell": "1,2"},
                                   quote_via=urllib.parse.quote)
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


def _page_dom(url: str, fragment: dict, profile: str) -> str:
    """The page's DOM after headless Chromium opened ``url/#fragment`` and ran its script."""
    from test_viewer import _chromium

    hash_ = urllib.parse.urlencode(fragment, quote_via=urllib.parse.quote)
    proc = subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={REPO_ROOT / '.pytest_cache' / profile}",
         "--virtual-time-budget=20000", "--dump-dom", f"{url}/#{hash_}"],
        capture_output=True, timeout=120, check=False)
    return proc.stdout.decode("utf-8") or proc.stderr.decode("utf-8", "replace")[-2000:]


def test_page_chooses_the_target_language_of_a_multilingual_model(tmp_path_factory):
    """A de-en + en-fr model: the page offers en and fr (#to=fr chooses French), the request
    carries tgt_lang (the French translation is drawn, the tag <2fr> its first source label:
    English would read <2en>)."""
    from test_multilingual_eval import train_tiny_multilingual

    ckpt = train_tiny_multilingual(tmp_path_factory.mktemp("serve_multi"))
    multi = Server(checkpoint=ckpt)
    try:
        status, body = _post(multi.url, {"text": [SENTENCE], "alignment": True, "tgt_lang": "fr"})
        assert status == 200
        view = body["translations"][0]["view"]
        assert view["src"][0] == "<2fr>"
        dom = _page_dom(multi.url, {"text": SENTENCE, "go": 1, "to": "fr"}, "chromium-serve-multi")
        state = re.search(r'id="status" data-state="(\w+)">([^<]*)<', dom)
        assert state and state.group(1) == "ok", state.group(2) if state else dom
        assert '<label id="to">' in dom   # shown: two target languages
        assert ('<select id="tgt"><option value="en">en</option>'
                '<option value="fr">fr</option>') in dom
        assert f'id="output">{view["translation"]}<' in dom
        assert 'id="col0">&lt;2fr&gt;<' in dom      # the tag is the first source label
        assert dom.count('class="cell') == len(view["kinds"]["cross"]["rows"]) * len(view["src"])
    finally:
        multi.kill()


def test_a_body_of_5_mb_gets_413_not_a_reset_connection(server):
    """urllib sends the whole body before it reads the answer: refused from its Content-Length
    without reading it, the body met a closed connection (ConnectionResetError)."""
    request = urllib.request.Request(server.url + "/v1/translate", b"x" * 5_000_000,
                                     {"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=60)
    assert refused.value.code == 413
    assert "serve.max_body_bytes" in json.loads(refused.value.read())["error"]
    assert _health(server.url)["status"] == "ok"


def test_sigterm_finishes_the_request_in_flight_and_exits_0():
    """The request waits in a 10 s batch window (nothing else comes), so it is surely in
    flight when the signal comes; the signal closes the window."""
    server = Server("serve.max_wait_ms=10000")
    try:
        with ThreadPoolExecutor(1) as pool:
            reply = pool.submit(_post, server.url, {"text": [SENTENCE, "Zwei Mädchen ."],
                                                     "beam_size": 2})
            while _health(server.url)["queued"] == 0:
                assert not reply.done(), reply.result()
                threading.Event().wait(0.01)
            server.proc.send_signal(signal.SIGTERM)
            status, body = reply.result(timeout=60)
        log = server.wait()
    finally:
        server.kill()
    assert status == 200 and len(body["translations"]) == 2
    assert server.proc.returncode == 0, log[-3000:]
    batches = re.findall(r"INFO batch: (\d+) requests, (\d+) sentences, work \d+, "
                         r"wait [\d.]+ ms, decode [\d.]+ ms", log)
    assert batches == [("1", "2")], log[-3000:]
