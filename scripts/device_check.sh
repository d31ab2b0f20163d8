#!/usr/bin/env bash
# One GPU check of issue 38, under 8 minutes on one H100 (each step has its own timeout, all
# of them one deadline), from a fresh install with the machine's own CUDA torch:
#   1. base    Multi30k de->en, today's recipe (model=transformer), train.max_minutes=2;
#              then val and test BLEU with beam 5 (the test decoding's seconds are step 4)
#   2. static  the same with 8,192-token batches, train.shape_buckets=8 and train.compile=true
#              (CUDA graphs); val and test BLEU with beam 5
#   3. bench   model=transformer_base, 24,576-token steps, bf16: tokens/s and MFU, eager and
#              compiled (scripts/bench_model.py --compile, alternating step by step)
#   4. decode  beam-5 decoding of test_2016_flickr (seconds, sentences/s), from step 1
#   5. ddp     torchrun --nproc_per_node=1: nmt-train for 40 steps, and an NCCL all_reduce
#   +  syncs   tests/test_throughput.py's host-sync test on the GPU (torch.cuda.set_sync_debug_mode)
#
#   bash scripts/device_check.sh [--dry-run] [OUT_DIR]      (OUT_DIR: default $OUT, else ./device_check)
#
# Writes OUT_DIR/{device_check.log,results.json} and {base,static,ddp}/{train.log,summary.json}
# (runs, checkpoints and caches stay in $DEVICE_CHECK_WORK, default a fresh temporary
# directory); prints one `device_check key=value ...` line last. --dry-run runs every step on
# CPU with a tiny model and a few steps ($NMT_DATA_ROOT: a Multi30k-like corpus with train,
# val and test_2016_flickr; DEVICE_CHECK_DRY_COMPILE=1 also compiles). Exit status: 0 if every
# step passed. Extra Hydra overrides for every training and the bench: $DEVICE_CHECK_OVERRIDES;
# a subset of the steps (a rerun): DEVICE_CHECK_STEPS=bench,static (default all six).
set -u -o pipefail

DRY=0
OUT_DIR="${OUT:-device_check}"
for arg in "$@"; do
  case "$arg" in
    --dry-run) DRY=1 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) OUT_DIR="$arg" ;;
  esac
done
REPO="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-python3}"
WORK="${DEVICE_CHECK_WORK:-$(mktemp -d)}"
mkdir -p "$OUT_DIR" "$WORK/logs"
OUT_DIR="$(cd "$OUT_DIR" && pwd)"
LOG="$OUT_DIR/device_check.log"
: > "$LOG"
export NMT_CACHE_DIR="${NMT_CACHE_DIR:-$WORK/cache}" PYTHONUNBUFFERED=1 CI=1
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
cd "$REPO" || exit 2

say() { echo "[device_check $(date +%T) +${SECONDS}s] $*" | tee -a "$LOG"; }

FAILED=()
STEPS=",${DEVICE_CHECK_STEPS:-base,bench,static,ddp,nccl,syncs},"
# step NAME LIMIT_S CMD...: run CMD under `timeout`, at most LIMIT_S and never past the deadline.
step() {
  local name=$1 limit=$2; shift 2
  if [[ "$STEPS" != *",${name%_eval},"* ]]; then return 1; fi
  local left=$((DEADLINE - SECONDS))
  local t=$((limit < left ? limit : left))
  if ((t < 15)); then
    say "$name: skipped (${left}s left of the budget)"; FAILED+=("$name:skipped"); return 1
  fi
  local start=$SECONDS rc
  timeout --kill-after=10 "$t" "$@" > "$WORK/logs/$name.log" 2>&1
  rc=$?
  { echo "----- $name: $*"; cat "$WORK/logs/$name.log"; } >> "$LOG"
  say "$name: rc=$rc in $((SECONDS - start))s (limit ${t}s)"
  if ((rc != 0)); then
    FAILED+=("$name:rc$rc")
    tail -n 15 "$WORK/logs/$name.log" | sed "s/^/  $name| /"
  fi
  return "$rc"
}

read -r -a EXTRA <<< "${DEVICE_CHECK_OVERRIDES:-}"
if ((DRY)); then
  DEVICE=cpu; BUDGET=600; BENCH_DEVICE=(--device cpu --precision fp32 --warmup 1 --steps 2)
  TINY=(model.d_model=32 model.heads=2 model.ff_dim=64 model.encoder_layers=1
        model.decoder_layers=1 data.max_train_pairs=1000 data.tokenizer.vocab_size=500)
  TRAIN=("${TINY[@]}" train.max_steps=4 train.eval_every_steps=4 train.log_every_steps=2
         train.precision=fp32 search.max_len_a=1.0 search.max_len_b=5)
  STATIC=(train.batch_tokens=1024 train.shape_buckets=4)
  BENCH=(model=transformer_base "${TINY[@]}" train.batch_tokens=512 train.shape_buckets=4)
  # Beam search of an untrained model runs to max_len: 50 sentences of each split will do.
  mkdir -p "$WORK/evaldata"
  for f in "${NMT_DATA_ROOT:-../shared/data/multi30k}"/{val,test_2016_flickr}.{de,en}; do
    head -n 50 "$f" > "$WORK/evaldata/$(basename "$f")"
  done
  EVAL=(max_len_a=1.0 max_len_b=5 "data.root=$WORK/evaldata")
  DDP=("${TRAIN[@]}" train.max_steps=3 train.eval_every_steps=3)
  COMPILE=false; BENCH_COMPILE=()
  if [[ "${DEVICE_CHECK_DRY_COMPILE:-0}" == 1 ]]; then COMPILE=true; BENCH_COMPILE=(--compile); fi
  export GLOO_SOCKET_IFNAME="${GLOO_SOCKET_IFNAME:-lo}" DC_BACKEND=gloo
else
  DEVICE=cuda; BUDGET=470; BENCH_DEVICE=(--device cuda --precision bf16 --warmup 3 --steps 20)
  TRAIN=(train.max_minutes=2)
  STATIC=(train.batch_tokens=8192 train.shape_buckets=8)
  BENCH=(model=transformer_base train.batch_tokens=24576 train.shape_buckets=8)
  EVAL=()
  DDP=(train.max_steps=40 train.eval_every_steps=40)
  COMPILE=true; BENCH_COMPILE=(--compile)
  export DC_BACKEND=nccl
fi
DEADLINE=$((SECONDS + BUDGET))
say "repo $REPO, out $OUT_DIR, work $WORK, dry_run=$DRY, budget ${BUDGET}s"
"$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__,
"cuda", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available()
else "-")' 2>&1 | tee -a "$LOG"
if ((!DRY)) && ! "$PY" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())'; then
  say "no CUDA device: run with --dry-run on a CPU"; FAILED+=("cuda:missing")
fi

# evaluate RUN: beam-5 BLEU of val and test of RUN's best.pt, in one process.
evaluate() {
  local run=$1
  step "${run}_eval" 90 "$PY" -c '
import sys
from nmt.cli.evaluate import main
ckpt, out, *extra = sys.argv[1:]
sys.exit(max(main([f"checkpoint={ckpt}", f"split={s}", "beam_size=5", f"out_dir={out}/eval_{s}",
                   "save_alignments=false", *extra]) for s in ("val", "test_2016_flickr")))
' "$WORK/$run/checkpoints/best.pt" "$WORK/$run" "device=$DEVICE" "${EVAL[@]}"
}

# keep RUN: its train.log and summary.json under OUT_DIR/RUN.
keep() {
  mkdir -p "$OUT_DIR/$1"
  cp "$WORK/$1/train.log" "$WORK/$1/summary.json" "$OUT_DIR/$1/" 2>/dev/null || true
}

if ((${#FAILED[@]} == 0)); then
  step base 200 "$PY" -m nmt.cli.train "run_dir=$WORK/base" "device=$DEVICE" "${TRAIN[@]}" \
    "${EXTRA[@]}" && evaluate base
  keep base
  step bench 170 "$PY" scripts/bench_model.py "${BENCH[@]}" "${BENCH_DEVICE[@]}" \
    "${BENCH_COMPILE[@]}" "${EXTRA[@]}"
  step static 220 "$PY" -m nmt.cli.train "run_dir=$WORK/static" "device=$DEVICE" "${TRAIN[@]}" \
    "${STATIC[@]}" "train.compile=$COMPILE" "${EXTRA[@]}" && evaluate static
  keep static
  step ddp 90 "$PY" -m torch.distributed.run --standalone --nproc_per_node=1 -m nmt.cli.train \
    "run_dir=$WORK/ddp" "device=$DEVICE" "${TRAIN[@]}" "${DDP[@]}" "${EXTRA[@]}"
  keep ddp
  cat > "$WORK/nccl_check.py" <<'EOF'
import os

import torch
import torch.distributed as dist

backend = os.environ.get("DC_BACKEND", "nccl")
device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if backend == "nccl" else "cpu"
if backend == "nccl":
    torch.cuda.set_device(device)
dist.init_process_group(backend)
x = torch.full((1024,), float(dist.get_rank() + 1), device=device)
dist.all_reduce(x)
print(f"{backend} all_reduce ok: world {dist.get_world_size()}, sum {x[0].item():g}")
dist.destroy_process_group()
EOF
  step nccl 60 "$PY" -m torch.distributed.run --standalone --nproc_per_node=1 "$WORK/nccl_check.py"
  step syncs 90 "$PY" -m pytest -q -n 0 -p no:cacheprovider --basetemp="$WORK/pytest" \
    tests/test_throughput.py -k host_sync
fi

# The figures: OUT_DIR/results.json and the key=value line.
FAILED_LIST="$(IFS=,; echo "${FAILED[*]:-}")"
"$PY" - "$WORK" "$OUT_DIR" "$FAILED_LIST" "$SECONDS" "$DRY" <<'EOF' | tee -a "$LOG"
import json
import re
import sys
from pathlib import Path

work, out, failed, seconds, dry = Path(sys.argv[1]), Path(sys.argv[2]), *sys.argv[3:]


def load(path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}


def last_kv(path):   # the key=value line a script printed last
    try:
        lines = [x for x in Path(path).read_text().splitlines() if "=" in x and " " in x]
    except OSError:
        return {}
    return dict(kv.split("=", 1) for kv in lines[-1].split() if "=" in kv) if lines else {}


results, line = {}, {"dry_run": dry}
for run in ("base", "static", "ddp"):
    summary = load(work / run / "summary.json")
    results[run] = {"summary": {k: v for k, v in summary.items() if k != "segments"}}
    line[f"{run}_steps"] = summary.get("steps")
    line[f"{run}_tokens_per_s"] = summary.get("train_tokens_per_s")
    line[f"{run}_mfu"] = summary.get("mfu")
    line[f"{run}_val_bleu_greedy"] = summary.get("best_bleu")
    if run == "base":
        line["gpu"] = summary.get("machine", {}).get("gpu", "-")
        line["torch"] = summary.get("machine", {}).get("torch")
    if run == "static":
        line["static_graphs"] = summary.get("compile", {}).get("graphs")
        line["static_compile_s"] = summary.get("compile", {}).get("compile_s")
        log = work / run / "train.log"
        pads = [x for x in log.read_text().splitlines() if "positions padding" in x] \
            if log.is_file() else []
        line["static_pad_pct"] = pads[-1].split(", ")[-1].split("%")[0] if pads else None
    for split, key in (("val", "val"), ("test_2016_flickr", "test")):
        scores = load(work / run / f"eval_{split}" / "scores.json")
        results[run][f"{key}_beam5"] = scores
        if run != "ddp":
            line[f"{run}_{key}_bleu"] = scores.get("bleu")
        if run == "base" and key == "test":
            line["decode_test_beam5_s"] = scores.get("seconds")
            line["decode_test_sents_per_s"] = scores.get("sents_per_s")
bench = last_kv(work / "logs" / "bench.log")
results["bench"] = bench
for key in ("eager_tgt_tokens_per_s", "compiled_tgt_tokens_per_s", "eager_mfu", "compiled_mfu",
            "compile_speedup", "tgt_tokens_per_s", "mfu", "pad_share", "compile_s", "params",
            "peak_gflops"):
    line[f"bench_{key}"] = bench.get(key)
nccl, syncs = work / "logs" / "nccl.log", work / "logs" / "syncs.log"
line["nccl"] = None if not nccl.is_file() else \
    "ok" if "all_reduce ok" in nccl.read_text() else "fail"
line["syncs"] = None if not syncs.is_file() else \
    "ok" if re.search(r"\b1 passed", syncs.read_text()) else "fail"
line["failed"] = failed or "none"
line["seconds"] = seconds
results["line"] = line
(out / "results.json").write_text(json.dumps(results, indent=2) + "\n")


def show(v):   # 41.53, 0.3142, 76874: short enough to read on one line
    if isinstance(v, str) and re.fullmatch(r"-?\d+\.\d*(e-?\d+)?", v):
        v = float(v)
    if isinstance(v, float):
        v = round(v) if abs(v) >= 1000 else float(f"{v:.4g}")
    return str(v).replace(" ", "_")


print("device_check " + " ".join(f"{k}={show(v)}" for k, v in line.items()))
EOF
[[ -z "$FAILED_LIST" ]]
