"""Word alignments: Pharaoh I/O, subwords -> words, extraction, symmetrisation and AER.

Every expected value below is worked out by hand in the comments.
"""

from __future__ import annotations

import numpy as np
import pytest

from nmt.extras.word_alignment import (
    AlignmentFormatError,
    alignment_scores,
    drop_eos,
    extract_links,
    flip_links,
    format_links,
    parse_links,
    read_gold,
    subword_to_word_links,
    symmetrize,
    teacher_forced_links,
    word_ids,
    write_links,
)


# ------------------------------------------------------------------------------ scoring
def test_alignment_scores_two_sentences_with_sure_and_possible():
    # sentence 1: S = {00, 11}, P = {12} -> P u S = {00, 11, 12}; A = {00, 12, 22}
    #   |A| = 3, |A n S| = 1 (00), |A n P| = 2 (00, 12), |S| = 2, |P u S| = 3
    # sentence 2: S = {01}, P = {10} -> P u S = {01, 10}; A = {01}
    #   |A| = 1, |A n S| = 1, |A n P| = 1, |S| = 1, |P u S| = 2
    # corpus: |A| = 4, |A n S| = 2, |A n P| = 3, |S| = 3, |P u S| = 5
    #   precision = 3/4, recall = 2/3, AER = 1 - (2 + 3) / (4 + 3) = 2/7
    #   (per-sentence AERs 1 - 3/5 = 0.4 and 0 would average to 0.2: we sum, not average)
    predicted = [{(0, 0), (1, 2), (2, 2)}, {(0, 1)}]
    sure = [{(0, 0), (1, 1)}, {(0, 1)}]
    possible = [{(1, 2)}, {(1, 0)}]
    s = alignment_scores(predicted, sure, possible)
    assert s["precision"] == pytest.approx(3 / 4)
    assert s["recall"] == pytest.approx(2 / 3)
    assert s["aer"] == pytest.approx(2 / 7)
    assert (s["links"], s["sure"], s["possible"], s["sure_hits"], s["possible_hits"]) == (4, 3, 5, 2, 3)
    with pytest.raises(ValueError, match="pair up"):
        alignment_scores(predicted, sure[:1], possible)


def test_alignment_scores_empty_sets_never_divide_by_zero():
    # nothing predicted, 1 sure link: precision 1 (vacuous), recall 0/1, AER 1 - 0/1
    s = alignment_scores([set()], [{(0, 0)}], [set()])
    assert (s["precision"], s["recall"], s["aer"]) == (1.0, 0.0, 1.0)
    # nothing predicted, nothing sure: perfect
    s = alignment_scores([set()], [set()], [{(0, 0)}])
    assert (s["precision"], s["recall"], s["aer"]) == (1.0, 1.0, 0.0)
    # only possible gold links, A = {00 (possible), 11 (wrong)}: precision 1/2,
    # recall vacuous 1, AER = 1 - (0 + 1) / (2 + 0) = 1/2 = 1 - precision
    s = alignment_scores([{(0, 0), (1, 1)}], [set()], [{(0, 0)}])
    assert (s["precision"], s["recall"], s["aer"]) == (0.5, 1.0, 0.5)


# ------------------------------------------------------------------------ Pharaoh format
def test_parse_links_zero_and_one_based_and_marker():
    assert parse_links("0-1 2p0  3-3\t") == ({(0, 1), (3, 3)}, {(2, 0)})
    assert parse_links("1-2 3p1", one_based=True) == ({(0, 1)}, {(2, 0)})
    assert parse_links("0?1 1-1", possible_marker="?") == ({(1, 1)}, {(0, 1)})
    assert parse_links("") == (set(), set())
    with pytest.raises(AlignmentFormatError, match="index 0"):
        parse_links("0-1", one_based=True)
    with pytest.raises(ValueError, match="possible_marker"):
        parse_links("0-1", possible_marker="-")


def test_read_gold_one_based_with_possible_links(tmp_path):
    gold = tmp_path / "gold.txt"
    # line 2 has no links; line 3 ends with \r\n
    gold.write_bytes(b"1-1 2p3 3-2\n\n2-1 1p1\r\n")
    sure, possible = read_gold(gold, one_based=True, src_lengths=[3, 1, 2], tgt_lengths=[3, 1, 1])
    assert sure == [{(0, 0), (2, 1)}, set(), {(1, 0)}]
    assert possible == [{(1, 2)}, set(), {(0, 0)}]


@pytest.mark.parametrize("text, kwargs, message", [
    ("1-1\n1-x 2-2\n", {}, r"gold\.txt, line 2: malformed link '1-x'"),
    ("1-1\n2--2\n", {}, r"gold\.txt, line 2: malformed link '2--2'"),
    ("1-1 0-2\n", {}, r"gold\.txt, line 1: link '0-2' has index 0"),
    # sentence 2 has 2 source words, so 1-based source word 3 is outside
    ("1-1\n3-1\n", {"src_lengths": [1, 2]}, r"gold\.txt, line 2: link 3-1 \(1-based\) points at "
                                             r"source word 3, but the sentence has 2 source words"),
    ("1-1\n1-2\n", {"tgt_lengths": [1, 1]}, r"line 2: .* target word 2, but the sentence has 1"),
    ("1-1\n", {"src_lengths": [1, 1]}, r"gold\.txt: 1 lines but 2 source sentence lengths"),
    ("", {}, r"gold\.txt: the file is empty"),
])
def test_read_gold_errors_name_file_and_line(tmp_path, text, kwargs, message):
    gold = tmp_path / "gold.txt"
    gold.write_text(text, encoding="utf-8")
    with pytest.raises(AlignmentFormatError, match=message):
        read_gold(gold, one_based=True, **kwargs)


def test_write_links_round_trip(tmp_path):
    links = [{(1, 0), (0, 0), (0, 2)}, set()]
    assert format_links(links[0]) == "0-0 0-2 1-0"  # sorted by source, then target
    write_links(tmp_path / "out" / "a.txt", links, one_based=True)
    assert (tmp_path / "out" / "a.txt").read_text(encoding="utf-8") == "1-1 1-3 2-1\n\n"
    sure, possible = read_gold(tmp_path / "out" / "a.txt", one_based=True)
    assert sure == links and possible == [set(), set()]
    with pytest.raises(ValueError, match="non-negative"):
        format_links({(-1, 0)})


# -------------------------------------------------------------------- subwords -> words
def test_word_ids_sentencepiece_boundaries():
    # ▁Ein | ▁Fahr rad fahrer | ▁ ( x | ▁)   (a lone ▁ joins the following word)
    assert word_ids(["▁Ein", "▁Fahr", "rad", "fahrer", "▁", "(", "x", "▁)"]) == [0, 1, 1, 1, 2, 2, 2, 3]
    assert word_ids(["Hallo", "▁Welt"]) == [0, 1]  # first piece starts word 0 without ▁
    assert word_ids(["▁", "(", "▁a"]) == [0, 0, 1]
    assert word_ids(["▁a", "▁", "▁b"]) == [0, 1, 1]  # lone ▁ before a ▁-piece: same word
    assert word_ids(["▁a", "▁"]) == [0, 0]  # trailing lone ▁ joins the last word
    assert word_ids([]) == []
    with pytest.raises(ValueError, match="piece 1 is '</s>'"):
        word_ids(["▁a", "</s>"])


def test_subword_to_word_links_merges_and_rejects_eos():
    src = word_ids(["▁Das", "▁Fahr", "rad"])  # [0, 1, 1]
    tgt = word_ids(["▁The", "▁bi", "ke"])  # [0, 1, 1]
    # subword 00 -> 00; 11, 22 -> 11 (merged); 02 -> 01
    assert subword_to_word_links({(0, 0), (1, 1), (2, 2), (0, 2)}, src, tgt) == {(0, 0), (1, 1), (0, 1)}
    with pytest.raises(ValueError, match="</s> or padding"):
        subword_to_word_links({(3, 0)}, src, tgt)  # source position 3 = </s>


# ------------------------------------------------------------------------- extraction
# Teacher-forced matrix [T+1, S+1] = [4, 4]: T = 3 target subwords + </s> row, S = 3 source
# subwords + </s> column; row i predicts target i from input i - 1 (<s> for row 0).
FORCED = np.array([
    # s0      s1      s2     </s>
    [0.75,   0.125,  0.125, 0.0],   # row 0: predicts t0, input <s>
    [0.125,  0.25,   0.125, 0.5],   # row 1: predicts t1, input t0
    [0.0,    0.25,   0.5,   0.25],  # row 2: predicts t2, input t1
    [0.0625, 0.0625, 0.125, 0.75],  # row 3: predicts </s>, input t2
])


def test_teacher_forced_links_plain_and_shifted():
    # argmax without the </s> column; plain rows 0..2 -> t0: s0, t1: s1 (0.25, not </s> 0.5),
    # t2: s2.  shifted rows 1..3 -> t0: row 1 s1, t1: row 2 s2, t2: row 3 s2 (0.125)
    plain, shifted = teacher_forced_links(FORCED)
    assert plain == {(0, 0), (1, 1), (2, 2)}
    assert shifted == {(1, 0), (2, 1), (2, 2)}
    # threshold 0.25: plain row 0 -> s0; row 1 -> s1; row 2 -> s1, s2.
    # shifted t0 <- row 1: s1; t1 <- row 2: s1, s2; t2 <- row 3: none (only </s> >= 0.25)
    plain, shifted = teacher_forced_links(FORCED, "threshold", 0.25)
    assert plain == {(0, 0), (1, 1), (1, 2), (2, 2)}
    assert shifted == {(1, 0), (1, 1), (2, 1)}


def test_eos_never_produces_a_link():
    # rows 1 and 3 put most weight on </s>, yet no link uses source 3 or target 3
    for method, threshold in (("argmax", None), ("threshold", 0.0625)):
        for links in teacher_forced_links(FORCED, method, threshold):
            assert links and all(s < 3 and t < 3 for s, t in links)
    matrix, src, tgt = drop_eos(FORCED, ["▁a", "▁b", "c", "</s>"], ["▁x", "y", "▁z", "</s>"])
    assert matrix.shape == (3, 3) and src == ["▁a", "▁b", "c"] and tgt == ["▁x", "y", "▁z"]
    # plain links {00, 11, 22} -> words: src [0, 1, 1], tgt [0, 0, 1] -> {00, 10, 11}
    assert subword_to_word_links(extract_links(matrix), word_ids(src), word_ids(tgt)) == {
        (0, 0), (1, 0), (1, 1)}
    with pytest.raises(ValueError, match="do not end with '</s>'"):
        drop_eos(FORCED, ["▁a", "▁b", "c", "d"], ["▁x", "y", "▁z", "</s>"])
    with pytest.raises(ValueError, match="does not match"):
        drop_eos(FORCED, ["</s>"], ["</s>"])


def test_extract_links_argmax_threshold_shift_and_errors():
    m = np.array([[0.5, 0.5], [0.0, 0.0], [0.25, 0.75]])
    # ties go to the first column; an all-zero row links nowhere
    assert extract_links(m) == {(0, 0), (1, 2)}
    assert extract_links(m, "threshold", 0.5) == {(0, 0), (1, 0), (1, 2)}
    # shift: target t uses row t + 1 -> t0 <- row 1 (zeros, none), t1 <- row 2 (s1)
    assert extract_links(m, shift=True) == {(1, 1)}
    assert extract_links(np.zeros((2, 0))) == set()
    for kwargs, message in (({"method": "threshold"}, "needs a threshold"),
                            ({"threshold": 0.5}, "only used by"),
                            ({"method": "max"}, "unknown method")):
        with pytest.raises(ValueError, match=message):
            extract_links(m, **kwargs)
    with pytest.raises(ValueError, match="2-D"):
        extract_links(np.ones(3))
    with pytest.raises(ValueError, match="NaN"):
        extract_links(np.array([[np.nan]]))


# --------------------------------------------------------------------- symmetrisation
def test_symmetrize_heuristics_all_differ_on_one_grid():
    # 6 x 6 grid, links (src, tgt); X in both, f only src2tgt, b only tgt2src:
    #   tgt 0: X at s0, b at s4         intersection {00, 33}
    #   tgt 1: f at s1                  grow-diag: 11 is a diagonal neighbour of 00 with
    #   tgt 3: f at s0, X at s3           s1 and t1 unaligned -> added; nothing else touches
    #   tgt 5: b at s5                    the alignment -> {00, 11, 33}
    # final: 03 (f) has s0 and t3 aligned -> never; 40 (b) has s4 unaligned but t0
    # aligned -> only grow-diag-final; 55 (b) has both unaligned -> both finals.
    src2tgt = {(0, 0), (3, 3), (1, 1), (0, 3)}
    tgt2src = {(0, 0), (3, 3), (4, 0), (5, 5)}
    expected = {
        "intersection": {(0, 0), (3, 3)},
        "grow-diag": {(0, 0), (1, 1), (3, 3)},
        "grow-diag-final-and": {(0, 0), (1, 1), (3, 3), (5, 5)},
        "grow-diag-final": {(0, 0), (1, 1), (3, 3), (4, 0), (5, 5)},
        "union": {(0, 0), (1, 1), (3, 3), (4, 0), (5, 5), (0, 3)},
    }
    for method, links in expected.items():
        assert symmetrize(src2tgt, tgt2src, method, src_len=6, tgt_len=6) == links, method
    assert len({frozenset(v) for v in expected.values()}) == 5


def test_symmetrize_final_order_flip_and_errors():
    # intersection {00}; 23 only in src2tgt, 33 only in tgt2src (not neighbours of 00).
    # final-and visits src2tgt first: 23 (s2, t3 free) added, then 33 has t3 aligned.
    # final (or): 33 still has s3 free -> added too.
    a, b = {(0, 0), (2, 3)}, {(0, 0), (3, 3)}
    assert symmetrize(a, b, "grow-diag-final-and", src_len=4, tgt_len=4) == {(0, 0), (2, 3)}
    assert symmetrize(b, a, "grow-diag-final-and", src_len=4, tgt_len=4) == {(0, 0), (3, 3)}
    assert symmetrize(a, b, "grow-diag-final", src_len=4, tgt_len=4) == {(0, 0), (2, 3), (3, 3)}
    # a target->source model's links (tgt, src) are flipped before symmetrising
    assert flip_links({(3, 2), (0, 1)}) == {(2, 3), (1, 0)}
    with pytest.raises(ValueError, match="unknown symmetrisation"):
        symmetrize(a, b, "grow-final", src_len=4, tgt_len=4)
    with pytest.raises(ValueError, match=r"tgt2src link \(3, 3\) lies outside"):
        symmetrize(a, b, "union", src_len=3, tgt_len=4)
