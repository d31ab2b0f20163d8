"""Word alignments from attention, symmetrised and scored by alignment error rate (AER).

The numpy core of "word alignments with AER"; models, search and CLIs stay outside.

Conventions:

* A link is a pair ``(src, tgt)`` of 0-based positions, source first whatever the
  direction of the model that produced it; an alignment is a ``set`` of links.
* An attention matrix is ``[tgt_len, src_len]``: row ``t`` holds the weights of target
  position ``t`` over the source positions (the layout of ``alignments.npz``, see
  :mod:`nmt.evaluation.alignments`); rows of real models sum to 1.
* Pharaoh format: one line per sentence pair, links ``i-j`` (source word ``i``, target
  word ``j``) separated by spaces; gold files mark possible links ``ipj``.

One sentence of ``alignments.npz`` (``matrix`` [T+1, S+1], ``</s>`` last on both sides)
becomes word links with::

    plain, shifted = teacher_forced_links(entry.matrix)            # subword links, T x S
    _, src, tgt = drop_eos(entry.matrix, entry.src, entry.tgt)     # pieces without </s>
    words = subword_to_word_links(shifted, word_ids(src), word_ids(tgt))

and a test set is scored with ``alignment_scores(predicted, *read_gold(path, one_based=True))``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

Link = tuple[int, int]

EOS_PIECE = "</s>"
SPECIAL_PIECES = frozenset({"<pad>", "<s>", "</s>"})
SYMMETRIZATIONS = ("intersection", "union", "grow-diag", "grow-diag-final", "grow-diag-final-and")
# Koehn's neighbours as (target, source) offsets: the 4 adjacent cells, then the 4 diagonal ones
_NEIGHBOURS = ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))


class AlignmentFormatError(ValueError):
    """A Pharaoh alignment file or line is malformed (message names file, line and link)."""


# ---------------------------------------------------------------------- Pharaoh format
def _link_pattern(possible_marker: str) -> re.Pattern[str]:
    if not possible_marker or possible_marker == "-" or re.search(r"[0-9\s]", possible_marker):
        raise ValueError(f"possible_marker {possible_marker!r} must be a non-empty string "
                         "without digits or spaces, other than '-'.")
    return re.compile(f"([0-9]+)(-|{re.escape(possible_marker)})([0-9]+)")


def parse_links(line: str, one_based: bool = False,
                possible_marker: str = "p") -> tuple[set[Link], set[Link]]:
    """Parse one Pharaoh line: sure links ``i-j`` and possible links ``i{possible_marker}j``.

    Args:
        line: links separated by whitespace; an empty line has no links.
        one_based: the line counts words from 1 (as hand-made gold files usually do);
            the links come back 0-based either way.
        possible_marker: the separator of possible links (``p`` as in ``3p4``).

    Returns:
        (sure, possible): sets of 0-based (src, tgt) links. ``possible`` holds only the
        links marked possible; :func:`alignment_scores` adds the sure ones to it.

    Raises:
        AlignmentFormatError: a token is not ``i-j`` / ``ipj`` with non-negative integers,
            or an index is 0 while ``one_based``.
        ValueError: ``possible_marker`` is empty, ``-`` or contains digits or spaces.
    """
    pattern = _link_pattern(possible_marker)
    sure: set[Link] = set()
    possible: set[Link] = set()
    for token in line.split():
        match = pattern.fullmatch(token)
        if match is None:
            raise AlignmentFormatError(
                f"malformed link {token!r}: expected 'i-j' (sure) or 'i{possible_marker}j' "
                "(possible), i the source and j the target word index, both non-negative "
                "integers.")
        i, j = int(match[1]), int(match[3])
        if one_based:
            if i == 0 or j == 0:
                raise AlignmentFormatError(
                    f"link {token!r} has index 0, but indices are read as 1-based "
                    "(one_based=True); read a 0-based file with one_based=False.")
            i, j = i - 1, j - 1
        (possible if match[2] == possible_marker else sure).add((i, j))
    return sure, possible


def _read_lines(path: Path) -> list[str]:
    """Lines of a UTF-8 text file without ``\\n`` / ``\\r\\n`` (a final line break is optional)."""
    if not path.is_file():
        raise AlignmentFormatError(f"{path}: file not found (or not a regular file).")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = err.object.count(b"\n", 0, err.start) + 1
        raise AlignmentFormatError(f"{path}, line {line}: invalid UTF-8; re-encode the file "
                                   "as UTF-8.") from None
    if not text:
        raise AlignmentFormatError(f"{path}: the file is empty; an alignment file has one line "
                                   "per sentence pair (an empty line for a pair without links).")
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def read_gold(path: str | Path, *, one_based: bool, src_lengths: Sequence[int] | None = None,
              tgt_lengths: Sequence[int] | None = None,
              possible_marker: str = "p") -> tuple[list[set[Link]], list[set[Link]]]:
    """Read a Pharaoh alignment file: one line of links per sentence pair.

    ``one_based`` has no default: 0- and 1-based files look alike, and a wrong guess
    shifts every link by one without any error (and gives a terrible AER).

    Args:
        path: UTF-8 text file, e.g. a gold standard ``1-1 2p3 3-2`` or model output.
        one_based: the file counts words from 1; links come back 0-based either way.
        src_lengths, tgt_lengths: words per source / target sentence (e.g.
            ``len(line.split())`` of the tokenised text the gold refers to); when given,
            every index is checked against them.
        possible_marker: the separator of possible links.

    Returns:
        (sure, possible): two lists with one set of 0-based (src, tgt) links per line.

    Raises:
        AlignmentFormatError: the file is missing, not UTF-8 or empty; the number of lines
            differs from the number of lengths; or a link is malformed, has a 0 index while
            ``one_based`` or lies outside its sentence (message names file and 1-based line).
    """
    path = Path(path)
    lines = _read_lines(path)
    for side, lengths in (("source", src_lengths), ("target", tgt_lengths)):
        if lengths is not None and len(lengths) != len(lines):
            raise AlignmentFormatError(f"{path}: {len(lines)} lines but {len(lengths)} {side} "
                                       "sentence lengths; the file needs one line per pair.")
    base = 1 if one_based else 0
    sure: list[set[Link]] = []
    possible: list[set[Link]] = []
    for number, line in enumerate(lines, start=1):
        try:
            s, p = parse_links(line, one_based, possible_marker)
        except AlignmentFormatError as err:
            raise AlignmentFormatError(f"{path}, line {number}: {err}") from None
        for i, j in sorted(s | p):
            for side, index, lengths in (("source", i, src_lengths), ("target", j, tgt_lengths)):
                if lengths is not None and index >= lengths[number - 1]:
                    raise AlignmentFormatError(
                        f"{path}, line {number}: link {i + base}-{j + base} ({base}-based) "
                        f"points at {side} word {index + base}, but the sentence has "
                        f"{lengths[number - 1]} {side} words; check one_based and that the "
                        "file matches the tokenised text.")
        sure.append(s)
        possible.append(p)
    return sure, possible


def format_links(links: Iterable[Link], one_based: bool = False) -> str:
    """``links`` as a Pharaoh line: ``i-j`` sorted by source, then target index.

    Raises:
        ValueError: an index is not a non-negative integer.
    """
    base = 1 if one_based else 0
    out = []
    for i, j in sorted(links):
        if not all(isinstance(x, int | np.integer) and x >= 0 for x in (i, j)):
            raise ValueError(f"link {(i, j)!r}: indices must be non-negative integers.")
        out.append(f"{i + base}-{j + base}")
    return " ".join(out)


def write_links(path: str | Path, alignments: Iterable[Iterable[Link]],
                one_based: bool = False) -> None:
    """Write one Pharaoh line per sentence (an empty line for no links), UTF-8, ``\\n`` ends."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(format_links(links, one_based) + "\n" for links in alignments)
    path.write_text(text, encoding="utf-8")


# ------------------------------------------------------------------- subwords -> words
def word_ids(pieces: Sequence[str]) -> list[int]:
    """Word index of each SentencePiece piece: a piece starting with ``▁`` starts a word.

    The first piece starts word 0 even without ``▁``. A lone ``▁`` piece (SentencePiece
    emits one before a character it cannot merge with the space, e.g. ``▁`` ``(``) belongs
    to the following word; a lone ``▁`` at the very end belongs to the word before it.
    Words are then the whitespace-separated tokens of the text that was encoded, which is
    what gold alignments count.

    Args:
        pieces: the S subword strings of one sentence, without ``</s>`` or padding.

    Returns:
        S non-decreasing word indices, starting at 0 (``[]`` for no pieces).

    Raises:
        ValueError: a piece is ``</s>``, ``<s>`` or ``<pad>`` (drop them first, e.g. with
            :func:`drop_eos`): special positions must never become words.
    """
    ids = [0] * len(pieces)
    word, boundary, lone = -1, False, []  # lone: pending lone "▁" pieces, join the next word
    for k, piece in enumerate(pieces):
        if piece in SPECIAL_PIECES:
            raise ValueError(f"piece {k} is {piece!r}: pass the pieces without </s>, <s> and "
                             "padding (see drop_eos), they must never be aligned.")
        boundary = boundary or k == 0 or piece.startswith("▁")
        if piece == "▁":
            lone.append(k)
            continue
        if boundary:
            word += 1
        boundary = False
        for m in [*lone, k]:
            ids[m] = word
        lone = []
    for m in lone:  # trailing lone "▁": whitespace after the last word
        ids[m] = max(word, 0)
    return ids


def subword_to_word_links(subword_links: Iterable[Link], src_word_ids: Sequence[int],
                          tgt_word_ids: Sequence[int]) -> set[Link]:
    """Word links: words ``(a, b)`` are linked when any of their subword pairs is.

    Args:
        subword_links: (src, tgt) subword positions, e.g. from :func:`teacher_forced_links`.
        src_word_ids, tgt_word_ids: :func:`word_ids` of the pieces without ``</s>``.

    Raises:
        ValueError: a link points outside the pieces, e.g. at an ``</s>`` or padding
            position that was not removed (such positions must never produce links).
    """
    words: set[Link] = set()
    for s, t in subword_links:
        if not (0 <= s < len(src_word_ids) and 0 <= t < len(tgt_word_ids)):
            raise ValueError(f"subword link {(s, t)} lies outside {len(src_word_ids)} source x "
                             f"{len(tgt_word_ids)} target pieces: an </s> or padding position? "
                             "Extract links from the matrix without those rows and columns.")
        words.add((src_word_ids[s], tgt_word_ids[t]))
    return words


def drop_eos(attention: np.ndarray, src_pieces: Sequence[str], tgt_pieces: Sequence[str],
             eos: str = EOS_PIECE) -> tuple[np.ndarray, list[str], list[str]]:
    """Remove the final ``</s>`` row and column of a matrix and its labels.

    Args:
        attention: [T+1, S+1] matrix as stored in ``alignments.npz`` (row ``t`` predicts
            target piece ``t``; the last row predicts ``</s>``, the last column is the
            source ``</s>``).
        src_pieces: S+1 source labels ending with ``eos``.
        tgt_pieces: T+1 target labels ending with ``eos``.

    Returns:
        (attention [T, S], S source pieces, T target pieces): what :func:`extract_links`
        (unshifted), :func:`word_ids` and :func:`subword_to_word_links` expect. The
        shifted extraction needs the ``</s>`` row: give it the full matrix through
        :func:`teacher_forced_links`.

    Raises:
        ValueError: the shape does not match the labels, or a side does not end with
            ``eos``.
    """
    matrix = np.asarray(attention)
    if matrix.shape != (len(tgt_pieces), len(src_pieces)):
        raise ValueError(f"attention shape {matrix.shape} does not match {len(tgt_pieces)} "
                         f"target x {len(src_pieces)} source labels.")
    for side, pieces in (("source", src_pieces), ("target", tgt_pieces)):
        if not pieces or pieces[-1] != eos:
            raise ValueError(f"the {side} labels {list(pieces)[-3:]} do not end with {eos!r}; "
                             "expected the labels of an alignments.npz entry.")
    return matrix[:-1, :-1], list(src_pieces[:-1]), list(tgt_pieces[:-1])


# ------------------------------------------------------------------ attention -> links
def _as_matrix(attention: np.ndarray) -> np.ndarray:
    matrix = np.asarray(attention)
    if matrix.ndim != 2:
        raise ValueError(f"attention must be a 2-D [tgt_len, src_len] matrix, got shape "
                         f"{matrix.shape}.")
    if not np.isfinite(matrix).all():
        raise ValueError("attention contains NaN or infinite weights.")
    return matrix


def extract_links(attention: np.ndarray, method: str = "argmax", threshold: float | None = None,
                  shift: bool = False) -> set[Link]:
    """Hard links from an attention matrix [R, S] (row = target position, column = source).

    * ``argmax``: each target position links to its source position of largest weight
      (the first one on ties; none when the whole row is 0).
    * ``threshold``: every cell with weight >= ``threshold``; a row may link to several
      source positions or to none.

    Without ``shift``, row ``t`` is used for target position ``t`` (R targets). With
    ``shift`` (SHIFT-ATT, Chen et al. 2020, "Accurate Word Alignment Induction from Neural
    Machine Translation", arXiv:2004.14837), target position ``t`` uses row ``t + 1``, the
    decoding step where token ``t`` is the decoder *input*: in a teacher-forced matrix row
    ``i`` predicts token ``i`` from input token ``i - 1`` (``<s>`` for row 0). So R rows
    give R - 1 targets and row 0 is unused; the last token's row is the step that
    predicts ``</s>``. Every column counts: remove ``</s>`` and padding columns first (or
    use :func:`teacher_forced_links`). Weights are used as given, not renormalised.

    Args:
        attention: float [R, S].
        method: ``"argmax"`` or ``"threshold"``.
        threshold: weight in (0, 1], required by ``"threshold"`` and refused otherwise.
        shift: use row ``t + 1`` for target ``t`` (needs R >= 1).

    Returns:
        Set of (src, tgt) links with src < S and tgt < R (R - 1 with ``shift``).

    Raises:
        ValueError: not a 2-D finite matrix, unknown method, missing / out-of-range /
            unused threshold, or ``shift`` with no rows.
    """
    matrix = _as_matrix(attention)
    if method == "threshold":
        if threshold is None or not 0.0 < threshold <= 1.0:
            raise ValueError(f"method='threshold' needs a threshold in (0, 1], got {threshold}.")
    elif method == "argmax":
        if threshold is not None:
            raise ValueError(f"threshold={threshold} is only used by method='threshold'; "
                             "leave it None with method='argmax'.")
    else:
        raise ValueError(f"unknown method {method!r}: expected 'argmax' or 'threshold'.")
    if shift:
        if matrix.shape[0] == 0:
            raise ValueError("shift=True needs the row after the last target token (the step "
                             "that predicts </s>); the matrix has no rows.")
        matrix = matrix[1:]  # row t + 1 -> target t
    if matrix.shape[1] == 0:
        return set()
    if method == "argmax":
        best = matrix.argmax(axis=1)  # [R]
        return {(int(s), t) for t, s in enumerate(best) if matrix[t, s] > 0}
    rows, cols = np.nonzero(matrix >= threshold)
    return {(int(s), int(t)) for t, s in zip(rows, cols, strict=True)}


def teacher_forced_links(attention: np.ndarray, method: str = "argmax",
                         threshold: float | None = None) -> tuple[set[Link], set[Link]]:
    """Plain and shifted subword links from a full teacher-forced matrix [T+1, S+1].

    Layout (that of ``alignments.npz`` and of forced decoding of the reference): T target
    subwords plus the ``</s>`` row, S source subwords plus the ``</s>`` column; row ``i``
    predicts target token ``i`` (row T predicts ``</s>``) and its decoder input is token
    ``i - 1`` (``<s>`` for row 0).

    * plain: target ``t`` uses row ``t``, for t < T (the ``</s>`` row is dropped).
    * shifted (Chen et al. 2020): target ``t`` uses row ``t + 1``, where ``t`` is the
      decoder input; the last token (t = T - 1) uses the ``</s>``-predicting row T.

    The source ``</s>`` column is removed before extraction, so it can never be linked: a
    row that attends mostly to ``</s>`` still links to its best real source subword with
    ``argmax`` (as fairseq's ``extract_hard_alignment`` masks ``</s>``), and may link to
    nothing with ``threshold`` (weights are not renormalised). With the Bahdanau decoder
    the attention query is s_{i-1}, which has not read the input token yet (it is fed
    with c_i), so the shift mainly suits the Transformer.

    Args:
        attention: float [T+1, S+1], rows summing to 1.
        method, threshold: as in :func:`extract_links`.

    Returns:
        (plain, shifted): sets of (src, tgt) subword links with src < S and tgt < T.

    Raises:
        ValueError: fewer than one row or column, or as :func:`extract_links`.
    """
    matrix = _as_matrix(attention)
    if matrix.shape[0] < 1 or matrix.shape[1] < 1:
        raise ValueError(f"expected a teacher-forced [T+1, S+1] matrix with the </s> row and "
                         f"column, got shape {matrix.shape}.")
    source = matrix[:, :-1]  # [T+1, S]: without the </s> column
    plain = extract_links(source[:-1], method, threshold)  # rows 0..T-1
    shifted = extract_links(source, method, threshold, shift=True)  # rows 1..T
    return plain, shifted


# ---------------------------------------------------------------------- symmetrisation
def flip_links(links: Iterable[Link]) -> set[Link]:
    """Swap each link's sides: a target->source model's (tgt, src) links become (src, tgt)."""
    return {(j, i) for i, j in links}


def symmetrize(src2tgt: Iterable[Link], tgt2src: Iterable[Link],
               method: str = "grow-diag-final-and", *, src_len: int, tgt_len: int) -> set[Link]:
    """Combine the alignments of two directional models (Moses heuristics).

    Koehn, Och and Marcu (2003), "Statistical Phrase-Based Translation", and the Moses
    training step that calls ``symal``; this follows Koehn's pseudo-code:

    * ``intersection`` / ``union`` of the two sets.
    * ``grow-diag``: start from the intersection; repeat until nothing changes: visit the
      aligned cells in target-major order (target position, then source position) and
      add each of the 8 neighbours (adjacent, then diagonal) that is in the union and
      whose source word or target word is still unaligned.
    * ``grow-diag-final``: then visit the links of ``src2tgt``, then those of ``tgt2src``
      (each target-major) and add each one whose source or target word is unaligned.
    * ``grow-diag-final-and``: the same, but both words must be unaligned.

    Added links make words aligned at once, so the visiting order can decide between
    competing links (hence ``src2tgt`` before ``tgt2src``).

    Args:
        src2tgt, tgt2src: (src, tgt) links of the two models, in the same orientation
            (flip the target->source model's links first, see :func:`flip_links`).
        method: one of :data:`SYMMETRIZATIONS`.
        src_len, tgt_len: sentence lengths in words (or subwords, matching the links).

    Returns:
        The symmetrised set of (src, tgt) links.

    Raises:
        ValueError: unknown method, or a link outside ``src_len`` x ``tgt_len``.
    """
    if method not in SYMMETRIZATIONS:
        raise ValueError(f"unknown symmetrisation {method!r}: expected one of "
                         f"{', '.join(SYMMETRIZATIONS)}.")
    forward, backward = set(src2tgt), set(tgt2src)
    for name, links in (("src2tgt", forward), ("tgt2src", backward)):
        for i, j in links:
            if not (0 <= i < src_len and 0 <= j < tgt_len):
                raise ValueError(f"{name} link {(i, j)} lies outside the {src_len} source x "
                                 f"{tgt_len} target words.")
    union = forward | backward
    alignment = forward & backward
    if method == "intersection":
        return alignment
    if method == "union":
        return union
    src_aligned = {i for i, _ in alignment}
    tgt_aligned = {j for _, j in alignment}

    def add(i: int, j: int) -> None:
        alignment.add((i, j))
        src_aligned.add(i)
        tgt_aligned.add(j)

    added = True
    while added:  # grow-diag
        added = False
        for e in range(tgt_len):
            if e not in tgt_aligned:  # its row has no cell to grow from in this pass
                continue
            for f in range(src_len):
                if (f, e) not in alignment:
                    continue
                for de, df in _NEIGHBOURS:
                    e_new, f_new = e + de, f + df
                    if ((f_new, e_new) in union and (f_new, e_new) not in alignment
                            and (f_new not in src_aligned or e_new not in tgt_aligned)):
                        add(f_new, e_new)
                        added = True
    if method == "grow-diag":
        return alignment
    both = method == "grow-diag-final-and"
    for links in (forward, backward):  # final
        for f, e in sorted(links, key=lambda link: (link[1], link[0])):
            f_free, e_free = f not in src_aligned, e not in tgt_aligned
            if (f_free and e_free) if both else (f_free or e_free):
                add(f, e)
    return alignment


# ---------------------------------------------------------------------------- scoring
def alignment_scores(predicted: Sequence[Iterable[Link]], sure: Sequence[Iterable[Link]],
                     possible: Sequence[Iterable[Link]]) -> dict[str, float | int]:
    """Precision, recall and alignment error rate (Och and Ney 2003) over a corpus.

    Och and Ney (2003), "A Systematic Comparison of Various Statistical Alignment Models",
    Computational Linguistics 29(1). Per sentence the possible links include the sure
    ones (P := P ∪ S); counts are summed over the corpus before dividing (not averaged
    per sentence), with A the predicted links:

        precision = |A ∩ P| / |A|,   recall = |A ∩ S| / |S|,
        AER = 1 - (|A ∩ S| + |A ∩ P|) / (|A| + |S|).

    Empty sets: a ratio over an empty set is 1.0 (nothing predicted is wrong, nothing sure
    is missed), so no links predicted give precision 1.0, recall 0.0 and AER 1.0 (when
    the gold has sure links), and AER is 0.0 when both A and S are empty.

    Args:
        predicted, sure, possible: one set of 0-based (src, tgt) links per sentence, e.g.
            ``sure, possible = read_gold(...)``.

    Returns:
        ``aer``, ``precision``, ``recall`` (fractions in [0, 1]; papers print 100 x) and
        the counts ``links`` |A|, ``sure`` |S|, ``possible`` |P ∪ S|, ``sure_hits``
        |A ∩ S|, ``possible_hits`` |A ∩ P|.

    Raises:
        ValueError: the three lists differ in length.
    """
    if not len(predicted) == len(sure) == len(possible):
        raise ValueError(f"{len(predicted)} predicted, {len(sure)} sure and {len(possible)} "
                         "possible alignments: they must pair up, one per sentence.")
    n_a = n_s = n_p = hits_s = hits_p = 0
    for a, s, p in zip(predicted, sure, possible, strict=True):
        a, s = set(a), set(s)
        p = set(p) | s
        n_a, n_s, n_p = n_a + len(a), n_s + len(s), n_p + len(p)
        hits_s += len(a & s)
        hits_p += len(a & p)
    return {
        "aer": 1.0 - (hits_s + hits_p) / (n_a + n_s) if n_a + n_s else 0.0,
        "precision": hits_p / n_a if n_a else 1.0,
        "recall": hits_s / n_s if n_s else 1.0,
        "links": n_a, "sure": n_s, "possible": n_p, "sure_hits": hits_s, "possible_hits": hits_p,
    }
