#!/usr/bin/env bash
# The whole recipe, small, on a CPU: real English text (the Lee news corpus shipped inside gensim's
# wheel on PyPI) → a byte-level BPE tokenizer trained on it → LDDL preprocessing and balancing (128
# and 512) → phase-1 and phase-2 pretraining of a tiny Pre-LN BART with LAMB → fine-tuning for
# lead-sentence summarization → ROUGE before and after fine-tuning → PNG charts of the loss curves.
# usage: bash scripts/run_demo.sh [output folder (default: RESULTS_DIR, else results/demo)]
# Environment: DEMO_VOCAB_SIZE (tokenizer, 4096), DEMO_PHASE1_STEPS (100), DEMO_PHASE2_STEPS (20),
# DEMO_FINETUNE_STEPS (300; the model starts copying after some 150-200 of them), OMP_NUM_THREADS
# (all cores; 1 on a machine shared with other work). Every value is checked before anything starts.
# Run again into the same folder: the downloaded corpus and the LDDL shards are kept, every training run and
# evaluation starts over in place (--overwrite_output_dir / --overwrite: the earlier demo's runs removed first).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0; fi
[ $# -le 1 ] || { echo "usage: bash scripts/run_demo.sh [output folder]" >&2; exit 2; }
source scripts/params/common.sh
OUT=${1:-${RESULTS_DIR:-results/demo}}
check_value outdir "output folder$([ $# -eq 1 ] || echo ' (RESULTS_DIR, else results/demo)')" "$OUT"
check_env count DEMO_VOCAB_SIZE
check_env count DEMO_PHASE1_STEPS
check_env count DEMO_PHASE2_STEPS
check_env count DEMO_FINETUNE_STEPS
check_env count OMP_NUM_THREADS
checks_done
source scripts/params/python_env.sh
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)} TOKENIZERS_PARALLELISM=false
START=$(date +%s)
step() { echo; echo "== [$(( $(date +%s) - START ))s] $*"; }

step "setup (installs only what is missing)"
bash scripts/install.sh
mkdir -p "$OUT"
DATA="$OUT/data"; mkdir -p "$DATA"

step "corpus: the Lee news corpus (300 documents) from gensim's wheel, downloaded from PyPI"
if [ ! -s "$DATA/corpus/lee.txt" ]; then
  mkdir -p "$DATA/corpus" "$OUT/.download"
  "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: -d "$OUT/.download" "gensim==4.4.0"
  "$PYTHON" - "$OUT/.download" "$DATA/corpus/lee.txt" <<'PY'
import glob, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/gensim-*.whl")[0]
with zipfile.ZipFile(wheel) as z, open(sys.argv[2], "wb") as out:
    out.write(z.read("gensim/test/test_data/lee_background.cor"))
PY
fi
wc -l < "$DATA/corpus/lee.txt" | xargs echo "documents:"

# The from-scratch path: a tokenizer of the corpus's own, 4096 tokens (GPT-2's 50,265-way softmax
# would be most of a tiny model's cost; this one cuts the corpus into about 16% more tokens than an
# 8192-token one, which matches GPT-2's count), and the tiny config with that vocab_size.
step "tokenizer trained on the corpus (byte-level BPE, ${DEMO_VOCAB_SIZE:-4096} tokens) and sentence-split data"
"$PYTHON" -m bart.tokenization.train_tokenizer "$DATA/corpus" --vocab_size ${DEMO_VOCAB_SIZE:-4096} \
  --out "$DATA/tokenizer" --config configs/config_tiny.json --config_out "$DATA/config_demo.json"
"$PYTHON" -m bart.scoring.nltk_data > /dev/null
export TOKENIZER="$DATA/tokenizer"
CONFIG="$DATA/config_demo.json"

step "LDDL preprocessing and balancing for lengths 128 and 512 (local dask cluster)"
"$PYTHON" -m bart.data.preprocess --common_crawl "$DATA/corpus" --out "$DATA" --seq_lengths 128 512 \
  --num_shards 4 --workers 1 2>&1 | grep -E "^\[(preprocess|balance)|Error|error" || true
ls "$DATA/pretrain_lddl_128" "$DATA/pretrain_lddl_512" > /dev/null

step "pretraining phase 1 (length 128) and phase 2 (length 512) with scripts/run_pretraining.sh"
# 16 rows of each length held out of training: their reconstruction loss is val_loss (every 50 updates, and at the end)
DATA_DIR="$DATA" OUTPUT_DIR="$OUT/pretraining" NUM_WORKERS=1 LOG_FREQ=10 EXTRA_ARGS="--n_val 16 --val_check_interval 50 --overwrite_output_dir" \
  bash scripts/run_pretraining.sh 16 4 1e-2 5e-3 fp32 true 1 10 5 ${DEMO_PHASE1_STEPS:-100} ${DEMO_PHASE2_STEPS:-20} 1000 1 1 "$CONFIG" \
  2>&1 | grep -E "^==|val_loss|final_loss|rror" | sed 's/^DLL [^-]*- //' || true
PRETRAINED=$(ls -t "$OUT"/pretraining/phase_2/_step*.ckpt | head -n 1)

step "summarization data: a document's first sentence is its summary (250/25/25 documents; each training
document also gives one example per later sentence, the passage from there on)"
"$PYTHON" -m bart.data.prepare_summarization lead --input "$DATA/corpus/lee.txt" --out "$DATA/summarization" \
  --train_passages

step "ROUGE of the pretrained model before fine-tuning"
"$PYTHON" run_eval.py "$PRETRAINED" "$CONFIG" "$DATA/summarization" "$OUT/eval_pretrained" --overwrite \
  --tokenizer "$TOKENIZER" --bs 8 --eval_beams 2 --max_source_length 64 --max_target_length 64 2> /dev/null

# A tiny model learns to copy from its source only after some 10-13k examples, whatever the steps:
# large batches of short examples (40 source tokens hold the lead sentence's first 24 target tokens)
# at a constant learning rate buy the most examples per second.
step "fine-tuning from the phase-2 checkpoint (finetune.py)"
"$PYTHON" finetune.py --config_path "$CONFIG" --data_dir "$DATA/summarization" \
  --init_checkpoint "$PRETRAINED" --tokenizer "$TOKENIZER" --max_steps ${DEMO_FINETUNE_STEPS:-300} --train_batch_size 64 \
  --learning_rate 2e-3 --lr_scheduler constant --warmup_steps 20 --max_source_length 40 --max_target_length 24 \
  --dropout 0.0 --n_val 25 --val_check_interval 150 --eval_beams 2 --eval_max_gen_length 64 --log_freq 25 \
  --num_workers 0 --output_dir "$OUT/finetuning" --overwrite_output_dir 2>&1 | grep -E "val_rouge|final_loss|rror" | sed 's/^DLL [^-]*- //' || true
FINETUNED=$(ls -t "$OUT"/finetuning/_epoch*_step*.ckpt | head -n 1)

step "ROUGE of the fine-tuned model (run_eval.py on the test split)"
"$PYTHON" run_eval.py "$FINETUNED" "$CONFIG" "$DATA/summarization" "$OUT/eval_finetuned" --overwrite \
  --tokenizer "$TOKENIZER" --bs 8 --eval_beams 2 --max_source_length 64 --max_target_length 64 2> /dev/null

step "loss curves"
"$PYTHON" -m utils.plot_logs "$OUT/pretraining/phase_1/dllogger.json" "$OUT/pretraining/phase_2/dllogger.json" \
  "$OUT/finetuning/dllogger.json" --labels "pretraining phase 1 (128)" "pretraining phase 2 (512)" "fine-tuning" \
  --out "$OUT/plots"

"$PYTHON" - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
rows = [("pretrained, before fine-tuning", f"{out}/eval_pretrained/test_rouge.json"),
        ("after fine-tuning", f"{out}/eval_finetuned/test_rouge.json")]
print("\n| test ROUGE (lead-sentence summaries, 25 documents) | R1 | R2 | RL | RLsum |\n|---|---|---|---|---|")
for name, path in rows:
    r = json.load(open(path))
    print(f"| {name} | {r['rouge1']:.2f} | {r['rouge2']:.2f} | {r['rougeL']:.2f} | {r['rougeLsum']:.2f} |")
PY
cat <<DONE

Done in $(( $(date +%s) - START ))s. Everything is under $OUT:
  data/                      corpus, trained tokenizer and its config_demo.json, LDDL shards (pretrain_lddl_128, pretrain_lddl_512), summarization splits
  pretraining/phase_{1,2}/   checkpoints, dllogger.json, run_config.json
  finetuning/                fine-tuned checkpoint (_epoch*_step*.ckpt), best validation checkpoint, logs
  eval_*/                    test_generations.txt, test_rouge.json, latency log
  plots/                     training_curves.png (a row per phase: loss, learning rate, throughput, validation ROUGE)
  */tensorboard/             TensorBoard events (tensorboard --logdir $OUT)
Next, on a GPU machine: bash scripts/docker/build.sh && bash scripts/docker/launch.sh, then follow the
README's Quick Start (get_pretraining_data.sh, preprocess_pretrain_data.sh, run_pretraining.sh, ...).
DONE
