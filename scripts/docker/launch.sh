#!/usr/bin/env bash
# Starts an interactive container with all GPUs, the repository mounted at /workspace/bart and
# host IPC (DataLoader workers share memory). Usage: bash scripts/docker/launch.sh [image tag] [command...]
# Env: DATA_DIR (host folder mounted at /workspace/bart/data), NV_VISIBLE_DEVICES (default all).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TAG=${1:-bart_pyt}
shift $(( $# > 0 ? 1 : 0 ))
MOUNTS=(-v "$REPO":/workspace/bart)
if [ -n "${DATA_DIR:-}" ]; then
  [ -d "$DATA_DIR" ] || { echo "launch.sh: DATA_DIR=$DATA_DIR is not a folder" >&2; exit 2; }
  MOUNTS+=(-v "$(cd "$DATA_DIR" && pwd)":/workspace/bart/data)
fi
CMD=("$@"); [ ${#CMD[@]} -eq 0 ] && CMD=(bash)
exec docker run -it --rm --gpus "device=${NV_VISIBLE_DEVICES:-all}" --ipc=host \
  --ulimit memlock=-1 --ulimit stack=67108864 "${MOUNTS[@]}" -w /workspace/bart "$TAG" "${CMD[@]}"
