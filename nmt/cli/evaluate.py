"""``nmt-evaluate``: translate a test split (or any file pair), print BLEU/chrF, write outputs.

    nmt-evaluate checkpoint=runs/tf/checkpoints/best.pt split=test_2016_flickr beam_size=5 out_dir=runs/tf/eval
    nmt-evaluate checkpoint=... src_file=test.de ref_file=test.en beam_size=1
    nmt-evaluate engine=ctranslate2 model_dir=runs/tf/ct2 beam_size=5   # an nmt-export directory

The split is read with the checkpoint's data config (``data.root=DIR`` reads it from
elsewhere). Every sentence is translated (nothing filtered or truncated). ``out_dir`` gets
``hyps.txt`` (one detokenized line per source line), ``scores.json`` (bleu, chrf, their
sacreBLEU signatures, bleu_lowercase, beam_size, n_sentences, seconds, ...) and
``alignments.npz`` (see :mod:`nmt.evaluation.alignments`; plot it with ``nmt-plot``);
``attention=all`` also stores every layer and head of the chosen hypotheses' attention
there (``nmt-plot ... layer=all head=all`` or ``format=html``; PyTorch engine only).
``engine=ctranslate2 model_dir=DIR`` translates with CTranslate2 (:mod:`nmt.extras.ctranslate2`)
and writes the same files; ``out_dir`` then defaults to ``<model_dir>/../eval_<split>_beam<k>_ctranslate2``.
Options: configs/evaluate.yaml (``nmt-evaluate --help``).
"""

from __future__ import annotations

from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from nmt.cli.common import (
    check_engine,
    check_search,
    checkpoint_paths,
    decode_settings,
    ensure_writable_dir,
    load_translator,
    run_app,
    run_task,
)
from nmt.config import CONFIG_PATH, ConfigError


def _check(cfg: DictConfig) -> DictConfig:
    check_engine(cfg)
    if bool(cfg.src_file) != bool(cfg.ref_file):
        raise ConfigError("src_file and ref_file go together: give both (or neither, to read split=...).")
    if cfg.src_file and cfg.split:
        raise ConfigError("give either split=... or src_file=... ref_file=..., not both.")
    if cfg.attention not in ("alignment", "all"):
        raise ConfigError(f"attention={cfg.attention!r} is not one of alignment (one matrix per "
                          "sentence) or all (every layer and head of every attention).")
    if cfg.attention == "all":
        if not cfg.save_alignments:
            raise ConfigError("attention=all stores the weights in alignments.npz, but "
                              "save_alignments=false writes none: drop one of the two.")
        if cfg.engine == "ctranslate2":
            raise ConfigError("attention=all needs engine=pytorch: CTranslate2 returns one "
                              "alignment per sentence, not every layer and head; drop "
                              "attention=all, or evaluate the checkpoint with engine=pytorch.")
        if isinstance(checkpoint_paths(cfg), list):
            raise ConfigError("attention=all needs one checkpoint: the members of an ensemble "
                              "attend differently and their weights do not combine; evaluate "
                              "a single member for its attention.")
    return check_search(cfg)


def load_texts(cfg: DictConfig, train_cfg: DictConfig) -> tuple[str, list[str], list[str]]:
    """``(name, sources, references)`` from ``src_file``/``ref_file`` or the split.

    Raises:
        CorpusError: missing/unreadable files or unequal line counts.
    """
    from nmt.data.corpus import read_parallel, read_text_pair

    if cfg.src_file:
        src, ref = read_text_pair(cfg.src_file, cfg.ref_file)
        return Path(cfg.src_file).name, src, ref
    data_cfg = OmegaConf.to_container(train_cfg.data, resolve=True)
    if cfg.data.root:
        data_cfg["root"] = str(cfg.data.root)
    split = cfg.split or data_cfg["test_split"]
    src, ref = read_parallel(data_cfg, split)
    return split, src, ref


def _run(cfg: DictConfig) -> int:
    from nmt.evaluation.evaluate import evaluate_split, write_outputs

    translator = load_translator(cfg)
    name, src, ref = load_texts(cfg, translator.config)
    if cfg.engine == "ctranslate2":
        where, suffix = Path(cfg.model_dir).resolve().parent, "_ctranslate2"
        source = {"checkpoint": translator.info["checkpoint"], "engine": "ctranslate2",
                  "model_dir": str(cfg.model_dir), "quantization": translator.info["quantization"]}
    else:
        first = checkpoint_paths(cfg)
        first = first[0] if isinstance(first, list) else first
        where, suffix = Path(first).parent, ""
        source = {"checkpoint": checkpoint_paths(cfg)}
    out_dir = Path(cfg.out_dir) if cfg.out_dir else (
        where / f"eval_{name}_beam{cfg.beam_size}{suffix}")
    ensure_writable_dir(out_dir, "out_dir")  # before translating: nothing is lost
    evaluation = evaluate_split(translator, src, ref, {**decode_settings(cfg),
                                                       "return_attention": cfg.attention == "all"})
    scores = evaluation.scores
    scores.update(**source, weights=cfg.weights, split=name)
    written = write_outputs(out_dir, evaluation, save_alignments_npz=bool(cfg.save_alignments))
    how = "sampling" if scores["sampling"] else f"beam_size={scores['beam_size']}"
    print(f"{name}: {scores['n_sentences']} sentences, {how}, "
          f"{scores['seconds']:.1f} s ({scores['sents_per_s']:.0f} sentences/s)")
    print(f"BLEU = {scores['bleu']:.2f}  ({scores['bleu_signature']})")
    print(f"chrF = {scores['chrf']:.2f}  ({scores['chrf_signature']})")
    print(f"TER = {scores['ter']:.2f}  ({scores['ter_signature']})")
    print(f"BLEU (lowercase) = {scores['bleu_lowercase']:.2f}")
    if "loss" in scores:
        print(f"reference loss = {scores['loss']:.4f} nats/subword, ppl = {scores['ppl']:.2f}")
    print(f"wrote {out_dir}/{{{','.join(written)}}}")
    return 0


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="evaluate")
def app(cfg: DictConfig) -> None:
    """The Hydra task function of ``nmt-evaluate``."""
    run_task(cfg, _run, prog="nmt-evaluate", validate_fn=_check)


def main(argv: list[str] | None = None) -> int:
    """Console entry point ``nmt-evaluate``; returns the exit status (2 on user errors)."""
    return run_app(app, argv, config_name="evaluate", prog="nmt-evaluate", validate_fn=_check)


if __name__ == "__main__":
    raise SystemExit(main())
