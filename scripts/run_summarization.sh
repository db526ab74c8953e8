#!/usr/bin/env bash
# Fine-tune BART for summarization, then evaluate the result on the test split.
#
# usage: bash scripts/run_summarization.sh [DATA_DIR CKPT_PATH CONFIG_PATH NUM_GPU LR BS ACCUM PREC
#   TRAIN_STEPS WARMUP_STEPS MAX_SOURCE_LEN MAX_TARGET_LEN EVAL_BEAMS EVAL_BS PRED_BS PRELN] [finetune.py flags]
# Any leading part of the 16 values may be given; the rest take these defaults:
#   data/cnn_dm/ data/nvidia_pretrained/bart_large/ configs/config.json 8 1.25e-4 40 1 bf16
#   2000 50 1024 142 4 128 64 true   (the reference script's; its README's example leaves out PRED_BS)
# Arguments after the 16th (flags, starting with --) go to finetune.py. Every value is checked before
# anything starts: a bad one is one line and exit 2 (CHECK_ONLY=1: check, start nothing).
# CKPT_PATH: a .ckpt, a folder holding checkpoints, a Hugging Face folder or hub id (never a silent fallback).
# PREC: fp8 | fp16 | bf16 | tf32 | fp32 (fp32: no TF32 products, in training and in the evaluation; fp8: float8
# linear layers in training, CUDA capability >= 8.9, and the evaluation in bf16).
# PRELN: true | false (must match the checkpoint). As the reference, fine-tuning passes --attention_dropout 0.1
# (the configs keep bart-large's 0.0, which evaluation and other uses of the config see).
# EVAL_CHECKPOINT: final (the default, the reference's: final_step.ckpt) | best (the best validation
# checkpoint, best_{metric}_step{N}.ckpt, as transformers' load_best_model_at_end; needs N_VAL not 0).
# Where: OUTPUT_DIR, else RESULTS_DIR (the reference's name: the run's folder), else
# results/bart_pyt_${DATESTAMP}; relative paths are read from the repository root.
# Environment: TOKENIZER, SEED (42), N_VAL (100; -1: all), VAL_CHECK_INTERVAL (0: validate at the end),
# EXTRA_ARGS (more finetune.py flags, after the script's own: they win), EVAL_EXTRA_ARGS (more run_eval.py
# flags), CPU_PROCESSES (processes without a GPU), NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT (multi-node),
# MAX_RESTARTS (0; torchrun restarts after a failure, each resuming from the newest checkpoint).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
usage() { sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then usage; exit 0; fi
source scripts/params/common.sh
[ "${1:-}" != "$PRESET_ERROR" ] || exit 2  # a preset of scripts/params/ found a bad value and said so
split_positional 16 "$@"
check_no_extra_values 16 finetune.py
set -- "${POSITIONAL[@]+"${POSITIONAL[@]}"}"
ARG_NAMES=(DATA_DIR CKPT_PATH CONFIG_PATH NUM_GPU LR BS ACCUM PREC TRAIN_STEPS WARMUP_STEPS MAX_SOURCE_LEN
           MAX_TARGET_LEN EVAL_BEAMS EVAL_BS PRED_BS PRELN)
ARG_KINDS=(folder model file count number count count train_precision count count0 count count count count count bool)
DATA_DIR=${1:-data/cnn_dm/}
CKPT_PATH=${2:-data/nvidia_pretrained/bart_large/}
CONFIG_PATH=${3:-configs/config.json}
NUM_GPU=${4:-8}
LR=${5:-1.25e-4}
BS=${6:-40}
ACCUM=${7:-1}
PREC=${8:-bf16}
TRAIN_STEPS=${9:-2000}
WARMUP_STEPS=${10:-50}
MAX_SOURCE_LEN=${11:-1024}
MAX_TARGET_LEN=${12:-142}
EVAL_BEAMS=${13:-4}
EVAL_BS=${14:-128}
PRED_BS=${15:-64}
PRELN=${16:-true}
check_inputs $# "$DATA_DIR" "$CKPT_PATH" "$CONFIG_PATH" "$NUM_GPU" "$LR" "$BS" "$ACCUM" "$PREC" "$TRAIN_STEPS" \
  "$WARMUP_STEPS" "$MAX_SOURCE_LEN" "$MAX_TARGET_LEN" "$EVAL_BEAMS" "$EVAL_BS" "$PRED_BS" "$PRELN"
check_data_dir DATA_DIR "$DATA_DIR" train val test
check_env count0 SEED
check_env count_all N_VAL
check_env number0 VAL_CHECK_INTERVAL
case "${EVAL_CHECKPOINT:-final}" in final|best) ;;
  *) die "EVAL_CHECKPOINT (environment) '$EVAL_CHECKPOINT' is not final or best" ;; esac
if [ "${EVAL_CHECKPOINT:-final}" = best ] && [ "${N_VAL:-100}" = 0 ]; then
  die "EVAL_CHECKPOINT (environment) 'best' needs validation during training, but N_VAL is 0"
fi
# the finetune.py flags given (EXTRA_ARGS, then those after the values: they win), checked as the script's own
read -r -a EXTRA <<< "${EXTRA_ARGS:-}"
EXTRA+=("${PASS[@]+"${PASS[@]}"}")
EXTRA_WHERE="the finetune.py flags (EXTRA_ARGS / after the 16 values)"
check_extra_args "$EXTRA_WHERE" "${EXTRA[@]+"${EXTRA[@]}"}"
if [ "${EVAL_CHECKPOINT:-final}" = best ]; then
  if value=$(flag_value --n_val "${EXTRA[@]+"${EXTRA[@]}"}") && [ "$value" = 0 ]; then
    die "EVAL_CHECKPOINT (environment) 'best' needs validation during training, but --n_val 0 in $EXTRA_WHERE turns it off"
  fi
  if value=$(flag_value --save_top_k "${EXTRA[@]+"${EXTRA[@]}"}") && [ "$value" = 0 ]; then
    die "EVAL_CHECKPOINT (environment) 'best' evaluates the best validation checkpoint, but --save_top_k 0 in $EXTRA_WHERE keeps none; drop it, or use EVAL_CHECKPOINT=final"
  fi
fi
check_env model TOKENIZER
check_env outdir OUTPUT_DIR
check_env outdir RESULTS_DIR
check_launch_env
check_gpus "$NUM_GPU" "NUM_GPU (4th)"
checks_done
DATESTAMP=$(date +'%y%m%d%H%M%S')
OUTPUT_DIR=${OUTPUT_DIR:-${RESULTS_DIR:-results/bart_pyt_${DATESTAMP}}}
PYTHON=${PYTHON:-python3}
precision_flags "$PREC"
preln_flag "$PRELN"
mkdir -p "$OUTPUT_DIR"
# a rerun into the same OUTPUT_DIR (a requeued or pre-empted job, a torchrun restart) continues from its newest
# checkpoint, a first start starts: finetune.py decides (auto) and says which; the job log is appended to.
# --overwrite_output_dir among the flags: the run in OUTPUT_DIR is removed and started over instead
RESUME=(--resume_from_checkpoint auto); TEE=(tee -a)
if has_flag --overwrite_output_dir "${EXTRA[@]+"${EXTRA[@]}"}"; then RESUME=(); fi
# output through a process substitution, not a pipe: the launcher stays in this shell, whose traps pass
# SIGTERM/SIGUSR1 on to the training processes (scripts/params/common.sh)
launcher "$NUM_GPU" finetune.py --data_dir "$DATA_DIR" --init_checkpoint "$CKPT_PATH" --config_path "$CONFIG_PATH" \
  --learning_rate "$LR" --train_batch_size "$BS" \
  --gradient_accumulation_steps "$ACCUM" "${PREC_FLAGS[@]}" --max_steps "$TRAIN_STEPS" --warmup_steps "$WARMUP_STEPS" \
  --max_source_length "$MAX_SOURCE_LEN" --max_target_length "$MAX_TARGET_LEN" --val_max_target_length "$MAX_TARGET_LEN" \
  --eval_beams "$EVAL_BEAMS" --eval_batch_size "$EVAL_BS" --n_val "${N_VAL:-100}" \
  --val_check_interval "${VAL_CHECK_INTERVAL:-0}" "${PRELN_FLAG[@]}" --label_smoothing 0.1 --weight_decay 0.1 --dropout 0.1 \
  --attention_dropout 0.1 \
  --gradient_clip_val 0.1 --lr_scheduler polynomial --sortish_sampler --freeze_embeds --seed "${SEED:-42}" \
  --output_dir "$OUTPUT_DIR" --json-summary "$OUTPUT_DIR/dllogger.json" "${RESUME[@]+"${RESUME[@]}"}" "${EXTRA[@]}" \
  > >("${TEE[@]}" "$OUTPUT_DIR/joblog.log") 2>&1
FINAL="$OUTPUT_DIR/final_step.ckpt"
if [ "${EVAL_CHECKPOINT:-final}" = best ]; then
  FINAL=$("$PYTHON" -m bart.training.checkpoint best "$OUTPUT_DIR") || exit 2  # it said why, in one line
fi
echo "== evaluating $FINAL"
# --overwrite: a rerun evaluates the run's weights again, in place of its earlier evaluation
launcher "$NUM_GPU" run_eval.py "$FINAL" "$CONFIG_PATH" "$DATA_DIR" "$OUTPUT_DIR" --overwrite --bs "$PRED_BS" \
  --eval_beams "$EVAL_BEAMS" --max_source_length "$MAX_SOURCE_LEN" --max_target_length "$MAX_TARGET_LEN" \
  "${EVAL_PREC_FLAGS[@]}" "${PRELN_FLAG[@]}" \
  --json-summary "$OUTPUT_DIR/eval_dllogger.json" ${EVAL_EXTRA_ARGS:-} > >(tee "$OUTPUT_DIR/eval_joblog.log") 2>&1
