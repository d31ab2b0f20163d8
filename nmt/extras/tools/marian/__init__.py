"""Hugging Face Marian (OPUS-MT) models in and out: ``nmt-import`` / ``nmt-export format=marian``.

    from nmt.extras.tools.marian import export_marian, import_marian

    # a save_pretrained directory (or a Hub name) -> an nmt checkpoint
    import_marian("opus-mt-de-en/", "opus_de_en.pt")
    # -> MarianMTModel.from_pretrained("hf_model/")
    export_marian("runs/tf/checkpoints/best.pt", "hf_model/")

A Marian model (Junczys-Dowmunt et al. 2018; ``transformers``' ``MarianMTModel``) is nmt's
Transformer with options, never a second model class:

==============================  ===========================================================
Marian (config.json, weights)   nmt
==============================  ===========================================================
post-norm, no final LayerNorm   ``model.norm=post`` (no final LayerNorm either)
``activation_function``         ``model.activation``: relu, gelu, ``swish`` = silu
``scale_embedding``             ``model.scale_embedding`` (sqrt(d_model) or 1)
``final_logits_bias`` [1, V]    ``model.final_logits_bias`` (a fixed buffer [V])
embeddings (tied as HF ties)    ``model.tie_embeddings`` (one matrix, else three)
sinusoids [sin | cos]           nmt's interleaved ones: the residual stream permuted
                                (:mod:`~nmt.extras.tools.marian.layout`)
q/k/v_proj, encoder_attn        ``self_attn.qkv_proj`` (fused), ``cross_attn.q_proj``/``kv_proj``
positions from 0                the same
no layernorm_embedding          the same
==============================  ===========================================================

Modules: :mod:`~nmt.extras.tools.marian.importer` (a Marian directory -> an nmt checkpoint;
the vocabulary's mapping), :mod:`~nmt.extras.tools.marian.exporter` (an nmt Transformer -> a
Marian directory), :mod:`~nmt.extras.tools.marian.layout` (what both share).

Errors, one line naming the file and key: :class:`~nmt.config.ConfigError` for what has no
exact equivalent, :class:`~nmt.checkpoint.CheckpointError` for missing, unreadable or misshapen
files. Not mapped: Moses punctuation normalisation (``sacremoses``), separate vocabularies.
Sources: HF ``modeling_marian.py`` / ``tokenization_marian.py`` (transformers 5.x); docs/marian.md.
"""

from nmt.extras.tools.marian.exporter import export_marian
from nmt.extras.tools.marian.importer import import_marian
from nmt.extras.tools.marian.layout import residual_permutation

__all__ = ["export_marian", "import_marian", "residual_permutation"]
