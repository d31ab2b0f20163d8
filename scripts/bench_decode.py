"""Decoding speed: greedy and beam-5 translation of a whole split.

    python scripts/bench_decode.py checkpoint=runs/tf/checkpoints/best.pt split=test_2016_flickr
    python scripts/bench_decode.py random=transformer        # untrained reference-size model

Arguments are the overrides of configs/evaluate.yaml (checkpoint, split, data.root, device,
length_penalty, max_len_a, max_len_b, batch_sentences) plus:

* ``random=transformer|rnn``: instead of a checkpoint, a randomly initialised model of the
  reference config (configs/model/*.yaml) with the tokenizer that ``nmt-train`` would use
  for the default data config (``nmt.data.prepare_data``: the same cache entry, trained on
  Multi30k train if not cached). Untrained models rarely emit EOS early, so
  their outputs run to the maximum length: a pessimistic measurement.
* ``repeats=N`` (default 1): run each search N times, report the median time.
* ``threads=N``: torch.set_num_threads(N) (default: torch's choice).

Times and target-token counts are those :func:`nmt.evaluation.evaluate.evaluate_split`
reports (``seconds``: tokenization, search and detokenization; not model loading nor BLEU;
``n_tgt_tokens``: output subwords incl. EOS). The last line
is ``key=value`` pairs: greedy_sents_per_s, greedy_seconds, beam5_sents_per_s,
beam5_seconds, beam5_tgt_tokens_per_s, beam5_mean_len, ... (BLEU too, for reference).
"""

from __future__ import annotations

import statistics
import sys

import torch
from omegaconf import OmegaConf

from nmt.cli.common import check_search, exit_on_user_error, search_settings
from nmt.config import ConfigError, compose_config
from nmt.runtime import resolve_device


def _pop(argv: list[str], key: str, default: str | None) -> str | None:
    for arg in list(argv):
        if arg.startswith(f"{key}="):
            argv.remove(arg)
            return arg.split("=", 1)[1]
    return default


def random_model(name: str, device):
    """Untrained reference-size model + the tokenizer nmt-train builds for the default data config."""
    from nmt.config import compose_config
    from nmt.data import prepare_data
    from nmt.models import build_model

    cfg = compose_config([f"model={name}"])
    tokenizer = prepare_data(cfg.data).tokenizer
    torch.manual_seed(cfg.train.seed)
    model = build_model(cfg.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)
    return model.to(device).eval(), tokenizer, cfg


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    random_name = _pop(argv, "random", None)
    repeats = int(_pop(argv, "repeats", "1"))
    threads = _pop(argv, "threads", None)
    if random_name and not any(a.startswith("checkpoint=") for a in argv):
        argv.append(f"checkpoint=random_{random_name}")
    if threads:
        torch.set_num_threads(int(threads))

    def check(cfg):
        if OmegaConf.is_missing(cfg, "checkpoint"):
            raise ConfigError("give checkpoint=PATH or random=transformer|rnn.")
        return check_search(cfg)

    def run(cfg) -> int:
        from nmt.cli.evaluate import load_texts
        from nmt.evaluation.evaluate import evaluate_split
        from nmt.inference.translator import Translator

        device = resolve_device(cfg.device)
        if random_name:
            translator = Translator(*random_model(random_name, device), device=device)
        else:
            translator = Translator.from_checkpoint(cfg.checkpoint, device)
        model = translator.model
        name, src, ref = load_texts(cfg, translator.config)
        print(f"model: {random_name or cfg.checkpoint} ({model.num_parameters():,} parameters), "
              f"split {name}: {len(src)} sentences, device {device}, "
              f"{torch.get_num_threads()} threads", flush=True)
        fields: dict[str, object] = {"n_sentences": len(src)}
        for label, beam in (("greedy", 1), ("beam5", 5)):
            search = dict(search_settings(cfg), beam_size=beam, n_best=1)
            runs = []
            for _ in range(repeats):
                scores = evaluate_split(translator, src, ref, search,
                                        score_references=False).scores
                runs.append(scores["seconds"])
            seconds = statistics.median(runs)
            n_tok = scores["n_tgt_tokens"]  # deterministic search: the same in every run
            fields.update({
                f"{label}_seconds": round(seconds, 2),
                f"{label}_sents_per_s": round(len(src) / seconds, 1),
                f"{label}_tgt_tokens_per_s": round(n_tok / seconds, 1),
                f"{label}_mean_len": round(n_tok / max(len(src), 1), 1),
                f"{label}_bleu": round(scores["bleu"], 2),
            })
            print(f"{label}: {seconds:.2f} s (runs: {', '.join(f'{r:.2f}' for r in runs)}), "
                  f"{len(src) / seconds:.1f} sentences/s, {n_tok / seconds:.0f} target tokens/s, "
                  f"mean output length {n_tok / max(len(src), 1):.1f} subwords incl. EOS", flush=True)
        print(" ".join(f"{k}={v}" for k, v in fields.items()))
        return 0

    return exit_on_user_error("bench_decode.py", lambda: run(
        compose_config(argv, config_name="evaluate", validate_fn=check)))


if __name__ == "__main__":
    raise SystemExit(main())
