"""Weighted training corpora (``data.corpora``): read after the training split, one token cache
with each pair's corpus (column ``corpus``), drawn ``weight`` times per epoch on average
(fairseq's upsampling); guided alignment's links cover every corpus. With several directions
(``data.pairs``) each corpus holds some of them (``pairs``, ``data.train_pairs``), in its own
``format``: one cache with each pair's (direction, corpus) group (column ``group``), drawn by
temperature over the directions' upsampled sizes; a direction no corpus holds is validated
only (strict zero-shot)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import make_pairs, write_corpus, write_multilingual_corpus
from omegaconf import OmegaConf

from nmt.config import ConfigError, compose_config
from nmt.data.corpus import iter_training, training_corpora
from nmt.data.languages import directions, trained_directions
from nmt.data.pipeline import prepare_data, training_groups, training_pairs
from nmt.data.sampler import TokenBatchSampler


def _extra(root, n=30, seed=11):
    """A second corpus ``root/extra.{de,en}`` of ``n`` pairs; returns them."""
    pairs = make_pairs(n, seed)
    root.mkdir(parents=True, exist_ok=True)
    for side, lang in enumerate(("de", "en")):
        (root / f"extra.{lang}").write_text("".join(p[side] + "\n" for p in pairs),
                                            encoding="utf-8")
    return pairs


def test_weighted_sampling_matches_its_expected_counts():
    rng = np.random.default_rng(0)
    groups = np.repeat([0, 1, 2], [500, 40, 60])          # a main corpus and two small ones
    lens = rng.integers(2, 20, size=(2, len(groups)))
    weights = [1.0, 2.5, 0.5]
    sampler = TokenBatchSampler(*lens, 200, seed=3, groups=groups, weights=weights)
    for epoch in (0, 1):
        rows = np.concatenate(sampler.batches(epoch))
        assert np.array_equal(np.bincount(groups[rows], minlength=3), [500, 100, 30])  # w * n
        per_row = np.bincount(rows, minlength=len(groups))
        assert set(per_row[:500]) == {1}                     # weight 1: every pair once
        assert set(per_row[500:540]) == {2, 3} and (per_row[500:540] == 3).sum() == 20
        assert set(per_row[540:]) == {0, 1} and per_row[540:].sum() == 30  # w < 1: a share
    assert not np.array_equal(np.sort(np.concatenate(sampler.batches(0))[-200:]),
                              np.sort(np.concatenate(sampler.batches(1))[-200:]))
    # weights that give every corpus its size: every row once, as without corpora
    same = TokenBatchSampler(*lens, 200, seed=3, groups=groups, weights=[1.0] * 3)
    assert same.epoch_rows(0) is None


def test_corpora_are_read_after_the_training_split_into_one_cache(tmp_path):
    corpus = write_corpus(tmp_path / "corpus", {"train": 50, "val": 5})
    extra = _extra(tmp_path / "other")
    base = [f"data.root={corpus}", f"data.cache_dir={tmp_path / 'cache'}",
            "data.tokenizer.vocab_size=100", "data.max_train_pairs=20"]
    cfg = compose_config(base + [f"data.corpora=[{{split: extra, root: {tmp_path / 'other'}, "
                                 "weight: 4}]"])
    corpora = training_corpora(cfg.data)
    assert [(c.split, c.weight, c.limit) for c in corpora] == [("train", 1.0, 20),
                                                               ("extra", 4.0, None)]
    pairs = list(iter_training(corpora))
    main = (corpus / "train.de").read_text(encoding="utf-8").splitlines()[:20]
    assert [p[0] for p in pairs] == main + [s for s, _ in extra]     # the cap: the main split's
    assert [p[2] for p in pairs] == [0] * 20 + [1] * 30
    data = prepare_data(cfg.data)
    assert np.array_equal(data.train.groups, [0] * 20 + [1] * 30) and data.weights == [1.0, 4.0]
    assert "corpus" in data.train._reader.schema.names                # not "direction"
    assert "direction" not in data.train._reader.schema.names
    assert data.train.src_texts()[20:] == [s for s, _ in extra]
    # one shape of pair, one corpus or several: the index is the corpus's
    alone = list(iter_training(training_corpora(compose_config(base).data)))
    assert alone == [(s, t, 0) for s, t in zip(main, (corpus / "train.en").read_text(
        encoding="utf-8").splitlines()[:20], strict=True)]
    plain = prepare_data(compose_config(base).data)
    assert plain.train.groups is None and plain.weights is None
    assert plain.train.path != data.train.path
    # word links: a user's file has one line per pair of every corpus, in that order
    links = tmp_path / "links.txt"
    links.write_text("0-0\n" * 80)
    whole = training_corpora(compose_config(base[:-1] + list(cfg_corpora(tmp_path))).data)
    assert [p[2] for p in training_pairs(whole, links=str(links))] == [{(0, 0)}] * 80
    assert [p[3] for p in training_pairs(whole, links=str(links))][-1] == 1
    # the teacher's: one line per pair trained on, so the cap's 20, then the corpus
    links.write_text("0-0\n" * 50)
    assert [p[3] for p in training_pairs(corpora, links=str(links))] == [0] * 20 + [1] * 30


def test_a_tagged_corpus_without_bt_tag_is_refused_naming_it(tmp_path):
    """Sources that start with <BT> (nmt-backtranslate tag=true) need data.tokenizer.bt_tag."""
    corpus = write_corpus(tmp_path / "corpus", {"train": 20, "val": 5})
    _extra(tmp_path / "bt", n=10)
    src = tmp_path / "bt" / "extra.de"
    src.write_text("".join(f"<BT> {line}\n" for line in src.read_text().splitlines()))
    base = [f"data.root={corpus}", f"data.cache_dir={tmp_path / 'cache'}",
            "data.tokenizer.vocab_size=100", f"data.corpora=[{{split: extra, root: {src.parent}}}]"]
    with pytest.raises(ConfigError, match=re.escape(
            f"{src.parent} split extra (de-en): its sources start with <BT> (a tagged "
            "back-translation), but data.tokenizer.bt_tag=false")):
        prepare_data(compose_config(base).data)
    data = prepare_data(compose_config(base + ["data.tokenizer.bt_tag=true"]).data)
    rows = np.flatnonzero(data.train.groups == 1)
    assert len(rows) > 0 and all(data.tokenizer.bt_tag_id in data.train.src_ids(i)[:2]
                                 for i in rows)   # "▁", "<BT>": one piece


def cfg_corpora(tmp_path):
    return [f"data.corpora=[{{split: extra, root: {tmp_path / 'other'}, weight: 4}}]"]


def test_a_links_file_with_corpora_and_a_capped_split_is_refused():
    """A user's links file has a line per pair of every corpus; with data.max_train_pairs the
    lines past the cap belong to the rest of the split, not to the corpora after it."""
    with pytest.raises(ConfigError,
                       match="data.alignments with data.corpora and data.max_train_pairs"):
        compose_config(["data.alignments=links.txt", "data.corpora=[{split: x}]",
                        "data.max_train_pairs=20", "train.alignment_loss_weight=0.05",
                        "model.alignment_heads=1"])
    for ok in (["data.max_train_pairs=20"], ["data.corpora=[{split: x}]"]):   # either alone
        compose_config(["data.alignments=links.txt", "train.alignment_loss_weight=0.05",
                        "model.alignment_heads=1", *ok])


@pytest.mark.parametrize(("override", "words"), [
    ("data.corpora=[{split: x, weight: 0}]", "data.corpora[0].weight=0.0 must be > 0"),
    ("data.corpora=[{split: x, weight: nan}]", "data.corpora[0].weight=nan must be a finite"),
    ("data.corpora=[{weight: 2}]", "split"),
])
def test_corpus_settings_are_checked(override, words):
    with pytest.raises(ConfigError, match=re.escape(words)):
        compose_config([override])


@pytest.mark.parametrize(("override", "words"), [
    ("data.train_pairs=[de-fr]", "data.train_pairs: de-fr is not a direction of the model (de-en, "
                                 "en-de); add it to data.pairs."),
    ("data.corpora=[{split: x, pairs: [en-de, de_fr]}]", "data.corpora[0].pairs: 'de_fr' is not a "
                                                         "direction"),
    ("data.corpora=[{split: x, pairs: []}]", "data.corpora[0].pairs=[] lists no direction"),
    ("data.corpora=[{split: x, format: xml}]", "format"),
])
def test_the_directions_of_corpora_are_checked(override, words):
    with pytest.raises(ConfigError, match=re.escape(words)):
        compose_config(["data.pairs=[de-en,en-de]", override])
    with pytest.raises(ConfigError,
                       match="data.train_pairs: en-de is not a direction of the model"):
        compose_config(["data.train_pairs=[en-de]"])                   # bilingual: de-en only
    compose_config(["data.train_pairs=[de-en]", "data.corpora=[{split: x, pairs: [de-en]}]"])


def test_directions_and_corpora_are_drawn_by_temperature_over_upsampled_sizes():
    # direction 0: group 0, 100 pairs; direction 1: group 1 (20 pairs, weight 1) and group 2
    # (20 pairs, weight 2). Upsampled sizes e = (100, 20 + 2 * 20) = (100, 60), 160 rows.
    # T = 2: q = sqrt(100/160) : sqrt(60/160) = 0.79057 : 0.61237 -> 0.56351 : 0.43649, so
    # direction 0 gets 90.161 rows and direction 1 69.839, split 20 : 40 -> 23.280 : 46.559;
    # floors 90 + 23 + 46 = 159, the largest remainder (0.559) takes the 160th.
    groups, lens = np.repeat([0, 1, 2], [100, 20, 20]), np.full((2, 140), 5)
    for temperature, counts in ((2.0, [90, 23, 47]), (1.0, [100, 20, 40])):   # T = 1: w * n
        sampler = TokenBatchSampler(*lens, 200, seed=3, groups=groups, temperature=temperature,
                                    weights=[1.0, 1.0, 2.0], directions=[0, 1, 1])
        for epoch in (0, 1):
            rows = np.concatenate(sampler.batches(epoch))
            assert np.bincount(groups[rows], minlength=3).tolist() == counts
    # one corpus per direction: the same draws as temperature sampling of directions alone
    plain = TokenBatchSampler(*lens, 200, seed=3, groups=groups, temperature=2.0)
    grouped = TokenBatchSampler(*lens, 200, seed=3, groups=groups, temperature=2.0,
                                weights=[1.0] * 3, directions=[0, 1, 2])
    assert np.array_equal(plain.epoch_rows(4), grouped.epoch_rows(4))


def test_zero_shot_pairs_from_a_tsv_corpus_and_a_validation_only_direction(tmp_path):
    root = write_multilingual_corpus(tmp_path / "corpus", {"train": 40, "val": 5})
    bt = tmp_path / "bt"                    # synthetic de-fr pairs, as nmt-backtranslate pivot=en
    bt.mkdir()
    de = (root / "train.de").read_text(encoding="utf-8").splitlines()[:12]
    fr = (root / "train.fr").read_text(encoding="utf-8").splitlines()[:12]
    (bt / "bt.de-fr.tsv").write_text(
        "".join(f"<BT> {s}\t{t}\n" for s, t in zip(de, fr, strict=True)), encoding="utf-8")
    cfg = compose_config([f"data.root={root}", f"data.cache_dir={tmp_path / 'cache'}",
                          "data.tokenizer.vocab_size=120", "data.tokenizer.bt_tag=true",
                          "data.pairs=[de-en,en-fr,de-fr,fr-de]", "data.train_pairs=[de-en,en-fr]",
                          f"data.corpora=[{{split: bt, root: {bt}, format: tsv, pairs: [de-fr], "
                          "weight: 3}]"])
    corpora = training_corpora(cfg.data)
    assert [(c.data.format, c.pairs) for c in corpora] == [
        ("text", (("de", "en"), ("en", "fr"))), ("tsv", (("de", "fr"),))]
    assert [(pair, c.split) for pair, c in training_groups(cfg.data, corpora)] == [
        (("de", "en"), "train"), (("en", "fr"), "train"), (("de", "fr"), "bt")]
    assert list(iter_training(corpora, ("de", "fr")))[0] == (f"<BT> {de[0]}", fr[0], 1)
    assert list(iter_training(corpora, ("fr", "de"))) == []             # no corpus holds it
    data = prepare_data(cfg.data)
    assert "group" in data.train._reader.schema.names
    assert np.bincount(data.train.groups).tolist() == [40, 40, 12]
    assert data.weights == [1.0, 1.0, 3.0] and data.directions == [0, 1, 2]
    fr_tag = data.tokenizer.tag_id("fr")
    assert data.train.src_ids(80)[0] == fr_tag and data.train.src_texts()[80] == f"<BT> {de[0]}"
    assert list(data.valids) == ["de-en", "en-fr", "de-fr", "fr-de"]  # fr-de: validated only
    assert trained_directions(cfg.data) == [("de", "en"), ("en", "fr"), ("de", "fr")]
    assert trained_directions(OmegaConf.to_container(cfg.data)) == trained_directions(cfg.data)
    # the same directions, every one from the main split: another cache, one group each
    every = compose_config([f"data.root={root}", f"data.cache_dir={tmp_path / 'cache'}",
                            "data.tokenizer.vocab_size=120", "data.pairs=[de-en,en-fr,de-fr]"])
    assert trained_directions(every.data) == directions(every.data)
    assert prepare_data(every.data).train.groups.tolist() == [0] * 40 + [1] * 40 + [2] * 40
