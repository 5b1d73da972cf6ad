#!/usr/bin/env bash
# Builds the GPU test and benchmark binaries for sm_90 and packs them, with
# the non-CUDA shared libraries they need and the oracle fixtures that fit,
# into ONE git-ignored folder (gpu-pack/ at the repo root, < 64 MiB) for the
# lent GPU machine. Run here (no GPU needed); then, on the device, from the
# repo root with gpu-pack/ carried: bash tests/gpu/run.sh
#
#   bash tests/gpu/package.sh            # build dir build-gpu/, arch 90-real
#   BUILD_DIR=... CUDA_ARCH=... JOBS=... bash tests/gpu/package.sh
#   (CUDA_ARCH 90-real: sm_90 code without PTX, which doubled the size of
#   every binary; the H200 runs sm_90 code)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
BUILD_DIR=${BUILD_DIR:-$ROOT/build-gpu}
CUDA_ARCH=${CUDA_ARCH:-90-real}  # SASS only (no PTX): the binaries stay small
JOBS=${JOBS:-2}
PKG=$ROOT/gpu-pack
LIMIT_MIB=${LIMIT_MIB:-62}
FIXTURES=${MOESPLIT_FIXTURES_DIR:-$ROOT/../shared/fixtures}
BINARIES=(cuda_block_codec_test cuda_device_test cuda_ops_test cuda_forward_test sequence_runner_test gpu_bench)

if [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "package.sh: /usr/local/cuda/bin/nvcc not found" >&2
  exit 1
fi
cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOESPLIT_CUDA_SHARED_KERNELS=ON \
  -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" -DMOESPLIT_FIXTURES_DIR="$FIXTURES" >/dev/null
cmake --build "$BUILD_DIR" -j"$JOBS" --target "${BINARIES[@]}"

rm -rf "$PKG"
mkdir -p "$PKG/bin" "$PKG/lib" "$PKG/fixtures/models"
for b in "${BINARIES[@]}"; do
  src=$(find "$BUILD_DIR" -type f -name "$b" -perm -u+x | head -1)
  [ -n "$src" ] || { echo "package.sh: $b not built" >&2; exit 1; }
  cp "$src" "$PKG/bin/$b"
  strip --strip-unneeded "$PKG/bin/$b"
done

# Shared libraries: everything ldd names except glibc, the dynamic loader and
# the CUDA driver and runtime (the device has those).
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libresolv|libutil|libcuda\.so|libcudart|libcublas|libcublasLt)'
for b in "${BINARIES[@]}"; do
  ldd "$PKG/bin/$b" | awk '/=> \//{print $1, $3}'
done | sort -u | while read -r soname path; do
  if [[ $soname =~ $skip ]]; then continue; fi
  cp -L "$path" "$PKG/lib/$soname"
done
if ldd "$PKG/bin/"* | grep -qi grpc; then
  echo "package.sh: a GPU binary links gRPC" >&2
  exit 1
fi

# Fixtures, most informative first, while the folder stays under the limit.
used_kib() { du -sk "$PKG" | cut -f1; }
budget_kib=$((LIMIT_MIB * 1024))
for name in qwen3moe-tiny-f16 qwen35moe-tiny-f16 qwen35moe-tiny-q8_0 gptoss-tiny-mxfp4_moe \
            gptoss-tiny-f16 deepseek2-tiny-q8_0 deepseek2-tiny-f16 qwen3moe-tiny-q4_k_m \
            qwen2moe-tiny-q4_k_m qwen3moe-tiny-q8_0 \
            qwen3moe-tiny-iq4_xs qwen3moe-tiny-mxfp4_moe qwen3moe-tiny-q2_k qwen3moe-tiny-q6_k \
            qwen3moe-tiny-iq4_nl qwen3moe-tiny-q3_k_m qwen3moe-tiny-q4_0 qwen2moe-tiny-q8_0; do
  files=("$FIXTURES/models/$name.json" "$FIXTURES/models/$name.gguf" "$FIXTURES"/models/"$name".[0-9]*.logits.f32)
  need=$(du -skc "${files[@]}" 2>/dev/null | tail -1 | cut -f1)
  [ -f "$FIXTURES/models/$name.gguf" ] || continue
  if [ $(( $(used_kib) + need )) -le "$budget_kib" ]; then
    cp "${files[@]}" "$PKG/fixtures/models/"
  fi
done

cat > "$PKG/MANIFEST.txt" <<MAN
moesplit GPU package (tests/gpu/package.sh), built $(date -u +%FT%TZ)
commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' + local changes')
cuda arch: $CUDA_ARCH
binaries: ${BINARIES[*]}
libraries: $(ls "$PKG/lib" | tr '\n' ' ')
fixture models: $(ls "$PKG/fixtures/models" | sed -n 's/\.gguf$//p' | tr '\n' ' ')
MAN
total=$(used_kib)
cat "$PKG/MANIFEST.txt"
echo "size: $((total / 1024)) MiB (limit $LIMIT_MIB MiB)"
if [ "$total" -gt "$budget_kib" ]; then
  echo "package.sh: $PKG is over the limit" >&2
  exit 1
fi
