#!/usr/bin/env bash
# The main job: train a model on Multi30k, evaluate it on the validation and test splits
# (beam 5 and greedy), and plot the alignments of the first five test sentences.
#
#   bash scripts/run_multi30k.sh transformer|rnn [nmt-train overrides ...]
#
# Defaults: de->en from ../shared/data/multi30k (or $NMT_DATA_ROOT), 60 minutes of training
# (train.max_minutes=60; later overrides win, e.g. train.max_minutes=5 data=multi30k_fr_en).
# The split names come from the data config (data.valid_split, data.test_split), so the
# Hugging Face route works too (data/README.md). Everything goes under the run directory
# (runs/<model>_<src>_<tgt> unless run_dir=...). Works from any directory, with nmt installed.
set -euo pipefail

model="${1:?usage: bash scripts/run_multi30k.sh transformer|rnn [nmt-train overrides ...]}"
shift
overrides=("model=${model}" "train.max_minutes=60" "$@")
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# The run directory and split names as nmt-train resolves them (a bad override stops here).
values="$(python -m nmt.cli.resolve run_dir data.valid_split data.test_split -- "${overrides[@]}")"
{ read -r run_dir; read -r valid_split; read -r test_split; } <<< "${values}"
ckpt="${run_dir}/checkpoints/best.pt"

echo "== train: nmt-train ${overrides[*]}"
nmt-train "${overrides[@]}"

for split in "${valid_split}" "${test_split}"; do
  echo "== evaluate ${split}: beam 5 and greedy"
  nmt-evaluate checkpoint="${ckpt}" split="${split}" beam_size=5 out_dir="${run_dir}/eval/${split}"
  nmt-evaluate checkpoint="${ckpt}" split="${split}" beam_size=1 save_alignments=false \
    out_dir="${run_dir}/eval/${split}_greedy"
done

echo "== plot: alignments of the first five test sentences"
nmt-plot alignments="${run_dir}/eval/${test_split}/alignments.npz" index=0:5 \
  out="${run_dir}/eval/heatmaps"

echo "== results"
python "${here}/results_table.py" "${run_dir}"
