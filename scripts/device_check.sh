#!/usr/bin/env bash
# The GPU check (issues 38, 45 and 52): one command on a lent GPU machine, from a fresh start with
# that machine's own CUDA torch, within $DEVICE_CHECK_BUDGET seconds (default: one command's
# limit less 15 s, 585). First, on the CPU machine: `bash scripts/device_prep.sh` (the wheels and
# data that travel, and the device call to make; docs/speed.md). The steps, cheap and decisive first:
#   install    the carried wheels (device_wheels/) into a private folder on PYTHONPATH, `pip
#              install --no-index --no-deps`: torch is never touched (exit 4)
#   preflight  imports and versions (exit 5), torch.cuda.is_available() (exit 6), the Multi30k
#              files in $NMT_DATA_ROOT, default data/multi30k (exit 7); past its limit (a cold
#              disk's first CUDA import) it fails and the steps go on
#   nccl       all_reduce between 2 ranks sharing the one GPU over NCCL; where NCCL refuses two
#              ranks on one device, NCCL with 1 rank, then gloo on CUDA tensors with 2 (each try
#              under its own timeout: the step's time left over the tries left)
#   syncs      tests/test_throughput.py's host-sync test on the GPU
#   data       the tokenizer and token caches of Multi30k de-en, once for every later step
#   ddp        nmt-train, 40 steps, WORLD_SIZE=2, both ranks on the one GPU: nmt joins NCCL itself
#              where the nccl step had two ranks on it; else the check joins gloo (a timeout of
#              its own) and nmt keeps that group
#   torchrun   nmt-train itself under torchrun, 20 steps, 2 processes: only where the preflight
#              sees two GPUs (world 1 joins no process group: no NCCL path), in the slack
#   base       Multi30k de->en, today's recipe, train.max_minutes = its limit less 40 s, no
#              figures, one validation at its end; base_eval: val and test BLEU with beam 5
#   bench      model=transformer_base, 24,576-token batches, bf16: eager, compiled as the preset
#              trains (accumulation: no CUDA graphs), then in what is left one micro-batch per
#              step (train.accum_steps=1: CUDA graphs; the captures Inductor skipped)
#   static     base with 8,192-token batches, train.shape_buckets=8: first its eager twin (the
#              same batches, train.compile=false, 200 steps), then train.compile=true (CUDA
#              graphs) on its own clock: from its first optimizer step to its limit less 15 s,
#              one validation at the end; the steady window starts at the first log line
#              (every 50 steps) with every batch shape's graphs recorded; tokens/s, MFU, the
#              compile's counters, the speedup over the twin; static_eval: BLEU with beam 5
#
#   bash scripts/device_check.sh [--dry-run] [--plan] [OUT_DIR]   (OUT_DIR: $OUT, else ./device_check)
#
# Each step has a limit in seconds (a cheap step about 1.5 times what it is expected to take);
# the steps are planned in order while their limits fit in the budget less 5 s: by default one
# call holds every step. A compile step (bench, static) takes its share of the slack the earlier
# steps leave (bench half, static the rest). What does not fit goes to a follow-up call when the
# device time left after this call can start a machine and hold it ("next"), else it is skipped
# for time. --plan prints the calls' plans, the work folder, the compile steps' limits when the
# cheap steps take their expected times, a follow-up's command and the device time; at its end a
# run prints the exact follow-up command ("next call: ...", or none).
# DEVICE_CHECK_LIMITS=bench=200,... sets limits; DEVICE_CHECK_STEPS=bench,static chooses steps;
# DEVICE_CHECK_OVERRIDES: Hydra overrides for every training and the bench; DEVICE_CHECK_WHEELS,
# DEVICE_CHECK_WORK (runs and caches; default a new temporary folder). The runner's limits, with
# today's values: DEVICE_RUNNER_TIME_S=900 (device time of a session), _START_S=120 (a machine's
# start), _CALL_S=600 (one command), _OVERHEAD_S=20 (a call's transfers), _FILES=8 and
# _FILE_MIB=16 (what comes back), _CARRY_MIB=64 (what travels; device_prep.sh).
# Writes at most $DEVICE_RUNNER_FILES files: OUT_DIR/{device_check.log,results.json} and
# {base,static,ddp}/{summary.json,train.log}, and prints one `device_check key=value ...` line
# last. Exit status: 0 every step passed, 1 a step failed, 2 a usage error, 3 none failed but
# some were skipped for time or left for the follow-up call, 4-7 the install's and preflight's.
# --dry-run: every step on the CPU with a tiny model and a few steps, gloo (torchrun with 2
# processes), limits doubled, a budget that holds them all (CI runs it;
# DEVICE_CHECK_DRY_COMPILE=1 also compiles).
set -u -o pipefail
for arg in "$@"; do
  case "$arg" in -h|--help) sed -n '2,55p' "$0"; exit 0 ;; esac
done
exec "${PYTHON:-python3}" "$(cd "$(dirname "$0")" && pwd)/device_check" "$@"
