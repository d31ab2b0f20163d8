"""Corpus reading: text / TSV / Hugging Face sources and one clear message per bad input."""

from __future__ import annotations

import logging

import pytest
from omegaconf import OmegaConf

from nmt.data.corpus import (
    CorpusError,
    drop_empty_pairs,
    read_lines,
    read_parallel,
    read_text_pair,
    split_fingerprint,
)


def _data_cfg(root, fmt="text", **kw):
    return OmegaConf.create({"format": fmt, "root": str(root), "src_lang": "de", "tgt_lang": "en",
                             **kw})


def _no_chained_traceback(err: pytest.ExceptionInfo) -> None:
    assert err.value.__cause__ is None and err.value.__suppress_context__


def test_text_pair_reads_lines_exactly(tmp_path):
    (tmp_path / "a.de").write_bytes("Größe\r\n  zwei  \n\nÄrger\u2028!\n".encode())
    (tmp_path / "a.en").write_bytes(b"size\none\n\ntrouble")  # no final newline
    src, tgt = read_text_pair(tmp_path / "a.de", tmp_path / "a.en")
    assert src == ["Größe", "  zwei  ", "", "Ärger\u2028!"]  # only \n splits lines
    assert tgt == ["size", "one", "", "trouble"]


def test_tiny_corpus_layout(tiny_corpus):
    src, tgt = read_parallel(_data_cfg(tiny_corpus), "train")
    assert len(src) == len(tgt) == 200
    assert any("ü" in s or "ä" in s or "ß" in s for s in src)
    assert len(read_parallel(_data_cfg(tiny_corpus), "val")[0]) == 20


def test_missing_file_names_path(tmp_path):
    (tmp_path / "train.de").write_text("Hallo\n", encoding="utf-8")
    with pytest.raises(CorpusError, match=r"train\.en: file not found") as err:
        read_parallel(_data_cfg(tmp_path), "train")
    assert str(tmp_path / "train.en") in str(err.value)


def test_mismatched_line_counts_name_both_files_and_counts(tmp_path):
    (tmp_path / "train.de").write_text("a\nb\nc\n", encoding="utf-8")
    (tmp_path / "train.en").write_text("a\nb\n", encoding="utf-8")
    with pytest.raises(CorpusError) as err:
        read_parallel(_data_cfg(tmp_path), "train")
    msg = str(err.value)
    assert f"{tmp_path / 'train.de'} has 3 lines but {tmp_path / 'train.en'} has 2" in msg


def test_invalid_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "bad.de"
    path.write_bytes("eins\nzwei\ndr\xc3\xa4i \xff\n".encode("latin-1"))
    with pytest.raises(CorpusError, match=r"bad\.de, line 3: invalid UTF-8") as err:
        read_lines(path)
    _no_chained_traceback(err)


def test_empty_corpus_says_so(tmp_path):
    (tmp_path / "train.de").write_text("", encoding="utf-8")
    (tmp_path / "train.en").write_text("", encoding="utf-8")
    with pytest.raises(CorpusError, match=r"train\.de: the file is empty"):
        read_parallel(_data_cfg(tmp_path), "train")
    with pytest.raises(CorpusError, match="the corpus is empty"):
        drop_empty_pairs([" ", ""], ["x", "\t"])


def test_empty_pairs_dropped_with_count_logged(caplog):
    with caplog.at_level(logging.INFO, logger="nmt.data"):
        src, tgt, rows = drop_empty_pairs(["a", " ", "c", "d"], ["A", "B", "\t", "D"])
    assert (src, tgt, rows) == (["a", "d"], ["A", "D"], [0, 3])
    assert "dropped 2 empty or whitespace-only pairs of 4" in caplog.text


def test_tsv(tmp_path):
    (tmp_path / "train.tsv").write_text("Hund\tdog\nKäse\tcheese\n", encoding="utf-8")
    assert read_parallel(_data_cfg(tmp_path, "tsv"), "train") == (["Hund", "Käse"], ["dog", "cheese"])
    (tmp_path / "val.tsv").write_text("Hund\tdog\nKäse cheese\n", encoding="utf-8")
    with pytest.raises(CorpusError, match=r"val\.tsv, line 2: expected 2 tab-separated fields"):
        read_parallel(_data_cfg(tmp_path, "tsv"), "val")


def test_hf_dataset_saved_locally(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = [{"de": "Ein Mädchen läuft .", "en": "A girl runs ."}, {"de": "Größer .", "en": "Bigger ."}]
    dd = datasets.DatasetDict({
        "train": datasets.Dataset.from_dict({"translation": rows}),
        "validation": datasets.Dataset.from_dict({"translation": rows[:1]}),
    })
    dd.save_to_disk(str(tmp_path / "ds"))
    cfg = _data_cfg(tmp_path / "ds", "hf")
    assert read_parallel(cfg, "train") == (["Ein Mädchen läuft .", "Größer ."], ["A girl runs .", "Bigger ."])
    assert read_parallel(cfg, "validation") == (["Ein Mädchen läuft ."], ["A girl runs ."])
    assert split_fingerprint(cfg, "train") != split_fingerprint(cfg, "validation")
    with pytest.raises(CorpusError, match="has no split 'val' .it has train, validation"):
        read_parallel(cfg, "val")
    with pytest.raises(CorpusError, match="translation has no 'fr' field"):
        read_parallel(_data_cfg(tmp_path / "ds", "hf", src_lang="fr"), "train")
    # one column per language works too
    cols = datasets.Dataset.from_dict({"de": ["Hallo"], "en": ["Hello"]})
    datasets.DatasetDict({"train": cols}).save_to_disk(str(tmp_path / "cols"))
    assert read_parallel(_data_cfg(tmp_path / "cols", "hf"), "train") == (["Hallo"], ["Hello"])


def test_hf_single_dataset_is_refused_not_used_for_every_split(tmp_path):
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_dict({"de": ["Hallo"], "en": ["Hello"]}).save_to_disk(str(tmp_path / "one"))
    for split in ("train", "validation"):
        with pytest.raises(CorpusError, match="single Dataset, not a DatasetDict") as err:
            read_parallel(_data_cfg(tmp_path / "one", "hf"), split)
        assert err.value.__context__ is None
        assert repr(split) in str(err.value)


def test_directory_unreadable_file_and_bom(tmp_path, monkeypatch):
    (tmp_path / "adir").mkdir()
    with pytest.raises(CorpusError, match="adir: is a directory, not a corpus file"):
        read_lines(tmp_path / "adir")
    (tmp_path / "train.de").mkdir()
    (tmp_path / "train.en").write_text("x\n", encoding="utf-8")
    with pytest.raises(CorpusError, match=r"train\.de: is a directory"):
        split_fingerprint(_data_cfg(tmp_path), "train")

    # A UTF-8 byte order mark is not part of the first sentence; error offsets count it.
    (tmp_path / "bom.de").write_bytes(b"\xef\xbb\xbfErste\nZweite\n")
    assert read_lines(tmp_path / "bom.de") == ["Erste", "Zweite"]
    (tmp_path / "bombad.de").write_bytes(b"\xef\xbb\xbfa\nb\xff\n")
    with pytest.raises(CorpusError, match=r"line 2: invalid UTF-8 \(byte 0xff at offset 6\)"):
        read_lines(tmp_path / "bombad.de")

    # Permission problems become one CorpusError (simulated: the tests may run as root).
    locked = tmp_path / "locked.de"
    locked.write_text("x\n", encoding="utf-8")

    def denied(self):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(type(locked), "read_bytes", denied)
    with pytest.raises(CorpusError, match=r"locked\.de: cannot be read \(Permission denied\)") as err:
        read_lines(locked)
    _no_chained_traceback(err)


def test_hf_missing_dataset_is_one_sentence(monkeypatch):
    datasets = pytest.importorskip("datasets")

    def offline(name, *args, **kwargs):  # this machine is offline: fail the way the hub does
        raise ConnectionError(f"Couldn't reach '{name}' on the Hub (LocalEntryNotFoundError)\ndetails")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(CorpusError, match="cannot load the Hugging Face dataset") as err:
        read_parallel(_data_cfg("no-such-user/no-such-dataset-xyz", "hf"), "train")
    _no_chained_traceback(err)
    assert "\n" not in str(err.value)


def test_fingerprint_follows_content(tiny_corpus):
    cfg = _data_cfg(tiny_corpus)
    before = split_fingerprint(cfg, "train")
    assert split_fingerprint(cfg, "train") == before
    with open(tiny_corpus / "train.en", "a", encoding="utf-8") as f:
        f.write("")
    assert split_fingerprint(cfg, "train") == before
    (tiny_corpus / "train.en").write_text("changed\n" * 200, encoding="utf-8")
    assert split_fingerprint(cfg, "train") != before
