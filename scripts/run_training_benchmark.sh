#!/usr/bin/env bash
# Training throughput of fine-tuning (finetune.py, random weights) for every GPU count and precision
# this machine has, or one CPU process in fp32 where there is no GPU.
# usage: bash scripts/run_training_benchmark.sh [<batch size> <max source length> <max target length> <data dir>]
# Any leading part may be given; the rest take the reference's defaults: 24 1024 60 data/xsum.
# The data dir holds train.source/train.target. Environment: CONFIG_PATH (configs/config.json),
# TOKENIZER ($BART_DEFAULT_TOKENIZER, else facebook/bart-large), TRAIN_STEPS (100), LOG_FREQ (10; the first window is warm-up),
# NUM_GPUS (e.g. "1 8"; default 1 2 4 8 up to the GPUs present), PRECISIONS (default bf16 fp16 tf32,
# fp32 on CPU). Where: OUTPUT_DIR, else RESULTS_DIR (the reference's name: the benchmark's folder), else
# results/bart_pyt_training_benchmark_${DATESTAMP}. Every value is checked before anything starts
# (CHECK_ONLY=1: only that).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
usage() { sed -n '2,11p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then usage; exit 0; fi
[ $# -le 4 ] || { echo "run_training_benchmark.sh: expected at most 4 arguments, got $# (--help: usage)" >&2; exit 2; }
BS=${1:-24} MAX_SOURCE_LEN=${2:-1024} MAX_TARGET_LEN=${3:-60} DATA_DIR=${4:-data/xsum}
CONFIG_PATH=${CONFIG_PATH:-configs/config.json}
source scripts/params/common.sh
source scripts/params/benchmark_common.sh
ARG_NAMES=("batch size" "max source length" "max target length" "data dir")
ARG_KINDS=(count count count folder)
check_inputs $# "$BS" "$MAX_SOURCE_LEN" "$MAX_TARGET_LEN" "$DATA_DIR"
check_data_dir "data dir" "$DATA_DIR" train
check_value file "CONFIG_PATH (environment, default configs/config.json)" "$CONFIG_PATH"
check_env count TRAIN_STEPS
check_env count LOG_FREQ
check_benchmark_env  # the tokenizer, the output folders, the launch and the sweep (benchmark_common.sh)
start_sweep training_benchmark  # PYTHON, the sweep's counts and precisions, RESULTS made
for n in "${GPU_COUNTS[@]}"; do
  for prec in "${PRECISION_LIST[@]}"; do
    precision_flags "$prec"
    run="$RESULTS/${n}${DEVICE_KIND}_${prec}"
    mkdir -p "$run"
    echo "== $n $DEVICE_KIND process(es), $prec, batch $BS, lengths $MAX_SOURCE_LEN/$MAX_TARGET_LEN"
    launcher "$n" finetune.py --from_scratch --data_dir "$DATA_DIR" --config_path "$CONFIG_PATH" \
      --train_batch_size "$BS" "${PREC_FLAGS[@]}" \
      --max_source_length "$MAX_SOURCE_LEN" --max_target_length "$MAX_TARGET_LEN" --max_steps "${TRAIN_STEPS:-100}" \
      --dropout 0.1 --attention_dropout 0.1 --warmup_steps 0 --n_val 0 --log_freq "${LOG_FREQ:-10}" --num_workers 2 --seed 42 --output_dir "$run" --overwrite_output_dir \
      --json-summary "$run/dllogger.json" > "$run/joblog.log" 2>&1 || { tail -n 20 "$run/joblog.log" >&2; exit 1; }
    rm -f "$run"/*.ckpt  # throughput only: the weights are random
  done
done
"$PYTHON" -m utils.benchmark_table training "$RESULTS" | tee "$RESULTS/training_benchmark.log"
echo "results: $RESULTS/training_benchmark.log"
