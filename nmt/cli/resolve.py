"""Print resolved values of the ``nmt-train`` config, one per line (for shell scripts).

    python -m nmt.cli.resolve run_dir data.valid_split data.test_split -- \\
        model=rnn data=multi30k_fr_en

``scripts/run_multi30k.sh`` reads the run directory and the split names this way, so a typo
in its overrides stops it at once with ``nmt-train``'s one-paragraph error (exit status 2).
"""

from __future__ import annotations

import sys

from omegaconf import OmegaConf

from nmt.cli.common import exit_on_user_error
from nmt.config import ConfigError, compose_config


def resolve(keys: list[str], overrides: list[str]) -> list[str]:
    """The values of the dotted ``keys`` in the validated ``nmt-train`` config."""
    cfg = compose_config(overrides)
    values = [OmegaConf.select(cfg, key, default=KeyError) for key in keys]
    for key, value in zip(keys, values, strict=True):
        if value is KeyError:
            raise ConfigError(f"{key} is not a key of the nmt-train config.")
    return [str(value) for value in values]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    return exit_on_user_error("nmt-train", lambda: print(
        "\n".join(resolve(argv[:split], argv[split + 1:]))))


if __name__ == "__main__":
    raise SystemExit(main())
