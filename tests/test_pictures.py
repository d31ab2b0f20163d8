"""Attention capture in the API and the npz, grids, gold markers and the HTML viewer.

Issue 13, "Capture" and "Pictures": ``Translator.translate(return_attention=True)``,
``nmt-evaluate attention=all``, ``nmt-plot layer=/head=/kind=/gold=/format=html`` and
``nmt-align attention_out=``. The viewer test renders the page in headless Chromium and
skips when no ``chromium`` binary is installed.
"""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import REPO_ROOT, write_corpus

import nmt
from nmt.cli import align as cli_align
from nmt.cli import evaluate as cli_evaluate
from nmt.cli import plot as cli_plot
from nmt.config import ConfigError, compose_config
from nmt.evaluation.alignments import load_alignments, save_alignments
from nmt.evaluation.plot import attention_labels, plot_attention, word_link_cells
from nmt.extras.viewer import attention_page, page_data
from nmt.models import build_model

CKPT = REPO_ROOT / "tests" / "data" / "tiny_transformer_2026-11-22.pt"
SOURCES = ["Ein großer Hund läuft im Park .", "Zwei Mädchen tanzen am Strand .", ""]
SHORT = {"max_len_a": 0.0, "max_len_b": 8}     # untrained models: keep outputs short


def _translator(model_overrides: list[str]) -> nmt.Translator:
    """A fresh (seeded) model over the tiny checkpoint's tokenizer."""
    base = nmt.Translator.from_checkpoint(CKPT)
    cfg = compose_config(model_overrides, validate_fn=None)
    torch.manual_seed(0)
    model = build_model(cfg.model, base.tokenizer.src_vocab_size, base.tokenizer.tgt_vocab_size)
    return nmt.Translator(model, base.tokenizer, base.config)


@pytest.fixture(scope="module")
def transformer() -> nmt.Translator:
    """2 encoder and 3 decoder layers, 2 heads, alignment from the middle decoder layer."""
    return _translator(["model.d_model=16", "model.heads=2", "model.ff_dim=32",
                        "model.encoder_layers=2", "model.decoder_layers=3",
                        "model.alignment_layer=1"])


@pytest.fixture(scope="module")
def rnn() -> nmt.Translator:
    return _translator(["model=rnn", "model.emb_dim=8", "model.encoder_hidden=8",
                        "model.decoder_hidden=8", "model.attention_dim=8", "model.output_dim=8"])


# ------------------------------------------------------------------------ capture (API)
@pytest.mark.parametrize("search", [{"beam_size": 1}, {"beam_size": 3, "n_best": 2},
                                    {"sampling": True, "seed": 5}])
def test_return_attention_head_mean_at_the_alignment_layer_is_the_alignment(transformer, search):
    results = transformer.translate(SOURCES, return_attention=True, **search, **SHORT)
    for r in results:
        t, s = len(r.tokens), len(r.src_tokens)
        a = r.attention
        assert {k: v.shape for k, v in a.items()} == {
            "cross": (3, 2, t, s), "decoder": (3, 2, t, t), "encoder": (2, 2, s, s)}
        assert all(v.dtype == np.float32 for v in a.values())
        np.testing.assert_allclose(a["cross"][1].mean(0), r.alignment, atol=1e-5)
        for w in a.values():
            np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-5)
        assert np.all(np.triu(a["decoder"], k=1) == 0)          # causal
        assert all(h.attention is None for h in r.hypotheses[1:])  # only the chosen one
    assert transformer.translate(SOURCES[0], **search, **SHORT).attention is None


def test_rnn_attention_is_alpha_alone(rnn):
    for r in rnn.translate(SOURCES, beam_size=2, return_attention=True, **SHORT):
        assert list(r.attention) == ["cross"]
        assert r.attention["cross"].shape == (1, 1, len(r.tokens), len(r.src_tokens))
        np.testing.assert_allclose(r.attention["cross"][0, 0], r.alignment, atol=1e-5)


def test_ensemble_cannot_return_attention():
    twice = nmt.Translator.from_checkpoint([CKPT, CKPT])
    with pytest.raises(ConfigError, match="needs a single model"):
        twice.translate(SOURCES[0], return_attention=True, **SHORT)


# ------------------------------------------------------------------------------ npz
def test_npz_round_trip_with_attention_and_old_files(transformer, tmp_path):
    results = transformer.translate(SOURCES, return_attention=True, **SHORT)
    path = tmp_path / "a.npz"
    save_alignments(path, [r.alignment for r in results], [r.src_tokens for r in results],
                    [r.tokens for r in results], [r.attention for r in results])
    data = load_alignments(path)
    for i, r in enumerate(results):
        assert data.labels(i) == (r.src_tokens, r.tokens)
        assert set(data[i].attention) == {"cross", "decoder", "encoder"}
        for kind, w in r.attention.items():   # float16 storage
            np.testing.assert_allclose(data[i].attention[kind], w, atol=5e-4)
    assert np.load(path)["cross_0"].dtype == np.float16
    old = tmp_path / "old.npz"           # the layout before attention=all
    save_alignments(old, [np.eye(2)], [["a", "</s>"]], [["x", "</s>"]])
    assert load_alignments(old)[0].attention == {}
    with pytest.raises(ValueError, match="encoder attention shape"):
        save_alignments(old, [np.eye(2)], [["a", "</s>"]], [["x", "</s>"]],
                        [{"encoder": np.zeros((1, 1, 2, 3))}])


def test_evaluate_attention_all_stores_every_weight(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus", {"test": 3})
    out = tmp_path / "eval"
    common = [f"checkpoint={CKPT}", f"src_file={corpus / 'test.de'}",
              f"ref_file={corpus / 'test.en'}", "beam_size=2", "max_len_a=0", "max_len_b=6"]
    assert cli_evaluate.main([*common, f"out_dir={out}", "attention=all"]) == 0
    data = load_alignments(out / "alignments.npz")
    item = data[2]
    t, s = len(item.tgt), len(item.src)
    assert {k: v.shape for k, v in item.attention.items()} == {
        "cross": (1, 2, t, s), "decoder": (1, 2, t, t), "encoder": (1, 2, s, s)}
    np.testing.assert_allclose(item.attention["cross"][0].mean(0), item.matrix, atol=1e-3)
    assert cli_evaluate.main([*common, f"out_dir={tmp_path / 'plain'}"]) == 0
    assert load_alignments(tmp_path / "plain" / "alignments.npz")[0].attention == {}
    capsys.readouterr()
    for extra, message in ((["attention=some"], "attention='some' is not one of"),
                           (["attention=all", "save_alignments=false"], "save_alignments=false"),
                           (["attention=all", f"checkpoint=[{CKPT},{CKPT}]"],
                            "needs one checkpoint")):
        assert cli_evaluate.main([*common, f"out_dir={out}", *extra]) == 2
        assert message in " ".join(capsys.readouterr().err.split())


# --------------------------------------------------------------------------- pictures
def test_labels_of_each_kind():
    src, tgt = ["▁Ein", "▁Hund", "</s>"], ["▁A", "▁dog", "</s>"]
    assert attention_labels("cross", src, tgt)[:2] == (tgt, src)
    assert attention_labels("encoder", src, tgt)[:2] == (src, src)
    assert attention_labels("decoder", src, tgt)[:2] == (["<s>", "▁A", "▁dog"],) * 2


def test_word_link_cells_cover_every_subword_pair_of_the_two_words():
    src = ["▁Ein", "▁groß", "er", "▁Hund", "</s>"]            # words: Ein, großer, Hund
    tgt = ["▁A", "▁big", "▁do", "g", "</s>"]                  # words: A, big, dog
    assert word_link_cells({(1, 1)}, src, tgt) == {(1, 1), (1, 2)}
    assert word_link_cells({(2, 2), (0, 0)}, src, tgt) == {(2, 3), (3, 3), (0, 0)}
    with pytest.raises(ValueError, match="names a word the sentence lacks"):
        word_link_cells({(3, 0)}, src, tgt)


def test_grid_has_a_row_per_layer_and_a_column_per_head_plus_the_mean(transformer):
    r = transformer.translate(SOURCES[0], return_attention=True, **SHORT)
    fig = nmt.plot_alignment(r, layer="all", head="all")       # kind=cross
    panels = [ax for ax in fig.axes if ax.images]
    assert len(panels) == 3 * 3
    assert [ax.get_title() for ax in panels[:3]] == ["head 0", "head 1", "head mean"]
    np.testing.assert_allclose(panels[5].images[0].get_array(), r.attention["cross"][1].mean(0))
    assert [t.get_text() for t in panels[0].get_yticklabels()] == r.tokens
    fig = nmt.plot_alignment(r, kind="encoder", layer=-1)       # one row: the last layer
    assert len([ax for ax in fig.axes if ax.images]) == 3
    fig = nmt.plot_alignment(r, kind="decoder", layer=0, head=1)   # one heatmap
    (ax,) = [ax for ax in fig.axes if ax.images]
    np.testing.assert_allclose(ax.images[0].get_array(), r.attention["decoder"][0, 1])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["<s>", *r.tokens[:-1]]
    with pytest.raises(ConfigError, match="layer=3: the decoder attention has 3 layers"):
        nmt.plot_alignment(r, kind="decoder", layer=3)
    with pytest.raises(ConfigError, match="only be drawn on kind=cross"):
        plot_attention(r.attention["encoder"], r.src_tokens, r.tokens, "encoder",
                       marks=({(0, 0)}, set()))
    with pytest.raises(ValueError, match="return_attention=True"):
        nmt.plot_alignment(transformer.translate(SOURCES[0], **SHORT), layer="all")


def test_rnn_has_no_self_attention_to_draw(rnn):
    r = rnn.translate(SOURCES[0], return_attention=True, **SHORT)
    with pytest.raises(ConfigError, match="the RNN has no self-attention"):
        nmt.plot_alignment(r, kind="encoder")
    assert len([ax for ax in nmt.plot_alignment(r, layer="all", head="all").axes if ax.images]) == 1


def _npz(tmp_path: Path, translator: nmt.Translator, name: str) -> Path:
    results = translator.translate(SOURCES, return_attention=True, **SHORT)
    path = tmp_path / name
    save_alignments(path, [r.alignment for r in results], [r.src_tokens for r in results],
                    [r.tokens for r in results], [r.attention for r in results])
    return path


def test_nmt_plot_grids_single_heads_and_errors(transformer, rnn, tmp_path, capsys):
    npz, rnn_npz = _npz(tmp_path, transformer, "tf.npz"), _npz(tmp_path, rnn, "rnn.npz")
    old = tmp_path / "old.npz"
    save_alignments(old, [np.eye(2)], [["a", "</s>"]], [["x", "</s>"]])
    png = b"\x89PNG\r\n\x1a\n"
    for k, args in enumerate((["layer=all", "head=all"], ["kind=encoder"],
                              ["kind=decoder", "layer=1", "head=0"], ["head=mean"])):
        out = tmp_path / f"grid{k}.png"
        assert cli_plot.main([f"alignments={npz}", "index=1", f"out={out}", *args]) == 0
        assert out.read_bytes()[:8] == png
    assert cli_plot.main([f"alignments={npz}", "index=0:2", "kind=encoder",
                          f"out={tmp_path / 'd'}"]) == 0
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == [
        "encoder_0000.png", "encoder_0001.png"]
    capsys.readouterr()
    for npz_path, args, message in (
            (rnn_npz, ["kind=encoder"], "has cross attention only (the RNN has no encoder"),
            (old, ["layer=all"], "holds only one alignment per sentence"),
            (npz, ["layer=5"], "layer=5: the cross attention has 3 layers"),
            (npz, ["head=first"], "head='first' must be an index"),
            (npz, ["kind=self"], "kind='self' is not one of"),
            (npz, ["kind=alignment", "head=0"], "has no layers or heads"),
            (npz, ["format=html"], "give its path as out=FILE.html"),
            (npz, ["format=html", "out=x.html", "layer=0"], "drop layer="),
            (npz, ["format=pdf"], "format='pdf' is not one of"),
            (npz, ["gold=g.txt"], "gold_one_based"),
            (npz, ["gold=g.txt", "gold_one_based=true", "kind=decoder"], "not on kind=decoder")):
        argv = [f"alignments={npz_path}", *args]
        if not any(a.startswith("out=") for a in args):
            argv.append(f"out={tmp_path / 'x.png'}")
        assert cli_plot.main(argv) == 2, args
        assert message in " ".join(capsys.readouterr().err.split()), args


def test_nmt_align_attention_out_with_gold_markers(tmp_path, capsys):
    pairs = tmp_path / "pairs.txt"
    pairs.write_text("Ein großer Hund läuft . ||| A big dog runs .\n"
                     "Zwei Mädchen ||| Two girls\n", encoding="utf-8")
    forced = tmp_path / "forced.npz"
    assert cli_align.main([f"checkpoint={CKPT}", f"input={pairs}", f"out={tmp_path / 'l.txt'}",
                           f"attention_out={forced}"]) == 0
    data = load_alignments(forced)
    assert len(data) == 2 and data[1].tgt[-1] == "</s>"
    assert data[0].attention["cross"].shape[:2] == (1, 2)
    np.testing.assert_allclose(data[0].attention["cross"][0].mean(0), data[0].matrix, atol=1e-3)
    gold = tmp_path / "gold.txt"
    gold.write_text("1-1 2-2 3-3 4p4 5-5\n1-1 2-2\n", encoding="utf-8")
    out = tmp_path / "gold.png"
    common = [f"alignments={forced}", f"gold={gold}", "gold_one_based=true"]
    assert cli_plot.main([*common, "index=0", "layer=0", "head=all", f"out={out}"]) == 0
    assert cli_plot.main([*common, "index=0", f"out={tmp_path / 'one.png'}"]) == 0
    from nmt.evaluation.plot import plot_alignment

    item = data[0]
    marks = (word_link_cells({(0, 0), (1, 1), (2, 2), (4, 4)}, item.src, item.tgt),
             word_link_cells({(3, 3)}, item.src, item.tgt))
    ax = plot_alignment(item.matrix, item.src, item.tgt, marks=marks).axes[0]
    drawn = {line.get_label(): len(line.get_xdata()) for line in ax.lines}
    assert drawn == {"gold sure": len(marks[0]), "gold possible": len(marks[1])}
    gold.write_text("1-1 2-9\n1-1\n", encoding="utf-8")
    capsys.readouterr()
    assert cli_plot.main([*common, f"out={out}"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "line 1" in err and "target word 9" in err


# ------------------------------------------------------------------------------ viewer
def test_page_data_decodes_to_the_weights(transformer, tmp_path):
    data = load_alignments(_npz(tmp_path, transformer, "tf.npz"))
    (record,) = page_data([(1, data[1])])
    cross = record["kinds"]["cross"]
    assert cross["shape"] == list(data[1].attention["cross"].shape) and cross["rows"] == data[1].tgt
    raw = np.frombuffer(base64.b64decode(cross["data"]), dtype="<u2") / 65535
    np.testing.assert_allclose(raw.reshape(cross["shape"]), data[1].attention["cross"], atol=1e-5)
    old = tmp_path / "old.npz"
    save_alignments(old, [np.eye(2)], [["a", "</s>"]], [["</script>", "</s>"]])
    page = attention_page([(0, load_alignments(old)[0])])
    assert list(page_data([(0, load_alignments(old)[0])])[0]["kinds"]) == ["alignment"]
    assert page.count("</script>") == 2 and "http" not in page.lower().replace("http-equiv", "")


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    pytest.skip("no chromium binary found (Debian: apt-get install chromium); CI installs it")


def _dump_dom(page: Path, fragment: str, profile: Path) -> str:
    proc = subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={profile}", "--dump-dom",
         f"{page.resolve().as_uri()}#{fragment}"],
        capture_output=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
    return proc.stdout.decode("utf-8")


def test_html_page_builds_its_cells_in_chromium(transformer, tmp_path):
    _chromium()
    npz = _npz(tmp_path, transformer, "tf.npz")
    page = tmp_path / "attention.html"
    assert cli_plot.main([f"alignments={npz}", "index=all", "format=html", f"out={page}"]) == 0
    data = load_alignments(npz)
    doms = {}
    for fragment, (rows, cols) in (
            ("", (len(data[0].tgt), len(data[0].src))),                       # first view
            ("sentence=1&kind=encoder&layer=0&head=mean&cell=1,2", (len(data[1].src),) * 2),
            ("sentence=2&kind=decoder&layer=2&head=1", (len(data[2].tgt),) * 2)):
        dom = doms[fragment] = _dump_dom(page, fragment, tmp_path / "profile")
        status = re.search(r'id="status" data-state="(\w+)">([^<]*)<', dom)
        assert status and status.group(1) == "ok", status.group(2) if status else dom[-1000:]
        assert dom.count('class="cell') == rows * cols
        assert dom.count('<th class="col') == cols and dom.count('<th class="row') == rows
    # the hovered cell of the second view: its weight (3 decimals) and its two subwords
    hovered = "sentence=1&kind=encoder&layer=0&head=mean&cell=1,2"
    info = re.search(r'id="info">(.*?)</p>', doms[hovered])
    weight = data[1].attention["encoder"][0].mean(0)[1, 2]
    assert f"<b>{weight:.3f}</b>" in info.group(1)
    assert data[1].src[1] in info.group(1) and data[1].src[2] in info.group(1)
    # a script error is reported in the page, not swallowed: break the first weights
    broken = tmp_path / "broken.html"
    broken.write_text(re.sub(r'"data":"[^"]*"', '"data":"!not base64!"', page.read_text(
        encoding="utf-8"), count=1), encoding="utf-8")
    dom = _dump_dom(broken, "", tmp_path / "profile")
    assert re.search(r'id="status" data-state="error">error: ', dom)
