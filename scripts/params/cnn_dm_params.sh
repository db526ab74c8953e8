# CNN/DM presets: `bash scripts/run_summarization.sh $(source scripts/params/cnn_dm_params.sh && dgxa100_8gpu_bf16)`
# Fine-tuning presets print the 16 arguments of run_summarization.sh; *_eval presets print the 9
# arguments that follow INIT_CKPT in run_eval_summarization.sh. Environment: CKPT_PATH, the starting
# weights (default data/nvidia_pretrained/bart_large/; a hub id such as facebook/bart-large, or your
# pretraining's results/bart_pyt_pretraining/phase_2), CONFIG_PATH (the model config), PRELN (true:
# the recipe's Pre-LN pretraining; false for BART's post-LN weights such as facebook/bart-large; the
# *_eval presets default to auto: the checkpoint's own). A value the scripts could not read is refused
# here (scripts/params/preset_check.sh).
source "$(dirname "${BASH_SOURCE[0]}")/preset_check.sh"  # preset_values_ok
# DATA_DIR CKPT_PATH CONFIG_PATH NUM_GPU LR BS ACCUM PREC TRAIN_STEPS WARMUP MAX_SRC MAX_TGT BEAMS EVAL_BS PRED_BS PRELN
dgxa100_8gpu_bf16() { preset_values_ok dgxa100_8gpu_bf16 && echo "data/cnn_dm/ ${CKPT_PATH:-data/nvidia_pretrained/bart_large/} ${CONFIG_PATH:-configs/config.json} 8 1.25e-4 40 1 bf16 2000 50 1024 142 4 128 128 ${PRELN:-true}"; }
dgxa100_8gpu_tf32() { preset_values_ok dgxa100_8gpu_tf32 && echo "data/cnn_dm/ ${CKPT_PATH:-data/nvidia_pretrained/bart_large/} ${CONFIG_PATH:-configs/config.json} 8 1.25e-4 24 1 tf32 3333 50 1024 142 4 128 64 ${PRELN:-true}"; }
dgxa100_1gpu_bf16() { preset_values_ok dgxa100_1gpu_bf16 && echo "data/cnn_dm/ ${CKPT_PATH:-data/nvidia_pretrained/bart_large/} ${CONFIG_PATH:-configs/config.json} 1 1.25e-4 40 8 bf16 2000 50 1024 142 4 128 128 ${PRELN:-true}"; }
# H100 80GB: the A100 80GB batch sizes fit; bf16 is the recommended precision.
dgxh100_8gpu_bf16() { preset_values_ok dgxh100_8gpu_bf16 && echo "data/cnn_dm/ ${CKPT_PATH:-data/nvidia_pretrained/bart_large/} ${CONFIG_PATH:-configs/config.json} 8 1.25e-4 40 1 bf16 2000 50 1024 142 4 128 128 ${PRELN:-true}"; }
dgxh100_1gpu_bf16() { preset_values_ok dgxh100_1gpu_bf16 && echo "data/cnn_dm/ ${CKPT_PATH:-data/nvidia_pretrained/bart_large/} ${CONFIG_PATH:-configs/config.json} 1 1.25e-4 40 8 bf16 2000 50 1024 142 4 128 128 ${PRELN:-true}"; }
# PRED_BS NUM_GPU PRECISION EVAL_BEAMS MAX_SOURCE_LEN MAX_TARGET_LEN DATA_DIR CONFIG_PATH PRELN
dgxa100_8gpu_bf16_eval() { preset_values_ok dgxa100_8gpu_bf16_eval && echo "128 8 bf16 4 1024 142 data/cnn_dm/ ${CONFIG_PATH:-configs/config.json} ${PRELN:-auto}"; }
dgxa100_8gpu_tf32_eval() { preset_values_ok dgxa100_8gpu_tf32_eval && echo "64 8 tf32 4 1024 142 data/cnn_dm/ ${CONFIG_PATH:-configs/config.json} ${PRELN:-auto}"; }
dgxh100_8gpu_bf16_eval() { preset_values_ok dgxh100_8gpu_bf16_eval && echo "128 8 bf16 4 1024 142 data/cnn_dm/ ${CONFIG_PATH:-configs/config.json} ${PRELN:-auto}"; }
