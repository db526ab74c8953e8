#!/usr/bin/env bash
# Evaluate a fine-tuned checkpoint: generations, ROUGE, latency and throughput.
#
# usage: bash scripts/run_eval_summarization.sh INIT_CKPT PRED_BS NUM_GPU PRECISION EVAL_BEAMS
#   MAX_SOURCE_LEN MAX_TARGET_LEN DATA_DIR CONFIG_PATH PRELN
# example: bash scripts/run_eval_summarization.sh results/_epoch1_step2000.ckpt 8 1 bf16 4 1024 142 data/cnn_dm configs/config.json true
# Environment: OUTPUT_DIR (results/bart_pyt_inference_${DATESTAMP}), TOKENIZER, TYPE_PATH (test), N_OBS.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
usage() { sed -n '2,8p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then usage; exit 0; fi
if [ $# -ne 10 ]; then echo "run_eval_summarization.sh: expected 10 arguments, got $#" >&2; usage >&2; exit 2; fi
INIT_CKPT=$1; PRED_BS=$2; NUM_GPU=$3; PRECISION=$4; EVAL_BEAMS=$5
MAX_SOURCE_LEN=$6; MAX_TARGET_LEN=$7; DATA_DIR=$8; CONFIG_PATH=$9; PRELN=${10}
PYTHON=${PYTHON:-python3}
source scripts/params/common.sh
check_inputs "$DATA_DIR" "$CONFIG_PATH" "$NUM_GPU" "$PRECISION" "$PRELN" "${TYPE_PATH:-test}"
check_model run_eval_summarization.sh checkpoint "$INIT_CKPT"
OUTPUT_DIR=${OUTPUT_DIR:-results/bart_pyt_inference_$(date +'%y%m%d%H%M%S')}
mkdir -p "$OUTPUT_DIR"
N_OBS_FLAG=(); [ -n "${N_OBS:-}" ] && N_OBS_FLAG=(--n_obs "$N_OBS")
EVAL_PREC=(); case "$PRECISION" in fp16) EVAL_PREC=(--fp16) ;; bf16) EVAL_PREC=(--bf16) ;; esac
launcher "$NUM_GPU" run_eval.py "$INIT_CKPT" "$CONFIG_PATH" "$DATA_DIR" "$OUTPUT_DIR" --type_path "${TYPE_PATH:-test}" \
  --bs "$PRED_BS" --eval_beams "$EVAL_BEAMS" --max_source_length "$MAX_SOURCE_LEN" --max_target_length "$MAX_TARGET_LEN" \
  "${EVAL_PREC[@]}" "$PRELN_FLAG" "${N_OBS_FLAG[@]}" --tokenizer "${TOKENIZER:-facebook/bart-large}" \
  --json-summary "$OUTPUT_DIR/dllogger.json" 2>&1 | tee "$OUTPUT_DIR/joblog.log"
