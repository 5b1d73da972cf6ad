// Packing into the strip layout of packed.h, the scalar product over it, and
// the dispatch to the AVX-512 VNNI kernel (packed_avx512.cc) or the AVX2 one
// (packed_avx2.cc).

#include "common/quant/packed.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/base/fp16.h"
#include "common/quant/internal/blocks.h"
#include "common/quant/internal/kernels.h"
#include "common/quant/internal/packed_impl.h"
#include "common/quant/internal/unpack.h"

namespace moesplit::quant {
namespace internal {
namespace {

// Codes of one superblock of 16 rows into the Q4_K-style nibble section
// (the low 4 bits of each code).
void PutNibbles(const uint8_t codes[16][256], uint8_t* out) {
  for (int g = 0; g < 8; ++g) {
    for (int c = 0; c < 4; ++c) {
      uint8_t* w = out + 256 * g + 64 * c;
      for (int r = 0; r < 16; ++r) {
        for (int b = 0; b < 4; ++b) {
          const int k = 32 * g + 4 * c + b;
          w[4 * r + b] = static_cast<uint8_t>((codes[r][k] & 0xF) | (codes[r][k + 16] & 0xF) << 4);
        }
      }
    }
  }
}

// Q4_K and Q5_K (then with the fifth bits after Q4_K's sections).
template <typename Block, GgmlType kType>
void PackSuperQ45K(const uint8_t* rows, uint64_t row_bytes, int64_t i, uint8_t* out) {
  uint8_t codes[16][256];
  for (int r = 0; r < 16; ++r) {
    const auto* blk = reinterpret_cast<const Block*>(rows + r * row_bytes) + i;
    int32_t sub[8];
    int16_t mins[8];
    float scale, min;
    UnpackBlock(kType, blk, {codes[r], sub, mins, &scale, &min});
    for (int g = 0; g < 8; ++g) {
      out[kQ4KSub + 16 * g + r] = static_cast<uint8_t>(sub[g]);
      out[kQ4KMins + 32 * (g / 2) + 2 * r + g % 2] = static_cast<uint8_t>(mins[g]);
    }
    std::memcpy(out + kQ4KD + 2 * r, &blk->d, 2);
    std::memcpy(out + kQ4KDmin + 2 * r, &blk->dmin, 2);
  }
  PutNibbles(codes, out);
  if constexpr (kType == GgmlType::kQ5_K) {
    // Span s: byte 4 r + b of its 64 bytes holds, in bit z, the fifth bit
    // of code(r, 32 s + 4 z + b).
    std::memset(out + kQ5KHigh, 0, 512);
    for (int s = 0; s < 8; ++s) {
      for (int r = 0; r < 16; ++r) {
        for (int z = 0; z < 8; ++z) {
          for (int b = 0; b < 4; ++b) {
            out[kQ5KHigh + 64 * s + 4 * r + b] |= static_cast<uint8_t>(((codes[r][32 * s + 4 * z + b] >> 4) & 1) << z);
          }
        }
      }
    }
  }
}

void PackSuperQ6K(const uint8_t* rows, uint64_t row_bytes, int64_t i, uint8_t* out) {
  uint8_t codes[16][256];
  for (int r = 0; r < 16; ++r) {
    const auto* blk = reinterpret_cast<const BlockQ6_K*>(rows + r * row_bytes) + i;
    int32_t sub[16];
    int16_t mins[16];
    float scale, min;
    UnpackBlock(GgmlType::kQ6_K, blk, {codes[r], sub, mins, &scale, &min});
    for (int g = 0; g < 16; ++g) out[kQ6KScales + 16 * g + r] = static_cast<uint8_t>(static_cast<int8_t>(sub[g]));
    std::memcpy(out + kQ6KD + 2 * r, &blk->d, 2);
  }
  PutNibbles(codes, out);
  std::memset(out + kQ6KHigh, 0, 1024);
  for (int s = 0; s < 8; ++s) {
    for (int z = 0; z < 8; ++z) {
      uint8_t* w = out + kQ6KHigh + 128 * s + 64 * (z / 4);
      for (int r = 0; r < 16; ++r) {
        for (int b = 0; b < 4; ++b) {
          w[4 * r + b] |= static_cast<uint8_t>((codes[r][32 * s + 4 * z + b] >> 4) << (2 * (z % 4)));
        }
      }
    }
  }
}

// Column of bit z of a packed Q5_0 fifth-bit byte 4 r + b (packed.h).
constexpr int Q5_0FifthCol(int z, int b) { return z < 4 ? 4 * z + b : 16 + 4 * (z - 4) + b; }

// One 32-column block of 16 rows of Q8_0, MXFP4 or Q5_0 (packed.h).
void PackBlock32(GgmlType type, const uint8_t* rows, uint64_t row_bytes, int64_t i, uint8_t* out) {
  if (type == GgmlType::kQ5_0) std::memset(out + kQ5_0High, 0, 64);
  for (int r = 0; r < 16; ++r) {
    if (type == GgmlType::kQ8_0) {
      const auto* blk = reinterpret_cast<const BlockQ8_0*>(rows + r * row_bytes) + i;
      for (int k = 0; k < 32; ++k) {
        out[64 * (k / 4) + 4 * r + k % 4] = static_cast<uint8_t>(static_cast<uint8_t>(blk->qs[k]) ^ 0x80);
      }
      std::memcpy(out + kQ8_0D + 2 * r, &blk->d, 2);
    } else if (type == GgmlType::kQ5_0) {
      const auto* blk = reinterpret_cast<const BlockQ5_0*>(rows + r * row_bytes) + i;
      uint32_t qh;
      std::memcpy(&qh, blk->qh, 4);
      for (int j = 0; j < 16; ++j) out[64 * (j / 4) + 4 * r + j % 4] = blk->qs[j];
      for (int z = 0; z < 8; ++z) {
        for (int b = 0; b < 4; ++b) {
          out[kQ5_0High + 4 * r + b] |= static_cast<uint8_t>(((qh >> Q5_0FifthCol(z, b)) & 1) << z);
        }
      }
      std::memcpy(out + kQ5_0D + 2 * r, &blk->d, 2);
    } else {
      const auto* blk = reinterpret_cast<const BlockMxfp4*>(rows + r * row_bytes) + i;
      for (int j = 0; j < 16; ++j) out[64 * (j / 4) + 4 * r + j % 4] = blk->qs[j];
      out[kMxfp4E + r] = blk->e;
    }
  }
}

// Signed value of row r, column k of a packed 32-column block (scalar
// reference: the bias is not applied).
int PackedCode32(GgmlType type, const uint8_t* sb, int r, int k) {
  if (type == GgmlType::kQ8_0) return static_cast<int>(sb[64 * (k / 4) + 4 * r + k % 4]) - kQ8_0Bias;
  const int j = k % 16;
  const uint8_t byte = sb[64 * (j / 4) + 4 * r + j % 4];
  const int nibble = k < 16 ? byte & 0xF : byte >> 4;
  if (type == GgmlType::kMXFP4) return kValuesMxfp4[nibble];
  const int z = k < 16 ? j / 4 : 4 + j / 4;
  return (nibble | ((sb[kQ5_0High + 4 * r + j % 4] >> z) & 1) << 4) - kQ5_0Bias;
}

// The scalar product over 32-column blocks: the canonical even/odd chains.
void PackedGemmScalar32(const PackedView& w, int64_t row0, int64_t n_rows, const uint8_t* const* act,
                        int64_t n_tokens, float* y, int64_t ldy) {
  const int64_t nb = w.n_cols / 32;
  const uint64_t sbb = PackedSuperBytes(w.type);
  for (int64_t s = row0 / 16; s < (row0 + n_rows) / 16; ++s) {
    const uint8_t* strip = w.data + s * nb * sbb;
    for (int64_t t = 0; t < n_tokens; ++t) {
      const auto* a = reinterpret_cast<const BlockQ8_0*>(act[t]);
      for (int r = 0; r < 16; ++r) {
        float acc[2] = {0.0f, 0.0f};
        for (int64_t i = 0; i < nb; ++i) {
          const uint8_t* sb = strip + i * sbb;
          int32_t isum = 0;
          for (int k = 0; k < 32; ++k) isum += PackedCode32(w.type, sb, r, k) * a[i].qs[k];
          float scale;
          if (w.type == GgmlType::kMXFP4) {
            scale = E8m0ToFp32Half(sb[kMxfp4E + r]);
          } else {
            uint16_t dh;
            std::memcpy(&dh, sb + (w.type == GgmlType::kQ8_0 ? kQ8_0D : kQ5_0D) + 2 * r, 2);
            scale = Fp16ToFp32(dh);
          }
          acc[i & 1] = std::fma(static_cast<float>(isum), scale * Fp16ToFp32(a[i].d), acc[i & 1]);
        }
        y[t * ldy + (s * 16 - row0) + r] = acc[0] + acc[1];
      }
    }
  }
}

// One packed code of row r, column k of superblock `sb` (scalar reference).
int PackedCode(GgmlType type, const uint8_t* sb, int r, int k) {
  const int g = k / 32, q = (k % 32) / 4, b = k % 4;
  const uint8_t byte = sb[256 * g + 64 * (q % 4) + 4 * r + b];
  const int lo = q < 4 ? byte & 0xF : byte >> 4;
  if (type == GgmlType::kQ4_K) return lo;
  if (type == GgmlType::kQ5_K) return lo | ((sb[kQ5KHigh + 64 * g + 4 * r + b] >> q) & 1) << 4;
  const uint8_t hb = sb[kQ6KHigh + 128 * g + 64 * (q / 4) + 4 * r + b];
  return lo | ((hb >> (2 * (q % 4))) & 3) << 4;
}

float Fma(float a, float b, float c) { return std::fma(a, b, c); }

}  // namespace

const BlockTerm* BlockTerms(const BlockQ8_0* const* a, int64_t n_tokens, int64_t nb, int bias) {
  thread_local std::vector<BlockTerm> terms;
  terms.resize(static_cast<size_t>(n_tokens * nb));
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t i = 0; i < nb; ++i) {
      int32_t sum = 0;
      for (int k = 0; k < 32; ++k) sum += a[t][i].qs[k];
      terms[t * nb + i] = {-bias * sum, Fp16ToFp32(a[t][i].d)};
    }
  }
  return terms.data();
}

uint64_t PackedSuperBytes(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_K: return kQ4KSuperBytes;
    case GgmlType::kQ5_K: return kQ5KSuperBytes;
    case GgmlType::kQ6_K: return kQ6KSuperBytes;
    case GgmlType::kQ8_0: return kQ8_0SuperBytes;
    case GgmlType::kMXFP4: return kMxfp4SuperBytes;
    case GgmlType::kQ5_0: return kQ5_0SuperBytes;
    default: return 0;
  }
}

int PackedCodeBias(GgmlType type) {
  return type == GgmlType::kQ8_0 ? kQ8_0Bias : type == GgmlType::kQ5_0 ? kQ5_0Bias : kMxfp4Bias;
}

void PackedGemmScalarImpl(const PackedView& w, int64_t row0, int64_t n_rows, const uint8_t* const* act,
                          int64_t n_tokens, float* y, int64_t ldy) {
  if (PackedColumns(w.type) == 32) {
    PackedGemmScalar32(w, row0, n_rows, act, n_tokens, y, ldy);
    return;
  }
  const int64_t nsb = w.n_cols / 256;
  const uint64_t sbb = PackedSuperBytes(w.type);
  const bool q4 = w.type == GgmlType::kQ4_K || w.type == GgmlType::kQ5_K;  // groups of 32, mins
  for (int64_t s = row0 / 16; s < (row0 + n_rows) / 16; ++s) {
    const uint8_t* strip = w.data + s * nsb * sbb;
    for (int64_t t = 0; t < n_tokens; ++t) {
      const auto* a = reinterpret_cast<const BlockQ8_K*>(act[t]);
      for (int r = 0; r < 16; ++r) {
        float acc = 0.0f;
        for (int64_t i = 0; i < nsb; ++i) {
          const uint8_t* sb = strip + i * sbb;
          int32_t isum = 0, imin = 0;
          const int gsize = q4 ? 32 : 16;
          for (int g = 0; g < 256 / gsize; ++g) {
            int32_t dot = 0;
            for (int k = g * gsize; k < (g + 1) * gsize; ++k) {
              dot += (PackedCode(w.type, sb, r, k) - (q4 ? 0 : 32)) * a[i].qs[k];
            }
            if (q4) {
              isum += sb[kQ4KSub + 16 * g + r] * dot;
              imin += sb[kQ4KMins + 32 * (g / 2) + 2 * r + g % 2] * (a[i].bsums[2 * g] + a[i].bsums[2 * g + 1]);
            } else {
              isum += static_cast<int8_t>(sb[kQ6KScales + 16 * g + r]) * dot;
            }
          }
          uint16_t dh;
          std::memcpy(&dh, sb + (q4 ? kQ4KD : kQ6KD) + 2 * r, 2);
          acc = Fma(static_cast<float>(isum), Fp16ToFp32(dh) * a[i].d, acc);
          if (q4) {
            uint16_t mh;
            std::memcpy(&mh, sb + kQ4KDmin + 2 * r, 2);
            acc = Fma(static_cast<float>(imin), -(Fp16ToFp32(mh) * a[i].d), acc);
          }
        }
        y[t * ldy + (s * 16 - row0) + r] = acc;
      }
    }
  }
}

}  // namespace internal

bool PackedLayoutExists(GgmlType type) { return internal::PackedSuperBytes(type) > 0; }

int64_t PackedColumns(GgmlType type) {
  if (type == GgmlType::kQ8_0 || type == GgmlType::kMXFP4 || type == GgmlType::kQ5_0) return 32;
  return PackedLayoutExists(type) ? 256 : 0;
}

bool PackedPreferred(GgmlType type) {
  static const bool enabled = [] {
    const char* e = std::getenv("MOESPLIT_PACKED");
    return internal::CpuHasAvx2() && !(e != nullptr && std::strcmp(e, "0") == 0);
  }();
  return enabled && PackedLayoutExists(type);
}

uint64_t PackedMatrixBytes(GgmlType type, int64_t n_rows, int64_t n_cols) {
  const uint64_t sbb = internal::PackedSuperBytes(type);
  const int64_t cols = PackedColumns(type);
  if (sbb == 0 || n_rows <= 0 || n_cols <= 0 || n_rows % 16 != 0 || n_cols % cols != 0) return 0;
  return static_cast<uint64_t>(n_rows / 16) * static_cast<uint64_t>(n_cols / cols) * sbb;
}

void PackRows(GgmlType type, const uint8_t* src, uint64_t row_bytes, int64_t n_rows, int64_t n_cols,
              uint8_t* dst) {
  const uint64_t sbb = internal::PackedSuperBytes(type);
  const int64_t nsb = n_cols / PackedColumns(type);
  for (int64_t s = 0; s < n_rows / 16; ++s) {
    for (int64_t i = 0; i < nsb; ++i) {
      uint8_t* out = dst + (s * nsb + i) * sbb;
      if (PackedColumns(type) == 32) {
        internal::PackBlock32(type, src + s * 16 * row_bytes, row_bytes, i, out);
      } else if (type == GgmlType::kQ4_K) {
        internal::PackSuperQ45K<internal::BlockQ4_K, GgmlType::kQ4_K>(src + s * 16 * row_bytes, row_bytes, i, out);
      } else if (type == GgmlType::kQ5_K) {
        internal::PackSuperQ45K<internal::BlockQ5_K, GgmlType::kQ5_K>(src + s * 16 * row_bytes, row_bytes, i, out);
      } else {
        internal::PackSuperQ6K(src + s * 16 * row_bytes, row_bytes, i, out);
      }
    }
  }
}

void PackedGemm(const PackedView& w, int64_t row0, int64_t n_rows, const uint8_t* const* act,
                int64_t n_tokens, float* y, int64_t ldy) {
  if (internal::CpuHasAvx512Vnni() && internal::PackedGemmAvx512(w, row0, n_rows, act, n_tokens, y, ldy)) {
    return;
  }
  if (internal::CpuHasAvx2() && internal::PackedGemmAvx2(w, row0, n_rows, act, n_tokens, y, ldy)) return;
  internal::PackedGemmScalarImpl(w, row0, n_rows, act, n_tokens, y, ldy);
}

void PackedGemmScalar(const PackedView& w, int64_t row0, int64_t n_rows, const uint8_t* const* act,
                      int64_t n_tokens, float* y, int64_t ldy) {
  internal::PackedGemmScalarImpl(w, row0, n_rows, act, n_tokens, y, ldy);
}

}  // namespace moesplit::quant
