"""nmt.extras.tools.viewer: the page's data decodes to the weights, the page is self-contained, and
headless Chromium builds its cells, shows a hovered weight and reports a script error (skipped
where no ``chromium`` binary is installed; CI installs one)."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from test_translator import SHORT, transformer  # noqa: F401 (fixture)

import nmt
from nmt.evaluation.alignments import load_alignments, save_alignments
from nmt.extras.tools.viewer import attention_page, page_data

SOURCES = ["Ein großer Hund läuft im Park .", "Zwei Mädchen tanzen am Strand .", ""]


def _npz(tmp_path: Path, translator: nmt.Translator) -> Path:
    results = translator.translate(SOURCES, return_attention=True, **SHORT)
    path = tmp_path / "tf.npz"
    save_alignments(path, [r.alignment for r in results], [r.src_tokens for r in results],
                    [r.tokens for r in results], [r.attention for r in results])
    return path


def test_page_data_decodes_to_the_weights(transformer, tmp_path):  # noqa: F811
    data = load_alignments(_npz(tmp_path, transformer))
    (record,) = page_data([(1, data[1])])
    cross = record["kinds"]["cross"]
    assert cross["shape"] == list(data[1].attention["cross"].shape) and cross["rows"] == data[1].tgt
    raw = np.frombuffer(base64.b64decode(cross["data"]), dtype="<u2") / 65535
    np.testing.assert_allclose(raw.reshape(cross["shape"]), data[1].attention["cross"], atol=1e-5)
    old = tmp_path / "old.npz"          # without attention=all: the stored alignment only
    save_alignments(old, [np.eye(2)], [["a", "</s>"]], [["</script>", "</s>"]])
    page = attention_page([(0, load_alignments(old)[0])], title="a <title>")
    assert list(page_data([(0, load_alignments(old)[0])])[0]["kinds"]) == ["alignment"]
    assert page.count("</script>") == 2 and "http" not in page.lower().replace("http-equiv", "")
    assert "<title>a &lt;title&gt;</title>" in page and "__DATA__" not in page


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


def test_html_page_builds_its_cells_in_chromium(transformer, tmp_path):  # noqa: F811
    _chromium()
    data = load_alignments(_npz(tmp_path, transformer))
    page = tmp_path / "attention.html"
    page.write_text(attention_page([(i, data[i]) for i in range(len(data))]), encoding="utf-8")
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
