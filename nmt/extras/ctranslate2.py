"""CTranslate2 export of a Transformer checkpoint, and a translator that serves it.

    from nmt.extras.ctranslate2 import CTranslate2Translator, export_ctranslate2

    export_ctranslate2("runs/tf/checkpoints/best.pt", "runs/tf/ct2", quantization="int8")
    translator = CTranslate2Translator.from_dir("runs/tf/ct2")
    result = translator.translate("Ein Hund läuft im Park .", beam_size=5)   # a Translation

CTranslate2 (Klein et al. 2020, https://github.com/OpenNMT/CTranslate2) is a C++ inference
engine for Transformers: int8 / float16 weights, fused kernels, its own beam search. This
module is the optional extra ``nmt[ctranslate2]`` (``ctranslate2>=4,<5``); nothing else in
nmt imports it.

**Export** (:func:`export_ctranslate2`, ``nmt-export``) builds the model through
CTranslate2's Python spec API (``ctranslate2.specs.TransformerSpec``), weight by weight:

==========================================  ================================================
ours                                        CTranslate2 spec
==========================================  ================================================
``src_embed`` / ``tgt_embed`` (x sqrt(d))   ``encoder.embeddings[0]`` / ``decoder.embeddings``
                                            (``scale_embeddings``, the same sqrt(d))
output projection (tied or not, no bias)    ``decoder.projection``
sinusoid, sin/cos *interleaved*             ``position_encodings.encodings`` = our table,
(``sinusoidal_positions``)                  ``max_positions`` rows (CTranslate2's own
                                            sinusoid puts all sines before all cosines)
``self_attn.qkv_proj`` (fused [3d, d])      ``self_attention.linear[0]``; ``out_proj``: ``[1]``
``cross_attn.q_proj`` / ``kv_proj``         ``attention.linear[0]`` / ``[1]``; ``out_proj``:
                                            ``[2]``
``res1`` / ``res2`` (/ ``res3``) LayerNorm  ``self_attention`` / ``attention`` / ``ffn``
                                            ``.layer_norm`` (eps 1e-5, torch's)
``encoder_norm`` / ``decoder_norm``         ``layer_norm`` of each stack (pre-norm only)
``model.norm``                              ``pre_norm`` (post-norm: no final LayerNorm)
``model.activation`` relu / gelu (erf)      ``Activation.RELU`` / ``Activation.GELU``
``alignment_layer``, mean over all heads    ``alignment_layer`` (counted from 0),
(``Transformer.decode``)                    ``alignment_heads`` = all heads (averaged)
==========================================  ================================================

The directory then holds CTranslate2's ``model.bin``, ``config.json`` and vocabulary (our
SentencePiece pieces in id order, ``<pad>`` 0, ``<unk>`` 1, ``<s>`` 2, ``</s>`` 3), our
SentencePiece model(s) (``spm.model``, or ``src.model`` + ``tgt.model``, with
``tokenizer.json``: :meth:`nmt.data.tokenizer.Tokenizer.save`) and ``nmt_export.json``
(the checkpoint's training config and what the export chose), so the directory alone
translates. Only the Transformer exports: CTranslate2 has no Bahdanau RNN.

**Decoding** (:class:`CTranslate2Translator`) keeps our conventions (:mod:`nmt.inference.search`):

* Batches: the same length-sorted batches as the PyTorch engine
  (:func:`nmt.inference.search.in_batches`), one ``translate_batch`` call each.
* Greedy search gives our outputs: the same argmax path, the same scores (natural-log sums
  over the full vocabulary, EOS included, divided by our length penalty) and alignments
  (``return_attention``: the alignment layer's cross-attention, mean over heads, one row
  per output token and EOS). PAD and BOS, which our search never produces, are not
  suppressed up front (that would renormalise CTranslate2's log-probabilities): a sentence
  whose output holds one is decoded again with them suppressed and rescored.
* Length penalty: CTranslate2 divides a finished hypothesis' log-probability by
  ``|y| ** alpha``; ours is GNMT's ``((5 + |y|) / 6) ** alpha`` (Wu et al. 2016), and
  CTranslate2 has no option for it. So beam search asks CTranslate2 for the finished
  hypotheses with raw log-probabilities (``length_penalty=1e-20``: a factor of exactly 1,
  and without CTranslate2's early exit of ``length_penalty=0``) and ranks them here with
  ours. CTranslate2's ending rule is ours (EOS among the ``beam_size`` best candidates of a
  step ends a hypothesis; a sentence ends when ``beam_size`` have ended), but where more
  than ``beam_size`` end at once it keeps the ``beam_size`` best by raw log-probability
  while ours ranks them all. The best hypothesis survives that cut (a longer hypothesis
  ranks first only with the best raw score of its step, and at most ``beam_size - 1``
  ended earlier), so the 1-best output is ours; for n-best lists CTranslate2 runs on to
  ``2 * beam_size`` ended hypotheses (``patience=2``, slower) and those that ended after
  our last step are dropped, which recovers ours unless ``2 * beam_size`` later ones beat
  an early one on raw log-probability.
* Maximum length: ours is per sentence, ``floor(a * |x| + b)`` tokens before a forced EOS;
  CTranslate2's ``max_decoding_length`` is per batch and ends a hypothesis at the limit
  without EOS. The batch decodes to its longest limit + 1, and an output longer than its
  sentence's limit is cut there and given EOS, its score recomputed by forced decoding
  (``score_batch``): exact for greedy search and sampling; for beam search the best of
  CTranslate2's cut hypotheses, which need not be the best of our forced-EOS beams.
* CTranslate2 4.x beam search on CPU returns the first step's attention of the wrong
  sentence (batch row p gets row p // beam_size); that row (the ``<s>`` query, the same
  for all beams of a sentence) is taken from one extra greedy step.
* Sampling maps to ``sampling_topk`` / ``sampling_topp`` / ``sampling_temperature`` with
  ``ctranslate2.set_random_seed(seed)``: CTranslate2's filters of those names and its random
  generator, so the samples are reproducible but not the PyTorch engine's (temperature 0 is
  greedy search on both; a fresh ``ctranslate2.Translator`` per call restarts the generator). Scores are recomputed by forced decoding (the unfiltered,
  temperature-1 log-likelihood, as ours).
* :meth:`CTranslate2Translator.score` (``loss`` / ``ppl`` of references) is
  ``score_batch``. Every layer's and head's attention (``return_attention=True``,
  ``nmt-evaluate attention=all``) is not available: CTranslate2 returns one alignment.
* Positions: sources and outputs must fit the exported table (``max_positions``, checked
  before decoding with a :class:`nmt.config.ConfigError`); nothing is truncated.
"""

from __future__ import annotations

import functools
import json
import math
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from nmt.config import ConfigError
from nmt.data.tokenizer import Tokenizer
from nmt.inference.search import (
    Hypothesis,
    batch_limits,
    check_sampling_args,
    in_batches,
    length_penalty_factor,
)
from nmt.inference.translator import (
    ForcedScore,
    Translation,
    make_translations,
    search_settings,
)

EXPORT_FILE = "nmt_export.json"
EXPORT_VERSION = 1
QUANTIZATIONS = ("float32", "int8")
INSTALL_HINT = 'pip install "nmt[ctranslate2]" (or pip install "ctranslate2>=4,<5")'

# Beam search: CTranslate2 ends a sentence when its best beam has ended and `num_hypotheses`
# hypotheses are done if the length penalty is 0, and when `beam_size * patience` hypotheses
# have ended otherwise (our rule for patience 1). A penalty of 1e-20 chooses the second rule
# without changing a score: float32(len ** 1e-20) == 1.0 for every length.
_RAW_SCORES_ALL_ENDED = 1e-20


def require_ctranslate2():
    """Import and return the ``ctranslate2`` module.

    Raises:
        ConfigError: it is not installed (names the pip command).
    """
    try:
        import ctranslate2
    except ImportError:
        raise ConfigError(f"CTranslate2 is not installed: {INSTALL_HINT}.") from None
    return ctranslate2


@functools.lru_cache(maxsize=1)
def _export_defaults() -> dict:
    """``quantization`` and ``max_positions`` of ``configs/export.yaml`` (composed once)."""
    from nmt.config import compose_config

    cfg = compose_config([], config_name="export", validate_fn=None)
    return {"quantization": cfg.quantization, "max_positions": cfg.max_positions}


# --------------------------------------------------------------------------- export
def check_export_settings(quantization: str, max_positions: int) -> None:
    """Raise :class:`ConfigError` unless ``quantization`` is one of :data:`QUANTIZATIONS` and
    ``max_positions`` >= 2."""
    if quantization not in QUANTIZATIONS:
        raise ConfigError(f"quantization={quantization!r} is not one of "
                          f"{', '.join(QUANTIZATIONS)}: float32 keeps the weights as trained, "
                          "int8 stores 8-bit weights (smaller, faster on CPU).")
    if isinstance(max_positions, bool) or not isinstance(max_positions, int) or max_positions < 2:
        raise ConfigError(f"max_positions={max_positions!r} must be an integer >= 2: the rows "
                          "of the positional table, i.e. the longest source (subwords + EOS) "
                          "and output (+ 1) the exported model accepts.")


def build_spec(model: torch.nn.Module, tokenizer: Tokenizer, model_cfg: DictConfig,
               max_positions: int):
    """A validated ``ctranslate2.specs.TransformerSpec`` holding ``model``'s weights.

    The mapping is the table of the module docstring. Weights are copied to float32 numpy
    arrays (``model`` is never modified); quantization happens later (``spec.optimize``).

    Args:
        model: a :class:`nmt.models.transformer.Transformer` (eval mode, any device).
        tokenizer: its tokenizer; the pieces in id order become the vocabularies.
        model_cfg: its ``model`` config (``name`` must be ``transformer``).
        max_positions: rows of the positional table written into the spec.

    Raises:
        ConfigError: CTranslate2 is missing, or the model is not a Transformer.
    """
    require_ctranslate2()
    from ctranslate2.specs import common_spec, transformer_spec

    from nmt.models.transformer import sinusoidal_positions

    _check_transformer(model_cfg)
    # Copies: CTranslate2's int8 quantization scales the arrays in place, and numpy views of
    # CPU float32 tensors would carry that into the model itself.
    weights = {k: np.array(v.detach().float().cpu().numpy(), dtype=np.float32, copy=True)
               for k, v in model.state_dict().items()}
    pre_norm = model_cfg.norm == "pre"
    activation = {"relu": common_spec.Activation.RELU,
                  "gelu": common_spec.Activation.GELU}[model_cfg.activation]
    spec = transformer_spec.TransformerSpec.from_config(
        (int(model_cfg.encoder_layers), int(model_cfg.decoder_layers)), int(model_cfg.heads),
        pre_norm=pre_norm, activation=activation,
        alignment_layer=int(model_cfg.alignment_layer) % int(model_cfg.decoder_layers),
        alignment_heads=int(model_cfg.heads))
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


def _check_transformer(model_cfg: DictConfig) -> None:
    if model_cfg.name != "transformer":
        raise ConfigError(
            f"this checkpoint holds a {model_cfg.name!r} model, and CTranslate2 has no Bahdanau "
            "RNN (its encoder-decoders are Transformers): only model=transformer checkpoints "
            "export. Serve this model with nmt-translate / nmt-evaluate as they are "
            "(engine=pytorch), or train a Transformer (nmt-train model=transformer).")


def export_ctranslate2(checkpoint: str | Path, out_dir: str | Path, quantization: str | None = None,
                       max_positions: int | None = None) -> Path:
    """Write a CTranslate2 model directory for a Transformer checkpoint (``nmt-export``).

    Args:
        checkpoint: a checkpoint written by ``nmt-train`` or ``nmt-average``.
        out_dir: the new directory (it must not exist, or be empty).
        quantization: ``float32`` or ``int8`` weights (None: ``configs/export.yaml``).
        max_positions: rows of the exported positional table: the longest source
            (subwords + EOS) and the longest output + 1 the model accepts (None:
            ``configs/export.yaml``).

    Returns:
        ``out_dir`` as a :class:`Path`.

    Raises:
        ConfigError: CTranslate2 missing, an RNN checkpoint, bad settings, or an ``out_dir``
            that holds files or cannot be written.
        CheckpointError: an unreadable checkpoint.
    """
    from nmt.inference.loader import load_for_inference

    quantization, max_positions = _export_settings(quantization, max_positions)
    _check_out_dir(Path(out_dir))
    model, tokenizer, cfg = load_for_inference(checkpoint, "cpu")
    return export_model(model, tokenizer, cfg, out_dir, quantization, max_positions,
                        source=str(checkpoint))


def _export_settings(quantization: str | None, max_positions: int | None) -> tuple[str, int]:
    defaults = _export_defaults()
    quantization = defaults["quantization"] if quantization is None else quantization
    max_positions = defaults["max_positions"] if max_positions is None else max_positions
    check_export_settings(quantization, max_positions)
    return quantization, max_positions


def _check_out_dir(out_dir: Path) -> None:
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise ConfigError(f"out_dir={out_dir} already exists and is not an empty directory: "
                          "choose a new out_dir=DIR (or remove the old export first).")


def export_model(model: torch.nn.Module, tokenizer: Tokenizer, cfg: DictConfig,
                 out_dir: str | Path, quantization: str | None = None,
                 max_positions: int | None = None, source: str | None = None) -> Path:
    """Write a CTranslate2 model directory for a model in memory (:func:`export_ctranslate2`
    after loading; ``scripts/bench_decode.py`` exports an untrained model with it).

    The directory is built in a temporary sibling and renamed into place, so it is either
    complete or absent.

    Args:
        model: a :class:`nmt.models.transformer.Transformer`.
        tokenizer: its tokenizer.
        cfg: its training config (``model`` section used; all of it saved with the export).
        out_dir, quantization, max_positions: as :func:`export_ctranslate2`.
        source: where the weights came from (recorded as ``checkpoint`` in ``nmt_export.json``).

    Returns:
        ``out_dir`` as a :class:`Path`.

    Raises:
        ConfigError: see :func:`export_ctranslate2`.
    """
    quantization, max_positions = _export_settings(quantization, max_positions)
    ct2 = require_ctranslate2()
    out_dir = Path(out_dir)
    _check_out_dir(out_dir)
    _check_transformer(cfg.model)
    spec = build_spec(model, tokenizer, cfg.model, max_positions)
    spec.optimize(quantization=quantization)
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    except OSError as err:
        raise ConfigError(f"out_dir={out_dir}: cannot write there ({err.strerror or err}); "
                          "choose a writable out_dir=DIR.") from None
    try:
        spec.save(str(tmp))
        tokenizer.save(tmp)
        info = {
            "format": "ctranslate2", "version": EXPORT_VERSION, "checkpoint": source,
            "quantization": quantization, "max_positions": max_positions,
            "ctranslate2_version": ct2.__version__, "norm": cfg.model.norm,
            "alignment": {"layer": int(cfg.model.alignment_layer) % int(cfg.model.decoder_layers),
                          "heads": "mean of all", "num_heads": int(cfg.model.heads)},
            "config": OmegaConf.to_container(cfg, resolve=True),
        }
        (tmp / EXPORT_FILE).write_text(json.dumps(info, indent=2, ensure_ascii=False) + "\n",
                                       encoding="utf-8")
        os.chmod(tmp, 0o755)
        if out_dir.exists():
            out_dir.rmdir()
        os.replace(tmp, out_dir)
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ConfigError(f"out_dir={out_dir}: cannot write the model ({err.strerror or err}); "
                          "choose a writable out_dir=DIR.") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


# ----------------------------------------------------------------------- translator
def _our_last_step(lengths: Sequence[int], beam_size: int) -> int:
    """The step (output length incl. EOS) by which our beam search has ``beam_size`` ended
    hypotheses, given the lengths of CTranslate2's ended ones; all of them when fewer."""
    ordered = sorted(lengths)
    return ordered[beam_size - 1] if len(ordered) >= beam_size else max(ordered, default=0)


def _ct2_device(device: str | torch.device) -> tuple[str, int, torch.device]:
    """``"cpu"`` / ``"cuda"`` / ``"cuda:N"`` -> (CTranslate2 device, index, torch device)."""
    device = torch.device(device)
    if device.type not in ("cpu", "cuda"):
        raise ConfigError(f"device={device}: CTranslate2 runs on cpu or cuda only.")
    return device.type, device.index or 0, device


class CTranslate2Translator:
    """A CTranslate2 model directory (``nmt-export``) behind :class:`nmt.Translator`'s surface.

    ``translate``, ``score``, ``search_settings`` and ``results`` take and return what
    :class:`nmt.inference.translator.Translator`'s do, so :func:`nmt.evaluation.evaluate.evaluate_split`,
    ``nmt-translate`` and ``nmt-evaluate`` use either engine alike. What CTranslate2 maps
    exactly and where it differs: the module docstring.

    Args:
        model_dir: a directory written by :func:`export_ctranslate2`.
        device: ``"cpu"``, ``"cuda"``, ``"cuda:N"`` (or a ``torch.device``).
        compute_type: CTranslate2's ``compute_type``; ``"default"`` keeps the exported
            quantization.
        intra_threads: threads per translation (None: ``torch.get_num_threads()``, the
            PyTorch engine's).
        inter_threads: translations run in parallel (batches of one call run one by one
            here, so 1 is the useful value).

    Attributes:
        tokenizer: the exported :class:`nmt.data.tokenizer.Tokenizer`.
        config: the training config saved with the checkpoint (``DictConfig``).
        info: ``nmt_export.json`` (checkpoint, quantization, max_positions, ...).
        device: a ``torch.device``.
        max_positions: rows of the exported positional table.

    Raises:
        ConfigError: CTranslate2 missing, or ``model_dir`` not an ``nmt-export`` directory.
    """

    def __init__(self, model_dir: str | Path, device: str | torch.device = "cpu",
                 compute_type: str = "default", intra_threads: int | None = None,
                 inter_threads: int = 1) -> None:
        require_ctranslate2()
        self.model_dir = Path(model_dir)
        meta = self.model_dir / EXPORT_FILE
        if not meta.is_file():
            raise ConfigError(f"model_dir={self.model_dir}: no {EXPORT_FILE} there, so not a "
                              "directory written by nmt-export; export one with nmt-export "
                              f"checkpoint=PATH format=ctranslate2 out_dir={self.model_dir}.")
        self.info = json.loads(meta.read_text(encoding="utf-8"))
        if self.info.get("version") != EXPORT_VERSION:
            raise ConfigError(f"model_dir={self.model_dir}: export version "
                              f"{self.info.get('version')!r}, this nmt reads {EXPORT_VERSION}; "
                              "export the checkpoint again with this nmt.")
        try:
            self.tokenizer = Tokenizer.load(self.model_dir)
        except (FileNotFoundError, ValueError, RuntimeError) as err:
            raise ConfigError(f"model_dir={self.model_dir}: the tokenizer cannot be read ({err}); "
                              "export the checkpoint again.") from None
        self.config = OmegaConf.create(self.info["config"])
        self.max_positions = int(self.info["max_positions"])
        ct2_device, index, self.device = _ct2_device(device)
        threads = torch.get_num_threads() if intra_threads is None else int(intra_threads)
        self._load_args = dict(device=ct2_device, device_index=index, compute_type=compute_type,
                               intra_threads=threads, inter_threads=inter_threads)
        self.ct2 = self._load()
        self._src_pieces = self.tokenizer.src_pieces(range(self.tokenizer.src_vocab_size))
        tgt = self.tokenizer.tgt_pieces(range(self.tokenizer.tgt_vocab_size))
        self._tgt_pieces = tgt
        self._tgt_ids = {piece: i for i, piece in enumerate(tgt)}

    def _load(self):
        """A ``ctranslate2.Translator`` of the directory with the constructor's settings."""
        try:
            return require_ctranslate2().Translator(str(self.model_dir), **self._load_args)
        except (RuntimeError, ValueError) as err:
            raise ConfigError(f"model_dir={self.model_dir}: CTranslate2 cannot load it on "
                              f"{self.device} with compute_type={self._load_args['compute_type']} "
                              f"({err}).") from None

    @classmethod
    def from_dir(cls, model_dir: str | Path, device: str | torch.device = "cpu",
                 **kwargs: Any) -> CTranslate2Translator:
        """Load an ``nmt-export`` directory (the counterpart of ``Translator.from_checkpoint``);
        ``kwargs``: ``compute_type``, ``intra_threads``, ``inter_threads``."""
        return cls(model_dir, device, **kwargs)

    # ------------------------------------------------------------------ translate
    def search_settings(self, **overrides: Any) -> dict:
        """The search settings (:func:`nmt.inference.translator.search_settings`)."""
        return search_settings(**overrides)

    def results(self, src_ids: Sequence[Sequence[int]],
                hypotheses: Sequence[Sequence[Hypothesis]]) -> list[Translation]:
        """Hypotheses -> :class:`Translation` objects (:func:`make_translations`)."""
        return make_translations(self.tokenizer, src_ids, hypotheses)

    def translate(self, sentences: str | Sequence[str], beam_size: int = 5, n_best: int = 1,
                  length_penalty: float | None = None, max_len_a: float | None = None,
                  max_len_b: int | None = None, batch_sentences: int | None = None,
                  batch_tokens: int | None = None, sampling: bool = False,
                  temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, seed: int = 0,
                  return_attention: bool = False) -> Translation | list[Translation]:
        """Translate raw sentences, as :meth:`nmt.inference.translator.Translator.translate`.

        Args:
            sentences, beam_size, n_best, length_penalty, max_len_a, max_len_b,
                batch_sentences, batch_tokens: as the PyTorch engine's (module docstring:
                how CTranslate2 is made to follow them).
            sampling, temperature, top_k, top_p, seed: CTranslate2's sampling filters of the
                same names and its random generator seeded with ``seed`` (reproducible, not
                the PyTorch engine's samples; temperature 0 is greedy search).
            return_attention: must be False (see Raises).

        Returns:
            :class:`Translation` per sentence (one for a string); ``.hypotheses`` holds the
            n-best list; ``alignment`` [len(tokens), len(src_tokens)] as the PyTorch engine's.

        Raises:
            ConfigError: impossible search settings; ``return_attention`` (CTranslate2 returns
                one alignment, not every layer and head); a sentence longer than the
                exported positional table allows.
        """
        if return_attention:
            raise ConfigError("every layer's and head's attention (return_attention, "
                              "nmt-evaluate attention=all) needs engine=pytorch: CTranslate2 "
                              "returns only the alignment (one matrix per sentence).")
        single = isinstance(sentences, str)
        texts = [sentences] if single else list(sentences)
        settings = self.search_settings(
            beam_size=beam_size, n_best=n_best, length_penalty=length_penalty,
            max_len_a=max_len_a, max_len_b=max_len_b, batch_sentences=batch_sentences,
            batch_tokens=batch_tokens)
        if sampling:
            try:
                check_sampling_args(temperature, top_k, top_p)
            except ValueError as err:
                raise ConfigError(f"sampling: {err}") from None
            mode = {"temperature": float(temperature), "top_k": int(top_k), "top_p": float(top_p)}
        else:
            mode = None
        src_ids = self.tokenizer.encode_src_batch(texts)
        self._check_lengths(src_ids, settings)
        engine = self.ct2
        if sampling:
            # CTranslate2 seeds a worker thread's generator when that thread first draws, and
            # set_random_seed does not reach a generator already seeded: a fresh translator
            # (new worker threads) after set_random_seed makes the samples a function of seed.
            require_ctranslate2().set_random_seed(int(seed))
            engine = self._load()
        hypotheses = in_batches(src_ids, batch_limits(settings),
                                lambda batch: self._search(engine, batch, settings, mode))
        results = self.results(src_ids, hypotheses)
        return results[0] if single else results

    def _max_lengths(self, src_ids: Sequence[Sequence[int]], settings: dict) -> list[int]:
        """Per sentence its maximum output tokens before EOS, ``floor(a * |x| + b)`` with
        ``|x|`` = subwords + EOS (:func:`nmt.inference.search.max_output_lengths`)."""
        a, b = float(settings["max_len_a"]), int(settings["max_len_b"])
        return [max(0, math.floor(a * float(len(ids) + 1) + b)) for ids in src_ids]

    def _check_lengths(self, src_ids: Sequence[Sequence[int]], settings: dict) -> None:
        """Raise ConfigError if a source or its longest output needs positions beyond the table."""
        limits = self._max_lengths(src_ids, settings)
        for i, (ids, limit) in enumerate(zip(src_ids, limits, strict=True)):
            if len(ids) + 1 > self.max_positions or limit + 1 > self.max_positions:
                raise ConfigError(
                    f"sentence {i} has {len(ids) + 1} source subwords (with EOS) and may "
                    f"produce {limit} output subwords (max_len_a, max_len_b), but the model in "
                    f"{self.model_dir} has positions for {self.max_positions}: export it again "
                    f"with a larger max_positions=, or lower max_len_a / max_len_b.")

    def _search(self, engine, batch: list[list[int]], settings: dict, sampling: dict | None
                ) -> list[list[Hypothesis]]:
        """One length-sorted batch (source ids, no EOS, none empty) -> hypotheses per sentence,
        decoded by ``engine`` (a ``ctranslate2.Translator``)."""
        limits = self._max_lengths(batch, settings)
        k, alpha = int(settings["beam_size"]), float(settings["length_penalty"])
        options: dict[str, Any] = dict(
            max_decoding_length=min(max(limits) + 1, self.max_positions), min_decoding_length=0,
            max_input_length=0, return_scores=True, return_end_token=True, return_attention=True)
        if sampling is not None:
            greedy = sampling["temperature"] == 0
            options.update(beam_size=1, length_penalty=0,
                           sampling_topk=1 if greedy else sampling["top_k"],
                           sampling_topp=sampling["top_p"],
                           sampling_temperature=1.0 if greedy else sampling["temperature"])
            n_keep, rescore_all = 1, not greedy
        elif k == 1:
            options.update(beam_size=1, length_penalty=0)
            n_keep, rescore_all = 1, False
        else:
            # Ours ends a sentence at the step where beam_size hypotheses have ended and ranks
            # all of them, also more than beam_size; CTranslate2 keeps the beam_size best by
            # raw log-probability. The best hypothesis under our penalty survives that cut (a
            # longer hypothesis ranks first only with the best raw score of its step, and at
            # most beam_size - 1 ended earlier); lower ranks may not. So for n-best lists
            # CTranslate2 runs on to 2 * beam_size ended hypotheses (patience 2), and the ones
            # that ended after our last step are dropped below.
            patience = 1 if int(settings["n_best"]) == 1 else 2
            options.update(beam_size=k, num_hypotheses=k * patience, patience=patience,
                           length_penalty=_RAW_SCORES_ALL_ENDED)
            n_keep, rescore_all = int(settings["n_best"]), False
        sources = [[self._src_pieces[i] for i in ids] + ["</s>"] for ids in batch]
        results = engine.translate_batch(sources, **options)
        # PAD or BOS, which our search never produces: decode those sentences again without them.
        again = [i for i, r in enumerate(results)
                 if any(t in ("<pad>", "<s>") for h in r.hypotheses for t in h)]
        if again:
            redo = engine.translate_batch([sources[i] for i in again], **options,
                                          suppress_sequences=[["<pad>"], ["<s>"]])
            for i, r in zip(again, redo, strict=True):
                results[i] = r
        first_rows = None
        if options["beam_size"] > 1 and self.device.type == "cpu":
            # CTranslate2 4.x beam search on CPU returns the first step's attention of batch
            # row p from row p // beam_size (its first step runs unexpanded, then the rows are
            # gathered with unexpanded indices). That row (the <s> query) is the same for every
            # beam of a sentence: one greedy step gives it.
            first = engine.translate_batch(sources, beam_size=1, max_decoding_length=1,
                                           min_decoding_length=0, max_input_length=0,
                                           return_attention=True)
            first_rows = [np.asarray(r.attention[0][0], dtype=np.float32) for r in first]
        raw: list[list[list[Any]]] = []     # per sentence: [ids, logprob or None, alignment]
        pending = []                        # (sentence, hypothesis) whose score is recomputed
        for b, (result, limit) in enumerate(zip(results, limits, strict=True)):
            s_len = len(batch[b]) + 1
            hyps = []
            ended_by = _our_last_step([len(t) for t in result.hypotheses], k)
            for tokens, score, attention in zip(result.hypotheses, result.scores,
                                                result.attention, strict=True):
                if len(tokens) > ended_by:
                    continue
                ended = bool(tokens) and tokens[-1] == "</s>"
                n = len(tokens) - ended
                exact = ended and n <= limit and not (rescore_all or b in again)
                n = min(n, limit)   # longer than this sentence allows: cut, EOS forced
                ids = [self._tgt_ids[t] for t in tokens[:n]]
                align = np.asarray(attention[: n + 1], dtype=np.float32)[:, :s_len]
                if first_rows is not None:
                    align[0] = first_rows[b][:s_len]
                hyps.append([ids, float(score) if exact else None, np.ascontiguousarray(align)])
                if not exact:
                    pending.append((b, len(hyps) - 1))
            raw.append(hyps)
        if pending:
            forced = engine.score_batch(
                [sources[b] for b, _ in pending],
                [[self._tgt_pieces[i] for i in raw[b][h][0]] for b, h in pending],
                max_input_length=0)
            for (b, h), f in zip(pending, forced, strict=True):
                raw[b][h][1] = float(sum(f.log_probs))
        out = []
        for hyps in raw:
            seen, unique = set(), []
            for ids, logprob, align in hyps:
                if tuple(ids) not in seen:
                    seen.add(tuple(ids))
                    unique.append(Hypothesis(tokens=ids, alignment=align,
                                             score=logprob / length_penalty_factor(
                                                 float(len(ids) + 1), alpha)))
            unique.sort(key=lambda h: -h.score)        # stable: CTranslate2's order on ties
            out.append(unique[:n_keep])
        return out

    # ------------------------------------------------------------------ score
    def score(self, sources: Sequence[str], targets: Sequence[str], batch_tokens: int = 4000
              ) -> list[ForcedScore]:
        """Log-probability of given translations (forced decoding, CTranslate2's ``score_batch``),
        as :meth:`nmt.inference.translator.Translator.score`.

        Args:
            sources, targets: raw sentence pairs, equally many.
            batch_tokens: target subwords per batch.

        Returns:
            One :class:`ForcedScore` per pair (log-probabilities of the subwords and EOS).

        Raises:
            ConfigError: the lists differ in length, or a pair is longer than the exported
                positional table.
        """
        if len(sources) != len(targets):
            raise ConfigError(f"{len(sources)} sources but {len(targets)} targets: give pairs.")
        if not sources:
            return []
        src_ids = self.tokenizer.encode_src_batch(list(sources))
        tgt_ids = self.tokenizer.encode_tgt_batch(list(targets))
        for i, (s, t) in enumerate(zip(src_ids, tgt_ids, strict=True)):
            if max(len(s), len(t)) + 1 > self.max_positions:
                raise ConfigError(f"pair {i} has {len(s) + 1} source and {len(t) + 1} target "
                                  f"subwords (with EOS), beyond the {self.max_positions} positions "
                                  f"of the model in {self.model_dir}: export it again with a "
                                  "larger max_positions=.")
        scored = self.ct2.score_batch(
            [[self._src_pieces[i] for i in s] + ["</s>"] for s in src_ids],
            [[self._tgt_pieces[i] for i in t] for t in tgt_ids],
            max_batch_size=max(int(batch_tokens), 1), batch_type="tokens", max_input_length=0)
        out = []
        for r in scored:
            total, n = float(sum(r.log_probs)), len(r.log_probs)
            out.append(ForcedScore(logprob=total, tokens=n, ppl=math.exp(-total / max(n, 1))))
        return out


__all__ = ["CTranslate2Translator", "EXPORT_FILE", "QUANTIZATIONS", "build_spec",
           "check_export_settings", "export_ctranslate2", "export_model", "require_ctranslate2"]
