"""nmt.extras.tools.word_alignment: Pharaoh I/O, subwords -> words, extraction, forced alignment
on the tiny de->en Transformer checkpoint, symmetrisation and AER.

Every expected value of the numpy parts is worked out by hand in the comments.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import REPO_ROOT

from nmt.config import ConfigError, compose_config
from nmt.data.corpus import CorpusError
from nmt.data.links import (
    AlignmentFormatError,
    flip_links,
    parse_links,
    symmetrize,
    word_ids,
    write_links,
)
from nmt.extras.tools.word_alignment import (
    ForcedAlignment,
    alignment_scores,
    check_extraction,
    extract_links,
    force_align,
    read_gold,
    read_pair_file,
    select_attention,
    word_link_cells,
    word_links,
)
from nmt.inference.translator import load_for_inference
from nmt.models import build_model

CKPT = REPO_ROOT / "tests" / "data" / "tiny_transformer_2026-11-22.pt"
# multi-piece words, a character outside the vocabulary (<unk>), an empty target
PAIRS = [("Ein großer Hund läuft im Park .", "A big dog runs in the park ."),
         ("Zwei Mädchen tanzen ☃ am Strand .", "Two girls dance ☃ on the beach ."),
         ("Eine Frau", "A woman waits"), ("Hallo", "")]


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
    assert (s["links"], s["sure"], s["possible"], s["sure_hits"],
            s["possible_hits"]) == (4, 3, 5, 2, 3)
    with pytest.raises(ValueError):
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
def test_parse_links_zero_and_one_based():
    assert parse_links("0-1 2p0  3-3\t") == ({(0, 1), (3, 3)}, {(2, 0)})
    assert parse_links("1-2 3p1", one_based=True) == ({(0, 1)}, {(2, 0)})
    assert parse_links("") == (set(), set())
    with pytest.raises(AlignmentFormatError, match="'0-1'"):
        parse_links("0-1", one_based=True)


def test_read_gold_one_based_with_possible_links(tmp_path):
    gold = tmp_path / "gold.txt"
    # line 2 has no links; line 3 ends with \r\n
    gold.write_bytes(b"1-1 2p3 3-2\n\n2-1 1p1\r\n")
    sure, possible = read_gold(gold, one_based=True, src_lengths=[3, 1, 2], tgt_lengths=[3, 1, 1])
    assert sure == [{(0, 0), (2, 1)}, set(), {(1, 0)}]
    assert possible == [{(1, 2)}, set(), {(0, 0)}]


@pytest.mark.parametrize("text, kwargs, where", [
    ("1-1\n1-x 2-2\n", {}, r"gold\.txt, line 2: .*'1-x'"),
    ("1-1\n2--2\n", {}, r"gold\.txt, line 2: .*'2--2'"),
    ("1-1 0-2\n", {}, r"gold\.txt, line 1: .*'0-2'"),
    # sentence 2 has 2 source words, so 1-based source word 3 is outside
    ("1-1\n3-1\n", {"src_lengths": [1, 2]}, r"gold\.txt, line 2: .*source word 3"),
    ("1-1\n1-2\n", {"tgt_lengths": [1, 1]}, r"gold\.txt, line 2: .*target word 2"),
    ("1-1\n", {"src_lengths": [1, 1]}, r"gold\.txt: 1 lines"),
    ("", {}, r"gold\.txt"),                                   # empty
])
def test_read_gold_errors_name_file_and_line(tmp_path, text, kwargs, where):
    gold = tmp_path / "gold.txt"
    gold.write_text(text, encoding="utf-8")
    with pytest.raises(CorpusError, match=where):
        read_gold(gold, one_based=True, **kwargs)


def test_write_links_round_trip(tmp_path):
    links = [{(1, 0), (0, 0), (0, 2)}, set()]
    write_links(tmp_path / "out" / "a.txt", links, one_based=True)
    # sorted by source, then target; an empty line for no links
    assert (tmp_path / "out" / "a.txt").read_text(encoding="utf-8") == "1-1 1-3 2-1\n\n"
    sure, possible = read_gold(tmp_path / "out" / "a.txt", one_based=True)
    assert sure == links and possible == [set(), set()]
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["a.txt"]   # written atomically


# -------------------------------------------------------------------- subwords -> words
def test_word_ids_sentencepiece_boundaries():
    # ▁Ein | ▁Fahr rad fahrer | ▁ ( x | ▁)   (a lone ▁ joins the following word)
    pieces = ["▁Ein", "▁Fahr", "rad", "fahrer", "▁", "(", "x", "▁)"]
    assert word_ids(pieces) == [0, 1, 1, 1, 2, 2, 2, 3]
    assert word_ids(["Hallo", "▁Welt"]) == [0, 1]  # first piece starts word 0 without ▁
    assert word_ids(["▁", "(", "▁a"]) == [0, 0, 1]
    assert word_ids(["▁a", "▁", "▁b"]) == [0, 1, 1]  # lone ▁ before a ▁-piece: same word
    assert word_ids(["▁a", "▁"]) == [0, 0]  # trailing lone ▁ joins the last word
    assert word_ids([]) == []
    with pytest.raises(ValueError, match="piece 1 is '</s>'"):
        word_ids(["▁a", "</s>"])


def test_word_links_merge_subword_links():
    src, tgt = ["▁Das", "▁Fahr", "rad"], ["▁The", "▁bi", "ke"]
    cross = np.zeros((1, 1, 4, 4), np.float32)   # rows: target subwords + </s>; last column </s>
    cross[0, 0, [0, 1, 2, 2, 3], [0, 1, 0, 2, 3]] = [1.0, 1.0, 0.5, 0.5, 1.0]
    item = ForcedAlignment(src, tgt, word_ids(src), word_ids(tgt), 2, 2, cross)
    # subword 00 -> 00; 11, 22 -> 11 (merged); 02 -> 01
    assert word_links(item, method="threshold", threshold=0.5) == {(0, 0), (1, 1), (0, 1)}


def test_word_link_cells_cover_every_subword_pair_of_the_two_words():
    src = ["▁Ein", "▁groß", "er", "▁Hund", "</s>"]            # words: Ein, großer, Hund
    tgt = ["▁A", "▁big", "▁do", "g", "</s>"]                  # words: A, big, dog
    assert word_link_cells({(1, 1)}, src, tgt) == {(1, 1), (1, 2)}
    assert word_link_cells({(2, 2), (0, 0)}, src, tgt) == {(2, 3), (3, 3), (0, 0)}
    with pytest.raises(ValueError, match="3-0"):
        word_link_cells({(3, 0)}, src, tgt)


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


def teacher_forced_links(matrix, method="argmax", threshold=None):
    """(plain, shifted) subword links: word_links with one word per subword."""
    n_t, n_s = matrix.shape[0] - 1, matrix.shape[1] - 1
    item = ForcedAlignment(["▁x"] * n_s, ["▁y"] * n_t, list(range(n_s)), list(range(n_t)),
                           n_s, n_t, matrix[None, None])
    return tuple(word_links(item, method=method, threshold=threshold, shift=shift, layer=0,
                            head=0) for shift in (False, True))


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
    # without the </s> row and column: plain links {00, 11, 22} -> words: src [0, 1, 1],
    # tgt [0, 0, 1] -> {00, 10, 11}
    src, tgt = ["▁a", "▁b", "c"], ["▁x", "y", "▁z"]
    item = ForcedAlignment(src, tgt, word_ids(src), word_ids(tgt), 2, 2, FORCED[None, None])
    assert word_links(item) == {(0, 0), (1, 0), (1, 1)}


def test_extract_links_argmax_threshold_and_shift():
    m = np.array([[0.5, 0.5], [0.0, 0.0], [0.25, 0.75]])
    # ties go to the first column; an all-zero row links nowhere
    assert extract_links(m) == {(0, 0), (1, 2)}
    assert extract_links(m, "threshold", 0.5) == {(0, 0), (1, 0), (1, 2)}
    # shift: target t uses row t + 1 -> t0 <- row 1 (zeros, none), t1 <- row 2 (s1)
    assert extract_links(m, shift=True) == {(1, 1)}
    assert extract_links(np.zeros((2, 0))) == set()


def test_extraction_settings_are_checked_once():
    check_extraction("argmax", None)
    check_extraction("threshold", 1.0)
    check_extraction("argmax", 0.5)   # argmax links a row only where its largest weight >= 0.5
    for method, threshold, key in (("threshold", None, "threshold=None"),
                                   ("argmax", 1.5, "threshold=1.5"),
                                   ("threshold", 1.5, "threshold=1.5")):
        with pytest.raises(ConfigError, match=key):
            check_extraction(method, threshold)


# ------------------------------------------------------------------ forced alignment
@pytest.fixture(scope="module")
def tiny():
    model, tokenizer, _ = load_for_inference(CKPT)
    return model, tokenizer


def test_force_align_returns_a_row_for_every_reference_word(tiny):
    model, tokenizer = tiny
    items = force_align(model, tokenizer, PAIRS, batch_sentences=3)
    alone = force_align(model, tokenizer, PAIRS[1:2], batch_sentences=1)[0]
    for (src, tgt), item in zip(PAIRS, items, strict=True):
        n_src, n_tgt = len(src.split()), len(tgt.split())
        assert (item.n_src_words, item.n_tgt_words) == (n_src, n_tgt)
        assert sorted(set(item.tgt_words)) == list(range(n_tgt))  # every word has a piece
        assert sorted(set(item.src_words)) == list(range(n_src))
        t, s = len(item.tgt_pieces), len(item.src_pieces)
        assert item.cross.shape == (1, 2, t + 1, s + 1)  # 1 layer, 2 heads, </s> row and column
        np.testing.assert_allclose(item.cross.sum(-1), 1.0, atol=1e-5)
        for shift in (False, True):  # argmax links every reference word, never </s>
            links = word_links(item, shift=shift)
            assert {j for _, j in links} == set(range(n_tgt))
            assert all(i < n_src for i, _ in links)
    np.testing.assert_allclose(alone.cross, items[1].cross, atol=1e-5)  # padding-free
    assert "<unk>" in items[1].src_pieces


def test_full_context_models_are_read_through_their_full_context_pass(tiny):
    """Forced alignment, and the translator's alignment of its outputs, are the model's own
    (``model(src, mask, tgt_in)[1]``: the full-context pass), not the causal heads'."""
    from nmt.data.batching import make_src_batch, make_tgt_batch
    from nmt.inference.translator import Translator

    model, tokenizer = tiny
    _, _, cfg = load_for_inference(CKPT)

    def model_alignment(src_ids, tgt_ids):
        src, src_mask = make_src_batch([src_ids])
        return model(src, src_mask, make_tgt_batch([tgt_ids])[0])[1][0].detach().numpy()

    model.alignment_full_context = True
    try:
        translator = Translator(model, tokenizer, cfg)
        for (src, tgt), item in zip(PAIRS, force_align(model, tokenizer, PAIRS, 3), strict=True):
            ids = [sum(encode(text.split()), []) for encode, text in
                   ((tokenizer.encode_src_batch, src), (tokenizer.encode_tgt_batch, tgt))]
            np.testing.assert_allclose(item.alignment, model_alignment(*ids), rtol=0, atol=1e-6)
            causal = item.cross[model.alignment_layer, :model.alignment_heads].mean(0)
            if item.tgt_pieces:   # rows that have a future see it
                assert np.abs(item.alignment - causal).max() > 1e-2
            result = translator.translate(src, beam_size=2)
            np.testing.assert_allclose(result.alignment, model_alignment(ids[0], result.ids),
                                       rtol=0, atol=1e-6)
            assert result.hypotheses[0].alignment is result.alignment
    finally:
        model.alignment_full_context = False


def test_select_attention_layers_heads_and_refusals():
    cross = np.arange(2 * 3 * 1 * 2, dtype=np.float32).reshape(2, 3, 1, 2)
    np.testing.assert_array_equal(select_attention(cross, -1, 0), cross[1, 0])
    np.testing.assert_allclose(select_attention(cross, "mean", "mean"), cross.mean((0, 1)))
    np.testing.assert_allclose(select_attention(cross, 0, "mean"), cross[0].mean(0))
    for layer, head, key in ((2, 0, "layer=2"), (-3, 0, "layer=-3"), (0, 3, "head=3"),
                             ("last", 0, "layer='last'"), ("all", 0, "layer='all'")):
        with pytest.raises(ConfigError, match=key):
            select_attention(cross, layer, head)


def test_rnn_has_one_layer_and_one_head(tiny):
    _, tokenizer = tiny
    cfg = compose_config(["model=rnn", "model.emb_dim=8", "model.encoder_hidden=8",
                          "model.decoder_hidden=8", "model.attention_dim=8",
                          "model.output_dim=8"], validate_fn=None)
    torch.manual_seed(0)
    rnn = build_model(cfg.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)
    item = force_align(rnn, tokenizer, PAIRS[:1])[0]
    assert item.cross.shape[:2] == (1, 1)
    for layer, head in ((0, 0), (-1, "mean"), ("mean", -1)):
        np.testing.assert_array_equal(select_attention(item.cross, layer, head), item.cross[0, 0])
    with pytest.raises(ConfigError, match="layer=1"):
        word_links(item, layer=1)


def test_read_pair_file(tmp_path):
    path = tmp_path / "pairs.txt"
    path.write_text("a b ||| x y\n c|||z \n", encoding="utf-8")
    assert read_pair_file(path) == [("a b", "x y"), ("c", "z")]
    path.write_text("a ||| b\nno separator\n", encoding="utf-8")
    with pytest.raises(CorpusError, match="pairs.txt, line 2"):
        read_pair_file(path)


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


def test_agreement_of_two_directions_by_hand():
    from nmt.extras.tools.word_alignment import agreement_links, word_attention

    # source "▁ab c ▁d" (2 words: pieces 0, 1 -> word 0; piece 2 -> word 1), target "▁x ▁y"
    # rows: the two target pieces and </s>; columns: the three source pieces and </s>
    alignment = np.array([[0.3, 0.3, 0.2, 0.2],
                          [0.1, 0.0, 0.8, 0.1],
                          [0.0, 0.0, 0.0, 1.0]], np.float32)
    item = ForcedAlignment(["▁ab", "c", "▁d"], ["▁x", "▁y"], [0, 0, 1], [0, 1], 2, 2,
                           alignment[None, None], alignment)
    words = word_attention(item)                     # columns summed per source word
    np.testing.assert_allclose(words, [[0.6, 0.2], [0.1, 0.8]], rtol=1e-6)
    # a target word of two pieces: its rows averaged
    two = ForcedAlignment(["▁a", "▁b"], ["▁x", "y"], [0, 1], [0, 0], 2, 1,
                          alignment[None, None, :, 1:], alignment[:, 1:])
    np.testing.assert_allclose(word_attention(two), [[(0.3 + 0.0) / 2, (0.2 + 0.8) / 2]], rtol=1e-6)
    backward = np.array([[0.6, 0.1],                 # source word 0 over target words
                         [0.4, 0.4]])
    # 2AB/(A+B): (0,0) 2*.6*.6/1.2 = .6; (1,0) 2*.2*.4/.6 = .267; (0,1) 2*.1*.1/.2 = .1;
    # (1,1) 2*.8*.4/1.2 = .533 -> links (src, tgt)
    assert agreement_links(words, backward, 0.2) == {(0, 0), (1, 0), (1, 1)}
    assert agreement_links(words, backward, 0.3) == {(0, 0), (1, 1)}
    assert agreement_links(np.zeros((2, 2)), np.zeros((2, 2))) == set()


def test_symmetrization_needs_a_reverse_model_and_is_checked_once(tiny):
    from nmt.extras.tools.word_alignment import align_words, check_symmetrization

    model, tokenizer = tiny
    pairs = [("Ein Hund läuft .", "A dog runs .")]
    for name, reverse, kwargs, key in (
            ("grow", True, {}, "is not one of intersection, union"),
            ("union", False, {}, "symmetrize=union combines two directions"),
            ("agreement", True, {"shift": True, "threshold": 0.3},
             "not threshold=0.3, shift=True")):
        with pytest.raises(ConfigError, match=key):
            check_symmetrization(name, reverse, **kwargs)
    check_symmetrization(None, False)              # one direction, nothing to combine
    with pytest.raises(ConfigError, match="symmetrize=intersection combines two directions"):
        align_words(model, tokenizer, pairs, symmetrization="intersection")   # no reverse
    one = align_words(model, tokenizer, pairs)
    both = align_words(model, tokenizer, pairs, reverse=(model, tokenizer))
    assert both == align_words(model, tokenizer, pairs, reverse=(model, tokenizer),
                               symmetrization="grow-diag-final-and")   # None: the default
    assert align_words(model, tokenizer, pairs, reverse=(model, tokenizer),
                       symmetrization="intersection")[0] <= one[0]
