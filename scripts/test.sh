#!/usr/bin/env bash
# Installs the dependencies, builds everything into build/ and runs the whole
# test suite with ctest. Exits non-zero when anything fails.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/install-deps.sh
# Without a GPU the CUDA code is only compiled (its tests skip): one
# architecture is enough to check it, and saves minutes on 2 cores.
if ! nvidia-smi -L >/dev/null 2>&1; then
  export MOESPLIT_CUDA_ARCHS=${MOESPLIT_CUDA_ARCHS:-86}
fi
bash scripts/build.sh

BUILD_DIR=${BUILD_DIR:-build}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$(nproc)" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
echo "----"
grep -E 'tests passed|tests failed' "$log" | tail -n 1 || true
exit "$rc"
