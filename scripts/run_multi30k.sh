#!/usr/bin/env bash
# The main job: train a model on Multi30k, evaluate it on the validation and test splits
# (beam 5 and greedy), and plot the alignments of the first five test sentences.
#
#   bash scripts/run_multi30k.sh transformer|rnn [nmt-train overrides ...]
#
# Defaults: de->en from ../shared/data/multi30k (or $NMT_DATA_ROOT), 60 minutes of training
# (train.max_minutes=60; later overrides win, e.g. train.max_minutes=5 data=multi30k_fr_en).
# The beam's length penalty is chosen on the validation split: beam 5 at each alpha of
# $LENGTH_PENALTIES (default "0.6 1.0 1.4 1.8 2.2 2.6 3.0"; LENGTH_PENALTIES=1.0 turns the
# search off), the best val BLEU wins (scripts/best_length_penalty.py), and the test split is
# translated once, with that alpha. The test split never takes part in a choice.
# The split names come from the data config (data.valid_split, data.test_split), so the
# Hugging Face route works too (data/README.md). Everything goes under the run directory
# (runs/<model>_<src>_<tgt> unless run_dir=...). Works from any directory, with nmt installed.
#
# A multilingual data preset (data=multi30k_multi, data=multi30k_x_en: several data.pairs)
# picks the length penalty on the default direction's validation split (data.src_lang ->
# data.tgt_lang), then evaluates every direction of both splits with beam 5
# (nmt-evaluate directions=all: supervised and zero-shot, BLEU, chrF, off-target rate; one
# table, eval/<split>/directions.md) and plots the default direction's test alignments.
# Then it fine-tunes the model for its zero-shot directions (docs/multilingual.md; ZERO_RESOURCE=0
# skips it), in rounds of iterative back-translation: each round, nmt-backtranslate
# pivot=$PIVOT (default en; greedy) translates the pivot side of each training pair into every
# other language with the latest model, which is then fine-tuned from its best.pt on the real
# pairs and these synthetic ones at a constant learning rate of $ZR_LR (default 5e-4).
# $ZR_STEPS gives each round's steps (default "5000 3000": two rounds). Every direction of the
# test split is scored direct with the last round's model, beside the base model through the
# pivot: zero_resource/table.md; the model to translate with is
# zero_resource/round<last>/ft/checkpoints/best.pt.
set -euo pipefail

model="${1:?usage: bash scripts/run_multi30k.sh transformer|rnn [nmt-train overrides ...]}"
shift
overrides=("model=${model}" "train.max_minutes=60" "$@")
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# The run directory and split names as nmt-train resolves them (a bad override stops here).
values="$(python -m nmt.cli.resolve run_dir data.valid_split data.test_split data.src_lang \
  data.tgt_lang data.pairs -- "${overrides[@]}")"
{ read -r run_dir; read -r valid_split; read -r test_split; read -r src; read -r tgt; read -r pairs; } \
  <<< "${values}"
multilingual=false
[[ "${pairs}" == *,* ]] && multilingual=true   # two or more directions
ckpt="${run_dir}/checkpoints/best.pt"

echo "== train: nmt-train ${overrides[*]}"
nmt-train "${overrides[@]}"

read -r -a alphas <<< "${LENGTH_PENALTIES:-0.6 1.0 1.4 1.8 2.2 2.6 3.0}"
lp_dir="${run_dir}/eval/${valid_split}_length_penalty"
echo "== length penalty: beam 5 on ${valid_split}, alpha in ${alphas[*]}"
rm -rf "${lp_dir}"   # an earlier pick (of an earlier checkpoint, or another grid) must not count
nmt-evaluate -m checkpoint="${ckpt}" split="${valid_split}" beam_size=5 save_alignments=false \
  length_penalty="$(IFS=,; echo "${alphas[*]}")" "out_dir=${lp_dir}/\${length_penalty}" \
  hydra.sweep.dir="${lp_dir}" "hydra.sweep.subdir=\${length_penalty}"   # one directory per alpha
alpha="$(python "${here}/best_length_penalty.py" "${lp_dir}")"

if [[ "${multilingual}" == true ]]; then
  for split in "${valid_split}" "${test_split}"; do
    echo "== evaluate ${split}: every direction, beam 5 (length penalty ${alpha})"
    nmt-evaluate checkpoint="${ckpt}" split="${split}" beam_size=5 length_penalty="${alpha}" \
      directions=all out_dir="${run_dir}/eval/${split}"
  done
  echo "== plot: alignments of the first five ${src}-${tgt} test sentences"
  nmt-plot alignments="${run_dir}/eval/${test_split}/${src}-${tgt}/alignments.npz" index=0:5 \
    out="${run_dir}/eval/heatmaps"
  echo "== results (${test_split}, beam 5)"
  cat "${run_dir}/eval/${test_split}/directions.md"
  [[ "${ZERO_RESOURCE:-1}" == 1 ]] || exit 0

  pivot="${PIVOT:-en}" zr="${run_dir}/zero_resource" tuned="${ckpt}" round=0
  read -r -a round_steps <<< "${ZR_STEPS:-5000 3000}"
  real="$(tr -d "[]' " <<< "${pairs}")"
  rm -rf "${zr}"
  for steps in "${round_steps[@]}"; do
    round=$((round + 1)) dir="${zr}/round${round}"
    echo "== round ${round}: back-translate the ${pivot} side of each training pair into every" \
      "other language with ${tuned}"
    nmt-backtranslate checkpoint="${tuned}" pivot="${pivot}" split=train out_dir="${dir}/bt" \
      beam_size=1
    synthetic="$(python -c 'import json, sys; print(",".join(json.load(open(sys.argv[1]))
      ["directions"]))' "${dir}/bt/train.backtranslation.json")"
    echo "== round ${round}: fine-tune ${steps} steps on the real directions and the synthetic" \
      "${synthetic}"
    nmt-train "${overrides[@]}" train.init_from="${tuned}" "data.pairs=[${real},${synthetic}]" \
      "data.train_pairs=[${real}]" \
      "data.corpora=[{split: train, root: ${dir}/bt, format: tsv, pairs: [${synthetic}]}]" \
      train.max_steps="${steps}" train.max_minutes=null train.schedule=constant \
      train.lr="${ZR_LR:-0.0005}" train.warmup_steps=100 run_dir="${dir}/ft"
    tuned="${dir}/ft/checkpoints/best.pt"
  done
  echo "== evaluate ${test_split}: ${tuned} direct, the base model through ${pivot}"
  nmt-evaluate checkpoint="${tuned}" split="${test_split}" beam_size=5 \
    length_penalty="${alpha}" directions=all save_alignments=false out_dir="${zr}/eval"
  nmt-evaluate checkpoint="${ckpt}" split="${test_split}" beam_size=5 length_penalty="${alpha}" \
    directions=all pivot="${pivot}" save_alignments=false out_dir="${run_dir}/eval/${test_split}_pivot"
  python "${here}/zero_resource_table.py" "${run_dir}/eval/${test_split}_pivot" "${zr}/eval" \
    | tee "${zr}/table.md"
  exit 0
fi

for split in "${valid_split}" "${test_split}"; do
  echo "== evaluate ${split}: beam 5 (length penalty ${alpha}) and greedy"
  nmt-evaluate checkpoint="${ckpt}" split="${split}" beam_size=5 length_penalty="${alpha}" \
    out_dir="${run_dir}/eval/${split}"
  nmt-evaluate checkpoint="${ckpt}" split="${split}" beam_size=1 save_alignments=false \
    out_dir="${run_dir}/eval/${split}_greedy"
done

echo "== plot: alignments of the first five test sentences"
nmt-plot alignments="${run_dir}/eval/${test_split}/alignments.npz" index=0:5 \
  out="${run_dir}/eval/heatmaps"

echo "== results"
python "${here}/results_table.py" "${run_dir}"
