"""Multilingual inference and evaluation on a tiny trained model.

``Translator.translate(tgt_lang=...)`` with the tag on either side (forced first target token, cut
from the output), pivot translation, the off-target rate in the evaluations (its hand-checked cases:
tests/test_directions.py), ``nmt-evaluate`` of one direction and of ``directions=all``,
``nmt-translate tgt_lang``, ``nmt-align`` with the tag, ``nmt-serve``'s ``tgt_lang``, and a
bilingual checkpoint from before multilingual models, which translates as it did.

The multilingual model is a dim-16 Transformer trained for a few steps through ``nmt.train``
on a generated de/en/fr corpus (directions de-en and en-fr; de-fr, fr-de, en-de and fr-en are
zero-shot); its ``lang_tag=target`` twin is the same checkpoint with that config value (the
weights have the same shapes), so both tag placements run on one trained model."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import _EXTRAS, _PLACES, _SUBJECTS, _VERBS, REPO_ROOT, TINY_MODEL, TINY_TRAIN

import nmt
from nmt.checkpoint import load_checkpoint, save_atomic
from nmt.cli import align as cli_align
from nmt.cli import evaluate as cli_evaluate
from nmt.cli import translate as cli_translate
from nmt.config import ConfigError
from nmt.data.vocab import BOS_ID, EOS_ID, PAD_ID
from nmt.extras.decoding.ensemble import ensemble_translator
from nmt.extras.decoding.multilingual import (
    directions_table,
    evaluate_directions,
    off_target,
)
from nmt.extras.decoding.pivot import Pivot
from nmt.inference.sampling import sample_search
from nmt.inference.search import beam_search, greedy_search, length_penalty_factor
from nmt.inference.translator import direction_tags

CKPT = REPO_ROOT / "tests" / "data" / "tiny_transformer_2026-11-22.pt"   # bilingual de-en
SHORT = {"max_len_a": 0.0, "max_len_b": 6}
SOURCES = ["Ein großer Hund läuft im Park .", "Zwei Mädchen tanzen am Strand mit einem Ball .",
           "Eine ältere Frau wartet auf der Brücke .", ""]
_FR = (["Un grand chien", "Un petit chat", "Un jeune homme", "Une femme âgée", "Deux filles",
        "Un garçon", "Trois hommes", "Un ouvrier fatigué"],
       ["court", "saute", "marche", "joue", "attend", "danse"],
       ["dans la rue", "dans le parc", "sur la plage", "devant le bâtiment",
        "près de la rivière", "sur le pont", "dans la cuisine", "dans la neige"],
       ["", " avec un ballon", " au soleil", " tôt le matin"])


def write_trilingual(root: Path, sizes: dict[str, int]) -> Path:
    """``{split}.{de,en,fr}``: generated 3-way parallel sentences.

    conftest's phrases, and their French.
    """
    root.mkdir(parents=True, exist_ok=True)
    for seed, (split, n) in enumerate(sizes.items()):
        rng, rows = random.Random(seed), {"de": [], "en": [], "fr": []}
        for _ in range(n):
            k = [rng.randrange(len(x)) for x in (_SUBJECTS, _VERBS, _PLACES, _EXTRAS)]
            tables = (_SUBJECTS, _VERBS, _PLACES, _EXTRAS)
            parts = [table[i] for table, i in zip(tables, k, strict=True)]
            for side, lang in enumerate(("de", "en")):
                rows[lang].append(" ".join(p[side] for p in parts[:3]) + parts[3][side] + " .")
            rows["fr"].append(f"{_FR[0][k[0]]} {_FR[1][k[1]]} {_FR[2][k[2]]}{_FR[3][k[3]]} .")
        for lang, lines in rows.items():
            (root / f"{split}.{lang}").write_text("".join(x + "\n" for x in lines),
                                                  encoding="utf-8")
    return root


def train_tiny_multilingual(root: Path) -> Path:
    """``best.pt`` of a dim-16 de-en + en-fr Transformer (6 steps of ``nmt.train``, tags on
    the source side) on :func:`write_trilingual`'s corpus in ``root/corpus``."""
    corpus = write_trilingual(root / "corpus", {"train": 120, "val": 6, "test": 8})
    nmt.train([f"data.root={corpus}", f"data.cache_dir={root / 'cache'}", "data.test_split=test",
               "data.tokenizer.vocab_size=150", f"run_dir={root / 'run'}",
               "data.pairs=[de-en,en-fr]", *TINY_MODEL, *TINY_TRAIN, "train.max_steps=6",
               "train.eval_every_steps=6", "device=cpu"])
    return root / "run" / "checkpoints" / "best.pt"


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict[str, Path]:
    """``{"source": checkpoint, "target": its lang_tag=target twin, "corpus": dir}``."""
    root = tmp_path_factory.mktemp("multi")
    source = train_tiny_multilingual(root)
    ckpt = load_checkpoint(source)
    ckpt["config"]["data"]["lang_tag"] = "target"
    save_atomic(ckpt, root / "target" / "best.pt")
    return {"source": source, "target": root / "target" / "best.pt", "corpus": root / "corpus"}


@pytest.fixture(scope="module")
def multi(trained) -> nmt.Translator:
    return nmt.Translator.from_checkpoint(trained["source"])


@pytest.fixture(scope="module")
def multi_target(trained) -> nmt.Translator:
    return nmt.Translator.from_checkpoint(trained["target"])


# ------------------------------------------------------------------ the Python API
def test_directions_languages_and_the_source_side_tag(multi):
    assert multi.directions == [("de", "en"), ("en", "fr")]
    assert multi.languages == ["de", "en", "fr"]
    tok = multi.tokenizer
    for tgt in ("en", "fr"):
        results = multi.translate(SOURCES, tgt_lang=tgt, **SHORT)
        for sentence, result in zip(SOURCES, results, strict=True):
            ids = tok.encode_src_batch([sentence])[0]
            if not sentence:   # an empty source is never translated, and gets no tag
                assert result.src_tokens == ["</s>"] and result.text == "" and result.ids == []
                continue
            assert result.src_tokens == tok.src_pieces([tok.tag_id(tgt), *ids]) + ["</s>"]
            assert result.src_tokens[0] == f"<2{tgt}>" and tok.tag_id(tgt) not in result.ids
            assert result.alignment.shape == (len(result.tokens), len(result.src_tokens))
    # the default direction is data.src_lang -> data.tgt_lang (de-en); src_lang is only checked
    assert multi.translate(SOURCES, **SHORT) == multi.translate(SOURCES, tgt_lang="en", **SHORT)
    assert multi.translate(SOURCES, src_lang="fr", tgt_lang="en", **SHORT) == \
        multi.translate(SOURCES, tgt_lang="en", **SHORT)


@pytest.mark.parametrize("kwargs, message", [
    ({"tgt_lang": "cs"}, "tgt_lang='cs' is not a language of this model (it knows de, en, fr)"),
    ({"tgt_lang": "de"}, "not trained to translate into it (target languages: en, fr)"),
    ({"src_lang": "xx", "tgt_lang": "fr"}, "src_lang='xx' is not a language of this model"),
    ({"src_lang": "fr", "tgt_lang": "fr"}, "both 'fr'"),
])
def test_a_direction_the_model_cannot_translate_is_a_one_line_error(multi, kwargs, message):
    for call in (lambda: multi.translate("Ein Hund .", **kwargs),
                 lambda: multi.score(["Ein Hund ."], ["Un chien ."], **kwargs)):
        with pytest.raises(ConfigError, match=re.escape(message)) as err:
            call()
        assert "\n" not in str(err.value)


def test_a_bilingual_checkpoint_from_before_translates_as_it_did():
    """Golden values of nmt at 1f2719d (before multilingual models), greedy and beam search."""
    old = nmt.Translator.from_checkpoint(CKPT)
    assert old.directions == [("de", "en")] and old.languages == ["de", "en"]
    greedy = old.translate(SOURCES, beam_size=1, max_len_a=0.5, max_len_b=6)
    assert [(r.text, r.ids[:6], r.score) for r in greedy] == [
        ("A big dog riruns in the kit", [16, 20, 21, 35, 27, 17],
         pytest.approx(-4.434696, abs=2e-6)),
        ("Two girls in the ball .", [4, 89, 70, 17, 69, 21],
         pytest.approx(-2.297261, abs=2e-6)),
        ("A tired worker worker worker witche", [16, 33, 21, 7, 5, 18],
         pytest.approx(-4.817173, abs=2e-6)),
        ("", [], 0.0)]
    beam = old.translate(SOURCES[0], beam_size=4, n_best=3, max_len_a=0.5, max_len_b=6)
    assert (beam.text, beam.score) == ("A young mances in theark",
                                       pytest.approx(-3.374965, abs=2e-6))
    assert old.translate(SOURCES, tgt_lang="en", src_lang="de", beam_size=4, **SHORT) == \
        old.translate(SOURCES, beam_size=4, **SHORT)
    with pytest.raises(ConfigError, match=r"tgt_lang='fr' is not a language of this model"):
        old.translate("Ein Hund .", tgt_lang="fr")
    with pytest.raises(ConfigError, match="the tokenizer has no <2en> tag"):
        old.tokenizer.tag_id("en")


# ------------------------------------------------- the tag as the forced first target token
def _forced_log_probs(model, src_ids, tgt_ids) -> list[float]:
    """Teacher-forced log-probabilities of ``tgt_ids`` + EOS after ``src_ids``."""
    from nmt.data.batching import make_src_batch, make_tgt_batch

    src, mask = make_src_batch([src_ids])
    tgt_in, tgt_out, _ = make_tgt_batch([tgt_ids])
    with torch.inference_mode():
        logits, _ = model(src, mask, tgt_in, need_alignment=False)
    logp = torch.log_softmax(logits.float(), -1)[0]
    return logp.gather(-1, tgt_out[0].unsqueeze(-1)).squeeze(-1).tolist()


@pytest.mark.parametrize("search", ["greedy", "beam1", "beam3", "sample"])
def test_first_token_is_forced_not_scored_and_cut(multi, search):
    """Greedy, beam and sampling search through the ForcedFirstToken hook: every hypothesis
    began with the tag (not in the score, its step in the length penalty) and comes back
    without it after ``strip``, with one alignment row per token + EOS; each later greedy
    token is the argmax after the tag."""
    from nmt.data.batching import make_src_batch
    from nmt.inference.forced import ForcedFirstToken

    tok = multi.tokenizer
    tag = tok.tag_id("fr")
    src_ids = tok.encode_src_batch(SOURCES[:3])
    src, mask = make_src_batch(src_ids)
    model = ForcedFirstToken(multi.model, torch.full((3,), tag))   # max_len_b 7 = 6 + the tag
    run = {"greedy": lambda: greedy_search(model, src, mask, 0.0, 7, 1.0),
           "beam1": lambda: beam_search(model, src, mask, 1, 1.0, 0.0, 7),
           "beam3": lambda: beam_search(model, src, mask, 3, 1.0, 0.0, 7, n_best=3),
           "sample": lambda: sample_search(model, src, mask, 0.0, 7, length_penalty=1.0)}[search]
    raw = run()
    assert all(h.tokens[0] == tag for hyps in raw for h in hyps)
    found = ForcedFirstToken.strip(raw)
    for ids, hyps in zip(src_ids, found, strict=True):
        for h in hyps:
            assert tag not in h.tokens and len(h.tokens) <= 6   # the tag is not in the maximum
            assert h.alignment.shape == (len(h.tokens) + 1, len(ids) + 1)
            logp = _forced_log_probs(multi.model, ids, [tag, *h.tokens])[1:]   # tag: not scored
            factor = length_penalty_factor(len(h.tokens) + 2, 1.0)
            assert h.score == pytest.approx(sum(logp) / factor, abs=1e-4)
    model = multi.model
    if search == "greedy":   # beam 1 = greedy, and each token the argmax after the tag
        beam1 = ForcedFirstToken.strip(beam_search(ForcedFirstToken(model, torch.full((3,), tag)),
                                                   src, mask, 1, 1.0, 0.0, 7))
        assert [h[0].tokens for h in beam1] == [h[0].tokens for h in found]
        from nmt.data.batching import make_tgt_batch

        for ids, (h,) in zip(src_ids, found, strict=True):
            s, m = make_src_batch([ids])
            tgt_in, _, _ = make_tgt_batch([[tag, *h.tokens]])
            with torch.inference_mode():
                logits, _ = model(s, m, tgt_in, need_alignment=False)
            logits = logits.clone()
            logits[..., [PAD_ID, BOS_ID]] = -torch.inf   # never generated
            best = logits[0].argmax(-1).tolist()   # row 1 reads the tag and predicts y1, ...
            n = len(h.tokens)
            assert best[1:n + 1] == h.tokens
            assert n == 6 or best[n + 1] == EOS_ID   # ended by EOS unless at the maximum


def test_target_side_tag_in_the_translator(multi_target):
    """``lang_tag=target``: the source has no tag; outputs, tokens, alignments and attention
    have none; a forced score leaves the given tag out (M2M-100: neither scored nor counted)."""
    tok = multi_target.tokenizer
    for search in ({"beam_size": 1}, {"beam_size": 3, "n_best": 2}, {"sampling": True, "seed": 1}):
        results = multi_target.translate(SOURCES, tgt_lang="fr", return_attention=True,
                                         **search, **SHORT)
        for sentence, r in zip(SOURCES, results, strict=True):
            assert r.src_tokens == tok.src_pieces(tok.encode_src_batch([sentence])[0]) + ["</s>"]
            assert tok.tag_id("fr") not in r.ids and "<2fr>" not in r.tokens
            assert r.alignment.shape == (len(r.tokens), len(r.src_tokens))
            if sentence:
                t, s = len(r.tokens), len(r.src_tokens)
                assert r.attention["cross"].shape[2:] == (t, s)
                assert r.attention["decoder"].shape[2:] == (t, t)
    assert not multi_target.model.training     # the search's hook restored eval mode
    plain = multi_target.score(["Ein Hund ."], ["A dog ."], tgt_lang="en")[0]
    ids = tok.encode_tgt_batch(["A dog ."])[0]
    assert plain.tokens == len(ids) + 1                                    # + EOS, no tag
    logp = _forced_log_probs(multi_target.model, tok.encode_src_batch(["Ein Hund ."])[0],
                             [tok.tag_id("en"), *ids])
    assert plain.logprob == pytest.approx(sum(logp[1:]), abs=1e-4)          # after the tag
    assert direction_tags(multi_target.config, tok, None, "fr") == (None, tok.tag_id("fr"))


def test_pivot_translates_through_the_pivot_language(multi):
    pivot = Pivot(multi, "en").translate(SOURCES[:2], src_lang="de", tgt_lang="fr", **SHORT)
    middle = multi.translate(SOURCES[:2], src_lang="de", tgt_lang="en", **SHORT)
    direct = multi.translate([m.text for m in middle], src_lang="en", tgt_lang="fr", **SHORT)
    assert pivot == direct
    with pytest.raises(ConfigError, match="pivot=en is the source or target language of en-fr"):
        Pivot(multi, "en").translate("A dog .", src_lang="en", tgt_lang="fr")


def test_mbr_over_a_pivot_chooses_the_second_step(multi):
    # a decoder over a decoder reaches the engine's contract (hypotheses on token ids)
    from nmt.extras.decoding.mbr import MbrTranslator, mbr_settings

    got = MbrTranslator(Pivot(multi, "en"), mbr_settings(num=3), quiet=True).translate(
        SOURCES[:2], src_lang="de", tgt_lang="fr", **SHORT)
    middle = multi.translate(SOURCES[:2], src_lang="de", tgt_lang="en", **SHORT)
    want = MbrTranslator(multi, mbr_settings(num=3), quiet=True).translate(
        [m.text for m in middle], src_lang="en", tgt_lang="fr", **SHORT)
    assert got == want and all(g.mbr_cost is not None for g in got)


# ------------------------------------------------------------------ the command lines
def _user_error(capsys, prog: str) -> str:
    err = capsys.readouterr().err
    assert err.startswith(f"{prog}: error:") and "Traceback" not in err, err
    return " ".join(err.split())


def test_evaluate_every_direction_of_the_split_with_one_table(trained, multi, tmp_path, capsys):
    out = tmp_path / "all"
    assert cli_evaluate.main([f"checkpoint={trained['source']}", "directions=all", "beam_size=1",
                              "max_len_a=0", "max_len_b=5", f"out_dir={out}", "device=cpu"]) == 0
    table = json.loads((out / "directions.json").read_text())
    rows = table["directions"]
    assert table["split"] == "test"
    # every direction into a language with a tag (en, fr): German is a source only
    assert [(r["src"], r["tgt"], r["direction"]) for r in rows] == [
        ("de", "en", "supervised"), ("en", "fr", "supervised"), ("de", "fr", "zero-shot"),
        ("fr", "en", "zero-shot")]
    md = (out / "directions.md").read_text()
    assert md == directions_table(rows) and "| mean of 2 | zero-shot |" in md
    assert md in capsys.readouterr().out
    corpus = trained["corpus"]
    for r in rows:
        d = out / f"{r['src']}-{r['tgt']}"
        scores = json.loads((d / "scores.json").read_text())
        hyps = (d / "hyps.txt").read_text(encoding="utf-8").splitlines()
        src = (corpus / f"test.{r['src']}").read_text(encoding="utf-8").splitlines()
        want = multi.translate(src, src_lang=r["src"], tgt_lang=r["tgt"], beam_size=1,
                               max_len_a=0, max_len_b=5)
        assert hyps == [w.text for w in want]
        assert scores["bleu"] == r["bleu"] and scores["n_sentences"] == 8 and "loss" in scores
        flags = off_target(hyps, r["tgt"], ["de", "en", "fr"])
        assert scores["off_target"] == sum(flags)
        assert scores["off_target_percent"] == round(100 * sum(flags) / 8, 2) == \
            r["off_target_percent"]
        assert scores["checkpoint"] == str(trained["source"]) and scores["split"] == "test"


def test_evaluate_one_zero_shot_direction_directly_and_through_a_pivot(trained, multi, tmp_path,
                                                                       capsys):
    base = [f"checkpoint={trained['source']}", "beam_size=1", "max_len_a=0", "max_len_b=5",
            "src_lang=de", "tgt_lang=fr", "device=cpu"]
    assert cli_evaluate.main([*base, f"out_dir={tmp_path / 'direct'}"]) == 0
    assert "de-fr (zero-shot): off-target" in capsys.readouterr().out
    assert cli_evaluate.main([*base, "pivot=en", f"out_dir={tmp_path / 'pivot'}"]) == 0
    direct = json.loads((tmp_path / "direct" / "scores.json").read_text())
    pivot = json.loads((tmp_path / "pivot" / "scores.json").read_text())
    assert (direct["direction"], direct["pivot"], pivot["pivot"]) == ("zero-shot", None, "en")
    assert "loss" in direct and "loss" not in pivot   # a pivot has no reference score
    src = (trained["corpus"] / "test.de").read_text(encoding="utf-8").splitlines()
    want = Pivot(multi, "en").translate(src, src_lang="de", tgt_lang="fr", beam_size=1,
                                        max_len_a=0, max_len_b=5)
    assert (tmp_path / "pivot" / "hyps.txt").read_text(encoding="utf-8").splitlines() == \
        [w.text for w in want]
    # the default out_dir names the direction and the pivot
    assert cli_evaluate.main([*base, "pivot=en"]) == 0
    assert (trained["source"].parent / "eval_test_de-fr_beam1_pivot-en" / "hyps.txt").is_file()


def test_every_direction_of_an_hf_split_without_one_language(trained, multi, tmp_path):
    """A local DatasetDict whose test split has German and English only: directions=all finds
    de-en alone before translating anything (the lazy reader used to fail at en-fr, midway)."""
    datasets = pytest.importorskip("datasets")
    from omegaconf import OmegaConf

    sides = {lang: (trained["corpus"] / f"test.{lang}").read_text(encoding="utf-8").splitlines()
             for lang in ("de", "en")}
    rows = [dict(zip(sides, row, strict=True)) for row in zip(*sides.values(), strict=True)]
    datasets.DatasetDict({"test": datasets.Dataset.from_dict({"translation": rows})}
                         ).save_to_disk(str(tmp_path / "hf"))
    data = OmegaConf.merge(multi.config.data, {"format": "hf"})
    search = {"beam_size": 1, "max_len_a": 0, "max_len_b": 5}
    rows = evaluate_directions(multi, data, "test", tmp_path / "out", search,
                               root=str(tmp_path / "hf"))
    assert [(r["src"], r["tgt"]) for r in rows] == [("de", "en")]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["de-en", "directions.json",
                                                                    "directions.md"]
    want = multi.translate(sides["de"], src_lang="de", tgt_lang="en", **search)
    assert (tmp_path / "out" / "de-en" / "hyps.txt").read_text(encoding="utf-8").splitlines() == \
        [w.text for w in want]
    with pytest.raises(ConfigError, match=r"split 'validation' .* \(data.format=hf\) has no "
                                          "direction between two of the model's languages"):
        evaluate_directions(multi, data, "validation", tmp_path / "none", search,
                            root=str(tmp_path / "hf"))


def test_mbr_goes_through_a_pivot_and_every_direction(trained, multi, tmp_path):
    """decoding=mbr (nmt.extras.decoding.mbr, around evaluate_direction) composes with pivot= and
    directions=all: each direction's scores.json has MBR's cost and the search it replaces."""
    from nmt.extras.decoding.mbr import MbrTranslator, mbr_settings

    base = [f"checkpoint={trained['source']}", "max_len_a=0", "max_len_b=5", "device=cpu",
            "decoding=mbr", "mbr.num=2", "mbr.compare_beam=true"]
    assert cli_evaluate.main([*base, "src_lang=de", "tgt_lang=fr", "pivot=en",
                              f"out_dir={tmp_path / 'pivot'}"]) == 0
    scores = json.loads((tmp_path / "pivot" / "scores.json").read_text())
    assert (scores["decoding"], scores["pivot"], scores["mbr"]["num"]) == ("mbr", "en", 2)
    assert "search_baseline" in scores and "loss" not in scores
    src = (trained["corpus"] / "test.de").read_text(encoding="utf-8").splitlines()
    want = Pivot(MbrTranslator(multi, mbr_settings(num=2)), "en").translate(
        src, src_lang="de", tgt_lang="fr", max_len_a=0, max_len_b=5)
    assert (tmp_path / "pivot" / "hyps.txt").read_text(encoding="utf-8").splitlines() == \
        [w.text for w in want] and all(w.mbr_cost is not None for w in want)
    assert cli_evaluate.main([*base, "directions=all", f"out_dir={tmp_path / 'all'}"]) == 0
    rows = json.loads((tmp_path / "all" / "directions.json").read_text())["directions"]
    for r in rows:
        direction = tmp_path / "all" / f"{r['src']}-{r['tgt']}"
        scores = json.loads((direction / "scores.json").read_text())
        assert scores["decoding"] == "mbr" and scores["mbr"]["n_candidates"] > 0
        assert scores["search_baseline"]["beam_size"] == scores["beam_size"]


@pytest.mark.parametrize("args, message", [
    (["tgt_lang=cs"], "tgt_lang='cs' is not a language of this model (it knows de, en, fr)"),
    (["src_lang=de", "tgt_lang=fr", "pivot=fr"], "pivot=fr is the source or target language"),
    (["tgt_lang=de"], "target languages: en, fr"),
    (["directions=all", "src_lang=de"], "directions=all reads every direction of split"),
    (["directions=some"], "directions"),
])
def test_evaluate_user_errors_exit_2(trained, tmp_path, capsys, args, message):
    assert cli_evaluate.main([f"checkpoint={trained['source']}", *args,
                              f"out_dir={tmp_path / 'e'}"]) == 2
    assert message in _user_error(capsys, "nmt-evaluate")


def test_translate_cli_tgt_lang_and_pivot(trained, multi, tmp_path, capsys):
    inp = tmp_path / "in.de"
    inp.write_text("\n".join(SOURCES) + "\n", encoding="utf-8")
    for extra, want in (
            (["src_lang=de", "tgt_lang=fr"], multi.translate(SOURCES, tgt_lang="fr", **SHORT)),
            (["src_lang=de", "tgt_lang=fr", "pivot=en"],
             Pivot(multi, "en").translate(SOURCES, tgt_lang="fr", **SHORT))):
        out = tmp_path / "out.txt"
        assert cli_translate.main([f"checkpoint={trained['source']}", f"input={inp}",
                                   f"output={out}", "max_len_a=0", "max_len_b=6", "device=cpu",
                                   *extra]) == 0
        assert out.read_text(encoding="utf-8").splitlines() == [w.text for w in want]
    assert cli_translate.main([f"checkpoint={CKPT}", f"input={inp}", f"output={tmp_path / 'x'}",
                               "tgt_lang=fr"]) == 2
    assert "tgt_lang='fr' is not a language of this model (it knows de, en)" in _user_error(
        capsys, "nmt-translate")


def test_align_shows_the_tag_as_a_piece_of_no_word(trained, multi, tmp_path):
    from nmt.evaluation.alignments import load_alignments
    from nmt.extras.tools.viewer import page_data
    from nmt.extras.tools.word_alignment import force_align, word_links

    pairs = [("A big dog runs in the park .", "Un grand chien court dans le parc .")]
    tags = direction_tags(multi.config, multi.tokenizer, "en", "fr")
    item = force_align(multi.model, multi.tokenizer, pairs, tags=tags)[0]
    assert item.src_pieces[0] == "<2fr>" and item.src_words[0] == -1
    assert item.cross.shape[-1] == len(item.src_pieces) + 1
    tag_heavy = item.cross.copy()
    tag_heavy[..., 0] = 10.0          # every row's largest weight on the tag: it links nothing
    links = word_links(item.__class__(**{**item.__dict__, "cross": tag_heavy, "alignment": None}))
    assert links and all(0 <= i < 8 and 0 <= j < 8 for i, j in links)
    src = tmp_path / "s.en"
    tgt = tmp_path / "t.fr"
    src.write_text(pairs[0][0] + "\n", encoding="utf-8")
    tgt.write_text(pairs[0][1] + "\n", encoding="utf-8")
    assert cli_align.main([f"checkpoint={trained['source']}", f"src_file={src}", f"tgt_file={tgt}",
                           "src_lang=en", "tgt_lang=fr", f"out={tmp_path / 'links.txt'}",
                           f"attention_out={tmp_path / 'att.npz'}",
                           f"reverse_checkpoint={trained['source']}", "device=cpu"]) == 0
    stored = load_alignments(tmp_path / "att.npz")[0]
    assert stored.src[0] == "<2fr>" and stored.src[-1] == "</s>"
    view = page_data([(0, stored)])[0]
    assert view["src"][0] == "<2fr>" and view["kinds"]["cross"]["cols"][0] == "<2fr>"
    line = (tmp_path / "links.txt").read_text().split()
    assert line and all(0 <= int(a) < 8 and 0 <= int(b) < 8
                        for a, b in (x.split("-") for x in line))
    # the target side: the tag leads the target pieces, a row that links nothing
    item = force_align(multi.model, multi.tokenizer, pairs, tags=(None, tags[0]))[0]
    assert item.tgt_pieces[0] == "<2fr>" and item.tgt_words[0] == -1
    assert all(j >= 0 for _, j in word_links(item))


def test_ensemble_members_must_share_their_directions(trained, tmp_path):
    both = ensemble_translator([trained["source"], trained["source"]])
    assert both.directions == [("de", "en"), ("en", "fr")]
    assert both.translate("Ein Hund .", tgt_lang="fr", **SHORT).src_tokens[0] == "<2fr>"
    other = load_checkpoint(trained["source"])   # same tokenizer, another direction list
    other["config"]["data"]["pairs"] = ["de-en", "en-fr", "fr-en"]
    save_atomic(other, tmp_path / "other.pt")
    with pytest.raises(ConfigError, match="translate other directions"):
        ensemble_translator([trained["source"], tmp_path / "other.pt"])


def test_ctranslate2_engine_takes_the_tag_on_either_side(multi, multi_target, tmp_path):
    """Source side: one more source piece; target side: CTranslate2's target_prefix, cut from
    the output and rescored. Greedy and beam outputs, scores and alignments are PyTorch's
    (max_len_a=0: every sentence has the same limit, so no output is cut, see
    docs/ctranslate2.md)."""
    pytest.importorskip("ctranslate2")
    from nmt.extras.tools.ctranslate2 import CTranslate2Translator, export

    for name, translator in (("source", multi), ("target", multi_target)):
        export(translator, tmp_path / name)
        engine = CTranslate2Translator.from_dir(tmp_path / name)
        assert engine.directions == multi.directions
        for tgt, search in (("en", {"beam_size": 1}), ("fr", {"beam_size": 1}),
                            ("fr", {"beam_size": 3, "n_best": 2})):
            got = engine.translate(SOURCES, tgt_lang=tgt, **search, **SHORT)
            want = translator.translate(SOURCES, tgt_lang=tgt, **search, **SHORT)
            for g, w in zip(got, want, strict=True):
                assert (g.ids, g.tokens, g.src_tokens) == (w.ids, w.tokens, w.src_tokens)
                assert g.score == pytest.approx(w.score, abs=1e-4)
                np.testing.assert_allclose(g.alignment, w.alignment, atol=1e-4)


# ------------------------------------------------------------------ nmt-serve
def test_serve_tgt_lang_directions_and_errors(trained, multi):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from nmt.cli.serve import _check
    from nmt.config import compose_config
    from nmt.extras.tools import serve

    cfg = compose_config([f"checkpoint={trained['source']}", "max_len_a=0", "max_len_b=6"],
                         config_name="serve", validate_fn=_check)
    with TestClient(serve.create_app(multi, cfg)) as c:
        info = c.get("/v1/model").json()
        assert info["directions"] == ["de-en", "en-fr"] and info["languages"] == ["de", "en", "fr"]
        assert (info["src_lang"], info["tgt_lang"]) == ("de", "en")
        for tgt in (None, "en", "fr"):
            body = {"text": SOURCES[:2], "beam_size": 2, "alignment": True,
                    **({"tgt_lang": tgt} if tgt else {})}
            reply = c.post("/v1/translate", json=body)
            assert reply.status_code == 200
            want = multi.translate(SOURCES[:2], beam_size=2, tgt_lang=tgt, **SHORT)
            for item, result, text in zip(reply.json()["translations"], want, SOURCES,
                                          strict=False):
                assert item["translation"] == result.text
                assert item["src_tokens"][0] == f"<2{tgt or 'en'}>" == item["view"]["src"][0]
                # links are between words of the text: the tag is none of them
                links = [tuple(map(int, x.split("-"))) for x in item["links"].split()]
                assert all(0 <= i < len(text.split()) for i, _ in links)
        for bad in ("cs", "de"):     # one 422 from the schema, whose enum lists the targets
            message = "tgt_lang: Input should be 'en' or 'fr'"
            reply = c.post("/v1/translate", json={"text": ["Ein Hund ."], "tgt_lang": bad})
            assert reply.status_code == 422 and list(reply.json()) == ["error"]
            assert message in reply.json()["error"] and "\n" not in reply.json()["error"]
        assert c.post("/v1/translate", json={"text": ["x"], "tgt_lang": 3}).status_code == 422
        page = c.get("/").text
        assert '"tgt_lang":"en","targets":["en","fr"]' in page
