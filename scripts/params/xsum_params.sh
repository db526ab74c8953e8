# XSum presets: `bash scripts/run_summarization.sh $(source scripts/params/xsum_params.sh && dgxa100_8gpu_bf16)`
source "$(dirname "${BASH_SOURCE[0]}")/preset_check.sh"  # preset_values_ok
# DATA_DIR CKPT_PATH CONFIG_PATH NUM_GPU LR BS ACCUM PREC TRAIN_STEPS WARMUP MAX_SRC MAX_TGT BEAMS EVAL_BS PRED_BS PRELN
dgxa100_8gpu_bf16() { preset_values_ok dgxa100_8gpu_bf16 && echo "data/xsum/ ${CKPT_PATH:-data/nvidia_pretrained/bart_large/} ${CONFIG_PATH:-configs/config_xsum.json} 8 1.25e-4 40 1 bf16 2000 50 1024 60 6 128 128 ${PRELN:-true}"; }
dgxa100_8gpu_tf32() { preset_values_ok dgxa100_8gpu_tf32 && echo "data/xsum/ ${CKPT_PATH:-data/nvidia_pretrained/bart_large/} ${CONFIG_PATH:-configs/config_xsum.json} 8 1.25e-4 24 1 tf32 3333 50 1024 60 6 128 64 ${PRELN:-true}"; }
dgxh100_8gpu_bf16() { preset_values_ok dgxh100_8gpu_bf16 && echo "data/xsum/ ${CKPT_PATH:-data/nvidia_pretrained/bart_large/} ${CONFIG_PATH:-configs/config_xsum.json} 8 1.25e-4 40 1 bf16 2000 50 1024 60 6 128 128 ${PRELN:-true}"; }
# PRED_BS NUM_GPU PRECISION EVAL_BEAMS MAX_SOURCE_LEN MAX_TARGET_LEN DATA_DIR CONFIG_PATH PRELN
dgxa100_8gpu_bf16_eval() { preset_values_ok dgxa100_8gpu_bf16_eval && echo "128 8 bf16 6 1024 60 data/xsum/ ${CONFIG_PATH:-configs/config_xsum.json} ${PRELN:-auto}"; }
dgxh100_8gpu_bf16_eval() { preset_values_ok dgxh100_8gpu_bf16_eval && echo "128 8 bf16 6 1024 60 data/xsum/ ${CONFIG_PATH:-configs/config_xsum.json} ${PRELN:-auto}"; }
