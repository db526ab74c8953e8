# What a preset prints, and its check (sourced by cnn_dm_params.sh and xsum_params.sh). The shell that runs
# `bash scripts/run_summarization.sh $(source scripts/params/cnn_dm_params.sh && PRESET)` splits the preset's
# output at spaces, so CKPT_PATH and CONFIG_PATH must be one word each, and PRELN is true, false or auto.
# A bad value: one line on stderr and the single word __bad_preset_value__ as the preset's output, on which the
# scripts exit 2 (an empty output would run the script on all of its defaults).
preset_values_ok() {  # PRESET: 0 when the environment's CKPT_PATH, CONFIG_PATH, PRELN can be printed
  local name
  for name in CKPT_PATH CONFIG_PATH; do
    if [ -n "${!name:-}" ] && [[ ! "${!name}" =~ ^[^[:space:]]+$ ]]; then
      echo "$1: $name (environment) '${!name}' holds spaces; the preset's values are split at spaces: use a path without them" >&2
      echo __bad_preset_value__; return 1
    fi
  done
  if [ -n "${PRELN:-}" ] && [[ ! "$PRELN" =~ ^(true|false|auto)$ ]]; then
    echo "$1: PRELN (environment) '$PRELN' is not true or false (or auto: as the checkpoint is, evaluation only)" >&2
    echo __bad_preset_value__; return 1
  fi
}
# A dataset's presets: DATA_DIR CONFIG MAX_TARGET_LEN BEAMS, then the preset's own values. The 16 values of
# run_summarization.sh (source length 1024; CKPT_PATH, CONFIG_PATH, PRELN from the environment over the defaults):
preset_fine_tuning() {  # DATA_DIR CONFIG MAX_TGT BEAMS NAME NUM_GPU LR BS ACCUM PREC TRAIN_STEPS WARMUP EVAL_BS PRED_BS
  preset_values_ok "$5" && echo "$1 ${CKPT_PATH:-data/nvidia_pretrained/bart_large/} ${CONFIG_PATH:-$2} $6 $7 $8 $9 ${10} ${11} ${12} 1024 $3 $4 ${13} ${14} ${PRELN:-true}"
}
# the values of run_eval_summarization.sh:
preset_evaluation() {  # DATA_DIR CONFIG MAX_TGT BEAMS NAME PRED_BS NUM_GPU PRECISION
  preset_values_ok "$5" && echo "$6 $7 $8 $4 1024 $3 $1 ${CONFIG_PATH:-$2} ${PRELN:-auto}"
}
