#!/usr/bin/env bash
# Installs the dependencies, builds everything into build/ and runs the whole
# test suite with ctest. Exits non-zero when anything fails.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/install-deps.sh
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
