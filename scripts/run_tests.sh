#!/usr/bin/env bash
# Sets up the environment (scripts/install.sh), runs ruff and the whole test suite on CPU.
# GPU-only tests skip themselves where CUDA is absent. Extra arguments go to pytest; test files or
# folders among them (tests/training, tests/optim/test_lamb.py, tests/optim/test_lamb.py::test_y) run instead of
# the whole suite.
# --quick: the quick tier (tests/conftest.py's rule): every folder's tests that start no process and run no entry
# script, not slow, and one whole job (pretrain.py then finetune.py); with a folder, that folder's quick tests.
# tests/README.md says which folder holds what.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# Test files run in parallel, one per CPU core up to 4 (TEST_WORKERS=N to choose any number, 1 for one
# process), each worker with one thread; the tests of one file stay in one worker (their module
# fixtures are built once).
source scripts/params/common.sh  # the checks
check_env count TEST_WORKERS
check_env count OMP_NUM_THREADS
checks_done
source scripts/params/python_env.sh
if [ -n "${TEST_WORKERS:-}" ]; then
  WORKERS=$TEST_WORKERS
else
  WORKERS=$(nproc)
  [ "$WORKERS" -le 4 ] || WORKERS=4
fi
bash scripts/install.sh
# the linter first (pyproject.toml's rules; seconds): a finding fails the run before the tests start
"$PYTHON" -m ruff check --no-cache . || { echo "run_tests.sh: ruff found the problems above (pyproject.toml)" >&2; exit 1; }
PARALLEL=()
if [ "$WORKERS" -gt 1 ]; then
  PARALLEL=(-n "$WORKERS" --dist loadfile -p no:benchmark)  # pytest-benchmark, where installed, only warns under xdist
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
fi
# no path given: pytest.ini's testpaths (tests/) is the whole suite; a path among the arguments runs only that
exec "$PYTHON" -m pytest "${PARALLEL[@]}" "$@"
