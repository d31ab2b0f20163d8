#!/usr/bin/env bash
# The GPU check (issues 38 and 45): one command on a lent GPU machine, from a fresh start with
# that machine's own CUDA torch, within $DEVICE_CHECK_BUDGET seconds (default 540; a device
# command may run 600). First, on the CPU machine: `bash scripts/device_prep.sh` (the wheels and
# data that travel, and the device call to make; docs/speed.md). The steps, cheap and decisive first:
#   install    the carried wheels (device_wheels/: Hydra, OmegaConf, ANTLR) into a private folder
#              on PYTHONPATH, `pip install --no-index --no-deps`: torch is never touched (exit 4)
#   preflight  imports and versions (exit 5), torch.cuda.is_available() (exit 6), the Multi30k
#              files in $NMT_DATA_ROOT, default data/multi30k (exit 7)
#   nccl       all_reduce between 2 ranks sharing the one GPU, NCCL; where NCCL refuses two ranks
#              on one device: NCCL with 1 rank, and gloo on CUDA tensors with 2
#   syncs      tests/test_throughput.py's host-sync test on the GPU (torch.cuda.set_sync_debug_mode)
#   data       the tokenizer and token caches of Multi30k de-en, once for every later step
#   ddp        nmt-train for 40 steps with WORLD_SIZE=2: two ranks on the one GPU, the process
#              group on the backend the nccl step found (DDP's gradient all_reduce included)
#   base       Multi30k de->en, today's recipe (model=transformer), train.max_minutes = the
#              step's limit less 40 s; base_eval: val and test BLEU with beam 5 (test seconds)
#   bench      model=transformer_base, 24,576-token steps, bf16: tokens/s and MFU, eager (printed
#              before anything compiles) and compiled (scripts/bench_model.py --compile)
#   static     base with 8,192-token batches, train.shape_buckets=8 and train.compile=true (CUDA
#              graphs), its limit less 60 s; static_eval: val and test BLEU with beam 5
#
#   bash scripts/device_check.sh [--dry-run] [--plan] [OUT_DIR]   (OUT_DIR: $OUT, else ./device_check)
#
# Each step has a limit in seconds (--plan prints them and exits; DEVICE_CHECK_LIMITS=bench=120,...
# sets some). The steps are planned in order while their limits fit in the budget less 5 s for
# the report, so the limits never add up to more than the budget; a step that does not fit is
# "skipped for time", which is not "failed". Writes at most 8 files: OUT_DIR/{device_check.log,
# results.json} and {base,static,ddp}/{train.log,summary.json} (runs and caches stay in
# $DEVICE_CHECK_WORK, default a new temporary folder; results.json after every step), and prints
# one `device_check key=value ...` line last: the figures, each step's seconds (<step>_s: seconds,
# `skipped` for time, `-` not run), failed= and skipped=. Exit status: 0 every step passed, 1 a
# step failed, 2 a usage error, 3 none failed but some were skipped for time, 4-7 the preflight's.
# --dry-run: every step on the CPU with a tiny model and a few steps, gloo, limits and budget
# doubled (CI runs it; DEVICE_CHECK_DRY_COMPILE=1 also compiles). A subset (a rerun):
# DEVICE_CHECK_STEPS=bench,static; Hydra overrides for every training and the bench:
# DEVICE_CHECK_OVERRIDES; other wheels: DEVICE_CHECK_WHEELS=DIR.
set -u -o pipefail

DRY=0
PLAN=0
OUT_DIR="${OUT:-device_check}"
usage_error() { echo "device_check.sh: error: $*" >&2; exit 2; }
for arg in "$@"; do
  case "$arg" in
    --dry-run) DRY=1 ;;
    --plan) PLAN=1 ;;
    -h|--help) sed -n '2,37p' "$0"; exit 0 ;;
    -*) usage_error "unknown option $arg (see --help)" ;;
    *) OUT_DIR="$arg" ;;
  esac
done
REPO="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-python3}"

# The steps in the order they run, and their limits (seconds) on the GPU: 535 of the 540.
ORDER=(install preflight nccl syncs data ddp base base_eval bench static static_eval)
declare -A LIMIT=([install]=10 [preflight]=45 [nccl]=45 [syncs]=40 [data]=30 [ddp]=60 [base]=95
                  [base_eval]=30 [bench]=65 [static]=90 [static_eval]=25)
# A training's start-up, data, validations and saving: its limit less this is train.max_minutes.
declare -A OVERHEAD=([base]=40 [static]=60)
RESERVE=5    # the report, and the last step's grace between SIGTERM and SIGKILL
SCALE=$((DRY ? 2 : 1))
for s in "${ORDER[@]}"; do LIMIT[$s]=$((LIMIT[$s] * SCALE)); done
for s in "${!OVERHEAD[@]}"; do OVERHEAD[$s]=$((OVERHEAD[$s] * SCALE)); done
BUDGET="${DEVICE_CHECK_BUDGET:-$((540 * SCALE))}"
[[ "$BUDGET" =~ ^[0-9]+$ ]] || usage_error "DEVICE_CHECK_BUDGET=$BUDGET: give whole seconds"
IFS=, read -r -a KVS <<< "${DEVICE_CHECK_LIMITS:-}"
for kv in "${KVS[@]}"; do
  [[ "$kv" =~ ^([a-z_]+)=([0-9]+)$ ]] || usage_error "DEVICE_CHECK_LIMITS: '$kv' is not STEP=SECONDS"
  [[ -n "${LIMIT[${BASH_REMATCH[1]}]:-}" ]] || usage_error "DEVICE_CHECK_LIMITS: no step '${BASH_REMATCH[1]}' (${ORDER[*]})"
  LIMIT[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]}
done
CHOSEN="${DEVICE_CHECK_STEPS:-nccl,syncs,data,ddp,base,bench,static}"
for s in ${CHOSEN//,/ }; do
  [[ " nccl syncs data ddp base bench static " == *" $s "* ]] \
    || usage_error "DEVICE_CHECK_STEPS: no step '$s' (nccl, syncs, data, ddp, base, bench, static)"
done
# chosen STEP: install and preflight always; an evaluation with its training.
chosen() { local s=${1%_eval}; [[ $s == install || $s == preflight || ",$CHOSEN," == *",$s,"* ]]; }

# The plan: run (its limit fits in what the earlier limits leave), skip (for time), - (not chosen).
declare -A STATE
PLANNED=0
PLAN_LINE=""
for s in "${ORDER[@]}"; do
  if ! chosen "$s"; then
    STATE[$s]=-
  elif [[ $s == *_eval && ${STATE[${s%_eval}]} != run ]]; then
    STATE[$s]=skip
  elif ((PLANNED + LIMIT[$s] <= BUDGET - RESERVE)); then
    STATE[$s]=run; PLANNED=$((PLANNED + LIMIT[$s]))
  elif [[ $s == install || $s == preflight ]]; then
    usage_error "DEVICE_CHECK_BUDGET=$BUDGET: the install and preflight alone need" \
      "$((LIMIT[install] + LIMIT[preflight] + RESERVE)) s"
  else
    STATE[$s]=skip
  fi
  case ${STATE[$s]} in run) PLAN_LINE+=" $s=${LIMIT[$s]}" ;; *) PLAN_LINE+=" $s=${STATE[$s]}" ;; esac
done
PLAN_LINE="budget=$BUDGET reserve=$RESERVE planned=$PLANNED$PLAN_LINE"
if ((PLAN)); then echo "device_check_plan dry_run=$DRY $PLAN_LINE"; exit 0; fi

WORK="${DEVICE_CHECK_WORK:-$(mktemp -d)}"
DATA_ROOT="${NMT_DATA_ROOT:-$REPO/data/multi30k}"
[[ "$DATA_ROOT" == /* ]] || DATA_ROOT="$PWD/$DATA_ROOT"
WHEELS="${DEVICE_CHECK_WHEELS:-$REPO/device_wheels}"
[[ "$WHEELS" == /* ]] || WHEELS="$PWD/$WHEELS"
mkdir -p "$OUT_DIR" "$WORK/logs"
OUT_DIR="$(cd "$OUT_DIR" && pwd)"
WORK="$(cd "$WORK" && pwd)"
LOG="$OUT_DIR/device_check.log"
: > "$LOG"
BASE_PYTHONPATH="${PYTHONPATH:-}"
export NMT_DATA_ROOT="$DATA_ROOT" NMT_CACHE_DIR="${NMT_CACHE_DIR:-$WORK/cache}" PYTHONUNBUFFERED=1 CI=1
export PYTHONPATH="$REPO${BASE_PYTHONPATH:+:$BASE_PYTHONPATH}"
cd "$REPO" || exit 2

say() { echo "[device_check $(date +%T) +${SECONDS}s] $*" | tee -a "$LOG"; }

read -r -a EXTRA <<< "${DEVICE_CHECK_OVERRIDES:-}"
if ((DRY)); then
  DEVICE=cpu; FIRST_BACKEND=gloo; BENCH_DEVICE=(--device cpu --precision fp32 --warmup 1 --steps 2)
  DATA=(data.max_train_pairs=1000 data.tokenizer.vocab_size=500)
  TINY=(model.d_model=32 model.heads=2 model.ff_dim=64 model.encoder_layers=1
        model.decoder_layers=1 "${DATA[@]}")
  TRAIN=("${TINY[@]}" train.max_steps=4 train.eval_every_steps=4 train.log_every_steps=2
         train.precision=fp32 search.max_len_a=1.0 search.max_len_b=5)
  STATIC=(train.batch_tokens=1024 train.shape_buckets=4)
  BENCH=(model=transformer_base "${TINY[@]}" train.batch_tokens=512 train.shape_buckets=4)
  # Beam search of an untrained model runs to max_len: 50 sentences of each split will do.
  EVAL=(max_len_a=1.0 max_len_b=5 "data.root=$WORK/evaldata")
  DDP=(train.max_steps=3 train.eval_every_steps=3)
  COMPILE=false; BENCH_COMPILE=()
  if [[ "${DEVICE_CHECK_DRY_COMPILE:-0}" == 1 ]]; then COMPILE=true; BENCH_COMPILE=(--compile); fi
else
  DEVICE=cuda; FIRST_BACKEND=nccl; BENCH_DEVICE=(--device cuda --precision bf16 --warmup 3 --steps 20)
  DATA=()
  TRAIN=()
  STATIC=(train.batch_tokens=8192 train.shape_buckets=8)
  BENCH=(model=transformer_base train.batch_tokens=24576 train.shape_buckets=8)
  EVAL=()
  DDP=(train.max_steps=40 train.eval_every_steps=40)
  COMPILE=true; BENCH_COMPILE=(--compile)
  export NCCL_DEBUG="${NCCL_DEBUG:-WARN}" NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-lo}"
fi
# Every rank runs on this one machine: the loopback interface (no network there).
export GLOO_SOCKET_IFNAME="${GLOO_SOCKET_IFNAME:-lo}"
export PY WORK DC_DEVICE=$DEVICE DC_BACKEND=$FIRST_BACKEND

# ---------------------------------------------------------------- the Python the steps run
cat > "$WORK/preflight.py" <<'EOF'
"""The preflight: the imports the steps need and their versions against pyproject.toml (exit 5),
a CUDA device (exit 6; --dry-run: none needed), the Multi30k de/en files (exit 7). Writes what
it found to the JSON file argv[3] (the key line's gpu, torch and python)."""
import importlib
import importlib.metadata as md
import json
import platform
import re
import sys
from pathlib import Path

dry, root, out = sys.argv[1] == "1", Path(sys.argv[2]), Path(sys.argv[3])
info: dict = {"python": platform.python_version()}


def done(code: int, *lines: str):
    out.write_text(json.dumps(info, indent=2) + "\n")
    for line in lines:
        print("preflight: " + line)
    sys.exit(code)


# (module, its distribution) of what the steps import; nmt itself comes from the checkout.
MODULES = [("torch", "torch"), ("numpy", "numpy"), ("omegaconf", "omegaconf"),
           ("hydra", "hydra-core"), ("antlr4", "antlr4-python3-runtime"), ("yaml", "pyyaml"),
           ("sentencepiece", "sentencepiece"), ("sacrebleu", "sacrebleu"),
           ("pyarrow", "pyarrow"), ("tqdm", "tqdm"), ("matplotlib", "matplotlib"),
           ("torch.utils.tensorboard", "tensorboard"), ("pytest", "pytest"),
           ("xdist", "pytest-xdist"), ("nmt.cli.train", None), ("nmt.cli.evaluate", None)]
block = re.search(r"^dependencies = \[(.*?)^\]", Path("pyproject.toml").read_text(), re.S | re.M)
needs = dict(re.findall(r'"([A-Za-z0-9_.-]+)>=([0-9][0-9.]*)', block.group(1) if block else ""))
problems, versions = [], {}
for module, dist in MODULES:
    try:
        importlib.import_module(module)
    except Exception as err:  # noqa: BLE001 - every failed import is a finding
        first = (str(err).strip().splitlines() or [""])[0]
        problems.append(f"cannot import {module} ({type(err).__name__}: {first})")
        continue
    if dist is None:
        continue
    try:
        versions[dist] = md.version(dist)
    except md.PackageNotFoundError:
        versions[dist] = "?"
        continue
    if dist in needs:
        from packaging.version import Version

        if Version(versions[dist]) < Version(needs[dist]):
            problems.append(f"{dist} {versions[dist]} is older than pyproject.toml's >={needs[dist]}")
info["versions"] = versions
print("versions: python " + info["python"] + ", " + ", ".join(f"{k} {v}" for k, v in versions.items()))
if any(p.startswith("cannot import nmt") for p in problems):
    problems.append("nmt itself does not import: the checkout is broken, or a package above is missing")
if any(not p.startswith("cannot import nmt") for p in problems):
    problems.append("carry what is missing: `bash scripts/device_prep.sh` on the CPU machine makes "
                    "the wheels in device_wheels/ (docs/speed.md, the device check)")
if problems:
    done(5, *problems)

import torch  # noqa: E402 - imported above already

info.update(torch=torch.__version__, cuda=torch.version.cuda, gpu="-")
if torch.cuda.is_available():
    props = torch.cuda.get_device_properties(0)
    try:
        nccl = torch.cuda.nccl.version()
    except Exception:  # noqa: BLE001 - a torch without NCCL: the nccl step says more
        nccl = None
    info.update(gpu=torch.cuda.get_device_name(0), gpus=torch.cuda.device_count(),
                capability=f"{props.major}.{props.minor}", gpu_mib=props.total_memory >> 20,
                nccl=".".join(map(str, nccl)) if isinstance(nccl, tuple) else nccl)
    print(f"cuda: {info['gpu']} x{info['gpus']}, capability {info['capability']}, "
          f"{info['gpu_mib']} MiB, torch {torch.__version__}, CUDA {torch.version.cuda}, NCCL {info['nccl']}")
elif not dry:
    done(6, f"no CUDA device: torch {torch.__version__} (CUDA {torch.version.cuda}) sees none; "
         "--dry-run runs the steps on the CPU")

lines, problems = {}, []
for split in ("train", "val", "test_2016_flickr"):
    for lang in ("de", "en"):
        path = root / f"{split}.{lang}"
        if path.is_file() and path.stat().st_size > 0:
            with path.open("rb") as f:
                lines[path.name] = sum(1 for _ in f)
        else:
            problems.append(f"{path} is missing or empty")
    de, en = lines.get(f"{split}.de"), lines.get(f"{split}.en")
    if de is not None and en is not None and de != en:
        problems.append(f"{root}/{split}.de has {de} lines, {split}.en {en}")
info["data"] = {"root": str(root), **lines}
if problems:
    done(7, *problems, "copy Multi30k there with `bash scripts/device_prep.sh` (data/multi30k, "
         "carried) or set NMT_DATA_ROOT")
print(f"data: {root}: " + ", ".join(f"{k} {v}" for k, v in lines.items() if k.endswith(".de")) + " lines")
done(0)
EOF

cat > "$WORK/nccl_check.py" <<'EOF'
"""all_reduce between the ranks of this torchrun job, every rank on the one device (cuda:0:
ranks share the GPU) or on the CPU (--dry-run), over $DC_BACKEND."""
import os

import torch
import torch.distributed as dist

backend = os.environ["DC_BACKEND"]
device = torch.device("cuda", 0) if os.environ["DC_DEVICE"] == "cuda" else torch.device("cpu")
if device.type == "cuda":
    torch.cuda.set_device(device)
dist.init_process_group(backend)
rank, world = dist.get_rank(), dist.get_world_size()
x = torch.full((1 << 20,), float(rank + 1), device=device)
dist.all_reduce(x)
total = x[0].item()   # note: a CPU-GPU sync point
assert total == world * (world + 1) / 2, (total, world)
print(f"rank {rank}: all_reduce ok: {backend} world {world} on {device}, sum {total:g}")
dist.destroy_process_group()
EOF

cat > "$WORK/ddp_rank.py" <<'EOF'
"""One rank of the ddp step. It joins the process group on $DC_BACKEND itself, with every rank
on cuda:0 (LOCAL_RANK=0: two ranks share the one GPU), then runs nmt-train, which keeps that
group (nmt/training/distributed.py joins only when none is initialised)."""
import os
import sys

import torch
import torch.distributed as dist

if os.environ["DC_DEVICE"] == "cuda":
    os.environ["LOCAL_RANK"] = "0"
    torch.cuda.set_device(0)
dist.init_process_group(os.environ["DC_BACKEND"])
print(f"rank {dist.get_rank()} of {dist.get_world_size()}: {dist.get_backend()} on "
      f"{os.environ['DC_DEVICE']}", flush=True)
from nmt.cli.train import main  # noqa: E402 - after the process group

sys.exit(main(sys.argv[1:]))
EOF

cat > "$WORK/report.py" <<'EOF'
"""results.json and the key line from what the steps left in the work folder."""
import json
import re
import sys
from pathlib import Path

work, out = Path(sys.argv[1]), Path(sys.argv[2])
failed, skipped, secs, seconds, dry, budget, final = sys.argv[3:]


def load(path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}


def text(path):
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return None


def kv(line):
    return dict(item.split("=", 1) for item in line.split() if "=" in item)


def util(figures, key):   # MFU, or on a CPU (its measured matmul rate, no peak) matmul_util
    alt = key.replace("mfu", "matmul_util")
    return (alt, figures[alt]) if key not in figures and alt in figures else (key, figures.get(key))


pre = load(work / "preflight.json")
results = {"preflight": pre}
line = {"dry_run": dry, "gpu": pre.get("gpu", "-"), "torch": pre.get("torch"),
        "python": pre.get("python")}
for run in ("base", "static", "ddp"):
    summary = load(work / run / "summary.json")
    results[run] = {"summary": {k: v for k, v in summary.items() if k != "segments"}}
    line[f"{run}_steps"] = summary.get("steps")
    line[f"{run}_tokens_per_s"] = summary.get("train_tokens_per_s")
    key, value = util(summary, "mfu")
    line[f"{run}_{key}"] = value
    line[f"{run}_val_bleu_greedy"] = summary.get("best_bleu")
    if run == "ddp":
        line["ddp_world"] = summary.get("world_size")
        backend = text(work / "ddp_backend")
        line["ddp_backend"] = backend.strip() if backend else None
    if run == "static":
        line["static_graphs"] = summary.get("compile", {}).get("graphs")
        line["static_compile_s"] = summary.get("compile", {}).get("compile_s")
        log = text(work / run / "train.log") or ""
        pads = [x for x in log.splitlines() if "positions padding" in x]
        line["static_pad_pct"] = pads[-1].split(", ")[-1].split("%")[0] if pads else None
    for split, key in (("val", "val"), ("test_2016_flickr", "test")):
        scores = load(work / run / f"eval_{split}" / "scores.json")
        results[run][f"{key}_beam5"] = scores
        if run != "ddp":
            line[f"{run}_{key}_bleu"] = scores.get("bleu")
        if run == "base" and key == "test":
            line["decode_test_beam5_s"] = scores.get("seconds")
            line["decode_test_sents_per_s"] = scores.get("sents_per_s")
# bench_model.py's last line (model=...), else its eager line, printed before it compiles
lines = (text(work / "logs" / "bench.log") or "").splitlines()
eager = [x for x in lines if x.startswith("eager: ")]
last = [x for x in lines if x.startswith("model=")]
bench = {**(kv(eager[-1][7:]) if eager else {}), **(kv(last[-1]) if last else {})}
results["bench"] = bench
for key in ("eager_tgt_tokens_per_s", "compiled_tgt_tokens_per_s", "eager_mfu", "compiled_mfu",
            "compile_speedup", "tgt_tokens_per_s", "mfu", "pad_share", "compile_s", "params",
            "peak_gflops"):
    key, value = util(bench, key)
    line[f"bench_{key}"] = value
# nccl: ok (2 ranks on the first backend: NCCL, gloo in a dry run), 1rank (NCCL with one rank
# only; the ddp step then runs on gloo), fail
nccl = text(work / "logs" / "nccl.log")
oks = set(re.findall(r"all_reduce ok: (\w+) world (\d+)", nccl or ""))
first = "gloo" if dry == "1" else "nccl"
line["nccl"] = None if nccl is None else "ok" if (first, "2") in oks else \
    "1rank" if ("nccl", "1") in oks else "fail"
syncs = text(work / "logs" / "syncs.log")
line["syncs"] = None if syncs is None else "ok" if re.search(r"\b1 passed", syncs) else "fail"
for item in secs.split(","):      # each step's seconds: a number, skipped (for time), - (not run)
    name, value = item.split(":", 1)
    line[f"{name}_s"] = value
line["failed"] = failed or "none"
line["skipped"] = skipped or "none"
line["budget"] = budget
line["seconds"] = seconds
results["line"] = line
(out / "results.json").write_text(json.dumps(results, indent=2) + "\n")


def show(v):   # 41.53, 0.3142, 76874: short enough to read on one line
    if isinstance(v, str) and re.fullmatch(r"-?\d+\.\d*(e-?\d+)?", v):
        v = float(v)
    if isinstance(v, float):
        v = round(v) if abs(v) >= 1000 else float(f"{v:.4g}")
    return str(v).replace(" ", "_")


if final:
    print("device_check " + " ".join(f"{k}={show(v)}" for k, v in line.items()))
EOF

# ---------------------------------------------------------------- running the steps
FAILED=()
SKIPPED=()
declare -A SECS
DEADLINE=$((BUDGET - RESERVE))      # bash's SECONDS count from the script's start

# report [final]: results.json (after every step, so a run killed from outside keeps it);
# final: also the key line.
report() {
  local secs="" s
  for s in "${ORDER[@]}"; do secs+="$s:${SECS[$s]:--},"; done
  if [[ "${1:-}" == final ]]; then
    "$PY" "$WORK/report.py" "$WORK" "$OUT_DIR" "$(IFS=,; echo "${FAILED[*]}")" \
      "$(IFS=,; echo "${SKIPPED[*]}")" "${secs%,}" "$SECONDS" "$DRY" "$BUDGET" final 2>&1 | tee -a "$LOG"
  else
    "$PY" "$WORK/report.py" "$WORK" "$OUT_DIR" "$(IFS=,; echo "${FAILED[*]}")" \
      "$(IFS=,; echo "${SKIPPED[*]}")" "${secs%,}" "$SECONDS" "$DRY" "$BUDGET" "" >> "$LOG" 2>&1
  fi
}

# finish [CODE]: the report; exit CODE, else 1 if a step failed, 3 if some were skipped, 0.
finish() {
  report final
  exit "${1:-$((${#FAILED[@]} ? 1 : (${#SKIPPED[@]} ? 3 : 0)))}"
}

skip() {
  SECS[$1]=skipped; SKIPPED+=("$1")
  say "$1: skipped for time ($2; its limit ${LIMIT[$1]}s, the budget ${BUDGET}s)"
}

# begin STEP: whether STEP runs now; sets T, its limit cut to what is left of the budget (less
# than half its limit left: skipped for time).
begin() {
  case ${STATE[$1]} in
    -) return 1 ;;
    skip) skip "$1" "the earlier steps' limits leave too little"; return 1 ;;
  esac
  local left=$((DEADLINE - SECONDS))
  T=$((LIMIT[$1] < left ? LIMIT[$1] : left))
  if ((2 * T < LIMIT[$1] || T < 5)); then skip "$1" "${left}s left"; return 1; fi
}

# run_step STEP CMD...: CMD under `timeout T`, its output in the log; records its seconds.
run_step() {
  local name=$1 start=$SECONDS rc; shift
  timeout --kill-after=5 "$T" "$@" > "$WORK/logs/$name.log" 2>&1
  rc=$?
  { echo "----- $name: $*"; cat "$WORK/logs/$name.log"; } >> "$LOG"
  SECS[$name]=$((SECONDS - start))
  say "$name: rc=$rc in ${SECS[$name]}s (limit ${T}s)"
  if ((rc != 0)); then
    if ((rc == 124 || rc == 137)); then FAILED+=("$name:timeout"); else FAILED+=("$name:rc$rc"); fi
    tail -n 15 "$WORK/logs/$name.log" | sed "s/^/  $name| /"
  fi
  report
  return "$rc"
}

# minutes STEP: train.max_minutes of a training step that has T seconds.
minutes() { awk -v t="$T" -v o="${OVERHEAD[$1]}" 'BEGIN { m = (t - o) / 60; printf "%.2f", m < 0.1 ? 0.1 : m }'; }

# keep RUN: its train.log and summary.json under OUT_DIR/RUN.
keep() {
  [[ -f "$WORK/$1/summary.json" || -f "$WORK/$1/train.log" ]] || return 0
  mkdir -p "$OUT_DIR/$1"
  cp "$WORK/$1/train.log" "$WORK/$1/summary.json" "$OUT_DIR/$1/" 2>/dev/null || true
}

# evaluate RUN: beam-5 BLEU of val and test of RUN's best.pt, in one process.
evaluate() {
  local run=$1 name=$1_eval
  if [[ "${SECS[$run]:-}" == skipped ]]; then
    [[ ${STATE[$name]} == - ]] || skip "$name" "$run was skipped"
    return 1
  fi
  begin "$name" || return 1
  if [[ ! -f "$WORK/$run/checkpoints/best.pt" ]]; then
    SECS[$name]=0; FAILED+=("$name:no_checkpoint"); say "$name: $run left no best.pt"; return 1
  fi
  run_step "$name" "$PY" -c '
import sys
from nmt.cli.evaluate import main
ckpt, out, *extra = sys.argv[1:]
sys.exit(max(main([f"checkpoint={ckpt}", f"split={s}", "beam_size=5", f"out_dir={out}/eval_{s}",
                   "save_alignments=false", *extra]) for s in ("val", "test_2016_flickr")))
' "$WORK/$run/checkpoints/best.pt" "$WORK/$run" "device=$DEVICE" "${EVAL[@]}"
}

# nccl_step: 2 ranks on the one device over the first backend (half the step's time); where
# NCCL refuses, NCCL with 1 rank, then gloo on the same CUDA tensors with 2. The backend that
# worked with 2 ranks goes to $WORK/ddp_backend for the ddp step. Run as `bash -c nccl_step`.
# shellcheck disable=SC2317
nccl_step() {
  local two=("$PY" -m torch.distributed.run --standalone --nproc_per_node=2 "$WORK/nccl_check.py")
  if timeout --kill-after=3 "$NCCL_TRY" "${two[@]}"; then
    echo "$DC_BACKEND" > "$WORK/ddp_backend"; return 0
  fi
  [[ $DC_BACKEND == nccl ]] || return 1
  echo "device_check: no NCCL with 2 ranks on one device; NCCL with 1 rank, then gloo with 2"
  timeout --kill-after=3 "$NCCL_TRY" "$PY" -m torch.distributed.run --standalone \
    --nproc_per_node=1 "$WORK/nccl_check.py" || return 1
  DC_BACKEND=gloo "${two[@]}" && echo gloo > "$WORK/ddp_backend"
}
export -f nccl_step

say "repo $REPO, out $OUT_DIR, work $WORK, data $DATA_ROOT, dry_run=$DRY"
say "plan: $PLAN_LINE"

if begin install; then
  shopt -s nullglob
  WHEEL_FILES=("$WHEELS"/*.whl)
  shopt -u nullglob
  if ((${#WHEEL_FILES[@]})); then
    run_step install "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
      --disable-pip-version-check --target "$WORK/site" "${WHEEL_FILES[@]}" || finish 4
    export PYTHONPATH="$REPO:$WORK/site${BASE_PYTHONPATH:+:$BASE_PYTHONPATH}"
  else
    SECS[install]=0
    say "install: no wheels in $WHEELS (bash scripts/device_prep.sh makes them): the installed packages only"
  fi
fi
if begin preflight; then
  run_step preflight "$PY" "$WORK/preflight.py" "$DRY" "$DATA_ROOT" "$WORK/preflight.json"
  case $? in
    0) ;;
    6) FAILED[-1]=preflight:no_cuda; finish 6 ;;
    7) FAILED[-1]=preflight:data; finish 7 ;;
    *) [[ ${FAILED[-1]} == *:timeout ]] || FAILED[-1]=preflight:imports; finish 5 ;;
  esac
fi
if ((DRY)); then
  mkdir -p "$WORK/evaldata"
  for f in "$DATA_ROOT"/{val,test_2016_flickr}.{de,en}; do head -n 50 "$f" > "$WORK/evaldata/${f##*/}"; done
fi

if begin nccl; then
  export NCCL_TRY=$((T / 2))
  run_step nccl bash -c nccl_step
fi
begin syncs && run_step syncs "$PY" -m pytest -q -n 0 -p no:cacheprovider \
  --basetemp="$WORK/pytest" tests/test_throughput.py -k host_sync
begin data && run_step data "$PY" -c '
import sys
from nmt.config import compose_config
from nmt.data.batching import prepare_data
data = prepare_data(compose_config(sys.argv[1:]).data)
print(f"data: {len(data.train.src_lens)} training pairs, vocabulary {data.tokenizer.src_vocab_size}")
' "${DATA[@]}" "${EXTRA[@]}"
if begin ddp; then
  run_step ddp env "DC_BACKEND=$(cat "$WORK/ddp_backend" 2>/dev/null || echo "$FIRST_BACKEND")" \
    "$PY" -m torch.distributed.run --standalone --nproc_per_node=2 "$WORK/ddp_rank.py" \
    "run_dir=$WORK/ddp" "device=$DEVICE" "${TRAIN[@]}" "${DDP[@]}" "${EXTRA[@]}"
  keep ddp
fi
if begin base; then
  run_step base "$PY" -m nmt.cli.train "run_dir=$WORK/base" "device=$DEVICE" "${TRAIN[@]}" \
    "train.max_minutes=$(minutes base)" "${EXTRA[@]}"
  keep base
fi
evaluate base
begin bench && run_step bench "$PY" scripts/bench_model.py "${BENCH[@]}" "${BENCH_DEVICE[@]}" \
  "${BENCH_COMPILE[@]}" "${EXTRA[@]}"
if begin static; then
  run_step static "$PY" -m nmt.cli.train "run_dir=$WORK/static" "device=$DEVICE" "${TRAIN[@]}" \
    "${STATIC[@]}" "train.compile=$COMPILE" "train.max_minutes=$(minutes static)" "${EXTRA[@]}"
  keep static
fi
evaluate static
finish
