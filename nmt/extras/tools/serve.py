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

Dynamic batching: :mod:`nmt.extras.tools.batcher` (one worker thread, batches of requests with
the same search settings). Bad input is a 4xx with one line of JSON ``{"error": "..."}``; the
server goes on serving.
"""

# No "from __future__ import annotations": FastAPI reads the endpoints' annotations, whose
# request model is built per server by request_model (its limits come from the config).
import asyncio
import hmac
import json
import logging
from collections.abc import Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np
import torch
from fastapi import Depends, FastAPI, HTTPException
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from omegaconf import DictConfig
from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator
from starlette.exceptions import HTTPException as StarletteHTTPException

from nmt.config import SEARCH_MINIMUM, ConfigError, to_plain
from nmt.evaluation.alignments import Alignment
from nmt.extras.tools import word_alignment as wa
from nmt.extras.tools.batcher import Batcher, Key, Overloaded, is_out_of_memory
from nmt.extras.tools.ctranslate2 import InputTooLong
from nmt.extras.tools.viewer import attention_page, page_data
from nmt.inference.search import max_output_lengths
from nmt.models import build_model

log = logging.getLogger("nmt.serve")

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
    tok, train_cfg = translator.tokenizer, translator.config
    model = getattr(translator, "model", None)
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


DRAIN_BYTES = 64 << 20   # a body over the limit is read (and dropped) up to this size, then 413


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


class TranslateRequest(BaseModel):
    """Sentences and search settings (absent: the server's defaults, ``GET /v1/model``).

    Rule: ``n_best`` <= ``beam_size``. :func:`request_model` declares the fields with their
    server's bounds and defaults; this class holds the rules every server shares.
    """

    model_config = ConfigDict(strict=True, extra="forbid")

    @model_validator(mode="after")
    def _check(self):
        if self.n_best > self.beam_size:
            raise ValueError(f"n_best={self.n_best} must be <= beam_size={self.beam_size}")
        return self


def request_model(translator, cfg: DictConfig) -> type[TranslateRequest]:
    """:class:`TranslateRequest` with ``cfg``'s limits and defaults (``serve.*``, the search
    settings at its top) and ``translator``'s target languages as the choices of tgt_lang."""
    limits = cfg.serve
    targets = tuple(sorted({t for _, t in translator.directions}))
    sentences = Annotated[list[Annotated[str, Field(max_length=limits.max_chars)]],
                          Field(min_length=1, max_length=limits.max_sentences)]
    beam = Annotated[int, Field(ge=SEARCH_MINIMUM["beam_size"], le=limits.max_beam_size)]
    n_best = Annotated[int, Field(ge=SEARCH_MINIMUM["n_best"])]
    penalty = Annotated[float, Field(ge=SEARCH_MINIMUM["length_penalty"], allow_inf_nan=False)]
    return create_model(
        "TranslateRequest", __base__=TranslateRequest, __doc__=TranslateRequest.__doc__,
        text=(sentences, ...), beam_size=(beam, int(cfg.beam_size)),
        n_best=(n_best, int(cfg.n_best)), length_penalty=(penalty, float(cfg.length_penalty)),
        alignment=(bool, False), tgt_lang=(Literal[targets], str(translator.config.data.tgt_lang)))


def decoder(translator, cfg: DictConfig) -> Callable[[list[str], Key], list[str]]:
    """The batcher's ``decode``: one ``translate`` call per batch, each result as its JSON
    text (made in the worker thread, off the event loop)."""
    search = {k: cfg[k] for k in ("max_len_a", "max_len_b", "batch_sentences", "batch_tokens")}

    def decode(sentences: list[str], key: Key) -> list[str]:
        beam_size, n_best, length_penalty, alignment, tgt_lang = key
        results = translator.translate(sentences, beam_size=beam_size, n_best=n_best,
                                       length_penalty=length_penalty, **search, tgt_lang=tgt_lang,
                                       return_attention=alignment and translator.all_attention,
                                       alignment=alignment)
        return [json.dumps(translation_json(r, alignment), ensure_ascii=False, allow_nan=False)
                for r in results]

    return decode


def batcher_lifespan(decode: Callable[[list[str], Key], list[str]], limits: DictConfig):
    """The app's lifespan: the batcher's thread runs from start-up to shutdown
    (``app.state.batcher``)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        app.state.batcher = Batcher(decode, limits.max_batch_work, limits.max_wait_ms,
                                    limits.max_queue_sentences)
        try:
            yield
        finally:
            await asyncio.to_thread(app.state.batcher.close)

    return lifespan


@dataclass(frozen=True)
class Auth:
    """The API key check: ``credentials``, the endpoints' parameter type (a server without
    ``serve.api_key`` reads no header and declares none); ``dependencies`` of ``/v1/*``."""

    api_key: str | None
    credentials: Any
    dependencies: list

    def ok(self, credentials: HTTPAuthorizationCredentials | None) -> bool:
        return _key_ok(self.api_key, credentials)


def _key_ok(api_key: str | None, credentials: HTTPAuthorizationCredentials | None) -> bool:
    return api_key is None or credentials is not None and hmac.compare_digest(
        credentials.credentials.encode("utf-8"), api_key.encode("utf-8"))


async def _no_key() -> None:   # a server without serve.api_key reads no header, declares none
    return None


def bearer_auth(api_key: str | None) -> Auth:
    """:class:`Auth` for ``serve.api_key`` (None: every request passes)."""
    if api_key is None:
        return Auth(None, Annotated[HTTPAuthorizationCredentials | None, Depends(_no_key)], [])
    key = str(api_key)
    bearer = HTTPBearer(auto_error=False, description="serve.api_key (NMT_SERVE_API_KEY)")
    credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]

    async def authorized(given: credentials) -> None:   # async: no thread pool hop
        if not _key_ok(key, given):
            raise HTTPException(401, "missing or wrong API key: send Authorization: Bearer <key>.",
                                headers={"WWW-Authenticate": "Bearer"})

    return Auth(key, credentials, [Depends(authorized)])


def error_responses(keyed: bool) -> dict[int, dict]:
    """The OpenAPI ``responses`` of ``POST /v1/translate``: each error's status and cause."""
    errors = {400: "malformed JSON, a body that is not UTF-8, or a bad Content-Length",
              **({401: "missing or wrong API key (Authorization: Bearer <key>)"} if keyed else {}),
              413: "the body is over serve.max_body_bytes, the request's decoding work over "
                   "serve.max_request_work, or a sentence beyond the model's positions",
              422: "a field is missing, mistyped or out of range",
              500: "an internal error (see the server log)",
              503: "the queue is full (serve.max_queue_sentences), the server is stopping, or "
                   "it ran out of memory: retry after Retry-After seconds"}
    responses = {code: {"model": ErrorResponse, "description": text}
                 for code, text in errors.items()}
    responses[503]["headers"] = {"Retry-After": {"description": "seconds",
                                                 "schema": {"type": "integer"}}}
    return responses


async def _http_error(_request, err: StarletteHTTPException) -> JSONResponse:
    return _error(err.status_code, err.detail, getattr(err, "headers", None))


async def _invalid(_request, err: RequestValidationError) -> JSONResponse:
    first = err.errors()[0]
    if first.get("type") == "json_invalid":
        return _error(400, f"malformed JSON: {first.get('ctx', {}).get('error', first['msg'])}.")
    where = ".".join(str(p) for p in first.get("loc", ())[1:]) or "body"
    return _error(422, f"{where}: {first['msg']}")


def add_translate(app: FastAPI, translator, cfg: DictConfig, auth: Auth) -> None:
    """``POST /v1/translate``: the request's work checked, then queued on
    ``app.state.batcher``; each failure answered as one line of JSON."""
    limits = cfg.serve
    source = cfg.model_dir if cfg.engine == "ctranslate2" else cfg.checkpoint   # for the log
    request_type = request_model(translator, cfg)

    async def translate(request: request_type):
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

    app.post("/v1/translate", response_model=TranslateResponse,
             responses=error_responses(auth.api_key is not None),
             dependencies=auth.dependencies)(translate)


def add_status_pages(app: FastAPI, info: dict, page: str, auth: Auth) -> None:
    """``GET /v1/model``, ``GET /health`` and the viewer page ``GET /``."""

    @app.get("/v1/model", dependencies=auth.dependencies)
    async def model() -> dict:
        """Languages, model config, parameter count, tokenizer, defaults, limits."""
        return info

    # with a key, /health takes it or none: OpenAPI's "bearer, or no security" is [{...}, {}]
    keyed = auth.api_key is not None

    @app.get("/health", openapi_extra={"security": [{}]} if keyed else None)
    async def health(credentials: auth.credentials) -> dict:
        """``{"status": "ok"}``, with the API key (or on a server without one) also
        ``"queued"``: sentences submitted and not yet answered."""
        batcher = app.state.batcher
        return {"status": "ok", **({"queued": batcher.queued}
                                   if batcher is not None and auth.ok(credentials) else {})}

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def index() -> HTMLResponse:
        return HTMLResponse(page)


def create_app(translator, cfg: DictConfig) -> FastAPI:
    """The service for ``translator`` under a validated ``nmt-serve`` config ``cfg``.

    ``translator``: any :class:`~nmt.inference.translator.TranslatorBase`; ``cfg``: search
    defaults at the top, ``serve.*``. The batcher's thread runs from the app's start-up to its
    shutdown (``app.state.batcher``: ``stop()`` it on a signal to close the batch window and
    turn new requests away).

    Errors: ConfigError when ``serve.max_queue_sentences`` < 2 x ``serve.max_sentences`` - 1, a
    queue that would refuse the largest request for ever (:meth:`Batcher.submit`).
    """
    limits = cfg.serve
    if limits.max_queue_sentences < 2 * limits.max_sentences - 1:
        raise ConfigError(f"serve.max_queue_sentences={limits.max_queue_sentences} must be >= 2 x "
                          f"serve.max_sentences - 1 = {2 * limits.max_sentences - 1}: a request "
                          "of n sentences needs room for 2n - 1.")
    info = model_info(translator, cfg)
    auth = bearer_auth(limits.api_key)
    app = FastAPI(title=f"nmt-serve: {info['src_lang']} -> {info['tgt_lang']}",
                  lifespan=batcher_lifespan(decoder(translator, cfg), limits),
                  description="Neural machine translation with attention "
                              "(nmt/extras/tools/serve.py).")
    app.state.batcher = None
    app.add_middleware(BodyGuard, limit=int(limits.max_body_bytes))
    if limits.cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(limits.cors_origins),
                           allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"])
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _invalid)
    add_translate(app, translator, cfg, auth)
    targets = sorted({t for _, t in translator.directions})
    page = attention_page([], f"nmt-serve: {info['src_lang']} \u2192 {info['tgt_lang']}",
                          serve={"beam_size": int(cfg.beam_size), "key": auth.api_key is not None,
                                 "tgt_lang": info["tgt_lang"], "targets": targets})
    add_status_pages(app, info, page, auth)
    return app
