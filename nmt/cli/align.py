"""``nmt-align``: word alignments of given translations from a model's cross-attention.

    nmt-align checkpoint=runs/tf/checkpoints/best.pt src_file=test.fr tgt_file=test.en out=links.txt
    nmt-align checkpoint=fr_en.pt input=pairs.txt out=links.txt shift=true layer=1 head=mean
    nmt-align checkpoint=guided.pt input=pairs.txt out=links.txt threshold=0.5   # words may be left
    nmt-align checkpoint=fr_en.pt reverse_checkpoint=en_fr.pt symmetrize=grow-diag-final \\
        input=pairs.txt out=links.txt gold=gold.txt gold_one_based=true
    nmt-align checkpoint=multi.pt src_lang=de tgt_lang=fr input=pairs.txt out=links.txt \\
        reverse_checkpoint=multi.pt     # a multilingual model, both directions

The model reads each given target sentence as its decoder input (forced decoding); ``out`` gets
one Pharaoh line of word links ``i-j`` per pair (words: whitespace tokens). With ``gold`` the
last line printed is ``aer=... precision=... recall=...`` (Och and Ney 2003), also written to
``aer.json`` beside ``out``. A multilingual model reads the pairs as ``src_lang`` ->
``tgt_lang`` (default: its ``data.*_lang``) with its language tag, a piece of no word that
``attention_out`` shows. Options: configs/align.yaml (``nmt-align --help``).
"""

from __future__ import annotations

from pathlib import Path

import hydra
from omegaconf import DictConfig

from nmt.cli.common import require, run_app, run_task
from nmt.config import CONFIG_PATH, ConfigError
from nmt.data.corpus import iter_text_pair
from nmt.runtime import ensure_writable_dir, resolve_device, write_json_atomic


def _check(cfg: DictConfig) -> DictConfig:
    """The settings that depend on each other, and the ranges."""
    from nmt.extras.tools.word_alignment import check_extraction, check_symmetrization

    require(cfg, "checkpoint", "out")
    if bool(cfg.src_file) != bool(cfg.tgt_file) or bool(cfg.src_file) == bool(cfg.input):
        raise ConfigError("give either src_file=... tgt_file=... or input=FILE (lines "
                          "'source ||| target'), exactly one of the two.")
    check_extraction(cfg.method, cfg.threshold)
    check_symmetrization(cfg.symmetrize, bool(cfg.reverse_checkpoint), cfg.method,
                         cfg.threshold, cfg.shift, cfg.eos_unaligned)
    if not 0.0 < cfg.agreement_threshold <= 1.0:
        raise ConfigError(f"agreement_threshold={cfg.agreement_threshold} must lie in (0, 1].")
    if cfg.gold and cfg.gold_one_based is None:
        raise ConfigError("gold=... needs gold_one_based=true or false (the files look alike).")
    if cfg.batch_sentences < 1:
        raise ConfigError(f"batch_sentences={cfg.batch_sentences} must be >= 1.")
    return cfg


def _run(cfg: DictConfig) -> None:
    from nmt.data.links import write_links
    from nmt.extras.tools import word_alignment as wa
    from nmt.inference.translator import direction_tags, load_for_inference

    pairs = (wa.read_pair_file(cfg.input) if cfg.input else
             list(iter_text_pair(cfg.src_file, cfg.tgt_file)))
    out = Path(cfg.out)
    if out.is_dir():
        raise ConfigError(f"out={out} is a directory: give the links file, e.g. "
                          f"out={out / 'links.txt'}.")
    ensure_writable_dir(out.parent, "out")
    if cfg.attention_out:
        ensure_writable_dir(Path(cfg.attention_out).parent, "attention_out")
    gold = None
    if cfg.gold:  # read before the model runs: a bad gold file fails at once
        gold = wa.read_gold(cfg.gold, one_based=bool(cfg.gold_one_based),
                         src_lengths=[len(s.split()) for s, _ in pairs],
                         tgt_lengths=[len(t.split()) for _, t in pairs])
    device = resolve_device(cfg.device)
    model, tokenizer, train_cfg = load_for_inference(cfg.checkpoint, device)
    src = cfg.src_lang or train_cfg.data.src_lang
    tgt = cfg.tgt_lang or train_cfg.data.tgt_lang
    tags = direction_tags(train_cfg, tokenizer, src, tgt)
    reverse = None
    if cfg.reverse_checkpoint:
        rev_model, rev_tokenizer, rev_cfg = load_for_inference(cfg.reverse_checkpoint, device)
        if rev_cfg.data.get("pairs") is None and \
                (rev_cfg.data.src_lang, rev_cfg.data.tgt_lang) != (tgt, src):
            raise ConfigError(f"reverse_checkpoint={cfg.reverse_checkpoint} translates "
                              f"{rev_cfg.data.src_lang}->{rev_cfg.data.tgt_lang}: it must "
                              f"translate {tgt}->{src}, the reverse of checkpoint.")
        reverse = (rev_model, rev_tokenizer, direction_tags(rev_cfg, rev_tokenizer, tgt, src))
    items = wa.force_align(model, tokenizer, pairs, cfg.batch_sentences, device, tags)
    settings = {key: cfg[key] for key in ("method", "threshold", "shift", "layer", "head",
                                          "eos_unaligned")}
    symmetrization = (cfg.symmetrize or wa.DEFAULT_SYMMETRIZATION) if reverse else None
    links = wa.align_words(model, tokenizer, pairs, **settings, reverse=reverse,
                        symmetrization=symmetrization, batch_sentences=cfg.batch_sentences,
                        device=device, items=items, agreement_threshold=cfg.agreement_threshold)
    write_links(out, links, one_based=cfg.one_based)
    print(f"aligned {len(pairs)} pairs: {sum(map(len, links))} links "
          f"({'symmetrized ' + str(symmetrization) if reverse else 'one direction'}) -> {out}")
    if cfg.attention_out:
        _save_attention(cfg, items)
    if gold is not None:
        scores = wa.alignment_scores(links, *gold)
        write_json_atomic(out.parent / "aer.json", {
            **scores, "pairs": len(pairs), "checkpoint": str(cfg.checkpoint),
            "reverse_checkpoint": cfg.reverse_checkpoint,
            "symmetrize": symmetrization, "gold": str(cfg.gold), **settings})
        print(f"aer={scores['aer']:.4f} precision={scores['precision']:.4f} "
              f"recall={scores['recall']:.4f} links={scores['links']}")


def _save_attention(cfg: DictConfig, items) -> None:
    """Write the forced cross-attention of every pair to ``attention_out`` (alignments npz)."""
    from nmt.evaluation.alignments import save_alignments
    from nmt.extras.tools.word_alignment import item_attention

    save_alignments(cfg.attention_out,
                    [item_attention(item, cfg.layer, cfg.head) for item in items],
                    [[*item.src_pieces, "</s>"] for item in items],
                    [[*item.tgt_pieces, "</s>"] for item in items],
                    [{"cross": item.cross} for item in items])
    print(f"wrote the cross-attention of {len(items)} pairs to {cfg.attention_out}")


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="align")
def app(cfg: DictConfig) -> None:
    run_task(cfg, _run, prog="nmt-align", validate_fn=_check)


def main(argv: list[str] | None = None) -> int:
    """Console entry point ``nmt-align``; returns the exit status."""
    return run_app(app, argv, config_name="align", prog="nmt-align", validate_fn=_check)


if __name__ == "__main__":
    raise SystemExit(main())
