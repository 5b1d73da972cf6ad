#!/usr/bin/env bash
# Configures (Ninja, RelWithDebInfo) into build/ and builds everything.
# Usage: scripts/build.sh [extra cmake --build args, e.g. --target moesplit]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

BUILD_DIR=${BUILD_DIR:-build}
# MOESPLIT_CUDA_ARCHS (e.g. 86) narrows the CUDA architectures compiled
# (default: CMakeLists.txt's list).
cuda_args=()
if [[ -n "${MOESPLIT_CUDA_ARCHS:-}" ]]; then
  cuda_args=(-DCMAKE_CUDA_ARCHITECTURES="$MOESPLIT_CUDA_ARCHS")
fi
if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${cuda_args[@]}"
fi
cmake --build "$BUILD_DIR" -j"$(nproc)" "$@"
