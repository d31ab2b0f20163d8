"""Multilingual data and training (data.pairs): directions and tags (nmt.data.languages), the
joint tokenizer's tags and balanced sample, tags at the id level on either side, temperature
sampling of directions, per-direction validation, and a bilingual run left as it was."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import TINY_MODEL, TINY_TRAIN, write_corpus, write_multilingual_corpus
from omegaconf import OmegaConf

from nmt import config
from nmt.config import ConfigError, compose_config
from nmt.data.batching import collate
from nmt.data.languages import (
    add_tag,
    check_target,
    directions,
    is_multilingual,
    lang_tag,
    languages,
    parse_pairs,
    target_languages,
    temperature_shares,
)
from nmt.data.pipeline import prepare_data, tag_ids
from nmt.data.sampler import TokenBatchSampler
from nmt.data.tokenizer import sample_languages
from nmt.data.vocab import BOS_ID, PAD_ID


def _cfg(tmp_path, *extra, root=None, fr_every=1):
    root = root or write_multilingual_corpus(tmp_path / "corpus", fr_every=fr_every)
    return compose_config([f"data.root={root}", f"data.cache_dir={tmp_path / 'cache'}",
                           "data.test_split=test", "data.tokenizer.vocab_size=120",
                           f"run_dir={tmp_path / 'run'}", *extra])


def test_directions_languages_and_targets():
    data = OmegaConf.create({"src_lang": "de", "tgt_lang": "en", "pairs": ["de-en", "en-fr"]})
    assert parse_pairs(["de-en", "en-fr"]) == [("de", "en"), ("en", "fr")]
    assert directions(data) == [("de", "en"), ("en", "fr")] and is_multilingual(data)
    assert (languages(data), target_languages(data)) == (["de", "en", "fr"], ["en", "fr"])
    assert lang_tag("fr") == "<2fr>" and add_tag([5, 6], 9) == [9, 5, 6]
    check_target(data, "de", "fr")                          # zero-shot: both known, fr tagged
    check_target(data, None, "en")
    for src, tgt, words in (("it", "en", "src_lang='it'.*knows de, en, fr"),
                            ("en", "de", "target languages: en, fr"),
                            ("fr", "fr", "must differ")):
        with pytest.raises(ConfigError, match=words):
            check_target(data, src, tgt)
    # Bilingual: null pairs, or a config from before the key (a checkpoint's plain dict).
    for old in ({"src_lang": "de", "tgt_lang": "en", "pairs": None},
                {"src_lang": "de", "tgt_lang": "en"}):
        assert directions(old) == [("de", "en")] and not is_multilingual(old)
        check_target(old, "de", "en")
        for src, tgt in (("en", "de"), ("fr", "en")):
            with pytest.raises(ConfigError):
                check_target(old, src, tgt)
    # one pair is bilingual; one function decides it for the config, the corpus and the tags
    assert not is_multilingual({"pairs": ["de-en"]}) and is_multilingual is config.is_multilingual


def test_temperature_shares_by_hand():
    # p = (0.9, 0.1); T = 2: sqrt(0.9) : sqrt(0.1) = 3 : 1
    assert temperature_shares([900, 100], 2.0) == pytest.approx([0.75, 0.25], abs=1e-12)
    assert temperature_shares([900, 100], 1.0) == pytest.approx([0.9, 0.1], abs=1e-12)
    assert temperature_shares([900, 100], 1e9) == pytest.approx([0.5, 0.5], abs=1e-6)


def test_sampler_draws_directions_by_temperature_deterministically():
    rng = np.random.default_rng(0)
    dirs = np.repeat([0, 1, 2], [700, 200, 100])            # an unbalanced corpus
    lens = rng.integers(2, 20, size=(2, len(dirs)))
    shares = temperature_shares([700, 200, 100], 5.0)
    sampler = TokenBatchSampler(*lens, 200, seed=3, groups=dirs, temperature=5.0)
    for epoch in (0, 1):
        rows = np.concatenate(sampler.batches(epoch))
        counts = np.bincount(dirs[rows], minlength=3)
        assert counts.sum() == len(dirs)                     # an epoch keeps its size
        assert np.abs(counts - shares * len(dirs)).max() < 1  # largest remainders
        per_row = np.bincount(rows, minlength=len(dirs))
        assert per_row[:700].max() == 1                      # de-en: drawn without replacement
        assert set(per_row[900:]) <= {2, 3} and per_row[700:900].min() >= 1   # oversampled
        again = TokenBatchSampler(*lens, 200, seed=3, groups=dirs, temperature=5.0)
        assert all(np.array_equal(a, b) for a, b in zip(again.batches(epoch),
                                                        sampler.batches(epoch), strict=True))
    assert not np.array_equal(np.sort(np.concatenate(sampler.batches(0))),
                              np.sort(np.concatenate(sampler.batches(1))))
    # Shares equal to the sizes (T = 1, or balanced directions): every row once, as before.
    plain = TokenBatchSampler(*lens, 200, seed=3)
    for temperature in (1.0, 5.0):
        same = TokenBatchSampler(*lens, 200, seed=3, temperature=temperature,
                                 groups=np.repeat([0, 1], 500) if temperature > 1 else dirs)
        assert same.epoch_rows(0) is None
        assert all(np.array_equal(a, b) for a, b in zip(same.batches(0), plain.batches(0),
                                                        strict=True))


def test_balanced_sample_counts_each_language_equally_and_once():
    streams = {"en": lambda: iter(["a", "b", "a", "c", "b", "d"] * 3),   # 4 distinct
               "de": lambda: iter(["x", "y", "z", "w", "v"])}
    sample = sample_languages(streams, 3)
    assert len(sample) == 6 and set(sample[:3]) <= {"v", "w", "x", "y", "z"}   # de first
    assert len(set(sample[3:])) == 3 and set(sample[3:]) <= {"a", "b", "c", "d"}
    assert sample_languages(streams, 10)[5:] == ["a", "b", "c", "d"]           # all, in order


@pytest.mark.parametrize("side", ["source", "target"])
def test_tags_at_the_id_level_on_either_side(tmp_path, side):
    cfg = _cfg(tmp_path, "data.pairs=[de-en,en-fr]", f"data.lang_tag={side}")
    data = prepare_data(cfg.data)
    tok = data.tokenizer
    en, fr = tok.tag_id("en"), tok.tag_id("fr")
    assert tok.src_pieces([en, fr]) == ["<2en>", "<2fr>"] and en != fr
    assert tok.settings["tags"] == ["<2en>", "<2fr>"]
    assert tok.settings["languages"] == ["de", "en", "fr"]
    with pytest.raises(ConfigError, match="no <2cs> tag; it has <2en>, <2fr>"):
        tok.tag_id("cs")
    assert tag_ids(cfg.data, tok) == ([(en, None), (fr, None)] if side == "source" else
                                      [(None, en), (None, fr)])
    train = data.train
    assert len(train) == 400 and train.groups.tolist() == [0] * 200 + [1] * 200
    src_texts, tgt_texts = train.src_texts(), train.tgt_texts()
    assert "<2" not in "".join(src_texts + tgt_texts)                  # raw texts untagged
    for i in (0, 199, 200, 399):
        tag = en if i < 200 else fr
        src, tgt = tok.encode_src_batch([src_texts[i]])[0], tok.encode_tgt_batch([tgt_texts[i]])[0]
        expected = (add_tag(src, tag), tgt) if side == "source" else (src, add_tag(tgt, tag))
        assert (train.src_ids(i), train.tgt_ids(i)) == expected
        # The batch the model sees: tgt_in = BOS + ids (with a target tag: <s> <2xx> ...);
        # a target tag is decoder input only: PAD in tgt_out, not counted (M2M-100).
        batch = collate(train, [i])
        assert batch.src[0, :len(expected[0])].tolist() == expected[0]
        assert batch.tgt_in[0, :len(expected[1]) + 1].tolist() == [BOS_ID, *expected[1]]
        if side == "source":
            assert batch.tgt_out[0, :len(expected[1])].tolist() == expected[1]
            assert batch.n_tgt_tokens == len(expected[1]) + 1                  # + EOS
        else:
            assert batch.tgt_out[0, :len(expected[1])].tolist() == [PAD_ID, *expected[1][1:]]
            assert batch.n_tgt_tokens == len(expected[1])                      # - tag + EOS
    assert list(data.valids) == ["de-en", "en-fr"]
    val = data.valids["en-fr"]
    assert val.groups.tolist() == [1] * 20 and "<2" not in "".join(val.tgt_texts())
    first = val.src_ids(0) if side == "source" else val.tgt_ids(0)
    assert first[0] == fr
    # A bilingual config of the same corpus: another tokenizer and cache, no tags.
    bilingual = prepare_data(_cfg(tmp_path, root=tmp_path / "corpus").data)
    assert bilingual.train.groups is None and bilingual.train.path != train.path
    assert "tags" not in bilingual.tokenizer.settings
    with pytest.raises(ConfigError, match="no <2en> tag; it has none"):
        bilingual.tokenizer.tag_id("en")


def test_tsv_per_direction_and_shares_of_an_unbalanced_corpus(tmp_path):
    root = write_multilingual_corpus(tmp_path / "text")
    tsv = tmp_path / "tsv"
    tsv.mkdir()
    for split, n in (("train", {"de-en": 200, "fr-en": 40}), ("val", {"de-en": 20, "fr-en": 20})):
        for pair, rows in n.items():
            src, tgt = pair.split("-")
            lines = zip((root / f"{split}.{src}").read_text().splitlines()[:rows],
                        (root / f"{split}.{tgt}").read_text().splitlines()[:rows], strict=True)
            (tsv / f"{split}.{pair}.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in lines))
    cfg = _cfg(tmp_path, "data.format=tsv", "data.pairs=[de-en,fr-en]", root=tsv)
    train = prepare_data(cfg.data).train
    assert np.bincount(train.groups).tolist() == [200, 40]
    sampler = TokenBatchSampler(train.src_lens, train.tgt_lens, 1024, seed=1,
                                groups=train.groups, temperature=5.0)
    counts = np.bincount(train.groups[np.concatenate(sampler.batches(0))])
    assert np.abs(counts - temperature_shares([200, 40], 5.0) * 240).max() < 1
    assert counts.tolist() == [139, 101]   # q = (5/6)^0.2 : (1/6)^0.2 = 0.9642 : 0.6988


def test_hf_translation_dict_gives_every_direction(tmp_path):
    datasets = pytest.importorskip("datasets")
    root = write_multilingual_corpus(tmp_path / "text", {"train": 60, "val": 5})
    splits = {}
    for split in ("train", "val"):
        sides = {lang: (root / f"{split}.{lang}").read_text().splitlines()
                 for lang in ("de", "en", "fr")}
        splits[split] = datasets.Dataset.from_dict({"translation": [
            dict(zip(sides, row, strict=True)) for row in zip(*sides.values(), strict=True)]})
    datasets.DatasetDict(splits).save_to_disk(str(tmp_path / "hf"))
    cfg = _cfg(tmp_path, "data.format=hf", "data.pairs=[de-en,fr-de]", root=tmp_path / "hf")
    data = prepare_data(cfg.data)
    assert data.train.groups.tolist() == [0] * 60 + [1] * 60
    assert data.train.src_texts()[60] == (root / "train.fr").read_text().splitlines()[0]
    assert data.train.tgt_texts()[60] == (root / "train.de").read_text().splitlines()[0]
    assert [len(v) for v in data.valids.values()] == [5, 5]


def test_one_pair_is_the_bilingual_run(tmp_path):
    root = write_corpus(tmp_path / "corpus")
    plain = prepare_data(_cfg(tmp_path, root=root).data)
    one = prepare_data(_cfg(tmp_path, "data.pairs=[de-en]", root=root).data)
    assert (one.train.path, one.valid.path) == (plain.train.path, plain.valid.path)
    assert one.tokenizer.fingerprint == plain.tokenizer.fingerprint
    assert one.train.groups is None and list(one.valids) == ["de-en"]


def test_per_direction_validation_of_a_tiny_run(tmp_path, monkeypatch):
    """Two directions, the tag on the target side: validation forces it first and cuts it;
    train.log, TensorBoard and summary.json carry each direction's BLEU, their mean is bleu."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from nmt.training.trainer import train
    from nmt.training.validation import validate

    cfg = _cfg(tmp_path, "data.pairs=[de-en,en-fr]", "data.lang_tag=target", *TINY_MODEL,
               *TINY_TRAIN, "train.batch_tokens=1024", "train.max_steps=4",
               "train.eval_every_steps=2", "device=cpu")
    summary = train(cfg)
    run = tmp_path / "run"
    per = summary["best_bleu_directions"]
    assert list(per) == ["de-en", "en-fr"]
    saved = json.loads((run / "summary.json").read_text())
    assert saved["best_bleu_directions"] == per and saved["last"] == summary["last"]
    last = summary["last"]
    assert last["bleu"] == pytest.approx(np.mean(list(last["bleu_directions"].values())))
    valid_lines = [ln for ln in (run / "train.log").read_text().splitlines() if "valid |" in ln]
    assert len(valid_lines) == 2 and all(" | de-en " in ln and " | en-fr " in ln
                                         for ln in valid_lines)
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    assert {"valid/bleu", "valid/bleu/de-en", "valid/bleu/en-fr"} <= set(events.Tags()["scalars"])

    # The validation's greedy search starts every hypothesis with the direction's tag (the
    # search cuts it from the hypotheses, tests/test_search.py: untagged, as the references).
    import torch

    import nmt.training.validation as validation
    from nmt.inference.translator import decode, load_for_inference
    from nmt.training.validation import valid_sets

    model, tok, _ = load_for_inference(run / "checkpoints" / "last.pt")
    data = prepare_data(cfg.data, tok)
    sets = valid_sets(data.valids, tag_ids(cfg.data, tok), 1024)
    assert [s.first_token for s in sets] == [tok.tag_id("en"), tok.tag_id("fr")]
    search = {**OmegaConf.to_container(cfg.search), "beam_size": 1}
    forced = []
    monkeypatch.setattr(validation, "decode", lambda *a, **k: forced.append(a[2]["first_token"])
                        or decode(*a, **k))
    scores, hyps = validate(model, sets[1:], tok, search, 0.1, torch.device("cpu"),
                            lambda: torch.autocast("cpu", enabled=False))
    assert forced == [tok.tag_id("fr")] and len(hyps) == 20
    assert "bleu_directions" not in scores and scores["bleu"] >= 0.0
