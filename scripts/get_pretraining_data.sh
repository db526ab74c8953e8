#!/usr/bin/env bash
# Download the pretraining corpora with LDDL's downloaders: Wikipedia (en), Common Crawl news and
# OpenWebText, into <data folder>/{wikipedia,common_crawl,openwebtext}. 200 GB+, a day or more.
# usage: bash scripts/get_pretraining_data.sh [<data folder>]   (default data, as the reference's /workspace/bart/data)
# Environment: CORPORA ("wikipedia common_crawl openwebtext"), CC_START/CC_END (Common Crawl news
# date window, default 2016-09-01..2019-02-28; a shorter window downloads less), NPROC (processes),
# WIKIPEDIA_DUMP (an enwiki-*-pages-articles.xml.bz2 already downloaded: extracted, not downloaded again).
# Every value is checked before anything is downloaded (CHECK_ONLY=1: only that).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0; fi
[ $# -le 1 ] || { echo "$(basename "$0"): expected at most 1 argument (the data folder), got $# (--help: usage)" >&2; exit 2; }
DATA=${1:-data}
source scripts/params/common.sh  # the checks: every value before any download
check_value outdir "data folder ($([ $# -eq 1 ] && echo 1st || echo 'default data'))" "$DATA"
check_list corpus CORPORA
check_env count NPROC
check_env date CC_START
check_env date CC_END
CC_START=${CC_START:-2016-09-01}; CC_END=${CC_END:-2019-02-28}
[[ ! "$CC_END" < "$CC_START" ]] || die "CC_END (environment) '$CC_END' is before CC_START '$CC_START'"
check_env file WIKIPEDIA_DUMP "an enwiki-*-pages-articles.xml.bz2"
check_value command "PYTHON (environment, default python3)" "${PYTHON:-python3}"
checks_done
NPROC=${NPROC:-$(nproc)}; PYTHON=${PYTHON:-python3}
mkdir -p "$DATA"
for corpus in ${CORPORA:-wikipedia common_crawl openwebtext}; do
  if [ -f "$DATA/$corpus/.complete" ]; then echo "$corpus: complete, nothing to do"; continue; fi
  echo "== $corpus → $DATA/$corpus"
  case "$corpus" in
    wikipedia)
      if [ -n "${WIKIPEDIA_DUMP:-}" ]; then  # a dump already at hand: extract it, download nothing
        [ -s "$WIKIPEDIA_DUMP" ] || { echo "get_pretraining_data.sh: WIKIPEDIA_DUMP=$WIKIPEDIA_DUMP is empty" >&2; exit 2; }
        mkdir -p "$DATA/wikipedia"; cp "$WIKIPEDIA_DUMP" "$DATA/wikipedia/wikicorpus-en.xml.bz2"
        download_wikipedia --outdir "$DATA/wikipedia" --langs en --num-processes "$NPROC" --no-download
      else
        download_wikipedia --outdir "$DATA/wikipedia" --langs en --num-processes "$NPROC"
      fi ;;
    common_crawl)
      "$PYTHON" -c "import newsplease" 2>/dev/null || "$PYTHON" -m pip install --quiet news-please
      download_common_crawl --outdir "$DATA/common_crawl" --warc-files-start-date "$CC_START" \
        --warc-files-end-date "$CC_END" --start-date "$CC_START" --end-date "$CC_END" \
        --number-of-extraction-processes "$NPROC" ;;
    openwebtext)
      "$PYTHON" -c "import gdown" 2>/dev/null || "$PYTHON" -m pip install --quiet gdown
      download_open_webtext --outdir "$DATA/openwebtext" --shard-num-processes "$NPROC" ;;
    *) echo "unknown corpus '$corpus' in CORPORA" >&2; exit 2 ;;
  esac
  touch "$DATA/$corpus/.complete"
done
