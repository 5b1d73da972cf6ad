#!/usr/bin/env bash
# Configures (Ninja, RelWithDebInfo) into build/ and builds everything.
# Usage: scripts/build.sh [extra cmake --build args, e.g. --target moesplit]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

BUILD_DIR=${BUILD_DIR:-build}
if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
fi
cmake --build "$BUILD_DIR" -j"$(nproc)" "$@"
