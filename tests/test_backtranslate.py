"""The back-translation tag in the tokenizer (data.tokenizer.bt_tag) and the zero-shot
directions of pivot back-translation (nmt.extras.decoding.backtranslate.pivot_jobs); the whole
command: tests/e2e/test_backtranslate_cli.py."""

from __future__ import annotations

import pytest
from conftest import make_pairs, train_tokenizer
from omegaconf import OmegaConf

from nmt.config import ConfigError
from nmt.extras.decoding.backtranslate import Report, _writer, corpus_files, pivot_jobs

TOK = {"type": "unigram", "vocab_size": 120, "character_coverage": 1.0, "joint": True,
       "input_sentence_size": 1000}


@pytest.mark.parametrize("joint", [True, False])
def test_bt_tag_is_one_source_piece_only_when_asked(tmp_path, joint):
    pairs = make_pairs(200, 0)
    plain = train_tokenizer({**TOK, "joint": joint}, pairs, tmp_path)
    tagged = train_tokenizer({**TOK, "joint": joint, "bt_tag": True}, pairs, tmp_path)
    # Off (the default, and every tokenizer trained before the option): no piece, the same
    # settings, so the same cache key and model as before.
    assert plain.bt_tag_id is None and "bt_tag" not in plain.settings
    assert train_tokenizer({**TOK, "joint": joint, "bt_tag": False}, pairs,
                           tmp_path).fingerprint == plain.fingerprint
    assert tagged.settings["bt_tag"] is True and tagged.fingerprint != plain.fingerprint
    bt = tagged.bt_tag_id
    ids = tagged.encode_src_batch(["<BT> Ein großer Hund läuft ."])[0]
    assert tagged.src_pieces(ids[:2]) == ["\u2581", "<BT>"] and ids[1] == bt
    assert tagged.src_pieces(ids[2:3]) == plain.src_pieces(plain.encode_src_batch(["Ein"])[0])
    assert "<BT>" not in plain.src_pieces(plain.encode_src_batch(["<BT> Ein"])[0])  # split up
    if not joint:   # the target side never reads it
        assert "<BT>" not in tagged.tgt_pieces(tagged.encode_tgt_batch(["<BT> A dog"])[0])


def test_pivot_jobs_name_every_zero_shot_direction_with_a_real_target():
    data = OmegaConf.create({"pairs": ["de-en", "fr-en", "cs-en", "en-de", "en-fr", "en-cs"],
                             "src_lang": "de", "tgt_lang": "en"})
    assert pivot_jobs(data, "en") == {"cs": (("cs", "en"), ["de", "fr"]),
                                      "de": (("de", "en"), ["cs", "fr"]),
                                      "fr": (("fr", "en"), ["cs", "de"])}
    # into English only: no language X to translate the pivot side into
    many_to_en = OmegaConf.create({"pairs": ["de-en", "fr-en"], "src_lang": "de", "tgt_lang": "en"})
    with pytest.raises(ConfigError, match="pivot=en: the model's pairs .* give no zero-shot"):
        pivot_jobs(many_to_en, "en")
    # out of English: en-de and en-fr give fr -> de and de -> fr
    en_to_many = OmegaConf.create({"pairs": ["en-de", "en-fr"], "src_lang": "en", "tgt_lang": "de"})
    assert pivot_jobs(en_to_many, "en") == {"de": (("en", "de"), ["fr"]),
                                            "fr": (("en", "fr"), ["de"])}


def test_corpus_files_are_what_data_corpora_reads(tmp_path):
    assert corpus_files(tmp_path, "bt", "de", "en", "text") == [tmp_path / "bt.de",
                                                                  tmp_path / "bt.en"]
    assert corpus_files(tmp_path, "bt", "de", "en", "tsv") == [tmp_path / "bt.tsv"]
    assert corpus_files(tmp_path, "bt", "fr", "de", "tsv-pairs") == [tmp_path / "bt.fr-de.tsv"]
    assert Report(12, 10, 1, 1, 7).summary(100) == \
        "12 lines -> 10 pairs; skipped 1 blank, 1 over 100 subwords (line 7)"


def test_a_tab_in_a_tsv_sentence_becomes_a_space_the_tokenizer_reads_alike(tmp_path):
    # Multi30k's train.de holds one ("... in einer \tWasserfontäne."): a pivot corpus is a TSV
    with _writer([tmp_path / "bt.tsv"]) as write:
        write([("<BT> Zwei\tMänner .", "Two men ."), ("Ein Hund .", "A\tdog .")])
        write([])
    assert (tmp_path / "bt.tsv").read_text(encoding="utf-8") == \
        "<BT> Zwei Männer .\tTwo men .\nEin Hund .\tA dog .\n"
    with _writer([tmp_path / "bt.de", tmp_path / "bt.en"]) as write:   # text: kept as it is
        write([("Zwei\tMänner .", "Two men .")])
    assert (tmp_path / "bt.de").read_text(encoding="utf-8") == "Zwei\tMänner .\n"
    tok = train_tokenizer(TOK, make_pairs(200, 0), tmp_path)
    assert (tok.encode_src_batch(["Ein großer\tHund ."])
            == tok.encode_src_batch(["Ein großer Hund ."]))
