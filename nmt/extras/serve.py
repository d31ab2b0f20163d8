"""The HTTP translation service of ``nmt-serve``: a FastAPI app with dynamic batching.

    app = create_app(Translator.from_checkpoint("best.pt"), cfg)   # cfg: configs/serve.yaml
    uvicorn.run(app, host="127.0.0.1", port=8000)                  # what nmt/cli/serve.py does

Endpoints (the OpenAPI page ``/docs`` documents their fields):

``POST /v1/translate``  ``{"text": [...], "beam_size", "n_best", "length_penalty", "alignment"}``
                        -> ``{"translations": [...]}``, per sentence in order its
                        ``translation``, ``score``, ``tokens`` (subwords, ``</s>`` last) and
                        ``n_best``; with ``alignment`` also ``src_tokens``, ``alignment`` (the
                        model's alignment [T][S], rows ``tokens``, columns ``src_tokens``),
                        ``links`` (Pharaoh ``i-j``: source word i, target word j, 0-based, by
                        argmax over the alignment) and ``view`` (the viewer's record,
                        :func:`nmt.extras.viewer.page_data`, every layer and head where the
                        engine gives them, plus ``marks``: the heatmap cells of the links).
``GET /v1/model``       languages, model config, parameters, tokenizer, and ``scores.json``
                        if one lies beside the checkpoint (or in the export directory).
``GET /health``         ``{"status": "ok", "queued": sentences not yet answered}``.
``GET /``               the attention viewer (``viewer.html``) with a text box.

Dynamic batching: each request's sentences go on a queue; one worker thread (so the event
loop never decodes) takes the oldest request, gathers the queued ones with the same search
settings up to ``serve.max_batch_tokens`` source subwords while the window is open (from the
oldest one's arrival or the end of the previous batch, the later, while requests come less
than ``serve.max_wait_ms`` apart, for at most the previous decode's duration), decodes them
with one ``translate`` call and hands each request its own results. An out-of-memory error
(CUDA or CPU) fails that batch only (503); another error in a batch of several requests
decodes them one by one, so only the bad one fails.
Bad input is a 4xx with one line of JSON ``{"error": "..."}``; the server goes on serving.
"""

# No "from __future__ import annotations": FastAPI reads the endpoints' annotations, whose
# request model is a class local to create_app (its limits come from the config).
import asyncio
import hmac
import json
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import torch
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from omegaconf import DictConfig, OmegaConf
from pydantic import BaseModel, ConfigDict, Field, model_validator
from starlette.exceptions import HTTPException as StarletteHTTPException

from nmt.config import ConfigError, to_plain
from nmt.evaluation.alignments import Alignment
from nmt.extras.viewer import attention_page, page_data
from nmt.extras.word_alignment import ForcedAlignment, word_ids, word_link_cells, word_links
from nmt.models import build_model

log = logging.getLogger("nmt.serve")
Key = tuple  # (beam_size, n_best, length_penalty, alignment): requests batched together share it


def is_out_of_memory(err: BaseException) -> bool:
    """A CPU ``MemoryError``, torch's CUDA OOM, or an engine's "out of memory" RuntimeError."""
    return isinstance(err, MemoryError | torch.cuda.OutOfMemoryError) or (
        isinstance(err, RuntimeError) and "out of memory" in str(err).lower())


@dataclass
class _Job:
    sentences: list[str]
    key: Key
    future: Future
    arrived: float = field(default_factory=time.monotonic)
    tokens: int = 0


class Batcher:
    """Dynamic batching in one worker thread (module docstring). ``decode(sentences, key)``
    returns one result per sentence; ``count_tokens(sentences)`` their source subwords.
    ``submit`` may be called from any thread; ``close`` answers everything submitted, then
    stops the thread."""

    def __init__(self, decode: Callable[[list[str], Key], list],
                 count_tokens: Callable[[list[str]], int], max_batch_tokens: int,
                 max_wait_ms: float) -> None:
        self.decode, self.count_tokens = decode, count_tokens
        self.max_tokens, self.max_wait = max_batch_tokens, max_wait_ms / 1000.0
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._waiting: deque[_Job] = deque()   # taken from the queue, not yet decoded
        self._lock = threading.Lock()
        self.queued = 0                        # sentences submitted and not yet answered
        self._thread = threading.Thread(target=self._loop, name="nmt-serve-batcher", daemon=True)
        self._thread.start()

    def submit(self, sentences: Sequence[str], key: Key) -> Future:
        with self._lock:
            self.queued += len(sentences)
        job = _Job(list(sentences), key, Future())
        self._queue.put(job)
        return job.future

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()

    def _take(self, timeout: float | None) -> bool:
        """Move one queued job into ``_waiting`` (block up to ``timeout`` s; 0: do not wait);
        False when none came or on the closing sentinel."""
        try:
            job = self._queue.get(timeout=timeout) if timeout != 0 else self._queue.get_nowait()
        except queue.Empty:
            return False
        if job is None:
            self._closing = True
            return False
        try:
            job.tokens = self.count_tokens(job.sentences)
        except Exception as err:   # this request fails; the thread goes on
            if job.future.set_running_or_notify_cancel():
                job.future.set_exception(err)
            with self._lock:
                self.queued -= len(job.sentences)
            return True
        self._waiting.append(job)
        return True

    def _loop(self) -> None:
        self._closing, free_since, last_decode = False, 0.0, 0.0
        while self._waiting or not self._closing:
            if not self._waiting:
                self._take(None)
                continue
            first = self._waiting[0]
            # The window opens when the oldest request arrives or the worker becomes free (the
            # later) and stays open while requests keep coming less than max_wait apart, for at
            # most as long as the previous batch took to decode: concurrent clients, answered
            # together, come back over many milliseconds and share the next batch instead of
            # splitting into a small batch and a large one.
            opened = max(first.arrived, free_since)
            latest, last_arrival = opened + max(self.max_wait, last_decode), opened
            while self.max_wait > 0 and not self._closing and self.max_tokens > sum(
                    j.tokens for j in self._waiting if j.key == first.key):
                until = min(latest, last_arrival + self.max_wait)
                if not self._take(max(0.0, until - time.monotonic())):
                    break
                last_arrival = max(last_arrival, self._waiting[-1].arrived)
            batch, tokens = [], 0   # the oldest job, then same-key jobs in order while they fit
            for job in self._waiting:
                if job.key == first.key:
                    if batch and (self.max_wait == 0 or tokens + job.tokens > self.max_tokens):
                        break
                    batch.append(job)
                    tokens += job.tokens
            for job in batch:
                self._waiting.remove(job)
            start = time.monotonic()
            self._run([j for j in batch if j.future.set_running_or_notify_cancel()], tokens)
            free_since = time.monotonic()
            last_decode = free_since - start
            with self._lock:
                self.queued -= sum(len(j.sentences) for j in batch)

    def _run(self, batch: list[_Job], tokens: int) -> None:
        if not batch:
            return
        start = time.monotonic()
        try:
            results = self.decode([s for j in batch for s in j.sentences], batch[0].key)
        except Exception as err:
            if len(batch) > 1 and not is_out_of_memory(err):
                log.warning("batch of %d requests failed (%s); decoding them one by one",
                            len(batch), type(err).__name__)
                for job in batch:
                    self._run([job], job.tokens)
                return
            expected = is_out_of_memory(err) or isinstance(err, ConfigError)
            if is_out_of_memory(err) and torch.cuda.is_available():
                torch.cuda.empty_cache()
            log.log(logging.WARNING if expected else logging.ERROR, "batch failed: %s", err,
                    exc_info=not expected)
            for job in batch:
                job.future.set_exception(err)
            return
        done, offset = time.monotonic(), 0
        for job in batch:
            job.future.set_result(results[offset: offset + len(job.sentences)])
            offset += len(job.sentences)
        log.info("batch: %d requests, %d sentences, %d tokens, wait %.1f ms, decode %.1f ms",
                 len(batch), offset, tokens, (start - batch[0].arrived) * 1000,
                 (done - start) * 1000)


def pharaoh_links(result) -> set[tuple[int, int]]:
    """(source word, target word) links of a :class:`~nmt.inference.translator.Translation`:
    :func:`~nmt.extras.word_alignment.word_links` (argmax, no shift) of its alignment
    [len(tokens), len(src_tokens)]."""
    src, tgt = result.src_tokens[:-1], result.tokens[:-1]
    src_words, tgt_words = word_ids(src), word_ids(tgt)
    item = ForcedAlignment(src, tgt, src_words, tgt_words, len(set(src_words)),
                           len(set(tgt_words)), np.asarray(result.alignment)[None, None])
    return word_links(item)


def translation_json(result, alignment: bool) -> dict:
    """One sentence's part of the ``/v1/translate`` answer (module docstring)."""
    out = {"translation": result.text, "score": float(result.score), "tokens": result.tokens,
           "n_best": [{"translation": h.text, "score": float(h.score), "tokens": h.tokens}
                      for h in result.hypotheses]}
    if alignment:
        links = pharaoh_links(result)
        view = page_data([(0, Alignment(result.alignment, result.src_tokens, result.tokens,
                                        dict(result.attention or {})))])[0]
        view.update(translation=result.text, links=" ".join(f"{i}-{j}" for i, j in sorted(links)),
                    marks=[list(c) for c in sorted(word_link_cells(links, result.src_tokens,
                                                                    result.tokens))])
        out.update(src_tokens=result.src_tokens, links=view["links"], view=view,
                   alignment=np.round(np.asarray(result.alignment, dtype=np.float64), 4).tolist())
    return out


def model_info(translator, cfg: DictConfig, all_heads: bool) -> dict:
    """``GET /v1/model``: what the server translates with; files are read here, at start-up."""
    tok, train_cfg = translator.tokenizer, translator.config
    model = getattr(translator, "model", None)
    if model is None:   # CTranslate2: count the parameters of the model its config builds
        model = build_model(train_cfg.model, tok.src_vocab_size, tok.tgt_vocab_size)
    first = cfg.checkpoint[0] if OmegaConf.is_list(cfg.checkpoint) else cfg.checkpoint
    scores_file = (Path(cfg.model_dir) if cfg.engine == "ctranslate2" else
                   Path(first).parent) / "scores.json"
    try:
        scores = json.loads(scores_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        scores = None
    data = train_cfg.data
    return {"src_lang": data.src_lang, "tgt_lang": data.tgt_lang, "engine": str(cfg.engine),
            "model": to_plain(train_cfg.model),
            "parameters": sum(p.numel() for p in {id(p): p for p in model.parameters()}.values()),
            "tokenizer": {**to_plain(data.tokenizer), "src_vocab_size": tok.src_vocab_size,
                          "tgt_vocab_size": tok.tgt_vocab_size, "fingerprint": tok.fingerprint},
            "attention": "all" if all_heads else "alignment", "scores": scores,
            "defaults": {k: cfg[k] for k in ("beam_size", "n_best", "length_penalty")},
            "limits": {k: cfg.serve[k] for k in ("max_sentences", "max_chars", "max_body_bytes",
                                                  "max_beam_size")}}


def _error(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": " ".join(str(message).split())}, status, headers=headers)


class BodyGuard:
    """ASGI middleware: reads each request body up to ``limit`` bytes (413 beyond it, before
    the app sees it) and checks it is UTF-8 (400 otherwise), then replays it to ``app``."""

    def __init__(self, app, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        chunks, size, refusal = [], 0, None
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        if not declared.isdigit():
            refusal = _error(400, "Content-Length is not a number.")
        elif int(declared) > self.limit:
            refusal = _error(413, f"the request body has {int(declared)} bytes; this server "
                                  f"takes at most {self.limit} (serve.max_body_bytes).")
        while refusal is None:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.limit:
                refusal = _error(413, f"the request body has more than {self.limit} bytes "
                                      "(serve.max_body_bytes).")
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        try:
            body.decode("utf-8")
        except UnicodeDecodeError as err:
            refusal = refusal or _error(400, f"the request body is not valid UTF-8 (byte "
                                             f"{err.start}); send JSON encoded as UTF-8.")
        if refusal is not None:
            return await refusal(scope, receive, send)
        replayed = False

        async def replay():
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        return await self.app(scope, replay, send)


def probe_all_heads(translator) -> bool:
    """Whether the engine returns every layer's and head's attention (a single PyTorch model:
    yes; an ensemble or CTranslate2: only the alignment), by translating one word."""
    try:
        translator.translate(["a"], beam_size=1, n_best=1, max_len_a=0.0, max_len_b=1,
                             return_attention=True)
    except ConfigError:
        return False
    return True


def create_app(translator, cfg: DictConfig) -> FastAPI:
    """The service for ``translator`` (any :class:`~nmt.inference.translator.TranslatorBase`)
    under a validated ``nmt-serve`` config ``cfg`` (search defaults at the top, ``serve.*``);
    the batcher's thread runs from the app's start-up to its shutdown."""
    limits, search = cfg.serve, {k: cfg[k] for k in ("max_len_a", "max_len_b", "batch_sentences",
                                                      "batch_tokens")}
    all_heads = probe_all_heads(translator)
    info = model_info(translator, cfg, all_heads)

    class TranslateRequest(BaseModel):
        """Sentences and search settings (absent: the server's defaults, ``GET /v1/model``)."""

        model_config = ConfigDict(strict=True, extra="forbid")
        text: Annotated[list[Annotated[str, Field(max_length=limits.max_chars)]],
                        Field(min_length=1, max_length=limits.max_sentences)]
        beam_size: Annotated[int, Field(ge=1, le=limits.max_beam_size)] = int(cfg.beam_size)
        n_best: Annotated[int, Field(ge=1)] = int(cfg.n_best)
        length_penalty: Annotated[float, Field(ge=0, allow_inf_nan=False)] = float(cfg.length_penalty)
        alignment: bool = False

        @model_validator(mode="after")
        def _check(self):
            if self.n_best > self.beam_size:
                raise ValueError(f"n_best={self.n_best} must be <= beam_size={self.beam_size}")
            return self

    class Hypothesis(BaseModel):
        translation: str
        score: float
        tokens: list[str]

    class Sentence(Hypothesis):
        n_best: list[Hypothesis]
        src_tokens: list[str] | None = None
        alignment: list[list[float]] | None = None
        links: str | None = None
        view: dict[str, Any] | None = None

    class TranslateResponse(BaseModel):
        translations: list[Sentence]

    def decode(sentences: list[str], key: Key) -> list[str]:   # JSON made here, off the loop
        beam_size, n_best, length_penalty, alignment = key
        results = translator.translate(sentences, beam_size=beam_size, n_best=n_best,
                                       length_penalty=length_penalty, **search,
                                       return_attention=alignment and all_heads)
        return [json.dumps(translation_json(r, alignment), ensure_ascii=False, allow_nan=False)
                for r in results]

    def count_tokens(sentences: list[str]) -> int:
        return sum(len(ids) + 1 for ids in translator.tokenizer.encode_src_batch(sentences))

    batcher_box: list[Batcher] = []

    @asynccontextmanager
    async def lifespan(_app):
        batcher_box.append(Batcher(decode, count_tokens, limits.max_batch_tokens,
                                   limits.max_wait_ms))
        try:
            yield
        finally:
            await asyncio.to_thread(batcher_box.pop().close)

    async def authorized(request: Request) -> None:   # async: no thread pool hop per request
        if limits.api_key is None:
            return
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
                token.strip().encode("utf-8"), str(limits.api_key).encode("utf-8")):
            raise HTTPException(401, "missing or wrong API key: send Authorization: Bearer <key>.",
                                headers={"WWW-Authenticate": "Bearer"})

    app = FastAPI(title=f"nmt-serve: {info['src_lang']} -> {info['tgt_lang']}", lifespan=lifespan,
                  description="Neural machine translation with attention (nmt/extras/serve.py).")
    app.add_middleware(BodyGuard, limit=int(limits.max_body_bytes))
    if limits.cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(limits.cors_origins),
                           allow_methods=["GET", "POST"], allow_headers=["Authorization", "Content-Type"])

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request, err: StarletteHTTPException):
        return _error(err.status_code, err.detail, getattr(err, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def invalid(_request, err: RequestValidationError):
        first = err.errors()[0]
        if first.get("type") == "json_invalid":
            return _error(400, f"malformed JSON: {first.get('ctx', {}).get('error', first['msg'])}.")
        where = ".".join(str(p) for p in first.get("loc", ())[1:]) or "body"
        return _error(422, f"{where}: {first['msg']}")

    @app.post("/v1/translate", response_model=TranslateResponse,
              dependencies=[Depends(authorized)])
    async def translate(request: TranslateRequest):
        """Translate ``text`` (a list of sentences); see the module docstring of
        nmt/extras/serve.py for the fields of each answer."""
        key = (request.beam_size, request.n_best, request.length_penalty, request.alignment)
        try:
            results = await asyncio.wrap_future(batcher_box[0].submit(request.text, key))
        except ConfigError as err:
            return _error(422, str(err))
        except Exception as err:
            if is_out_of_memory(err):
                return _error(503, "out of memory while decoding this batch; retry, or send "
                                   "fewer or shorter sentences.")
            return _error(500, f"internal error ({type(err).__name__}); see the server log.")
        return Response('{"translations":[' + ",".join(results) + "]}",
                        media_type="application/json")

    @app.get("/v1/model", dependencies=[Depends(authorized)])
    async def model() -> dict:
        """Languages, model config, parameter count, tokenizer, scores.json, defaults, limits."""
        return info

    @app.get("/health")
    async def health() -> dict:
        """``{"status": "ok", "queued": sentences submitted and not yet answered}``."""
        return {"status": "ok", "queued": batcher_box[0].queued if batcher_box else 0}

    page = attention_page([], f"nmt-serve: {info['src_lang']} \u2192 {info['tgt_lang']}",
                          serve={"beam_size": int(cfg.beam_size), "key": limits.api_key is not None})

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def index() -> HTMLResponse:
        return HTMLResponse(page)

    return app
