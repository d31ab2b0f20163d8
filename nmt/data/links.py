"""Word links as training data (guided alignment): Pharaoh lines, read beside the corpus
(written by :func:`write_links`), mapped from words to the subwords a batch holds, and two
directions' links combined by Koehn's heuristics (:func:`symmetrize`: the eflomal teacher's
links and nmt-align's).

A link is ``(src, tgt)``, 0-based word indices, source first; words are the whitespace tokens
of the raw sentence, and SentencePiece pieces nest inside them (it never merges across white
space), so :func:`word_ids` of a sentence's pieces names each piece's word. A word link links
every subword of the one word to every subword of the other (:func:`subword_links`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np

from nmt.data.corpus import CorpusError, iter_lines
from nmt.runtime import write_text_atomic

Link = tuple[int, int]
_LINK = re.compile(r"([0-9]+)([-p])([0-9]+)")
# Koehn's neighbours as (target, source) offsets: the 4 adjacent cells, then the 4 diagonal ones
_NEIGHBOURS = ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))
SYMMETRIZATIONS = ("intersection", "union", "grow-diag", "grow-diag-final", "grow-diag-final-and")


class AlignmentFormatError(CorpusError):
    """A malformed Pharaoh alignment file or line (names the file, line and link)."""


def parse_links(line: str, one_based: bool = False) -> tuple[set[Link], set[Link]]:
    """(sure, possible) 0-based links of one Pharaoh line (``i-j`` sure, ``ipj`` possible)."""
    sure: set[Link] = set()
    possible: set[Link] = set()
    for token in line.split():
        match = _LINK.fullmatch(token)
        if match is None:
            raise AlignmentFormatError(f"malformed link {token!r}: expected i-j (sure) or ipj "
                                       "(possible) with non-negative integers i, j.")
        i, j = int(match[1]) - one_based, int(match[3]) - one_based
        if i < 0 or j < 0:
            raise AlignmentFormatError(f"link {token!r} has index 0 but one_based=True.")
        (possible if match[2] == "p" else sure).add((i, j))
    return sure, possible


def word_ids(pieces: Sequence[str]) -> list[int]:
    """Word index of each SentencePiece piece (no ``</s>``): a piece starting with ``▁``
    starts a word, and the first piece starts word 0 even without ``▁``. A lone ``▁`` piece
    (SentencePiece emits one before a character it cannot merge with the space, e.g. ``▁``
    ``(``) belongs to the following word, and at the very end to the word before it. Words
    are then the whitespace tokens of the encoded text. ValueError for ``</s>``, ``<s>`` or
    ``<pad>``: those must never become words."""
    ids = [0] * len(pieces)
    word, boundary, lone = -1, False, []  # lone: pending lone "▁" pieces, join the next word
    for k, piece in enumerate(pieces):
        if piece in ("<pad>", "<s>", "</s>"):
            raise ValueError(f"piece {k} is {piece!r}: drop </s>, <s> and padding first.")
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


def links_fingerprint(path: str | Path) -> str:
    """sha256 of a links file's bytes (part of the token cache's key); AlignmentFormatError
    naming the file when it cannot be read."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError as err:
        raise AlignmentFormatError(
            f"{path}: cannot be read ({err.strerror or err}); data.alignments names the training "
            "split's word links.") from None


def with_links(pairs: Iterable[tuple], path: str | Path, whole: bool = True
               ) -> Iterator[tuple]:
    """``(source, target, links, ...)`` of each pair ``(source, target, ...)``, the links
    from line k of the Pharaoh file
    ``path`` (0-based ``i-j``, source word i, target word j; ``ipj`` counts as a link too) for
    pair k. AlignmentFormatError naming the file and line: a malformed link, one past the
    sentence's words, fewer lines than pairs, or (``whole``: ``pairs`` is the whole corpus)
    more lines than pairs, found when the pairs are all read."""
    lines = iter_lines(path)
    number = 0
    for number, (src, tgt, *rest) in enumerate(pairs, start=1):
        line = next(lines, None)
        if line is None:
            raise AlignmentFormatError(f"{path}: {number - 1} lines, but the corpus has more "
                                       "pairs: the file needs one line of links per pair.")
        try:
            sure, possible = parse_links(line)
        except AlignmentFormatError as err:
            raise AlignmentFormatError(f"{path}, line {number}: {err}") from None
        links = sure | possible
        n_src, n_tgt = len(src.split()), len(tgt.split())
        for i, j in sorted(links):
            if i >= n_src or j >= n_tgt:
                raise AlignmentFormatError(
                    f"{path}, line {number}: link {i}-{j} (0-based) points past the pair's "
                    f"{n_src} source and {n_tgt} target words: is it the file of this corpus?")
        yield src, tgt, links, *rest
    if whole and next(lines, None) is not None:
        raise AlignmentFormatError(f"{path}: more lines than the {number} pairs of the corpus: "
                                   "the file needs one line of links per pair.")


def subword_links(links: Iterable[Link], src_words: Sequence[int], tgt_words: Sequence[int]
                  ) -> np.ndarray:
    """Word links -> subword links int32 [n, 2] of ``(target position, source position)``,
    sorted, for pieces whose words are ``src_words`` / ``tgt_words`` (:func:`word_ids`; no
    ``</s>``): each subword of the linked source word with each of the target word's."""
    src_pos: dict[int, list[int]] = {}
    tgt_pos: dict[int, list[int]] = {}
    for positions, words in ((src_pos, src_words), (tgt_pos, tgt_words)):
        for k, w in enumerate(words):
            positions.setdefault(w, []).append(k)
    cells = sorted({(t, s) for i, j in links
                    for t in tgt_pos.get(j, ()) for s in src_pos.get(i, ())})
    return np.asarray(cells, dtype=np.int32).reshape(-1, 2)


def piece_links(links: Iterable[Link], src_pieces: Sequence[str], tgt_pieces: Sequence[str],
                src_text: str, tgt_text: str) -> np.ndarray | None:
    """:func:`subword_links` of one pair's word links, given its pieces (no ``</s>``) and raw
    texts; None when the pieces hold another number of words than the text's whitespace
    tokens (normalisation removed a word), so that the words cannot be matched."""
    src_words, tgt_words = word_ids(src_pieces), word_ids(tgt_pieces)
    if (max(src_words, default=-1) + 1, max(tgt_words, default=-1) + 1) != \
            (len(src_text.split()), len(tgt_text.split())):
        return None
    return subword_links(links, src_words, tgt_words)


def write_links(path: str | Path, alignments: Iterable[Iterable[Link]],
                one_based: bool = False) -> None:
    """One Pharaoh line per sentence, links ``i-j`` sorted by source, then target index (an
    empty line for no links), UTF-8, written atomically."""
    write_text_atomic(path, "".join(" ".join(f"{i + one_based}-{j + one_based}"
                                             for i, j in sorted(links)) + "\n"
                                    for links in alignments))


def flip_links(links: Iterable[Link]) -> set[Link]:
    """Swap each link's sides: a target->source model's (tgt, src) links become (src, tgt)."""
    return {(j, i) for i, j in links}


def symmetrize(src2tgt: Iterable[Link], tgt2src: Iterable[Link],
               method: str = "grow-diag-final-and", *, src_len: int, tgt_len: int) -> set[Link]:
    """Combine two directions' (src, tgt) links by ``method``: Koehn, Och and Marcu (2003),
    "Statistical Phrase-Based Translation", as in Moses' ``symal``, after Koehn's pseudo-code:

    * ``intersection`` / ``union`` of the two sets.
    * ``grow-diag``: from the intersection, repeat until nothing changes: visit the aligned
      cells target-major and add each of the 8 neighbours (adjacent, then diagonal) that is
      in the union and whose source or target word is still unaligned.
    * ``grow-diag-final``: then visit the links of ``src2tgt``, then those of ``tgt2src``
      (each target-major) and add each whose source or target word is unaligned;
      ``grow-diag-final-and``: both words must be unaligned.

    Added links align their words at once, so the visiting order can decide between
    competing links. ``src_len`` / ``tgt_len``: the sentence lengths in words."""
    forward, backward = set(src2tgt), set(tgt2src)
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
