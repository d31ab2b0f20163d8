"""nmt-align end to end on the tiny de->en Transformer checkpoint (in process, through
``main``): links, AER against gold, symmetrisation with a reverse model, the cross-attention
for nmt-plot with gold marks, and user errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO_ROOT, write_corpus
from test_evaluate_cli import user_error

from nmt.cli import align as cli_align
from nmt.cli import plot as cli_plot
from nmt.evaluation.alignments import load_alignments
from nmt.extras.tools.word_alignment import alignment_scores, read_gold

pytestmark = pytest.mark.slow
CKPT = REPO_ROOT / "tests" / "data" / "tiny_transformer_2026-11-22.pt"


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
    for method in ("intersection", "union", "grow-diag-final-and", "agreement"):
        out = tmp_path / f"{method}.txt"
        assert cli_align.main([*common, f"reverse_checkpoint={reverse}", f"symmetrize={method}",
                               f"out={out}"]) == 0
        links[method] = read_gold(out, one_based=False)[0]
    for k, union in enumerate(links["union"]):
        for between in ("forward", "grow-diag-final-and"):
            assert links["intersection"][k] <= links[between][k] <= union
    assert links["intersection"] != links["union"]
    assert any(links["agreement"]) and links["agreement"] != links["union"]
    assert cli_align.main([*common, f"reverse_checkpoint={CKPT}", f"out={tmp_path / 'x.txt'}"]) == 2


@pytest.mark.parametrize("args, key", [
    (["src_file={d}/missing.de", "tgt_file={d}/test.en"], "missing.de"),
    (["src_file={d}/test.de", "tgt_file={d}/short.en"], "short.en"),
    (["input={d}/test.de"], "test.de, line 1"),
    (["input={d}/test.de", "src_file={d}/test.de", "tgt_file={d}/test.en"], "input="),
    (["src_file={d}/test.de"], "tgt_file"),
    (["input={d}/pairs.txt", "layer=4"], "layer=4"),
    (["input={d}/pairs.txt", "head=first"], "head"),
    (["input={d}/pairs.txt", "method=threshold"], "threshold"),
    (["input={d}/pairs.txt", "threshold=1.5"], "threshold=1.5"),   # argmax's least weight
    (["input={d}/pairs.txt", "agreement_threshold=0"], "agreement_threshold=0"),
    (["input={d}/pairs.txt", "symmetrize=grow"], "agreement"),
    (["input={d}/pairs.txt", "symmetrize=union"], "give the reverse model (reverse_checkpoint"),
    (["input={d}/pairs.txt", f"reverse_checkpoint={CKPT}", "symmetrize=agreement", "shift=true",
      "method=threshold", "threshold=0.3"], "not method=threshold, threshold=0.3, shift=True"),
    (["input={d}/pairs.txt", "gold={d}/test.en"], "gold_one_based"),
    (["input={d}/pairs.txt", "gold={d}/test.en", "gold_one_based=true"], "test.en"),
    (["input={d}/pairs.txt", "gold={d}/bad.txt", "gold_one_based=true"], "bad.txt, line 1"),
    (["input={d}/pairs.txt", "gold={d}/far.txt", "gold_one_based=true"], "far.txt, line 1"),
    (["input={d}/pairs.txt", "checkpoint={d}/none.pt"], "none.pt"),
])
def test_cli_user_errors_exit_2(tmp_path, capsys, args, key):
    d = write_corpus(tmp_path / "c", {"test": 3})
    (d / "short.en").write_text("one line\n")
    (d / "pairs.txt").write_text("Ein Hund ||| A dog\n")
    (d / "bad.txt").write_text("1-x\n")
    (d / "far.txt").write_text("1-9\n")
    argv = [f"checkpoint={CKPT}", f"out={tmp_path / 'links.txt'}", *[a.format(d=d) for a in args]]
    assert cli_align.main(argv) == 2
    assert key in user_error(capsys, "nmt-align")
    assert not (tmp_path / "links.txt").exists()


def test_attention_out_is_drawn_with_gold_marks(tmp_path, capsys):
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
    common = [f"alignments={forced}", f"gold={gold}", "gold_one_based=true"]
    assert cli_plot.main([*common, "index=0", "layer=0", "head=all",
                          f"out={tmp_path / 'grid.png'}"]) == 0
    assert cli_plot.main([*common, "index=0", f"out={tmp_path / 'one.png'}"]) == 0
    gold.write_text("1-1 2-9\n1-1\n", encoding="utf-8")
    capsys.readouterr()
    assert cli_plot.main([*common, f"out={tmp_path / 'x.png'}"]) == 2
    assert "line 1" in user_error(capsys, "nmt-plot")
