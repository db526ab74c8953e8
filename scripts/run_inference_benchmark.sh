#!/usr/bin/env bash
# Inference throughput and latency of run_eval.py for every GPU count and precision this machine has,
# or one CPU process in fp32 where there is no GPU.
# usage: bash scripts/run_inference_benchmark.sh [<predict batch size> <eval beams> <max source length>
#          <max target length> <model name or path> <data dir> <config path>]
# Any leading part may be given; the rest take the reference's defaults:
#   128 6 1024 60 facebook/bart-large data/xsum configs/config_xsum.json
# The model's architecture (Pre-LN, sizes) comes from the checkpoint (its stored config, a folder's
# config.json, else its tensors); the config gives the generation settings. The data dir holds
# test.source/test.target. Every value is checked before anything starts (CHECK_ONLY=1: only that).
# Environment: TOKENIZER (the model's own), N_OBS (examples per run; default -1: the whole split, as the
# reference), TYPE_PATH (test),
# NUM_GPUS and PRECISIONS as in run_training_benchmark.sh. Where: OUTPUT_DIR, else RESULTS_DIR (the
# reference's name: the benchmark's folder), else results/bart_pyt_inference_benchmark_${DATESTAMP}.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
usage() { sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then usage; exit 0; fi
[ $# -le 7 ] || { echo "run_inference_benchmark.sh: expected at most 7 arguments, got $# (--help: usage)" >&2; exit 2; }
source scripts/params/common.sh
source scripts/params/benchmark_common.sh
ARG_NAMES=("predict batch size" "eval beams" "max source length" "max target length" model "data dir" "config path")
ARG_KINDS=(count count count count model folder file)
PRED_BS=${1:-128} EVAL_BEAMS=${2:-6} MAX_SOURCE_LEN=${3:-1024} MAX_TARGET_LEN=${4:-60} MODEL=${5:-facebook/bart-large}
DATA_DIR=${6:-data/xsum} CONFIG_PATH=${7:-configs/config_xsum.json}
check_inputs $# "$PRED_BS" "$EVAL_BEAMS" "$MAX_SOURCE_LEN" "$MAX_TARGET_LEN" "$MODEL" "$DATA_DIR" "$CONFIG_PATH"
check_env word TYPE_PATH
TYPE_PATH=${TYPE_PATH:-test}
check_data_dir "data dir" "$DATA_DIR" "$TYPE_PATH"
check_env count_or_all N_OBS
check_benchmark_env  # the tokenizer, the output folders, the launch and the sweep (benchmark_common.sh)
start_sweep inference_benchmark  # PYTHON, the sweep's counts and precisions, RESULTS made
N_OBS_FLAG=(); [ "${N_OBS:--1}" = -1 ] || N_OBS_FLAG=(--n_obs "$N_OBS")  # -1 (the default): the whole split
for n in "${GPU_COUNTS[@]}"; do
  for prec in "${PRECISION_LIST[@]}"; do
    precision_flags "$prec"
    run="$RESULTS/${n}${DEVICE_KIND}_${prec}"
    mkdir -p "$run"
    echo "== $n $DEVICE_KIND process(es), $prec, batch $PRED_BS, beams $EVAL_BEAMS"
    launcher "$n" run_eval.py "$MODEL" "$CONFIG_PATH" "$DATA_DIR" "$run" --bs "$PRED_BS" --eval_beams "$EVAL_BEAMS" \
      --max_source_length "$MAX_SOURCE_LEN" --max_target_length "$MAX_TARGET_LEN" "${N_OBS_FLAG[@]+"${N_OBS_FLAG[@]}"}" \
      --type_path "$TYPE_PATH" "${PREC_FLAGS[@]}" \
      --json-summary "$run/dllogger.json" > "$run/joblog.log" 2>&1 || { tail -n 20 "$run/joblog.log" >&2; exit 1; }
  done
done
"$PYTHON" -m utils.benchmark_table inference "$RESULTS" | tee "$RESULTS/inference_benchmark.log"
echo "results: $RESULTS/inference_benchmark.log"
