"""The models, their configs, and the two calls the rest of nmt makes.

``MODELS`` maps ``model.name`` to the typed config of the ``model`` section and the class it
builds; adding a model means adding a module here and a line to the table (and a
``configs/model/<name>.yaml``): nothing outside ``nmt/models`` branches on the name.
"""

from __future__ import annotations

from omegaconf import DictConfig

from nmt.config import ConfigError, merge_typed
from nmt.data.vocab import PAD_ID
from nmt.models.base import Seq2Seq
from nmt.models.rnn import BahdanauRNN, RNNConfig
from nmt.models.transformer import Transformer, TransformerConfig

MODELS: dict[str, tuple[type, type[Seq2Seq]]] = {
    "transformer": (TransformerConfig, Transformer),
    "rnn": (RNNConfig, BahdanauRNN),
}


def validate_model(section) -> DictConfig:
    """Type- and range-check a ``model`` section (a mapping) -> the typed section.

    Raises ConfigError naming the key, its value and what is allowed: an unknown
    ``model.name``, a mistyped or unknown key, or sizes that cannot work (``d_model`` not
    divisible by ``heads``, zero layers, ...), before any tensor is built.
    """
    name = section.get("name")
    if name not in MODELS:
        raise ConfigError(f"model.name={name!r} is not one of {', '.join(MODELS)}.")
    config, _ = MODELS[name]
    typed = merge_typed(config, section, "model")
    config.check(typed)
    return typed


def build_model(model_cfg, src_vocab_size: int, tgt_vocab_size: int) -> Seq2Seq:
    """An untrained model (fp32, CPU) for a ``model`` section that :func:`validate_model`
    accepted (``tie_embeddings`` needs one vocabulary: ``config.validate`` checks that)."""
    config, model = MODELS[model_cfg["name"]]
    return model(src_vocab_size, tgt_vocab_size, config(**model_cfg), pad_id=PAD_ID)


__all__ = ["MODELS", "BahdanauRNN", "Seq2Seq", "Transformer", "build_model", "validate_model"]
