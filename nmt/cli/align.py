"""``nmt-align``: word alignments of given translations from a model's cross-attention.

    nmt-align checkpoint=runs/tf/checkpoints/best.pt src_file=test.fr tgt_file=test.en out=links.txt
    nmt-align checkpoint=fr_en.pt input=pairs.txt out=links.txt shift=true layer=1 head=mean
    nmt-align checkpoint=fr_en.pt reverse_checkpoint=en_fr.pt symmetrize=grow-diag-final \\
        input=pairs.txt out=links.txt gold=gold.txt gold_one_based=true

The model reads each target sentence as its decoder input (forced decoding,
:func:`nmt.extras.forced_alignment.align_words`); ``out`` gets one Pharaoh line of word
links ``i-j`` per pair (words = whitespace tokens of the given text). With ``gold``, the
last line printed is ``aer=... precision=... recall=... links=...`` and ``aer.json`` is
written beside ``out`` (Och and Ney 2003). ``attention_out=FILE.npz`` also stores the
pairs' cross-attention (every layer and head; the stored alignment is the ``layer`` /
``head`` choice) in the format of :mod:`nmt.evaluation.alignments`, for ``nmt-plot``
(``gold=...`` draws the gold links on it). Options: configs/align.yaml (``nmt-align --help``).
"""

from __future__ import annotations

import json
from pathlib import Path

import hydra
from omegaconf import DictConfig

from nmt.cli.common import ensure_writable_dir, require, run_app, run_task
from nmt.config import CONFIG_PATH, ConfigError
from nmt.runtime import resolve_device


def _check(cfg: DictConfig) -> DictConfig:
    """Required keys and the choices that need no file: one paragraph per problem.

    Raises:
        ConfigError: naming the key and what it accepts.
    """
    from nmt.extras.word_alignment import SYMMETRIZATIONS

    require(cfg, "checkpoint", "out")
    if bool(cfg.src_file) != bool(cfg.tgt_file):
        raise ConfigError("src_file and tgt_file go together: give both (or input=FILE of "
                          "'source ||| target' lines instead).")
    if bool(cfg.src_file) == bool(cfg.input):
        raise ConfigError("give either src_file=... tgt_file=... or input=FILE (lines "
                          "'source ||| target'), exactly one of the two.")
    if cfg.method == "threshold":
        if cfg.threshold is None or not 0.0 < cfg.threshold <= 1.0:
            raise ConfigError(f"method=threshold needs threshold=W with W in (0, 1] (links of "
                              f"weight >= W), got threshold={cfg.threshold}.")
    elif cfg.method == "argmax":
        if cfg.threshold is not None:
            raise ConfigError(f"threshold={cfg.threshold} is only used by method=threshold; "
                              "drop it or set method=threshold.")
    else:
        raise ConfigError(f"method={cfg.method!r} is not one of argmax, threshold.")
    for key in ("layer", "head"):
        value = cfg[key]
        if value != "mean" and (isinstance(value, bool) or not isinstance(value, int)):
            raise ConfigError(f"{key}={value!r} must be an index (0-based, negative counts from "
                              f"the end) or {key}=mean.")
    if cfg.symmetrize not in SYMMETRIZATIONS:
        raise ConfigError(f"symmetrize={cfg.symmetrize!r} is not one of {', '.join(SYMMETRIZATIONS)}.")
    if cfg.gold and cfg.gold_one_based is None:
        raise ConfigError("gold=... needs gold_one_based=true or false: 0- and 1-based gold files "
                          "look alike, and a wrong guess shifts every link by one.")
    if cfg.batch_sentences < 1:
        raise ConfigError(f"batch_sentences={cfg.batch_sentences} must be >= 1.")
    return cfg


def _languages(cfg: DictConfig) -> tuple[str, str]:
    return str(cfg.data.src_lang), str(cfg.data.tgt_lang)


def _run(cfg: DictConfig) -> int:
    from nmt.data.corpus import read_text_pair
    from nmt.extras.forced_alignment import align_words, force_align, read_pair_file
    from nmt.extras.word_alignment import (
        AlignmentFormatError,
        alignment_scores,
        read_gold,
        write_links,
    )
    from nmt.inference.loader import load_for_inference

    if cfg.input:
        pairs = read_pair_file(cfg.input)
    else:
        pairs = list(zip(*read_text_pair(cfg.src_file, cfg.tgt_file), strict=True))
    out = Path(cfg.out)
    if out.is_dir():
        raise ConfigError(f"out={out} is a directory: give the links file, e.g. out={out / 'links.txt'}.")
    ensure_writable_dir(out.parent, "out")
    if cfg.attention_out:
        ensure_writable_dir(Path(cfg.attention_out).parent, "attention_out")
    gold = None
    if cfg.gold:  # read before the model runs: a bad gold file fails at once
        try:
            gold = read_gold(cfg.gold, one_based=bool(cfg.gold_one_based),
                             src_lengths=[len(s.split()) for s, _ in pairs],
                             tgt_lengths=[len(t.split()) for _, t in pairs])
        except AlignmentFormatError as err:
            raise ConfigError(f"gold: {err}") from None
    device = resolve_device(cfg.device)
    model, tokenizer, train_cfg = load_for_inference(cfg.checkpoint, device)
    reverse = None
    if cfg.reverse_checkpoint:
        rev_model, rev_tokenizer, rev_cfg = load_for_inference(cfg.reverse_checkpoint, device)
        (src, tgt), (rev_src, rev_tgt) = _languages(train_cfg), _languages(rev_cfg)
        if (rev_src, rev_tgt) != (tgt, src):
            raise ConfigError(f"reverse_checkpoint={cfg.reverse_checkpoint} translates {rev_src}->"
                              f"{rev_tgt}, but checkpoint translates {src}->{tgt}: the reverse "
                              f"model must translate {tgt}->{src}.")
        reverse = (rev_model, rev_tokenizer)
    items = force_align(model, tokenizer, pairs, cfg.batch_sentences, device)
    links = align_words(model, tokenizer, pairs, method=cfg.method, threshold=cfg.threshold,
                        shift=cfg.shift, layer=cfg.layer, head=cfg.head, reverse=reverse,
                        symmetrization=cfg.symmetrize, batch_sentences=cfg.batch_sentences,
                        device=device, items=items)
    write_links(out, links, one_based=cfg.one_based)
    print(f"aligned {len(pairs)} pairs: {sum(map(len, links))} links "
          f"({'symmetrized ' + cfg.symmetrize if reverse else 'one direction'}) -> {out}")
    if cfg.attention_out:
        _save_attention(cfg, items)
    if gold is not None:
        scores = alignment_scores(links, *gold)
        settings = ("method", "threshold", "shift", "layer", "head")
        report = {**scores, "pairs": len(pairs), "checkpoint": str(cfg.checkpoint),
                  "reverse_checkpoint": cfg.reverse_checkpoint,
                  "symmetrize": cfg.symmetrize if reverse else None, "gold": str(cfg.gold),
                  **{key: cfg[key] for key in settings}}
        (out.parent / "aer.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        print(f"aer={scores['aer']:.4f} precision={scores['precision']:.4f} "
              f"recall={scores['recall']:.4f} links={scores['links']}")
    return 0


def _save_attention(cfg: DictConfig, items) -> None:
    """Write the forced cross-attention of every pair to ``attention_out`` (alignments npz)."""
    from nmt.evaluation.alignments import save_alignments
    from nmt.extras.forced_alignment import select_attention

    path = Path(cfg.attention_out)
    try:
        save_alignments(path, [select_attention(item.cross, cfg.layer, cfg.head) for item in items],
                        [[*item.src_pieces, "</s>"] for item in items],
                        [[*item.tgt_pieces, "</s>"] for item in items],
                        [{"cross": item.cross} for item in items])
    except OSError as err:
        raise ConfigError(f"attention_out={path}: cannot write it ({err.strerror or err}); choose "
                          "a writable path with attention_out=FILE.npz.") from None
    print(f"wrote the cross-attention of {len(items)} pairs to {path}")


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="align")
def app(cfg: DictConfig) -> None:
    """The Hydra task function of ``nmt-align``."""
    run_task(cfg, _run, prog="nmt-align", validate_fn=_check)


def main(argv: list[str] | None = None) -> int:
    """Console entry point ``nmt-align``; returns the exit status (2 on user errors)."""
    return run_app(app, argv, config_name="align", prog="nmt-align", validate_fn=_check)


if __name__ == "__main__":
    raise SystemExit(main())
