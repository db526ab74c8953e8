#!/usr/bin/env bash
# Installs what the recipe needs into the current Python and skips what is already there.
# torch is installed only when none is importable: inside the NGC container the container's
# own (CUDA) torch is kept untouched.
set -euo pipefail
PYTHON=${PYTHON:-python3}
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if TORCH_VERSION=$("$PYTHON" -c "import torch; print(torch.__version__)" 2>/dev/null); then
  echo "[install] torch $TORCH_VERSION already present: kept"
else
  # Without an NVIDIA GPU, PyTorch's CPU wheel index (about 200 MB instead of several GB of CUDA
  # libraries); TORCH_INDEX_URL chooses another index, TORCH_INDEX_URL=pypi the default one.
  INDEX=${TORCH_INDEX_URL:-}
  if [ -z "$INDEX" ] && ! command -v nvidia-smi >/dev/null 2>&1; then INDEX=https://download.pytorch.org/whl/cpu; fi
  if [ -n "$INDEX" ] && [ "$INDEX" != "pypi" ]; then
    echo "[install] no torch found: installing torch==2.13.0 from $INDEX"
    "$PYTHON" -m pip install --quiet --timeout 15 --retries 1 --index-url "$INDEX" torch==2.13.0 || {
      echo "[install] $INDEX could not be used: installing torch==2.13.0 from the default package index"
      "$PYTHON" -m pip install --quiet torch==2.13.0; }
  else
    echo "[install] no torch found: installing torch==2.13.0"
    "$PYTHON" -m pip install --quiet torch==2.13.0
  fi
fi

# Inside the NGC container (BART_USE_SYSTEM_MPI=1, set by the Dockerfile) the container's MPI is
# used: pip's mpich (a second mpirun) is left out and mpi4py builds against the system MPI.
REQUIREMENTS=requirements.txt
if [ "${BART_USE_SYSTEM_MPI:-0}" = "1" ]; then
  REQUIREMENTS=$(mktemp); trap 'rm -f "$REQUIREMENTS"' EXIT
  grep -v '^mpich' requirements.txt > "$REQUIREMENTS"
  echo "[install] BART_USE_SYSTEM_MPI=1: the system's MPI ($(command -v mpirun || echo 'no mpirun on PATH')) is used, not pip's mpich"
fi
export REQUIREMENTS

# Fast path: everything already importable at the pinned versions -> nothing to do.
if "$PYTHON" - <<'PY' 2>/dev/null
import importlib.metadata as md, re, sys
def reqs(path):
    for line in open(path):
        line = line.split("#")[0].strip()
        if line:
            yield line
import os
for path in (os.environ["REQUIREMENTS"], "requirements-nodeps.txt"):
    for req in reqs(path):
        name = re.split(r"[\[<>=!~ ]", req, maxsplit=1)[0]
        version = md.version(name)  # raises when missing
        pinned = re.search(r"==\s*([^,; ]+)", req)
        if pinned and pinned.group(1) != version:
            sys.exit(1)
PY
then
  echo "[install] requirements already satisfied"
else
  "$PYTHON" -m pip install --quiet -r "$REQUIREMENTS"
  "$PYTHON" -m pip install --quiet --no-deps -r requirements-nodeps.txt
  echo "[install] requirements installed"
fi
