"""The back-translation tag in the tokenizer (data.tokenizer.bt_tag) and the zero-shot
directions of pivot back-translation (nmt.extras.decoding.backtranslate.pivot_jobs); the whole
command: tests/e2e/test_backtranslate_cli.py."""

from __future__ import annotations

import pytest
from conftest import make_pairs, train_tokenizer
from omegaconf import OmegaConf

from nmt.config import ConfigError
from nmt.data.corpus import CorpusError
from nmt.extras.decoding.backtranslate import Report, _Output, corpus_files, pivot_jobs

SETTINGS = {"sampling": True, "seed": 1}
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
    paths = {"tsv": [tmp_path / "bt.tsv"], "text": [tmp_path / "bt.de", tmp_path / "bt.en"]}
    with _Output(tmp_path, "bt", paths, {}, SETTINGS) as out:
        out.write("tsv", [("<BT> Zwei\tMänner .", "Two men ."), ("Ein Hund .", "A\tdog .")])
        out.write("tsv", [])
        out.write("text", [("Zwei\tMänner .", "Two men .")])   # text: kept as it is
    assert (tmp_path / "bt.tsv").read_text(encoding="utf-8") == \
        "<BT> Zwei Männer .\tTwo men .\nEin Hund .\tA dog .\n"
    assert (tmp_path / "bt.de").read_text(encoding="utf-8") == "Zwei\tMänner .\n"
    tok = train_tokenizer(TOK, make_pairs(200, 0), tmp_path)
    assert (tok.encode_src_batch(["Ein großer\tHund ."])
            == tok.encode_src_batch(["Ein großer Hund ."]))


def test_a_stopped_run_resumes_after_its_last_chunk(tmp_path):
    """A run stopped mid-chunk (an interrupt after an uncommitted write) leaves .partial files
    and the progress file; the same run resumes with its lines done, reports and seed position,
    the torn chunk cut off; another run's settings are refused by name; the end renames."""
    paths = {"fr-de": [tmp_path / "bt.fr-de.tsv"]}
    run = {"checkpoint": "m.pt", "chunk_lines": 2}
    with pytest.raises(KeyboardInterrupt), _Output(tmp_path, "bt", paths, run, SETTINGS) as out:
        first = [out.settings(), out.settings()]
        out.write("fr-de", [("Un chien .", "Ein Hund .")])
        out.reports["fr-de"].pairs = 1
        out.commit("de", 2)
        out.write("fr-de", [("torn", "torn")])
        raise KeyboardInterrupt
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "bt.backtranslation.progress.json", "bt.fr-de.tsv.partial"]
    with pytest.raises(ConfigError, match=r"progress.json: a back-translation with other "
                       r"settings \(checkpoint, chunk_lines\) stopped here; rerun it to resume"):
        _Output(tmp_path, "bt", paths, {"checkpoint": "n.pt", "chunk_lines": 3}, SETTINGS)
    with _Output(tmp_path, "bt", paths, run, SETTINGS) as out:
        assert out.done == {"de": 2} and out.reports["fr-de"].pairs == 1
        resumed = out.settings()
        out.write("fr-de", [("Un chat .", "Eine Katze .")])
    with _Output(tmp_path, "u", {"fr-de": [tmp_path / "u.tsv"]}, run, SETTINGS) as out:
        assert [out.settings() for _ in range(3)] == [*first, resumed]   # the seeds go on
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bt.fr-de.tsv", "u.tsv"]
    assert (tmp_path / "bt.fr-de.tsv").read_text(encoding="utf-8") == \
        "Un chien .\tEin Hund .\nUn chat .\tEine Katze .\n"
    with pytest.raises(ConfigError, match="bt.fr-de.tsv exists"):   # a finished corpus stays
        _Output(tmp_path, "bt", paths, run, SETTINGS)
    with pytest.raises(CorpusError), _Output(tmp_path, "x", {"d": [tmp_path / "x.tsv"]}, run,
                                             SETTINGS) as out:   # a user error: nothing left
        out.commit("de", 2)
        raise CorpusError("no pair")
    assert not list(tmp_path.glob("x.*"))
