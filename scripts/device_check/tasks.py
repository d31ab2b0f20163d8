"""Two small steps of the device check, run as processes of their own:

    python scripts/device_check/tasks.py data OVERRIDES...
        the tokenizer and token caches of the data section, once for every later step
    python scripts/device_check/tasks.py evaluate CHECKPOINT RUN_DIR OVERRIDES...
        beam-5 BLEU of val and test_2016_flickr (RUN_DIR/eval_<split>/scores.json), one process
"""

from __future__ import annotations

import sys


def data(overrides: list[str]) -> int:
    """Prepare (or find in the cache) the data section of ``overrides``; exit status 0."""
    from nmt.config import compose_config
    from nmt.data.pipeline import prepare_data

    prepared = prepare_data(compose_config(overrides).data)
    print(f"data: {len(prepared.train.src_lens)} training pairs, vocabulary "
          f"{prepared.tokenizer.src_vocab_size}")
    return 0


def evaluate(checkpoint: str, run_dir: str, overrides: list[str]) -> int:
    """nmt-evaluate of ``checkpoint`` on both splits; the larger exit status."""
    from nmt.cli.evaluate import main

    return max(main([f"checkpoint={checkpoint}", f"split={split}", "beam_size=5",
                     f"out_dir={run_dir}/eval_{split}", "save_alignments=false", *overrides])
               for split in ("val", "test_2016_flickr"))


if __name__ == "__main__":
    task, *args = sys.argv[1:]
    sys.exit(data(args) if task == "data" else evaluate(args[0], args[1], args[2:]))
