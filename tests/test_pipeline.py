"""The data pipeline (nmt/data/pipeline.py): write_pairs' filters and streaming, splits held in
memory, prepare_data's token cache (hits, invalidation, chunks, filters, the capped split)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from test_batching import WordTokenizer, write_hand_split

from nmt.config import compose_config
from nmt.data import pipeline
from nmt.data.batching import collate
from nmt.data.corpus import CorpusError
from nmt.data.pipeline import TokenizedSplit, prepare_data, write_pairs


def test_write_pairs_filters(tmp_path):
    src = ["a b c d e", "a", "a b", "a"]
    tgt = ["x", "x y z w", "x y", "x"]
    stats = write_pairs(tmp_path / "f.arrow", zip(src, tgt, strict=True), WordTokenizer(),
                        max_len=4, max_len_ratio=3.0)
    assert stats == {"pairs": 2, "too_long": 1, "bad_ratio": 1}
    split = TokenizedSplit(tmp_path / "f.arrow")
    assert split.src_texts() == ["a b", "a"] and split.tgt_texts() == ["x y", "x"]


def test_prepare_data_cache_hit_and_invalidation(tiny_cfg, tiny_corpus, tmp_path, monkeypatch,
                                                 caplog):
    data_cfg = tiny_cfg.data
    with caplog.at_level(logging.INFO, logger="nmt.data"):
        first = prepare_data(data_cfg)
    assert len(first.train) == 200 and len(first.valid) == 20
    batch = collate(first.train, np.arange(4))
    assert first.tokenizer.decode_tgt(batch.tgt_out[0].tolist()) == first.train.tgt_texts()[0]

    def forbidden(*args, **kwargs):
        raise AssertionError("cache miss: the corpus was read or tokenized again")

    with monkeypatch.context() as m:
        m.setattr(pipeline, "write_pairs", forbidden)
        m.setattr(pipeline, "iter_parallel", forbidden)
        second = prepare_data(data_cfg)
    assert second.train.path == first.train.path and second.valid.path == first.valid.path
    assert np.array_equal(second.train.src_lens, first.train.src_lens)

    # changed training data: new tokenizer and new token cache
    with open(tiny_corpus / "train.de", "a", encoding="utf-8") as f:
        f.write("Ein Hund schläft .\n")
    with open(tiny_corpus / "train.en", "a", encoding="utf-8") as f:
        f.write("A dog sleeps .\n")
    third = prepare_data(data_cfg)
    assert len(third.train) == 201 and third.train.path != first.train.path
    assert third.tokenizer.fingerprint != first.tokenizer.fingerprint
    assert third.valid.path != first.valid.path  # valid cache follows the tokenizer


def test_prepare_data_filters_train_only(tiny_overrides, tiny_corpus):
    long_de = " ".join(["Hund"] * 60)
    for split in ("train", "val"):
        for lang, extra in (("de", [long_de, "  ", "Ein Hund ."]), ("en", ["dog", "x", ""])):
            with open(tiny_corpus / f"{split}.{lang}", "a", encoding="utf-8") as f:
                f.write("".join(e + "\n" for e in extra))
    cfg = compose_config(tiny_overrides + ["data.max_len=50", "data.max_len_ratio=2.5"])
    data = prepare_data(cfg.data)
    assert len(data.train) == 200  # long, empty and one-sided pairs dropped
    assert len(data.valid) == 23  # validation untouched
    assert data.valid.src_texts()[-3:] == [long_de, "  ", "Ein Hund ."]
    assert data.train.src_texts()[-1] == (tiny_corpus / "train.de").read_text().splitlines()[199]
    capped = prepare_data(compose_config(tiny_overrides + ["data.max_train_pairs=50"]).data)
    assert len(capped.train) == 50
    with pytest.raises(CorpusError, match="no training pair is left"):
        prepare_data(compose_config(tiny_overrides + ["data.max_len=2"]).data)


# ------------------------------------------------------------------ streamed preparation
def _split_contents(split):
    return ([split.src_ids(i) for i in range(len(split))],
            [split.tgt_ids(i) for i in range(len(split))], split.src_texts(), split.tgt_texts())


def test_chunked_stream_writes_the_same_split_as_one_chunk(tmp_path, monkeypatch):
    src = ["a b c d e", "a", "a b", "", "b b", "a b c", "c", "a a a a a a", "b"]
    tgt = ["x", "x y z w", "x y", "x", "", "y z", "w w w w w", "x y", "z"]
    whole = write_pairs(tmp_path / "w.arrow", zip(src, tgt, strict=True), WordTokenizer(),
                        max_len=5, max_len_ratio=3.0)
    monkeypatch.setattr(pipeline, "_CHUNK_ROWS", 3)
    chunked = write_pairs(tmp_path / "c.arrow", zip(src, tgt, strict=True), WordTokenizer(),
                          max_len=5, max_len_ratio=3.0)
    assert chunked == whole == {"pairs": 5, "too_long": 1, "bad_ratio": 3}
    a, b = TokenizedSplit(tmp_path / "c.arrow"), TokenizedSplit(tmp_path / "w.arrow")
    assert len(a.chunks) == 2 and len(b.chunks) == 1                # 3 + 2 kept pairs
    assert _split_contents(a) == _split_contents(b)
    assert a.src_texts() == ["a b", "", "b b", "a b c", "b"]          # a ratio of 2 passes
    assert a.src_ids(4) == [11] and a.tgt_ids(0) == [13, 14] and a.src_ids(1) == []


def test_a_split_from_ids_in_memory_holds_what_the_file_holds(tmp_path, monkeypatch):
    """TokenizedSplit.from_ids (subword sampling's epochs): the same pairs as the file, in
    record batches of _CHUNK_ROWS, readable again from its bytes (what DDP ranks get)."""
    hand_split = write_hand_split(tmp_path)
    rows = range(len(hand_split))
    monkeypatch.setattr(pipeline, "_CHUNK_ROWS", 3)
    split = TokenizedSplit.from_ids([hand_split.src_ids(i) for i in rows],
                                    [hand_split.tgt_ids(i) for i in rows],
                                    hand_split.src_texts(), hand_split.tgt_texts())
    assert split.path is None and len(split.chunks) == 2                # 3 + 1 pairs
    assert _split_contents(split) == _split_contents(hand_split)
    assert split.src_lens.tolist() == hand_split.src_lens.tolist() == [4, 2, 1, 3]
    again = TokenizedSplit.from_bytes(split.ipc_bytes())
    assert again.path is None and _split_contents(again) == _split_contents(hand_split)


def test_stream_error_leaves_no_file(tmp_path, monkeypatch):
    def broken():
        yield from (("a", "x") for _ in range(7))
        raise CorpusError("train.de, line 8: invalid UTF-8")

    (tmp_path / "old.arrow").write_bytes(b"kept")
    monkeypatch.setattr(pipeline, "_CHUNK_ROWS", 3)
    with pytest.raises(CorpusError, match="line 8"):
        write_pairs(tmp_path / "old.arrow", broken(), WordTokenizer())
    assert [p.name for p in tmp_path.iterdir()] == ["old.arrow"]      # no temp file left
    assert (tmp_path / "old.arrow").read_bytes() == b"kept"


def test_prepare_data_in_chunks_of_3_equals_one_chunk(tiny_overrides, tmp_path, monkeypatch):
    one = prepare_data(compose_config(tiny_overrides).data)
    monkeypatch.setattr(pipeline, "_CHUNK_ROWS", 3)
    cfg = compose_config(tiny_overrides + [f"data.cache_dir={tmp_path / 'chunked'}"])
    many = prepare_data(cfg.data)
    assert len(many.train.chunks) == 67 and len(one.train.chunks) == 1     # 200 pairs
    assert many.tokenizer.fingerprint == one.tokenizer.fingerprint
    for a, b in ((one.train, many.train), (one.valid, many.valid)):
        assert _split_contents(a) == _split_contents(b)


def test_capped_training_split_still_checks_the_whole_corpus(tiny_overrides, tiny_corpus):
    with open(tiny_corpus / "train.en", "a", encoding="utf-8") as f:
        f.write("one line too many\n")
    with pytest.raises(CorpusError, match=r"train\.de has 200 lines but .*train\.en has 201"):
        prepare_data(compose_config(tiny_overrides + ["data.max_train_pairs=50"]).data)
    cache = Path(compose_config(tiny_overrides).data.cache_dir)
    assert not list(cache.glob("tokenized/*")) and not list(cache.glob("tokenizers/*"))
