# CNN/DM presets: `bash scripts/run_summarization.sh $(source scripts/params/cnn_dm_params.sh && dgxa100_8gpu_bf16)`
# Fine-tuning presets print the 16 arguments of run_summarization.sh; *_eval presets print the 9
# arguments that follow INIT_CKPT in run_eval_summarization.sh. Environment: CKPT_PATH, the starting
# weights (default data/nvidia_pretrained/bart_large/; a hub id such as facebook/bart-large, or your
# pretraining's results/bart_pyt_pretraining/phase_2), CONFIG_PATH (the model config), PRELN (true:
# the recipe's Pre-LN pretraining; false for BART's post-LN weights such as facebook/bart-large; the
# *_eval presets default to auto: the checkpoint's own). A value the scripts could not read is refused
# here (scripts/params/preset_check.sh).
# DGX A100 values are the reference recipe's. DGX-1 (8x V100 32GB: fp16 or fp32, no bf16/TF32): the
# reference's V100 batch sizes, learning rate and update counts (its xsum_params.sh; same source length
# 1024) with CNN/DM's target length 142 and 4 beams.
source "$(dirname "${BASH_SOURCE[0]}")/preset_check.sh"  # preset_fine_tuning, preset_evaluation
_cnn_dm() { preset_fine_tuning data/cnn_dm/ configs/config.json 142 4 "$@"; }  # NAME NUM_GPU LR BS ACCUM PREC TRAIN_STEPS WARMUP EVAL_BS PRED_BS
_cnn_dm_eval() { preset_evaluation data/cnn_dm/ configs/config.json 142 4 "$@"; }  # NAME PRED_BS NUM_GPU PRECISION
# DATA_DIR CKPT_PATH CONFIG_PATH NUM_GPU LR BS ACCUM PREC TRAIN_STEPS WARMUP MAX_SRC MAX_TGT BEAMS EVAL_BS PRED_BS PRELN
dgxa100_8gpu_bf16() { _cnn_dm dgxa100_8gpu_bf16 8 1.25e-4 40 1 bf16 2000 50 128 128; }
dgxa100_8gpu_tf32() { _cnn_dm dgxa100_8gpu_tf32 8 1.25e-4 24 1 tf32 3333 50 128 64; }
dgxa100_1gpu_bf16() { _cnn_dm dgxa100_1gpu_bf16 1 1.25e-4 40 8 bf16 2000 50 128 128; }
dgxa100_1gpu_tf32() { _cnn_dm dgxa100_1gpu_tf32 1 1.25e-4 24 8 tf32 3333 50 128 64; }
# H100 80GB: the A100 80GB batch sizes fit; bf16 is the recommended precision.
dgxh100_8gpu_bf16() { _cnn_dm dgxh100_8gpu_bf16 8 1.25e-4 40 1 bf16 2000 50 128 128; }
dgxh100_1gpu_bf16() { _cnn_dm dgxh100_1gpu_bf16 1 1.25e-4 40 8 bf16 2000 50 128 128; }
dgx1_8gpu_fp16() { _cnn_dm dgx1_8gpu_fp16 8 7e-5 14 1 fp16 7000 200 128 64; }
dgx1_8gpu_fp32() { _cnn_dm dgx1_8gpu_fp32 8 7e-5 8 1 fp32 12250 200 96 32; }
# PRED_BS NUM_GPU PRECISION EVAL_BEAMS MAX_SOURCE_LEN MAX_TARGET_LEN DATA_DIR CONFIG_PATH PRELN
dgxa100_8gpu_bf16_eval() { _cnn_dm_eval dgxa100_8gpu_bf16_eval 128 8 bf16; }
dgxa100_8gpu_tf32_eval() { _cnn_dm_eval dgxa100_8gpu_tf32_eval 64 8 tf32; }
dgxa100_1gpu_bf16_eval() { _cnn_dm_eval dgxa100_1gpu_bf16_eval 128 1 bf16; }
dgxa100_1gpu_tf32_eval() { _cnn_dm_eval dgxa100_1gpu_tf32_eval 64 1 tf32; }
dgxh100_8gpu_bf16_eval() { _cnn_dm_eval dgxh100_8gpu_bf16_eval 128 8 bf16; }
dgx1_8gpu_fp16_eval() { _cnn_dm_eval dgx1_8gpu_fp16_eval 96 8 fp16; }
dgx1_8gpu_fp32_eval() { _cnn_dm_eval dgx1_8gpu_fp32_eval 32 8 fp32; }
