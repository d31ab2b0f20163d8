"""nmt: neural machine translation with a Bahdanau RNN and a Transformer.

Data flows one way (see ``README.md``): corpus -> SentencePiece -> token batches ->
model (``encode`` / ``decode``) -> label-smoothed training -> search -> sacreBLEU and
alignment heatmaps. The Python API::

    import nmt

    summary = nmt.train(["model=transformer", "train.max_minutes=30", "run_dir=runs/tf"])
    translator = nmt.Translator.from_checkpoint("runs/tf/checkpoints/best.pt")
    result = translator.translate("Ein Hund läuft im Park .", beam_size=5)
    print(result.text)
    nmt.plot_alignment(result)
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["ForcedScore", "Translation", "Translator", "__version__", "plot_alignment", "train"]


def train(overrides: list[str] | tuple[str, ...] = ()) -> dict:
    """Train (or resume) as ``nmt-train`` would with these Hydra overrides; returns the summary.

    The run-directory rules are those of the command line (:mod:`nmt.training.rundir`):
    the same overrides resume, a finished run returns its summary without training.

    Args:
        overrides: e.g. ``["model=rnn", "train.max_minutes=10", "run_dir=runs/rnn"]``.

    Returns:
        The ``summary.json`` contents (steps, best_bleu, train_tokens_per_s, ...).

    Raises:
        ConfigError, CorpusError, CheckpointError: user errors, before the first batch.
    """
    from nmt.config import compose_config
    from nmt.training.trainer import train as run

    return run(compose_config(list(overrides)))


def __getattr__(name: str):
    # The API classes load torch and the models: import them on first use, so that
    # `import nmt` (and every CLI's --help) stays fast.
    if name in ("Translator", "Translation", "ForcedScore", "plot_alignment"):
        from nmt.inference import translator

        return getattr(translator, name)
    raise AttributeError(f"module 'nmt' has no attribute {name!r}")
