#!/usr/bin/env bash
# Fine-tuning stability: scripts/run_summarization.sh once per seed (fine-tune, then evaluate on the test
# split), then ROUGE per seed with its mean and standard deviation: the seed README's "training stability
# test" (5 seeds, XSum, 8 GPUs).
# usage: bash scripts/run_stability_test.sh [N_SEEDS] [run_summarization.sh's values and flags]
# N_SEEDS (a whole number first; default 5): seeds 1..N (SEEDS="3 7 11" names them instead). The rest goes to every
# run_summarization.sh run as given, e.g. a preset:
#   bash scripts/run_stability_test.sh 5 $(source scripts/params/xsum_params.sh && dgxa100_8gpu_bf16)
# Where: OUTPUT_DIR, else RESULTS_DIR, else results/bart_pyt_stability_${DATESTAMP}; seed_{N}/ per run
# (run again: each seed's run resumes or is already done), stability.log the table. Every value is
# checked before anything starts (CHECK_ONLY=1: only that; run_summarization.sh checks its own).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
usage() { sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then usage; exit 0; fi
source scripts/params/common.sh
N_SEEDS=5
if [[ "${1:-}" =~ ^[0-9]+$ ]]; then N_SEEDS=$1; shift; fi  # else every value is run_summarization.sh's
check_value count "N_SEEDS (1st)" "$N_SEEDS"
check_list count0 SEEDS
read -r -a SEED_LIST <<< "${SEEDS:-$(seq -s ' ' 1 "$N_SEEDS")}"
check_env outdir OUTPUT_DIR
check_env outdir RESULTS_DIR
RESULTS=${OUTPUT_DIR:-${RESULTS_DIR:-results/bart_pyt_stability_$(date +'%y%m%d%H%M%S')}}
# the values and flags are run_summarization.sh's: it checks them (nothing started) before the first seed runs
CHECK_ONLY=1 OUTPUT_DIR="$RESULTS/seed_${SEED_LIST[0]}" bash scripts/run_summarization.sh "$@" >/dev/null
checks_done
mkdir -p "$RESULTS"
for seed in "${SEED_LIST[@]}"; do
  echo "== seed $seed: $RESULTS/seed_$seed"
  SEED=$seed OUTPUT_DIR="$RESULTS/seed_$seed" bash scripts/run_summarization.sh "$@" > "$RESULTS/seed_$seed.log" 2>&1 ||
    { tail -n 20 "$RESULTS/seed_$seed.log" >&2; exit 1; }
done
"${PYTHON:-python3}" -m utils.benchmark_table stability "$RESULTS" | tee "$RESULTS/stability.log"
echo "results: $RESULTS/stability.log"
