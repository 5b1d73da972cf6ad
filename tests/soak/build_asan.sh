#!/usr/bin/env bash
# Configures build-asan/ (AddressSanitizer + UndefinedBehaviorSanitizer, CUDA
# off, -O1 -g) and builds the binaries the soak runs.
# Usage: tests/soak/build_asan.sh   (BUILD_DIR overrides build-asan;
#   SOAK_TARGETS the targets, default the three user-facing binaries; the
#   soak itself needs only the two services)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
BUILD_DIR=${BUILD_DIR:-build-asan}
san="-fsanitize=address,undefined -fno-omit-frame-pointer"
if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DMOESPLIT_CUDA=OFF \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
    -DCMAKE_C_FLAGS="$san" -DCMAKE_CXX_FLAGS="$san" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
    -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined"
fi
read -r -a targets <<<"${SOAK_TARGETS:-moesplit-dense moesplit-expert-worker moesplit}"
nice -n 15 cmake --build "$BUILD_DIR" -j"${SOAK_BUILD_JOBS:-2}" --target "${targets[@]}"
