# What the benchmark scripts sweep (sourced): GPU counts and precisions this machine supports.
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
    [ -z "${NUM_GPUS:-}" ] || { echo "error: NUM_GPUS=$NUM_GPUS but this machine has no GPU" >&2; exit 2; }
    GPU_COUNTS=(1)
    default_precisions="fp32"
  fi
  read -r -a PRECISION_LIST <<< "${PRECISIONS:-$default_precisions}"
}
