#!/usr/bin/env bash
# Sets up the environment (scripts/install.sh) and runs the whole test suite on CPU.
# GPU-only tests skip themselves where CUDA is absent. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/params/python_env.sh
bash scripts/install.sh
exec "$PYTHON" -m pytest tests "$@"
