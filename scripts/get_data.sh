#!/usr/bin/env bash
# Download and prepare the summarization data: XSum and CNN/Daily Mail.
# usage: bash scripts/get_data.sh [<data folder>]   (default data: /workspace/bart/data in the container, as the reference)
# Writes <data folder>/xsum and <data folder>/cnn_dm with {train,val,test}.{source,target}.
# XSum: the preprocessed tarball is downloaded (XSUM_URL). CNN/DM: the DeepMind Q&A story archives
# (cnn_stories.tgz, dailymail_stories.tgz) are downloaded with gdown as the reference does, with the
# standard split lists of abisee/cnn-dailymail; or, instead:
#   CNN_STORIES=<cnn_stories.tgz or cnn/stories folder> DM_STORIES=<dailymail_stories.tgz or folder>
#   CNN_DM_MIRROR=<URL (https://, file://) holding the two archives and url_lists/all_{train,val,test}.txt>
#   CNN_DM_EXPORT=<folder of train/validation/test .jsonl or .parquet with article/highlights>
#     (e.g. exported from the Hugging Face "cnn_dailymail" 3.0.0 dataset)
# Downloads go to a temporary name first; a complete output folder is left as it is. Every value is
# checked before anything is downloaded (CHECK_ONLY=1: only that).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0; fi
[ $# -le 1 ] || { echo "$(basename "$0"): expected at most 1 argument (the data folder), got $# (--help: usage)" >&2; exit 2; }
DATA=${1:-data}
source scripts/params/common.sh  # the checks: every value before any download
check_value outdir "data folder ($([ $# -eq 1 ] && echo 1st || echo 'default data'))" "$DATA"
check_env url XSUM_URL
check_env url CNN_DM_MIRROR
check_env path CNN_STORIES "a cnn_stories.tgz or its stories folder"
check_env path DM_STORIES "a dailymail_stories.tgz or its stories folder"
check_env folder CNN_DM_EXPORT "a folder of train/validation/test .jsonl or .parquet files"
check_value command "PYTHON (environment, default python3)" "${PYTHON:-python3}"
checks_done
PYTHON=${PYTHON:-python3}
mkdir -p "$DATA"
XSUM_URL=${XSUM_URL:-https://s3.amazonaws.com/datasets.huggingface.co/summarization/xsum.tar.gz}
LISTS_URL=${CNN_DM_MIRROR:-https://raw.githubusercontent.com/abisee/cnn-dailymail/master}/url_lists
fetch() {  # URL FILE: download to FILE.partial, then rename (an interrupted download leaves no FILE)
  curl -fL --retry 3 -o "$2.partial" "$1" && mv "$2.partial" "$2"
}
fetch_stories() {  # cnn|dailymail FILE
  if [ -n "${CNN_DM_MIRROR:-}" ]; then fetch "$CNN_DM_MIRROR/$1_stories.tgz" "$2"; return; fi
  local id; case "$1" in cnn) id=0BwmD_VLjROrfTHk4NFg2SndKcjQ ;; dailymail) id=0BwmD_VLjROrfM1BxdkxVaTY2bWs ;; esac
  "$PYTHON" -c "import gdown" 2>/dev/null || "$PYTHON" -m pip install --quiet gdown
  "$PYTHON" -m gdown "$id" -O "$2.partial" && mv "$2.partial" "$2"
}
complete() { for s in train val test; do [ -f "$1/$s.source" ] && [ -f "$1/$s.target" ] || return 1; done; }
stories_dir() {  # a folder as it is, a .tgz unpacked once under $DATA/raw
  if [ -d "$1" ]; then echo "$1"; return; fi
  [ -f "$1" ] || { echo "get_data.sh: $1 is neither a folder nor a file" >&2; exit 2; }
  local dest="$DATA/raw/$(basename "$1" .tgz)"
  if [ ! -f "$dest/.unpacked" ]; then mkdir -p "$dest"; tar -xzf "$1" -C "$dest"; touch "$dest/.unpacked"; fi
  find "$dest" -type d -name stories | head -n 1
}
if complete "$DATA/xsum"; then echo "xsum: complete, nothing to do"; else
  [ -s "$DATA/xsum.tar.gz" ] || fetch "$XSUM_URL" "$DATA/xsum.tar.gz"
  "$PYTHON" -m bart.data.prepare_summarization xsum --tarball "$DATA/xsum.tar.gz" --out "$DATA/xsum"
fi
if complete "$DATA/cnn_dm"; then echo "cnn_dm: complete, nothing to do"
elif [ -n "${CNN_DM_EXPORT:-}" ]; then
  "$PYTHON" -m bart.data.prepare_summarization hf --input "$CNN_DM_EXPORT" --out "$DATA/cnn_dm"
else
  mkdir -p "$DATA/raw"
  if [ -z "${CNN_STORIES:-}" ]; then
    CNN_STORIES="$DATA/raw/cnn_stories.tgz"; [ -s "$CNN_STORIES" ] || fetch_stories cnn "$CNN_STORIES"
  fi
  if [ -z "${DM_STORIES:-}" ]; then
    DM_STORIES="$DATA/raw/dailymail_stories.tgz"; [ -s "$DM_STORIES" ] || fetch_stories dailymail "$DM_STORIES"
  fi
  LISTS="$DATA/raw/url_lists"; mkdir -p "$LISTS"
  for s in train val test; do
    [ -s "$LISTS/all_$s.txt" ] || fetch "$LISTS_URL/all_$s.txt" "$LISTS/all_$s.txt"
  done
  "$PYTHON" -m bart.data.prepare_summarization cnn_dm --url_lists "$LISTS" \
    --stories "$(stories_dir "$CNN_STORIES")" "$(stories_dir "$DM_STORIES")" --out "$DATA/cnn_dm"
fi
