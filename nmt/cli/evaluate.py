r"""``nmt-evaluate``: translate a test split (or any file pair), print BLEU/chrF/TER, write outputs.

    nmt-evaluate checkpoint=runs/tf/checkpoints/best.pt split=test_2016_flickr beam_size=5 \
        out_dir=runs/tf/eval
    nmt-evaluate checkpoint=... src_file=test.de ref_file=test.en beam_size=1
    nmt-evaluate engine=ctranslate2 model_dir=runs/tf/ct2 beam_size=5   # an nmt-export directory
    nmt-evaluate checkpoint=... split=val decoding=mbr mbr.num=16 mbr.utility=chrf   # MBR
    nmt-evaluate checkpoint=multi.pt src_lang=de tgt_lang=fr      # one direction (zero-shot)
    nmt-evaluate checkpoint=multi.pt directions=all beam_size=5   # every direction, one table
    nmt-evaluate checkpoint=multi.pt directions=all pivot=en      # through English

The split is read with the checkpoint's data config; every sentence is translated (nothing filtered
or truncated). ``out_dir`` (default ``<checkpoint dir>/eval_<split>_beam<k>``, with ``decoding=mbr``
``eval_<split>_mbr_<candidates><num>_<utility>``) gets the files of :mod:`nmt.evaluation.evaluate`,
scores.json with ``decoding`` too. ``decoding=mbr`` translates by minimum-Bayes-risk decoding
(:func:`nmt.extras.decoding.mbr.evaluate_mbr`: its cost in scores.json, ``nbest.txt`` the distinct
candidates by expected utility); with ``mbr.compare_beam=true`` the split is also translated by the
search without MBR (``beam_size``, ...), and both are printed side by side: BLEU, chrF, ms/sentence.
A multilingual model (or ``src_lang``/``tgt_lang``/``pivot``) also gets the off-target rate, and
``directions=all`` scores every direction of the split (:mod:`nmt.extras.decoding.multilingual`):
``out_dir/<src>-<tgt>/`` each, ``directions.{md,json}``. Options: configs/evaluate.yaml
(``nmt-evaluate --help``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import hydra
from omegaconf import DictConfig

from nmt.cli.common import (
    check_decoding,
    check_engine,
    checkpoint_paths,
    decode_settings,
    load_translator,
    run_app,
    run_task,
)
from nmt.config import CONFIG_PATH, ConfigError, is_multilingual, to_plain
from nmt.data.corpus import iter_parallel, iter_text_pair, with_root
from nmt.runtime import ensure_writable_dir


def _check(cfg: DictConfig) -> DictConfig:
    check_engine(cfg)
    if bool(cfg.src_file) != bool(cfg.ref_file):
        raise ConfigError("src_file and ref_file go together: give both, or neither to read "
                          "split=...")
    if cfg.src_file and cfg.split:
        raise ConfigError("give either split=... or src_file=... ref_file=..., not both.")
    if cfg.directions == "all" and (cfg.src_file or cfg.src_lang or cfg.tgt_lang):
        raise ConfigError("directions=all reads every direction of split=...: drop src_file/"
                          "ref_file and src_lang/tgt_lang (or drop directions=all).")
    if cfg.attention == "all":
        if not cfg.save_alignments:
            raise ConfigError("attention=all is stored in alignments.npz: drop "
                              "save_alignments=false.")
        if cfg.engine == "ctranslate2":
            raise ConfigError("attention=all needs engine=pytorch: CTranslate2 returns one "
                              "alignment per sentence.")
        if isinstance(checkpoint_paths(cfg), list):
            raise ConfigError("attention=all needs one checkpoint, not an ensemble.")
    return check_decoding(cfg)


def direction(cfg: DictConfig, train_cfg: DictConfig) -> tuple[str, str]:
    """``(src_lang, tgt_lang)``: the command line's, else the checkpoint's ``data.*_lang``."""
    return (cfg.src_lang or train_cfg.data.src_lang, cfg.tgt_lang or train_cfg.data.tgt_lang)


def load_texts(cfg: DictConfig, train_cfg: DictConfig) -> tuple[str, list[str], list[str]]:
    """``(name, sources, references)`` of ``src_file``/``ref_file``, else of ``split`` (default:
    the checkpoint's test split) read with the checkpoint's data config and ``data.root``, in
    the direction :func:`direction` names."""
    if cfg.src_file:
        name, pairs = Path(cfg.src_file).name, iter_text_pair(cfg.src_file, cfg.ref_file)
    else:
        data = with_root(train_cfg.data, cfg.data.root)
        name = cfg.split or data.test_split
        pairs = iter_parallel(data, name, direction(cfg, train_cfg))
    pairs = list(pairs)
    return name, [s for s, _ in pairs], [r for _, r in pairs]


def _run(cfg: DictConfig) -> None:
    from nmt.evaluation.evaluate import evaluate_split, write_outputs

    translator = load_translator(cfg)
    if cfg.directions == "all":
        return _run_all(cfg, translator)
    src_lang, tgt_lang = direction(cfg, translator.config)
    multi = is_multilingual(translator.config.data) or cfg.src_lang or cfg.tgt_lang or cfg.pivot
    if multi:   # a bilingual evaluation loads no extras module
        from nmt.extras.decoding.multilingual import evaluate_direction
        from nmt.extras.decoding.pivot import check_direction

        check_direction(translator, src_lang, tgt_lang, cfg.pivot)  # before reading
    name, src, ref = load_texts(cfg, translator.config)
    named = f"_{src_lang}-{tgt_lang}" if cfg.src_lang or cfg.tgt_lang else ""
    out_dir, source = _out_dir(cfg, translator, name + named)
    search = {**decode_settings(cfg), "return_attention": cfg.attention == "all"}
    if multi:
        evaluation = _decoded(cfg, evaluate_direction)(
            translator, src, ref, search=search, src_lang=src_lang, tgt_lang=tgt_lang,
            pivot=cfg.pivot)
    else:
        evaluation = _decoded(cfg, evaluate_split)(translator, src, ref, search=search)
    scores = evaluation.scores
    scores.update(**source, weights=cfg.weights, split=name, decoding=str(cfg.decoding))
    written = write_outputs(out_dir, evaluation, save_alignments_npz=bool(cfg.save_alignments))
    _print(name, scores)
    print(f"wrote {out_dir}/{{{','.join(written)}}}")


def _decoded(cfg: DictConfig, evaluate: Callable) -> Callable:
    """``evaluate`` (an evaluation of one split, called as ``evaluate_split``), or with
    ``decoding=mbr`` the same by MBR (:func:`nmt.extras.decoding.mbr.evaluate_mbr`, the ``mbr.*``
    settings, checked by ``check_decoding``)."""
    if cfg.decoding != "mbr":
        return evaluate
    from nmt.extras.decoding.mbr import evaluate_mbr

    return functools.partial(evaluate_mbr, settings=to_plain(cfg.mbr), evaluate=evaluate)


def _out_dir(cfg: DictConfig, translator, name: str) -> tuple[Path, dict]:
    """``out_dir`` (default ``<checkpoint dir>/eval_<name>_<search>[_ctranslate2][_pivot-xx]``),
    checked writable before anything is translated, and what scores.json names as evaluated."""
    if cfg.engine == "ctranslate2":
        where, suffix = Path(cfg.model_dir).resolve().parent, "_ctranslate2"
        source = {"checkpoint": translator.info["checkpoint"], "engine": "ctranslate2",
                  "model_dir": str(cfg.model_dir), "quantization": translator.info["quantization"]}
    else:
        paths = checkpoint_paths(cfg)
        where, suffix = Path(paths[0] if isinstance(paths, list) else paths).parent, ""
        source = {"checkpoint": paths}
    how = (f"mbr_{cfg.mbr.candidates}{cfg.mbr.num}_{cfg.mbr.utility}" if cfg.decoding == "mbr"
           else f"beam{cfg.beam_size}")
    suffix += f"_pivot-{cfg.pivot}" if cfg.pivot else ""
    out_dir = Path(cfg.out_dir or where / f"eval_{name}_{how}{suffix}")
    ensure_writable_dir(out_dir, "out_dir")  # before translating: nothing is lost
    return out_dir, source


def _run_all(cfg: DictConfig, translator) -> None:
    """``directions=all``: every direction of the split, each in its directory, one table."""
    from nmt.extras.decoding.multilingual import (
        directions_table,
        evaluate_direction,
        evaluate_directions,
    )

    name = cfg.split or translator.config.data.test_split
    out_dir, source = _out_dir(cfg, translator, f"{name}_all")
    rows = evaluate_directions(translator, translator.config.data, name, out_dir,
                               {**decode_settings(cfg), "return_attention": cfg.attention == "all"},
                               cfg.pivot, cfg.data.root, bool(cfg.save_alignments),
                               extra={**source, "weights": cfg.weights,
                                      "decoding": str(cfg.decoding)},
                               evaluate=_decoded(cfg, evaluate_direction))
    print(directions_table(rows), end="")
    print(f"wrote {out_dir}/directions.{{md,json}} and {len(rows)} directions' files "
          f"({', '.join(r['src'] + '-' + r['tgt'] for r in rows)})")


def _print(name: str, scores: dict) -> None:
    """The summary lines of one evaluation."""
    mbr = scores.get("mbr")
    how = ("sampling" if scores["sampling"] else f"beam_size={scores['beam_size']}" if not mbr
           else f"MBR ({mbr['candidates']} x{mbr['num']}, {mbr['utility']})")
    print(f"{name}: {scores['n_sentences']} sentences, {how}, "
          f"{scores['seconds']:.1f} s ({scores['sents_per_s']:.0f} sentences/s, "
          f"{scores['ms_per_sentence']:.1f} ms/sentence)")
    for key, label in (("bleu", "BLEU"), ("chrf", "chrF"), ("ter", "TER")):
        print(f"{label} = {scores[key]:.2f}  ({scores[key + '_signature']})")
    print(f"BLEU (lowercase) = {scores['bleu_lowercase']:.2f}")
    if "loss" in scores:
        print(f"reference loss = {scores['loss']:.4f} nats/subword, ppl = {scores['ppl']:.2f}")
    if base := scores.get("search_baseline"):
        print(f"per sentence: beam_size={base['beam_size']} {base['ms_per_sentence']:.1f} ms "
              f"(BLEU {base['bleu']:.2f}, chrF {base['chrf']:.2f}) | MBR "
              f"{scores['ms_per_sentence']:.1f} ms (BLEU {scores['bleu']:.2f}, chrF "
              f"{scores['chrf']:.2f})")
    if mbr:
        print(f"MBR cost: candidates {mbr['generation_seconds']:.1f} s, selection "
              f"{mbr['selection_seconds']:.1f} s, {mbr['candidates_per_s']:.0f} candidates/s, "
              f"{mbr['distinct_per_sentence']:.1f} distinct of {mbr['num']} per sentence")
    if scores.get("off_target_percent") is not None:
        print(f"{scores['src_lang']}-{scores['tgt_lang']} ({scores['direction']}"
              f"{', pivot ' + scores['pivot'] if scores['pivot'] else ''}): off-target "
              f"{scores['off_target_percent']:.1f}% ({scores['off_target']} of "
              f"{scores['n_sentences']})")


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="evaluate")
def app(cfg: DictConfig) -> None:
    run_task(cfg, _run, prog="nmt-evaluate", validate_fn=_check)


def main(argv: list[str] | None = None) -> int:
    """Console entry point ``nmt-evaluate``; returns the exit status."""
    return run_app(app, argv, config_name="evaluate", prog="nmt-evaluate", validate_fn=_check)


if __name__ == "__main__":
    raise SystemExit(main())
