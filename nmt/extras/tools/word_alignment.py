"""Word alignments from attention: forced alignment, symmetrisation and alignment error rate.

A model reads each (source, target) pair as in training and returns every cross-attention
weight; one layer and head (or their mean) is a matrix [T+1, S+1] (row t: target subword t
over the source subwords; row T predicts ``</s>``, column S is the source ``</s>``). Hard
subword links come from it by argmax or a threshold, at the step that predicts the subword
or, shifted, at the step that reads it; ``</s>`` never links. Words are linked when any of
their subwords are; two directions combine by Koehn's heuristics, scored by AER::

    model, tokenizer, _ = load_for_inference("runs/tf/checkpoints/best.pt")
    items = force_align(model, tokenizer, [("Ein Hund läuft .", "A dog runs .")])
    links = word_links(items[0], method="argmax", shift=True, layer=-1, head="mean")
    scores = alignment_scores([links], *read_gold("gold.txt", one_based=True))

A link is ``(src, tgt)``, 0-based, source first whatever the model's direction; an
alignment is a set of links. Pharaoh format: a line of links ``i-j`` per sentence pair
(gold files mark possible links ``ipj``); words are the text's whitespace tokens. A
multilingual model's language tag (``force_align(..., tags=...)``) is a piece of no word:
it shows in the attention and links nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from nmt.config import ConfigError
from nmt.data.corpus import CorpusError, iter_lines
from nmt.data.languages import LANG_TAG
from nmt.data.links import (
    SYMMETRIZATIONS,
    AlignmentFormatError,
    Link,
    flip_links,
    parse_links,
    symmetrize,
    word_ids,
)
from nmt.evaluation.alignments import attention_panel, panel_choices
from nmt.inference.translator import capture_attention


def read_gold(path: str | Path, *, one_based: bool, src_lengths: Sequence[int] | None = None,
              tgt_lengths: Sequence[int] | None = None) -> tuple[list[set[Link]], list[set[Link]]]:
    """(sure, possible): one set of 0-based links per line of a Pharaoh file. ``one_based``
    has no default: 0- and 1-based files look alike, and a wrong guess shifts every link
    silently. ``src_lengths`` / ``tgt_lengths`` (words per sentence), when given, must match
    the number of lines and hold every index (AlignmentFormatError naming file and line)."""
    sure: list[set[Link]] = []
    possible: list[set[Link]] = []
    base = int(one_based)
    for number, line in enumerate(iter_lines(path), start=1):
        try:
            s, p = parse_links(line, one_based)
        except AlignmentFormatError as err:
            raise AlignmentFormatError(f"{path}, line {number}: {err}") from None
        for i, j in sorted(s | p):
            for side, index, lengths in (("source", i, src_lengths), ("target", j, tgt_lengths)):
                if lengths is not None and number <= len(lengths) and index >= lengths[number - 1]:
                    raise AlignmentFormatError(
                        f"{path}, line {number}: link {i + base}-{j + base} ({base}-based) points "
                        f"at {side} word {index + base}, but the sentence has "
                        f"{lengths[number - 1]} {side} words.")
        sure.append(s)
        possible.append(p)
    for side, lengths in (("source", src_lengths), ("target", tgt_lengths)):
        if lengths is not None and len(lengths) != len(sure):
            raise AlignmentFormatError(f"{path}: {len(sure)} lines but {len(lengths)} {side} "
                                       "sentences; the file needs one line per pair.")
    return sure, possible


def read_pair_file(path: str | Path, separator: str = "|||") -> list[tuple[str, str]]:
    """(source, target) of each ``source ||| target`` line (the format of alignment test sets)."""
    pairs = []
    for number, line in enumerate(iter_lines(path), start=1):
        parts = line.split(separator)
        if len(parts) != 2:
            raise CorpusError(f"{path}, line {number}: expected 'source {separator} target' with "
                              f"one {separator!r}, found {len(parts) - 1}.")
        pairs.append((parts[0].strip(), parts[1].strip()))
    return pairs


def piece_words(pieces: Sequence[str]) -> list[int]:
    """:func:`~nmt.data.links.word_ids` of ``pieces`` (no ``</s>``), with -1 (no word) for a
    leading language tag ``<2xx>``."""
    tag = int(bool(pieces) and re.fullmatch(LANG_TAG.format(".+"), pieces[0]) is not None)
    return [-1] * tag + word_ids(list(pieces[tag:]))


def word_link_cells(links: Iterable[Link], src: Sequence[str], tgt: Sequence[str]) -> set[Link]:
    """Heatmap cells (target subword row, source subword column) of every subword pair of
    each linked word pair; ``src`` and ``tgt`` are the labels, ``</s>`` last (never marked; a
    leading language tag neither). ValueError for a link to a word the labels do not have."""
    def pieces_of(labels: Sequence[str]) -> dict[int, list[int]]:
        words: dict[int, list[int]] = {}
        for k, w in enumerate(piece_words(list(labels)[:-1])):
            words.setdefault(w, []).append(k)
        return words

    src_words, tgt_words = pieces_of(src), pieces_of(tgt)
    cells = set()
    for i, j in links:
        if i not in src_words or j not in tgt_words:
            raise ValueError(f"link {i}-{j} (0-based) names a word the sentence lacks: it has "
                             f"{len(src_words)} source and {len(tgt_words)} target words.")
        cells.update((t, s) for t in tgt_words[j] for s in src_words[i])
    return cells


def check_extraction(method: str, threshold: float | None) -> None:
    """The one check of the threshold (``nmt-align`` runs it before any work; the schema
    checks ``method``): ConfigError unless it lies in (0, 1] (method=threshold needs one;
    with argmax it is optional: the least weight a row's argmax needs to link)."""
    if method == "threshold" and threshold is None:
        raise ConfigError("method=threshold needs threshold=W in (0, 1], the least weight of a "
                          "link (threshold=None).")
    if threshold is not None and not 0.0 < threshold <= 1.0:
        raise ConfigError(f"threshold={threshold} must lie in (0, 1].")


DEFAULT_SYMMETRIZATION = "grow-diag-final-and"   # two directions' links, none named


def check_symmetrization(symmetrization: str | None, reverse: bool, method: str = "argmax",
                         threshold: float | None = None, shift: bool = False,
                         eos_unaligned: bool = False) -> None:
    """The one check of how two directions combine (``nmt-align`` and :func:`align_words` run
    it before any work; None: :data:`DEFAULT_SYMMETRIZATION` with a reverse model). ConfigError:
    a name outside :data:`~nmt.data.links.SYMMETRIZATIONS` and ``agreement``, one given
    without a ``reverse`` model (one direction has nothing to combine), or ``agreement`` with
    an extraction setting it does not read (it reads word attention: layer, head,
    agreement_threshold)."""
    if symmetrization is None:
        return
    if symmetrization not in (*SYMMETRIZATIONS, "agreement"):
        raise ConfigError(f"symmetrize={symmetrization} is not one of "
                          f"{', '.join(SYMMETRIZATIONS)}, agreement.")
    if not reverse:
        raise ConfigError(f"symmetrize={symmetrization} combines two directions' links: give "
                          "the reverse model (reverse_checkpoint=...), or no symmetrize.")
    ignored = [f"{k}={v}" for k, v, default in (("method", method, "argmax"),
               ("threshold", threshold, None), ("shift", shift, False),
               ("eos_unaligned", eos_unaligned, False)) if v != default]
    if symmetrization == "agreement" and ignored:
        raise ConfigError(f"symmetrize=agreement reads the two directions' word attention "
                          f"(layer, head, agreement_threshold), not {', '.join(ignored)}: "
                          "drop them or choose another symmetrize.")


def extract_links(attention: np.ndarray, method: str = "argmax", threshold: float | None = None,
                  shift: bool = False) -> set[Link]:
    """Hard (src, tgt) links of a matrix [R, S] (row = target position, column = source):
    ``argmax`` links each row to its largest weight (the first on ties; none for a zero row,
    or with ``threshold`` one below it: the target stays unaligned), ``threshold`` every cell
    >= ``threshold``. With ``shift`` target t uses row t + 1 (SHIFT-ATT, Chen et al. 2020,
    arXiv:2004.14837): row i predicts token i from input token i - 1, so row t + 1 reads
    token t; R rows give R - 1 targets."""
    matrix = np.asarray(attention)[1:] if shift else np.asarray(attention)  # shift: row t+1 -> t
    if matrix.shape[1] == 0:
        return set()
    if method == "argmax":
        best = matrix.argmax(axis=1)  # [R]
        least = threshold or np.finfo(np.float64).tiny
        return {(int(s), t) for t, s in enumerate(best) if matrix[t, s] >= least}
    rows, cols = np.nonzero(matrix >= threshold)
    return {(int(s), int(t)) for t, s in zip(rows, cols, strict=True)}


@dataclass
class ForcedAlignment:
    """One teacher-forced pair: its S source and T target pieces (no ``</s>``; a language tag first
    where the model reads one), each piece's word index (-1: a tag), the words per side (a word may
    have no pieces if normalisation removes it), ``cross`` float32 [L,H,T+1,S+1], every layer's and
    head's weights, and ``alignment`` [T+1,S+1], the model's own (a guided model's supervised heads;
    None: ``cross``'s mean over the heads of its last layer)."""

    src_pieces: list[str]
    tgt_pieces: list[str]
    src_words: list[int]
    tgt_words: list[int]
    n_src_words: int
    n_tgt_words: int
    cross: np.ndarray
    alignment: np.ndarray | None = None


def _encode_words(encode_batch, text: str) -> tuple[list[int], list[int], int]:
    """(piece ids, word index per piece, number of words) of ``text``. Each word is encoded
    alone (SentencePiece never merges across whitespace): every piece keeps its word even
    where normalisation or ``<unk>`` hides the ``▁``."""
    words = text.split()
    ids, word_of = [], []
    for w, piece_ids in enumerate(encode_batch(words) if words else []):
        ids += piece_ids
        word_of += [w] * len(piece_ids)
    return ids, word_of, len(words)


def force_align(model, tokenizer, pairs: Sequence[tuple[str, str]], batch_sentences: int = 32,
                device: str | torch.device = "cpu",
                tags: tuple[int | None, int | None] = (None, None)) -> list[ForcedAlignment]:
    """Teacher-force every (source, target) pair (``batch_sentences`` per length-sorted
    batch) and keep its cross-attention (:func:`~nmt.inference.translator.capture_attention`)
    and the model's alignment (``Attention.alignment``: the full-context pass where the model
    has one, see :class:`~nmt.models.base.Seq2Seq`). ``tags``: the
    direction's (source, target) tag ids, each put first on its side as a piece of no word
    (:func:`~nmt.inference.translator.direction_tags`; None: none)."""
    def tagged(encoded: tuple[list[int], list[int], int], tag: int | None) -> tuple:
        ids, words, n = encoded
        return (ids, words, n) if tag is None else ([tag, *ids], [-1, *words], n)

    src = [tagged(_encode_words(tokenizer.encode_src_batch, s), tags[0]) for s, _ in pairs]
    tgt = [tagged(_encode_words(tokenizer.encode_tgt_batch, t), tags[1]) for _, t in pairs]
    captured = capture_attention(model, [s[0] for s in src], [t[0] for t in tgt], device,
                                 batch_sentences)
    return [ForcedAlignment(tokenizer.src_pieces(s_ids), tokenizer.tgt_pieces(t_ids), s_words,
                            t_words, n_s, n_t, weights["cross"], weights["alignment"])
            for (s_ids, s_words, n_s), (t_ids, t_words, n_t), weights
            in zip(src, tgt, captured, strict=True)]


def select_attention(cross: np.ndarray, layer: int | str = -1, head: int | str = "mean"
                     ) -> np.ndarray:
    """One [R,S] matrix of cross-attention [L,H,R,S]: a layer (or ``"mean"``), then a head
    (or ``"mean"``); the RNN's alpha is L = H = 1. ConfigError for an index out of range."""
    (lay,), (hd,) = panel_choices(cross, layer, head, grid=False)
    return attention_panel(np.asarray(cross), lay, hd)


def item_attention(item: ForcedAlignment, layer: int | str | None = None,
                   head: int | str | None = None) -> np.ndarray:
    """The matrix [T+1, S+1] of one pair that links are read from: with ``layer`` and ``head``
    None the model's alignment (``item.alignment``; else the last layer's head mean), else
    :func:`select_attention` (a None of the two: -1 or ``"mean"``)."""
    if layer is None and head is None and item.alignment is not None:
        return np.asarray(item.alignment)
    return select_attention(item.cross, -1 if layer is None else layer,
                            "mean" if head is None else head)


def word_links(item: ForcedAlignment, *, method: str = "argmax", threshold: float | None = None,
               shift: bool = False, layer: int | str | None = None,
               head: int | str | None = None, eos_unaligned: bool = False) -> set[Link]:
    """(src word, tgt word) links of one pair: words linked when any of their subwords are. Subword
    links by :func:`extract_links` of :func:`item_attention`'s matrix [T+1, S+1] without the source
    ``</s>`` column and a tag's (an ``argmax`` row mostly on ``</s>`` links to its best real
    subword, as fairseq's ``extract_hard_alignment``; with ``eos_unaligned`` such a row, whose
    largest weight is on ``</s>``, links nothing: ``</s>`` as IBM models' NULL word): target t from
    row t or, with ``shift``, row t + 1 (suits the Transformer: the Bahdanau query s_{i-1} has not
    read the input token yet); a target tag's row links nothing."""
    matrix = item_attention(item, layer, head)
    if eos_unaligned:  # rows whose largest weight is on </s>: zero, so nothing links
        matrix = np.where((matrix.argmax(1) == matrix.shape[1] - 1)[:, None], 0.0, matrix)
    cols = [k for k, w in enumerate(item.src_words) if w >= 0]
    source = matrix[:, cols]  # [T+1, S']: without </s> and a language tag
    links = extract_links(source if shift else source[:-1], method, threshold, shift)
    return {(item.src_words[cols[s]], item.tgt_words[t]) for s, t in links
            if item.tgt_words[t] >= 0}


def word_attention(item: ForcedAlignment, layer: int | str | None = None,
                   head: int | str | None = None) -> np.ndarray:
    """The pair's attention between words, [target words, source words]: of
    :func:`item_attention`'s matrix (the rows that predict target pieces; no ``</s>``, no
    tag), each target word's rows averaged and each source word's columns summed, so a row
    is a distribution over source words (less the ``</s>`` share); a word without pieces
    gets zeros."""
    matrix = item_attention(item, layer, head)[:-1]
    out = np.zeros((item.n_tgt_words, item.n_src_words))
    for t, w in enumerate(item.tgt_words):
        if w >= 0:
            np.add.at(out[w], [v for v in item.src_words if v >= 0],
                      matrix[t, [k for k, v in enumerate(item.src_words) if v >= 0]])
    counts = np.bincount([w for w in item.tgt_words if w >= 0], minlength=item.n_tgt_words)
    return out / np.maximum(counts, 1)[:, None]


def agreement_links(forward: np.ndarray, backward: np.ndarray, threshold: float = 0.2
                    ) -> set[Link]:
    """(src, tgt) links where the two directions agree (Chen et al. 2021, Mask-Align,
    sec. 3.4): ``2AB / (A + B) >= threshold``, cell by cell, for ``forward`` A [target words,
    source words] (:func:`word_attention` of the source->target model) and ``backward`` B
    [source words, target words] (the target->source model's), transposed."""
    a, b = np.asarray(forward, np.float64), np.asarray(backward, np.float64).T
    score = np.divide(2 * a * b, a + b, out=np.zeros_like(a), where=a + b > 0)
    rows, cols = np.nonzero(score >= threshold)
    return {(int(s), int(t)) for t, s in zip(rows, cols, strict=True)}


def align_words(model, tokenizer, pairs: Sequence[tuple[str, str]], *, method: str = "argmax",
                threshold: float | None = None, shift: bool = False,
                layer: int | str | None = None, head: int | str | None = None,
                eos_unaligned: bool = False, reverse: tuple | None = None,
                symmetrization: str | None = None, batch_sentences: int = 32,
                device: str | torch.device = "cpu",
                items: Sequence[ForcedAlignment] | None = None,
                agreement_threshold: float = 0.2) -> list[set[Link]]:
    """Word links of each pair by :func:`word_links`; with ``reverse`` (a target->source
    ``(model, tokenizer)``) symmetrised with its flipped links (same settings) by
    :func:`~nmt.data.links.symmetrize`, or with ``symmetrization="agreement"`` the two directions'
    :func:`word_attention` combined by :func:`agreement_links` (``agreement_threshold``);
    None: :data:`DEFAULT_SYMMETRIZATION`. ``items``: ``force_align(model, tokenizer, pairs)``
    if computed. ``reverse`` may hold a third item, its direction's ``tags``
    (:func:`force_align`). ConfigError: :func:`check_symmetrization`'s (a ``symmetrization``
    without ``reverse`` among them)."""
    check_symmetrization(symmetrization, reverse is not None, method, threshold, shift,
                         eos_unaligned)
    symmetrization = symmetrization or DEFAULT_SYMMETRIZATION
    settings = dict(method=method, threshold=threshold, shift=shift, layer=layer, head=head,
                    eos_unaligned=eos_unaligned)
    if items is None:
        items = force_align(model, tokenizer, pairs, batch_sentences, device)
    if reverse is None:
        return [word_links(item, **settings) for item in items]
    rev_model, rev_tokenizer, *rev_tags = reverse
    back = force_align(rev_model, rev_tokenizer, [(t, s) for s, t in pairs], batch_sentences,
                       device, *rev_tags)
    if symmetrization == "agreement":
        return [agreement_links(word_attention(f, layer, head), word_attention(b, layer, head),
                                agreement_threshold) for f, b in zip(items, back, strict=True)]
    return [symmetrize(word_links(item, **settings), flip_links(word_links(b, **settings)),
                       symmetrization, src_len=item.n_src_words, tgt_len=item.n_tgt_words)
            for item, b in zip(items, back, strict=True)]


def alignment_scores(predicted: Sequence[Iterable[Link]], sure: Sequence[Iterable[Link]],
                     possible: Sequence[Iterable[Link]]) -> dict[str, float | int]:
    """Precision, recall and alignment error rate over a corpus, one link set per sentence:
    Och and Ney (2003), "A Systematic Comparison of Various Statistical Alignment Models",
    Computational Linguistics 29(1). Per sentence P := P ∪ S; counts are summed over the
    corpus before dividing, with A the predicted links:

        precision = |A ∩ P| / |A|,   recall = |A ∩ S| / |S|,
        AER = 1 - (|A ∩ S| + |A ∩ P|) / (|A| + |S|).

    A ratio over an empty set is 1.0 (no links predicted: precision 1.0, recall 0.0, AER
    1.0), and AER is 0.0 when A and S are both empty. Returns fractions (papers print
    100 x) ``aer``, ``precision``, ``recall`` and the counts ``links`` |A|, ``sure`` |S|,
    ``possible`` |P ∪ S|, ``sure_hits`` |A ∩ S|, ``possible_hits`` |A ∩ P|."""
    n_a = n_s = n_p = hits_s = hits_p = 0
    for a, s, p in zip(predicted, sure, possible, strict=True):
        a, s = set(a), set(s)
        p = set(p) | s
        n_a, n_s, n_p = n_a + len(a), n_s + len(s), n_p + len(p)
        hits_s += len(a & s)
        hits_p += len(a & p)
    return {"aer": 1.0 - (hits_s + hits_p) / (n_a + n_s) if n_a + n_s else 0.0,
            "precision": hits_p / n_a if n_a else 1.0, "recall": hits_s / n_s if n_s else 1.0,
            "links": n_a, "sure": n_s, "possible": n_p, "sure_hits": hits_s,
            "possible_hits": hits_p}
