#!/usr/bin/env bash
# Installs the dependencies, builds everything into build/ and runs the whole
# test suite with ctest. Exits non-zero when anything fails.
#
# Usage: scripts/test.sh [--quick]
#   --quick  runs only the tests labelled unit (`ctest -L unit`: in-process,
#            no services started; the labels are listed in CMakeLists.txt),
#            after the same install and build.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

ctest_args=()
case "${1:-}" in
  "") ;;
  --quick) ctest_args=(-L '^unit$') ;;
  *) echo "usage: scripts/test.sh [--quick]" >&2; exit 2 ;;
esac

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
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$(nproc)" "${ctest_args[@]}" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
echo "----"
grep -E 'tests passed|tests failed' "$log" | tail -n 1 || true
exit "$rc"
