"""Shared plumbing of the ``nmt-*`` command-line tools, which are Hydra applications.

Each tool is a ``hydra.main`` task function over its primary config in ``configs/``
(installed as ``nmt.configs``) plus a ``main(argv)`` that the console script calls::

    @hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="evaluate")
    def app(cfg: DictConfig) -> None:
        run_task(cfg, _run, prog="nmt-evaluate", validate_fn=_check)

    def main(argv: list[str] | None = None) -> int:
        return run_app(app, argv, config_name="evaluate", prog="nmt-evaluate", validate_fn=_check)

So everything Hydra documents works: ``-m/--multirun`` sweeps, ``--cfg job|hydra|all``,
``--info``, ``-cp/-cn/-cd``, ``hydra.*`` overrides, ``--shell-completion`` and ``--help``
(which lists the config groups and their options, then the composed config).

User errors -- :class:`nmt.config.ConfigError`, ``nmt.data.corpus.CorpusError``,
``nmt.checkpoint.CheckpointError`` -- are printed as one paragraph
``<prog>: error: <message>`` on stderr with exit status 2, never a traceback; that holds for
what Hydra cannot compose too (a typo in a key or a group option), which :func:`run_app`
checks before handing the command line to Hydra. Any other exception is a bug and
propagates with its traceback.
"""

from __future__ import annotations

import os
import shlex
import sys
import tempfile
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from nmt.config import ConfigError, compose_config, finish_config, validate_search
from nmt.runtime import bound_onednn_cache, tune_malloc

EXIT_USER_ERROR = 2
Validator = Callable[[DictConfig], DictConfig] | None


def user_error_types() -> tuple[type[BaseException], ...]:
    """Exception classes that mean "the user must change something" (exit status 2).

    ``CorpusError`` and ``CheckpointError`` are looked up only in modules that are already
    imported: an exception of a class can only exist once its module is loaded, and this
    keeps ``--help`` from importing the data and training packages.
    """
    types: list[type[BaseException]] = [ConfigError]
    for module_name, class_name in (("nmt.data.corpus", "CorpusError"),
                                    ("nmt.checkpoint", "CheckpointError")):
        module = sys.modules.get(module_name)
        cls = getattr(module, class_name, None) if module is not None else None
        if isinstance(cls, type) and issubclass(cls, BaseException):
            types.append(cls)
    return tuple(types)


def print_error(prog: str, err: BaseException | str) -> None:
    """Print ``<prog>: error: <message>`` as one wrapped paragraph to stderr.

    Under ``torchrun`` only rank 0 prints: every rank raises the same error
    (:func:`nmt.training.distributed.collective_errors`), and one paragraph is enough.
    """
    if os.environ.get("RANK", "0") != "0":
        return
    message = " ".join(str(err).split())
    # Wrap at spaces only: paths such as /tmp/pytest-of-x must stay whole for copy-paste.
    print(textwrap.fill(f"{prog}: error: {message}", width=100, break_on_hyphens=False,
                        break_long_words=False), file=sys.stderr)


def exit_on_user_error(prog: str, fn: Callable[[], int | None]) -> int:
    """Call ``fn()``; a user error becomes one paragraph on stderr and status 2.

    For the tools' task functions and the scripts in ``scripts/``.

    Returns:
        ``fn``'s status (None counts as 0), or 2 after a user error.
    """
    try:
        status = fn()
    except Exception as err:
        if not isinstance(err, user_error_types()):  # fn() may have imported more modules
            raise
        print_error(prog, err)
        return EXIT_USER_ERROR
    return 0 if status is None else int(status)


def run_task(cfg: DictConfig, body: Callable[[DictConfig], int | None], *, prog: str,
             validate_fn: Validator) -> None:
    """The body of a tool's ``hydra.main`` task function.

    Resolves and validates Hydra's config (:func:`nmt.config.finish_config`), calls
    ``body(cfg)``; a user error becomes one paragraph and ``SystemExit(2)``, a non-zero
    status from ``body`` ``SystemExit(status)``.
    """
    tune_malloc()
    bound_onednn_cache()
    status = exit_on_user_error(prog, lambda: body(finish_config(cfg, validate_fn)))
    if status:
        raise SystemExit(status)


def run_app(app: Callable[[], None], argv: Sequence[str] | None = None, *, config_name: str,
            prog: str, validate_fn: Validator,
            precheck: Callable[[DictConfig], None] | None = None) -> int:
    """Run the ``hydra.main`` application ``app`` on ``argv``; returns the exit status.

    A plain run (no ``-``-flag such as ``-m``, ``--cfg`` or ``--help``) is composed and
    validated here first, so that an override Hydra cannot apply (unknown key or option,
    bad syntax, wrong type) is a one-paragraph error with status 2 instead of Hydra's
    multi-line report; ``precheck`` may add checks on the validated config.

    Args:
        app: the ``hydra.main``-decorated task function (reads ``sys.argv``).
        argv: arguments without the program name (default ``sys.argv[1:]``).
        config_name: the primary config, for the pre-check.
        prog: the tool's name in messages and in ``sys.argv[0]`` while ``app`` runs.
        validate_fn: the tool's validator (also used by its task function).

    Returns:
        0, the status the tool exited with, or 2 for a user error.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if not any(a.startswith("-") for a in argv):
        try:
            cfg = compose_config(argv, config_name=config_name, validate_fn=validate_fn)
            if precheck is not None:
                precheck(cfg)
        except ConfigError as err:
            print_error(prog, err)
            return EXIT_USER_ERROR
    saved = sys.argv
    sys.argv = [prog, *argv]
    try:
        app()
    except SystemExit as exit_:
        code = exit_.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    finally:
        sys.argv = saved
    return 0


def hydra_record():
    """How this ``hydra.main`` job was launched, for ``run_dir/.hydra`` and ``summary.json``.

    Returns:
        :class:`nmt.training.rundir.RunRecord` (empty outside a Hydra job).
    """
    from hydra.core.hydra_config import HydraConfig

    from nmt.training.rundir import RunRecord

    if not HydraConfig.initialized():
        return RunRecord()
    hydra_cfg = HydraConfig.get()
    return RunRecord(command=" ".join(shlex.quote(a) for a in sys.argv),
                     overrides=list(hydra_cfg.overrides.task),
                     config_yaml=None, hydra_yaml=OmegaConf.to_yaml({"hydra": hydra_cfg}))


def ensure_writable_dir(path: str | Path, key: str) -> Path:
    """Create directory ``path`` (and parents) and check that a file can be written in it.

    Meant to run before long work (translation, plotting), so an unwritable output path
    fails at once instead of after the work is done.

    Args:
        path: the directory.
        key: the option that named it (``out_dir``, ``out``), quoted in the message.

    Returns:
        ``path`` as a :class:`Path`.

    Raises:
        ConfigError: the directory cannot be created or written (names ``key=path`` and
            the operating system's reason).
    """
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".nmt_write_check_"):
            pass
    except OSError as err:
        raise ConfigError(f"{key}={path}: cannot write into this directory "
                          f"({err.strerror or err}); choose a writable one with {key}=DIR.") from None
    return path


SEARCH_KEYS = ("beam_size", "length_penalty", "max_len_a", "max_len_b", "batch_sentences",
               "batch_tokens", "n_best")


def require(cfg: DictConfig, *keys: str) -> None:
    """Raise :class:`ConfigError` for each of ``keys`` still ``???`` (mandatory, not given)."""
    for key in keys:
        if OmegaConf.is_missing(cfg, key) or OmegaConf.select(cfg, key) in (None, ""):
            raise ConfigError(f"{key} is required: add {key}=... to the command line.")


def check_search(cfg: DictConfig) -> DictConfig:
    """Validate the top-level search keys of ``evaluate``/``translate`` configs; returns ``cfg``.

    Raises:
        ConfigError: see :func:`nmt.config.validate_search`.
    """
    validate_search({key: cfg[key] for key in SEARCH_KEYS})
    return cfg


SAMPLING_KEYS = ("sampling", "temperature", "top_k", "top_p", "seed")


def decode_settings(cfg: DictConfig) -> dict:
    """Search and sampling keys of ``cfg`` as keyword arguments of
    :meth:`nmt.inference.translator.Translator.translate`."""
    return {**search_settings(cfg), **{key: cfg[key] for key in SAMPLING_KEYS}}


def checkpoint_paths(cfg: DictConfig) -> str | list[str]:
    """``checkpoint`` as one path, or a list of paths (an ensemble).

    Raises:
        ConfigError: an empty list.
    """
    value = cfg.checkpoint
    if OmegaConf.is_list(value) or isinstance(value, list | tuple):
        paths = [str(p) for p in value]
        if not paths:
            raise ConfigError("checkpoint=[] names no checkpoint: give checkpoint=PATH or "
                              "checkpoint=[a.pt,b.pt] (an ensemble).")
        return paths if len(paths) > 1 else paths[0]
    return str(value)


ENGINES = ("pytorch", "ctranslate2")


def check_engine(cfg: DictConfig) -> DictConfig:
    """Check ``engine`` with ``checkpoint`` / ``model_dir`` (nmt-evaluate, nmt-translate).

    ``engine=pytorch`` reads ``checkpoint=``; ``engine=ctranslate2`` reads ``model_dir=`` (an
    ``nmt-export`` directory) and no checkpoint.

    Raises:
        ConfigError: an unknown engine, the input of the other engine given, or none; an
            unknown ``weights``, or ``weights=trained`` with CTranslate2 (which exported the
            inference weights).
    """
    from nmt.inference.loader import check_weights

    if check_weights(cfg.weights) != "inference" and cfg.engine == "ctranslate2":
        raise ConfigError("weights=trained needs engine=pytorch: nmt-export wrote the "
                          "checkpoint's inference weights into model_dir.")
    if cfg.engine not in ENGINES:
        raise ConfigError(f"engine={cfg.engine!r} is not one of {', '.join(ENGINES)}: pytorch "
                          "translates checkpoint=PATH, ctranslate2 an nmt-export model_dir=DIR.")
    has_checkpoint = not OmegaConf.is_missing(cfg, "checkpoint") and cfg.checkpoint not in (None, "")
    if cfg.engine == "ctranslate2":
        if has_checkpoint:
            raise ConfigError("engine=ctranslate2 translates an exported model_dir=DIR, not a "
                              "checkpoint: drop checkpoint=... (export it first with nmt-export "
                              "checkpoint=PATH format=ctranslate2 out_dir=DIR).")
        require(cfg, "model_dir")
    else:
        if cfg.model_dir:
            raise ConfigError(f"model_dir={cfg.model_dir} is read by engine=ctranslate2 only: add "
                              "engine=ctranslate2, or drop model_dir= and give checkpoint=PATH.")
        require(cfg, "checkpoint")
    return cfg


def load_translator(cfg: DictConfig):
    """The translator that ``engine`` names, on ``device``.

    Returns:
        :class:`nmt.inference.translator.Translator` of ``checkpoint`` (``engine=pytorch``) or
        :class:`nmt.extras.ctranslate2.CTranslate2Translator` of ``model_dir``
        (``engine=ctranslate2``; as many threads as torch uses); both translate alike.

    Raises:
        ConfigError, CheckpointError: see the two loaders.
    """
    from nmt.runtime import resolve_device

    device = resolve_device(cfg.device)
    if cfg.engine == "ctranslate2":
        from nmt.extras.ctranslate2 import CTranslate2Translator

        return CTranslate2Translator.from_dir(cfg.model_dir, device)
    from nmt.inference.translator import Translator

    return Translator.from_checkpoint(checkpoint_paths(cfg), device, weights=cfg.weights)


def search_settings(cfg: DictConfig) -> dict:
    """The search keys of ``cfg`` as the plain dict that :func:`nmt.inference.search.translate` takes."""
    return {key: cfg[key] for key in SEARCH_KEYS}
