"""Corpus reading: text / TSV / Hugging Face sources and one clear message per bad input."""

from __future__ import annotations

import hashlib
import logging
import os

import pytest
from omegaconf import OmegaConf

from nmt.data import corpus
from nmt.data.corpus import (
    CorpusError,
    check_split,
    iter_hf,
    iter_lines,
    iter_nonempty_pairs,
    iter_parallel,
    iter_text_pair,
    split_fingerprint,
)


def _data_cfg(root, fmt="text", **kw):
    return OmegaConf.create({"format": fmt, "root": str(root), "src_lang": "de", "tgt_lang": "en",
                             **kw})


def _split_lists(data_cfg, split):
    """(sources, targets) of a split as two lists."""
    pairs = list(iter_parallel(data_cfg, split))
    return [s for s, _ in pairs], [t for _, t in pairs]


def _lines(path):
    return list(iter_lines(path))


def _no_chained_traceback(err: pytest.ExceptionInfo) -> None:
    assert err.value.__cause__ is None and err.value.__suppress_context__


def test_text_pair_reads_lines_exactly(tmp_path):
    (tmp_path / "a.de").write_bytes("Größe\r\n  zwei  \n\nÄrger\u2028!\n".encode())
    (tmp_path / "a.en").write_bytes(b"size\none\n\ntrouble")  # no final newline
    pairs = list(iter_text_pair(tmp_path / "a.de", tmp_path / "a.en"))
    assert pairs == [("Größe", "size"), ("  zwei  ", "one"), ("", ""),  # only \n splits lines
                     ("Ärger\u2028!", "trouble")]


def test_tiny_corpus_layout(tiny_corpus):
    src, tgt = _split_lists(_data_cfg(tiny_corpus), "train")
    assert len(src) == len(tgt) == 200
    assert any("ü" in s or "ä" in s or "ß" in s for s in src)
    assert len(_split_lists(_data_cfg(tiny_corpus), "val")[0]) == 20


def test_missing_file_names_path(tmp_path):
    (tmp_path / "train.de").write_text("Hallo\n", encoding="utf-8")
    with pytest.raises(CorpusError, match=r"train\.en: file not found") as err:
        _split_lists(_data_cfg(tmp_path), "train")
    assert str(tmp_path / "train.en") in str(err.value)


def test_mismatched_line_counts_name_both_files_and_counts(tmp_path):
    (tmp_path / "train.de").write_text("a\nb\nc\n", encoding="utf-8")
    (tmp_path / "train.en").write_text("a\nb\n", encoding="utf-8")
    with pytest.raises(CorpusError) as err:
        _split_lists(_data_cfg(tmp_path), "train")
    msg = str(err.value)
    assert f"{tmp_path / 'train.de'} has 3 lines but {tmp_path / 'train.en'} has 2" in msg


def test_invalid_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "bad.de"
    path.write_bytes("eins\nzwei\ndr\xc3\xa4i \xff\n".encode("latin-1"))
    with pytest.raises(CorpusError, match=r"bad\.de, line 3: invalid UTF-8") as err:
        _lines(path)
    _no_chained_traceback(err)


def test_empty_corpus_says_so(tmp_path):
    (tmp_path / "train.de").write_text("", encoding="utf-8")
    (tmp_path / "train.en").write_text("", encoding="utf-8")
    with pytest.raises(CorpusError, match=r"train\.de: the file is empty"):
        _split_lists(_data_cfg(tmp_path), "train")
    with pytest.raises(CorpusError, match="the corpus is empty"):
        list(iter_nonempty_pairs([(" ", "x"), ("", "\t")]))


def test_empty_pairs_dropped_with_count_logged(caplog):
    with caplog.at_level(logging.INFO, logger="nmt.data"):
        kept = list(iter_nonempty_pairs([("a", "A"), (" ", "B"), ("c", "\t"), ("d", "D")]))
    assert kept == [("a", "A"), ("d", "D")]
    assert "dropped 2 empty or whitespace-only pairs of 4" in caplog.text


def test_tsv(tmp_path):
    (tmp_path / "train.tsv").write_text("Hund\tdog\nKäse\tcheese\n", encoding="utf-8")
    assert _split_lists(_data_cfg(tmp_path, "tsv"), "train") == (["Hund", "Käse"],
                                                                 ["dog", "cheese"])
    (tmp_path / "val.tsv").write_text("Hund\tdog\nKäse cheese\n", encoding="utf-8")
    with pytest.raises(CorpusError, match=r"val\.tsv, line 2: expected 2 tab-separated fields"):
        _split_lists(_data_cfg(tmp_path, "tsv"), "val")


def test_hf_dataset_saved_locally(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = [{"de": "Ein Mädchen läuft .", "en": "A girl runs ."},
            {"de": "Größer .", "en": "Bigger ."}]
    dd = datasets.DatasetDict({
        "train": datasets.Dataset.from_dict({"translation": rows}),
        "validation": datasets.Dataset.from_dict({"translation": rows[:1]}),
    })
    dd.save_to_disk(str(tmp_path / "ds"))
    cfg = _data_cfg(tmp_path / "ds", "hf")
    assert _split_lists(cfg, "train") == (["Ein Mädchen läuft .", "Größer ."],
                                          ["A girl runs .", "Bigger ."])
    assert _split_lists(cfg, "validation") == (["Ein Mädchen läuft ."], ["A girl runs ."])
    assert split_fingerprint(cfg, "train") != split_fingerprint(cfg, "validation")
    with pytest.raises(CorpusError, match="has no split 'val' .it has train, validation"):
        _split_lists(cfg, "val")
    with pytest.raises(CorpusError, match="translation has no 'fr' field"):
        _split_lists(_data_cfg(tmp_path / "ds", "hf", src_lang="fr"), "train")
    # one column per language works too
    cols = datasets.Dataset.from_dict({"de": ["Hallo"], "en": ["Hello"]})
    datasets.DatasetDict({"train": cols}).save_to_disk(str(tmp_path / "cols"))
    assert _split_lists(_data_cfg(tmp_path / "cols", "hf"), "train") == (["Hallo"], ["Hello"])


def test_check_split_finds_a_missing_language_before_reading(tmp_path):
    """A direction a split lacks raises at check_split and at iter_parallel's call, not when
    its rows are read: a missing file (text), a missing language of the translation feature
    (a {lang: text} struct or datasets.Translation) or column (hf)."""
    datasets = pytest.importorskip("datasets")
    (tmp_path / "train.de").write_text("Hallo\n", encoding="utf-8")
    (tmp_path / "train.en").write_text("Hello\n", encoding="utf-8")
    check_split(_data_cfg(tmp_path), "train", ("de", "en"))
    with pytest.raises(CorpusError, match=r"train\.fr: file not found"):
        check_split(_data_cfg(tmp_path), "train", ("de", "fr"))
    rows = {"translation": [{"de": "Hallo", "en": "Hello"}]}
    translation = datasets.Features({"translation": datasets.Translation(languages=["de", "en"])})
    for name, split in (("struct", datasets.Dataset.from_dict(rows)),
                        ("feature", datasets.Dataset.from_dict(rows, features=translation)),
                        ("columns",
                         datasets.Dataset.from_dict({"de": ["Hallo"], "en": ["Hello"]}))):
        datasets.DatasetDict({"train": split}).save_to_disk(str(tmp_path / name))
        cfg = _data_cfg(tmp_path / name, "hf")
        check_split(cfg, "train", ("en", "de"))
        assert list(iter_parallel(cfg, "train", ("en", "de"))) == [("Hello", "Hallo")]
        message = ("translation has no 'fr' field .it has de, en" if name != "columns" else
                   "no 'translation' column and no 'de'/'fr' columns .it has de, en")
        for call in (check_split, iter_parallel):
            with pytest.raises(CorpusError, match=message):
                call(cfg, "train", ("de", "fr"))


def test_hf_single_dataset_is_refused_not_used_for_every_split(tmp_path):
    datasets = pytest.importorskip("datasets")
    one = datasets.Dataset.from_dict({"de": ["Hallo"], "en": ["Hello"]})
    one.save_to_disk(str(tmp_path / "one"))
    for split in ("train", "validation"):
        with pytest.raises(CorpusError, match="single Dataset, not a DatasetDict") as err:
            _split_lists(_data_cfg(tmp_path / "one", "hf"), split)
        assert err.value.__context__ is None
        assert repr(split) in str(err.value)


def test_directory_unreadable_file_and_bom(tmp_path, monkeypatch):
    (tmp_path / "adir").mkdir()
    with pytest.raises(CorpusError, match="adir: is a directory, not a corpus file"):
        _lines(tmp_path / "adir")
    (tmp_path / "train.de").mkdir()
    (tmp_path / "train.en").write_text("x\n", encoding="utf-8")
    with pytest.raises(CorpusError, match=r"train\.de: is a directory"):
        split_fingerprint(_data_cfg(tmp_path), "train")

    # A UTF-8 byte order mark is not part of the first sentence; error offsets count it.
    (tmp_path / "bom.de").write_bytes(b"\xef\xbb\xbfErste\nZweite\n")
    assert _lines(tmp_path / "bom.de") == ["Erste", "Zweite"]
    (tmp_path / "bombad.de").write_bytes(b"\xef\xbb\xbfa\nb\xff\n")
    with pytest.raises(CorpusError, match=r"line 2: invalid UTF-8 \(byte 0xff at offset 6\)"):
        _lines(tmp_path / "bombad.de")

    # Permission problems become one CorpusError (simulated: the tests may run as root).
    locked = tmp_path / "locked.de"
    locked.write_text("x\n", encoding="utf-8")

    def denied(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(type(locked), "open", denied)  # the readers stream through Path.open
    with pytest.raises(CorpusError,
                       match=r"locked\.de: cannot be read \(Permission denied\)") as err:
        _lines(locked)
    _no_chained_traceback(err)


def test_hf_missing_dataset_is_one_sentence(monkeypatch):
    datasets = pytest.importorskip("datasets")

    def offline(name, *args, **kwargs):  # this machine is offline: fail the way the hub does
        raise ConnectionError(
            f"Couldn't reach '{name}' on the Hub (LocalEntryNotFoundError)\ndetails")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(CorpusError, match="cannot load the Hugging Face dataset") as err:
        _split_lists(_data_cfg("no-such-user/no-such-dataset-xyz", "hf"), "train")
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


def test_fingerprint_reads_the_files_once_while_path_size_and_mtime_stay(tiny_corpus):
    """The value is sha256 of "format|split|src|tgt", then each file's bytes and a separator;
    a second call hashes nothing, a new mtime hashes again (same bytes, same value)."""
    cfg = _data_cfg(tiny_corpus)
    want = hashlib.sha256(b"text|train|de|en")
    for lang in ("de", "en"):
        want.update((tiny_corpus / f"train.{lang}").read_bytes() + b"\x00file\x00")
    corpus._files_digest.cache_clear()
    assert split_fingerprint(cfg, "train") == split_fingerprint(cfg, "train") == want.hexdigest()
    assert corpus._files_digest.cache_info().misses == 1
    stat = (tiny_corpus / "train.en").stat()
    os.utime(tiny_corpus / "train.en", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert split_fingerprint(cfg, "train") == want.hexdigest()
    assert corpus._files_digest.cache_info().misses == 2


# ------------------------------------------------------------------ streaming
def test_streaming_yields_lines_before_the_error_that_names_file_and_line(tmp_path):
    path = tmp_path / "bad.de"
    path.write_bytes(b"\xef\xbb\xbfeins\r\nzwei\ndr\xc3\xa4i \xff\nvier\n")
    lines = iter_lines(path)
    assert [next(lines), next(lines)] == ["eins", "zwei"]     # BOM and \r\n removed
    with pytest.raises(CorpusError) as err:
        next(lines)
    assert str(err.value).startswith(f"{path}, line 3: invalid UTF-8 (byte 0xff at offset 20)")
    _no_chained_traceback(err)
    # A BOM alone is an empty file; a BOM and a line break one empty line; no \n at the end.
    (tmp_path / "bom.de").write_bytes(b"\xef\xbb\xbf")
    with pytest.raises(CorpusError, match=r"bom\.de: the file is empty"):
        list(iter_lines(tmp_path / "bom.de"))
    (tmp_path / "bomnl.de").write_bytes(b"\xef\xbb\xbf\n")
    assert list(iter_lines(tmp_path / "bomnl.de")) == [""]
    (tmp_path / "cr.de").write_bytes(b"\r\na\r\nb\r")
    assert list(iter_lines(tmp_path / "cr.de")) == ["", "a", "b"]


@pytest.mark.parametrize("n_de,n_en", [(5, 3), (3, 5)])
def test_streamed_pairs_then_the_misalignment_with_both_counts(tmp_path, n_de, n_en):
    (tmp_path / "train.de").write_text("".join(f"d{i}\n" for i in range(n_de)), encoding="utf-8")
    (tmp_path / "train.en").write_text("".join(f"e{i}\n" for i in range(n_en)), encoding="utf-8")
    pairs = iter_parallel(_data_cfg(tmp_path), "train")
    assert [next(pairs) for _ in range(3)] == [("d0", "e0"), ("d1", "e1"), ("d2", "e2")]
    with pytest.raises(CorpusError) as err:
        next(pairs)
    assert str(err.value).startswith(f"{tmp_path / 'train.de'} has {n_de} lines but "
                                     f"{tmp_path / 'train.en'} has {n_en}")


def test_streamed_tsv_and_nonempty_pairs(tmp_path, caplog):
    (tmp_path / "train.tsv").write_text("a\tA\n \tB\nc\tC\nd D\n", encoding="utf-8")
    kept = iter_nonempty_pairs(iter_parallel(_data_cfg(tmp_path, "tsv"), "train"))
    assert [next(kept), next(kept)] == [("a", "A"), ("c", "C")]
    with pytest.raises(CorpusError, match=r"train\.tsv, line 4: expected 2 tab-separated"):
        next(kept)
    with caplog.at_level(logging.INFO, logger="nmt.data"):
        assert list(iter_nonempty_pairs(iter([("a", ""), ("b", "B")]), "x")) == [("b", "B")]
        assert list(iter_nonempty_pairs(iter([("a", " "), ("b", "B")]), "y", report=False)) \
            == [("b", "B")]
        with pytest.raises(CorpusError, match="z: the corpus is empty .all 1 pairs"):
            list(iter_nonempty_pairs(iter([("", "")]), "z"))
    assert "x: dropped 1 empty or whitespace-only pairs of 2" in caplog.text
    assert "y: dropped" not in caplog.text


def test_hf_streams_in_batches_and_names_the_row(tmp_path):
    datasets = pytest.importorskip("datasets")
    de, en = ["Hallo", "Größer .", None, "Ende"], ["Hello", "Bigger .", "x", "End"]
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"de": de, "en": en}),
                          "val": datasets.Dataset.from_dict({"de": de[:2], "en": en[:2]})}
                         ).save_to_disk(str(tmp_path / "ds"))
    root = str(tmp_path / "ds")
    assert list(iter_hf(root, "val", "de", "en", batch_rows=1)) == [("Hallo", "Hello"),
                                                                     ("Größer .", "Bigger .")]
    pairs = iter_hf(root, "train", "de", "en", batch_rows=1)
    assert [next(pairs), next(pairs)] == [("Hallo", "Hello"), ("Größer .", "Bigger .")]
    with pytest.raises(CorpusError, match=r"split train\), row 2: expected two strings, got "
                                          "NoneType and str"):
        next(pairs)
