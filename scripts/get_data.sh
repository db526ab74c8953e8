#!/usr/bin/env bash
# Download and prepare the summarization data: XSum and CNN/Daily Mail.
# usage: bash scripts/get_data.sh <data folder>
# Writes <data folder>/xsum and <data folder>/cnn_dm with {train,val,test}.{source,target}.
# XSum: the preprocessed tarball is downloaded. CNN/DM, one of:
#   CNN_STORIES=<cnn_stories.tgz or cnn/stories folder> DM_STORIES=<dailymail_stories.tgz or folder>
#     (the DeepMind Q&A archives; the standard split lists are downloaded from abisee/cnn-dailymail)
#   CNN_DM_EXPORT=<folder of train/validation/test .jsonl or .parquet with article/highlights>
#     (e.g. exported from the Hugging Face "cnn_dailymail" 3.0.0 dataset)
# A complete output folder is left as it is.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ $# -ne 1 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; [ $# -eq 1 ] && exit 0 || exit 2; fi
DATA=$1
PYTHON=${PYTHON:-python3}
mkdir -p "$DATA"
complete() { for s in train val test; do [ -f "$1/$s.source" ] && [ -f "$1/$s.target" ] || return 1; done; }
stories_dir() {  # a folder as it is, a .tgz unpacked once under $DATA/raw
  if [ -d "$1" ]; then echo "$1"; return; fi
  [ -f "$1" ] || { echo "get_data.sh: $1 is neither a folder nor a file" >&2; exit 2; }
  local dest="$DATA/raw/$(basename "$1" .tgz)"
  if [ ! -f "$dest/.unpacked" ]; then mkdir -p "$dest"; tar -xzf "$1" -C "$dest"; touch "$dest/.unpacked"; fi
  find "$dest" -type d -name stories | head -n 1
}
if complete "$DATA/xsum"; then echo "xsum: complete, nothing to do"; else
  curl -fL -o "$DATA/xsum.tar.gz" https://s3.amazonaws.com/datasets.huggingface.co/summarization/xsum.tar.gz
  "$PYTHON" -m bart.data.prepare_summarization xsum --tarball "$DATA/xsum.tar.gz" --out "$DATA/xsum"
fi
if complete "$DATA/cnn_dm"; then echo "cnn_dm: complete, nothing to do"
elif [ -n "${CNN_STORIES:-}" ] && [ -n "${DM_STORIES:-}" ]; then
  LISTS="$DATA/raw/url_lists"; mkdir -p "$LISTS"
  for s in train val test; do
    [ -s "$LISTS/all_$s.txt" ] || curl -fL -o "$LISTS/all_$s.txt" \
      "https://raw.githubusercontent.com/abisee/cnn-dailymail/master/url_lists/all_$s.txt"
  done
  "$PYTHON" -m bart.data.prepare_summarization cnn_dm --url_lists "$LISTS" \
    --stories "$(stories_dir "$CNN_STORIES")" "$(stories_dir "$DM_STORIES")" --out "$DATA/cnn_dm"
elif [ -n "${CNN_DM_EXPORT:-}" ]; then
  "$PYTHON" -m bart.data.prepare_summarization hf --input "$CNN_DM_EXPORT" --out "$DATA/cnn_dm"
else
  echo "cnn_dm: set CNN_STORIES and DM_STORIES, or CNN_DM_EXPORT (see: bash scripts/get_data.sh --help)" >&2; exit 2
fi
