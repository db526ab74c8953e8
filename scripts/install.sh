#!/usr/bin/env bash
# Installs what the recipe needs into the current Python and skips what is already there.
# torch is installed only when none is importable: inside the NGC container the container's
# own (CUDA) torch is kept untouched.
# Environment: PYTHON (python3), TORCH_INDEX_URL (a package index URL, or pypi), BART_USE_SYSTEM_MPI (0 or 1),
# BART_TRANSFORMERS (5, the default: requirements.txt's transformers 5.x; or 4: transformers 4.57 and its
# tokenizers and huggingface_hub from requirements-transformers4.txt instead, with optimum-onnx and onnxruntime).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# the checks inline: the image's build copies this file alone (Dockerfile), without scripts/params/common.sh
die() { echo "install.sh: $*" >&2; exit 2; }
PYTHON=${PYTHON:-python3}
command -v "$PYTHON" >/dev/null 2>&1 || die "PYTHON (environment) '$PYTHON' is not a command found on PATH"
[[ "${TORCH_INDEX_URL:-pypi}" =~ ^(pypi|(https?|file)://[^[:space:]]+)$ ]] ||
  die "TORCH_INDEX_URL (environment) '$TORCH_INDEX_URL' is not a URL (https://..., file://...) or pypi"
[[ "${BART_USE_SYSTEM_MPI:-0}" =~ ^[01]$ ]] || die "BART_USE_SYSTEM_MPI (environment) '$BART_USE_SYSTEM_MPI' is not 0 or 1"
[[ "${BART_TRANSFORMERS:-5}" =~ ^[45]$ ]] ||
  die "BART_TRANSFORMERS (environment) '$BART_TRANSFORMERS' is not 4 (transformers 4.57) or 5 (transformers 5.x, the default)"
[ "${CHECK_ONLY:-0}" != 1 ] || { echo "install.sh: every value checked (CHECK_ONLY=1: nothing started)"; exit 0; }

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
# BART_TRANSFORMERS=4: requirements-transformers4.txt's pins replace the same packages' lines.
REQUIREMENTS=requirements.txt
if [ "${BART_USE_SYSTEM_MPI:-0}" = "1" ] || [ "${BART_TRANSFORMERS:-5}" = "4" ]; then
  REQUIREMENTS=$(mktemp); trap 'rm -f "$REQUIREMENTS"' EXIT
  EXCLUDED='^(transformers|tokenizers|huggingface_hub|datasets)[=<>!~ ]'  # datasets 5 needs huggingface_hub 1+
  [ "${BART_TRANSFORMERS:-5}" = "4" ] || EXCLUDED='^$'
  grep -Ev "$EXCLUDED" requirements.txt | { if [ "${BART_USE_SYSTEM_MPI:-0}" = "1" ]; then grep -v '^mpich'; else cat; fi; } > "$REQUIREMENTS"
  [ "${BART_TRANSFORMERS:-5}" = "5" ] || grep -Ev '^\s*(#|$)' requirements-transformers4.txt >> "$REQUIREMENTS"
  [ "${BART_USE_SYSTEM_MPI:-0}" = "0" ] ||
    echo "[install] BART_USE_SYSTEM_MPI=1: the system's MPI ($(command -v mpirun || echo 'no mpirun on PATH')) is used, not pip's mpich"
  [ "${BART_TRANSFORMERS:-5}" = "5" ] || echo "[install] BART_TRANSFORMERS=4: transformers 4.57 (requirements-transformers4.txt)"
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
