"""``nmt-evaluate``: translate a test split (or any file pair), print BLEU/chrF/TER, write outputs.

    nmt-evaluate checkpoint=runs/tf/checkpoints/best.pt split=test_2016_flickr beam_size=5 out_dir=runs/tf/eval
    nmt-evaluate checkpoint=... src_file=test.de ref_file=test.en beam_size=1
    nmt-evaluate engine=ctranslate2 model_dir=runs/tf/ct2 beam_size=5   # an nmt-export directory
    nmt-evaluate checkpoint=... split=val decoding=mbr mbr.num=16 mbr.utility=chrf   # MBR

The split is read with the checkpoint's data config; every sentence is translated (nothing
filtered or truncated). ``out_dir`` (default ``<checkpoint dir>/eval_<split>_beam<k>``, with
``decoding=mbr`` ``eval_<split>_mbr_<candidates><num>_<utility>``) gets the files of
:mod:`nmt.evaluation.evaluate`. With ``decoding=mbr mbr.compare_beam=true`` the split is also
translated by the search without MBR (``beam_size``, ...), and both are printed side by side:
BLEU, chrF, ms/sentence.
Options: configs/evaluate.yaml (``nmt-evaluate --help``).
"""

from __future__ import annotations

from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from nmt.cli.common import (
    check_decoding,
    check_engine,
    checkpoint_paths,
    decode_settings,
    load_translator,
    run_app,
    run_task,
)
from nmt.config import CONFIG_PATH, ConfigError
from nmt.data.corpus import iter_parallel, iter_text_pair
from nmt.runtime import ensure_writable_dir


def _check(cfg: DictConfig) -> DictConfig:
    check_engine(cfg)
    if bool(cfg.src_file) != bool(cfg.ref_file):
        raise ConfigError("src_file and ref_file go together: give both, or neither to read split=...")
    if cfg.src_file and cfg.split:
        raise ConfigError("give either split=... or src_file=... ref_file=..., not both.")
    if cfg.attention == "all":
        if not cfg.save_alignments:
            raise ConfigError("attention=all is stored in alignments.npz: drop save_alignments=false.")
        if cfg.engine == "ctranslate2":
            raise ConfigError("attention=all needs engine=pytorch: CTranslate2 returns one "
                              "alignment per sentence.")
        if isinstance(checkpoint_paths(cfg), list):
            raise ConfigError("attention=all needs one checkpoint, not an ensemble.")
    return check_decoding(cfg)


def load_texts(cfg: DictConfig, train_cfg: DictConfig) -> tuple[str, list[str], list[str]]:
    """``(name, sources, references)`` of ``src_file``/``ref_file``, else of ``split`` (default:
    the checkpoint's test split) read with the checkpoint's data config and ``data.root``."""
    if cfg.src_file:
        name, pairs = Path(cfg.src_file).name, iter_text_pair(cfg.src_file, cfg.ref_file)
    else:
        data = OmegaConf.create(OmegaConf.to_container(train_cfg.data, resolve=True))
        data.root = str(cfg.data.root or data.root)
        name = cfg.split or data.test_split
        pairs = iter_parallel(data, name)
    pairs = list(pairs)
    return name, [s for s, _ in pairs], [r for _, r in pairs]


def _run(cfg: DictConfig) -> None:
    from nmt.evaluation.evaluate import evaluate_split, write_outputs

    translator = load_translator(cfg)
    name, src, ref = load_texts(cfg, translator.config)
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
    out_dir = Path(cfg.out_dir or where / f"eval_{name}_{how}{suffix}")
    ensure_writable_dir(out_dir, "out_dir")  # before translating: nothing is lost
    evaluation = evaluate_split(translator, src, ref, {**decode_settings(cfg),
                                                       "return_attention": cfg.attention == "all"})
    scores = evaluation.scores
    scores.update(**source, weights=cfg.weights, split=name)
    written = write_outputs(out_dir, evaluation, save_alignments_npz=bool(cfg.save_alignments))
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
    print(f"wrote {out_dir}/{{{','.join(written)}}}")


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="evaluate")
def app(cfg: DictConfig) -> None:
    run_task(cfg, _run, prog="nmt-evaluate", validate_fn=_check)


def main(argv: list[str] | None = None) -> int:
    """Console entry point ``nmt-evaluate``; returns the exit status."""
    return run_app(app, argv, config_name="evaluate", prog="nmt-evaluate", validate_fn=_check)


if __name__ == "__main__":
    raise SystemExit(main())
