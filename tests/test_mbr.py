"""Minimum-Bayes-risk decoding, a room of its own (nmt/extras/decoding/mbr.py).

The selection (utilities computed by hand on three candidates, fastchrf against sacreBLEU,
duplicates counted with their multiplicity), the decoding around it (candidates from the beam or
from samples, the cost per sentence, the settings checked where they enter), evaluate_mbr, and
nmt-evaluate / nmt-translate with decoding=mbr."""

from __future__ import annotations

import dataclasses
import json
import math
import types

import fastchrf
import numpy as np
import pytest
from conftest import REPO_ROOT
from sacrebleu.metrics import BLEU, CHRF

import nmt
from nmt.cli.schemas import MbrCandidates, MbrUtility
from nmt.config import ConfigError, compose_config, to_plain
from nmt.evaluation.evaluate import evaluate_split
from nmt.extras.decoding.mbr import (
    CHOICES,
    MbrCost,
    MbrTranslation,
    MbrTranslator,
    evaluate_mbr,
    mbr_select,
    mbr_settings,
    mbr_translate,
    utility_matrices,
)

CKPT = REPO_ROOT / "tests" / "data" / "tiny_transformer_2026-11-22.pt"
SOURCES = ["Ein großer Hund läuft im Park .", "Zwei Mädchen tanzen am Strand mit einem Ball .",
           "Eine ältere Frau wartet auf der Brücke .", ""]
SHORT = {"max_len_a": 0.0, "max_len_b": 8}     # an untrained model: keep outputs short

# chrF (character 1- to 6-grams, spaces left out, beta = 2) of "ab", "abc", "bcd": for each
# order n with n-grams on both sides, precision P_n and recall R_n; chrF = F_2 of their means,
# 100 * 5 P R / (4 P + R). E.g. u("ab", "abc"): unigrams P 2/2, R 2/3; bigrams P 1/1, R 1/2;
# no trigram in "ab": P = 1, R = 7/12, F_2 = 7/11. u("abc", "bcd"): P = R = (2/3 + 1/2 + 0) / 3.
CHRF_TEXTS = ["ab", "abc", "bcd"]
CHRF_BY_HAND = 100 * np.array([[1, 7 / 11, 5 / 28],
                               [7 / 8, 1, 7 / 18],
                               [5 / 22, 7 / 18, 1]])
# Sentence BLEU, effective order, exp smoothing (a zero count of order n gets 1 / (2^k total)
# for the k-th such order), brevity penalty exp(1 - r / h) when h < r. E.g. u("a b", "a b c"):
# precisions 1, 1 and BP exp(-1/2); u("a b c d", "a b"): 2/4, 1/3, then 1/(2 * 2), 1/(4 * 1).
BLEU_TEXTS = ["a b", "a b c", "a b c d"]
BLEU_BY_HAND = 100 * np.array([[1, math.exp(-1 / 2), math.exp(-1)],
                               [(2 / 3 * 1 / 2 * 1 / 2) ** (1 / 3), 1, math.exp(-1 / 3)],
                               [(1 / 2 * 1 / 3 * 1 / 4 * 1 / 4) ** (1 / 4),
                                (3 / 4 * 2 / 3 * 1 / 2 * 1 / 2) ** (1 / 4), 1]])


@pytest.mark.parametrize("utility,texts,by_hand", [("chrf", CHRF_TEXTS, CHRF_BY_HAND),
                                                   ("bleu", BLEU_TEXTS, BLEU_BY_HAND)])
def test_three_candidates_by_hand(utility, texts, by_hand):
    (matrix,) = utility_matrices([texts], utility)
    np.testing.assert_allclose(matrix, by_hand, rtol=1e-12)
    (choice,) = mbr_select([texts], utility)
    expected = by_hand.mean(axis=1)              # (1 / N) sum_j u(h_i, y_j), u(h, h) included
    assert choice.best == 1 and choice.order == [1, 0, 2]   # the middle one: closest to all
    np.testing.assert_allclose(choice.utility, expected[[1, 0, 2]], rtol=1e-12)
    assert choice.count == [1, 1, 1]


def test_fastchrf_gives_sacrebleus_sentence_chrf():
    """Same values, whitespace included: both leave spaces out of the character n-grams, so
    a doubled space changes nothing; an empty side scores 0 in both."""
    pairs = [("A dog runs .", "A dog walks ."), ("Zwei Mädchen tanzen .", "Zwei Mädchen tanzt ."),
             ("A  big dog", "A big dog"), ("Ab", "ab"), ("", "x"), ("", ""), ("x", "")]
    fast = fastchrf.pairwise_chrf([[h] for h, _ in pairs], [[r] for _, r in pairs])
    slow = [CHRF().sentence_score(h, [r]).score for h, r in pairs]
    np.testing.assert_allclose([f[0][0] for f in fast], slow, rtol=1e-12, atol=1e-12)
    assert slow[2] == 100.0 and slow[4] == slow[5] == 0.0


def test_bleu_utility_is_sacrebleus_effective_order_sentence_bleu():
    (matrix,) = utility_matrices([BLEU_TEXTS], "bleu")
    bleu = BLEU(effective_order=True)
    assert matrix[2, 0] == bleu.sentence_score(BLEU_TEXTS[2], [BLEU_TEXTS[0]]).score


def test_duplicates_are_scored_once_and_counted_with_their_multiplicity(monkeypatch):
    texts = ["abc", "ab", "bcd", "ab", "ab", "ab", "ab"]    # "ab" five times in N = 7
    seen = []
    real = fastchrf.pairwise_chrf
    monkeypatch.setattr(fastchrf, "pairwise_chrf", lambda h, r: seen.append(h) or real(h, r))
    (choice,) = mbr_select([texts], "chrf")
    assert seen == [[["abc", "ab", "bcd"]]]                 # one U x U matrix, U = 3
    # E(ab) = (5 * 100 + 700/11 + 500/28) / 7 = 83.07 beats E(abc) = (5 * 87.5 + 100 + 700/18) / 7
    # = 82.34; without the multiplicity "abc" would win (test above).
    assert choice.order == [1, 0, 2] and choice.count == [5, 1, 1]
    full = np.array([[CHRF().sentence_score(h, [y]).score for y in texts] for h in texts])
    np.testing.assert_allclose(choice.utility, full.mean(axis=1)[[1, 0, 2]], rtol=1e-12)


def test_a_batch_of_sentences_is_each_sentence_alone():
    one, two = mbr_select([["x"], ["ab", "bcd", "abc"]], "chrf")
    assert (one.order, one.utility, one.count) == ([0], [100.0], [1])
    assert two == mbr_select([["ab", "bcd", "abc"]], "chrf")[0] and two.best == 2


def test_costs_add_up_field_by_field():
    parts = [MbrCost(1, 4, 2, 0.5, 0.25), MbrCost(1, 4, 4, 1.5, 0.75)]
    assert sum(parts, MbrCost()) == MbrCost(2, 8, 6, 2.0, 1.0)


# ------------------------------------------------------------------------- the decoding
@pytest.fixture(scope="module")
def translator() -> nmt.Translator:
    return nmt.Translator.from_checkpoint(CKPT)


@pytest.mark.parametrize("utility", ["chrf", "bleu"])
def test_mbr_over_the_beam_picks_from_its_n_best_deterministically(translator, utility):
    """candidates=beam: the beam's n-best (beam_size = n_best = num), weighted uniformly."""
    mbr = {"candidates": "beam", "num": 4, "utility": utility}
    results = mbr_translate(translator, SOURCES, **mbr, **SHORT)
    again = mbr_translate(translator, SOURCES, **mbr, **SHORT)
    beam = translator.translate(SOURCES, beam_size=4, n_best=4, **SHORT)
    assert [(r.text, r.utility) for r in again] == [(r.text, r.utility) for r in results]
    for r, b in zip(results, beam, strict=True):
        n_best = [h.text for h in b.hypotheses]
        (choice,) = mbr_select([n_best], utility)
        assert isinstance(r, MbrTranslation) and isinstance(r, nmt.Translation)
        assert r.text == n_best[choice.best] and r.utility == choice.utility[0]
        assert [h.text for h in r.hypotheses] == [n_best[k] for k in choice.order]
        assert [h.utility for h in r.hypotheses] == choice.utility
        assert (r.ids, r.score) == (b.hypotheses[choice.best].ids, b.hypotheses[choice.best].score)
    # Each result's cost: its N = 4 candidates (1 for the empty source, searched without
    # the model) and its distinct texts.
    assert [(r.mbr_cost.sentences, r.mbr_cost.candidates, r.mbr_cost.distinct)
            for r in results] == [(1, len(b.hypotheses), len(r.hypotheses))
                                  for r, b in zip(results, beam, strict=True)]


def test_mbr_samples_are_seeded_and_collapse_to_greedy_at_a_high_epsilon(translator):
    """candidates=sample: num samples per sentence, a function of seed and input."""
    mbr = {"candidates": "sample", "num": 5, "epsilon": 0.02}

    def draw(seed):
        return mbr_translate(translator, SOURCES, **mbr, seed=seed, **SHORT)

    def texts(results):
        return [[h.text for h in r.hypotheses] for r in results]

    a, b, c = draw(1), draw(1), draw(2)
    assert texts(a) == texts(b) and texts(a) != texts(c)
    assert [r.mbr_cost.candidates for r in a] == [5] * len(SOURCES)
    assert [len(r.hypotheses) for r in a][3] == 1           # an empty source: 5 x ""
    cold = mbr_translate(translator, SOURCES, **{**mbr, "epsilon": 0.99}, **SHORT)
    # epsilon 0.99 keeps only each step's most probable token: 5 greedy paths, one candidate
    greedy = translator.translate(SOURCES, beam_size=1, **SHORT)
    assert [r.text for r in cold] == [r.text for r in greedy]
    assert [len(r.hypotheses) for r in cold] == [1] * 4 and cold[0].utility == 100.0


def test_one_sentence_gives_one_result_with_its_attention(translator):
    (listed,) = mbr_translate(translator, SOURCES[1:2], num=3, **SHORT)
    one = mbr_translate(translator, SOURCES[1], num=3, return_attention=True, **SHORT)
    assert isinstance(one, MbrTranslation) and one == listed     # the arrays aside
    assert one.attention["cross"].shape[2:] == (len(one.tokens), len(one.src_tokens))
    assert one.hypotheses[0].attention is None


def test_the_defaults_are_the_command_lines_and_the_choices_its_schemas():
    cli = compose_config(["checkpoint=x"], config_name="translate", validate_fn=None)
    assert mbr_settings() == to_plain(cli.mbr) == {"candidates": "beam", "num": 16,
                                                   "utility": "chrf", "epsilon": 0.02,
                                                   "compare_beam": False}
    assert cli.decoding == "search"                              # MBR is off by default
    assert CHOICES == {"candidates": tuple(c.value for c in MbrCandidates),
                       "utility": tuple(c.value for c in MbrUtility)}
    assert mbr_settings(num=4, utility=MbrUtility.bleu, epsilon=0) == {
        "candidates": "beam", "num": 4, "utility": "bleu", "epsilon": 0.0, "compare_beam": False}


@pytest.mark.parametrize("bad,message", [
    ({"num": 0}, r"^mbr\.num=0 must be > 0\.$"),
    ({"num": 2.5}, "mbr.num=2.5 must be an integer"),
    ({"utility": "ter"}, r"^mbr\.utility='ter': use chrf or bleu\.$"),
    ({"candidates": "nbest"}, "mbr.candidates='nbest': use beam or sample"),
    ({"epsilon": 1.0}, r"^mbr\.epsilon=1\.0 must lie in \[0, 1\)"),
    ({"compare_beam": "yes"}, "mbr.compare_beam='yes' must be true or false"),
    ({"nun": 3}, "unknown MBR setting.s. nun: use candidates, num")])
def test_mbr_settings_are_checked_once_at_entry(bad, message):
    with pytest.raises(ConfigError, match=message):
        mbr_settings(**bad)


def test_the_search_settings_mbr_cannot_take_are_refused(translator):
    mbr = MbrTranslator(translator, mbr_settings(num=2))
    for bad, message in (({"sampling": True}, "drop sampling=true"),
                         ({"n_best": 2, "beam_size": 2}, "n_best=2 with decoding=mbr"),
                         ({"top_p": 0.0}, "top_p")):
        with pytest.raises(ConfigError, match=message):
            mbr.search_settings(**bad)
        with pytest.raises(ConfigError, match=message):
            mbr_translate(translator, SOURCES[0], num=2, **bad)
    assert mbr.search_settings(beam_size=3) == translator.search_settings(beam_size=3)
    with pytest.raises(ConfigError, match="^SimpleNamespace cannot do mbr.epsilon > 0"):
        MbrTranslator(types.SimpleNamespace(epsilon_sampling=False),
                      mbr_settings(candidates="sample"))
    MbrTranslator(types.SimpleNamespace(epsilon_sampling=False),
                  mbr_settings(candidates="sample", epsilon=0.0))


def test_mbr_cost_comes_with_the_results_so_threads_can_share_a_translator(translator):
    """Each sentence's cost rides on its result; the cost (wall-clock seconds) is no part of
    ``==``, the utility is."""
    from concurrent.futures import ThreadPoolExecutor

    shared = {num: MbrTranslator(translator, mbr_settings(candidates="sample", num=num), True)
              for num in (2, 5)}

    def run(num):
        return shared[num].translate(SOURCES[:3], **SHORT)

    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(run, [2, 5, 2, 5]))
    assert [[r.mbr_cost.candidates for r in results] for results in runs] == \
        [[2] * 3, [5] * 3, [2] * 3, [5] * 3]
    assert [r.text for r in runs[0]] == [r.text for r in runs[2]]
    assert not hasattr(translator, "mbr_cost") and not hasattr(shared[2], "mbr_cost")
    # the cost is no part of ==; [0] is the result without list and cost
    assert runs[0] == runs[2] and [r.mbr_cost for r in runs[0]] != [r.mbr_cost for r in runs[2]]
    assert dataclasses.replace(runs[0][0], utility=-1.0) != runs[0][0]
    for r in runs[1]:
        assert r.hypotheses[0] == dataclasses.replace(r, hypotheses=[])
        assert r.hypotheses[0].mbr_cost is None and r.hypotheses[0].utility == r.utility
        plain = json.loads(json.dumps(r.to_dict()))
        assert plain["mbr_cost"] == dataclasses.asdict(r.mbr_cost)
        assert plain["utility"] == r.utility and plain["hypotheses"][0]["mbr_cost"] is None


# ----------------------------------------------------------------------- the evaluation
def test_evaluate_mbr_checks_settings_once_per_evaluation_and_compares_the_search(
        translator, monkeypatch):
    """The baseline (compare_beam) is the plain evaluation of the same search, run first;
    then MBR's, each checking its settings once."""
    from nmt.inference import translator as translator_module

    src, ref = SOURCES[:3], ["A big dog runs in the park .", "Two girls dance .", "A woman ."]
    search = {"beam_size": 2, **SHORT}
    plain = evaluate_split(translator, src, ref, search).scores
    calls = []
    check = translator_module.validate_decoding
    monkeypatch.setattr(translator_module, "validate_decoding",
                        lambda settings: calls.append(1) or check(settings))
    evaluation = evaluate_mbr(translator, src, ref, search,
                              settings=mbr_settings(num=2, candidates="sample", compare_beam=True))
    assert len(calls) == 2
    scores = evaluation.scores
    assert {k: scores["search_baseline"][k] for k in ("beam_size", "bleu", "chrf")} == \
        {k: plain[k] for k in ("beam_size", "bleu", "chrf")}
    mbr = scores["mbr"]
    assert {k: mbr[k] for k in ("candidates", "num", "seed", "top_p", "n_candidates")} == \
        {"candidates": "sample", "num": 2, "seed": 0, "top_p": 1.0, "n_candidates": 6}
    assert scores["bleu"] == evaluate_split(
        MbrTranslator(translator, mbr_settings(num=2, candidates="sample")), src, ref,
        search).scores["bleu"]
    assert "decoding" not in scores                 # nmt-evaluate adds it beside split, weights


def test_evaluate_mbr_passes_its_keywords_to_the_evaluation_it_wraps(translator):
    seen = []

    def evaluate(engine, sources, references, search=None, **kwargs):
        seen.append((type(engine).__name__, kwargs, search))
        return evaluate_split(engine, sources, references, search, score_references=False)

    evaluation = evaluate_mbr(translator, SOURCES[:2], ["a", "b"], SHORT, evaluate=evaluate,
                              settings=mbr_settings(num=2, compare_beam=True), pivot=None)
    assert seen == [("Translator", {"pivot": None}, {**SHORT, "return_attention": False}),
                    ("MbrTranslator", {"pivot": None}, SHORT)]
    assert "loss" not in evaluation.scores and evaluation.scores["mbr"]["n_candidates"] == 4


# ----------------------------------------------------------------------- the commands
def test_evaluate_cli_reports_the_cost_and_on_request_the_search_it_replaces(tmp_path, capsys):
    """The cost always; the search baseline only with mbr.compare_beam=true, and then it is
    exactly what nmt-evaluate gives with that search alone."""
    from conftest import write_corpus

    from nmt.cli import evaluate as cli_evaluate

    corpus = write_corpus(tmp_path / "corpus", {"test": 4})
    args = [f"checkpoint={CKPT}", f"src_file={corpus / 'test.de'}",
            f"ref_file={corpus / 'test.en'}", "max_len_a=0", "max_len_b=8",
            "save_alignments=false", "beam_size=2"]
    mbr_args = [*args, "decoding=mbr", "mbr.candidates=sample", "mbr.num=3"]
    assert cli_evaluate.main([*mbr_args, f"out_dir={tmp_path / 'e'}"]) == 0
    printed = capsys.readouterr().out
    assert "MBR (sample x3, chrf)" in printed and "per sentence: beam_size" not in printed
    assert "MBR cost: candidates" in printed
    scores = json.loads((tmp_path / "e" / "scores.json").read_text())
    mbr = scores["mbr"]
    assert scores["decoding"] == "mbr" and "search_baseline" not in scores
    assert {k: mbr[k] for k in ("candidates", "num", "utility", "epsilon", "seed", "n_candidates",
                                "compare_beam")} \
        == {"candidates": "sample", "num": 3, "utility": "chrf", "epsilon": 0.02, "seed": 0,
            "n_candidates": 12, "compare_beam": False}
    assert 1 <= mbr["distinct_per_sentence"] <= 3
    nbest = (tmp_path / "e" / "nbest.txt").read_text(encoding="utf-8").splitlines()
    assert len(nbest) - 1 == round(4 * mbr["distinct_per_sentence"])   # the distinct candidates

    assert cli_evaluate.main([*mbr_args, "mbr.compare_beam=true", f"out_dir={tmp_path / 'c'}"]) == 0
    assert "per sentence: beam_size=2" in capsys.readouterr().out
    base = json.loads((tmp_path / "c" / "scores.json").read_text())["search_baseline"]
    assert cli_evaluate.main([*args, f"out_dir={tmp_path / 'b'}"]) == 0
    plain = json.loads((tmp_path / "b" / "scores.json").read_text())
    assert plain["decoding"] == "search" and "mbr" not in plain
    assert {k: base[k] for k in ("beam_size", "bleu", "chrf", "bleu_lowercase")} == \
        {k: plain[k] for k in ("beam_size", "bleu", "chrf", "bleu_lowercase")}
    missing = tmp_path / "missing.pt"             # never read: the checks come first
    for bad, message in (("mbr.num=0", "mbr.num=0 must be > 0."),
                         ("mbr.epsilon=1", "mbr.epsilon=1"),
                         ("sampling=true", "drop sampling=true"),
                         ("mbr.utility=ter", "expected one of [chrf, bleu]")):   # Hydra's
        assert cli_evaluate.main([f"checkpoint={missing}", *mbr_args[1:], bad]) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert message in err and "Traceback" not in err and "cannot read" not in err


def test_translate_cli_writes_the_apis_choice(translator, tmp_path):
    from nmt.cli import translate as cli_translate

    inp, out = tmp_path / "in.de", tmp_path / "out.en"
    inp.write_text("\n".join(SOURCES) + "\n", encoding="utf-8")
    assert cli_translate.main([f"checkpoint={CKPT}", f"input={inp}", f"output={out}",
                               "decoding=mbr", "mbr.candidates=beam", "mbr.num=3",
                               "mbr.utility=bleu", "max_len_a=0", "max_len_b=8"]) == 0
    api = mbr_translate(translator, SOURCES, candidates="beam", num=3, utility="bleu", **SHORT)
    assert out.read_text(encoding="utf-8") == "".join(r.text + "\n" for r in api)
