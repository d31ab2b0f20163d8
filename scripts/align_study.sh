#!/usr/bin/env bash
# Guided alignment study: en->fr and fr->en, Transformer and RNN, each trained with
# and without the guided alignment loss at equal steps; then AER on the Hansards gold set
# (scripts/align_hansards.py: each direction and the symmetrisations) and validation BLEU.
#
#   bash scripts/align_study.sh STEPS [RUNS_DIR] [OVERRIDE ...]
#   bash scripts/align_study.sh 3000 runs/align_study device=cuda
#   MODELS=transformer PARALLEL=1 bash scripts/align_study.sh 3000 runs/align_gpu device=cuda
#
# Guided: train.alignment_loss_weight=$LAMBDA (default 0.05, Garg et al. 2019; 0.5 aligned better
# in 2,000-step runs, docs/attention.md), and for the Transformer one
# supervised head of the penultimate decoder layer (model.alignment_heads=1
# model.alignment_layer=-2). nmt-train aligns the training split with eflomal first (cached;
# pip install 'nmt[align]'), unless LINKS_EN_FR / LINKS_FR_EN name Pharaoh files to use.
# Every run stops at STEPS (RNN_STEPS for the RNN), early stopping off; scored: last.pt.
# Env: MODELS (default "transformer rnn"), PARALLEL=1 (all trainings at once, e.g. on one
# GPU), PYTHON. Writes RUNS_DIR/<model>_<dir>_<plain|guided>/, their logs, aer_plain.md,
# aer_guided.md and bleu.md; prints the last two tables' best lines.
set -euo pipefail
steps=${1:?usage: bash scripts/align_study.sh STEPS [RUNS_DIR] [OVERRIDE ...]}
runs=${2:-runs/align_study}
shift $(( $# < 2 ? $# : 2 ))
overrides=("$@")
py=${PYTHON:-python}
models=${MODELS:-transformer rnn}
mkdir -p "$runs"

train_one() {  # model direction mode
  local model=$1 dir=$2 mode=$3 n=$steps extra=()
  [ "$model" = rnn ] && n=${RNN_STEPS:-$steps}
  if [ "$mode" = guided ]; then
    extra=("train.alignment_loss_weight=${LAMBDA:-0.05}")
    [ "$model" = transformer ] && extra+=(model.alignment_heads=1 model.alignment_layer=-2)
    local links_var="LINKS_${dir^^}"
    [ -n "${!links_var:-}" ] && extra+=("data.alignments=${!links_var}")
  fi
  "$py" -m nmt.cli.train "model=$model" "data=multi30k_$dir" "train.max_steps=$n" \
    train.max_minutes=null train.early_stopping_patience=null \
    "run_dir=$runs/${model}_${dir}_${mode}" "${extra[@]}" "${overrides[@]}" \
    > "$runs/${model}_${dir}_${mode}.log" 2>&1 || { tail -5 "$runs/${model}_${dir}_${mode}.log"; return 1; }
  echo "trained $model $dir $mode"
}

pids=()
for model in $models; do
  for dir in en_fr fr_en; do
    for mode in plain guided; do
      if [ "${PARALLEL:-0}" = 1 ]; then train_one "$model" "$dir" "$mode" & pids+=($!)
      else train_one "$model" "$dir" "$mode"; fi
    done
  done
done
for pid in "${pids[@]}"; do wait "$pid"; done

device=cpu
for o in "${overrides[@]}"; do [[ $o == device=* ]] && device=${o#device=}; done
for mode in plain guided; do
  args=()
  for model in $models; do
    prefix=$([ "$model" = rnn ] && echo rnn_ || true)
    for dir in en_fr fr_en; do
      args+=("${prefix}${dir}=$runs/${model}_${dir}_${mode}/checkpoints/last.pt")
    done
  done
  "$py" scripts/align_hansards.py "${args[@]}" "device=$device" > "$runs/aer_$mode.md"
  tail -2 "$runs/aer_$mode.md"
done

"$py" - "$runs" <<'EOF' | tee "$runs/bleu.md"
import json, sys
from pathlib import Path
print("| run | steps | val BLEU at the last step | best val BLEU (step) | train tokens/s |")
print("|---|---|---|---|---|")
for path in sorted(Path(sys.argv[1]).glob("*/summary.json")):
    s = json.loads(path.read_text())
    print(f"| {path.parent.name} | {s['steps']} | {s['last']['bleu']:.2f} | "
          f"{s['best_bleu']:.2f} ({s['best_step']}) | {s['train_tokens_per_s']:.0f} |")
EOF
