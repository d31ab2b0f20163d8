"""Forced alignment (library) and nmt-align (CLI) on the tiny de->en Transformer checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import REPO_ROOT, write_corpus

from nmt.cli import align as cli_align
from nmt.config import ConfigError, compose_config
from nmt.data.corpus import CorpusError
from nmt.extras.forced_alignment import (
    force_align,
    read_pair_file,
    select_attention,
    word_links,
)
from nmt.extras.word_alignment import alignment_scores, read_gold
from nmt.inference.loader import load_for_inference
from nmt.models import build_model

CKPT = REPO_ROOT / "tests" / "data" / "tiny_transformer_2026-11-22.pt"
# multi-piece words, a character outside the vocabulary (<unk>), an empty target
PAIRS = [("Ein großer Hund läuft im Park .", "A big dog runs in the park ."),
         ("Zwei Mädchen tanzen ☃ am Strand .", "Two girls dance ☃ on the beach ."),
         ("Eine Frau", "A woman waits"), ("Hallo", "")]


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


def test_select_attention_layers_heads_and_refusals():
    cross = np.arange(2 * 3 * 1 * 2, dtype=np.float32).reshape(2, 3, 1, 2)
    np.testing.assert_array_equal(select_attention(cross, -1, 0), cross[1, 0])
    np.testing.assert_allclose(select_attention(cross, "mean", "mean"), cross.mean((0, 1)))
    np.testing.assert_allclose(select_attention(cross, 0, "mean"), cross[0].mean(0))
    for layer, head, message in ((2, 0, "layer=2: the model's cross-attention has 2 layers"),
                                 (-3, 0, "0..1 or -2..-1"), (0, 3, "3 heads"),
                                 ("last", 0, "layer=mean")):
        with pytest.raises(ConfigError, match=message):
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
    with pytest.raises(ConfigError, match="has 1 layer; use 0 or -1, or layer=mean"):
        word_links(item, layer=1)


def test_read_pair_file(tmp_path):
    path = tmp_path / "pairs.txt"
    path.write_text("a b ||| x y\n c|||z \n", encoding="utf-8")
    assert read_pair_file(path) == [("a b", "x y"), ("c", "z")]
    path.write_text("a ||| b\nno separator\n", encoding="utf-8")
    with pytest.raises(CorpusError, match="line 2: expected 'source ||| target'"):
        read_pair_file(path)


def _files(tmp_path: Path, n: int = 5) -> tuple[Path, Path, Path]:
    """Test split of the generated corpus and a 1-based gold file: word k of both sides
    linked (sure), plus one possible link per pair."""
    corpus = write_corpus(tmp_path / "corpus", {"test": n})
    src = (corpus / "test.de").read_text(encoding="utf-8").splitlines()
    gold = tmp_path / "gold.txt"
    gold.write_text("".join(f"1-1 2-2 2p3 {len(s.split())}-{len(t.split())}\n" for s, t in
                            zip(src, (corpus / "test.en").read_text().splitlines(), strict=True)))
    return corpus / "test.de", corpus / "test.en", gold


def test_cli_writes_links_and_scores_against_gold(tmp_path, capsys):
    src, tgt, gold = _files(tmp_path)
    out = tmp_path / "align" / "links.txt"
    assert cli_align.main([f"checkpoint={CKPT}", f"src_file={src}", f"tgt_file={tgt}",
                           f"out={out}", f"gold={gold}", "gold_one_based=true", "shift=true",
                           "layer=0", "head=mean"]) == 0
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 5 and all(lines)
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("aer=") and " precision=" in last and " recall=" in last
    report = json.loads((out.parent / "aer.json").read_text())
    expected = alignment_scores(read_gold(out, one_based=False)[0],
                                *read_gold(gold, one_based=True))
    assert {key: report[key] for key in expected} == expected
    assert last == (f"aer={expected['aer']:.4f} precision={expected['precision']:.4f} "
                    f"recall={expected['recall']:.4f} links={expected['links']}")
    # the same pairs as one `src ||| tgt` file, 1-based output
    pairs = tmp_path / "pairs.txt"
    pairs.write_text("".join(f"{s} ||| {t}\n" for s, t in zip(
        src.read_text().splitlines(), tgt.read_text().splitlines(), strict=True)))
    out1 = tmp_path / "links1.txt"
    assert cli_align.main([f"checkpoint={CKPT}", f"input={pairs}", f"out={out1}",
                           "one_based=true", "shift=true", "layer=0"]) == 0
    assert read_gold(out1, one_based=True)[0] == read_gold(out, one_based=False)[0]


def test_cli_symmetrizes_with_a_reverse_checkpoint(tmp_path):
    """The tiny model stands in for an en->de one (its config says so; joint vocabulary)."""
    from nmt.checkpoint import load_checkpoint, save_atomic

    ckpt = load_checkpoint(CKPT)
    data = ckpt["config"]["data"]
    data["src_lang"], data["tgt_lang"] = data["tgt_lang"], data["src_lang"]
    reverse = tmp_path / "en_de.pt"
    save_atomic(ckpt, reverse)
    src, tgt, _ = _files(tmp_path)
    common = [f"checkpoint={CKPT}", f"src_file={src}", f"tgt_file={tgt}"]
    assert cli_align.main([*common, f"out={tmp_path / 'fwd.txt'}"]) == 0
    links = {"forward": read_gold(tmp_path / "fwd.txt", one_based=False)[0]}
    for method in ("intersection", "union", "grow-diag-final-and"):
        out = tmp_path / f"{method}.txt"
        assert cli_align.main([*common, f"reverse_checkpoint={reverse}", f"symmetrize={method}",
                               f"out={out}"]) == 0
        links[method] = read_gold(out, one_based=False)[0]
    for k, union in enumerate(links["union"]):
        for between in ("forward", "grow-diag-final-and"):
            assert links["intersection"][k] <= links[between][k] <= union
    assert links["intersection"] != links["union"]
    assert cli_align.main([*common, f"reverse_checkpoint={CKPT}", f"out={tmp_path / 'x.txt'}"]) == 2


@pytest.mark.parametrize("args,message", [
    (["src_file={d}/missing.de", "tgt_file={d}/test.en"], "file not found"),
    (["src_file={d}/test.de", "tgt_file={d}/short.en"], "short.en"),
    (["input={d}/test.de"], "line 1: expected 'source ||| target'"),
    (["input={d}/test.de", "src_file={d}/test.de", "tgt_file={d}/test.en"], "exactly one"),
    (["src_file={d}/test.de"], "go together"),
    (["input={d}/pairs.txt", "layer=4"], "layer=4: the model's cross-attention has 1 layer"),
    (["input={d}/pairs.txt", "head=first"], "head='first'"),
    (["input={d}/pairs.txt", "method=threshold"], "threshold=W"),
    (["input={d}/pairs.txt", "threshold=0.3"], "only used by method=threshold"),
    (["input={d}/pairs.txt", "gold={d}/test.en"], "gold_one_based"),
    (["input={d}/pairs.txt", "gold={d}/test.en", "gold_one_based=true"], "3 lines but 1"),
    (["input={d}/pairs.txt", "gold={d}/bad.txt", "gold_one_based=true"], "line 1: malformed"),
    (["input={d}/pairs.txt", "gold={d}/far.txt", "gold_one_based=true"], "target word 9"),
    (["input={d}/pairs.txt", "symmetrize=grow"], "symmetrize='grow'"),
    (["input={d}/pairs.txt", "checkpoint={d}/none.pt"], "no such checkpoint"),
])
def test_cli_user_errors_exit_2(tmp_path, capsys, args, message):
    d = write_corpus(tmp_path / "c", {"test": 3})
    (d / "short.en").write_text("one line\n")
    (d / "pairs.txt").write_text("Ein Hund ||| A dog\n")
    (d / "bad.txt").write_text("1-x\n")
    (d / "far.txt").write_text("1-9\n")
    argv = [f"checkpoint={CKPT}", f"out={tmp_path / 'links.txt'}", *[a.format(d=d) for a in args]]
    assert cli_align.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("nmt-align: error: ") and message in " ".join(err.split())
    assert not (tmp_path / "links.txt").exists()
