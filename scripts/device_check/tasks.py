"""Small steps of the device check, run as processes of their own:

    python scripts/device_check/tasks.py data OVERRIDES...
        the tokenizer and token caches of the data section, once for every later step
    python scripts/device_check/tasks.py evaluate CHECKPOINT RUN_DIR OVERRIDES...
        beam-5 BLEU of val and test_2016_flickr (RUN_DIR/eval_<split>/scores.json), one process
    python scripts/device_check/tasks.py bench ARGS...
        scripts/bench_model.py ARGS, then ``inductor: cudagraph_skips=N``: the CUDA-graph
        captures Inductor skipped in its process (it skips one without an error;
        bench_model.py's ``cuda_graphs`` says only that it ran each batch twice)
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path


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


def compile_counters() -> dict[str, float]:
    """This process's CUDA-graph captures that Inductor skipped, Dynamo's graphs and the
    seconds spent compiling them."""
    from torch._dynamo import utils as dynamo_utils

    from nmt.runtime import compile_stats

    return {"cudagraph_skips": int(dynamo_utils.counters["inductor"]["cudagraph_skips"]),
            **compile_stats()}


def bench(args: list[str]) -> int:
    """bench_model.py ``args`` in this process; its exit status. Prints the skipped captures."""
    script = Path(__file__).resolve().parents[1] / "bench_model.py"
    sys.argv = [str(script), *args]
    try:
        runpy.run_path(str(script), run_name="__main__")
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else int(done.code is not None)
    print(f"inductor: cudagraph_skips={compile_counters()['cudagraph_skips']}", flush=True)
    return code


if __name__ == "__main__":
    task, *args = sys.argv[1:]
    if task == "bench":
        sys.exit(bench(args))
    sys.exit(data(args) if task == "data" else evaluate(args[0], args[1], args[2:]))
