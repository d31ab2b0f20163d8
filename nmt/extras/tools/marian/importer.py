"""A Marian directory (save_pretrained's, or a Hub name) -> an nmt checkpoint.

The entry point is :func:`import_marian`.

**The vocabulary.** Marian has two SentencePiece models (source.spm, target.spm) and one joint
``vocab.json`` whose ids are not SentencePiece's (``</s>`` = 0, ``<unk>`` = 1, ``<pad>`` the
padding and decoder start); nmt's models give the model's ids (:mod:`nmt.data.vocab`). The
import rewrites both ModelProtos (:func:`spm_with_pieces`) to one list of pieces, id for id
(``Tokenizer.joint``): ``<pad>, <unk>, <s>, </s>``, vocab.json's order, then the pieces a
model has that vocab.json lacks (OPUS-MT builds it from the segmented corpus). A piece a side
should not emit stays in it UNUSED (segmentation unchanged); text made only of characters a
side lacks is a user-defined piece (``MarianTokenizer`` looks it up in vocab.json). Embedding
rows follow (nmt's ``<s>`` is Marian's decoder start); a row Marian lacks (nmt's ``<pad>``
where Marian's is the decoder start, a piece vocab.json lacks) is zero with the bias
:data:`ABSENT_LOGIT`, so softmax sums are Marian's. ``>>xx<<`` tokens become nmt's language
tags ``<2xx>`` (``tgt_lang=xx``).

Errors, one line naming the file and key: :class:`~nmt.config.ConfigError` for what has no
exact equivalent, :class:`~nmt.checkpoint.CheckpointError` for missing, unreadable or misshapen
files.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import sentencepiece as spm
import torch
from sentencepiece import sentencepiece_model_pb2 as spm_pb2

from nmt.checkpoint import CHECKPOINT_VERSION, CONFIG_VERSION, CheckpointError, save_atomic
from nmt.config import ConfigError, compose_config, to_plain
from nmt.data.languages import LANG_TAG
from nmt.data.tokenizer import Tokenizer
from nmt.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from nmt.extras.tools.marian.layout import (
    INSTALL_HINT,
    MARIAN_CODE,
    NMT_TAG,
    residual_permutation,
)
from nmt.models import build_model
from nmt.runtime import ensure_writable_dir

SPECIALS = ("<pad>", "<unk>", "<s>", "</s>")  # nmt ids 0..3 (nmt.data.vocab)
ABSENT_LOGIT = -100.0   # the bias of a token Marian lacks: e^-100 vanishes beside any real logit
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
SHARED, EMBEDDINGS = "model.shared.weight", ("model.encoder.embed_tokens.weight",
                                             "model.decoder.embed_tokens.weight")
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "silu", "silu": "silu"}
SIZES = {"vocab_size": 58101, "d_model": 1024, "encoder_layers": 12, "decoder_layers": 12,
         "encoder_attention_heads": 16, "decoder_attention_heads": 16, "encoder_ffn_dim": 4096,
         "decoder_ffn_dim": 4096}   # MarianConfig's defaults, for keys a config.json omits
# Keys of older Marian/BART-style config.json files that transformers' MarianMTModel ignores:
# the value it builds; another value asks for a model nmt (and transformers) does not have.
BUILT = {"normalize_before": False, "add_final_layer_norm": False, "normalize_embedding": False,
         "add_bias_logits": False, "static_position_embeddings": True, "layernorm_embedding": False}
_Piece = spm_pb2.ModelProto.SentencePiece


def _own(model: bytes) -> list[str]:   # the pieces SentencePiece ``model`` emits, in id order
    sp = spm.SentencePieceProcessor(model_proto=model)
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not (
        sp.is_control(i) or sp.is_unknown(i) or sp.is_unused(i))]


def _fail(path: Path | str, key: str, why: str) -> ConfigError:
    return ConfigError(f"{path}: {key} {why}")


def _size(cfg: dict, key: str) -> Any:
    """config.json's ``key`` of :data:`SIZES`, MarianConfig's default where it is absent."""
    return cfg.get(key, SIZES[key])



def resolve_source(source: str | Path) -> Path:
    """A local Marian directory, or a Hub name (``Helsinki-NLP/opus-mt-de-en``) downloaded
    with ``huggingface_hub`` where the Hub is reachable; CheckpointError otherwise."""
    path = Path(source)
    if path.is_dir():
        return path
    if path.exists() or str(source).count("/") != 1:
        raise CheckpointError(f"source={source}: no such Marian directory (config.json, weights, "
                              "source.spm, target.spm, vocab.json).")
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(str(source), allow_patterns=[
            "config.json", "*.safetensors", "pytorch_model.bin", "*.spm", "*.json"]))
    except Exception as err:  # noqa: BLE001 - offline, unknown name, no huggingface_hub
        raise CheckpointError(f"source={source}: not a local directory, and the Hugging Face Hub "
                              f"did not give it ({type(err).__name__}: {err}).") from None


def _existing(path: Path) -> Path:
    if not path.is_file():
        raise CheckpointError(f"{path}: missing (a Marian directory as save_pretrained writes it).")
    return path


def _read_json(path: Path) -> dict:
    """A JSON object file of a Marian directory; CheckpointError naming ``path`` otherwise."""
    try:
        data = json.loads(_existing(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{path}: not readable JSON ({err}).") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: holds a JSON {type(data).__name__}, not an object "
                              "(a Marian directory as save_pretrained writes it).")
    return data


def read_spm(path: Path) -> bytes:
    """The bytes of SentencePiece model ``path`` (source.spm, target.spm); CheckpointError
    naming it when it is missing, empty or not a model SentencePiece loads."""
    _existing(path)
    try:
        model = path.read_bytes()
        if spm.SentencePieceProcessor(model_proto=model).get_piece_size() == 0:
            raise ValueError("the file is empty" if not model else "no pieces")
    except Exception as err:  # noqa: BLE001 - OSError, SentencePiece's RuntimeError
        why = " ".join(str(err).split())[:160] or type(err).__name__
        raise CheckpointError(f"{path}: not a SentencePiece model ({why}).") from None
    return model


def read_weights(directory: Path) -> tuple[Path, dict[str, torch.Tensor]]:
    """``(file, weights)``: model.safetensors, else pytorch_model.bin (``weights_only=True``),
    as float32 tensors."""
    for path in (directory / name for name in WEIGHT_FILES):
        if not path.is_file():
            continue
        try:
            if path.suffix == ".safetensors":
                from safetensors.torch import load_file
                weights = load_file(str(path))
            else:
                weights = torch.load(path, map_location="cpu", weights_only=True)
        except ImportError:
            raise ConfigError(f"{path}: reading it needs safetensors: {INSTALL_HINT}.") from None
        except Exception as err:  # noqa: BLE001 - any unreadable file
            raise CheckpointError(f"{path}: not readable weights ({err}).") from None
        tensors = isinstance(weights, dict) and all(
            isinstance(v, torch.Tensor) for v in weights.values())
        if not tensors:
            raise CheckpointError(f"{path}: not a state dict (names -> tensors).")
        return path, {k: v.float() for k, v in weights.items()}
    raise CheckpointError(f"{directory}: no weights ({' or '.join(WEIGHT_FILES)}).")


def check_marian_config(cfg: dict, path: Path) -> None:
    """ConfigError, naming ``path`` (config.json) and the key, for a model nmt cannot hold."""
    archs = cfg.get("architectures") or ["MarianMTModel"]
    if cfg.get("model_type") != "marian" or archs != ["MarianMTModel"]:
        raise _fail(path, "model_type/architectures", f"= {cfg.get('model_type')!r}/{archs}: only "
                    "marian/MarianMTModel imports (format=marian).")
    if ACTIVATIONS.get(cfg.get("activation_function", "gelu")) is None:
        raise _fail(path, "activation_function", f"= {cfg['activation_function']!r} has no nmt "
                    f"equivalent: nmt has {', '.join(ACTIVATIONS)}.")
    for key, built in BUILT.items():
        if key in cfg and bool(cfg[key]) != built:
            raise _fail(path, key, f"= {cfg[key]}: nmt's Transformer (like transformers' "
                        f"MarianMTModel) has no equivalent; only {key}={str(built).lower()} "
                        "imports.")
    for key in SIZES:
        if not (type(_size(cfg, key)) is int and _size(cfg, key) > 0):
            raise _fail(path, key, f"= {cfg[key]!r} must be a positive integer.")
    for key in ("dropout", "attention_dropout", "activation_dropout"):
        if key in cfg and not (type(cfg[key]) in (int, float) and 0 <= cfg[key] < 1):
            raise _fail(path, key, f"= {cfg[key]!r} must be a number in [0, 1).")
    for a, b in (("encoder_attention_heads", "decoder_attention_heads"),
                 ("encoder_ffn_dim", "decoder_ffn_dim")):
        if _size(cfg, a) != _size(cfg, b):
            raise _fail(path, f"{a}/{b}", f"= {_size(cfg, a)}/{_size(cfg, b)}: nmt's encoder and "
                        "decoder layers have one size.")
    d, heads, vocab = (_size(cfg, k) for k in ("d_model", "encoder_attention_heads", "vocab_size"))
    if d % 2 or d % heads:
        raise _fail(path, "d_model", f"= {d} must be even (the sinusoids) and divisible by "
                    f"encoder_attention_heads={heads}.")
    for key in ("pad_token_id", "eos_token_id", "decoder_start_token_id"):
        if cfg.get(key) is not None and not (type(cfg[key]) is int and 0 <= cfg[key] < vocab):
            raise _fail(path, key, f"= {cfg[key]!r} is not an id of the vocabulary "
                        f"(0..{vocab - 1}).")
    dec_vocab = cfg.get("decoder_vocab_size") or vocab
    if dec_vocab != vocab:
        raise _fail(path, "decoder_vocab_size", f"= {dec_vocab} differs from vocab_size={vocab}: "
                    "separate vocabularies do not import yet.")


def spm_with_pieces(model: bytes, pieces: Sequence[str], tags: set[str], absent: set[str]) -> bytes:
    """The SentencePiece ``model`` rewritten with ``pieces`` as its id order: ``SPECIALS`` at
    0..3; its own pieces with their scores and types (UNUSED where vocab.json lacks them:
    ``absent``); ``tags`` (``<2xx>``) and pieces made only of characters it lacks user-defined
    (``MarianTokenizer`` looks such text up in vocab.json); the others UNUSED, never emitted,
    with a score below its own (BPE merges them last, then splits them: segmentation kept)."""
    proto = spm_pb2.ModelProto.FromString(model)
    own = {p.piece: p for p in proto.pieces}
    kept = {_Piece.NORMAL, _Piece.USER_DEFINED, _Piece.BYTE}
    chars = {c for p in proto.pieces if p.type in kept for c in p.piece}
    lowest = min((p.score for p in proto.pieces), default=0.0) - 1.0
    out = []
    for i, piece in enumerate(pieces):
        old = own.get(piece)
        if i < len(SPECIALS):
            kind = _Piece.UNKNOWN if i == UNK_ID else _Piece.CONTROL
            score = old.score if (old is not None and i == UNK_ID) else 0.0
        elif piece in tags or (not (old or piece in absent or NMT_TAG.match(piece))
                               and chars.isdisjoint(piece)):
            kind, score = _Piece.USER_DEFINED, 0.0
        elif old is not None and old.type in kept:
            kind, score = (_Piece.UNUSED if piece in absent else old.type), old.score
        else:
            kind, score = _Piece.UNUSED, lowest
        out.append(_Piece(piece=piece, score=score, type=kind))
    del proto.pieces[:]
    proto.pieces.extend(out)
    spec = proto.trainer_spec
    spec.pad_id, spec.unk_id, spec.bos_id, spec.eos_id = PAD_ID, UNK_ID, BOS_ID, EOS_ID
    spec.pad_piece, spec.unk_piece, spec.bos_piece, spec.eos_piece = SPECIALS
    spec.vocab_size = len(pieces)
    return proto.SerializeToString()


def marian_vocabulary(vocab: dict[str, int], cfg: dict, tok_cfg: dict, path: Path
                      ) -> tuple[list[str], list[int | None]]:
    """``(pieces, rows)`` in nmt's id order: ``rows[k]`` is the Marian id of nmt id k (None:
    nmt's ``<pad>`` when Marian's is the decoder start, a row Marian lacks). ``>>xx<<`` tokens
    are renamed ``<2xx>``. ConfigError naming vocab.json / config.json and the key."""
    size = _size(cfg, "vocab_size")
    by_id: dict[int, str] = {}
    for token, i in vocab.items():
        if type(i) is not int or not token or i in by_id:
            raise _fail(path / "vocab.json", repr(token), f"-> {i!r}: vocab.json maps each "
                        "non-empty token to an integer id of its own.")
        by_id[i] = token
    if sorted(by_id) != list(range(size)):
        raise _fail(path / "vocab.json", "ids", f"are not 0..vocab_size-1={size - 1} "
                    "(config.json's vocab_size).")
    names = {k: tok_cfg.get(f"{k}_token", d) for k, d in
             (("pad", "<pad>"), ("unk", "<unk>"), ("eos", "</s>"))}
    names = {k: v.get("content") if isinstance(v, dict) else v for k, v in names.items()}
    ids = {}
    for key, token in names.items():
        if token not in vocab:
            raise _fail(path / "vocab.json", repr(token), f"(the {key} token) is missing.")
        ids[key] = vocab[token]
    pad, start = cfg.get("pad_token_id"), cfg.get("decoder_start_token_id", cfg.get("pad_token_id"))
    for key, value in (("pad_token_id", pad), ("eos_token_id", cfg.get("eos_token_id"))):
        if value != ids[key[:3]]:
            raise _fail(path / "config.json", key, f"= {value}, but vocab.json gives "
                        f"{names[key[:3]]!r} id {ids[key[:3]]}.")
    if "<s>" in vocab and vocab["<s>"] != start:
        raise _fail(path / "vocab.json", "'<s>'", f"has id {vocab['<s>']}, not the decoder start "
                    f"{start}: nmt's <s> is the decoder start.")
    rows = [pad if pad != start else None, ids["unk"], start, ids["eos"]]
    rows += [i for i in range(size) if i not in set(rows)]
    pieces = list(SPECIALS) + [by_id[i] for i in rows[len(SPECIALS):]]
    pieces = [LANG_TAG.format(m.group(1)) if (m := MARIAN_CODE.match(p)) else p for p in pieces]
    if len(set(pieces)) != len(pieces):
        raise _fail(path / "vocab.json", "tokens", "collide after the renaming >>xx<< -> <2xx>.")
    return pieces, rows


def marian_to_nmt(weights: dict[str, torch.Tensor], cfg: dict, rows: list[int | None],
                  path: Path) -> tuple[dict, dict[str, torch.Tensor]]:
    """``(model section, nmt state dict)`` of a Marian ``weights`` dict read as ``MarianMTModel``
    reads it (the module docstring's table); ``rows`` as :func:`marian_vocabulary`. CheckpointError
    naming ``path`` (the weights file) for a weight missing or of another shape than config.json
    gives, ConfigError for one nmt has no place for."""
    d, ff, vocab = (_size(cfg, k) for k in ("d_model", "encoder_ffn_dim", "vocab_size"))
    layers = (_size(cfg, "encoder_layers"), _size(cfg, "decoder_layers"))
    perm, used = residual_permutation(d), set()
    rows_t = torch.tensor([0 if r is None else r for r in rows])
    absent = torch.tensor([i for i, r in enumerate(rows) if r is None], dtype=torch.long)

    def has(name: str) -> str | None:   # the key under which a file holds weight ``name``
        keys = (name, f"model.{name}", name.removeprefix("model."))
        return next((k for k in keys if k in weights), None)

    def w(name: str, *shape: int) -> torch.Tensor:
        key = has(name)
        if key is None:
            raise CheckpointError(f"{path}: the weight {name} is missing.")
        used.add(key)
        if tuple(weights[key].shape) != shape:
            raise CheckpointError(f"{path}: the weight {key} has shape {list(weights[key].shape)}; "
                                  f"config.json makes it {list(shape)}.")
        return weights[key]

    def vocab_rows(t: torch.Tensor) -> torch.Tensor:   # [V_marian, ...] -> nmt rows, absent: 0
        return t[rows_t].index_fill_(0, absent, 0.0)

    # As transformers ties them: tie_word_embeddings ties the head to the decoder's embedding
    # and, with share_encoder_decoder_embeddings, all three to model.shared; else each module
    # reads its own (model.shared where a file lacks it). nmt: one matrix if all are equal.
    share, tied = (bool(cfg.get(k, True)) for k in ("share_encoder_decoder_embeddings",
                                                    "tie_word_embeddings"))
    if share and tied:
        enc = dec = head = w(SHARED, vocab, d)
    else:
        enc, dec = (w(n if has(n) or not share else SHARED, vocab, d) for n in EMBEDDINGS)
        head = dec if tied else w("lm_head.weight", vocab, d)
    used.update((SHARED, *EMBEDDINGS, "lm_head.weight"))   # copies in some files
    tie = torch.equal(enc, dec) and torch.equal(dec, head)
    sd: dict[str, torch.Tensor] = {"src_embed.weight": vocab_rows(enc)[:, perm]}
    sd["tgt_embed.weight"] = sd["src_embed.weight"] if tie else vocab_rows(dec)[:, perm]
    if not tie:
        sd["output_proj.weight"] = vocab_rows(head)[:, perm]
    bias = vocab_rows(w("final_logits_bias", 1, vocab)[0]) if has("final_logits_bias") else \
        torch.zeros(len(rows))
    bias[absent] = ABSENT_LOGIT
    if bool(bias.any()):
        sd["final_logits_bias"] = bias

    def read(name: str, out: int = d) -> dict[str, torch.Tensor]:   # a Linear reading the
        return {"weight": w(f"{name}.weight", out, d)[:, perm], "bias": w(f"{name}.bias", out)}

    def write(name: str, *cols: int) -> dict[str, torch.Tensor]:    # a Linear writing it, or a
        return {"weight": w(f"{name}.weight", d, *cols)[perm],         # LayerNorm (no cols)
                "bias": w(f"{name}.bias", d)[perm]}

    def put(prefix: str, parts: dict[str, torch.Tensor]) -> None:
        sd.update({f"{prefix}.{k}": v.contiguous() for k, v in parts.items()})

    def fused(names: Sequence[str]) -> dict[str, torch.Tensor]:
        parts = [read(n) for n in names]
        return {k: torch.cat([p[k] for p in parts]) for k in ("weight", "bias")}

    for side, n in zip(("encoder", "decoder"), layers, strict=True):
        for i in range(n):
            m, o = f"model.{side}.layers.{i}", f"{side}.{i}"
            put(f"{o}.self_attn.qkv_proj", fused([f"{m}.self_attn.{x}_proj" for x in "qkv"]))
            put(f"{o}.self_attn.out_proj", write(f"{m}.self_attn.out_proj", d))
            put(f"{o}.res1.norm", write(f"{m}.self_attn_layer_norm"))
            if side == "decoder":
                put(f"{o}.cross_attn.q_proj", read(f"{m}.encoder_attn.q_proj"))
                put(f"{o}.cross_attn.kv_proj", fused([f"{m}.encoder_attn.{x}_proj" for x in "kv"]))
                put(f"{o}.cross_attn.out_proj", write(f"{m}.encoder_attn.out_proj", d))
                put(f"{o}.res2.norm", write(f"{m}.encoder_attn_layer_norm"))
            put(f"{o}.ff.linear1", read(f"{m}.fc1", ff))
            put(f"{o}.ff.linear2", write(f"{m}.fc2", ff))
            put(f"{o}.res{3 if side == 'decoder' else 2}.norm", write(f"{m}.final_layer_norm"))
    extra = [k for k in weights if k not in used and "embed_positions" not in k]
    if extra:
        raise _fail(path, "weights", f"{extra[:4]} have no place in nmt's Transformer "
                    "(e.g. layernorm_embedding, a final LayerNorm).")
    model = {"d_model": d, "heads": _size(cfg, "encoder_attention_heads"),
             "ff_dim": ff, "encoder_layers": layers[0],
             "decoder_layers": layers[1], "norm": "post",
             "dropout": float(cfg.get("dropout", 0.1)),
             "attention_dropout": float(cfg.get("attention_dropout", 0.0)),
             "activation_dropout": float(cfg.get("activation_dropout", 0.0)),
             "activation": ACTIVATIONS[cfg.get("activation_function", "gelu")],
             "tie_embeddings": tie, "scale_embedding": bool(cfg.get("scale_embedding", False)),
             "final_logits_bias": "final_logits_bias" in sd}
    return model, sd


def fine_tune_overrides(model: dict) -> list[str]:
    """The ``model.*`` overrides that make ``model=transformer`` this model section (what
    ``nmt-train train.init_from=CKPT`` needs: fine-tuning keeps the architecture)."""
    base = to_plain(compose_config(["model=transformer"], validate_fn=None).model)
    return [f"model.{k}={str(v).lower() if isinstance(v, bool) else v}"
            for k, v in model.items() if base.get(k) != v]


def import_marian(source: str | Path, out: str | Path, src_lang: str | None = None,
                  tgt_lang: str | None = None) -> tuple[Path, list[str]]:
    """Read a Marian directory (or Hub name) ``source`` and write the nmt checkpoint ``out``
    (:func:`nmt.checkpoint.save_atomic`: whole or not at all); returns ``(out, fine-tuning
    overrides)``. The languages default to tokenizer_config.json's ``source_lang``/``target_lang``
    (else ``src``/``tgt``); a multi-target model's directions are its ``>>xx<<`` tokens. Errors:
    the module docstring's; ``out`` a directory or not writable: ConfigError before any work."""
    out = Path(out)
    if out.is_dir():
        raise ConfigError(f"out={out} is a directory: give the checkpoint file, e.g. "
                          f"out={out / 'model.pt'}.")
    ensure_writable_dir(out.parent, "out")
    directory = resolve_source(source)
    cfg_path = directory / "config.json"
    cfg = _read_json(cfg_path)
    check_marian_config(cfg, cfg_path)
    tok_path, gen_path = directory / "tokenizer_config.json", directory / "generation_config.json"
    tok_cfg = _read_json(tok_path) if tok_path.is_file() else {}
    gen_cfg = _read_json(gen_path) if gen_path.is_file() else {}
    for path, settings in ((cfg_path, cfg), (gen_path, gen_cfg)):
        if settings.get("forced_bos_token_id") is not None:   # nmt-export's one-target-tag model
            raise _fail(path, "forced_bos_token_id", f"= {settings['forced_bos_token_id']}: a "
                        "forced first token does not import (nmt forces one only in a "
                        "multilingual model).")
    if tok_cfg.get("separate_vocabs"):
        raise _fail(tok_path, "separate_vocabs", "= true: separate vocabularies do not import yet.")
    vocab = _read_json(directory / "vocab.json")
    spms = [read_spm(directory / f"{side}.spm") for side in ("source", "target")]
    pieces, rows = marian_vocabulary(vocab, cfg, tok_cfg, directory)
    tags = {p for p in pieces if NMT_TAG.match(p)}
    absent = list(dict.fromkeys(p for m in spms for p in _own(m) if p not in set(pieces)))
    pieces, rows = pieces + absent, rows + [None] * len(absent)
    models = [spm_with_pieces(m, pieces, tags if side == "source" else set(), set(absent))
              for side, m in zip(("source", "target"), spms, strict=True)]
    src = src_lang or tok_cfg.get("source_lang") or "src"
    tgt_langs = sorted(NMT_TAG.match(t).group(1) for t in tags)
    tgt = tgt_lang or (tgt_langs[0] if tgt_langs else tok_cfg.get("target_lang") or "tgt")
    try:
        tokenizer = Tokenizer(models[0], None if models[0] == models[1] else models[1],
                              {"type": "marian", "vocab_size": len(pieces), "joint": True,
                               "src_lang": src, "tgt_lang": tgt, "model": str(source)})
    except (RuntimeError, ValueError) as err:   # vocab.json's pieces SentencePiece refuses
        raise CheckpointError(
            f"{directory / 'vocab.json'}: its pieces do not load ({err}).") from None
    weights_file, weights = read_weights(directory)
    model, sd = marian_to_nmt(weights, cfg, rows, weights_file)
    overrides = [f"model.{k}={v}" for k, v in model.items()]
    overrides += [f"data.src_lang={src}", f"data.tgt_lang={tgt}", "data.tokenizer.joint=true",
                  f"data.tokenizer.vocab_size={len(pieces)}"]
    if len(tgt_langs) > 1:
        overrides += ["data.pairs=[" + ",".join(f"{src}-{t}" for t in tgt_langs) + "]",
                      "data.lang_tag=source"]
    config = compose_config(overrides)
    net = build_model(config.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)
    net.load_state_dict(sd)
    try:
        save_atomic({"version": CHECKPOINT_VERSION, "config_version": CONFIG_VERSION,
                     "config": to_plain(config), "tokenizer": tokenizer.state_dict(),
                     "model": net.state_dict(), "step": 0, "epoch": 0, "batch_in_epoch": 0,
                     "valid_bleu": None,
                     "imported_from": {"format": "marian", "source": str(source)}}, out)
    except OSError as err:
        raise ConfigError(f"out={out}: cannot write the checkpoint ({err.strerror or err}); "
                          "choose a writable out=PATH.") from None
    return out, fine_tune_overrides(model)

