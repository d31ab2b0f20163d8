"""An nmt Transformer checkpoint -> a Marian directory: :func:`export_marian`.

The export writes nmt's id order as vocab.json (language tags ``<2xx>`` as ``>>xx<<``), so an
exported model imports with the ids it had; a ``data.lang_tag=target`` model's one target tag
becomes ``forced_bos_token_id``. :func:`nmt_to_marian` inverts the import's weight mapping
(:func:`~nmt.extras.tools.marian.importer.marian_to_nmt`).

Errors: :class:`~nmt.config.ConfigError`, one line naming the checkpoint and key, for what
Marian has no place for (:func:`check_exportable`) and for a missing transformers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from nmt.config import ConfigError
from nmt.data.languages import is_multilingual, target_languages
from nmt.data.tokenizer import Tokenizer
from nmt.data.vocab import BOS_ID, EOS_ID, PAD_ID
from nmt.extras.tools.marian.layout import INSTALL_HINT, NMT_TAG, residual_permutation
from nmt.inference.translator import load_for_inference
from nmt.runtime import atomic_path


def nmt_to_marian(sd: dict[str, torch.Tensor], model_cfg: Any) -> dict[str, torch.Tensor]:
    """An nmt Transformer state dict -> ``MarianMTModel``'s.

    The inverse of :func:`~nmt.extras.tools.marian.importer.marian_to_nmt`'s weights: the
    residual stream permuted back, the fused projections split; ids unchanged (nmt's order is
    the exported vocab.json's).
    """
    d = int(model_cfg.d_model)
    inv = torch.argsort(residual_permutation(d))
    out: dict[str, torch.Tensor] = {}

    def read(name: str, src: str, rows: slice = slice(None)) -> None:
        out[f"{name}.weight"] = sd[f"{src}.weight"][rows][:, inv].contiguous()
        out[f"{name}.bias"] = sd[f"{src}.bias"][rows].clone()

    def write(name: str, src: str) -> None:
        out[f"{name}.weight"] = sd[f"{src}.weight"][inv].contiguous()
        out[f"{name}.bias"] = sd[f"{src}.bias"][inv].contiguous()

    tie = bool(model_cfg.tie_embeddings)
    if tie:
        out["model.shared.weight"] = sd["src_embed.weight"][:, inv].contiguous()
    else:
        out["model.encoder.embed_tokens.weight"] = sd["src_embed.weight"][:, inv].contiguous()
        out["model.decoder.embed_tokens.weight"] = sd["tgt_embed.weight"][:, inv].contiguous()
        out["lm_head.weight"] = sd["output_proj.weight"][:, inv].contiguous()
    vocab = sd["tgt_embed.weight"].size(0)
    bias = sd.get("final_logits_bias", torch.zeros(vocab))
    out["final_logits_bias"] = bias.reshape(1, -1).clone()
    sides = (("encoder", int(model_cfg.encoder_layers)), ("decoder", int(model_cfg.decoder_layers)))
    for side, n in sides:
        for i in range(n):
            m, o = f"model.{side}.layers.{i}", f"{side}.{i}"
            for j, x in enumerate("qkv"):
                rows = slice(j * d, (j + 1) * d)
                read(f"{m}.self_attn.{x}_proj", f"{o}.self_attn.qkv_proj", rows)
            write(f"{m}.self_attn.out_proj", f"{o}.self_attn.out_proj")
            write(f"{m}.self_attn_layer_norm", f"{o}.res1.norm")
            if side == "decoder":
                read(f"{m}.encoder_attn.q_proj", f"{o}.cross_attn.q_proj")
                for j, x in enumerate("kv"):
                    rows = slice(j * d, (j + 1) * d)
                    read(f"{m}.encoder_attn.{x}_proj", f"{o}.cross_attn.kv_proj", rows)
                write(f"{m}.encoder_attn.out_proj", f"{o}.cross_attn.out_proj")
                write(f"{m}.encoder_attn_layer_norm", f"{o}.res2.norm")
            read(f"{m}.fc1", f"{o}.ff.linear1")
            write(f"{m}.fc2", f"{o}.ff.linear2")
            write(f"{m}.final_layer_norm", f"{o}.res{3 if side == 'decoder' else 2}.norm")
    return out


def check_exportable(cfg: Any, tokenizer: Tokenizer, checkpoint: str) -> int | None:
    """The forced first token (``forced_bos_token_id``: the target tag of a ``data.lang_tag=
    target`` model with one target language; else None). ConfigError naming ``checkpoint``
    and the key for what Marian has no place for."""
    m = cfg.model
    if m.name != "transformer":
        raise ConfigError(f"{checkpoint}: model.name={m.name}: only a Transformer exports to "
                          "Marian (the Bahdanau RNN has no Marian equivalent).")
    problems = [(key, bad) for key, bad in (
        ("model.norm", m.norm != "post"),
        ("model.encoder_drop_residual", m.encoder_drop_residual is not None),
        ("data.tokenizer.joint", not tokenizer.joint)) if bad]
    if problems:
        key = problems[0][0]
        raise ConfigError(f"{checkpoint}: {key}={OmegaConf.select(cfg, key)} has no Marian "
                          "equivalent (Marian: post-norm layers with residuals, one vocabulary; "
                          "train with model.norm=post, e.g. model=transformer_base).")
    if not (is_multilingual(cfg.data) and cfg.data.lang_tag == "target"):
        return None
    targets = target_languages(cfg.data)
    if len(targets) > 1:
        raise ConfigError(f"{checkpoint}: data.lang_tag=target with target languages "
                          f"{', '.join(targets)}: a Marian model forces one first token "
                          "(forced_bos_token_id); export a data.lang_tag=source model (>>xx<< "
                          "prompts, as OPUS-MT's).")
    return tokenizer.tag_id(targets[0])


def export_marian(checkpoint: str | Path, out_dir: str | Path, max_positions: int = 1024,
                  beam_size: int = 5) -> Path:
    """Write the Transformer ``checkpoint`` as a Marian directory ``out_dir``.

    The directory (built beside ``out_dir``, renamed into place) is what transformers'
    ``AutoTokenizer``/``AutoModelForSeq2SeqLM`` read (then ``generate``): weights
    (:func:`nmt_to_marian`), config.json, generation_config.json (``beam_size`` beams; PAD and
    BOS never generated, a target-side tag forced first, as in nmt), vocab.json in nmt's id
    order, source.spm/target.spm (nmt's models), tokenizer_config.json.

    Errors: ConfigError for an RNN or an option Marian lacks (:func:`check_exportable`), an
    ``out_dir`` with files, transformers missing.
    """
    try:
        from transformers import GenerationConfig, MarianConfig, MarianMTModel
    except ImportError:
        raise ConfigError(f"nmt-export format=marian needs transformers: {INSTALL_HINT}.") from None
    out_dir = Path(out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise ConfigError(f"out_dir={out_dir} already exists and is not an empty directory: "
                          "choose a new out_dir=DIR.")
    model, tokenizer, cfg = load_for_inference(checkpoint, "cpu")
    forced_bos = check_exportable(cfg, tokenizer, str(checkpoint))
    m = cfg.model
    vocab = tokenizer.src_vocab_size
    config = MarianConfig(
        vocab_size=vocab, decoder_vocab_size=vocab, d_model=int(m.d_model),
        encoder_layers=int(m.encoder_layers), decoder_layers=int(m.decoder_layers),
        encoder_attention_heads=int(m.heads), decoder_attention_heads=int(m.heads),
        encoder_ffn_dim=int(m.ff_dim), decoder_ffn_dim=int(m.ff_dim),
        activation_function={"silu": "swish"}.get(str(m.activation), str(m.activation)),
        dropout=float(m.dropout), attention_dropout=float(m.attention_dropout),
        activation_dropout=float(m.activation_dropout), scale_embedding=bool(m.scale_embedding),
        share_encoder_decoder_embeddings=bool(m.tie_embeddings),
        tie_word_embeddings=bool(m.tie_embeddings), max_position_embeddings=max_positions,
        pad_token_id=PAD_ID, eos_token_id=EOS_ID, forced_eos_token_id=EOS_ID,
        decoder_start_token_id=BOS_ID, architectures=["MarianMTModel"])
    hf = MarianMTModel(config)
    missing, unexpected = hf.load_state_dict(nmt_to_marian(model.state_dict(), m), strict=False)
    if unexpected or [k for k in missing if "embed_positions" not in k and "lm_head" not in k
                      and "embed_tokens" not in k]:
        raise ConfigError(f"{checkpoint}: the weights do not fit MarianMTModel "
                          f"(missing {missing[:3]}, unexpected {unexpected[:3]}).")
    hf.generation_config = GenerationConfig(   # a forced tag scores 0, as nmt's (forced.py)
        decoder_start_token_id=BOS_ID, pad_token_id=PAD_ID, eos_token_id=EOS_ID,
        forced_eos_token_id=EOS_ID, forced_bos_token_id=forced_bos,
        bad_words_ids=[[PAD_ID], [BOS_ID]], num_beams=beam_size, max_length=max_positions)
    pieces = tokenizer.src_pieces(range(vocab))
    names = [f">>{mt.group(1)}<<" if (mt := NMT_TAG.match(p)) else p for p in pieces]
    tok_cfg = {"tokenizer_class": "MarianTokenizer", "source_lang": str(cfg.data.src_lang),
               "target_lang": str(cfg.data.tgt_lang), "separate_vocabs": False,
               "model_max_length": max_positions, "unk_token": "<unk>", "eos_token": "</s>",
               "pad_token": "<pad>"}
    src_model, tgt_model = tokenizer.state_dict()["src_model"], tokenizer.state_dict()["tgt_model"]
    try:
        with atomic_path(out_dir, directory=True) as tmp:
            hf.save_pretrained(str(tmp))
            vocab_json = json.dumps({p: i for i, p in enumerate(names)}, ensure_ascii=False,
                                    indent=1)
            (tmp / "vocab.json").write_text(vocab_json, encoding="utf-8")
            (tmp / "source.spm").write_bytes(src_model)
            (tmp / "target.spm").write_bytes(src_model if tgt_model is None else tgt_model)
            (tmp / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=2) + "\n",
                                                       encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"out_dir={out_dir}: cannot write the model ({err.strerror or err}); "
                          "choose a writable out_dir=DIR.") from None
    return out_dir
