#!/usr/bin/env bash
# The AddressSanitizer/UBSan soak (not in CI): builds build-asan/ when its
# binaries are missing (tests/soak/build_asan.sh), then runs tests/soak/soak.py
# for DURATION seconds (default 1800) and prints its summary (also written to
# WORK/summary.txt; RSS samples in WORK/rss.csv, sanitizer logs in WORK/san/).
# Usage: tests/soak/soak.sh [--duration S] [--clients N]   (WORK: $SOAK_WORK,
#        default build-asan/soak-<UTC time>)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
BUILD_DIR=${BUILD_DIR:-build-asan}
for b in moesplit-dense moesplit-expert-worker; do
  if [[ ! -x "$BUILD_DIR/bin/$b" ]]; then
    BUILD_DIR="$BUILD_DIR" tests/soak/build_asan.sh
    break
  fi
done
# The interpreter that can import grpc (Debian python3-grpcio): the system one.
PY=${SOAK_PYTHON:-/usr/bin/python3}
if ! "$PY" -c "import grpc, grpc_tools.protoc" 2>/dev/null; then
  echo "soak: $PY cannot import grpc/grpc_tools; run scripts/install-deps.sh" >&2
  exit 1
fi
WORK=${SOAK_WORK:-$BUILD_DIR/soak-$(date -u +%Y%m%dT%H%M%S)}
mkdir -p "$WORK"
exec "$PY" tests/soak/soak.py --bin "$BUILD_DIR/bin" --work "$WORK" "$@"
