"""Multilingual evaluation without a trained model: the off-target rate (py3langid), the
directions table, a split's directions, and scripts/tag_attention.py on a hand-made dump."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import REPO_ROOT

from nmt.config import ConfigError
from nmt.extras.decoding.multilingual import (
    directions_table,
    identify,
    off_target,
    off_target_percent,
)


# ------------------------------------------------------------------ off-target rate
def test_off_target_on_hand_made_sentences():
    texts = ["Un chien court dans le parc avec un ballon .", "A dog runs in the park .",
             "Ein Hund läuft im Park .", "", "Une femme attend sur le pont ."]
    assert identify(texts, ["de", "en", "fr"]) == ["fr", "en", "de", None, "fr"]
    flags = off_target(texts, "fr", ["de", "en", "fr"])
    assert flags == [False, True, True, False, False]
    assert off_target_percent(flags) == 40.0 and off_target_percent([]) == 0.0
    assert off_target_percent([True, False, False]) == 33.33
    with pytest.raises(ConfigError, match="py3langid does not know the language"):
        off_target(["x"], "xx", ["en", "xx"])


def test_no_multi30k_reference_is_off_target_among_its_four_languages(multi30k_root):
    for lang in ("en", "de", "fr", "cs"):
        path = multi30k_root / f"test_2016_flickr.{lang}"
        lines = path.read_text(encoding="utf-8").splitlines()
        assert len(lines) == 1000 and sum(off_target(lines, lang, ["en", "de", "fr", "cs"])) == 0


# ------------------------------------------------------------------ the directions
def test_directions_table_of_hand_made_rows():
    rows = [{"src": "de", "tgt": "en", "direction": "supervised", "bleu": 30.0, "chrf": 55.5,
             "off_target_percent": 0.0, "pivot": None},
            {"src": "de", "tgt": "fr", "direction": "zero-shot", "bleu": 10.0, "chrf": 30.0,
             "off_target_percent": 25.0, "pivot": "en"},
            {"src": "fr", "tgt": "de", "direction": "zero-shot", "bleu": 20.0, "chrf": 41.0,
             "off_target_percent": 5.0, "pivot": "en"}]
    assert directions_table(rows) == (
        "| direction | kind | BLEU | chrF | off-target % | pivot |\n"
        "|---|---|---:|---:|---:|---|\n"
        "| de-en | supervised | 30.00 | 55.50 | 0.0 |  |\n"
        "| de-fr | zero-shot | 10.00 | 30.00 | 25.0 | en |\n"
        "| fr-de | zero-shot | 20.00 | 41.00 | 5.0 | en |\n"
        "| mean of 1 | supervised | 30.00 | 55.50 | 0.0 | |\n"
        "| mean of 2 | zero-shot | 15.00 | 35.50 | 15.0 | |\n")
    rows[0]["off_target_percent"] = None   # a language py3langid does not know
    assert "| de-en | supervised | 30.00 | 55.50 | n/a |  |" in directions_table(rows)
    assert "| mean of 1 | supervised | 30.00 | 55.50 | n/a | |" in directions_table(rows)


def test_multi30k_test_split_has_all_12_directions_of_an_english_centric_model(multi30k_root):
    """The six English-centric directions of data=multi30k_multi give 12 on test_2016_flickr:
    the 6 trained first, then the 6 zero-shot ones (a stand-in translator: config and tags)."""
    from types import SimpleNamespace

    from omegaconf import OmegaConf

    from nmt.extras.decoding.multilingual import direction_kind, split_directions

    pairs = ["de-en", "fr-en", "cs-en", "en-de", "en-fr", "en-cs"]
    data = OmegaConf.create({"format": "text", "root": "/nowhere", "src_lang": "de",
                             "tgt_lang": "en", "pairs": pairs, "lang_tag": "source"})
    tags = {lang: 4 + i for i, lang in enumerate(("cs", "de", "en", "fr"))}
    stub = SimpleNamespace(config=OmegaConf.create({"data": data}),
                           tokenizer=SimpleNamespace(tag_id=tags.__getitem__),
                           languages=sorted(tags), directions=[tuple(p.split("-")) for p in pairs])
    found = split_directions(stub, data, "test_2016_flickr", root=str(multi30k_root))
    assert len(found) == 12 and len(set(found)) == 12
    assert [direction_kind(stub, *d) for d in found] == ["supervised"] * 6 + ["zero-shot"] * 6
    assert found[6:] == [("cs", "de"), ("cs", "fr"), ("de", "cs"), ("de", "fr"), ("fr", "cs"),
                         ("fr", "de")]
    assert split_directions(stub, data, "no_such_split", root=str(multi30k_root)) == []


def test_tag_attention_script_shares_per_layer(tmp_path, capsys):
    """scripts/tag_attention.py: the source tag's column averaged over heads and queries, per
    layer, on a hand-made dump (cross and encoder attention); no tag: a user error."""
    import importlib.util

    from nmt.evaluation.alignments import save_alignments

    spec = importlib.util.spec_from_file_location("tag_attention",
                                                  REPO_ROOT / "scripts" / "tag_attention.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    # One sentence, source <2en> a </s>, target b </s>; L=2 layers, H=2 heads, T=2, S=3.
    cross = np.zeros((2, 2, 2, 3), dtype=np.float32)
    cross[0, :, :, 0] = 0.5          # layer 1: every head and query puts 0.5 on the tag
    cross[1, 0, 0, 0] = 1.0          # layer 2: one of the four (head, query) rows, fully
    cross[..., 1] = 1.0 - cross[..., 0]
    encoder = np.full((2, 2, 3, 3), 0.25, dtype=np.float32)   # 0.25 everywhere
    path = tmp_path / "de-en" / "alignments.npz"
    path.parent.mkdir()
    save_alignments(path, [np.zeros((2, 3))], [["<2en>", "a", "</s>"]], [["b", "</s>"]],
                    [{"cross": cross, "encoder": encoder}])
    shares = script.tag_shares(path)
    np.testing.assert_allclose(shares["cross"], [0.5, 0.25, 1 / 3])
    np.testing.assert_allclose(shares["encoder"], [0.25, 0.25, 1 / 3])
    assert "decoder" not in shares
    script.main([str(path)])
    assert "| de-en | cross | 50.0 | 25.0 | 33.3 |" in capsys.readouterr().out
    untagged = tmp_path / "fr" / "alignments.npz"
    untagged.parent.mkdir()
    save_alignments(untagged, [np.zeros((2, 2))], [["a", "</s>"]], [["b", "</s>"]],
                    [{"cross": np.full((1, 1, 2, 2), 0.5)}])
    with pytest.raises(ConfigError, match="no language tag"):
        script.tag_shares(untagged)
