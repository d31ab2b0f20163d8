#!/usr/bin/env bash
# The main job: train a model on Multi30k, evaluate it on val and test_2016_flickr
# (beam 5 and greedy), and plot the alignments of the first five test sentences.
#
#   bash scripts/run_multi30k.sh transformer|rnn [nmt-train overrides ...]
#
# Defaults: de->en from ../shared/data/multi30k (or $NMT_DATA_ROOT), 60 minutes of training
# (train.max_minutes=60; later overrides win, e.g. train.max_minutes=5 data=multi30k_fr_en).
# Everything goes under the run directory (runs/<model>_<src>_<tgt> unless run_dir=...).
set -euo pipefail

model="${1:?usage: bash scripts/run_multi30k.sh transformer|rnn [nmt-train overrides ...]}"
shift
overrides=("model=${model}" "train.max_minutes=60" "$@")

# The run directory as nmt-train will resolve it (also validates the overrides early).
run_dir="$(python -c 'import sys; from nmt.config import compose_config; print(compose_config(sys.argv[1:]).run_dir)' "${overrides[@]}")"
ckpt="${run_dir}/checkpoints/best.pt"

echo "== train: nmt-train ${overrides[*]}"
nmt-train "${overrides[@]}"

for split in val test_2016_flickr; do
  echo "== evaluate ${split}: beam 5 and greedy"
  nmt-evaluate checkpoint="${ckpt}" split="${split}" beam_size=5 out_dir="${run_dir}/eval/${split}"
  nmt-evaluate checkpoint="${ckpt}" split="${split}" beam_size=1 save_alignments=false \
    out_dir="${run_dir}/eval/${split}_greedy"
done

echo "== plot: alignments of the first five test sentences"
nmt-plot alignments="${run_dir}/eval/test_2016_flickr/alignments.npz" index=0:5 \
  out="${run_dir}/eval/heatmaps"

echo "== results"
python scripts/results_table.py "${run_dir}"
