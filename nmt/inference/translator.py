"""The Python API: load a checkpoint, translate, score, and look at the attention.

    translator = nmt.Translator.from_checkpoint("runs/transformer_de_en/checkpoints/best.pt")
    result = translator.translate("Ein Hund läuft im Park .")   # result.text, .score, .alignment
    result = translator.translate("Ein Hund läuft .", return_attention=True)
    result.attention["cross"].shape                            # [layers, heads, T, S]
    translator.score(["Ein Hund ."], ["A dog ."])[0].ppl       # forced decoding
    mbr_translate(translator, "Ein Hund läuft .", num=16).utility   # MBR: nmt.extras.decoding.mbr
    translator.translate("Ein Hund läuft .", tgt_lang="fr")    # a multilingual model: .directions
    json.dumps(result.to_dict())                               # arrays as nested lists

Both engines (this one and :mod:`nmt.extras.tools.ctranslate2`) share :class:`TranslatorBase` and
the length-sorted batches of :func:`in_batches`.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from nmt.checkpoint import CheckpointError, load_checkpoint
from nmt.config import (
    ConfigError,
    SamplingSchema,
    SearchSchema,
    config_file,
    merge_typed,
    to_plain,
    validate_decoding,
)
from nmt.data.batching import make_src_batch, make_tgt_batch
from nmt.data.languages import (
    add_tag,
    check_target,
    is_multilingual,
    languages,
    trained_directions,
)
from nmt.data.tokenizer import Tokenizer
from nmt.data.vocab import EOS_ID, PAD_ID
from nmt.inference.forced import ForcedFirstToken
from nmt.inference.sampling import sample_search
from nmt.inference.search import Hypothesis, beam_search, greedy_search
from nmt.models import build_model
from nmt.models.base import Seq2Seq, eval_mode

# translate's settings (keyword arguments) and their defaults: the command line's
_DEFAULTS = {k: v for schema, name in ((SearchSchema, "search/default.yaml"),
                                       (SamplingSchema, "sampling.yaml"))
             for k, v in to_plain(merge_typed(schema, config_file(name), name)).items()}


def search_settings(**overrides: Any) -> dict:
    """The defaults of configs/search/default.yaml and sampling.yaml with ``overrides`` (None
    keeps the default), checked by :func:`nmt.config.validate_decoding`: ConfigError for an
    unknown key or an impossible value (``n_best > beam_size``, ``top_p`` outside (0, 1], ...)."""
    settings = copy.deepcopy(_DEFAULTS)
    if unknown := set(overrides) - set(settings):
        raise ConfigError(f"unknown search setting(s) {', '.join(sorted(unknown))}: use "
                          f"{', '.join(settings)}.")
    settings.update({k: v for k, v in overrides.items() if v is not None})
    return validate_decoding(settings)


@dataclass
class Translation:
    """One translation of one sentence: ``==``, pickle, and :meth:`to_dict` for JSON.
    ``tokens``/``src_tokens``: subwords ending with ``</s>`` (a source-side language tag
    first in ``src_tokens``; a target-side one is cut everywhere); ``ids``: target ids (no
    BOS/EOS); ``score``: as :class:`Hypothesis`; ``alignment``: float32 [len(tokens),
    len(src_tokens)] (None: ``alignment=False`` of an ``alignment_full_context`` engine);
    ``hypotheses``: the n-best list, best first, as Translations whose own
    ``hypotheses`` are empty: ``[0]`` is this translation without its list. ``attention``
    (``return_attention=True``): float32 ``"cross"`` [L, H, T, S] (the RNN's alpha as L = H =
    1), ``"decoder"`` [L, H, T, T] (key t reads decoder input t: ``<s>`` or a target tag, then
    ``tokens[:-1]``), ``"encoder"`` [L, H, S, S] if any. ``==`` compares the fields but the
    arrays (``alignment``, ``attention``), which follow from them."""

    text: str
    tokens: list[str]
    src_tokens: list[str]
    ids: list[int]
    score: float
    alignment: np.ndarray | None = field(repr=False, compare=False)
    hypotheses: list[Translation] = field(default_factory=list, repr=False)
    attention: dict[str, np.ndarray] | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict:
        """Every field as plain values that ``json.dumps`` accepts: the arrays as nested lists
        of floats, ``hypotheses`` as such dicts, a subclass's dataclass fields as dicts."""
        def plain(value: Any) -> Any:
            if isinstance(value, np.ndarray):
                return value.tolist()
            if isinstance(value, dict):
                return {k: plain(v) for k, v in value.items()}
            return [plain(v) for v in value] if isinstance(value, list) else value

        return plain(dataclasses.asdict(self))


@dataclass
class ForcedScore:
    """The model's probability of a given translation (forced decoding): ``logprob`` sums the
    target subwords' natural-log probabilities, EOS included, over ``tokens`` subwords;
    ``ppl = exp(-logprob / tokens)``."""

    logprob: float
    tokens: int
    ppl: float


def load_for_inference(path: str | Path, device: str | torch.device = "cpu",
                       weights: str = "inference") -> tuple[Seq2Seq, Tokenizer, DictConfig]:
    """``(model in eval mode, tokenizer, training config)`` of a checkpoint file. ``weights``
    ``inference`` loads what the run validated with (the EMA of a ``train.ema_decay`` run),
    ``trained`` the weights behind it (one set without EMA). CheckpointError (naming the
    file): unreadable, or a tokenizer or weights that do not fit; ConfigError: another
    ``weights``."""
    keys = {"inference": "model", "trained": "train_model"}
    if weights not in keys:
        raise ConfigError(f"weights={weights!r}: use {' or '.join(keys)}.")
    key = keys[weights]
    ckpt = load_checkpoint(path)
    cfg: DictConfig = OmegaConf.create(ckpt["config"])
    tokenizer = Tokenizer.from_checkpoint(path, ckpt.get("tokenizer"))
    model = build_model(cfg.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)
    try:
        model.load_state_dict(ckpt.get(key, ckpt["model"]))
    except RuntimeError as err:
        raise CheckpointError(f"{path}: weights do not fit the saved model config: {err}") from None
    model.to(device).eval()
    return model, tokenizer, cfg


def direction_tags(config: DictConfig, tokenizer: Tokenizer, src_lang: str | None = None,
                   tgt_lang: str | None = None) -> tuple[int | None, int | None]:
    """``(source-side tag, forced first target token)`` ids of a direction by ``data.lang_tag``
    (``tgt_lang`` None: ``data.tgt_lang``; a bilingual model: ``(None, None)``). ConfigError
    naming what is allowed: :func:`~nmt.data.languages.check_target`, ``Tokenizer.tag_id``."""
    tgt_lang = tgt_lang or config.data.tgt_lang
    check_target(config.data, src_lang, tgt_lang)
    if not is_multilingual(config.data):
        return None, None
    tag = tokenizer.tag_id(tgt_lang)
    return (tag, None) if config.data.lang_tag == "source" else (None, tag)


def _tagged(batch: list[list[int]], tag: int | None, skip_empty: bool = False) -> list[list[int]]:
    """``add_tag`` on each id list (``skip_empty``: not on an empty source, never translated)."""
    return batch if tag is None else [add_tag(ids, tag) if ids or not skip_empty else ids
                                      for ids in batch]


def length_sorted_batches(lengths: Sequence[int], batch_sentences: int, batch_tokens: int = 0
                          ) -> list[list[int]]:
    """Indices of ``lengths``, longest first, cut into batches of at most ``batch_sentences``
    items and (``batch_tokens`` > 0) ``batch_tokens`` padded positions (items x the longest
    length; a single longer item gets a batch of its own). Every index appears once."""
    batches: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i], reverse=True):
        last = batches[-1] if batches else None
        if last and len(last) < batch_sentences and (
                batch_tokens <= 0 or (len(last) + 1) * lengths[last[0]] <= batch_tokens):
            last.append(i)
        else:
            batches.append([i])
    return batches


def in_batches(src_ids: Sequence[Sequence[int]], settings: Mapping,
               search: Callable[[list[list[int]]], list[list[Hypothesis]]]
               ) -> list[list[Hypothesis]]:
    """``search(batch)`` (id lists without EOS, none empty) per length-sorted batch of
    ``settings["batch_sentences"]`` / ``["batch_tokens"]``, results in input order; an empty
    source gets one empty hypothesis (score 0, alignment [[1.0]]) without the model."""
    out = [None if len(ids) else [Hypothesis([], 0.0, np.ones((1, 1), np.float32))]
           for ids in src_ids]
    nonempty = [i for i, ids in enumerate(src_ids) if len(ids)]
    for batch in length_sorted_batches([len(src_ids[i]) + 1 for i in nonempty],
                                       settings["batch_sentences"], settings["batch_tokens"]):
        chunk = [nonempty[k] for k in batch]
        for i, hyps in zip(chunk, search([list(src_ids[i]) for i in chunk]), strict=True):
            out[i] = hyps
    return out  # type: ignore[return-value]


def decode(model: Seq2Seq, src_ids: Sequence[Sequence[int]], settings: Mapping,
           sampling: Mapping | None = None, device: str | torch.device = "cpu"
           ) -> list[list[Hypothesis]]:
    """Per tokenized sentence (ids, no EOS), in input order, its hypotheses: greedy search
    (``settings`` of :class:`nmt.config.SearchSchema` with ``beam_size`` 1), beam search, or
    with ``sampling`` (temperature, top_k, top_p, seed, optional epsilon) one sample from a
    generator seeded on ``device`` and shared by the batches in turn (a function of seed, input
    and batches). ``settings["first_token"]`` (optional): every output's forced first token,
    a target-side language tag (:class:`~nmt.inference.forced.ForcedFirstToken`: not scored,
    cut from the hypotheses)."""
    lengths = {k: settings[k] for k in ("max_len_a", "max_len_b", "length_penalty")}
    first = settings.get("first_token")
    lengths["max_len_b"] += first is not None     # the tag is one more output token
    if sampling is not None:
        generator = torch.Generator(device=device).manual_seed(sampling["seed"])
        search = functools.partial(sample_search, **lengths, generator=generator,
                                   epsilon=sampling.get("epsilon", 0.0),
                                   **{k: sampling[k] for k in ("temperature", "top_k", "top_p")})
    elif settings["beam_size"] == 1:
        search = functools.partial(greedy_search, **lengths)
    else:
        search = functools.partial(beam_search, **lengths, n_best=settings["n_best"],
                                   beam_size=settings["beam_size"])

    def run(batch: list[list[int]]) -> list[list[Hypothesis]]:
        src, src_mask = make_src_batch(batch, device)
        if first is None:
            return search(model, src, src_mask)
        tags = torch.full((len(batch),), first, dtype=torch.long, device=device)
        return ForcedFirstToken.strip(search(ForcedFirstToken(model, tags), src, src_mask))

    return in_batches(src_ids, settings, run)


def _teacher_forced_batches(src_ids: Sequence[Sequence[int]], tgt_ids: Sequence[Sequence[int]],
                            device: str | torch.device, batch_sentences: int, batch_tokens: int
                            ) -> Iterator[tuple[list[int], torch.Tensor, ...]]:
    """Length-sorted batches of pairs (ids without EOS): ``(indices, src, src_mask, tgt_in,
    tgt_out, tgt_mask)``, tensors [B, S] / [B, T] with ``tgt_in = <s> y``, ``tgt_out = y </s>``."""
    lengths = [max(len(s), len(t)) + 1 for s, t in zip(src_ids, tgt_ids, strict=True)]
    for batch in length_sorted_batches(lengths, batch_sentences, batch_tokens):
        src, src_mask = make_src_batch([src_ids[i] for i in batch], device)
        yield (batch, src, src_mask, *make_tgt_batch([tgt_ids[i] for i in batch], device))


@torch.inference_mode()
def capture_attention(model: Seq2Seq, src_ids: Sequence[Sequence[int]],
                      tgt_ids: Sequence[Sequence[int]], device: str | torch.device = "cpu",
                      batch_sentences: int = 32, batch_tokens: int = 0, everything: bool = True
                      ) -> list[dict[str, np.ndarray]]:
    """The model's alignment of given outputs (ids without BOS/EOS), S and T with EOS: per pair
    ``"alignment"`` [T,S] (``Attention.alignment``: the full-context pass where the model has
    one), and with ``everything`` every weight as ``Translation.attention`` (``"cross"``
    [L,H,T,S], ``"decoder"`` [L,H,T,T], ``"encoder"`` [L,H,S,S]; a model with
    ``all_attention``, not an ensemble). One teacher-forced pass per batch in eval mode (the
    model's mode restored after)."""
    out: list[dict[str, np.ndarray] | None] = [None] * len(src_ids)
    with eval_mode(model):
        for batch, src, src_mask, tgt_in, _, _ in _teacher_forced_batches(
                src_ids, tgt_ids, device, batch_sentences, batch_tokens):
            _, attention = model(src, src_mask, tgt_in,
                                 need_alignment="all" if everything else True)
            kinds = ({name: getattr(attention, name) for name in ("alignment", "cross", "decoder",
                                                                    "encoder")}
                     if everything else {"alignment": attention})
            kinds = {name: w.float().cpu().numpy() for name, w in kinds.items() if w is not None}
            for k, i in enumerate(batch):
                s, t = len(src_ids[i]) + 1, len(tgt_ids[i]) + 1
                size = {"cross": (t, s), "decoder": (t, t), "encoder": (s, s), "alignment": (t, s)}
                out[i] = {name: np.ascontiguousarray(w[k, ..., : size[name][0], : size[name][1]])
                          for name, w in kinds.items()}
    return out  # type: ignore[return-value]


class TranslatorBase:
    """``translate`` (``translate_with``: settings checked already) and ``score`` of raw
    sentences for both engines; ``config`` is the training config. An engine implements the
    engine contract on token ids, which decoders over it (MBR, pivot: :mod:`nmt.extras.decoding`)
    call too: :meth:`hypotheses`, :meth:`forced` and :meth:`attention`; and states what it can
    do: ``all_attention`` (every layer's and head's attention, ``return_attention``; not an
    ensemble, not CTranslate2), ``epsilon_sampling`` (:meth:`hypotheses` with a sampling
    ``epsilon`` > 0; not CTranslate2) and ``alignment_full_context`` (the model's, an ensemble
    member's: its alignment needs the whole output, so each hypothesis's is read by
    :meth:`attention` after search, when asked for). Nothing is stored per call: one
    translator serves many threads."""

    search_settings = staticmethod(search_settings)
    all_attention: bool = True
    epsilon_sampling: bool = True
    alignment_full_context: bool = False

    def __init__(self, tokenizer: Tokenizer, config: DictConfig,
                 device: str | torch.device = "cpu") -> None:
        self.tokenizer = tokenizer
        self.config = config
        self.device = torch.device(device)
        self.directions = trained_directions(config.data)   # the trained (src, tgt) pairs
        self.languages = languages(config.data)

    def translate(self, sentences: str | Sequence[str], beam_size: int | None = None,
                  n_best: int | None = None, length_penalty: float | None = None,
                  max_len_a: float | None = None, max_len_b: int | None = None,
                  batch_sentences: int | None = None, batch_tokens: int | None = None,
                  sampling: bool | None = None, temperature: float | None = None,
                  top_k: int | None = None, top_p: float | None = None, seed: int | None = None,
                  return_attention: bool = False, tgt_lang: str | None = None,
                  src_lang: str | None = None, alignment: bool = True
                  ) -> Translation | list[Translation]:
        """One raw sentence -> a :class:`Translation`, a list -> a list in input order; settings
        as :func:`search_settings` (None: the default). ``return_attention`` fills
        ``Translation.attention`` by one more teacher-forced pass. ``alignment=False``: the
        caller reads no alignment, so an ``alignment_full_context`` engine runs no pass for it
        and leaves every ``alignment`` None (others keep search's). ``tgt_lang`` / ``src_lang``:
        the direction (None: the model's ``data.tgt_lang``; the source language is only
        checked). ConfigError: a bad setting, one the engine cannot serve (its capabilities),
        or a direction the model cannot (:func:`direction_tags`)."""
        settings = search_settings(
            beam_size=beam_size, n_best=n_best, length_penalty=length_penalty,
            max_len_a=max_len_a, max_len_b=max_len_b, batch_sentences=batch_sentences,
            batch_tokens=batch_tokens, sampling=sampling, temperature=temperature, top_k=top_k,
            top_p=top_p, seed=seed)
        return self.translate_with(sentences, settings, return_attention=return_attention,
                                   tgt_lang=tgt_lang, src_lang=src_lang, alignment=alignment)

    def translate_with(self, sentences: str | Sequence[str], settings: Mapping, *,
                       return_attention: bool = False, tgt_lang: str | None = None,
                       src_lang: str | None = None, alignment: bool = True,
                       search: Callable[[list[list[int]], dict], list[list[Hypothesis]]]
                       | None = None) -> Translation | list[Translation]:
        """:meth:`translate` with ``settings`` that :func:`search_settings` checked already
        (nmt-evaluate's split, a pivot's two steps: checked once, where they entered).
        ``search(src_ids, settings)``: a callback that finds each tokenized sentence's
        hypotheses, best first, instead of the settings' search or sample
        (``settings["first_token"]`` set; minimum-Bayes-risk decoding,
        :mod:`nmt.extras.decoding.mbr`, is one). With ``alignment_full_context`` and
        ``alignment``, every hypothesis of the n-best list gets the model's alignment (one
        teacher-forced pass over them all; the best's comes with ``return_attention``'s)."""
        single = isinstance(sentences, str)
        settings = dict(settings)
        if return_attention and not self.all_attention:
            raise ConfigError(f"{type(self).__name__} cannot do return_attention (every layer's "
                              "and head's attention: one model, engine=pytorch).")
        src_tag, settings["first_token"] = direction_tags(self.config, self.tokenizer, src_lang,
                                                          tgt_lang)
        src_ids = _tagged(self.tokenizer.encode_src_batch([sentences] if single else
                                                          list(sentences)), src_tag, True)
        if search is not None:
            found = search(src_ids, settings)
        else:
            sample = ({k: settings[k] for k in ("temperature", "top_k", "top_p", "seed")}
                      if settings["sampling"] else None)
            found = self.hypotheses(src_ids, settings, sample)
        results = []   # the one place that turns hypotheses into text
        for ids, hyps in zip(src_ids, found, strict=True):
            src_tokens = self.tokenizer.src_pieces(list(ids) + [EOS_ID])
            n_best = [Translation(self.tokenizer.decode_tgt(h.tokens),
                                  self.tokenizer.tgt_pieces(list(h.tokens) + [EOS_ID]),
                                  src_tokens, list(h.tokens), float(h.score), h.alignment)
                      for h in hyps]
            results.append(dataclasses.replace(n_best[0], hypotheses=n_best))
        full = self.alignment_full_context   # search's alignment is causal, not the model's
        if return_attention:
            captured = self.attention(src_ids, [r.ids for r in results], settings)
            for result, weights in zip(results, captured, strict=True):
                model_alignment = weights.pop("alignment")
                if full:
                    result.hypotheses[0].alignment = model_alignment
                result.attention = weights
        if full:
            rest = [(i, h) for i, r in enumerate(results) if alignment
                    for h in r.hypotheses[1 if return_attention else 0:]]
            captured = self.attention([src_ids[i] for i, _ in rest], [h.ids for _, h in rest],
                                      settings, everything=False) if rest else []
            for (_, h), weights in zip(rest, captured, strict=True):
                h.alignment = weights["alignment"]
            for result in results:
                for h in result.hypotheses if not alignment else ():
                    h.alignment = None
                result.alignment = result.hypotheses[0].alignment
        return results[0] if single else results

    def score(self, sources: Sequence[str], targets: Sequence[str], batch_tokens: int = 4000,
              tgt_lang: str | None = None, src_lang: str | None = None) -> list[ForcedScore]:
        """Log-probability of given translations, teacher-forced (JoeyNMT's ``return_prob:
        ref``, fairseq's ``--score-reference``): subwords and EOS, no label smoothing, no length
        penalty; ``batch_tokens`` padded target subwords per pass; the direction and its tags
        as :meth:`translate` (a target-side tag is given: not scored, not counted).
        ConfigError: not pairs."""
        if len(sources) != len(targets):
            raise ConfigError(f"{len(sources)} sources but {len(targets)} targets: give pairs.")
        src_tag, first = direction_tags(self.config, self.tokenizer, src_lang, tgt_lang)
        src_ids = _tagged(self.tokenizer.encode_src_batch(list(sources)), src_tag)
        tgt_ids = _tagged(self.tokenizer.encode_tgt_batch(list(targets)), first)
        return [ForcedScore(logprob=total, tokens=n, ppl=math.exp(-total / max(n, 1)))
                for total, n in self.forced(src_ids, tgt_ids, batch_tokens,
                                            given=int(first is not None))]

    # ------------------------------------------------------------------ the engine contract
    def hypotheses(self, src_ids: list[list[int]], settings: Mapping,
                   sampling: Mapping | None) -> list[list[Hypothesis]]:
        """Per tokenized sentence (source ids without EOS, a source-side tag included), in input
        order, its :class:`~nmt.inference.search.Hypothesis` list, best first (``tokens``
        without BOS/EOS, ``score`` the length-penalised log-probability, ``alignment`` float32
        [len(tokens) + 1, S + 1]): the search of ``settings`` (:func:`search_settings` plus
        ``first_token``, a forced target-side tag, cut), or with ``sampling`` (temperature,
        top_k, top_p, seed, optional epsilon) one sample per row. :func:`decode`'s contract;
        an empty source gets one empty hypothesis."""
        raise NotImplementedError

    def forced(self, src_ids: list[list[int]], tgt_ids: list[list[int]], batch_tokens: int,
               given: int = 0) -> list[tuple[float, int]]:
        """Per pair (ids without EOS; a target-side tag is the first of ``tgt_ids``)
        ``(log-probability sum in nats, tokens)`` of the target and EOS by teacher forcing, no
        label smoothing, no length penalty, the first ``given`` target tokens neither scored
        nor counted; about ``batch_tokens`` padded target tokens per pass."""
        raise NotImplementedError

    def attention(self, src_ids: list[list[int]], tgt_ids: list[list[int]], settings: Mapping,
                  everything: bool = True) -> list[dict[str, np.ndarray]]:
        """Per pair (ids without BOS/EOS; ``settings["first_token"]``, a target-side tag, is
        put first and its step cut) the weights of one teacher-forced pass, T and S with EOS:
        ``"alignment"`` [T, S] (the model's: the full-context pass where it has one), and with
        ``everything`` ``"cross"`` [L, H, T, S], ``"decoder"`` [L, H, T, T] and ``"encoder"``
        [L, H, S, S] (:func:`capture_attention`'s). Engines without ``all_attention`` and
        ``alignment_full_context`` need not implement it."""
        raise NotImplementedError


class Translator(TranslatorBase):
    """A PyTorch model (any :class:`Seq2Seq`, an ensemble too) with its tokenizer and training
    config, ready to translate and score; the model is put into eval mode on ``device``."""

    def __init__(self, model: Seq2Seq, tokenizer: Tokenizer, config: DictConfig,
                 device: str | torch.device = "cpu") -> None:
        super().__init__(tokenizer, config, device)
        self.model = model.eval()
        self.all_attention = model.all_attention
        self.alignment_full_context = model.alignment_full_context

    @classmethod
    def from_checkpoint(cls, path: str | Path | Sequence[str | Path],
                        device: str | torch.device = "cpu",
                        weights: str = "inference") -> Translator:
        """Load a checkpoint of ``nmt-train`` / ``nmt-average`` (or a list of one); ``weights``:
        :func:`load_for_inference`. Several, an ensemble: :mod:`nmt.extras.decoding.ensemble`."""
        paths = [path] if isinstance(path, str | Path) else list(path)
        if len(paths) != 1:
            raise ConfigError(f"give one checkpoint, not {len(paths)}: several make an ensemble, "
                              "nmt.extras.decoding.ensemble.ensemble_translator(paths, device).")
        return cls(*load_for_inference(paths[0], device, weights), device)

    def hypotheses(self, src_ids, settings, sampling):   # TranslatorBase.hypotheses
        return decode(self.model, src_ids, settings, sampling, self.device)

    def attention(self, src_ids, tgt_ids, settings, everything=True):   # TranslatorBase's
        first = settings["first_token"]   # a target-side tag: its step (from <s>) is cut
        out = capture_attention(self.model, src_ids, _tagged(tgt_ids, first), self.device,
                                settings["batch_sentences"], settings["batch_tokens"], everything)
        cut = {"cross": np.s_[:, :, 1:], "decoder": np.s_[:, :, 1:, 1:], "alignment": np.s_[1:]}
        return out if first is None else [{k: np.ascontiguousarray(w[cut.get(k, np.s_[:])])
                                           for k, w in a.items()} for a in out]

    @torch.inference_mode()
    def forced(self, src_ids, tgt_ids, batch_tokens, given=0):   # TranslatorBase.forced
        out: list[tuple[float, int] | None] = [None] * len(src_ids)
        for batch, src, src_mask, tgt_in, tgt_out, tgt_mask in _teacher_forced_batches(
                src_ids, tgt_ids, self.device, len(src_ids), batch_tokens):
            logits, _ = self.model(src, src_mask, tgt_in, need_alignment=False)
            logp = torch.log_softmax(logits.float(), dim=-1)
            token_logp = logp.gather(-1, tgt_out.unsqueeze(-1)).squeeze(-1)
            token_logp = token_logp.masked_fill(~tgt_mask | (tgt_out == PAD_ID), 0.0)
            token_logp[:, :given] = 0.0                   # given first tokens: not scored
            sums, counts = token_logp.sum(1).tolist(), tgt_mask.sum(1).tolist()
            for i, total, n in zip(batch, sums, counts, strict=True):
                out[i] = (total, int(n) - given)
        return out  # type: ignore[return-value]
