#!/usr/bin/env bash
# The one-command GPU suite: versions, tests/e2e/test_gpu.py, measured peaks, training and beam-search
# throughput against transformers, top kernels; report.md and the raw logs in OUT_DIR (and OUT_DIR.tar.gz), within 9 minutes
# on one GPU. --dry-run runs the same parts on CPU with tiny shapes. Details: benchmarks/gpu_suite.py.
#   bash benchmarks/gpu_suite.sh OUT_DIR [--dry-run] [--budget SECONDS] [--parts env,peaks,...]
set -euo pipefail
if [ $# -lt 1 ]; then
  echo "gpu_suite.sh: OUT_DIR missing: bash benchmarks/gpu_suite.sh OUT_DIR [--dry-run] [--budget SECONDS]" >&2
  exit 2
fi
exec "${PYTHON:-python3}" "$(dirname "${BASH_SOURCE[0]}")/gpu_suite.py" "$@"
