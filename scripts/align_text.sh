#!/usr/bin/env bash
# Word alignments of your own parallel text by nmt's guided Transformers, for any language pair:
# trains both directions on a corpus plus the text (as a weighted corpus, so the model sees it
# often), each supervised by eflomal's links of everything it reads (its full-context head,
# Garg et al. 2019), then writes the links where the two guided heads agree (Mask-Align's
# 2AB/(A+B) >= 0.2) for the text, and AER with gold links.
#
#   bash scripts/align_text.sh TEXT SRC TGT RUN_DIR [OVERRIDE ...]
#   bash scripts/align_text.sh pairs.txt en fr runs/align_en_fr
#   GOLD=gold.txt GOLD_ONE_BASED=true bash scripts/align_text.sh pairs.txt en fr runs/x device=cuda
#
# TEXT: one `source ||| target` line per pair (nmt-align's input=), whitespace-tokenized words.
# The training corpus is data.root's {train}.{SRC,TGT} (NMT_DATA_ROOT, default Multi30k);
# OVERRIDEs go to both nmt-train runs (e.g. data.root=DIR train.max_steps=2000 device=cuda).
# Env: STEPS (default 4000 per direction), WEIGHT (draws of each text pair per epoch; default:
# the text is about a fifth of each epoch, ceil(train pairs / (4 x text pairs)), at least 1),
# LAMBDA (alignment loss weight, default 0.5), SYMMETRIZE (nmt-align's: agreement, grow-diag,
# ...; default agreement), PARALLEL=1 (both directions at once), PYTHON.
# Writes RUN_DIR/text/text.{SRC,TGT}, RUN_DIR/{SRC}_{TGT}/ and RUN_DIR/{TGT}_{SRC}/ (nmt-train
# runs and logs) and RUN_DIR/links.txt (0-based `i-j`, source word i, target word j).
# Needs eflomal: pip install -e ".[align]".
set -euo pipefail
text=${1:?usage: bash scripts/align_text.sh TEXT SRC TGT RUN_DIR [OVERRIDE ...]}
src=${2:?SRC language code}
tgt=${3:?TGT language code}
runs=${4:?RUN_DIR}
shift 4
overrides=("$@")
py=${PYTHON:-python}
root=${NMT_DATA_ROOT:-../shared/data/multi30k}
for o in "${overrides[@]}"; do [[ $o == data.root=* ]] && root=${o#data.root=}; done

mkdir -p "$runs/text"
"$py" - "$text" "$runs/text/text.$src" "$runs/text/text.$tgt" <<'EOF'
import sys
from nmt.extras.tools.word_alignment import read_pair_file
pairs = read_pair_file(sys.argv[1])   # names the file and line of a malformed pair
for side, path in enumerate(sys.argv[2:]):
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(p[side] + "\n" for p in pairs)
EOF
n_text=$(wc -l < "$runs/text/text.$src")
n_train=$(wc -l < "$root/train.$src")
weight=${WEIGHT:-$(( n_train > 4 * n_text ? (n_train + 4 * n_text - 1) / (4 * n_text) : 1 ))}
echo "align_text: $n_text pairs to align, $n_train training pairs, weight $weight"

train_one() {  # source target
  "$py" -m nmt.cli.train model=transformer "data.src_lang=$1" "data.tgt_lang=$2" \
    "data.corpora=[{split: text, root: $runs/text, weight: $weight}]" \
    "train.max_steps=${STEPS:-4000}" train.max_minutes=null train.early_stopping_patience=null \
    "train.alignment_loss_weight=${LAMBDA:-0.5}" model.alignment_heads=1 model.alignment_layer=-2 \
    model.alignment_full_context=true "run_dir=$runs/$1_$2" "${overrides[@]}" \
    > "$runs/$1_$2.log" 2>&1 || { tail -5 "$runs/$1_$2.log"; return 1; }
  echo "align_text: trained $1->$2 ($runs/$1_$2)"
}
if [ "${PARALLEL:-0}" = 1 ]; then
  train_one "$src" "$tgt" & a=$!
  train_one "$tgt" "$src" & b=$!
  wait $a; wait $b
else
  train_one "$src" "$tgt"
  train_one "$tgt" "$src"
fi

gold=()
[ -n "${GOLD:-}" ] && gold=("gold=$GOLD" "gold_one_based=${GOLD_ONE_BASED:?set GOLD_ONE_BASED=true|false}")
device=auto
for o in "${overrides[@]}"; do [[ $o == device=* ]] && device=${o#device=}; done
"$py" -m nmt.cli.align "checkpoint=$runs/${src}_${tgt}/checkpoints/last.pt" \
  "reverse_checkpoint=$runs/${tgt}_${src}/checkpoints/last.pt" "input=$text" \
  "out=$runs/links.txt" "symmetrize=${SYMMETRIZE:-agreement}" "device=$device" "${gold[@]}"
