"""Forced alignment: teacher-force given translations, read the cross-attention, link words.

The model reads each (source, target) pair as in training (source + ``</s>``; decoder input
``<s>`` + target, predicting target + ``</s>``) and returns every cross-attention weight
(:class:`nmt.models.base.Attention`); :mod:`nmt.extras.word_alignment` turns a chosen
layer and head into Pharaoh word links::

    model, tokenizer, _ = load_for_inference("runs/tf/checkpoints/best.pt")
    items = force_align(model, tokenizer, [("Ein Hund läuft .", "A dog runs .")])
    links = word_links(items[0], method="argmax", shift=True, layer=-1, head="mean")

Words are the whitespace-separated tokens of the given text (what gold alignments count).
Each word is encoded on its own, which gives the pieces of the whole sentence (SentencePiece
never merges across whitespace) and ties every piece to its word even where normalisation
or ``<unk>`` hides the ``▁`` word boundary. Nothing here looks at the model type: the RNN's
single attention is one layer with one head.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from nmt.config import ConfigError
from nmt.data.corpus import CorpusError, read_lines
from nmt.extras.word_alignment import (
    Link,
    flip_links,
    subword_to_word_links,
    symmetrize,
    teacher_forced_links,
)


@dataclass
class ForcedAlignment:
    """Teacher-forced attention of one sentence pair.

    Attributes:
        src_pieces, tgt_pieces: the S source and T target subwords (no ``</s>``).
        src_words, tgt_words: word index of each piece (0-based, whitespace tokens).
        n_src_words, n_tgt_words: words per side (a word may have no pieces if
            normalisation removes all of it).
        cross: float32 [L,H,T+1,S+1] cross-attention of every decoder layer and head; row
            ``i`` predicts target piece ``i`` (row T predicts ``</s>``), column S is the
            source ``</s>`` (the layout :func:`teacher_forced_links` expects).
    """

    src_pieces: list[str]
    tgt_pieces: list[str]
    src_words: list[int]
    tgt_words: list[int]
    n_src_words: int
    n_tgt_words: int
    cross: np.ndarray


def _encode_words(encode_batch, text: str) -> tuple[list[int], list[int], int]:
    """(piece ids, word index per piece, number of words) of whitespace-split ``text``."""
    words = text.split()
    ids, word_of = [], []
    for w, piece_ids in enumerate(encode_batch(words) if words else []):
        ids += piece_ids
        word_of += [w] * len(piece_ids)
    return ids, word_of, len(words)


@torch.no_grad()
def force_align(model, tokenizer, pairs: Sequence[tuple[str, str]], batch_sentences: int = 32,
                device: str | torch.device = "cpu") -> list[ForcedAlignment]:
    """Teacher-force every (source, target) pair and keep all its cross-attention.

    Args:
        model: a :class:`nmt.models.base.Seq2Seq` on ``device`` (put in eval mode here and
            restored afterwards).
        tokenizer: its :class:`nmt.data.tokenizer.Tokenizer`.
        pairs: (source text, target text), e.g. a test set and its references.
        batch_sentences: pairs per forward pass (sorted by length to limit padding).
        device: where the batches go.

    Returns:
        One :class:`ForcedAlignment` per pair, in input order.

    Raises:
        ValueError: ``batch_sentences`` < 1.
        ConfigError: the model cannot capture its attention (an ensemble).
    """
    from nmt.inference.translator import capture_attention

    if batch_sentences < 1:
        raise ValueError(f"batch_sentences={batch_sentences} must be >= 1.")
    src = [_encode_words(tokenizer.encode_src_batch, s) for s, _ in pairs]
    tgt = [_encode_words(tokenizer.encode_tgt_batch, t) for _, t in pairs]
    was_training = model.training
    model.eval()
    try:
        captured = capture_attention(model, [s[0] for s in src], [t[0] for t in tgt], device,
                                     batch_sentences)
        out = [ForcedAlignment(tokenizer.src_pieces(s_ids), tokenizer.tgt_pieces(t_ids), s_words,
                               t_words, n_s, n_t, weights["cross"])
               for (s_ids, s_words, n_s), (t_ids, t_words, n_t), weights
               in zip(src, tgt, captured, strict=True)]
    finally:
        model.train(was_training)
    return out


def _pick(weights: np.ndarray, choice: int | str, key: str) -> np.ndarray:
    """Index ``choice`` (negative allowed) of axis 0, or the mean over it for ``"mean"``."""
    n = weights.shape[0]
    if choice == "mean":
        return weights.mean(axis=0)
    if isinstance(choice, bool) or not isinstance(choice, int | np.integer) or not -n <= choice < n:
        indices = "0 or -1" if n == 1 else f"0..{n - 1} or -{n}..-1"
        raise ConfigError(f"{key}={choice!r}: the model's cross-attention has {n} {key}"
                          f"{'' if n == 1 else 's'}; use {indices}, or {key}=mean.")
    return weights[int(choice)]


def select_attention(cross: np.ndarray, layer: int | str = -1, head: int | str = "mean") -> np.ndarray:
    """One [R,S] matrix from cross-attention [L,H,R,S]: a layer (or the layer mean), a head
    (or the head mean). The RNN's alpha is L = H = 1: layer 0 / -1 / mean and head 0 / -1 /
    mean all give it.

    Raises:
        ConfigError: ``layer`` or ``head`` is neither ``"mean"`` nor an index in range.
        ValueError: ``cross`` is not 4-D.
    """
    if np.ndim(cross) != 4:
        raise ValueError(f"cross-attention must be [layers, heads, tgt, src], got shape {np.shape(cross)}.")
    return _pick(_pick(np.asarray(cross), layer, "layer"), head, "head")  # [H,R,S] -> [R,S]


def word_links(item: ForcedAlignment, *, method: str = "argmax", threshold: float | None = None,
               shift: bool = False, layer: int | str = -1, head: int | str = "mean") -> set[Link]:
    """Word links (src word, tgt word) of one pair.

    Subword links come from :func:`teacher_forced_links` (plain: the step that predicts the
    target piece; ``shift``: the step that reads it as input, Chen et al. 2020,
    arXiv:2004.14837); ``</s>`` and padding never link; a word pair is linked when any
    of its subword pairs is (:func:`subword_to_word_links`).

    Raises:
        ConfigError: bad ``layer`` / ``head`` (see :func:`select_attention`).
        ValueError: bad ``method`` / ``threshold`` (see ``extract_links``).
    """
    matrix = select_attention(item.cross, layer, head)
    plain, shifted = teacher_forced_links(matrix, method, threshold)
    return subword_to_word_links(shifted if shift else plain, item.src_words, item.tgt_words)


def align_words(model, tokenizer, pairs: Sequence[tuple[str, str]], *, method: str = "argmax",
                threshold: float | None = None, shift: bool = False, layer: int | str = -1,
                head: int | str = "mean", reverse: tuple | None = None,
                symmetrization: str = "grow-diag-final-and", batch_sentences: int = 32,
                device: str | torch.device = "cpu",
                items: Sequence[ForcedAlignment] | None = None) -> list[set[Link]]:
    """Word alignments of a corpus, optionally symmetrised with a reverse-direction model.

    Args:
        model, tokenizer: the source->target model (``load_for_inference``).
        pairs: (source, target) texts.
        method, threshold, shift, layer, head: as in :func:`word_links`.
        reverse: ``(model, tokenizer)`` of a target->source model, or None. Its links
            (the same extraction settings) are flipped and combined with
            :func:`symmetrize` (Koehn et al. 2003; Moses' heuristics).
        symmetrization: one of ``word_alignment.SYMMETRIZATIONS``.
        batch_sentences, device: as in :func:`force_align`.
        items: ``force_align(model, tokenizer, pairs, ...)`` when already computed.

    Returns:
        One set of 0-based (source word, target word) links per pair.

    Raises:
        ConfigError, ValueError: as :func:`word_links` and :func:`symmetrize`.
    """
    settings = dict(method=method, threshold=threshold, shift=shift, layer=layer, head=head)
    if items is None:
        items = force_align(model, tokenizer, pairs, batch_sentences, device)
    links = [word_links(item, **settings) for item in items]
    if reverse is None:
        return links
    flipped = [(t, s) for s, t in pairs]
    back = force_align(reverse[0], reverse[1], flipped, batch_sentences, device)
    return [symmetrize(fwd, flip_links(word_links(b, **settings)), symmetrization,
                       src_len=item.n_src_words, tgt_len=item.n_tgt_words)
            for fwd, b, item in zip(links, back, items, strict=True)]


def read_pair_file(path: str | Path, separator: str = "|||") -> list[tuple[str, str]]:
    """Read ``source ||| target`` lines (the format of alignment test sets).

    Raises:
        CorpusError: missing / unreadable / empty file, or a line without exactly one
            separator (names the file and the 1-based line).
    """
    pairs = []
    for number, line in enumerate(read_lines(path), start=1):
        parts = line.split(separator)
        if len(parts) != 2:
            raise CorpusError(f"{path}, line {number}: expected 'source {separator} target' with "
                              f"one {separator!r}, found {len(parts) - 1}.")
        pairs.append((parts[0].strip(), parts[1].strip()))
    return pairs
