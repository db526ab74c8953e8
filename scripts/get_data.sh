#!/usr/bin/env bash
# Download and prepare the summarization data: XSum (tarball) and CNN/DM (Hugging Face export).
# usage: bash scripts/get_data.sh <data folder>
# Writes <data folder>/xsum and <data folder>/cnn_dm with {train,val,test}.{source,target}.
# CNN/DM: give CNN_DM_EXPORT=<folder of train/validation/test .jsonl or .parquet with article/highlights>
# (e.g. exported from the Hugging Face "cnn_dailymail" 3.0.0 dataset); a complete folder is skipped.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ $# -ne 1 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; [ $# -eq 1 ] && exit 0 || exit 2; fi
DATA=$1
PYTHON=${PYTHON:-python3}
mkdir -p "$DATA"
complete() { for s in train val test; do [ -f "$1/$s.source" ] && [ -f "$1/$s.target" ] || return 1; done; }
if complete "$DATA/xsum"; then echo "xsum: complete, nothing to do"; else
  curl -fL -o "$DATA/xsum.tar.gz" https://s3.amazonaws.com/datasets.huggingface.co/summarization/xsum.tar.gz
  "$PYTHON" -m bart.data.prepare_summarization xsum --tarball "$DATA/xsum.tar.gz" --out "$DATA/xsum"
fi
if complete "$DATA/cnn_dm"; then echo "cnn_dm: complete, nothing to do"
elif [ -n "${CNN_DM_EXPORT:-}" ]; then
  "$PYTHON" -m bart.data.prepare_summarization hf --input "$CNN_DM_EXPORT" --out "$DATA/cnn_dm"
else
  echo "cnn_dm: set CNN_DM_EXPORT to a Hugging Face export of cnn_dailymail 3.0.0 (see this script's header)" >&2; exit 2
fi
