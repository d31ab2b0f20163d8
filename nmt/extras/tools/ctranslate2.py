"""CTranslate2 export of a Transformer checkpoint, and the engine that serves it.

    from nmt.extras.tools.ctranslate2 import CTranslate2Translator, export

    export("runs/tf/checkpoints/best.pt", "runs/tf/ct2", quantization="int8")
    translator = CTranslate2Translator.from_dir("runs/tf/ct2")
    result = translator.translate("Ein Hund läuft im Park .", beam_size=5)   # a Translation

CTranslate2 (Klein et al. 2020) is a C++ inference engine for Transformers (int8 weights,
fused kernels, its own beam search): the optional extra ``nmt[ctranslate2]``. :func:`export`
writes our weights into its ``TransformerSpec``:

=================================  ==============================================
ours                               CTranslate2 spec
=================================  ==============================================
``src_embed`` / ``tgt_embed``      ``encoder.embeddings[0]`` / ``decoder.embeddings``
output projection                  ``decoder.projection``
``sinusoidal_positions`` table     ``position_encodings`` (ours: sin/cos interleaved)
``self_attn.qkv_proj``/``out``     ``self_attention.linear[0]`` / ``[1]``
``cross_attn.q/kv/out_proj``       ``attention.linear[0]`` / ``[1]`` / ``[2]``
``resN.norm``, stack norms         ``layer_norm`` (eps 1e-5), ``pre_norm``
``alignment_layer``, ``_heads``    ``alignment_layer``, ``alignment_heads`` (0: all)
=================================  ==============================================

:class:`CTranslate2Translator` decodes with our conventions (batches, scores, length penalty,
per-sentence maximum length; PAD and BOS never produced), so its best translation is the
PyTorch engine's: ``docs/ctranslate2.md`` shows why, and where n-best lists and samples differ.
A multilingual model's source-side language tag is one more source piece, a target-side one
(``data.lang_tag=target``) CTranslate2's ``target_prefix``: ``tgt_lang`` works as in PyTorch.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from nmt.config import ConfigError, to_plain
from nmt.data.tokenizer import Tokenizer
from nmt.inference.search import Hypothesis, length_penalty_factor
from nmt.inference.translator import Translator, TranslatorBase, in_batches, load_for_inference
from nmt.models.transformer import sinusoidal_positions
from nmt.runtime import atomic_path

log = logging.getLogger(__name__)

EXPORT_FILE = "nmt_export.json"
EXPORT_VERSION = 1
INSTALL_HINT = 'pip install "nmt[ctranslate2]" (or pip install "ctranslate2>=4,<5")'

# Beam search: a length penalty of 1e-20 selects CTranslate2's "beam_size * patience ended"
# rule without changing a score (float32(len ** 1e-20) == 1.0): docs/ctranslate2.md.
_RAW_SCORES_ALL_ENDED = 1e-20


class InputTooLong(ConfigError):
    """Sentence ``index`` of a call needs more than the ``positions`` an engine has (an
    ``nmt-export``'s ``max_positions``, EOS included). The message names no file: nmt-serve
    answers 413 and logs the model's path itself."""

    def __init__(self, message: str, index: int, positions: int) -> None:
        super().__init__(message)
        self.index, self.positions = index, positions


def require_ctranslate2():
    """The ``ctranslate2`` module; ConfigError naming the pip command when it is missing."""
    try:
        import ctranslate2
    except ImportError:
        raise ConfigError(f"CTranslate2 is not installed: {INSTALL_HINT}.") from None
    return ctranslate2


def build_spec(model: torch.nn.Module, tokenizer: Tokenizer, model_cfg: DictConfig,
               max_positions: int):
    """A validated ``ctranslate2.specs.TransformerSpec`` holding float32 copies of a
    Transformer's weights (the module docstring's table; ``model`` is never modified), its
    tokenizer's pieces as vocabularies and ``max_positions`` rows of positions."""
    require_ctranslate2()
    from ctranslate2.specs import common_spec, transformer_spec

    if model_cfg.name != "transformer":
        raise ConfigError(f"this checkpoint holds a {model_cfg.name!r} model, and CTranslate2 has "
                          "no Bahdanau RNN: only model=transformer checkpoints export (serve "
                          "this one with engine=pytorch).")
    if model_cfg.encoder_drop_residual is not None:
        raise ConfigError(f"this Transformer has no residual around encoder layer "
                          f"{model_cfg.encoder_drop_residual}'s self-attention "
                          "(model.encoder_drop_residual), which CTranslate2's layers always add: "
                          "serve it with engine=pytorch.")
    # Copies: CTranslate2's int8 quantization scales the arrays in place, and numpy views of
    # CPU float32 tensors would carry that into the model itself.
    weights = {k: np.array(v.detach().float().cpu().numpy(), dtype=np.float32, copy=True)
               for k, v in model.state_dict().items()}
    pre_norm = model_cfg.norm == "pre"
    activation = {"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU,
                  "silu": common_spec.Activation.SWISH}[model_cfg.activation]
    spec = transformer_spec.TransformerSpec.from_config(
        (int(model_cfg.encoder_layers), int(model_cfg.decoder_layers)), int(model_cfg.heads),
        pre_norm=pre_norm, activation=activation,
        alignment_layer=int(model_cfg.alignment_layer) % int(model_cfg.decoder_layers),
        alignment_heads=int(model_cfg.alignment_heads) or int(model_cfg.heads))
    spec.config.layer_norm_epsilon = 1e-5   # torch.nn.LayerNorm's default, ours

    def norm(layer, name: str) -> None:
        layer.gamma, layer.beta = weights[f"{name}.weight"], weights[f"{name}.bias"]

    def linear(layer, name: str) -> None:
        layer.weight = weights[f"{name}.weight"]
        if f"{name}.bias" in weights:
            layer.bias = weights[f"{name}.bias"]

    positions = sinusoidal_positions(max_positions, int(model_cfg.d_model)).numpy()
    enc, dec = spec.encoder, spec.decoder
    enc.embeddings[0].weight = weights["src_embed.weight"]
    enc.position_encodings.encodings = positions
    dec.embeddings.weight = weights["tgt_embed.weight"]
    dec.position_encodings.encodings = positions
    dec.projection.weight = weights.get("output_proj.weight", weights["tgt_embed.weight"])
    if "final_logits_bias" in weights:   # model.final_logits_bias (an imported Marian model's)
        dec.projection.bias = weights["final_logits_bias"]
    enc.scale_embeddings = dec.scale_embeddings = bool(model_cfg.get("scale_embedding", True))
    if pre_norm:
        norm(enc.layer_norm, "encoder_norm")
        norm(dec.layer_norm, "decoder_norm")
    def self_attention(spec_attn, p: str) -> None:
        linear(spec_attn.linear[0], f"{p}.self_attn.qkv_proj")
        linear(spec_attn.linear[1], f"{p}.self_attn.out_proj")
        norm(spec_attn.layer_norm, f"{p}.res1.norm")

    def feed_forward(spec_ffn, p: str, residual: str) -> None:
        linear(spec_ffn.linear_0, f"{p}.ff.linear1")
        linear(spec_ffn.linear_1, f"{p}.ff.linear2")
        norm(spec_ffn.layer_norm, f"{p}.{residual}.norm")

    for i, layer in enumerate(enc.layer):
        self_attention(layer.self_attention, f"encoder.{i}")
        feed_forward(layer.ffn, f"encoder.{i}", "res2")
    for i, layer in enumerate(dec.layer):
        p = f"decoder.{i}"
        self_attention(layer.self_attention, p)
        linear(layer.attention.linear[0], f"{p}.cross_attn.q_proj")
        linear(layer.attention.linear[1], f"{p}.cross_attn.kv_proj")
        linear(layer.attention.linear[2], f"{p}.cross_attn.out_proj")
        norm(layer.attention.layer_norm, f"{p}.res2.norm")
        feed_forward(layer.ffn, p, "res3")
    spec.register_source_vocabulary(tokenizer.src_pieces(range(tokenizer.src_vocab_size)))
    spec.register_target_vocabulary(tokenizer.tgt_pieces(range(tokenizer.tgt_vocab_size)))
    spec.validate()
    return spec


def export(source: str | Path | Translator, out_dir: str | Path, quantization: str = "float32",
           max_positions: int = 1024) -> Path:
    """Write a CTranslate2 model directory of a Transformer checkpoint (``nmt-export``) or an
    in-memory :class:`~nmt.inference.translator.Translator`, built beside ``out_dir`` and
    renamed into place; returns ``out_dir``. ``max_positions``: rows of the positional table,
    the longest source (subwords + EOS) and output + 1 it accepts. A model with
    ``alignment_full_context`` is exported with a warning: CTranslate2 has no full-context
    pass, so its alignments are the causal heads' (``nmt_export.json``'s
    ``alignment.full_context`` records it). ConfigError: an RNN, or an ``out_dir`` that holds
    files or cannot be written."""
    ct2 = require_ctranslate2()
    out_dir = Path(out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise ConfigError(f"out_dir={out_dir} already exists and is not an empty directory: "
                          "choose a new out_dir=DIR.")
    if isinstance(source, Translator):
        model, tokenizer, cfg, checkpoint = source.model, source.tokenizer, source.config, None
    else:
        (model, tokenizer, cfg), checkpoint = load_for_inference(source, "cpu"), str(source)
    spec = build_spec(model, tokenizer, cfg.model, max_positions)
    spec.optimize(quantization=quantization)
    full_context = bool(model.alignment_full_context)
    if full_context:
        log.warning("exporting a model with model.alignment_full_context to CTranslate2, which "
                    "has no full-context pass: its alignments will be the causal heads', not "
                    "the model's (the PyTorch engine reads those)")
    info = {"format": "ctranslate2", "version": EXPORT_VERSION, "checkpoint": checkpoint,
            "quantization": quantization, "max_positions": max_positions,
            "ctranslate2_version": ct2.__version__, "norm": cfg.model.norm,
            "alignment": {"layer": int(cfg.model.alignment_layer) % int(cfg.model.decoder_layers),
                          "heads": int(cfg.model.alignment_heads) or int(cfg.model.heads),
                          "num_heads": int(cfg.model.heads), "full_context": full_context},
            "config": to_plain(cfg)}
    try:
        with atomic_path(out_dir, directory=True) as tmp:
            spec.save(str(tmp))
            tokenizer.save(tmp)
            (tmp / EXPORT_FILE).write_text(json.dumps(info, indent=2, ensure_ascii=False) + "\n",
                                           encoding="utf-8")
            os.chmod(tmp, 0o755)
    except OSError as err:
        raise ConfigError(f"out_dir={out_dir}: cannot write the model ({err.strerror or err}); "
                          "choose a writable out_dir=DIR.") from None
    return out_dir


class CTranslate2Translator(TranslatorBase):
    """An ``nmt-export`` directory behind :class:`~nmt.inference.translator.TranslatorBase`'s
    ``translate`` and ``score``, on ``device`` (cpu or cuda). ``compute_type`` ``"default"``
    keeps the exported quantization; ``intra_threads`` None uses torch's threads; the batches
    of one call run in turn, so ``inter_threads`` 1 is the useful value. ``info`` is
    ``nmt_export.json``, ``max_positions`` the rows of the exported table."""

    all_attention = False      # one alignment per sentence
    epsilon_sampling = False   # no epsilon cut in its sampling

    def __init__(self, model_dir: str | Path, device: str | torch.device = "cpu",
                 compute_type: str = "default", intra_threads: int | None = None,
                 inter_threads: int = 1) -> None:
        require_ctranslate2()
        self.model_dir = Path(model_dir)
        meta = self.model_dir / EXPORT_FILE
        if not meta.is_file():
            raise ConfigError(f"model_dir={self.model_dir}: no {EXPORT_FILE} there, so not a "
                              "directory written by nmt-export.")
        self.info = json.loads(meta.read_text(encoding="utf-8"))
        if self.info.get("version") != EXPORT_VERSION:
            raise ConfigError(f"model_dir={self.model_dir}: export version "
                              f"{self.info.get('version')!r}, this nmt reads {EXPORT_VERSION}; "
                              "export the checkpoint again.")
        try:
            tokenizer = Tokenizer.load(self.model_dir)
        except (FileNotFoundError, ValueError, RuntimeError) as err:
            raise ConfigError(f"model_dir={self.model_dir}: the tokenizer cannot be read ({err}); "
                              "export the checkpoint again.") from None
        super().__init__(tokenizer, OmegaConf.create(self.info["config"]), device)
        if self.device.type not in ("cpu", "cuda"):
            raise ConfigError(f"device={self.device}: CTranslate2 runs on cpu or cuda only.")
        self.max_positions = int(self.info["max_positions"])
        threads = torch.get_num_threads() if intra_threads is None else int(intra_threads)
        self._load_args = dict(device=self.device.type, device_index=self.device.index or 0,
                               compute_type=compute_type, intra_threads=threads,
                               inter_threads=inter_threads)
        self.ct2 = self._load()
        self._src_pieces = tokenizer.src_pieces(range(tokenizer.src_vocab_size))
        self._tgt_pieces = tokenizer.tgt_pieces(range(tokenizer.tgt_vocab_size))
        self._tgt_ids = {piece: i for i, piece in enumerate(self._tgt_pieces)}

    @classmethod
    def from_dir(cls, model_dir: str | Path, device: str | torch.device = "cpu",
                 **kwargs: Any) -> CTranslate2Translator:   # from_checkpoint's counterpart
        return cls(model_dir, device, **kwargs)

    def _load(self):   # a ctranslate2.Translator with the constructor's settings
        try:
            return require_ctranslate2().Translator(str(self.model_dir), **self._load_args)
        except (RuntimeError, ValueError) as err:
            raise ConfigError(f"model_dir={self.model_dir}: CTranslate2 cannot load it on "
                              f"{self.device} with compute_type={self._load_args['compute_type']} "
                              f"({err}).") from None

    def _max_lengths(self, src_ids: Sequence[Sequence[int]], settings: dict) -> list[int]:
        """Per sentence ``floor(a * |x| + b)`` (:func:`nmt.inference.search.max_output_lengths`)."""
        a, b = float(settings["max_len_a"]), int(settings["max_len_b"])
        return [max(0, math.floor(a * float(len(ids) + 1) + b)) for ids in src_ids]

    def hypotheses(self, src_ids, settings, sampling):   # TranslatorBase.hypotheses
        for i, (ids, limit) in enumerate(zip(src_ids, self._max_lengths(src_ids, settings),
                                             strict=True)):
            if len(ids) + 1 > self.max_positions or limit + 1 > self.max_positions:
                raise InputTooLong(
                    f"sentence {i} has {len(ids) + 1} source subwords (with EOS) and may produce "
                    f"{limit} output subwords, beyond the {self.max_positions} positions of this "
                    "export: export it again with a larger max_positions=, or lower max_len_a / "
                    "max_len_b.", i, self.max_positions)
        engine = self.ct2
        if sampling is not None:
            # A fresh translator (new worker threads) makes the samples a function of seed.
            require_ctranslate2().set_random_seed(int(sampling["seed"]))
            engine = self._load()
        return in_batches(src_ids, settings, lambda batch: self._search(engine, batch, settings,
                                                                        sampling))

    def _search(self, engine, batch: list[list[int]], settings: dict, sampling: dict | None
                ) -> list[list[Hypothesis]]:
        """One length-sorted batch (source ids, no EOS, none empty) -> hypotheses per sentence;
        ``engine``: a ``ctranslate2.Translator``. A target-side tag (``settings["first_token"]``)
        is CTranslate2's ``target_prefix``, cut as in ours, the output rescored without it."""
        first = settings.get("first_token")
        prefix = [] if first is None else [self._tgt_pieces[first]]
        limits = [n + len(prefix) for n in self._max_lengths(batch, settings)]
        k, alpha = int(settings["beam_size"]), float(settings["length_penalty"])
        options: dict[str, Any] = dict(
            max_decoding_length=min(max(limits) + 1, self.max_positions), min_decoding_length=0,
            max_input_length=0, return_scores=True, return_end_token=True, return_attention=True,
            **({"target_prefix": [prefix] * len(batch)} if prefix else {}))
        if sampling is not None:
            greedy = sampling["temperature"] == 0
            options.update(beam_size=1, length_penalty=0,
                           sampling_topk=1 if greedy else int(sampling["top_k"]),
                           sampling_topp=float(sampling["top_p"]),
                           sampling_temperature=1.0 if greedy else float(sampling["temperature"]))
            n_keep, rescore_all = 1, not greedy
        elif k == 1:
            options.update(beam_size=1, length_penalty=0)
            n_keep, rescore_all = 1, False
        else:
            # Raw log-probabilities, ranked below with our penalty; n-best lists run on to
            # 2 * beam_size ended hypotheses (docs/ctranslate2.md, "Ending rule").
            patience = 1 if int(settings["n_best"]) == 1 else 2
            options.update(beam_size=k, num_hypotheses=k * patience, patience=patience,
                           length_penalty=_RAW_SCORES_ALL_ENDED)
            n_keep, rescore_all = int(settings["n_best"]), False
        sources = [[self._src_pieces[i] for i in ids] + ["</s>"] for ids in batch]
        results = engine.translate_batch(sources, **options)
        # PAD or BOS, which our search never produces: decode those sentences again without.
        again = [i for i, r in enumerate(results)
                 if any(t in ("<pad>", "<s>") for h in r.hypotheses for t in h)]
        if again:
            redo = engine.translate_batch([sources[i] for i in again], **options,
                                          suppress_sequences=[["<pad>"], ["<s>"]])
            for i, r in zip(again, redo, strict=True):
                results[i] = r
        first_rows = None
        if options["beam_size"] > 1 and self.device.type == "cpu":
            # CTranslate2 4.x beam search on CPU gives batch row p the first step's attention
            # of row p // beam_size; that row (the <s> query) comes from one greedy step.
            first = engine.translate_batch(sources, beam_size=1, max_decoding_length=1,
                                           min_decoding_length=0, max_input_length=0,
                                           return_attention=True)
            first_rows = [np.asarray(r.attention[0][0], dtype=np.float32) for r in first]
        raw: list[list[list[Any]]] = []     # per sentence: [ids, logprob or None, alignment]
        pending = []                        # (sentence, hypothesis) whose score is recomputed
        for b, (result, limit) in enumerate(zip(results, limits, strict=True)):
            s_len = len(batch[b]) + 1
            hyps = []
            # the step (output length with EOS) by which our beam search has k ended
            # hypotheses, given the lengths of CTranslate2's; all of them when fewer
            lengths = sorted(len(t) for t in result.hypotheses)
            ended_by = lengths[k - 1] if len(lengths) >= k else max(lengths, default=0)
            for tokens, score, attention in zip(result.hypotheses, result.scores,
                                                result.attention, strict=True):
                if len(tokens) > ended_by:
                    continue
                ended = bool(tokens) and tokens[-1] == "</s>"
                n = len(tokens) - ended
                exact = ended and n <= limit and not (rescore_all or b in again or prefix)
                n = min(n, limit)   # longer than this sentence allows: cut, EOS forced
                ids = [self._tgt_ids[t] for t in tokens[len(prefix):n]]
                align = np.asarray(attention[len(prefix): n + 1], dtype=np.float32)[:, :s_len]
                if first_rows is not None and not prefix:
                    align[0] = first_rows[b][:s_len]
                hyps.append([ids, float(score) if exact else None, np.ascontiguousarray(align)])
                if not exact:
                    pending.append((b, len(hyps) - 1))
            raw.append(hyps)
        forced = engine.score_batch([sources[b] for b, _ in pending],
                                    [prefix + [self._tgt_pieces[i] for i in raw[b][h][0]]
                                     for b, h in pending],
                                    max_input_length=0)
        for (b, h), f in zip(pending, forced, strict=True):
            raw[b][h][1] = float(sum(f.log_probs[len(prefix):]))   # a tag: given, not scored
        out = []
        for hyps in raw:
            unique: dict[tuple, Hypothesis] = {}    # of equal outputs, the first
            for ids, logprob, align in hyps:
                score = logprob / length_penalty_factor(float(len(ids) + 1 + len(prefix)), alpha)
                unique.setdefault(tuple(ids), Hypothesis(tokens=ids, score=score, alignment=align))
            # sorted is stable: CTranslate2's order on ties
            out.append(sorted(unique.values(), key=lambda h: -h.score)[:n_keep])
        return out

    def forced(self, src_ids, tgt_ids, batch_tokens, given=0):   # TranslatorBase.forced
        for i, (s, t) in enumerate(zip(src_ids, tgt_ids, strict=True)):
            if max(len(s), len(t)) + 1 > self.max_positions:
                raise InputTooLong(f"pair {i} has {len(s) + 1} source and {len(t) + 1} target "
                                   f"subwords (with EOS), beyond the {self.max_positions} "
                                   "positions of this export: export it again with a larger "
                                   "max_positions=.",
                                   i, self.max_positions)
        scored = self.ct2.score_batch(
            [[self._src_pieces[i] for i in s] + ["</s>"] for s in src_ids],
            [[self._tgt_pieces[i] for i in t] for t in tgt_ids],
            max_batch_size=max(int(batch_tokens), 1), batch_type="tokens", max_input_length=0)
        return [(float(sum(r.log_probs[given:])), len(r.log_probs) - given) for r in scored]
