#!/usr/bin/env bash
# Pretraining throughput (pretrain.py, random weights, LAMB) for every GPU count and precision this node
# has, at each sequence length: the runs behind the seed README's pre-training performance tables.
# usage: bash scripts/run_pretraining_benchmark.sh [<batch size at 128> <batch size at 512> <config path>]
# Any leading part may be given; the rest take the reference's bf16 batch sizes: 200 32 configs/config.json.
# Lengths (SEQ_LENGTHS, default "128 512") read $DATA_DIR/pretrain_lddl_{length} (DATA_DIR default data);
# a length other than 128/512 takes the second batch size. Environment: TOKENIZER, TRAIN_STEPS (100), NUM_WORKERS (4),
# LOG_FREQ (10; the first window is warm-up), NUM_GPUS (e.g. "1 8"; default 1 2 4 8 up to the GPUs
# present), PRECISIONS (default bf16 fp16 tf32), CPU_PROCESS_COUNTS (without a GPU: gloo processes,
# default 1, fp32), NNODES/NODE_RANK/MASTER_ADDR/MASTER_PORT (run the same command on every node: the
# multi-node rows). Where: OUTPUT_DIR, else RESULTS_DIR, else results/bart_pyt_pretraining_benchmark_${DATESTAMP};
# runs of several node counts (or batch sizes per precision: the seed's TF32 rows used half the BF16
# batch) into one RESULTS_DIR make one table: throughput per precision, the speedup between the first
# two precisions, weak scaling against the fewest processes measured. Every value is checked before
# anything starts (CHECK_ONLY=1: only that).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
usage() { sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then usage; exit 0; fi
[ $# -le 3 ] || { echo "run_pretraining_benchmark.sh: expected at most 3 arguments, got $# (--help: usage)" >&2; exit 2; }
source scripts/params/common.sh
source scripts/params/benchmark_common.sh
ARG_NAMES=("batch size at 128" "batch size at 512" "config path")
ARG_KINDS=(count count file)
BS_128=${1:-200} BS_512=${2:-32} CONFIG_PATH=${3:-configs/config.json}
check_inputs $# "$BS_128" "$BS_512" "$CONFIG_PATH"
DATA_DIR=${DATA_DIR:-data}
check_list count SEQ_LENGTHS
read -r -a LENGTHS <<< "${SEQ_LENGTHS:-128 512}"
for length in "${LENGTHS[@]}"; do
  check_value folder "DATA_DIR (environment, default data) for length $length" "$DATA_DIR/pretrain_lddl_$length" \
    "scripts/preprocess_pretrain_data.sh writes it"
done
check_env count TRAIN_STEPS
check_env count LOG_FREQ
check_env count0 NUM_WORKERS
check_benchmark_env  # the tokenizer, the output folders, the launch and the sweep (benchmark_common.sh)
start_sweep pretraining_benchmark  # PYTHON, the sweep's counts and precisions, RESULTS made
NODES=${NNODES:-1}
TOKENIZER_FLAG=(); [ -z "${TOKENIZER:-}" ] || TOKENIZER_FLAG=(--tokenizer "$TOKENIZER")
for length in "${LENGTHS[@]}"; do
  bs=$([ "$length" = 128 ] && echo "$BS_128" || echo "$BS_512")
  for n in "${GPU_COUNTS[@]}"; do
    for prec in "${PRECISION_LIST[@]}"; do
      precision_flags "$prec"
      run="$RESULTS/len${length}_${NODES}node_${n}${DEVICE_KIND}_${prec}"
      mkdir -p "$run"
      echo "== length $length: $NODES node(s) x $n $DEVICE_KIND process(es), $prec, batch $bs per process"
      launcher "$n" pretrain.py --config_path "$CONFIG_PATH" --data_dir "$DATA_DIR/pretrain_lddl_$length" \
        --max_source_length "$length" --train_batch_size "$bs" "${PREC_FLAGS[@]}" "${TOKENIZER_FLAG[@]+"${TOKENIZER_FLAG[@]}"}" \
        --lamb --lr_scheduler polynomial --learning_rate 5e-3 --warmup_steps 0 --weight_decay 0.1 --dropout 0.1 \
        --attention_dropout 0.1 --gradient_clip_val 0.1 --max_steps "${TRAIN_STEPS:-100}" --log_freq "${LOG_FREQ:-10}" \
        --save_checkpoint_steps 1000000000 --num_workers "${NUM_WORKERS:-4}" --seed 42 --output_dir "$run" --overwrite_output_dir \
        --json-summary "$run/dllogger.json" > "$run/joblog.log" 2>&1 || { tail -n 20 "$run/joblog.log" >&2; exit 1; }
      rm -f "$run"/*.ckpt  # throughput only: the weights are random
    done
  done
done
[ "${NODE_RANK:-0}" = 0 ] || exit 0  # the table is rank 0's
"$PYTHON" -m utils.benchmark_table pretraining "$RESULTS" | tee "$RESULTS/pretraining_benchmark.log"
echo "results: $RESULTS/pretraining_benchmark.log"
