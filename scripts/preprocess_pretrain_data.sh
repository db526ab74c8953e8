#!/usr/bin/env bash
# LDDL preprocessing and balancing of the pretraining corpora for lengths 128 and 512:
# <data folder>/pretrain_lddl_128 and <data folder>/pretrain_lddl_512.
# usage: bash scripts/preprocess_pretrain_data.sh [<wikipedia> <common crawl> <openwebtext> <data folder>]
# (a leading part; defaults: get_pretraining_data.sh's data/wikipedia data/common_crawl data/openwebtext data)
# A corpus folder that does not exist is skipped (at least one must exist). Runs the dask pipeline on
# MPI when mpirun and dask-mpi are available and NPROC >= 3 (then balanced in one process), on a
# local dask cluster otherwise.
# Environment: NPROC (processes, default all cores), NUM_SHARDS (256; a multiple of GPUs x workers).
# Every value is checked before anything starts (CHECK_ONLY=1: only that).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0; fi
if [ $# -gt 4 ]; then echo "preprocess_pretrain_data.sh: expected at most 4 arguments, got $# (--help: usage)" >&2; exit 2; fi
WIKI=${1:-data/wikipedia}; CC=${2:-data/common_crawl}; OWT=${3:-data/openwebtext}; DATA=${4:-data}
source scripts/params/common.sh  # the checks
check_value outdir "data folder (4th$([ $# -ge 4 ] || echo ', not given: the default'))" "$DATA"
check_env count NPROC
check_env count NUM_SHARDS
check_value command "PYTHON (environment, default python3)" "${PYTHON:-python3}"
[ -d "$WIKI" ] || [ -d "$CC" ] || [ -d "$OWT" ] || die "none of the three corpora exists ($WIKI, $CC, $OWT)"
checks_done
NPROC=${NPROC:-$(nproc)}; PYTHON=${PYTHON:-python3}
ARGS=()
[ -d "$WIKI" ] && ARGS+=(--wikipedia "$WIKI") || echo "wikipedia: $WIKI not found, skipped"
[ -d "$CC" ] && ARGS+=(--common_crawl "$CC") || echo "common crawl: $CC not found, skipped"
[ -d "$OWT" ] && ARGS+=(--open_webtext "$OWT") || echo "openwebtext: $OWT not found, skipped"
[ ${#ARGS[@]} -gt 0 ] || { echo "preprocess_pretrain_data.sh: none of the three corpora exists" >&2; exit 2; }
# "$DATA" is made by bart.data.preprocess once it found text in the corpora: a refused run leaves nothing behind
if [ "$NPROC" -ge 3 ] && command -v mpirun >/dev/null && "$PYTHON" -c "import dask_mpi" 2>/dev/null; then
  echo "running the dask pipeline on MPI with $NPROC ranks, then balancing in one process"
  for LENGTH in 128 512; do  # dask-mpi starts once per mpirun: one length per run
    mpirun -np "$NPROC" "$PYTHON" -m bart.data.preprocess "${ARGS[@]}" --out "$DATA" --seq_lengths "$LENGTH" \
      --num_shards "${NUM_SHARDS:-256}" --schedule mpi --stage preprocess
  done
  "$PYTHON" -m bart.data.preprocess --out "$DATA" --seq_lengths 128 512 --num_shards "${NUM_SHARDS:-256}" --stage balance
else
  echo "running on a local dask cluster with $NPROC workers"
  "$PYTHON" -m bart.data.preprocess "${ARGS[@]}" --out "$DATA" --seq_lengths 128 512 \
    --num_shards "${NUM_SHARDS:-256}" --workers "$NPROC" --schedule local
fi
