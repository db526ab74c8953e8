#!/usr/bin/env bash
# Builds the recipe's container image. Usage: bash scripts/docker/build.sh [image tag]
# Env: FROM_IMAGE_NAME (base NGC PyTorch image), BUILD_APEX=0 to skip the apex build.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
if [ $# -gt 1 ]; then echo "usage: bash scripts/docker/build.sh [image tag]" >&2; exit 2; fi
TAG=${1:-bart_pyt}
ARGS=(--network=host -t "$TAG" --build-arg "BUILD_APEX=${BUILD_APEX:-1}")
[ -n "${FROM_IMAGE_NAME:-}" ] && ARGS+=(--build-arg "FROM_IMAGE_NAME=$FROM_IMAGE_NAME")
exec docker build "${ARGS[@]}" .
