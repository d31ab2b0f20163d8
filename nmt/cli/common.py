"""Shared plumbing of the ``nmt-*`` tools, which are Hydra applications.

Each tool is a ``hydra.main`` task function ``app`` that calls :func:`run_task` with its body
and its validator, plus a ``main(argv)`` for the console script that calls :func:`run_app`. So
all of Hydra works (``-m``, ``--cfg``, ``--info``, ``hydra.*`` overrides, ``--help``). A user
error (:func:`user_error_types`) is printed as one paragraph ``<prog>: error: <message>`` with
exit status 2, never a traceback; any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import os
import shlex
import sys
import textwrap
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

import nmt.cli.schemas  # noqa: F401 - registers the tools' schemas with Hydra
from nmt.config import (
    ConfigError,
    SamplingSchema,
    SearchSchema,
    compose_config,
    finish_config,
    is_multilingual,
    to_plain,
    validate_decoding,
)
from nmt.data.corpus import CorpusError
from nmt.runtime import bound_onednn_cache, resolve_device

EXIT_USER_ERROR = 2
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4   # glibc mallopt parameters


def tune_malloc() -> bool:
    """Keep freed memory in the process heap (glibc ``mallopt``); True if applied.

    glibc gives large allocations fresh ``mmap`` pages and unmaps them on free, so the
    [tokens, vocab] logits and their gradient (~130 MB each) were page-faulted in again every
    training step: ~1,350 -> ~2,300 target tokens/s for the Transformer with this. The price:
    freed memory is not handed back to the OS. A no-op (False) off glibc.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    return bool(libc.mallopt(_M_MMAP_MAX, 0)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))
Validator = Callable[[DictConfig], DictConfig] | None
_checked: tuple[dict, DictConfig] | None = None   # run_app's (composed config, validated one)


def user_error_types() -> tuple[type[BaseException], ...]:
    """ConfigError, CorpusError and, once ``nmt.checkpoint`` is loaded, CheckpointError
    (looked up, not imported: that module imports torch, which ``--help`` must not wait for)."""
    checkpoint = sys.modules.get("nmt.checkpoint")
    return (ConfigError, CorpusError, *([checkpoint.CheckpointError] if checkpoint else []))


def print_error(prog: str, err: BaseException | str) -> None:
    """``<prog>: error: <message>`` as one paragraph on stderr (rank 0 only under torchrun)."""
    if os.environ.get("RANK", "0") != "0":
        return
    # Wrap at spaces only: paths such as /tmp/pytest-of-x stay whole for copy-paste.
    print(textwrap.fill(f"{prog}: error: {' '.join(str(err).split())}", width=100,
                        break_on_hyphens=False, break_long_words=False), file=sys.stderr)


def exit_on_user_error(prog: str, fn: Callable[[], int | None]) -> int:
    """``fn()``'s status (None = 0), or 2 after printing a user error (tools and scripts)."""
    try:
        status = fn()
    except Exception as err:
        if not isinstance(err, user_error_types()):  # fn() may have imported nmt.checkpoint
            raise
        print_error(prog, err)
        return EXIT_USER_ERROR
    return 0 if status is None else int(status)


def run_task(cfg: DictConfig, body: Callable[[DictConfig], int | None], *, prog: str,
             validate_fn: Validator) -> None:
    """A tool's task function: resolve and validate Hydra's config (:func:`_validated`), run
    ``body``; a user error or a non-zero status becomes ``SystemExit``."""
    tune_malloc()
    bound_onednn_cache()
    status = exit_on_user_error(prog, lambda: body(_validated(cfg, validate_fn)))
    if status:
        raise SystemExit(status)


def _validated(cfg: DictConfig, validate_fn: Validator) -> DictConfig:
    """:func:`~nmt.config.finish_config` of Hydra's config; the config :func:`run_app`
    validated instead when Hydra composed the same one for a single run (validated once: the
    tools' checks may hash a corpus)."""
    global _checked
    resolved, (composed, validated) = finish_config(cfg, None), _checked or (None, None)
    _checked = None
    single = not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN
    if single and composed is not None and composed == OmegaConf.to_container(resolved):
        return validated
    return resolved if validate_fn is None else validate_fn(resolved)


def run_app(app: Callable[[], None], argv: Sequence[str] | None = None, *, config_name: str,
            prog: str, validate_fn: Validator,
            precheck: Callable[[DictConfig], None] | None = None) -> int:
    """Run the ``hydra.main`` function ``app`` on ``argv`` (default ``sys.argv[1:]``); returns
    the exit status.

    A plain run (no ``-`` flag) is composed and validated here first (then ``precheck``), so
    an override Hydra cannot apply is a one-paragraph error instead of Hydra's report; the
    task function takes that validated config on (:func:`_validated`).
    """
    global _checked
    argv = list(sys.argv[1:] if argv is None else argv)
    if not any(a.startswith("-") for a in argv):
        try:
            cfg = compose_config(argv, config_name=config_name, validate_fn=None)
            composed = OmegaConf.to_container(cfg)
            cfg = cfg if validate_fn is None else validate_fn(cfg)
            if precheck is not None:
                precheck(cfg)
        except ConfigError as err:
            print_error(prog, err)
            return EXIT_USER_ERROR
        _checked = (composed, cfg)
    saved, sys.argv = sys.argv, [prog, *argv]
    try:
        app()
    except SystemExit as exit_:
        code = exit_.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    finally:
        sys.argv, _checked = saved, None
    return 0


@contextmanager
def log_to_stderr(name: str) -> Iterator[None]:
    """The logger ``name``'s INFO lines to stderr within the block, timestamped (``train.log``'s
    format): a long-running tool's progress (nmt-serve's requests, nmt-backtranslate's chunks)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s",
                                           "%Y-%m-%d %H:%M:%S"))
    logger = logging.getLogger(name)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)


def hydra_record():
    """How this job was launched (:class:`nmt.training.run.RunRecord`; empty outside Hydra),
    for ``run_dir/.hydra`` and ``summary.json``."""
    from nmt.training.run import RunRecord

    if not HydraConfig.initialized():
        return RunRecord()
    hydra_cfg = HydraConfig.get()
    return RunRecord(command=" ".join(shlex.quote(a) for a in sys.argv),
                     overrides=list(hydra_cfg.overrides.task),
                     config_yaml=None, hydra_yaml=OmegaConf.to_yaml({"hydra": hydra_cfg}))


def require(cfg: DictConfig, *keys: str) -> None:
    """ConfigError for the first of ``keys`` that is ``???``, null or empty."""
    for key in keys:
        if OmegaConf.is_missing(cfg, key) or OmegaConf.select(cfg, key) in (None, ""):
            raise ConfigError(f"{key} is required: add {key}=... to the command line.")


def decode_settings(cfg: DictConfig, schemas: tuple[type, ...] = (SearchSchema, SamplingSchema)
                    ) -> dict:
    """The top-level keys of ``schemas`` (default: search and sampling) in an nmt-evaluate or
    nmt-translate config, as keyword arguments of ``Translator.translate``."""
    return {f.name: cfg[f.name] for schema in schemas for f in dataclasses.fields(schema)}


def check_decoding(cfg: DictConfig) -> DictConfig:
    """ConfigError, naming the key, for a bad search or sampling setting (``beam_size``, ``top_p``,
    ...; :func:`nmt.config.validate_decoding`) of an nmt-evaluate or nmt-translate config and, with
    ``decoding=mbr``, a bad ``mbr.*`` setting or a search MBR cannot take
    (:func:`nmt.extras.decoding.mbr.mbr_settings`, :func:`~nmt.extras.decoding.mbr.check_search`;
    the room loads only then), before any checkpoint loads."""
    settings = validate_decoding(decode_settings(cfg))
    if cfg.decoding == "mbr":
        from nmt.extras.decoding.mbr import check_search, mbr_settings

        mbr_settings(**to_plain(cfg.mbr))
        check_search(settings)
    return cfg


def checkpoint_paths(cfg: DictConfig) -> str | list[str]:
    """``checkpoint`` as one path, or a list of two or more (an ensemble)."""
    value = cfg.checkpoint
    if not (OmegaConf.is_list(value) or isinstance(value, list | tuple)):
        return str(value)
    paths = [str(p) for p in value]
    if not paths:
        raise ConfigError("checkpoint=[] names no checkpoint: give checkpoint=PATH or "
                          "checkpoint=[a.pt,b.pt].")
    return paths if len(paths) > 1 else paths[0]


def check_engine(cfg: DictConfig) -> DictConfig:
    """``engine=pytorch`` reads ``checkpoint=``, ``engine=ctranslate2`` an nmt-export
    ``model_dir=`` (and only the inference weights); exactly one of the two is given."""
    given = not OmegaConf.is_missing(cfg, "checkpoint") and cfg.checkpoint not in (None, "")
    if cfg.engine == "ctranslate2":
        if cfg.weights != "inference":
            raise ConfigError(f"weights={cfg.weights} needs engine=pytorch: nmt-export wrote the "
                              "inference weights into model_dir.")
        if given:
            raise ConfigError("checkpoint=... is read by engine=pytorch only: engine=ctranslate2 "
                              "translates model_dir=DIR (written by nmt-export).")
        require(cfg, "model_dir")
    else:
        if cfg.model_dir:
            raise ConfigError(f"model_dir={cfg.model_dir} is read by engine=ctranslate2 only: "
                              "add engine=ctranslate2, or give checkpoint=PATH.")
        require(cfg, "checkpoint")
    return cfg


def require_direction(cfg: DictConfig, translator) -> None:
    """ConfigError unless ``cfg`` names ``src_lang`` and ``tgt_lang`` for a multilingual model
    (its ``data.src_lang`` / ``tgt_lang`` are only the training's defaults: translating every
    input as that direction is silently wrong for any other)."""
    data = translator.config.data
    if is_multilingual(data) and not (cfg.src_lang and cfg.tgt_lang):
        pairs = ", ".join(f"{s}-{t}" for s, t in translator.directions)
        raise ConfigError(f"a multilingual model (trained on {pairs}): name the direction with "
                          "src_lang= and tgt_lang= (pivot=LANG for one it was not trained on).")


def load_translator(cfg: DictConfig):
    """The translator ``engine`` names, on ``device``: a ``Translator`` of ``checkpoint`` (of
    an ensemble for several: :mod:`nmt.extras.decoding.ensemble`) or a ``CTranslate2Translator`` of
    ``model_dir`` (both translate alike)."""
    device = resolve_device(cfg.device)
    if cfg.engine == "ctranslate2":
        from nmt.extras.tools.ctranslate2 import CTranslate2Translator

        return CTranslate2Translator.from_dir(cfg.model_dir, device)
    paths = checkpoint_paths(cfg)
    if isinstance(paths, list):
        from nmt.extras.decoding.ensemble import ensemble_translator

        return ensemble_translator(paths, device, weights=cfg.weights)
    from nmt.inference.translator import Translator

    return Translator.from_checkpoint(paths, device, weights=cfg.weights)
