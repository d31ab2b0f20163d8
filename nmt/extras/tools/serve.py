"""The HTTP translation service of ``nmt-serve``: a FastAPI app with dynamic batching.

    app = create_app(Translator.from_checkpoint("best.pt"), cfg)   # cfg: configs/serve.yaml
    uvicorn.run(app, host="127.0.0.1", port=8000)                  # what nmt/cli/serve.py does

Endpoints (the OpenAPI page ``/docs`` documents their fields):

``POST /v1/translate``  ``{"text": [...], "beam_size", "n_best", "length_penalty", "alignment",
                        "tgt_lang"}`` (``tgt_lang``: one of the model's target languages)
                        -> ``{"translations": [...]}``, per sentence in order its
                        ``translation``, ``score``, ``tokens`` (subwords, ``</s>`` last) and
                        ``n_best``; with ``alignment`` also ``src_tokens``, ``alignment`` (the
                        model's alignment [T][S], rows ``tokens``, columns ``src_tokens``),
                        ``links`` (Pharaoh ``i-j``: source word i, target word j, 0-based, by
                        argmax over the alignment) and ``view`` (the viewer's record,
                        :func:`nmt.extras.tools.viewer.page_data`, every layer and head where the
                        engine gives them, plus ``marks``: the heatmap cells of the links).
``GET /v1/model``       languages and ``directions``, model config, parameters, tokenizer, search
                        defaults and limits (no file paths).
``GET /health``         ``{"status": "ok"}``; with the API key (or on a server without one)
                        also ``"queued"``: sentences not yet answered. The OpenAPI schema
                        declares the bearer key where ``serve.api_key`` is set: required on
                        ``/v1/*``, optional here.
``GET /``               the attention viewer (``viewer.html``) with a text box.

Load: a request's decoding *work* bounds its beam search's cost: ``beam_size`` x the sum over
its sentences of T x (S + T), T its longest output + EOS (``max_len_a`` x S + ``max_len_b``),
S its source subwords + EOS (:func:`request_work`). Over ``serve.max_request_work`` it gets
413 at once; a sentence beyond the engine's positions (an ``nmt-export``'s ``max_positions``)
gets 413 when its batch is decoded, the model's path going to the server log only. A request
whose sentences would take the queue (sentences not yet answered) over
``serve.max_queue_sentences`` (with room for n - 1 more behind its n, so that a queue full of
large requests still takes a short one; :func:`create_app` refuses a queue too small for the
largest request) gets 503 with ``Retry-After`` (the queued work over the latest batch's rate
of decoded work, 1-60 s) at once and is never held.

Dynamic batching: one worker thread (so the event loop never decodes) decodes batches of
requests with the same search settings, at most ``serve.max_batch_work`` of work each (a
larger single request is one batch), with one ``translate`` call, and hands each request its
own results. A batch is led by the oldest waiting request and takes the requests with its
settings oldest first; but a short request, of at most a quarter of the oldest one's work,
leads the next batch unless a short one led the previous, least work first; when more work
waits with its settings than a batch holds, that batch takes only requests of at most 4 times
its work, and is decoded quickly. So a one-word request waits for the batch in progress, not
for the queue, and the oldest for at most one batch of short ones. The batch is decoded when the requests it may take fill
``max_batch_work``, or when the window closes: it opens at the oldest request's arrival or
the end of the previous batch (the later) and stays open while requests come less than
``serve.max_wait_ms`` apart, for at most the previous decode's duration. An out-of-memory error (CUDA or CPU) fails that batch only (503); another error in
a batch of several requests decodes them one by one, so only the bad one fails.
Bad input is a 4xx with one line of JSON ``{"error": "..."}``; the server goes on serving.
"""

# No "from __future__ import annotations": FastAPI reads the endpoints' annotations, whose
# request model is a class local to create_app (its limits come from the config).
import asyncio
import hmac
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import numpy as np
import torch
from fastapi import Depends, FastAPI, HTTPException
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from omegaconf import DictConfig
from pydantic import BaseModel, ConfigDict, Field, model_validator
from starlette.exceptions import HTTPException as StarletteHTTPException

from nmt.config import SEARCH_MINIMUM, ConfigError, to_plain
from nmt.evaluation.alignments import Alignment
from nmt.extras.tools import word_alignment as wa
from nmt.extras.tools.ctranslate2 import InputTooLong
from nmt.extras.tools.viewer import attention_page, page_data
from nmt.inference.search import max_output_lengths
from nmt.models import build_model

log = logging.getLogger("nmt.serve")
Key = tuple  # (beam_size, n_best, length_penalty, alignment, tgt_lang): a batch shares it


def is_out_of_memory(err: BaseException) -> bool:
    """A CPU ``MemoryError``, torch's CUDA OOM, or an engine's "out of memory" RuntimeError."""
    return isinstance(err, MemoryError | torch.cuda.OutOfMemoryError) or (
        isinstance(err, RuntimeError) and "out of memory" in str(err).lower())


class Overloaded(Exception):
    """The queue has no room for a request, or the server is stopping: 503 with
    ``Retry-After: retry_after`` (whole seconds); nothing was queued."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(eq=False)
class _Job:
    sentences: list[str]
    key: Key
    work: int
    arrived: float
    future: Future = field(default_factory=Future)


def _least_work(job: _Job) -> tuple[int, float]:
    return job.work, job.arrived


def window_end(opened: float, arrivals: Sequence[float], max_wait: float, longest: float) -> float:
    """When the batch window closes (seconds, the clock of ``opened``): it opens at ``opened``
    and stays open while requests arrive less than ``max_wait`` apart (``arrivals``, ascending;
    those before ``opened`` count as arriving then), at most until ``opened + longest``."""
    end, cap = opened + max_wait, opened + longest
    for arrived in arrivals:
        if arrived > min(end, cap):
            break
        end = max(end, arrived + max_wait)
    return min(end, cap)


SHORT = 4   # a request of at most 1/SHORT of the oldest one's work is short (pick_batch)


def pick_batch(waiting: Sequence[_Job], short_may_lead: bool, max_work: int
               ) -> tuple[list[_Job], bool]:
    """The next batch of ``waiting`` (arrival order), and whether it is full (the requests with
    its settings hold ``max_work`` or more). With ``short_may_lead``, a short request (the one
    of least work, the older of equals, if at most 1/``SHORT`` of the oldest one's work) leads,
    and the batch takes the requests with its settings least work first; if they are full,
    only those of at most ``SHORT`` x its work, so that it is decoded quickly. Otherwise the
    oldest leads and the batch takes the requests with its settings oldest first. Each while
    the batch's work stays <= ``max_work``."""
    oldest, least = waiting[0], min(waiting, key=_least_work)
    short = short_may_lead and least.work * SHORT <= oldest.work
    leader = least if short else oldest
    same = [j for j in waiting if j.key == leader.key]
    full = sum(j.work for j in same) >= max_work
    if short:
        same = sorted((j for j in same if not full or j.work <= SHORT * least.work),
                      key=_least_work)
    batch, work = [], 0
    for job in same:
        if not batch or work + job.work <= max_work:
            batch.append(job)
            work += job.work
    return batch, full


class Batcher:
    """Dynamic batching in one worker thread (module docstring). ``decode(sentences, key)``
    returns one result per sentence. ``submit`` may be called from any thread; ``stop`` turns
    new requests away and closes the window; ``close`` also waits until everything submitted
    is answered and the thread has ended. ``clock``: seconds (tests inject one)."""

    def __init__(self, decode: Callable[[list[str], Key], list], max_batch_work: int,
                 max_wait_ms: float, max_queue_sentences: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.decode, self.max_work, self.max_wait = decode, max_batch_work, max_wait_ms / 1000.0
        self.max_queue, self.clock = max_queue_sentences, clock
        self._cond = threading.Condition()
        self._waiting: list[_Job] = []      # submitted, not yet decoding, in arrival order
        self._stopping = False
        self.queued = self._queued_work = 0  # sentences (and their work) not yet answered
        self._rate = 0.0                     # work per second of the latest batch
        self._thread = threading.Thread(target=self._loop, name="nmt-serve-batcher", daemon=True)
        self._thread.start()

    def submit(self, sentences: Sequence[str], key: Key, work: int) -> Future:
        """Queue a request of ``work`` (:func:`request_work`); its future gets the results.
        Overloaded, at once, when the batcher is stopping or the queue lacks room for the
        request's n sentences and n - 1 more: a larger request is refused earlier, so that a
        queue full of large requests still takes a short one."""
        with self._cond:
            if self._stopping:
                raise Overloaded("the server is shutting down.", 1)
            if self.queued + 2 * len(sentences) - 1 > self.max_queue:
                retry = min(60, max(1, math.ceil(self._queued_work / self._rate))) \
                    if self._rate else 1
                raise Overloaded(f"the server is busy: {self.queued} sentences are queued and it "
                                 f"queues at most {self.max_queue} (serve.max_queue_sentences); "
                                 f"retry after {retry} s.", retry)
            job = _Job(list(sentences), key, work, self.clock())
            self._waiting.append(job)
            self.queued += len(job.sentences)
            self._queued_work += work
            self._cond.notify()
        return job.future

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()

    def close(self) -> None:
        self.stop()
        self._thread.join()

    def _next_batch(self, free_since: float, last_decode: float, short_may_lead: bool
                    ) -> tuple[list[_Job], bool] | None:
        """Wait for a batch to decode (:func:`pick_batch`), and whether a short request leads
        it (None: stopping, nothing left): at once when batching is off, when stopping or when
        the batch is full, else when the window (:func:`window_end`) closes."""
        with self._cond:
            while True:
                if not self._waiting:
                    if self._stopping:
                        return None
                    self._cond.wait()
                    continue
                batch, full = pick_batch(self._waiting, short_may_lead,
                                         self.max_work if self.max_wait > 0 else 0)
                if self.max_wait == 0 or self._stopping or full:
                    break
                # The window opens when the oldest request arrives or the worker becomes free
                # (the later) and stays open while requests keep coming less than max_wait
                # apart, for at most as long as the previous batch took to decode: concurrent
                # clients, answered together, come back over many milliseconds and share the
                # next batch instead of splitting into a small batch and a large one.
                end = window_end(max(self._waiting[0].arrived, free_since),
                                 [j.arrived for j in self._waiting], self.max_wait,
                                 max(self.max_wait, last_decode))
                if end <= self.clock():
                    break
                self._cond.wait(end - self.clock())
            short = batch[0] is not self._waiting[0]
            for job in batch:
                self._waiting.remove(job)
            return batch, short

    def _loop(self) -> None:
        free_since, last_decode, short = self.clock(), 0.0, False
        while (picked := self._next_batch(free_since, last_decode, not short)) is not None:
            batch, short = picked
            start = self.clock()
            for job in batch:
                if not job.future.set_running_or_notify_cancel():
                    self._answered(job)
            running = [j for j in batch if j.future.running()]
            self._run(running)
            free_since = self.clock()
            last_decode = free_since - start
            if running and last_decode > 0:   # the work decoded, not the cancelled requests'
                self._rate = sum(j.work for j in running) / last_decode

    def _answered(self, job: _Job) -> None:
        """Count ``job`` out of the queue: before its future is set, so that a client that
        sends its next request at once finds the room."""
        with self._cond:
            self.queued -= len(job.sentences)
            self._queued_work -= job.work

    def _run(self, batch: list[_Job]) -> None:
        if not batch:
            return
        start = self.clock()
        try:
            results = self.decode([s for j in batch for s in j.sentences], batch[0].key)
        except Exception as err:
            if len(batch) > 1 and not is_out_of_memory(err):
                log.warning("batch of %d requests failed (%s); decoding them one by one",
                            len(batch), type(err).__name__)
                for job in batch:
                    self._run([job])
                return
            oom = is_out_of_memory(err)
            if oom and torch.cuda.is_available():
                torch.cuda.empty_cache()
            if not isinstance(err, InputTooLong):   # a client's 413, logged by the endpoint
                log.log(logging.WARNING if oom else logging.ERROR, "batch failed: %s", err,
                        exc_info=not oom)
            for job in batch:
                self._answered(job)
                job.future.set_exception(err)
            return
        done, offset = self.clock(), 0
        for job in batch:
            self._answered(job)
            job.future.set_result(results[offset: offset + len(job.sentences)])
            offset += len(job.sentences)
        log.info("batch: %d requests, %d sentences, work %d, wait %.1f ms, decode %.1f ms",
                 len(batch), offset, sum(j.work for j in batch),
                 (start - min(j.arrived for j in batch)) * 1000, (done - start) * 1000)


def request_work(src_ids: Sequence[Sequence[int]], beam_size: int, max_len_a: float,
                 max_len_b: int) -> int:
    """An upper bound on a beam search's cost: ``beam_size`` x the sum over the sentences
    (subword ids, no EOS) of T x (S + T), beam rows x decoder steps x the positions a step
    reads (its cached source and output): S source subwords + EOS, T the longest output + EOS
    (:func:`~nmt.inference.search.max_output_lengths`); a finished sentence leaves the batch.
    Quadratic in length, as the time of one long sentence is (its steps copy and attend to
    the growing cache)."""
    src_len = torch.tensor([len(ids) + 1 for ids in src_ids])   # EOS included
    mask = torch.arange(int(src_len.max())) < src_len[:, None]
    steps = max_output_lengths(mask, max_len_a, max_len_b) + 1
    return beam_size * int((steps * (src_len + steps)).sum())


def pharaoh_links(result) -> set[tuple[int, int]]:
    """(source word, target word) links of a :class:`~nmt.inference.translator.Translation`:
    :func:`~nmt.extras.tools.word_alignment.word_links` (argmax, no shift) of its alignment
    [len(tokens), len(src_tokens)]."""
    src, tgt = result.src_tokens[:-1], result.tokens[:-1]
    src_words, tgt_words = wa.piece_words(src), wa.piece_words(tgt)
    item = wa.ForcedAlignment(src, tgt, src_words, tgt_words, len(set(src_words)),
                              len(set(tgt_words)), np.asarray(result.alignment)[None, None])
    return wa.word_links(item)


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
                    marks=[list(c) for c in sorted(wa.word_link_cells(links, result.src_tokens,
                                                                       result.tokens))])
        out.update(src_tokens=result.src_tokens, links=view["links"], view=view,
                   alignment=np.round(np.asarray(result.alignment, dtype=np.float64), 4).tolist())
    return out


def model_info(translator, cfg: DictConfig) -> dict:
    """``GET /v1/model``: what the server translates with (no file paths)."""
    tok, train_cfg, model = translator.tokenizer, translator.config, getattr(translator, "model", None)
    if model is None:   # CTranslate2: its config's model, on the meta device (shapes: no memory)
        with torch.device("meta"):
            model = build_model(train_cfg.model, tok.src_vocab_size, tok.tgt_vocab_size)
    data = train_cfg.data
    return {"src_lang": data.src_lang, "tgt_lang": data.tgt_lang, "languages": translator.languages,
            "directions": [f"{s}-{t}" for s, t in translator.directions], "engine": str(cfg.engine),
            "model": to_plain(train_cfg.model),
            "parameters": sum(p.numel() for p in {id(p): p for p in model.parameters()}.values()),
            "tokenizer": {**{k: v for k, v in to_plain(data.tokenizer).items() if k != "model"},
                          "src_vocab_size": tok.src_vocab_size,
                          "tgt_vocab_size": tok.tgt_vocab_size, "fingerprint": tok.fingerprint},
            "attention": "all" if translator.all_attention else "alignment",
            "defaults": {k: cfg[k] for k in ("beam_size", "n_best", "length_penalty")},
            "limits": {k: cfg.serve[k] for k in ("max_sentences", "max_chars", "max_body_bytes",
                                                  "max_beam_size", "max_request_work")}}


def _error(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": " ".join(str(message).split())}, status, headers=headers)


DRAIN_BYTES = 64 << 20   # a body over the limit is read (and dropped) up to this size before the 413


class BodyGuard:
    """ASGI middleware: reads each request body up to ``limit`` bytes and checks it is UTF-8
    (400 otherwise), then replays it to ``app``. A larger body gets 413 without the app seeing
    it, once the rest of it has been read and dropped (up to ``DRAIN_BYTES``): a client that is
    still sending when the connection closes sees a reset, not the answer. A request that
    waits for ``Expect: 100-continue``, or announces more than ``DRAIN_BYTES``, gets it at once."""

    def __init__(self, app, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        chunks, size, refusal = [], 0, None
        headers = dict(scope["headers"])
        declared = headers.get(b"content-length", b"0")
        if not declared.isdigit():
            return await _error(400, "Content-Length is not a number.")(scope, receive, send)
        if int(declared) > self.limit:
            refusal = _error(413, f"the request body has {int(declared)} bytes; this server "
                                  f"takes at most {self.limit} (serve.max_body_bytes).")
            if int(declared) > DRAIN_BYTES or b"100-continue" in headers.get(b"expect", b""):
                return await refusal(scope, receive, send)
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            size += len(message.get("body", b""))
            if refusal is None:
                chunks.append(message.get("body", b""))
                if size > self.limit:
                    chunks, refusal = [], _error(413, f"the request body has more than "
                                                      f"{self.limit} bytes (serve.max_body_bytes).")
            if not message.get("more_body", False) or size > DRAIN_BYTES:
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


class ErrorResponse(BaseModel):
    error: str   # one line, naming the limit or field at fault


def create_app(translator, cfg: DictConfig) -> FastAPI:
    """The service for ``translator`` (any :class:`~nmt.inference.translator.TranslatorBase`)
    under a validated ``nmt-serve`` config ``cfg`` (search defaults at the top, ``serve.*``);
    the batcher's thread runs from the app's start-up to its shutdown (``app.state.batcher``:
    ``stop()`` it on a signal to close the batch window and turn new requests away).
    ConfigError: ``serve.max_queue_sentences`` < 2 x ``serve.max_sentences`` - 1, a queue that
    would refuse the largest request for ever (:meth:`Batcher.submit`)."""
    limits, search = cfg.serve, {k: cfg[k] for k in ("max_len_a", "max_len_b", "batch_sentences",
                                                      "batch_tokens")}
    if limits.max_queue_sentences < 2 * limits.max_sentences - 1:
        raise ConfigError(f"serve.max_queue_sentences={limits.max_queue_sentences} must be >= 2 x "
                          f"serve.max_sentences - 1 = {2 * limits.max_sentences - 1}: a request "
                          "of n sentences needs room for 2n - 1.")
    info = model_info(translator, cfg)
    keyed = limits.api_key is not None
    targets = sorted({t for _, t in translator.directions})   # the choices of tgt_lang
    source = cfg.model_dir if cfg.engine == "ctranslate2" else cfg.checkpoint   # for the log

    class TranslateRequest(BaseModel):
        """Sentences and search settings (absent: the server's defaults, ``GET /v1/model``)."""

        model_config = ConfigDict(strict=True, extra="forbid")
        text: Annotated[list[Annotated[str, Field(max_length=limits.max_chars)]],
                        Field(min_length=1, max_length=limits.max_sentences)]
        beam_size: Annotated[int, Field(ge=SEARCH_MINIMUM["beam_size"],
                                        le=limits.max_beam_size)] = int(cfg.beam_size)
        n_best: Annotated[int, Field(ge=SEARCH_MINIMUM["n_best"])] = int(cfg.n_best)
        length_penalty: Annotated[float, Field(ge=SEARCH_MINIMUM["length_penalty"],
                                               allow_inf_nan=False)] = float(cfg.length_penalty)
        alignment: bool = False
        tgt_lang: Literal[tuple(targets)] = str(translator.config.data.tgt_lang)

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
        beam_size, n_best, length_penalty, alignment, tgt_lang = key
        results = translator.translate(sentences, beam_size=beam_size, n_best=n_best,
                                       length_penalty=length_penalty, **search, tgt_lang=tgt_lang,
                                       return_attention=alignment and translator.all_attention,
                                       alignment=alignment)
        return [json.dumps(translation_json(r, alignment), ensure_ascii=False, allow_nan=False)
                for r in results]

    @asynccontextmanager
    async def lifespan(app_):
        app_.state.batcher = Batcher(decode, limits.max_batch_work, limits.max_wait_ms,
                                     limits.max_queue_sentences)
        try:
            yield
        finally:
            await asyncio.to_thread(app_.state.batcher.close)

    async def no_key() -> None:   # a server without serve.api_key reads no header, declares none
        return None

    bearer = HTTPBearer(auto_error=False, description="serve.api_key (NMT_SERVE_API_KEY)")
    Credentials = Annotated[HTTPAuthorizationCredentials | None,
                            Depends(bearer if keyed else no_key)]

    def key_ok(credentials: HTTPAuthorizationCredentials | None) -> bool:
        return not keyed or credentials is not None and hmac.compare_digest(
            credentials.credentials.encode("utf-8"), str(limits.api_key).encode("utf-8"))

    async def authorized(credentials: Credentials) -> None:   # async: no thread pool hop
        if not key_ok(credentials):
            raise HTTPException(401, "missing or wrong API key: send Authorization: Bearer <key>.",
                                headers={"WWW-Authenticate": "Bearer"})

    auth = [Depends(authorized)] if keyed else []
    errors = {400: "malformed JSON, a body that is not UTF-8, or a bad Content-Length",
              **({401: "missing or wrong API key (Authorization: Bearer <key>)"} if keyed else {}),
              413: "the body is over serve.max_body_bytes, the request's decoding work over "
                   "serve.max_request_work, or a sentence beyond the model's positions",
              422: "a field is missing, mistyped or out of range",
              500: "an internal error (see the server log)",
              503: "the queue is full (serve.max_queue_sentences), the server is stopping, or "
                   "it ran out of memory: retry after Retry-After seconds"}
    responses = {code: {"model": ErrorResponse, "description": text} for code, text in errors.items()}
    responses[503]["headers"] = {"Retry-After": {"description": "seconds", "schema": {"type": "integer"}}}

    app = FastAPI(title=f"nmt-serve: {info['src_lang']} -> {info['tgt_lang']}", lifespan=lifespan,
                  description="Neural machine translation with attention (nmt/extras/tools/serve.py).")
    app.state.batcher = None
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

    @app.post("/v1/translate", response_model=TranslateResponse, responses=responses,
              dependencies=auth)
    async def translate(request: TranslateRequest):
        """Translate ``text`` (a list of sentences); see the module docstring of
        nmt/extras/tools/serve.py for the fields of each answer."""
        # on the loop (about 1 ms for 8 sentences): a thread would spread the arrivals of clients
        # answered together, and the batch window would close between them
        work = request_work(translator.tokenizer.encode_src_batch(request.text),
                            request.beam_size, cfg.max_len_a, cfg.max_len_b)
        if work > limits.max_request_work:
            return _error(413, f"this request's decoding work is {work} (beam_size x output "
                               "steps x positions read, by max_len_a/max_len_b); this server "
                               f"takes at most {limits.max_request_work} per request "
                               "(serve.max_request_work): send fewer or shorter sentences or a "
                               "smaller beam_size.")
        key = (request.beam_size, request.n_best, request.length_penalty, request.alignment,
               request.tgt_lang)
        try:
            future = app.state.batcher.submit(request.text, key, work)
        except Overloaded as err:
            return _error(503, str(err), {"Retry-After": str(err.retry_after)})
        try:
            results = await asyncio.wrap_future(future)
        except InputTooLong as err:   # its message is for the operator; the client gets this
            log.warning("413 for a sentence beyond the positions of %s: %s", source, err)
            return _error(413, f"text.{err.index} is too long for this model, which reads and "
                               f"writes at most {err.positions} subwords (EOS included) per "
                               "sentence: send a shorter one.")
        except Exception as err:
            if is_out_of_memory(err):
                return _error(503, "out of memory while decoding this batch; retry, or send "
                                   "fewer or shorter sentences.", {"Retry-After": "1"})
            return _error(500, f"internal error ({type(err).__name__}); see the server log.")
        return Response('{"translations":[' + ",".join(results) + "]}",
                        media_type="application/json")

    @app.get("/v1/model", dependencies=auth)
    async def model() -> dict:
        """Languages, model config, parameter count, tokenizer, defaults, limits."""
        return info

    # with a key, /health takes it or none: OpenAPI's "bearer, or no security" is [{...}, {}]
    @app.get("/health", openapi_extra={"security": [{}]} if keyed else None)
    async def health(credentials: Credentials) -> dict:
        """``{"status": "ok"}``, with the API key (or on a server without one) also
        ``"queued"``: sentences submitted and not yet answered."""
        batcher = app.state.batcher
        return {"status": "ok", **({"queued": batcher.queued}
                                   if batcher is not None and key_ok(credentials) else {})}

    page = attention_page([], f"nmt-serve: {info['src_lang']} \u2192 {info['tgt_lang']}",
                          serve={"beam_size": int(cfg.beam_size), "key": keyed, "tgt_lang":
                                 info["tgt_lang"], "targets": targets})

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def index() -> HTMLResponse:
        return HTMLResponse(page)

    return app
