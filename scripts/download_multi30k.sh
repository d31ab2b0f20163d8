#!/usr/bin/env bash
# Download Multi30k task 1 (Elliott et al. 2016) raw text files from the official
# repository https://github.com/multi30k/dataset into DEST (default: data/multi30k),
# in the layout nmt reads with data.format=text: {train,val,test_2016_flickr}.{en,de,fr,cs}.
#
#   bash scripts/download_multi30k.sh [DEST] [LANGS...]     # e.g. data/multi30k en de
#   export NMT_DATA_ROOT=$PWD/data/multi30k                 # or pass data.root=...
#
# Needs curl (or wget) and gunzip. Untested on the offline machine this repo is developed on.
set -euo pipefail

dest="${1:-data/multi30k}"
shift || true
langs=("$@")
[ ${#langs[@]} -eq 0 ] && langs=(en de fr cs)
base="https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw"

mkdir -p "$dest"
for split in train val test_2016_flickr; do
  for lang in "${langs[@]}"; do
    out="$dest/$split.$lang"
    if [ -s "$out" ]; then echo "have $out"; continue; fi
    url="$base/$split.$lang.gz"
    echo "get  $url"
    if command -v curl >/dev/null; then
      curl -fsSL --retry 3 "$url" | gunzip -c > "$out.tmp"
    else
      wget -qO- "$url" | gunzip -c > "$out.tmp"
    fi
    mv "$out.tmp" "$out"
  done
done
wc -l "$dest"/*.* | tail -n +1
