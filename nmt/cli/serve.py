"""``nmt-serve``: an HTTP translation service with dynamic batching and an attention page.

    nmt-serve checkpoint=runs/tf/checkpoints/best.pt                    # http://127.0.0.1:8000/
    nmt-serve engine=ctranslate2 model_dir=runs/tf/ct2 serve.port=8080   # an nmt-export
    NMT_SERVE_API_KEY=secret nmt-serve checkpoint=... serve.host=0.0.0.0

Needs ``pip install "nmt[serve]"`` (FastAPI, uvicorn). The endpoints, the batching and the
errors are described in :mod:`nmt.extras.tools.serve`. Binding to an address other than loopback
needs ``serve.api_key`` or ``serve.allow_unauthenticated=true``. ``serve.port=0`` binds a free
port; the log line ``nmt-serve: listening on http://HOST:PORT/`` names the port either way.
On SIGTERM (or Ctrl-C) the server stops accepting connections, answers new requests on open
ones with 503, decodes the queued ones at once, finishes them and exits with status 0.
Options: configs/serve.yaml (``nmt-serve --help``).
"""

from __future__ import annotations

import ipaddress
import logging
import signal
import socket

import hydra
from omegaconf import DictConfig

from nmt.cli.common import (
    check_engine,
    decode_settings,
    load_translator,
    log_to_stderr,
    run_app,
    run_task,
)
from nmt.config import CONFIG_PATH, ConfigError, SearchSchema, check_positive, validate_search

log = logging.getLogger("nmt.serve")


def loopback(host: str) -> bool:
    """Whether ``host`` is ``localhost`` or a loopback address (127.0.0.0/8, ::1)."""
    try:
        return host == "localhost" or ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _check(cfg: DictConfig) -> DictConfig:
    """Range checks of an nmt-serve config, before the model loads; the queue's room for the
    largest request is checked by create_app, which library users call too."""
    check_engine(cfg)
    validate_search(decode_settings(cfg, (SearchSchema,)))
    serve = cfg.serve
    check_positive(serve, "max_batch_work", "max_queue_sentences", "max_request_work",
                   "max_sentences", "max_chars", "max_body_bytes", "max_beam_size", prefix="serve.")
    if not 0 <= serve.max_wait_ms <= 10_000:
        raise ConfigError(f"serve.max_wait_ms={serve.max_wait_ms} must lie in [0, 10000].")
    if not 0 <= serve.port <= 65535:
        raise ConfigError(f"serve.port={serve.port} must lie in [0, 65535].")
    if cfg.beam_size > serve.max_beam_size:
        raise ConfigError(f"beam_size={cfg.beam_size} (the default of a request) must be <= "
                          f"serve.max_beam_size={serve.max_beam_size}.")
    if serve.api_key is not None and len(str(serve.api_key)) < 8:
        raise ConfigError("serve.api_key is shorter than 8 characters: choose a longer key.")
    if not loopback(serve.host) and serve.api_key is None and not serve.allow_unauthenticated:
        raise ConfigError(f"serve.host={serve.host} is reachable from other machines: set "
                          "serve.api_key (or NMT_SERVE_API_KEY), or serve.allow_unauthenticated="
                          "true to serve anyone who can connect.")
    return cfg


def _run(cfg: DictConfig) -> None:
    try:
        import uvicorn

        from nmt.extras.tools.serve import create_app
    except ImportError as err:
        raise ConfigError(f"nmt-serve needs FastAPI and uvicorn ({err}): pip install "
                          "\"nmt[serve]\".") from None
    with log_to_stderr(log.name):
        if not loopback(cfg.serve.host) and cfg.serve.api_key is None:
            log.warning("serving %s without an API key (serve.allow_unauthenticated=true): anyone "
                        "who can reach it can use it", cfg.serve.host)
        app = create_app(load_translator(cfg), cfg)

        class Server(uvicorn.Server):
            def handle_exit(self, sig, frame) -> None:   # SIGTERM/SIGINT: stop queueing, then drain
                if app.state.batcher is not None:
                    app.state.batcher.stop()
                super().handle_exit(sig, frame)

        config = uvicorn.Config(app, host=cfg.serve.host, port=cfg.serve.port, log_level="info",
                                timeout_graceful_shutdown=None)
        sock = config.bind_socket()   # bound here, so that port 0 becomes a known port
        # asyncio sets TCP_NODELAY only on sockets made with proto=IPPROTO_TCP, which this one is
        # not; accepted connections inherit it from here (else Nagle's algorithm and delayed ACKs
        # hold each answer ~40 ms)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.listen(2048)             # connections wait in the backlog until the app is ready
        host, port = sock.getsockname()[:2]
        log.info("nmt-serve: listening on http://%s:%d/", f"[{host}]" if ":" in host else host,
                 port)
        # uvicorn shuts down gracefully on SIGTERM/SIGINT, then raises the signal again with the
        # handlers it found: these return, so the exit status is 0 instead of death by signal.
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: None)
        Server(config).run(sockets=[sock])


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="serve")
def app(cfg: DictConfig) -> None:
    run_task(cfg, _run, prog="nmt-serve", validate_fn=_check)


def main(argv: list[str] | None = None) -> int:
    """Console entry point ``nmt-serve``; returns the exit status."""
    return run_app(app, argv, config_name="serve", prog="nmt-serve", validate_fn=_check)


if __name__ == "__main__":
    raise SystemExit(main())
