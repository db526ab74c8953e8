# What the benchmark scripts sweep (sourced): GPU counts and precisions this machine supports; without a GPU,
# CPU_PROCESS_COUNTS (default 1) gloo processes in fp32.
check_sweep_settings() {  # NUM_GPUS and PRECISIONS, before anything starts
  local n present
  check_list count NUM_GPUS
  check_list precision PRECISIONS
  check_list count CPU_PROCESS_COUNTS
  present=$(gpus_present)
  if [ "$present" -eq 0 ]; then
    [ -z "${NUM_GPUS:-}" ] || die "NUM_GPUS (environment) '$NUM_GPUS' but this machine has no GPU (unset it: one CPU process, or CPU_PROCESS_COUNTS=\"1 2\")"
  else
    for n in ${NUM_GPUS:-}; do
      [ "$n" -le "$present" ] || die "NUM_GPUS (environment) entry '$n' is more than the $present GPUs of this machine"
    done
  fi
}
sweep_settings() {
  local present bf16
  present=$(gpus_present)
  if [ "$present" -gt 0 ]; then
    DEVICE_KIND=gpu
    if [ -n "${NUM_GPUS:-}" ]; then read -r -a GPU_COUNTS <<< "$NUM_GPUS"; else
      GPU_COUNTS=(); for n in 1 2 4 8 16; do [ "$n" -le "$present" ] && GPU_COUNTS+=("$n"); done
      [ "${GPU_COUNTS[-1]}" -eq "$present" ] || GPU_COUNTS+=("$present")
    fi
    bf16=$("$PYTHON" -c "import torch; print(int(torch.cuda.is_bf16_supported()))")
    if [ "$bf16" = 1 ]; then default_precisions="bf16 fp16 tf32"; else default_precisions="fp16 fp32"; fi
  else
    DEVICE_KIND=cpu
    read -r -a GPU_COUNTS <<< "${CPU_PROCESS_COUNTS:-1}"  # gloo processes (a small form of the GPU sweep)
    default_precisions="fp32"
  fi
  read -r -a PRECISION_LIST <<< "${PRECISIONS:-$default_precisions}"
}
check_benchmark_env() {  # the checks every benchmark script ends its own with, then checks_done (CHECK_ONLY=1 stops there)
  check_env model TOKENIZER
  check_env outdir OUTPUT_DIR
  check_env outdir RESULTS_DIR
  check_launch_env
  check_sweep_settings
  checks_done
}
start_sweep() {  # after the checks: PYTHON, the sweep (GPU_COUNTS, PRECISION_LIST), RESULTS made: OUTPUT_DIR, else
  # RESULTS_DIR, else results/bart_pyt_$1_<date>
  PYTHON=${PYTHON:-python3}
  sweep_settings
  RESULTS=${OUTPUT_DIR:-${RESULTS_DIR:-results/bart_pyt_$1_$(date +'%y%m%d%H%M%S')}}
  mkdir -p "$RESULTS"
}
