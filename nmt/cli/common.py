"""Shared plumbing of the ``nmt-*`` command-line tools.

Every CLI takes Hydra-style ``key=value`` overrides (``model=rnn train.max_steps=10``),
composes its primary config from ``configs/<config_name>.yaml`` through
:func:`nmt.config.compose_config`, and runs. Usage from a CLI module::

    from nmt.cli.common import run_cli

    USAGE = "nmt-evaluate checkpoint=PATH [split=NAME] [beam_size=5] [out_dir=DIR] ..."

    def _run(cfg: DictConfig) -> int | None:
        ...                       # do the work; return an exit status (None = 0)

    def main(argv: list[str] | None = None) -> int:
        return run_cli(_run, argv, config_name="evaluate", usage=USAGE, validate_fn=_check)

    if __name__ == "__main__":
        raise SystemExit(main())

Behaviour shared by all tools:

* ``-h`` / ``--help`` prints the usage line and the composed config (with any other
  overrides applied, so ``nmt-train model=rnn --help`` shows the RNN defaults) and exits 0.
* A user error -- :class:`nmt.config.ConfigError`, ``nmt.data.corpus.CorpusError``,
  :class:`nmt.training.checkpoint.CheckpointError` -- is printed as one paragraph
  ``<prog>: error: <message>`` on stderr and the tool exits with status 2 (no traceback).
  Any other exception is a bug and propagates with its traceback.
"""

from __future__ import annotations

import sys
import tempfile
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from nmt.config import ConfigError, compose_config, validate, validate_search
from nmt.runtime import tune_malloc

EXIT_USER_ERROR = 2
_DEFAULT = object()


def user_error_types() -> tuple[type[BaseException], ...]:
    """Exception classes that mean "the user must change something" (exit status 2).

    ``CorpusError`` and ``CheckpointError`` are looked up only in modules that are already
    imported: an exception of a class can only exist once its module is loaded, and this
    keeps ``--help`` from importing the data and training packages.
    """
    types: list[type[BaseException]] = [ConfigError]
    for module_name, class_name in (("nmt.data.corpus", "CorpusError"),
                                    ("nmt.training.checkpoint", "CheckpointError")):
        module = sys.modules.get(module_name)
        cls = getattr(module, class_name, None) if module is not None else None
        if isinstance(cls, type) and issubclass(cls, BaseException):
            types.append(cls)
    return tuple(types)


def print_error(prog: str, err: BaseException | str) -> None:
    """Print ``<prog>: error: <message>`` as one wrapped paragraph to stderr."""
    message = " ".join(str(err).split())
    # Wrap at spaces only: paths such as /tmp/pytest-of-x must stay whole for copy-paste.
    print(textwrap.fill(f"{prog}: error: {message}", width=100, break_on_hyphens=False,
                        break_long_words=False), file=sys.stderr)


def check_overrides(argv: Sequence[str]) -> list[str]:
    """Return ``argv`` as a list after checking every item looks like ``key=value``.

    Raises:
        ConfigError: an argument without ``=`` (e.g. a bare file name or ``--beam 5``).
    """
    for arg in argv:
        if arg.startswith("-") or ("=" not in arg and not arg.startswith("~")):
            raise ConfigError(
                f"argument {arg!r} is not an override: arguments are key=value pairs, "
                "e.g. checkpoint=runs/tf/checkpoints/best.pt beam_size=5 (see --help)."
            )
    return list(argv)


def run_cli(run: Callable[[DictConfig], int | None], argv: Sequence[str] | None = None, *,
            config_name: str, usage: str, validate_fn=_DEFAULT, prog: str | None = None) -> int:
    """Parse overrides, compose + validate the config, call ``run(cfg)``; return an exit status.

    Args:
        run: the tool's body; gets the composed config, returns an exit status or None (0).
        argv: command-line arguments without the program name (default ``sys.argv[1:]``).
        config_name: primary config under ``configs/`` (``config``, ``evaluate``, ...).
        usage: one or more lines printed by ``--help`` above the config.
        validate_fn: checker passed to :func:`compose_config`; default
            :func:`nmt.config.validate` for ``config_name="config"``, else no check.
        prog: name used in messages (default: the basename of ``sys.argv[0]``).

    Returns:
        0 on success (or ``run``'s status), 2 on a user error (message on stderr).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    prog = prog or Path(sys.argv[0]).name or config_name
    if validate_fn is _DEFAULT:
        validate_fn = validate if config_name == "config" else None
    if any(a in ("-h", "--help") for a in argv):
        return _print_help(argv, config_name, usage, validate_fn, prog)
    tune_malloc()
    try:
        cfg = compose_config(check_overrides(argv), config_name=config_name, validate_fn=validate_fn)
        status = run(cfg)
    except Exception as err:
        errors = user_error_types()  # run() may have imported the data/training modules
        if not isinstance(err, errors):
            raise
        print_error(prog, err)
        return EXIT_USER_ERROR
    return 0 if status is None else int(status)


def _print_help(argv: list[str], config_name: str, usage: str, validate_fn, prog: str) -> int:
    overrides = [a for a in argv if a not in ("-h", "--help")]
    print(f"usage: {usage.strip()}\n")
    print("Arguments are Hydra overrides key=value (nested keys with dots, e.g. data.root=DIR).")
    try:
        cfg = compose_config(check_overrides(overrides), config_name=config_name, validate_fn=None)
    except ConfigError as err:
        print_error(prog, err)
        return EXIT_USER_ERROR
    print(f"Config (configs/{config_name}.yaml with the overrides given; ??? = required):\n")
    print(OmegaConf.to_yaml(cfg), end="")
    return 0


def resolve_device(name: str):
    """``"auto"`` -> ``cuda`` when available, else ``cpu``; other names pass through.

    Raises:
        ConfigError: ``cuda`` requested but no CUDA device is available.
    """
    import torch

    if name in (None, "", "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if str(name).startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device={name} asked for CUDA, but no CUDA device is available: use device=cpu.")
    try:
        return torch.device(name)
    except RuntimeError:
        raise ConfigError(f"device={name!r} is not a device: use auto, cpu, cuda or cuda:N.") from None


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


SEARCH_KEYS = ("beam_size", "length_penalty", "max_len_a", "max_len_b", "batch_sentences", "n_best")


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


def search_settings(cfg: DictConfig) -> dict:
    """The search keys of ``cfg`` as the plain dict that :func:`nmt.inference.search.translate` takes."""
    return {key: cfg[key] for key in SEARCH_KEYS}
