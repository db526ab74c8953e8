#!/usr/bin/env bash
# CI's second step: the parity, tokenizer, export, hub and README tests again on transformers 4.57, and the ONNX
# export's, which needs it (optimum-onnx 0.1.0: transformers<4.58). The default set, requirements.txt, is
# transformers 5.x; scripts/run_tests.sh runs the whole suite on it.
# The environment is its own: a virtual environment (TRANSFORMERS4_ENV, default .venv-transformers4) that
# sees the main one's packages through a .pth file after its own, into which scripts/install.sh with
# BART_TRANSFORMERS=4 installs transformers 4.57, its tokenizers and huggingface_hub, and optimum-onnx with
# onnxruntime (torch and the rest are the main environment's, not installed twice). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/params/common.sh  # the checks
check_env count TEST_WORKERS
checks_done
source scripts/params/python_env.sh
TESTS=(tests/generation/test_generate_like_transformers.py tests/generation/test_generation_arguments.py
       tests/generation/test_generation_options.py tests/generation/test_sampling.py tests/generation/test_group_beam_search.py
       tests/generation/test_decoding_machinery.py tests/modeling/test_modeling_parity.py tests/tokenization/test_tokenizer.py
       tests/tokenization/test_train_tokenizer.py tests/export/test_export.py tests/export/test_hub.py
       tests/export/test_onnx.py tests/e2e/test_readme.py)
# left to the main step: the tests of these files that transformers takes no part in (file modes, bad input,
# replacing a folder, the entry scripts' flags and hub ids, the shell scripts' usage)
NOT_TRANSFORMERS="umasks_mode or bad_inputs_are_one_line or replaces_only_with_overwrite or entry_scripts"
NOT_TRANSFORMERS+=" or flags_named_in_the_readme or script_usage or every_script_and_file"
ENV_DIR=${TRANSFORMERS4_ENV:-$PWD/.venv-transformers4}
bash scripts/install.sh  # the main environment first (the one the layer sits on)
if [ ! -x "$ENV_DIR/bin/python" ]; then
  "$PYTHON" -m venv "$ENV_DIR" || { echo "$ME: $PYTHON -m venv $ENV_DIR failed; install the venv module" >&2; exit 2; }
fi
# the main environment's package folders, after the layer's own (a .pth file's lines are appended to sys.path)
LAYER=$("$ENV_DIR/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
"$PYTHON" -c "import sys; print('\n'.join(p for p in sys.path if p.endswith(('site-packages', 'dist-packages'))))" \
  > "$LAYER/_bart_main_environment.pth"
PYTHON="$ENV_DIR/bin/python" BART_TRANSFORMERS=4 bash scripts/install.sh
"$ENV_DIR/bin/python" -c "import transformers, sys; v = transformers.__version__; print(f'[transformers 4] {v}')
sys.exit(0 if v.startswith('4.57') else 1)" || { echo "$ME: $ENV_DIR does not hold transformers 4.57" >&2; exit 1; }
WORKERS=${TEST_WORKERS:-$(nproc)}
[ "$WORKERS" -le 4 ] || WORKERS=4
PARALLEL=()
if [ "$WORKERS" -gt 1 ]; then
  PARALLEL=(-n "$WORKERS" --dist loadfile -p no:benchmark)
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
fi
exec "$ENV_DIR/bin/python" -m pytest "${PARALLEL[@]}" -k "not ($NOT_TRANSFORMERS)" "${TESTS[@]}" "$@"
