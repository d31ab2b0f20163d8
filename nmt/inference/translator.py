"""The Python API: load a checkpoint, translate, score, and look at the alignment.

    import nmt

    translator = nmt.Translator.from_checkpoint("runs/transformer_de_en/checkpoints/best.pt")
    result = translator.translate("Ein Hund läuft im Park .")
    result.text, result.score, result.alignment.shape       # 'A dog runs in the park .', ...
    nmt.plot_alignment(result)                               # a matplotlib Figure
    result = translator.translate("Ein Hund läuft .", return_attention=True)
    result.attention["cross"].shape                          # [layers, heads, T, S]
    nmt.plot_alignment(result, kind="cross", layer="all", head="all")   # the grid
    translator.score(["Ein Hund ."], ["A dog ."])[0].ppl     # forced decoding

The command-line tools are thin users of this class: ``nmt-translate`` and ``nmt-evaluate``
call :meth:`Translator.translate`; :meth:`Translator.results` is the one place that turns
search hypotheses into text.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from nmt.config import ConfigError, validate_search
from nmt.data.tokenizer import Tokenizer
from nmt.data.vocab import EOS_ID, PAD_ID
from nmt.inference.search import Hypothesis, length_sorted_batches, sample, translate
from nmt.models.base import Seq2Seq


@functools.lru_cache(maxsize=1)
def _search_defaults() -> dict:
    """The search keys of ``configs/search/default.yaml`` (composed once per process)."""
    from nmt.config import SearchSchema, compose_config

    cfg = compose_config([], config_name="translate", validate_fn=None)
    return {f.name: cfg[f.name] for f in dataclasses.fields(SearchSchema)}


def search_settings(**overrides: Any) -> dict:
    """The search settings: ``configs/search/default.yaml`` with ``overrides`` (None = keep
    the default). Shared by :class:`Translator` and the CTranslate2 engine.

    Raises:
        ConfigError: an unknown key or an impossible value (``n_best > beam_size``, ...).
    """
    base = dict(_search_defaults())          # beam_size 5, ... (training validates greedy)
    unknown = set(overrides) - set(base)
    if unknown:
        raise ConfigError(f"unknown search setting(s) {', '.join(sorted(unknown))}: use "
                          f"{', '.join(base)}.")
    base.update({k: v for k, v in overrides.items() if v is not None})
    return OmegaConf.to_container(validate_search(base))


@dataclass
class Translation:
    """One translation of one source sentence (the best of its n-best list, or one of them).

    Attributes:
        text: the detokenized translation.
        tokens: target subword strings, ending with ``</s>``.
        src_tokens: source subword strings, ending with ``</s>``.
        ids: target subword ids (no BOS, no EOS).
        score: length-penalised log-probability (natural log, EOS included; Wu et al. 2016).
        alignment: float32 [len(tokens), len(src_tokens)]: row t is the attention of target
            subword t over the source subwords (rows sum to 1).
        hypotheses: the n-best list, best first (``hypotheses[0]`` is this result); empty
            in the entries of that list.
        attention: with ``translate(..., return_attention=True)``, every attention weight of
            this (the chosen) hypothesis, teacher-forced again: float32 ``"cross"``
            [L,H,T,S] (row t predicts ``tokens[t]``; the RNN's alpha as L = H = 1),
            ``"decoder"`` [L,H,T,T] (query and key t both read decoder input t: ``<s>``,
            then ``tokens[:-1]``) and ``"encoder"`` [L,H,S,S]; kinds a model does not have
            (the RNN's self-attentions) are absent. None otherwise, and in the other
            entries of an n-best list.
    """

    text: str
    tokens: list[str]
    src_tokens: list[str]
    ids: list[int]
    score: float
    alignment: np.ndarray = field(repr=False)
    hypotheses: list[Translation] = field(default_factory=list, repr=False)
    attention: dict[str, np.ndarray] | None = field(default=None, repr=False)


@dataclass
class ForcedScore:
    """The model's probability of a given translation (forced decoding).

    Attributes:
        logprob: sum of the target subwords' log-probabilities, EOS included (natural log).
        tokens: target subwords scored (EOS included).
        ppl: perplexity per subword, ``exp(-logprob / tokens)``.
    """

    logprob: float
    tokens: int
    ppl: float


class Translator:
    """A model with its tokenizer and training config, ready to translate and score.

    Args:
        model: any :class:`nmt.models.base.Seq2Seq` (an :class:`nmt.models.Ensemble` too), on
            ``device``, in eval mode.
        tokenizer: the model's :class:`nmt.data.tokenizer.Tokenizer`.
        config: the training config saved with the checkpoint (``DictConfig``).
        device: where the model lives.
    """

    def __init__(self, model: Seq2Seq, tokenizer: Tokenizer, config: DictConfig,
                 device: str | torch.device = "cpu") -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.config = config
        self.device = torch.device(device)

    @classmethod
    def from_checkpoint(cls, path: str | Path | Sequence[str | Path],
                        device: str | torch.device = "cpu",
                        weights: str = "inference") -> Translator:
        """Load a checkpoint written by ``nmt-train`` (or ``nmt-average``).

        Args:
            path: a checkpoint file, or several for an ensemble (their log-probabilities are
                averaged at each step: :class:`nmt.models.Ensemble`); they must share one
                tokenizer.
            device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ...
            weights: ``"inference"`` (the moving average of a ``train.ema_decay`` run) or
                ``"trained"`` (its trained weights): :func:`~nmt.inference.loader.load_for_inference`.

        Raises:
            CheckpointError: unreadable or incompatible file (names it).
            ConfigError: the members of an ensemble use different tokenizers, or an unknown
                ``weights``.
        """
        from nmt.inference.loader import load_for_inference

        paths = [path] if isinstance(path, str | Path) else list(path)
        if not paths:
            raise ConfigError("give at least one checkpoint.")
        loaded = [load_for_inference(p, device, weights) for p in paths]
        model, tokenizer, config = loaded[0]
        if len(loaded) > 1:
            from nmt.models import Ensemble

            for p, (_, tok, _) in zip(paths[1:], loaded[1:], strict=True):
                if tok.fingerprint != tokenizer.fingerprint:
                    raise ConfigError(f"{p} uses another tokenizer than {paths[0]}: an ensemble "
                                      "needs one vocabulary (train the members with one "
                                      "data.tokenizer, or data.tokenizer.model=...).")
            model = Ensemble([m for m, _, _ in loaded])
        return cls(model, tokenizer, config, device)

    # ------------------------------------------------------------------ translate
    def search_settings(self, **overrides: Any) -> dict:
        """The search settings: ``configs/search/default.yaml`` with ``overrides``
        (:func:`search_settings`)."""
        return search_settings(**overrides)

    def translate(self, sentences: str | Sequence[str], beam_size: int = 5, n_best: int = 1,
                  length_penalty: float | None = None, max_len_a: float | None = None,
                  max_len_b: int | None = None, batch_sentences: int | None = None,
                  batch_tokens: int | None = None, sampling: bool = False,
                  temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, seed: int = 0,
                  return_attention: bool = False) -> Translation | list[Translation]:
        """Translate raw sentences.

        Args:
            sentences: one sentence (returns one :class:`Translation`) or a list (returns a
                list, in input order).
            beam_size: 1 = greedy search; n_best <= beam_size hypotheses are kept.
            length_penalty, max_len_a, max_len_b, batch_sentences, batch_tokens: search
                settings; None = ``configs/search/default.yaml``. Batches are sorted by
                length and limited by sentences and (``batch_tokens`` > 0) source subwords.
            sampling: draw one translation per sentence from the model instead of searching
                (back-translation), with ``temperature``, ``top_k``, ``top_p`` (Holtzman et al.
                2020) and ``seed`` (deterministic); beam_size and n_best are then ignored.
            return_attention: also fill ``Translation.attention`` of each chosen (best or
                sampled) hypothesis: one more teacher-forced pass over the outputs with
                every layer and head (:func:`capture_attention`); False computes nothing
                extra.

        Returns:
            :class:`Translation` per sentence; ``.hypotheses`` holds the n-best list.

        Raises:
            ConfigError: impossible search settings; ``return_attention`` with an ensemble
                (its members' attentions do not combine).
        """
        single = isinstance(sentences, str)
        texts = [sentences] if single else list(sentences)
        settings = self.search_settings(
            beam_size=beam_size, n_best=n_best, length_penalty=length_penalty,
            max_len_a=max_len_a, max_len_b=max_len_b, batch_sentences=batch_sentences,
            batch_tokens=batch_tokens)
        src_ids = self.tokenizer.encode_src_batch(texts)
        if sampling:
            try:
                hypotheses = sample(self.model, src_ids, settings, temperature=temperature,
                                    top_k=top_k, top_p=top_p, seed=seed, device=self.device)
            except ValueError as err:
                raise ConfigError(f"sampling: {err}") from None
        else:
            hypotheses = translate(self.model, src_ids, settings, self.device)
        results = self.results(src_ids, hypotheses)
        if return_attention:
            captured = capture_attention(self.model, src_ids, [r.ids for r in results],
                                         self.device, settings["batch_sentences"],
                                         settings["batch_tokens"])
            for result, attention in zip(results, captured, strict=True):
                result.attention = attention
        return results[0] if single else results

    def results(self, src_ids: Sequence[Sequence[int]],
                hypotheses: Sequence[Sequence[Hypothesis]]) -> list[Translation]:
        """Search output -> :class:`Translation` objects (:func:`make_translations`)."""
        return make_translations(self.tokenizer, src_ids, hypotheses)

    # ------------------------------------------------------------------ score
    @torch.inference_mode()
    def score(self, sources: Sequence[str], targets: Sequence[str], batch_tokens: int = 4000
              ) -> list[ForcedScore]:
        """Log-probability of given translations under the model (forced decoding).

        JoeyNMT's ``return_prob: ref`` and fairseq's ``--score-reference``: each target is
        teacher-forced, and the log-probabilities of its subwords and EOS are summed (no
        label smoothing, no length penalty; a beam hypothesis' ``score`` is this sum divided
        by ``((5 + len) / 6) ** alpha``).

        Args:
            sources, targets: raw sentence pairs, equally many.
            batch_tokens: padded target subwords per forward pass.

        Returns:
            One :class:`ForcedScore` per pair, in input order.

        Raises:
            ConfigError: the lists differ in length.
        """
        from nmt.data.batching import make_src_batch, make_tgt_batch

        if len(sources) != len(targets):
            raise ConfigError(f"{len(sources)} sources but {len(targets)} targets: give pairs.")
        src_ids = self.tokenizer.encode_src_batch(list(sources))
        tgt_ids = self.tokenizer.encode_tgt_batch(list(targets))
        out: list[ForcedScore | None] = [None] * len(src_ids)
        lengths = [max(len(s), len(t)) + 1 for s, t in zip(src_ids, tgt_ids, strict=True)]
        for batch in length_sorted_batches(lengths, len(lengths) or 1, batch_tokens):
            src, src_mask = make_src_batch([src_ids[i] for i in batch], self.device)
            tgt_in, tgt_out, tgt_mask = make_tgt_batch([tgt_ids[i] for i in batch], self.device)
            logits, _ = self.model(src, src_mask, tgt_in, need_alignment=False)
            logp = torch.log_softmax(logits.float(), dim=-1)
            token_logp = logp.gather(-1, tgt_out.unsqueeze(-1)).squeeze(-1)
            token_logp = token_logp.masked_fill(~tgt_mask | (tgt_out == PAD_ID), 0.0)
            sums, counts = token_logp.sum(1).tolist(), tgt_mask.sum(1).tolist()
            for i, total, n in zip(batch, sums, counts, strict=True):
                out[i] = ForcedScore(logprob=total, tokens=int(n), ppl=math.exp(-total / max(n, 1)))
        return out  # type: ignore[return-value]


def make_translations(tokenizer: Tokenizer, src_ids: Sequence[Sequence[int]],
                      hypotheses: Sequence[Sequence[Hypothesis]]) -> list[Translation]:
    """Search output -> :class:`Translation` objects (detokenized text, subword strings).

    The one place that turns hypotheses into text, for :class:`Translator` and the
    CTranslate2 engine alike.

    Args:
        tokenizer: the model's tokenizer.
        src_ids: per sentence its source subword ids (no EOS).
        hypotheses: per sentence its hypotheses, best first (at least one).

    Returns:
        One :class:`Translation` per sentence; its ``hypotheses`` hold the n-best list.
    """
    out = []
    for ids, hyps in zip(src_ids, hypotheses, strict=True):
        src_tokens = tokenizer.src_pieces(list(ids) + [EOS_ID])
        n_best = [Translation(text=tokenizer.decode_tgt(h.tokens),
                              tokens=tokenizer.tgt_pieces(list(h.tokens) + [EOS_ID]),
                              src_tokens=src_tokens, ids=list(h.tokens), score=float(h.score),
                              alignment=h.alignment) for h in hyps]
        best = n_best[0]
        best.hypotheses = n_best
        out.append(best)
    return out


@torch.inference_mode()
def capture_attention(model: Seq2Seq, src_ids: Sequence[Sequence[int]],
                      tgt_ids: Sequence[Sequence[int]], device: str | torch.device = "cpu",
                      batch_sentences: int = 32, batch_tokens: int = 0
                      ) -> list[dict[str, np.ndarray]]:
    """Every attention weight of given outputs: teacher-force ``<s> + y`` and keep it all.

    One ``model(src, src_mask, tgt_in, need_alignment="all")`` pass per length-sorted
    batch (:class:`nmt.models.base.Attention`), cut to each sentence's real positions.
    The model should be in eval mode (dropout would change the weights).

    Args:
        model: a single :class:`Seq2Seq` on ``device`` (not an ensemble).
        src_ids: source subword ids per sentence (no EOS; S = len + 1 with ``</s>``).
        tgt_ids: output subword ids per sentence (no BOS/EOS; T = len + 1 with ``</s>``).
        batch_sentences, batch_tokens: batch limits, as in search.

    Returns:
        Per sentence, float32 arrays ``"cross"`` [L,H,T,S], ``"decoder"`` [L,H,T,T] and
        ``"encoder"`` [L,H,S,S] (the last two only for models that have them).

    Raises:
        ConfigError: the model cannot return every weight (an ensemble).
        ValueError: ``src_ids`` and ``tgt_ids`` differ in length.
    """
    from nmt.data.batching import make_src_batch, make_tgt_batch

    if len(src_ids) != len(tgt_ids):
        raise ValueError(f"{len(src_ids)} sources but {len(tgt_ids)} outputs: give pairs.")
    out: list[dict[str, np.ndarray] | None] = [None] * len(src_ids)
    lengths = [max(len(s), len(t)) + 1 for s, t in zip(src_ids, tgt_ids, strict=True)]
    for batch in length_sorted_batches(lengths, max(int(batch_sentences), 1), int(batch_tokens)):
        src, src_mask = make_src_batch([src_ids[i] for i in batch], device)
        tgt_in, _, _ = make_tgt_batch([tgt_ids[i] for i in batch], device)
        try:
            _, attention = model(src, src_mask, tgt_in, need_alignment="all")
        except ValueError as err:
            raise ConfigError(f"return_attention / attention=all needs a single model: "
                              f"{err}") from None
        kinds = {name: getattr(attention, name) for name in ("cross", "decoder", "encoder")}
        kinds = {name: w.float().cpu().numpy() for name, w in kinds.items() if w is not None}
        for k, i in enumerate(batch):
            s, t = len(src_ids[i]) + 1, len(tgt_ids[i]) + 1
            size = {"cross": (t, s), "decoder": (t, t), "encoder": (s, s)}
            out[i] = {name: np.ascontiguousarray(w[k, :, :, : size[name][0], : size[name][1]])
                      for name, w in kinds.items()}
    return out  # type: ignore[return-value]


def plot_alignment(result_or_matrix: Translation | np.ndarray, src_tokens: Sequence[str] | None = None,
                   tgt_tokens: Sequence[str] | None = None, *, kind: str | None = None,
                   layer: int | str | None = None, head: int | str | None = None, **kwargs: Any):
    """Heatmap of an alignment (Bahdanau et al. 2015, Fig. 3) as a matplotlib Figure.

    Args:
        result_or_matrix: a :class:`Translation` (its ``alignment`` with its subword labels),
            or a [T, S] matrix with ``src_tokens`` (S) and ``tgt_tokens`` (T).
        kind, layer, head: draw ``result.attention`` instead (a result translated with
            ``return_attention=True``): ``kind`` ``cross`` (default), ``encoder`` or
            ``decoder``; ``layer`` / ``head`` an index, ``"all"`` (default) or ``"mean"``: a
            grid with rows = layers, columns = heads and their mean
            (:func:`nmt.evaluation.plot.plot_attention`).
        **kwargs: ``out_path`` (also save a PNG), ``cmap``, ``dpi``, ``title``, ``marks``
            (:func:`nmt.evaluation.plot.plot_alignment`).

    Returns:
        The matplotlib ``Figure`` (shown inline in a notebook).

    Raises:
        ValueError: labels missing for a bare matrix, or not matching its shape; a
            kind/layer/head choice for a result without ``attention``.
        ConfigError: a kind the model does not have, or a layer/head out of range.
    """
    from nmt.evaluation.plot import plot_alignment as draw
    from nmt.evaluation.plot import plot_attention

    if kind is not None or layer is not None or head is not None:
        if not isinstance(result_or_matrix, Translation) or result_or_matrix.attention is None:
            raise ValueError("kind/layer/head draw Translation.attention: translate with "
                             "return_attention=True and pass the result.")
        r, kind = result_or_matrix, kind or "cross"
        if kind not in r.attention:
            raise ConfigError(f"kind={kind!r}: this model's attention has "
                              f"{', '.join(r.attention)} only (the RNN has no self-attention).")
        return plot_attention(r.attention[kind], src_tokens or r.src_tokens, tgt_tokens or r.tokens,
                              kind, "all" if layer is None else layer,
                              "all" if head is None else head, **kwargs)
    if isinstance(result_or_matrix, Translation):
        r = result_or_matrix
        return draw(r.alignment, src_tokens or r.src_tokens, tgt_tokens or r.tokens, **kwargs)
    if src_tokens is None or tgt_tokens is None:
        raise ValueError("a bare matrix needs src_tokens and tgt_tokens (its axis labels).")
    return draw(np.asarray(result_or_matrix), src_tokens, tgt_tokens, **kwargs)
