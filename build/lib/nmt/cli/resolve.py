"""Print resolved values of the ``nmt-train`` config, one per line (for shell scripts).

    python -m nmt.cli.resolve run_dir data.valid_split data.test_split -- model=rnn data=multi30k_fr_en

``scripts/run_multi30k.sh`` reads the run directory and the split names this way, so a typo
in its overrides stops it at once with ``nmt-train``'s one-paragraph error (exit status 2).
"""

from __future__ import annotations

import sys

from omegaconf import OmegaConf

from nmt.cli.common import exit_on_user_error
from nmt.config import ConfigError, compose_config


def resolve(keys: list[str], overrides: list[str]) -> list[str]:
    """The values of ``keys`` (dotted) in the validated ``nmt-train`` config with ``overrides``.

    Raises:
        ConfigError: the overrides do not compose or validate, or a key does not exist.
    """
    cfg = compose_config(overrides)
    values = []
    for key in keys:
        value = OmegaConf.select(cfg, key, default=KeyError)
        if value is KeyError:
            raise ConfigError(f"{key} is not a key of the nmt-train config.")
        values.append(str(value))
    return values


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    keys, overrides = argv[:split], argv[split + 1:]

    def run() -> int:
        print("\n".join(resolve(keys, overrides)))
        return 0

    return exit_on_user_error("nmt-train", run)


if __name__ == "__main__":
    raise SystemExit(main())
