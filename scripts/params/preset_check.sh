# The check of what a preset prints (sourced by cnn_dm_params.sh and xsum_params.sh). The shell that runs
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
