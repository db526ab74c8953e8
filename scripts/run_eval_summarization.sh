#!/usr/bin/env bash
# Evaluate a fine-tuned checkpoint: generations, ROUGE, latency and throughput.
#
# usage: bash scripts/run_eval_summarization.sh INIT_CKPT [PRED_BS NUM_GPU PRECISION EVAL_BEAMS
#   MAX_SOURCE_LEN MAX_TARGET_LEN DATA_DIR CONFIG_PATH PRELN] [run_eval.py flags]
# defaults (the reference script's): 96 8 fp16 4 1024 142 data/cnn_dm configs/config.json auto, NUM_GPU 8
# capped at the GPUs present (1 process without a GPU); PRELN auto: as the checkpoint is (the reference's
# true is the same for its Pre-LN checkpoints). Arguments from the first one starting with -- go to
# run_eval.py. The reference README's example without NUM_GPU (INIT_CKPT PRED_BS PRECISION EVAL_BEAMS ...)
# is read as NUM_GPU 1.
# example: bash scripts/run_eval_summarization.sh results/final_step.ckpt 8 1 bf16 4 1024 142 data/cnn_dm configs/config.json true
# INIT_CKPT: a .ckpt, a Hugging Face folder or hub id. The model's architecture (Pre-LN, sizes) comes from
# the checkpoint; CONFIG_PATH gives the generation settings. PRELN: true | false (checked against the
# checkpoint) | auto (the default: as the checkpoint is). Every value is checked before anything starts
# (CHECK_ONLY=1: check, start nothing).
# Where: OUTPUT_DIR, else RESULTS_DIR (the reference's name: the run's folder), else
# results/bart_pyt_inference_${DATESTAMP}; relative paths are read from the repository root.
# Environment: TOKENIZER, TYPE_PATH (test), N_OBS (-1 or unset: the whole split), EXTRA_ARGS (more run_eval.py flags), CPU_PROCESSES
# (processes without a GPU), NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT (multi-node).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
usage() { sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then usage; exit 0; fi
source scripts/params/common.sh
[ "${1:-}" != "$PRESET_ERROR" ] && [ "${2:-}" != "$PRESET_ERROR" ] || exit 2  # a preset said what is wrong
split_positional 10 "$@"
check_no_extra_values 10 run_eval.py
set -- "${POSITIONAL[@]+"${POSITIONAL[@]}"}"
if [ $# -lt 1 ]; then echo "run_eval_summarization.sh: expected at least INIT_CKPT, got nothing" >&2; usage >&2; exit 2; fi
case "${3:-}" in fp16|bf16|tf32|fp32)  # the reference README's order, without NUM_GPU
  [ $# -le 9 ] || die "'$3' in the NUM_GPU place (3rd) is a precision, but with 10 values NUM_GPU cannot be left out; give NUM_GPU 3rd"
  echo "run_eval_summarization.sh: '$3' in the NUM_GPU place is a precision: reading the arguments without NUM_GPU (1 process)" >&2
  set -- "$1" "$2" 1 "${@:3}" ;;
esac
ARG_NAMES=(INIT_CKPT PRED_BS NUM_GPU PRECISION EVAL_BEAMS MAX_SOURCE_LEN MAX_TARGET_LEN DATA_DIR CONFIG_PATH PRELN)
ARG_KINDS=(model count count precision count count count folder file preln)
GPUS_HERE=$(gpus_present); DEFAULT_GPUS=$(( GPUS_HERE == 0 ? 1 : (GPUS_HERE < 8 ? GPUS_HERE : 8) ))
INIT_CKPT=$1; PRED_BS=${2:-96}; NUM_GPU=${3:-$DEFAULT_GPUS}; PRECISION=${4:-fp16}; EVAL_BEAMS=${5:-4}
MAX_SOURCE_LEN=${6:-1024}; MAX_TARGET_LEN=${7:-142}; DATA_DIR=${8:-data/cnn_dm}; CONFIG_PATH=${9:-configs/config.json}
PRELN=${10:-auto}
check_inputs $# "$INIT_CKPT" "$PRED_BS" "$NUM_GPU" "$PRECISION" "$EVAL_BEAMS" "$MAX_SOURCE_LEN" "$MAX_TARGET_LEN" \
  "$DATA_DIR" "$CONFIG_PATH" "$PRELN"
check_env word TYPE_PATH
check_data_dir DATA_DIR "$DATA_DIR" "${TYPE_PATH:-test}"
check_env count_or_all N_OBS
check_env model TOKENIZER
check_env outdir OUTPUT_DIR
check_env outdir RESULTS_DIR
check_launch_env
check_gpus "$NUM_GPU" "NUM_GPU (3rd)"
checks_done
OUTPUT_DIR=${OUTPUT_DIR:-${RESULTS_DIR:-results/bart_pyt_inference_$(date +'%y%m%d%H%M%S')}}
PYTHON=${PYTHON:-python3}
precision_flags "$PRECISION"
preln_flag "$PRELN"
mkdir -p "$OUTPUT_DIR"
N_OBS_FLAG=(); [ -n "${N_OBS:-}" ] && [ "$N_OBS" != -1 ] && N_OBS_FLAG=(--n_obs "$N_OBS")  # -1: the whole split
launcher "$NUM_GPU" run_eval.py "$INIT_CKPT" "$CONFIG_PATH" "$DATA_DIR" "$OUTPUT_DIR" --type_path "${TYPE_PATH:-test}" \
  --bs "$PRED_BS" --eval_beams "$EVAL_BEAMS" --max_source_length "$MAX_SOURCE_LEN" --max_target_length "$MAX_TARGET_LEN" \
  "${PREC_FLAGS[@]}" "${PRELN_FLAG[@]+"${PRELN_FLAG[@]}"}" "${N_OBS_FLAG[@]+"${N_OBS_FLAG[@]}"}" \
  --json-summary "$OUTPUT_DIR/dllogger.json" ${EXTRA_ARGS:-} "${PASS[@]+"${PASS[@]}"}" 2>&1 | tee "$OUTPUT_DIR/joblog.log"
