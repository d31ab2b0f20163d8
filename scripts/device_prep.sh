#!/usr/bin/env bash
# Prepares the GPU check (scripts/device_check.sh) on the CPU machine, before the device call:
#   1. device_wheels/ (git-ignored): the wheels of what the GPU machine lacks, for its Python
#      (3.12, x86-64; DEVICE_PYTHON_VERSION=3.X for another): hydra-core and omegaconf as
#      installed here, and antlr4-python3-runtime 4.9.3, which has no wheel on PyPI and is
#      built here with `pip wheel` (pure Python). NAME==VERSION arguments add others: a wheel
#      for that Python and platform, else one built here if it is pure Python. Never torch,
#      numpy, triton or nvidia-*: the GPU machine's own CUDA builds stay.
#   2. data/multi30k/ (git-ignored): the Multi30k de/en files of train, val and
#      test_2016_flickr, copied from ${NMT_DATA_ROOT:-../shared/data/multi30k}.
#   3. prints what travels (the working tree and the carried folders, at most 3/4 of the
#      runner's limit, $DEVICE_RUNNER_CARRY_MIB, default 64 MiB) and the device call: the
#      command, its carry list and timeout ($DEVICE_RUNNER_CALL_S, default 600 s).
#
#   bash scripts/device_prep.sh [--no-download] [NAME==VERSION ...]
#
# --no-download: keep device_wheels/ as it is (no network), only copy the data and print.
# Exit status: 0 ready, 1 what would travel is too large, 2 a usage error, missing data or a
# wheel that cannot be had for the GPU machine.
set -u -o pipefail

DOWNLOAD=1
EXTRA=()
for arg in "$@"; do
  case "$arg" in
    --no-download) DOWNLOAD=0 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    -*) echo "device_prep.sh: error: unknown option $arg (see --help)" >&2; exit 2 ;;
    *) EXTRA+=("$arg") ;;
  esac
done
REPO="$(cd "$(dirname "$0")/.." && pwd)"
SRC="${NMT_DATA_ROOT:-$REPO/../shared/data/multi30k}"
[[ "$SRC" == /* ]] || SRC="$PWD/$SRC"
PY="${PYTHON:-python3}"
PYV="${DEVICE_PYTHON_VERSION:-3.12}"
WHEELS=device_wheels
DATA=data/multi30k
LIMIT_MIB="${DEVICE_RUNNER_CARRY_MIB:-64}"     # the runner's limit on what travels
CALL_S="${DEVICE_RUNNER_CALL_S:-600}"          # the runner's limit on one command
[[ "$LIMIT_MIB" =~ ^[0-9]+$ && "$CALL_S" =~ ^[0-9]+$ ]] || {
  echo "device_prep.sh: error: DEVICE_RUNNER_CARRY_MIB and DEVICE_RUNNER_CALL_S are whole numbers" >&2; exit 2; }
MAX_MIB=$((LIMIT_MIB * 3 / 4))
cd "$REPO" || exit 2

die() { echo "device_prep.sh: error: $*" >&2; exit 2; }
say() { echo "device_prep: $*"; }

# ------------------------------------------------------------------ 1. the wheels
# The version installed here (the one the tests pass with), else FALLBACK.
installed() { "$PY" -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' "$1" 2>/dev/null || echo "$2"; }

# wheel SPEC: a wheel of SPEC for the GPU machine's Python into $WHEELS: the platform's
# binary, else built here (accepted only if pure Python: py3-none-any).
wheel() {
  local spec=$1 name=${1%%[=<>!~]*} got
  case "${name,,}" in
    torch|numpy|triton|nvidia-*) die "$name is the GPU machine's own (CUDA) build: never carried" ;;
  esac
  if "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$PYV" \
      --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux2014_x86_64 -d "$WHEELS" "$spec" 2>/dev/null; then
    return 0
  fi
  local tmp
  tmp="$(mktemp -d)"
  "$PY" -m pip wheel -q --no-deps -w "$tmp" "$spec" || die "no wheel of $spec for Python $PYV"
  got=("$tmp"/*.whl)
  [[ "${got[0]}" == *-py3-none-any.whl || "${got[0]}" == *-py2.py3-none-any.whl ]] \
    || die "$spec builds only ${got[0]##*/} here, not a wheel for Python $PYV on x86-64"
  mv "${got[@]}" "$WHEELS/"
  rm -rf "$tmp"
}

if ((DOWNLOAD)); then
  mkdir -p "$WHEELS"
  rm -f "$WHEELS"/*.whl          # one version of each: two would stop the whole install
  for spec in "hydra-core==$(installed hydra-core 1.3.2)" "omegaconf==$(installed omegaconf 2.3.0)" \
              "antlr4-python3-runtime==4.9.3" "${EXTRA[@]}"; do
    wheel "$spec"
  done
elif ((${#EXTRA[@]})); then
  die "--no-download takes no NAME==VERSION (it downloads nothing)"
fi
shopt -s nullglob
WHEEL_FILES=("$WHEELS"/*.whl)
shopt -u nullglob
if ((${#WHEEL_FILES[@]})); then
  say "wheels  $WHEELS/ ($(du -sh "$WHEELS" | cut -f1)): $(cd "$WHEELS" && echo *.whl)"
else
  say "wheels  none in $WHEELS/: the device check's imports of Hydra and OmegaConf will fail" \
    "there (run this without --no-download)"
fi

# ------------------------------------------------------------------ 2. the data
mkdir -p "$DATA"
if [[ "$(cd "$SRC" 2>/dev/null && pwd)" != "$(cd "$DATA" && pwd)" ]]; then
  for split in train val test_2016_flickr; do
    for lang in de en; do
      [[ -s "$SRC/$split.$lang" ]] || die "$SRC/$split.$lang is missing or empty" \
        "(NMT_DATA_ROOT: the Multi30k folder; scripts/download_multi30k.sh fetches it)"
      install -m 0644 "$SRC/$split.$lang" "$DATA/$split.$lang"
    done
    [[ $(wc -l < "$DATA/$split.de") == $(wc -l < "$DATA/$split.en") ]] \
      || die "$SRC/$split.de and $split.en differ in lines"
  done
fi
say "data    $DATA/ ($(du -sh "$DATA" | cut -f1)) from $SRC: $(wc -l < "$DATA/train.de") training pairs"

# ------------------------------------------------------------------ 3. what travels
CARRY=()
for path in "$WHEELS" "$DATA"; do
  [[ -d "$path" ]] || continue
  git check-ignore -q "$path" || say "warning: $path is not git-ignored (it travels anyway, uncarried)"
  CARRY+=("$path")
done
tree_bytes=$(git ls-files -z -c -o --exclude-standard | du -cb --files0-from=- 2>/dev/null | tail -n 1 | cut -f1)
if [[ -d shared ]] && git check-ignore -q shared; then    # shared/ travels, ignored or not
  tree_bytes=$((tree_bytes + $(du -sb shared | cut -f1)))
fi
carry_bytes=$(du -cb "${CARRY[@]}" | tail -n 1 | cut -f1)
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
total=$((tree_bytes + carry_bytes))
say "travels $(mib "$total") MiB: the working tree $(mib "$tree_bytes"), carried $(mib "$carry_bytes") (the device's limit: $LIMIT_MIB MiB)"
if ((total > MAX_MIB * 1048576)); then
  echo "device_prep.sh: error: $(mib "$total") MiB would travel, more than the $MAX_MIB MiB kept" \
    "well under the device's $LIMIT_MIB: ignore or remove large untracked files" >&2
  exit 1
fi
carry_json=$(printf '"%s", ' "${CARRY[@]}")
say "on the GPU machine: the device tool's run with (its plan: bash scripts/device_check.sh --plan)"
echo "  command: bash scripts/device_check.sh"
echo "  carry: [${carry_json%, }]"
echo "  timeout_s: $CALL_S"
