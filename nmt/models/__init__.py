"""Model builders: ``build_model(model_cfg, src_vocab_size, tgt_vocab_size) -> Seq2Seq``."""

from __future__ import annotations

from nmt.config import ConfigError, validate_model
from nmt.data.vocab import PAD_ID
from nmt.models.base import Attention, DecoderState, Encoded, Seq2Seq, reorder_tensors
from nmt.models.ensemble import Ensemble, EnsembleEncoded, EnsembleState
from nmt.models.rnn import BahdanauRNN, RNNState
from nmt.models.transformer import Transformer, TransformerState


def build_model(model_cfg, src_vocab_size: int, tgt_vocab_size: int) -> Seq2Seq:
    """Build the model named by ``model_cfg.name`` ("transformer" or "rnn").

    Args:
        model_cfg: the ``model`` config section (validated here with
            :func:`nmt.config.validate_model`).
        src_vocab_size, tgt_vocab_size: vocabulary sizes (> 0).

    Returns:
        An untrained :class:`Transformer` or :class:`BahdanauRNN` (fp32, on CPU).

    Raises:
        ConfigError: invalid model config, non-positive vocabulary size, or
            ``tie_embeddings`` with different source and target vocabulary sizes (the one
            model-level check of this; the constructors assume it was done).
    """
    cfg = validate_model(model_cfg)
    for side, size in (("source", src_vocab_size), ("target", tgt_vocab_size)):
        if int(size) <= 0:
            raise ConfigError(f"The {side} vocabulary size is {size}; it must be > 0.")
    if cfg.tie_embeddings and src_vocab_size != tgt_vocab_size:
        raise ConfigError(
            f"model.tie_embeddings=true needs one vocabulary, but the source vocabulary has "
            f"{src_vocab_size} entries and the target {tgt_vocab_size}: set "
            "data.tokenizer.joint=true or model.tie_embeddings=false.")
    pad = PAD_ID
    if cfg.name == "transformer":
        return Transformer(
            src_vocab_size, tgt_vocab_size, d_model=cfg.d_model, heads=cfg.heads,
            ff_dim=cfg.ff_dim, encoder_layers=cfg.encoder_layers,
            decoder_layers=cfg.decoder_layers, norm=cfg.norm, dropout=cfg.dropout,
            attention_dropout=cfg.attention_dropout, activation_dropout=cfg.activation_dropout,
            activation=cfg.activation, tie_embeddings=cfg.tie_embeddings,
            alignment_layer=cfg.alignment_layer, pad_id=pad)
    return BahdanauRNN(
        src_vocab_size, tgt_vocab_size, emb_dim=cfg.emb_dim, encoder_hidden=cfg.encoder_hidden,
        encoder_layers=cfg.encoder_layers, decoder_hidden=cfg.decoder_hidden,
        attention_dim=cfg.attention_dim, output_dim=cfg.output_dim, maxout=cfg.maxout,
        dropout=cfg.dropout, tie_embeddings=cfg.tie_embeddings, pad_id=pad)


__all__ = ["Attention", "BahdanauRNN", "DecoderState", "Encoded", "Ensemble", "EnsembleEncoded", "EnsembleState",
           "RNNState", "Seq2Seq", "Transformer", "TransformerState", "build_model",
           "reorder_tensors"]
