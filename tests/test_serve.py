"""nmt-serve's app (nmt/extras/serve.py, nmt/cli/serve.py) through FastAPI's test client: the
API, dynamic batching (grouping, budget, each request its own sentences), every bad input, an
out-of-memory batch, the API-key rule and CORS. A real uvicorn process and the page in
Chromium: tests/e2e/test_serve_cli.py."""

from __future__ import annotations

import base64
import hmac
import json
import re
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from conftest import REPO_ROOT
from omegaconf import OmegaConf

import nmt
from nmt.config import ConfigError, compose_config
from nmt.inference.translator import Translation

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from nmt.cli.serve import _check  # noqa: E402
from nmt.extras import serve  # noqa: E402

CKPT = REPO_ROOT / "tests" / "data" / "tiny_transformer_2026-11-22.pt"
SHORT = ["max_len_a=0", "max_len_b=6"]     # the tiny model's outputs stay short


@pytest.fixture(scope="module")
def tiny() -> nmt.Translator:
    return nmt.Translator.from_checkpoint(CKPT)


class Recording:
    """The tiny translator, recording each ``translate`` call (sentences, settings); ``fail``
    is raised by the next call; with ``echo`` each translation is its source sentence."""

    def __init__(self, inner, echo: bool = False):
        self.inner, self.echo, self.calls, self.fail = inner, echo, [], None

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def translate(self, sentences, **settings):
        self.calls.append((list(sentences), settings))
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
    app = serve.create_app(translator, config(base, *overrides))
    if isinstance(translator, Recording):
        translator.calls.clear()   # the start-up probe of the attention
    return TestClient(app)


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
        np.testing.assert_allclose(raw.reshape(cross["shape"]), result.attention["cross"], atol=1e-5)
        assert set(view["kinds"]) == {"cross", "decoder", "encoder"}
    assert got[1]["translation"] == "" and got[1]["links"] == "" and got[1]["alignment"] == [[1.0]]


def test_links_and_marks_of_a_hand_made_alignment():
    # source words "Ein" "Hund" (2 subwords: "▁Hu" "nd"), target words "A" "dog"
    alignment = np.array([[0.9, 0.05, 0.03, 0.02],     # ▁A  -> ▁Ein
                          [0.1, 0.2, 0.6, 0.1],        # ▁dog -> nd (word 1)
                          [0.2, 0.2, 0.2, 0.4]], np.float32)   # </s>
    result = Translation("A dog", ["▁A", "▁dog", "</s>"], ["▁Ein", "▁Hu", "nd", "</s>"], [5, 6],
                         -1.5, alignment)
    result.hypotheses = [result]
    out = serve.translation_json(result, alignment=True)
    assert out["links"] == "0-0 1-1" and out["view"]["marks"] == [[0, 0], [1, 1], [1, 2]]
    assert out["alignment"][1] == [0.1, 0.2, 0.6, 0.1]
    assert list(out["view"]["kinds"]) == ["alignment"]   # no attention: the matrix alone
    assert set(serve.translation_json(result, alignment=False)) == {"translation", "score",
                                                                   "tokens", "n_best"}


def _run_batcher(jobs, max_wait_ms: float, fail_on: str | None = None):
    """Decode calls of a Batcher (count_tokens: 1 per sentence, budget 5) that receives
    ``jobs`` (sentences, key) while it decodes a first job; and each job's outcome."""
    gate, calls = threading.Event(), []

    def decode(sentences, key):
        calls.append((sentences, key))
        gate.wait(10)
        if fail_on in sentences:
            raise ValueError(f"cannot translate {fail_on}")
        return [s.upper() for s in sentences]

    batcher = serve.Batcher(decode, len, max_batch_tokens=5, max_wait_ms=max_wait_ms)
    futures = [batcher.submit(["a"] * 5, "k0")]   # fills the budget: decoded at once
    while not calls:
        threading.Event().wait(0.001)
    futures += [batcher.submit(sentences, key) for sentences, key in jobs]
    gate.set()
    batcher.close()   # answers everything, then the thread ends
    outcomes = [f.exception() or f.result() for f in futures]
    return [s for s, _ in calls], outcomes


def test_batcher_window_stays_open_while_requests_keep_coming_for_at_most_one_decode():
    """Clients answered together come back spread out: the window opens when the worker is
    free, stays open while arrivals are < max_wait apart, and closes after the previous
    decode's duration (1 s here)."""
    calls = []

    def decode(sentences, key):
        calls.append(sentences)
        time.sleep(1.0 if sentences == ["first"] else 0)
        return sentences

    batcher = serve.Batcher(decode, len, max_batch_tokens=100, max_wait_ms=300)
    batcher.submit(["first"], "k").result()
    futures = []
    for i in range(10):   # one request every 150 ms, from the moment the worker is free
        futures.append(batcher.submit([f"s{i}"], "k"))
        time.sleep(0.15)
    batcher.close()
    assert all(f.result() == [f"s{i}"] for i, f in enumerate(futures))
    window = calls[1]
    assert window[:4] == ["s0", "s1", "s2", "s3"]   # s3 came 450 ms after s0 (> max_wait)
    assert "s9" not in window                        # 1,350 ms: past the 1 s cap
    assert [s for c in calls[1:] for s in c] == [f"s{i}" for i in range(10)]


def test_batcher_groups_by_settings_up_to_the_token_budget_and_answers_in_order():
    jobs = [(["b1", "b2"], "k1"), (["c1"], "k2"), (["d1", "d2"], "k1"), (["e1", "e2"], "k1")]
    calls, outcomes = _run_batcher(jobs, max_wait_ms=10_000)
    assert calls[1:] == [["b1", "b2", "d1", "d2"], ["c1"], ["e1", "e2"]]
    assert outcomes[1:] == [["B1", "B2"], ["C1"], ["D1", "D2"], ["E1", "E2"]]
    calls, _ = _run_batcher(jobs, max_wait_ms=0)   # no dynamic batching: a request per batch
    assert calls[1:] == [["b1", "b2"], ["c1"], ["d1", "d2"], ["e1", "e2"]]
    # an error in a batch of several requests: each alone, only the bad one fails
    calls, outcomes = _run_batcher([(["ok"], "k1"), (["bad"], "k1")], 10_000, fail_on="bad")
    assert calls[1:] == [["ok", "bad"], ["ok"], ["bad"]]
    assert outcomes[1] == ["OK"] and isinstance(outcomes[2], ValueError)
    # a request whose tokens cannot be counted fails alone; the thread goes on
    batcher = serve.Batcher(lambda s, key: s, lambda s: 1 // ("boom" not in s), 5, 0)
    bad, good = batcher.submit(["boom"], "k1"), batcher.submit(["fine"], "k1")
    batcher.close()
    assert isinstance(bad.exception(), ZeroDivisionError) and good.result() == ["fine"]
    assert batcher.queued == 0


def test_concurrent_interleaved_requests_get_exactly_their_own_sentences(tiny, base):
    echo = Recording(tiny, echo=True)
    requests = [{"text": [f"r{i} s{j} b{1 + i % 2}" for j in range(1 + i % 3)],
                 "beam_size": 1 + i % 2} for i in range(12)]
    with client(echo, base, "serve.max_wait_ms=300") as c, ThreadPoolExecutor(12) as pool:
        replies = list(pool.map(lambda body: c.post("/v1/translate", json=body), requests))
    for body, reply in zip(requests, replies, strict=True):
        assert reply.status_code == 200
        assert [t["translation"] for t in reply.json()["translations"]] == body["text"]
    for sentences, settings in echo.calls:   # one search setting per batch
        assert {s.split()[-1] for s in sentences} == {f"b{settings['beam_size']}"}
    assert sum(len(s) for s, _ in echo.calls) == sum(len(b["text"]) for b in requests)
    assert len(echo.calls) < len(requests)   # requests were gathered into shared batches


@pytest.fixture(scope="module")
def limited(tiny, base):
    """One server with small limits for all the bad inputs."""
    with client(tiny, base, "serve.max_sentences=3", "serve.max_chars=40",
                "serve.max_body_bytes=500", "serve.max_beam_size=4", "beam_size=2") as c:
        yield c


@pytest.mark.parametrize(("body", "status", "words"), [
    (b'{"text": ["a"', 400, "malformed JSON"),
    (b'{"text": "Ein Hund ."}', 422, "text: Input should be a valid list"),
    (b'{"text": [1]}', 422, "text.0: Input should be a valid string"),
    (b'{"text": ["a"], "beam_size": "2"}', 422, "beam_size: Input should be a valid integer"),
    (b'{"text": ["a"], "alignment": "yes"}', 422, "alignment: Input should be a valid boolean"),
    (b'{"text": ["a"], "length_penalty": NaN}', 422, "length_penalty: Input should be a finite"),
    (b'{"text": ["a"], "beam": 2}', 422, "beam: Extra inputs are not permitted"),
    (b'{"text": []}', 422, "text: List should have at least 1 item"),
    (b'{"text": ["a", "b", "c", "d"]}', 422, "text: List should have at most 3 items"),
    (b'{"text": ["' + b"x" * 41 + b'"]}', 422, "text.0: String should have at most 40 characters"),
    (b'{"text": ["a"], "beam_size": 5}', 422, "beam_size: Input should be less than or equal to 4"),
    (b'{"text": ["a"], "beam_size": 2, "n_best": 3}', 422, "n_best=3 must be <= beam_size=2"),
    (b'{"text": ["\\ud800"]}', 422, "text.0: Input should be a valid string"),  # lone surrogate
    ('{"text": ["Straße"]}'.encode("latin-1"), 400, "not valid UTF-8 (byte 15)"),
    (b'{"text": ["' + b"a " * 300 + b'"]}', 413, "at most 500 (serve.max_body_bytes)"),
    (b"", 422, "body: Field required"),
    (b"[]", 422, "body: Input should be a valid dictionary"),
])
def test_every_bad_input_is_a_one_line_json_4xx_and_the_server_goes_on(limited, body, status,
                                                                       words):
    reply = limited.post("/v1/translate", content=body, headers={"Content-Type": "application/json"})
    assert reply.status_code == status and "\n" not in reply.text
    assert words in reply.json()["error"], reply.json()
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
        assert c.get("/health").status_code == 200 and c.get("/").status_code == 200
    assert (b"wrong", b"s3cret-key") in compared and (b"s3cret-key", b"s3cret-key") in compared


@pytest.mark.parametrize(("overrides", "error"), [
    (["serve.host=0.0.0.0"], "serve.host=0.0.0.0 is reachable from other machines"),
    (["serve.host=192.168.1.5", "serve.api_key=short"], "shorter than 8 characters"),
    (["serve.max_wait_ms=-1"], "serve.max_wait_ms=-1.0 must lie in [0, 10000]"),
    (["serve.max_sentences=0"], "serve.max_sentences=0 must be > 0"),
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
    ckpt = tmp_path / "best.pt"
    shutil.copy(CKPT, ckpt)
    (tmp_path / "scores.json").write_text(json.dumps({"bleu": 12.5}), encoding="utf-8")
    with client(tiny, base, "serve.max_sentences=7", f"checkpoint={ckpt}") as c:
        info = c.get("/v1/model").json()
        assert (info["src_lang"], info["tgt_lang"], info["scores"]) == ("de", "en", {"bleu": 12.5})
        assert info["parameters"] == sum(p.numel() for p in tiny.model.parameters())
        assert info["model"]["d_model"] == 32 and info["attention"] == "all"
        assert info["tokenizer"]["src_vocab_size"] == tiny.tokenizer.src_vocab_size
        assert c.get("/health").json() == {"status": "ok", "queued": 0}
        page = c.get("/").text
        assert '"serve":{"beam_size":5,"key":false}' in page and '"sentences":[]' in page
        assert "http://" not in page and "https://" not in page   # loads nothing from the network
        schema = c.get("/openapi.json").json()
        request = schema["paths"]["/v1/translate"]["post"]["requestBody"]["content"]
        ref = request["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
        assert schema["components"]["schemas"][ref]["properties"]["text"]["maxItems"] == 7


def test_a_ctranslate2_export_serves_the_same_greedy_translation(tiny, base, tmp_path):
    pytest.importorskip("ctranslate2")
    from nmt.extras.ctranslate2 import CTranslate2Translator, export

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
