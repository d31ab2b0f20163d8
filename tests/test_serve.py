"""nmt-serve's app (nmt/extras/tools/serve.py, nmt/cli/serve.py) through FastAPI's test client: the
API, dynamic batching (grouping, budget, the batch leader's turns, each request its own
sentences), load shedding (503 with Retry-After, 413 over the work bound), every bad input,
an out-of-memory batch, the API key and CORS. The worker is held with events, never timed. A
real uvicorn process and the page in Chromium: tests/e2e/test_serve_cli.py."""

from __future__ import annotations

import base64
import dataclasses
import hmac
import json
import logging
import math
import re
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from conftest import REPO_ROOT
from omegaconf import OmegaConf

import nmt
from nmt.config import SEARCH_MINIMUM, ConfigError, compose_config
from nmt.inference.translator import Translation

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from nmt.cli.serve import _check  # noqa: E402
from nmt.extras.tools import batcher as batching  # noqa: E402
from nmt.extras.tools import serve  # noqa: E402

CKPT = REPO_ROOT / "tests" / "data" / "tiny_transformer_2026-11-22.pt"
SHORT = ["max_len_a=0", "max_len_b=6"]     # the tiny model's outputs stay short


@pytest.fixture(scope="module")
def tiny() -> nmt.Translator:
    return nmt.Translator.from_checkpoint(CKPT)


class Recording:
    """The tiny translator, recording each ``translate`` call (sentences, settings); ``fail``
    is raised by the next call; with ``echo`` each translation is its source sentence; with
    ``hold`` the first call sets ``held`` and waits until ``hold`` is set."""

    def __init__(self, inner, echo: bool = False, hold: threading.Event | None = None):
        self.inner, self.echo, self.calls, self.fail = inner, echo, [], None
        self.hold, self.held = hold, threading.Event()

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def translate(self, sentences, **settings):
        self.calls.append((list(sentences), settings))
        if self.hold is not None and not self.held.is_set():
            self.held.set()
            assert self.hold.wait(30)
        if self.fail is not None:
            err, self.fail = self.fail, None
            raise err
        results = self.inner.translate(sentences, **settings)
        for sentence, result in zip(sentences, results, strict=True):
            result.text = sentence if self.echo else result.text
        return results


@pytest.fixture(scope="module")
def base():
    """The nmt-serve config of the tiny checkpoint (composed once: Hydra takes ~0.3 s)."""
    return compose_config([f"checkpoint={CKPT}", *SHORT], config_name="serve", validate_fn=_check)


def config(base, *overrides: str):
    """``base`` with ``key=value`` overrides, checked as nmt-serve checks its config."""
    return _check(OmegaConf.merge(base, OmegaConf.from_dotlist(list(overrides))))


def client(translator, base, *overrides: str) -> TestClient:
    return TestClient(serve.create_app(translator, config(base, *overrides)))


def wait_queued(c: TestClient, sentences: int) -> None:
    """Until the server's batcher holds ``sentences`` not yet answered (no time assumed)."""
    while c.app.state.batcher.queued < sentences:
        threading.Event().wait(0.001)


def test_translate_returns_translations_n_best_attention_and_links(tiny, base):
    with client(tiny, base) as c:
        reply = c.post("/v1/translate", json={"text": ["Ein Hund läuft .", ""], "beam_size": 3,
                                              "n_best": 2, "alignment": True})
        plain = c.post("/v1/translate", json={"text": ["Ein Hund läuft ."]}).json()
    assert reply.status_code == 200
    assert set(plain["translations"][0]) == {"translation", "score", "tokens", "n_best"}
    got = reply.json()["translations"]
    want = tiny.translate(["Ein Hund läuft .", ""], beam_size=3, n_best=2, max_len_a=0,
                          max_len_b=6, return_attention=True)
    for item, result in zip(got, want, strict=True):
        assert item["translation"] == result.text and item["tokens"] == result.tokens
        assert item["score"] == pytest.approx(result.score)
        assert [h["translation"] for h in item["n_best"]] == [h.text for h in result.hypotheses]
        assert item["src_tokens"] == result.src_tokens
        np.testing.assert_allclose(item["alignment"], result.alignment, atol=5e-5)
        view = item["view"]
        assert view["translation"] == result.text and view["links"] == item["links"]
        cross = view["kinds"]["cross"]   # every layer and head, as the viewer decodes it
        raw = np.frombuffer(base64.b64decode(cross["data"]), dtype="<u2") / 65535
        np.testing.assert_allclose(raw.reshape(cross["shape"]), result.attention["cross"],
                                   atol=1e-5)
        assert set(view["kinds"]) == {"cross", "decoder", "encoder"}
    assert got[1]["translation"] == "" and got[1]["links"] == "" and got[1]["alignment"] == [[1.0]]


def test_links_and_marks_of_a_hand_made_alignment():
    # source words "Ein" "Hund" (2 subwords: "▁Hu" "nd"), target words "A" "dog"
    alignment = np.array([[0.9, 0.05, 0.03, 0.02],     # ▁A  -> ▁Ein
                          [0.1, 0.2, 0.6, 0.1],        # ▁dog -> nd (word 1)
                          [0.2, 0.2, 0.2, 0.4]], np.float32)   # </s>
    result = Translation("A dog", ["▁A", "▁dog", "</s>"], ["▁Ein", "▁Hu", "nd", "</s>"], [5, 6],
                         -1.5, alignment)
    result.hypotheses = [dataclasses.replace(result)]   # the n-best list: a copy, no cycle
    out = serve.translation_json(result, alignment=True)
    assert out["links"] == "0-0 1-1" and out["view"]["marks"] == [[0, 0], [1, 1], [1, 2]]
    assert out["alignment"][1] == [0.1, 0.2, 0.6, 0.1]
    assert list(out["view"]["kinds"]) == ["alignment"]   # no attention: the matrix alone
    assert set(serve.translation_json(result, alignment=False)) == {"translation", "score",
                                                                   "tokens", "n_best"}


class Clock:
    """A clock that moves only when a test moves it (the batcher's ``clock``)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _run_batcher(jobs, max_wait_ms: float, fail_on: str | None = None, max_queue: int = 100):
    """Decode calls of a Batcher (work: 1 per sentence, budget 5) that receives ``jobs``
    (sentences, key) while it decodes a first job; and each job's outcome (Overloaded: the
    exception, at submission)."""
    gate, started, calls = threading.Event(), threading.Event(), []

    def decode(sentences, key):
        calls.append(sentences)
        started.set()
        assert gate.wait(10)
        if fail_on in sentences:
            raise ValueError(f"cannot translate {fail_on}")
        return [s.upper() for s in sentences]

    batcher = batching.Batcher(decode, max_batch_work=5, max_wait_ms=max_wait_ms,
                               max_queue_sentences=max_queue, clock=Clock())
    futures = [batcher.submit(["a"] * 5, "k0", 5)]   # fills the budget: decoded at once
    assert started.wait(10)
    for sentences, key in jobs:
        try:
            futures.append(batcher.submit(sentences, key, len(sentences)))
        except batching.Overloaded as err:
            futures.append(err)
    gate.set()
    batcher.close()   # answers everything, then the thread ends
    assert batcher.queued == 0
    outcomes = [f if isinstance(f, Exception) else f.exception() or f.result() for f in futures]
    return calls, outcomes


def test_request_work_is_beam_times_steps_times_positions_read():
    # S (with EOS) 3 and 1 -> T = floor(1.5 * 3 + 10) + 1 = 15 and floor(1.5 + 10) + 1 = 12
    assert serve.request_work([[7, 8], []], beam_size=3, max_len_a=1.5, max_len_b=10) == \
        3 * (15 * (3 + 15) + 12 * (1 + 12))
    assert serve.request_work([[7] * 9], beam_size=1, max_len_a=0.0, max_len_b=0) == 1 * (10 + 1)


def test_window_stays_open_while_requests_keep_coming_for_at_most_one_decode():
    """Opened at 1.0 s (the worker free); max_wait 0.3 s; the previous decode took 1 s."""
    every_150ms = [1.0 + 0.15 * i for i in range(10)]
    assert batching.window_end(1.0, every_150ms, 0.3, 1.0) == pytest.approx(2.0)   # the 1 s cap
    assert batching.window_end(1.0, [0.2, 1.1, 1.5], 0.3, 1.0) == pytest.approx(1.4)   # a 0.4 s gap
    assert batching.window_end(1.0, [], 0.3, 0.3) == pytest.approx(1.3)


def _jobs(*spec):
    """Jobs of (name, key, work), arriving 1 s apart in this order."""
    return [batching._Job([name], key, work, float(t)) for t, (name, key, work) in enumerate(spec)]


def test_the_oldest_leads_a_batch_unless_a_short_request_may():
    waiting = _jobs(("big", "k", 6), ("mid", "k", 3), ("one", "k2", 1), ("two", "k", 2),
                    ("mid2", "k", 3))

    def names(picked):
        return [j.sentences[0] for j in picked[0]], picked[1]

    # the oldest leads, then its settings' requests oldest first while they fit: mid2 would
    # make 14 > 11 (so the batch is full)
    assert names(batching.pick_batch(waiting, False, 11)) == (["big", "mid", "two"], True)
    # "one" (1 x 4 <= 6) is short: it leads, with the short requests of its settings (none)
    assert names(batching.pick_batch(waiting, True, 11)) == (["one"], False)
    # "two" (2 x 4 > 6) is not short; "tiny" is: with 15 > 11 waiting it takes those of work
    # <= 4, least work first; when everything fits, everything
    assert names(batching.pick_batch(waiting[:2] + waiting[3:], True, 11)) == \
        (["big", "mid", "two"], True)
    tiny = _jobs(*[(j.sentences[0], j.key, j.work) for j in waiting if j.key == "k"],
                 ("tiny", "k", 1))
    assert names(batching.pick_batch(tiny, True, 11)) == (["tiny", "two", "mid", "mid2"], True)
    assert names(batching.pick_batch(tiny, True, 20)) == \
        (["tiny", "two", "mid", "mid2", "big"], False)
    assert names(batching.pick_batch(waiting, False, 0)) == (["big"], True)   # batching off


def test_batcher_groups_by_settings_up_to_the_work_budget_and_answers_in_order():
    jobs = [(["b1", "b2"], "k1"), (["c1"], "k2"), (["d1", "d2"], "k1"), (["e1", "e2"], "k1")]
    calls, outcomes = _run_batcher(jobs, max_wait_ms=10_000)
    assert calls[1:] == [["b1", "b2", "d1", "d2"], ["c1"], ["e1", "e2"]]   # none is short
    assert outcomes[1:] == [["B1", "B2"], ["C1"], ["D1", "D2"], ["E1", "E2"]]
    calls, _ = _run_batcher(jobs, max_wait_ms=0)   # no dynamic batching: a request per batch
    assert calls[1:] == [["b1", "b2"], ["c1"], ["d1", "d2"], ["e1", "e2"]]
    # an error in a batch of several requests: each alone, only the bad one fails
    calls, outcomes = _run_batcher([(["ok"], "k1"), (["bad"], "k1")], 10_000, fail_on="bad")
    assert calls[1:] == [["ok", "bad"], ["ok"], ["bad"]]
    assert outcomes[1] == ["OK"] and isinstance(outcomes[2], ValueError)


def test_a_one_word_request_overtakes_the_queue_and_the_oldest_is_not_starved():
    """Eight 5-sentence requests wait, then a one-word one (budget 5: one request per batch).
    First in, first out would answer it ninth; it is answered second."""
    jobs = [([f"r{i}"] * 5, "k") for i in range(8)] + [(["word"], "k")]
    calls, outcomes = _run_batcher(jobs, max_wait_ms=10_000)
    assert calls[1] == ["word"] and outcomes[-1] == ["WORD"]
    assert [c[0] for c in calls[2:]] == [f"r{i}" for i in range(8)]
    more = [(["x"], "k") for _ in range(4)]   # short requests keep coming: every other batch
    calls, _ = _run_batcher([(["r0"] * 4, "k"), (["r1"] * 4, "k"), *more], max_wait_ms=0)
    assert [c[0] for c in calls[1:]] == ["x", "r0", "x", "r1", "x", "x"]


def test_the_queue_is_bounded_and_a_request_over_it_is_refused_at_once():
    """12 places: 5 queued leave 7, room for 3 sentences (and 2 more); 4 left are too few for
    another 3 but take 1."""
    jobs = [(["b"] * 3, "k"), (["c"] * 3, "k"), (["d"], "k")]
    calls, outcomes = _run_batcher(jobs, max_wait_ms=0, max_queue=12)
    assert isinstance(outcomes[2], batching.Overloaded) and outcomes[2].retry_after == 1
    assert "serve.max_queue_sentences" in str(outcomes[2]) and outcomes[3] == ["D"]
    assert calls[1:] == [["b"] * 3, ["d"]]   # the refused request was never queued


def test_retry_after_comes_from_the_work_decoded_not_the_cancelled_requests():
    """Each decode takes 1 s of the test's clock. A cancelled request of work 100 and one of
    work 30 share a batch: the rate is 30 per second, so work 140 queued behind a held request
    waits 5 s (counting the cancelled work would give 130 per second and 2 s)."""
    clock, gates, started = Clock(), {"h1": threading.Event(), "h2": threading.Event()}, []

    def decode(sentences, key):
        clock.now += 1.0
        started.append(sentences[0])
        if sentences[0] in gates:
            assert gates[sentences[0]].wait(10)
        return sentences

    batcher = batching.Batcher(decode, max_batch_work=130, max_wait_ms=10_000,
                               max_queue_sentences=4, clock=clock)
    batcher.submit(["h1"], "k", 130)   # a full batch: decoded at once, held
    while started != ["h1"]:
        threading.Event().wait(0.001)
    gone = batcher.submit(["gone"], "k", 100)
    assert gone.cancel()
    kept = batcher.submit(["kept"], "k", 30)   # with "gone" a full batch (not a short one)
    gates["h1"].set()
    assert kept.result(10) == ["kept"] and started == ["h1", "kept"]
    batcher.submit(["h2"], "k", 130)
    while started[-1] != "h2":
        threading.Event().wait(0.001)
    batcher.submit(["x"], "k", 10)
    with pytest.raises(batching.Overloaded) as busy:   # 2 queued + 2 x 2 - 1 > 4
        batcher.submit(["y", "z"], "k", 2)
    assert busy.value.retry_after == math.ceil((130 + 10) / 30) == 5
    gates["h2"].set()
    batcher.close()


def test_stop_turns_new_requests_away_and_closes_the_window():
    """The clock never moves, so only ``stop`` can close the 10 s window of the request."""
    decoded = []
    batcher = batching.Batcher(lambda s, key: decoded.append(s) or s, 100, 10_000, 10, Clock())
    future = batcher.submit(["waits"], "k", 1)
    batcher.stop()
    with pytest.raises(batching.Overloaded, match="shutting down"):
        batcher.submit(["late"], "k", 1)
    assert future.result(10) == ["waits"] and decoded == [["waits"]]
    batcher.close()


def test_concurrent_interleaved_requests_get_exactly_their_own_sentences(tiny, base):
    hold = threading.Event()
    echo = Recording(tiny, echo=True, hold=hold)
    requests = [{"text": [f"r{i} s{j} b{1 + i % 2}" for j in range(1 + i % 3)],
                 "beam_size": 1 + i % 2} for i in range(12)]
    with client(echo, base) as c, ThreadPoolExecutor(12) as pool:
        replies = pool.map(lambda body: c.post("/v1/translate", json=body), requests)
        wait_queued(c, sum(len(b["text"]) for b in requests))   # the worker holds the first
        hold.set()
        replies = list(replies)
    for body, reply in zip(requests, replies, strict=True):
        assert reply.status_code == 200
        assert [t["translation"] for t in reply.json()["translations"]] == body["text"]
    for sentences, settings in echo.calls:   # one search setting per batch
        assert {s.split()[-1] for s in sentences} == {f"b{settings['beam_size']}"}
    assert sum(len(s) for s, _ in echo.calls) == sum(len(b["text"]) for b in requests)
    assert len(echo.calls) <= 3   # the held batch, then one per search setting


def test_over_the_queue_503_with_retry_after_at_once_and_over_the_work_bound_413(tiny, base):
    hold = threading.Event()
    held = Recording(tiny, hold=hold)
    work = {beam: serve.request_work(tiny.tokenizer.encode_src_batch(text), beam, 0, 6)
            for beam, text in ((5, ["Ein Hund .", "Ja ."]), (16, ["a"]))}
    assert work[5] < work[16]
    with client(held, base, "serve.max_queue_sentences=3", "serve.max_sentences=2",
                f"serve.max_request_work={work[16] - 1}") as c, ThreadPoolExecutor(1) as pool:
        first = pool.submit(c.post, "/v1/translate", json={"text": ["Ein Hund .", "Ja ."]})
        assert held.held.wait(30)
        busy = c.post("/v1/translate", json={"text": ["Hallo .", "Ja ."]})   # while held
        assert busy.status_code == 503 and int(busy.headers["retry-after"]) >= 1
        assert "serve.max_queue_sentences" in busy.json()["error"]
        # over the work bound: refused before the queue is asked
        big = c.post("/v1/translate", json={"text": ["a"], "beam_size": 16})
        assert big.status_code == 413 and "serve.max_request_work" in big.json()["error"]
        assert c.get("/health").json() == {"status": "ok", "queued": 2}
        hold.set()
        assert first.result(30).status_code == 200
        assert c.post("/v1/translate", json={"text": ["Hallo ."]}).status_code == 200
    assert [s for s, _ in held.calls] == [["Ein Hund .", "Ja ."], ["Hallo ."]]


@pytest.fixture(scope="module")
def limited(tiny, base):
    """One server with small limits for all the bad inputs."""
    with client(tiny, base, "serve.max_sentences=3", "serve.max_chars=40",
                "serve.max_body_bytes=500", "serve.max_beam_size=4", "beam_size=2") as c:
        yield c


@pytest.mark.parametrize(("body", "status", "words"), [   # words: ours, not pydantic's
    (b'{"text": ["a"', 400, "malformed JSON"),
    (b'{"text": "Ein Hund ."}', 422, "text: "),
    (b'{"text": [1]}', 422, "text.0: "),
    (b'{"text": ["a"], "beam_size": "2"}', 422, "beam_size: "),
    (b'{"text": ["a"], "alignment": "yes"}', 422, "alignment: "),
    (b'{"text": ["a"], "length_penalty": NaN}', 422, "length_penalty: "),
    (b'{"text": ["a"], "length_penalty": -0.5}', 422, "length_penalty: "),
    (b'{"text": ["a"], "tgt_lang": "de"}', 422, "tgt_lang: Input should be 'en'"),
    (b'{"text": ["a"], "beam": 2}', 422, "beam: "),
    (b'{"text": []}', 422, "text: "),
    (b'{"text": ["a", "b", "c", "d"]}', 422, "text: "),
    (b'{"text": ["' + b"x" * 41 + b'"]}', 422, "text.0: "),
    (b'{"text": ["a"], "beam_size": 5}', 422, "beam_size: "),
    (b'{"text": ["a"], "beam_size": 2, "n_best": 3}', 422, "n_best=3 must be <= beam_size=2"),
    (b'{"text": ["\\ud800"]}', 422, "text.0: "),  # lone surrogate
    ('{"text": ["Straße"]}'.encode("latin-1"), 400, "not valid UTF-8 (byte 15)"),
    (b'{"text": ["' + b"a " * 300 + b'"]}', 413, "at most 500 (serve.max_body_bytes)"),
    (b"", 422, "body: "),
    (b"[]", 422, "body: "),
])
def test_every_bad_input_is_a_one_line_json_4xx_and_the_server_goes_on(limited, body, status,
                                                                       words):
    reply = limited.post("/v1/translate", content=body,
                         headers={"Content-Type": "application/json"})
    assert reply.status_code == status and "\n" not in reply.text, reply.text
    error = reply.json()["error"]
    assert list(reply.json()) == ["error"], reply.json()
    assert error.startswith(words) if words.endswith(": ") else words in error, error
    assert "Traceback" not in reply.text and 'File "' not in reply.text
    assert limited.post("/v1/translate", json={"text": ["Ein Hund ."]}).status_code == 200


def test_a_streamed_body_over_the_limit_is_refused_before_the_app(limited):
    reply = limited.post("/v1/translate", content=iter([b'{"text": ["', b"a" * 600, b'"]}']),
                         headers={"Content-Type": "application/json"})   # chunked: no length
    assert reply.status_code == 413 and "more than 500 bytes" in reply.json()["error"]
    assert limited.get("/nowhere").json() == {"error": "Not Found"}


@pytest.mark.parametrize("error", [torch.cuda.OutOfMemoryError("CUDA out of memory."),
                                   MemoryError()])
def test_out_of_memory_fails_that_batch_only_with_503(tiny, base, error):
    failing = Recording(tiny)
    with client(failing, base) as c:
        failing.fail = error
        reply = c.post("/v1/translate", json={"text": ["Ein Hund ."]})
        assert reply.status_code == 503 and "out of memory" in reply.json()["error"]
        assert c.post("/v1/translate", json={"text": ["Ein Hund ."]}).status_code == 200
        failing.fail = RuntimeError("a bug")
        assert c.post("/v1/translate", json={"text": ["a"]}).json() == {
            "error": "internal error (RuntimeError); see the server log."}


def test_api_key_is_a_bearer_token_compared_in_constant_time(tiny, base, monkeypatch):
    compared, constant_time = [], hmac.compare_digest

    def compare_digest(a, b):
        compared.append((a, b))
        return constant_time(a, b)

    monkeypatch.setattr(serve.hmac, "compare_digest", compare_digest)
    with client(tiny, base, "serve.api_key=s3cret-key") as c:
        body = {"text": ["Ein Hund ."]}
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret-key"}):
            reply = c.post("/v1/translate", json=body, headers=headers)
            assert reply.status_code == 401 and reply.headers["www-authenticate"] == "Bearer"
            assert "API key" in reply.json()["error"]
        assert c.get("/v1/model").status_code == 401
        auth = {"Authorization": "Bearer s3cret-key"}
        assert c.post("/v1/translate", json=body, headers=auth).status_code == 200
        assert c.get("/v1/model", headers=auth).status_code == 200
        assert c.get("/").status_code == 200
        assert c.get("/health").json() == {"status": "ok"}   # the queue only with the key
        assert c.get("/health", headers=auth).json() == {"status": "ok", "queued": 0}
        schema = c.get("/openapi.json").json()
    assert (b"wrong", b"s3cret-key") in compared and (b"s3cret-key", b"s3cret-key") in compared
    assert schema["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    translate = schema["paths"]["/v1/translate"]["post"]
    assert translate["security"] == schema["paths"]["/v1/model"]["get"]["security"] == \
        [{"HTTPBearer": []}]
    assert schema["paths"]["/health"]["get"]["security"] == [{"HTTPBearer": []}, {}]   # optional
    assert {"400", "401", "413", "422", "503"} <= set(translate["responses"])
    assert "Retry-After" in translate["responses"]["503"]["headers"]
    error = translate["responses"]["413"]["content"]["application/json"]["schema"]["$ref"]
    assert schema["components"]["schemas"][error.rsplit("/", 1)[-1]]["required"] == ["error"]


@pytest.mark.parametrize(("overrides", "error"), [
    (["serve.host=0.0.0.0"], "serve.host=0.0.0.0 is reachable from other machines"),
    (["serve.host=192.168.1.5", "serve.api_key=short"], "shorter than 8 characters"),
    (["serve.max_wait_ms=-1"], "serve.max_wait_ms=-1.0 must lie in [0, 10000]"),
    (["serve.max_sentences=0"], "serve.max_sentences=0 must be > 0"),
    (["serve.max_request_work=0"], "serve.max_request_work=0 must be > 0"),
    (["beam_size=20"], "beam_size=20 (the default of a request) must be <= serve.max_beam_size=16"),
    (["serve.host=0.0.0.0", "serve.api_key=long-enough"], None),
    (["serve.host=10.0.0.1", "serve.allow_unauthenticated=true"], None),
    (["serve.host=localhost"], None), (["serve.host=127.0.0.2"], None), (["serve.host=::1"], None),
])
def test_binding_beyond_loopback_needs_an_api_key_and_limits_are_checked(base, overrides, error):
    if error is None:
        assert config(base, *overrides).serve.host == overrides[0].split("=", 1)[1]
    else:
        with pytest.raises(ConfigError, match=re.escape(error)):
            config(base, *overrides)


def test_create_app_refuses_a_queue_without_room_for_the_largest_request(tiny, base):
    """64 sentences need room for 127: a queue of 126 would answer them 503 for ever."""
    assert config(base, "serve.max_queue_sentences=126").serve.max_queue_sentences == 126
    with pytest.raises(ConfigError, match=re.escape("serve.max_queue_sentences=126 must be >= 2 "
                                                    "x serve.max_sentences - 1 = 127")):
        serve.create_app(tiny, config(base, "serve.max_queue_sentences=126"))
    assert serve.create_app(tiny, config(base, "serve.max_queue_sentences=127")).title


def test_the_request_schema_and_the_library_share_the_search_rules(tiny, base):
    """Bounds from nmt.config.SEARCH_MINIMUM; a NaN length penalty is refused by both."""
    with client(tiny, base) as c:
        schema = c.get("/openapi.json").json()
        nan = c.post("/v1/translate", content=b'{"text": ["a"], "length_penalty": NaN}',
                     headers={"Content-Type": "application/json"})
    request = schema["components"]["schemas"]["TranslateRequest"]["properties"]
    assert {k: request[k]["minimum"] for k in ("beam_size", "n_best", "length_penalty")} == \
        {"beam_size": 1, "n_best": 1, "length_penalty": 0.0} == \
        {k: SEARCH_MINIMUM[k] for k in ("beam_size", "n_best", "length_penalty")}
    assert nan.status_code == 422 and nan.json()["error"].startswith("length_penalty: ")
    for bad, bound in ((math.nan, "a finite number >= 0"), (-0.5, ">= 0")):
        with pytest.raises(ConfigError) as err:
            tiny.translate("Ein Hund .", length_penalty=bad)
        assert str(err.value) == f"length_penalty={bad} must be {bound}."


def test_cors_is_off_unless_origins_are_given(tiny, base):
    origin = {"Origin": "https://a.example"}
    with client(tiny, base) as c:
        assert "access-control-allow-origin" not in c.get("/health", headers=origin).headers
    with client(tiny, base, "serve.cors_origins=[https://a.example]") as c:
        assert c.get("/health", headers=origin).headers["access-control-allow-origin"] == \
            "https://a.example"
        assert "access-control-allow-origin" not in c.get(
            "/health", headers={"Origin": "https://b.example"}).headers


def test_model_health_page_and_openapi(tiny, base, tmp_path):
    """/v1/model names no file, whatever lies beside the checkpoint (nmt-evaluate's scores.json
    holds paths); without an API key the schema declares no security."""
    ckpt = tmp_path / "best.pt"
    shutil.copy(CKPT, ckpt)
    scores = {"bleu": 12.5, "checkpoint": str(ckpt), "model_dir": str(tmp_path)}
    (tmp_path / "scores.json").write_text(json.dumps(scores), encoding="utf-8")
    with client(tiny, base, "serve.max_sentences=7", f"checkpoint={ckpt}") as c:
        reply = c.get("/v1/model")
        info = reply.json()
        assert str(tmp_path) not in reply.text and "scores" not in info
        assert (info["src_lang"], info["tgt_lang"]) == ("de", "en")
        assert info["parameters"] == sum(p.numel() for p in tiny.model.parameters())
        assert info["model"]["d_model"] == 32 and info["attention"] == "all"
        assert info["tokenizer"]["src_vocab_size"] == tiny.tokenizer.src_vocab_size
        assert "model" not in info["tokenizer"] and "/" not in json.dumps(info["tokenizer"])
        assert info["limits"]["max_request_work"] == base.serve.max_request_work
        assert c.get("/health").json() == {"status": "ok", "queued": 0}
        page = c.get("/").text
        assert ('"serve":{"beam_size":5,"key":false,"tgt_lang":"en","targets":["en"]}' in page
                and '"sentences":[]' in page)
        assert (info["languages"], info["directions"]) == (["de", "en"], ["de-en"])
        assert "http://" not in page and "https://" not in page   # loads nothing from the network
        schema = c.get("/openapi.json").json()
        request = schema["paths"]["/v1/translate"]["post"]["requestBody"]["content"]
        ref = request["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
        assert schema["components"]["schemas"][ref]["properties"]["text"]["maxItems"] == 7
        assert "securitySchemes" not in schema["components"]
        assert [op for path in schema["paths"].values() for op in path.values()
                if "security" in op] == []


def test_a_ctranslate2_export_serves_the_same_greedy_translation(tiny, base, tmp_path,
                                                                 monkeypatch):
    """... and /v1/model counts its parameters on a model of meta tensors: never allocated."""
    pytest.importorskip("ctranslate2")
    from nmt.extras.tools.ctranslate2 import CTranslate2Translator, export

    built, build = [], serve.build_model
    monkeypatch.setattr(serve, "build_model", lambda *args: built.append(build(*args)) or built[-1])

    export(tiny, tmp_path / "ct2")
    engine = CTranslate2Translator.from_dir(tmp_path / "ct2")
    with client(engine, base, "engine=ctranslate2", f"model_dir={tmp_path / 'ct2'}",
                "checkpoint=null") as c:
        reply = c.post("/v1/translate", json={"text": ["Ein Hund läuft ."], "beam_size": 1,
                                              "alignment": True}).json()["translations"][0]
        info = c.get("/v1/model").json()
    assert reply["translation"] == tiny.translate("Ein Hund läuft .", beam_size=1, max_len_a=0,
                                                  max_len_b=6).text
    assert list(reply["view"]["kinds"]) == ["alignment"] and info["attention"] == "alignment"
    assert info["parameters"] == sum(p.numel() for p in tiny.model.parameters())
    assert [{p.device.type for p in m.parameters()} for m in built] == [{"meta"}]


def test_a_sentence_beyond_the_export_s_positions_gets_413_without_its_path(tiny, base, tmp_path,
                                                                           caplog):
    """An export of 8 positions takes 7 source subwords and EOS; the client learns which
    sentence, the server log where the model lies."""
    pytest.importorskip("ctranslate2")
    from nmt.extras.tools.ctranslate2 import CTranslate2Translator, export

    model_dir = export(tiny, tmp_path / "ct2", max_positions=8)
    long = "Ein großer Hund läuft im Park mit einem Ball ."
    assert len(tiny.tokenizer.encode_src_batch([long])[0]) + 1 > 8
    with client(CTranslate2Translator.from_dir(model_dir), base, "engine=ctranslate2",
                f"model_dir={model_dir}", "checkpoint=null") as c, \
            caplog.at_level(logging.WARNING, logger="nmt.serve"):
        reply = c.post("/v1/translate", json={"text": ["Ein Hund .", long]})
        assert c.post("/v1/translate", json={"text": ["Ein Hund ."]}).status_code == 200
    assert reply.status_code == 413 and reply.json() == {"error": (
        "text.1 is too long for this model, which reads and writes at most 8 subwords (EOS "
        "included) per sentence: send a shorter one.")}
    assert str(tmp_path) not in reply.text
    # one warning: the batcher leaves it (its INFO "batch:" line, logged in its own thread,
    # can reach caplog after the block under load, so only warnings are counted)
    logged = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(logged) == 1 and str(model_dir) in logged[0] and "sentence 1 has" in logged[0]


@pytest.fixture(scope="module")
def multi(tmp_path_factory) -> nmt.Translator:
    """A de-en + en-fr model (tags on the source side), trained for 6 steps (~5 s)."""
    from test_multilingual_eval import train_tiny_multilingual

    return nmt.Translator.from_checkpoint(train_tiny_multilingual(tmp_path_factory.mktemp("m")))


def test_tgt_lang_is_one_of_the_model_s_targets_in_the_schema_and_the_422(multi, base):
    with client(multi, base) as c:
        schema = c.get("/openapi.json").json()
        fr = c.post("/v1/translate", json={"text": ["Ein Hund ."], "tgt_lang": "fr",
                                           "alignment": True})
        de = c.post("/v1/translate", json={"text": ["Ein Hund ."], "tgt_lang": "de"})
    tgt_lang = schema["components"]["schemas"]["TranslateRequest"]["properties"]["tgt_lang"]
    assert (tgt_lang["enum"], tgt_lang["default"]) == (["en", "fr"], "en")
    assert fr.status_code == 200 and fr.json()["translations"][0]["src_tokens"][0] == "<2fr>"
    assert de.status_code == 422
    assert de.json() == {"error": "tgt_lang: Input should be 'en' or 'fr'"}
