#!/usr/bin/env bash
# Evaluate a fine-tuned checkpoint: generations, ROUGE, latency and throughput.
#
# usage: bash scripts/run_eval_summarization.sh INIT_CKPT [PRED_BS NUM_GPU PRECISION EVAL_BEAMS
#   MAX_SOURCE_LEN MAX_TARGET_LEN DATA_DIR CONFIG_PATH PRELN] [run_eval.py flags]
# defaults: 8 1 bf16 4 1024 142 data/cnn_dm configs/config.json true; arguments from the first one
# starting with -- go to run_eval.py. The reference README's example without NUM_GPU
# (INIT_CKPT PRED_BS PRECISION EVAL_BEAMS ...) is read as NUM_GPU 1.
# example: bash scripts/run_eval_summarization.sh results/final_step.ckpt 8 1 bf16 4 1024 142 data/cnn_dm configs/config.json true
# INIT_CKPT: a .ckpt, a Hugging Face folder or hub id.
# Environment: OUTPUT_DIR (results/bart_pyt_inference_${DATESTAMP}), TOKENIZER, TYPE_PATH (test), N_OBS,
# EXTRA_ARGS (more run_eval.py flags), CPU_PROCESSES (processes without a GPU).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
usage() { sed -n '2,11p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then usage; exit 0; fi
source scripts/params/common.sh
split_positional 10 "$@"
set -- "${POSITIONAL[@]+"${POSITIONAL[@]}"}"
if [ $# -lt 1 ]; then echo "run_eval_summarization.sh: expected at least INIT_CKPT, got nothing" >&2; usage >&2; exit 2; fi
case "${3:-}" in fp16|bf16|tf32|fp32)  # the reference README's order, without NUM_GPU
  echo "run_eval_summarization.sh: '$3' in the NUM_GPU place is a precision: reading the arguments without NUM_GPU (1 process)" >&2
  set -- "$1" "$2" 1 "${@:3}" ;;
esac
INIT_CKPT=$1; PRED_BS=${2:-8}; NUM_GPU=${3:-1}; PRECISION=${4:-bf16}; EVAL_BEAMS=${5:-4}
MAX_SOURCE_LEN=${6:-1024}; MAX_TARGET_LEN=${7:-142}; DATA_DIR=${8:-data/cnn_dm}; CONFIG_PATH=${9:-configs/config.json}
PRELN=${10:-true}
PYTHON=${PYTHON:-python3}
check_inputs "$DATA_DIR" "$CONFIG_PATH" "$NUM_GPU" "$PRECISION" "$PRELN" "${TYPE_PATH:-test}"
check_model run_eval_summarization.sh checkpoint "$INIT_CKPT"
OUTPUT_DIR=${OUTPUT_DIR:-results/bart_pyt_inference_$(date +'%y%m%d%H%M%S')}
mkdir -p "$OUTPUT_DIR"
N_OBS_FLAG=(); [ -n "${N_OBS:-}" ] && N_OBS_FLAG=(--n_obs "$N_OBS")
EVAL_PREC=(); case "$PRECISION" in fp16) EVAL_PREC=(--fp16) ;; bf16) EVAL_PREC=(--bf16) ;; esac
launcher "$NUM_GPU" run_eval.py "$INIT_CKPT" "$CONFIG_PATH" "$DATA_DIR" "$OUTPUT_DIR" --type_path "${TYPE_PATH:-test}" \
  --bs "$PRED_BS" --eval_beams "$EVAL_BEAMS" --max_source_length "$MAX_SOURCE_LEN" --max_target_length "$MAX_TARGET_LEN" \
  "${EVAL_PREC[@]}" "$PRELN_FLAG" "${N_OBS_FLAG[@]}" \
  --json-summary "$OUTPUT_DIR/dllogger.json" ${EXTRA_ARGS:-} "${PASS[@]+"${PASS[@]}"}" 2>&1 | tee "$OUTPUT_DIR/joblog.log"
