#!/usr/bin/env bash
# Inference throughput and latency of run_eval.py for every batch size, GPU count and precision this machine has,
# or one CPU process in fp32 where there is no GPU: one table, a row per run.
# usage: bash scripts/run_inference_benchmark.sh [<predict batch size(s)> <eval beams> <max source length>
#          <max target length> <model name or path> <data dir> <config path>]
# Any leading part may be given; the rest take the reference's defaults:
#   "1 4 8 16 32 64 128" 6 1024 60 facebook/bart-large data/xsum configs/config_xsum.json
# The first value is one batch size or a list ("1 4 8" or 1,4,8); each is capped at the split's size (N_OBS, or
# the split's examples), sizes that become equal run once. The model's architecture (Pre-LN, sizes) comes from the
# checkpoint (its stored config, a folder's config.json, else its tensors); the config gives the generation
# settings. The data dir holds test.source/test.target. Every value is checked before anything starts
# (CHECK_ONLY=1: only that).
# Environment: TOKENIZER (the model's own), N_OBS (examples per run; default -1: the whole split, as the
# reference), TYPE_PATH (test),
# NUM_GPUS and PRECISIONS as in run_training_benchmark.sh. Where: OUTPUT_DIR, else RESULTS_DIR (the
# reference's name: the benchmark's folder), else results/bart_pyt_inference_benchmark_${DATESTAMP}. A run
# folder per measurement ({processes}{gpu|cpu}_{precision}_bs{batch}; one already there from an earlier run into
# the same folder is kept and the new one is named ..._run2, _run3, ...); inference_benchmark.log holds the
# table of every run folder there, earlier runs' rows included.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
usage() { sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then usage; exit 0; fi
[ $# -le 7 ] || { echo "run_inference_benchmark.sh: expected at most 7 arguments, got $# (--help: usage)" >&2; exit 2; }
source scripts/params/common.sh
source scripts/params/benchmark_common.sh
ARG_NAMES=("predict batch size(s)" "eval beams" "max source length" "max target length" model "data dir" "config path")
ARG_KINDS=(count_list count count count model folder file)
PRED_BS=${1:-"1 4 8 16 32 64 128"} EVAL_BEAMS=${2:-6} MAX_SOURCE_LEN=${3:-1024} MAX_TARGET_LEN=${4:-60} MODEL=${5:-facebook/bart-large}
DATA_DIR=${6:-data/xsum} CONFIG_PATH=${7:-configs/config_xsum.json}
check_inputs $# "$PRED_BS" "$EVAL_BEAMS" "$MAX_SOURCE_LEN" "$MAX_TARGET_LEN" "$MODEL" "$DATA_DIR" "$CONFIG_PATH"
check_env word TYPE_PATH
TYPE_PATH=${TYPE_PATH:-test}
check_data_dir "data dir" "$DATA_DIR" "$TYPE_PATH"
check_env count_or_all N_OBS
check_benchmark_env  # the tokenizer, the output folders, the launch and the sweep (benchmark_common.sh)
start_sweep inference_benchmark  # PYTHON, the sweep's counts and precisions, RESULTS made
N_OBS_FLAG=(); [ "${N_OBS:--1}" = -1 ] || N_OBS_FLAG=(--n_obs "$N_OBS")  # -1 (the default): the whole split
# the split's size (N_OBS at most), and each batch size capped at it (sorted, each once)
EXAMPLES=$(awk 'BEGIN { RS = "\r\n|\n|\r" } END { print NR }' "$DATA_DIR/$TYPE_PATH.source")  # lines, as bart.files.text_lines
[ "${N_OBS:--1}" = -1 ] || [ "$N_OBS" -ge "$EXAMPLES" ] || EXAMPLES=$N_OBS
BATCH_SIZES=(); CAPPED=()
for bs in ${PRED_BS//,/ }; do
  bs=$((10#$bs))
  if [ "$EXAMPLES" -gt 0 ] && [ "$bs" -gt "$EXAMPLES" ]; then CAPPED+=("$bs"); bs=$EXAMPLES; fi
  BATCH_SIZES+=("$bs")
done
read -r -a BATCH_SIZES <<< "$(printf '%s\n' "${BATCH_SIZES[@]}" | sort -n -u | tr '\n' ' ')"
[ ${#CAPPED[@]} -eq 0 ] || echo "note: batch size(s) ${CAPPED[*]} above the split's $EXAMPLES examples run as $EXAMPLES" >&2
new_run_folder() {  # NAME: $RESULTS/NAME, or NAME_run2, _run3, ... where an earlier run's folder is (kept, not replaced)
  local run="$RESULTS/$1" k=2
  while [ -e "$run" ]; do run="$RESULTS/$1_run$k"; k=$((k + 1)); done
  echo "$run"
}
for n in "${GPU_COUNTS[@]}"; do
  for prec in "${PRECISION_LIST[@]}"; do
    precision_flags "$prec"
    for bs in "${BATCH_SIZES[@]}"; do
      run=$(new_run_folder "${n}${DEVICE_KIND}_${prec}_bs${bs}")
      mkdir -p "$run"
      echo "== $n $DEVICE_KIND process(es), $prec, batch $bs, beams $EVAL_BEAMS: $run"
      launcher "$n" run_eval.py "$MODEL" "$CONFIG_PATH" "$DATA_DIR" "$run" --bs "$bs" --eval_beams "$EVAL_BEAMS" \
        --max_source_length "$MAX_SOURCE_LEN" --max_target_length "$MAX_TARGET_LEN" "${N_OBS_FLAG[@]+"${N_OBS_FLAG[@]}"}" \
        --type_path "$TYPE_PATH" "${PREC_FLAGS[@]}" \
        --json-summary "$run/dllogger.json" > "$run/joblog.log" 2>&1 || { tail -n 20 "$run/joblog.log" >&2; exit 1; }
    done
  done
done
"$PYTHON" -m utils.benchmark_table inference "$RESULTS" | tee "$RESULTS/inference_benchmark.log"
echo "results: $RESULTS/inference_benchmark.log"
