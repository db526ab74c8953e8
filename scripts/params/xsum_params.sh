# XSum presets: `bash scripts/run_summarization.sh $(source scripts/params/xsum_params.sh && dgxa100_8gpu_bf16)`
# Fine-tuning presets print the 16 arguments of run_summarization.sh; *_eval presets print the 9 arguments
# that follow INIT_CKPT in run_eval_summarization.sh. Environment: CKPT_PATH, CONFIG_PATH, PRELN (see
# cnn_dm_params.sh). The values are the reference recipe's (scripts/params/xsum_params.sh of NVIDIA's
# DeepLearningExamples): DGX A100 80GB 8 GPUs bf16 (BS 40) / tf32 (BS 24); one GPU with the seed's XSum
# table batch sizes (40 bf16, 24 tf32) and 8 accumulation steps (the 8-GPU global batch); DGX-1 (8x V100
# 32GB, no bf16/TF32: fp16 BS 14 LR 7e-5 7000 updates, fp32 BS 8 12250 updates) and DGX-2H (16x V100 32GB).
# The reference's V100 presets also validated every 0.3 epoch with patience 1: add
# VAL_CHECK_INTERVAL=0.3 EXTRA_ARGS="--early_stopping_patience 1" for the same.
source "$(dirname "${BASH_SOURCE[0]}")/preset_check.sh"  # preset_fine_tuning, preset_evaluation
_xsum() { preset_fine_tuning data/xsum/ configs/config_xsum.json 60 6 "$@"; }  # NAME NUM_GPU LR BS ACCUM PREC TRAIN_STEPS WARMUP EVAL_BS PRED_BS
_xsum_eval() { preset_evaluation data/xsum/ configs/config_xsum.json 60 6 "$@"; }  # NAME PRED_BS NUM_GPU PRECISION
# DATA_DIR CKPT_PATH CONFIG_PATH NUM_GPU LR BS ACCUM PREC TRAIN_STEPS WARMUP MAX_SRC MAX_TGT BEAMS EVAL_BS PRED_BS PRELN
dgxa100_8gpu_bf16() { _xsum dgxa100_8gpu_bf16 8 1.25e-4 40 1 bf16 2000 50 128 128; }
dgxa100_8gpu_tf32() { _xsum dgxa100_8gpu_tf32 8 1.25e-4 24 1 tf32 3333 50 128 64; }
dgxa100_1gpu_bf16() { _xsum dgxa100_1gpu_bf16 1 1.25e-4 40 8 bf16 2000 50 128 128; }
dgxa100_1gpu_tf32() { _xsum dgxa100_1gpu_tf32 1 1.25e-4 24 8 tf32 3333 50 128 64; }
# H100 80GB: the A100 80GB batch sizes fit; bf16 is the recommended precision.
dgxh100_8gpu_bf16() { _xsum dgxh100_8gpu_bf16 8 1.25e-4 40 1 bf16 2000 50 128 128; }
dgxh100_1gpu_bf16() { _xsum dgxh100_1gpu_bf16 1 1.25e-4 40 8 bf16 2000 50 128 128; }
dgx1_8gpu_fp16() { _xsum dgx1_8gpu_fp16 8 7e-5 14 1 fp16 7000 200 128 64; }
dgx1_8gpu_fp32() { _xsum dgx1_8gpu_fp32 8 7e-5 8 1 fp32 12250 200 96 32; }
dgx2_16gpu_fp16() { _xsum dgx2_16gpu_fp16 16 1e-4 14 1 fp16 3500 100 128 96; }
dgx2_16gpu_fp32() { _xsum dgx2_16gpu_fp32 16 1.25e-4 8 1 fp32 6125 150 96 32; }
# PRED_BS NUM_GPU PRECISION EVAL_BEAMS MAX_SOURCE_LEN MAX_TARGET_LEN DATA_DIR CONFIG_PATH PRELN
dgxa100_8gpu_bf16_eval() { _xsum_eval dgxa100_8gpu_bf16_eval 128 8 bf16; }
dgxa100_8gpu_tf32_eval() { _xsum_eval dgxa100_8gpu_tf32_eval 64 8 tf32; }
dgxa100_1gpu_bf16_eval() { _xsum_eval dgxa100_1gpu_bf16_eval 128 1 bf16; }
dgxa100_1gpu_tf32_eval() { _xsum_eval dgxa100_1gpu_tf32_eval 64 1 tf32; }
dgxh100_8gpu_bf16_eval() { _xsum_eval dgxh100_8gpu_bf16_eval 128 8 bf16; }
dgx1_8gpu_fp16_eval() { _xsum_eval dgx1_8gpu_fp16_eval 96 8 fp16; }
dgx1_8gpu_fp32_eval() { _xsum_eval dgx1_8gpu_fp32_eval 32 8 fp32; }
dgx2_16gpu_fp16_eval() { _xsum_eval dgx2_16gpu_fp16_eval 96 16 fp16; }
dgx2_16gpu_fp32_eval() { _xsum_eval dgx2_16gpu_fp32_eval 32 16 fp32; }
