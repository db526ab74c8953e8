#!/usr/bin/env bash
# BART pretraining, phase 1 (length 128) then phase 2 (length 512, from phase 1's last checkpoint,
# weights only), launched with torchrun on one node or many (one process on one node: python alone).
#
# usage: bash scripts/run_pretraining.sh [train_batch_size_phase1 train_batch_size_phase2
#   learning_rate_phase1 learning_rate_phase2 precision use_preln num_gpus warmup_steps_phase1
#   warmup_steps_phase2 train_steps_phase1 train_steps_phase2 save_checkpoint_steps
#   num_accumulation_phase1 num_accumulation_steps_phase2 config_path]
# Any leading part of the 15 values may be given (as in the reference); the rest take its defaults:
#   200 32 5e-3 4e-3 bf16 true 8 2166 200 95040 7560 100 40 120 configs/config.json
# precision: fp8 | fp16 | bf16 | tf32 | fp32 (fp8: --fp8, float8 linear layers on CUDA capability >= 8.9).  num_gpus: GPUs per node (processes on a CPU-only machine).
# Where: OUTPUT_DIR, else RESULTS_DIR (the reference's name: the run's folder), else
# results/bart_pyt_pretraining; phase_1/ and phase_2/ inside (relative paths: from the repository root).
# Environment: DATA_DIR (data), TOKENIZER
# (else $BART_DEFAULT_TOKENIZER, else facebook/bart-large), SEED (42), NUM_WORKERS (4), NNODES (1), NODE_RANK (0), MASTER_ADDR
# (127.0.0.1), MASTER_PORT (29500 across nodes, else a free port), PHASES ("1 2"), LOG_FREQ (10), EXTRA_ARGS
# (more pretrain.py flags, after the script's own: they win), CPU_PROCESSES (processes on a CPU-only machine),
# MAX_RESTARTS (0; torchrun restarts after a failure, each resuming from the newest checkpoint).
# Every value is checked before anything starts: a bad one is one line and exit 2 (CHECK_ONLY=1: only that).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

usage() { sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then usage; exit 0; fi
if [ $# -gt 15 ]; then
  echo "run_pretraining.sh: expected at most 15 arguments (a leading part of them: the rest take the defaults), got $# (--help: usage)" >&2
  exit 2
fi

train_batch_size_phase1=${1:-200}
train_batch_size_phase2=${2:-32}
learning_rate_phase1=${3:-5e-3}
learning_rate_phase2=${4:-4e-3}
precision=${5:-bf16}
use_preln=${6:-true}
num_gpus=${7:-8}
warmup_steps_phase1=${8:-2166}
warmup_steps_phase2=${9:-200}
train_steps_phase1=${10:-95040}
train_steps_phase2=${11:-7560}
save_checkpoint_steps=${12:-100}
num_accumulation_phase1=${13:-40}
num_accumulation_steps_phase2=${14:-120}
config_path=${15:-configs/config.json}

DATA_DIR=${DATA_DIR:-data}
OUTPUT_DIR=${OUTPUT_DIR:-${RESULTS_DIR:-results/bart_pyt_pretraining}}
SEED=${SEED:-42}
NUM_WORKERS=${NUM_WORKERS:-4}
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
PHASES=${PHASES:-"1 2"}
PYTHON=${PYTHON:-python3}

source scripts/params/common.sh  # checks, launch_command, signal forwarding
ARG_NAMES=(train_batch_size_phase1 train_batch_size_phase2 learning_rate_phase1 learning_rate_phase2 precision
           use_preln num_gpus warmup_steps_phase1 warmup_steps_phase2 train_steps_phase1 train_steps_phase2
           save_checkpoint_steps num_accumulation_phase1 num_accumulation_steps_phase2 config_path)
ARG_KINDS=(count count number number train_precision bool count count0 count0 count count count0 count count file)
check_inputs $# "$train_batch_size_phase1" "$train_batch_size_phase2" "$learning_rate_phase1" "$learning_rate_phase2" \
  "$precision" "$use_preln" "$num_gpus" "$warmup_steps_phase1" "$warmup_steps_phase2" "$train_steps_phase1" \
  "$train_steps_phase2" "$save_checkpoint_steps" "$num_accumulation_phase1" "$num_accumulation_steps_phase2" "$config_path"
check_list phase PHASES
check_env count0 SEED
check_env count0 NUM_WORKERS
check_env count LOG_FREQ
check_env model TOKENIZER
check_env outdir RESULTS_DIR
check_env outdir OUTPUT_DIR  # (RESULTS_DIR's, when not set)
check_value folder "DATA_DIR (environment, default data)" "$DATA_DIR"
for phase in $PHASES; do
  folder="$DATA_DIR/pretrain_lddl_$([ "$phase" = 1 ] && echo 128 || echo 512)"
  [ -d "$folder" ] || die "$folder not found (run scripts/preprocess_pretrain_data.sh)"
done
if [[ " $PHASES " != *" 1 "* ]] && ! ls "$OUTPUT_DIR"/phase_1/_step*.ckpt >/dev/null 2>&1; then
  die "PHASES (environment) '$PHASES' starts at phase 2, but $OUTPUT_DIR/phase_1 holds no checkpoint (run phase 1 first)"
fi
# the pretrain.py flags of EXTRA_ARGS, checked as the script's own (phase 2 reads phase 1's folder)
read -r -a EXTRA <<< "${EXTRA_ARGS:-}"
check_extra_args "EXTRA_ARGS (environment)" "${EXTRA[@]+"${EXTRA[@]}"}"
check_launch_env
precision_flags "$precision"
preln_flag "$use_preln"
GPUS_PRESENT=$(gpus_present)
if [ "$GPUS_PRESENT" -eq 0 ] && [ -n "${CPU_PROCESSES:-}" ]; then num_gpus=$CPU_PROCESSES; fi
check_gpus "$num_gpus" "num_gpus (7th)"
checks_done
if [ "$GPUS_PRESENT" -eq 0 ]; then
  echo "run_pretraining.sh: no GPU: running $num_gpus CPU process(es) with gloo"
  [ "$precision" = "fp16" ] && echo "run_pretraining.sh: note: fp16 autocast on CPU is slow; bf16 or fp32 is better"
fi

launch_command "$num_gpus"  # LAUNCH: torchrun, or python alone for one process on one node
# the reference's fixed flags (--attention_dropout 0.1 included: the configs keep bart-large's 0.0)
COMMON=(--config_path "$config_path" --lamb --lr_scheduler polynomial --weight_decay 0.1
        --dropout 0.1 --attention_dropout 0.1 --gradient_clip_val 0.1 "${PRELN_FLAG[@]}" "${PREC_FLAGS[@]}" --seed "$SEED"
        --num_workers "$NUM_WORKERS" --save_checkpoint_steps "$save_checkpoint_steps" --log_freq "${LOG_FREQ:-10}")
# half-precision gradient all-reduce in mixed-precision runs, as the reference recipe does
case "$precision" in fp16|bf16|fp8) COMMON+=(--allreduce_post_accumulation_half_precision) ;; esac
# a rerun, a requeued job or a torchrun restart continues from the phase's newest checkpoint, a first start
# starts (pretrain.py decides, after the previous processes are gone; it says which in one line);
# --overwrite_output_dir in EXTRA_ARGS: each phase's earlier run is removed and started over instead
RESUME=(--resume_from_checkpoint auto)
if has_flag --overwrite_output_dir "${EXTRA[@]+"${EXTRA[@]}"}"; then RESUME=(); fi

if [[ " $PHASES " == *" 1 "* ]]; then
  echo "== phase 1: length 128, batch $train_batch_size_phase1 x accumulation $num_accumulation_phase1 x $((num_gpus * NNODES)) processes"
  rc=0
  run_forwarding_signals "${LAUNCH[@]}" pretrain.py "${COMMON[@]}" --data_dir "$DATA_DIR/pretrain_lddl_128" --max_source_length 128 \
    --train_batch_size "$train_batch_size_phase1" --gradient_accumulation_steps "$num_accumulation_phase1" \
    --learning_rate "$learning_rate_phase1" --warmup_steps "$warmup_steps_phase1" --max_steps "$train_steps_phase1" \
    --output_dir "$OUTPUT_DIR/phase_1" --json-summary "$OUTPUT_DIR/phase_1/dllogger.json" "${RESUME[@]}" "${EXTRA[@]}" || rc=$?
  [ "$rc" -eq 0 ] || { stopped_exit run_pretraining.sh "$rc" "$OUTPUT_DIR/phase_1"; exit "$rc"; }
fi
if [[ " $PHASES " == *" 2 "* ]]; then
  # phase 1's last checkpoint (its step: EXTRA_ARGS may have changed phase 1's --max_steps)
  phase1_ckpt=$( (ls "$OUTPUT_DIR"/phase_1/_step*.ckpt 2>/dev/null || true) | sed 's/.*_step\([0-9]*\)\.ckpt$/\1 &/' | sort -n | tail -n 1 | cut -d' ' -f2-)
  if [ -z "$phase1_ckpt" ]; then
    if [ ! -d "$OUTPUT_DIR/phase_1" ]; then why="the folder does not exist"
    elif [ -z "$(ls -A "$OUTPUT_DIR/phase_1")" ]; then why="the folder is empty"
    else why="the folder holds: $(ls -A "$OUTPUT_DIR/phase_1" | head -n 6 | paste -sd ' ')"; fi
    die "phase 2 starts from phase 1's last checkpoint, but $OUTPUT_DIR/phase_1/_step*.ckpt matches no file ($why): phase 1 writes one when it ends; run phase 1 (PHASES=\"1 2\") until it ends"
  fi
  phase1_steps=$(basename "$phase1_ckpt" .ckpt); phase1_steps=${phase1_steps#_step}
  [ "$phase1_steps" = "$train_steps_phase1" ] || echo "run_pretraining.sh: note: phase 1 ended at update $phase1_steps, not $train_steps_phase1"
  echo "== phase 2: length 512 from $phase1_ckpt (weights only)"
  rc=0
  run_forwarding_signals "${LAUNCH[@]}" pretrain.py "${COMMON[@]}" --data_dir "$DATA_DIR/pretrain_lddl_512" --max_source_length 512 \
    --train_batch_size "$train_batch_size_phase2" --gradient_accumulation_steps "$num_accumulation_steps_phase2" \
    --learning_rate "$learning_rate_phase2" --warmup_steps "$warmup_steps_phase2" --max_steps "$train_steps_phase2" \
    --init_checkpoint "$phase1_ckpt" --phase1_end_step "$phase1_steps" \
    --output_dir "$OUTPUT_DIR/phase_2" --json-summary "$OUTPUT_DIR/phase_2/dllogger.json" "${RESUME[@]}" "${EXTRA[@]}" || rc=$?
  [ "$rc" -eq 0 ] || { stopped_exit run_pretraining.sh "$rc" "$OUTPUT_DIR/phase_2"; exit "$rc"; }
fi
