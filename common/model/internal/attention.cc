#include "common/model/internal/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "common/base/fp16.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MOESPLIT_HAVE_X86_F16C 1
#include <immintrin.h>
#endif

namespace moesplit::model::internal {
namespace {

// The sink step (attention.h): out[0..dv) holds f32(acc16), m and *sum the
// softmax's running max and sum.
void ApplySink(float sink, float m, float* sum, float* out, int64_t dv) {
  if (sink > m) {
    const float ms = std::exp(m - sink);
    for (int64_t c = 0; c < dv; ++c) out[c] *= ms;
    *sum = std::fma(*sum, ms, 1.0f);
  } else {
    *sum = std::fma(*sum, 1.0f, std::exp(sink - m));
  }
}

// AttendHead's last steps for every query i of a fused group: the sink, then
// out = acc * (1 / sum); m[i], sum[i] its softmax's running max and sum, its
// accumulator (f16 values held as f32) at acc + i * dvp.
[[maybe_unused]] void FinishGroup(const GroupAttention& g, const float* m, const float* sum, float* acc, int64_t dvp) {
  for (int64_t i = 0; i < g.n_q; ++i) {
    float s = sum[i];
    float* a = acc + i * dvp;
    if (g.sinks != nullptr && g.sinks[i] > -INFINITY) ApplySink(g.sinks[i], m[i], &s, a, g.dv);
    const float inv = s == 0.0f ? 0.0f : 1.0f / s;
    for (int64_t c = 0; c < g.dv; ++c) g.out[i][c] = a[c] * inv;
  }
}

constexpr int64_t kStep = 64;  // ggml's GGML_F16_STEP for AVX-512
constexpr int kLanes = 16;     // GGML_F16_EPR for AVX-512
constexpr int64_t kChunk = 128;  // positions whose scores a fused group computes at once

// The reduction of the 4 x 16 accumulators, as GGML_F32Cx16_REDUCE with
// GCC's _mm512_reduce_add_ps.
float Reduce(const float acc[4][kLanes]) {
  float v[kLanes];
  for (int l = 0; l < kLanes; ++l) {
    const float a02 = acc[0][l] + acc[2][l];
    const float a13 = acc[1][l] + acc[3][l];
    v[l] = a02 + a13;
  }
  float t8[8], t4[4];
  for (int l = 0; l < 8; ++l) t8[l] = v[l + 8] + v[l];
  for (int l = 0; l < 4; ++l) t4[l] = t8[l + 4] + t8[l];
  const float r0 = t4[0] + t4[2];
  const float r1 = t4[1] + t4[3];
  return r0 + r1;
}

float DotTail(int64_t begin, int64_t n, const uint16_t* x, const uint16_t* y, double sum) {
  for (int64_t i = begin; i < n; ++i) {
    sum += static_cast<double>(Fp16ToFp32(x[i]) * Fp16ToFp32(y[i]));
  }
  return static_cast<float>(sum);
}

float DotScalar(int64_t n, const uint16_t* x, const uint16_t* y) {
  const int64_t np = n & ~(kStep - 1);
  float acc[4][kLanes] = {};
  for (int64_t i = 0; i < np; i += kStep) {
    for (int j = 0; j < 4; ++j) {
      for (int l = 0; l < kLanes; ++l) {
        const int64_t e = i + j * kLanes + l;
        acc[j][l] = std::fma(Fp16ToFp32(x[e]), Fp16ToFp32(y[e]), acc[j][l]);
      }
    }
  }
  return DotTail(np, n, x, y, np > 0 ? Reduce(acc) : 0.0);
}

void MadScalar(int64_t n, uint16_t* y, const uint16_t* x, float v) {
  for (int64_t i = 0; i < n; ++i) {
    y[i] = Fp32ToFp16(std::fma(Fp16ToFp32(x[i]), v, Fp16ToFp32(y[i])));
  }
}

void ScaleScalar(int64_t n, uint16_t* y, float v) {
  for (int64_t i = 0; i < n; ++i) y[i] = Fp32ToFp16(Fp16ToFp32(y[i]) * v);
}

#ifdef MOESPLIT_HAVE_X86_F16C

#define MOESPLIT_TARGET __attribute__((target("avx2,fma,f16c")))

MOESPLIT_TARGET inline __m256 Load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
MOESPLIT_TARGET inline void Store8(uint16_t* p, __m256 v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

// ggml's AVX-512 reduction of the 4 x 16 accumulators held as (lower,
// upper) pairs of 8 lanes: ((a0+a2)+(a1+a3)), 16 -> 8 -> 4 lanes, then
// (l0+l2)+(l1+l3).
MOESPLIT_TARGET inline float ReduceLoHi(const __m256 lo[4], const __m256 hi[4]) {
  const __m256 vlo = _mm256_add_ps(_mm256_add_ps(lo[0], lo[2]), _mm256_add_ps(lo[1], lo[3]));
  const __m256 vhi = _mm256_add_ps(_mm256_add_ps(hi[0], hi[2]), _mm256_add_ps(hi[1], hi[3]));
  const __m256 t8 = _mm256_add_ps(vhi, vlo);
  const __m128 t4 = _mm_add_ps(_mm256_extractf128_ps(t8, 1), _mm256_castps256_ps128(t8));
  const __m128 h = _mm_add_ps(t4, _mm_movehl_ps(t4, t4));  // l0+l2, l1+l3
  return _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps(h, h, 1)));
}

// 16-lane accumulators as (lower, upper) pairs of 8 lanes.
MOESPLIT_TARGET float DotVector(int64_t n, const uint16_t* x, const uint16_t* y) {
  const int64_t np = n & ~(kStep - 1);
  if (np == 0) return DotTail(0, n, x, y, 0.0);
  __m256 lo[4], hi[4];
  for (int j = 0; j < 4; ++j) lo[j] = hi[j] = _mm256_setzero_ps();
  for (int64_t i = 0; i < np; i += kStep) {
    for (int j = 0; j < 4; ++j) {
      const int64_t e = i + j * kLanes;
      lo[j] = _mm256_fmadd_ps(Load8(x + e), Load8(y + e), lo[j]);
      hi[j] = _mm256_fmadd_ps(Load8(x + e + 8), Load8(y + e + 8), hi[j]);
    }
  }
  return DotTail(np, n, x, y, ReduceLoHi(lo, hi));
}

MOESPLIT_TARGET void MadVector(int64_t n, uint16_t* y, const uint16_t* x, float v) {
  const __m256 vv = _mm256_set1_ps(v);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) Store8(y + i, _mm256_fmadd_ps(Load8(x + i), vv, Load8(y + i)));
  MadScalar(n - i, y + i, x + i, v);
}

MOESPLIT_TARGET void ScaleVector(int64_t n, uint16_t* y, float v) {
  const __m256 vv = _mm256_set1_ps(v);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) Store8(y + i, _mm256_mul_ps(Load8(y + i), vv));
  ScaleScalar(n - i, y + i, v);
}

// Thread-local growable scratch (uninitialised, 64-byte aligned): `slot`
// names one of a few buffers that are used at the same time.
float* ThreadScratch(int slot, int64_t n) {
  struct Buf {
    std::unique_ptr<float[]> p;
    int64_t cap = 0;
  };
  constexpr int kSlots = 8;
  thread_local Buf bufs[kSlots];
  Buf& b = bufs[slot];
  if (b.cap < n) {
    b.p.reset(new float[static_cast<size_t>(n) + 16]);
    b.cap = n;
  }
  return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(b.p.get()) + 63) &
                                  ~uintptr_t{63});
}

// glibc's expf (2.28 and later, the build with FMA: __expf_fma), bit for
// bit: x * 32/ln2 = k + r in double, 2^(k/32) from a table of 32 entries
// (the bits of 2^(i/32) less i << 47, as glibc's __exp2f_data.tab), a cubic
// in r, the product rounded to float once. Exp8 (AVX2) and Exp16 (AVX-512)
// compute it in vector lanes; a check at first use compares each with the
// library before the softmax uses it.
struct ExpTable {
  alignas(64) uint64_t t[32];
  ExpTable() {
    for (int i = 0; i < 32; ++i) {
      const double v = static_cast<double>(std::exp2(static_cast<long double>(i) / 32));
      uint64_t b;
      std::memcpy(&b, &v, sizeof(b));
      t[i] = b - (static_cast<uint64_t>(i) << 47);
    }
  }
};

const ExpTable& ExpTab() {
  static const ExpTable tab;
  return tab;
}

// Whether `store` (y = exp(x), `lanes` floats at a time) equals std::exp on
// this machine's library: edge cases and a sweep of the floats a softmax
// exponentiates (x <= 0) and some above.
bool ExpStoreMatchesLibm(void (*store)(const float* x, float* y), int lanes) {
  std::vector<float> xs = {0.0f,     -0.0f,     -INFINITY,    INFINITY, NAN,       -NAN,
                           88.0f,    88.72283f, 88.7229f,     89.0f,    -87.9f,    -88.0f,
                           -100.0f,  -103.0f,   -103.278923f, -103.28f, -103.5f,   -103.972076f,
                           -103.98f, -104.0f,   -1e30f,       1e30f,    0x1p-149f, -0x1p-149f,
                           1e-8f,    -1e-8f};
  for (uint32_t b = 0x80000000u; b < 0xc3000000u; b += 0x7f01u) xs.push_back(Fp32FromBits(b));
  for (uint32_t b = 0; b < 0x43000000u; b += 0x3f9f1u) xs.push_back(Fp32FromBits(b));
  while (xs.size() % lanes != 0) xs.push_back(-1.0f);
  std::vector<float> out(xs.size());
  for (size_t i = 0; i < xs.size(); i += lanes) store(xs.data() + i, out.data() + i);
  for (size_t i = 0; i < xs.size(); ++i) {
    const float want = std::exp(xs[i]);
    if (Fp32ToBits(out[i]) != Fp32ToBits(want) && !(std::isnan(want) && std::isnan(out[i]))) {
      return false;
    }
  }
  return true;
}

// 4 lanes of the double-precision core (|x| < 88, finite).
MOESPLIT_TARGET inline __m256d ExpQuad(__m256d xd, const ExpTable& tab) {
  const __m256d inv_ln2_n = _mm256_set1_pd(0x1.71547652b82fep0 * 32);
  const __m256d shift = _mm256_set1_pd(0x1.8p52);
  const __m256d kd0 = _mm256_fmadd_pd(inv_ln2_n, xd, shift);
  const __m256i ki = _mm256_castpd_si256(kd0);
  const __m256d kd = _mm256_sub_pd(kd0, shift);
  const __m256d r = _mm256_fmsub_pd(inv_ln2_n, xd, kd);
  const __m256i t = _mm256_i64gather_epi64(reinterpret_cast<const long long*>(tab.t),
                                           _mm256_and_si256(ki, _mm256_set1_epi64x(31)), 8);
  const __m256d sc = _mm256_castsi256_pd(_mm256_add_epi64(t, _mm256_slli_epi64(ki, 47)));
  const __m256d z = _mm256_fmadd_pd(r, _mm256_set1_pd(0x1.c6af84b912394p-5 / (32.0 * 32 * 32)),
                                    _mm256_set1_pd(0x1.ebfce50fac4f3p-3 / (32.0 * 32)));
  const __m256d r2 = _mm256_mul_pd(r, r);
  const __m256d y = _mm256_fmadd_pd(r, _mm256_set1_pd(0x1.62e42ff0c52d6p-1 / 32), _mm256_set1_pd(1.0));
  return _mm256_mul_pd(_mm256_fmadd_pd(z, r2, y), sc);
}

// std::exp on 8 lanes: lanes with |x| >= 88 or not finite (glibc's special
// cases; at most one per query in a softmax, its first -inf) by the library.
MOESPLIT_TARGET inline __m256 Exp8(__m256 x, const ExpTable& tab) {
  const __m128 lo = _mm256_cvtpd_ps(ExpQuad(_mm256_cvtps_pd(_mm256_castps256_ps128(x)), tab));
  const __m128 hi = _mm256_cvtpd_ps(ExpQuad(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)), tab));
  __m256 e = _mm256_set_m128(hi, lo);
  const __m256i top =
      _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(x), 20), _mm256_set1_epi32(0x7ff));
  const int big = _mm256_movemask_ps(
      _mm256_castsi256_ps(_mm256_cmpgt_epi32(top, _mm256_set1_epi32(0x42a))));
  if (big == 0) return e;
  alignas(32) float xs[8], es[8];
  _mm256_store_ps(xs, x);
  _mm256_store_ps(es, e);
  for (int l = 0; l < 8; ++l) {
    if (big & (1 << l)) es[l] = std::exp(xs[l]);
  }
  return _mm256_load_ps(es);
}

MOESPLIT_TARGET void ExpStore8(const float* x, float* y) {
  _mm256_storeu_ps(y, Exp8(_mm256_loadu_ps(x), ExpTab()));
}

bool Exp8MatchesLibm() {
  static const bool ok = ExpStoreMatchesLibm(ExpStore8, 8);
  return ok;
}

// The online softmax of up to 8 queries i0 + l (lanes l < lanes) over
// positions [j0, j1), as AttendHead computes it per query: for each position
// below the query's n_kv, the accumulator's rescale factor ms and the value
// weight vs (mss[(j - j0) * nqp + i0 + l], likewise vss), the running max
// m_io[l] and sum sum_io[l]; exp by Exp8 when vector_exp, else std::exp.
MOESPLIT_TARGET void Softmax8(const float* scores, int64_t nqp, int64_t i0, int64_t j0, int64_t j1,
                              const int64_t* n_kv, int lanes, bool vector_exp, float* m_io,
                              float* sum_io, float* mss, float* vss) {
  alignas(32) int32_t nk[8];
  for (int l = 0; l < 8; ++l) {
    nk[l] = l < lanes ? static_cast<int32_t>(std::min<int64_t>(n_kv[i0 + l], j1)) : 0;
  }
  const __m256i nkv = _mm256_load_si256(reinterpret_cast<const __m256i*>(nk));
  const __m256 one = _mm256_set1_ps(1.0f);
  const ExpTable& tab = ExpTab();
  alignas(32) float mv[8] = {}, sv[8] = {}, row[8] = {};
  for (int l = 0; l < lanes; ++l) {
    mv[l] = m_io[l];
    sv[l] = sum_io[l];
  }
  __m256 m = _mm256_load_ps(mv), sum = _mm256_load_ps(sv);
  for (int64_t j = j0; j < j1; ++j) {
    const __m256 active = _mm256_castsi256_ps(
        _mm256_cmpgt_epi32(nkv, _mm256_set1_epi32(static_cast<int32_t>(j))));
    const int live = _mm256_movemask_ps(active);
    if (live == 0) break;
    const float* sr = scores + (j - j0) * nqp + i0;
    __m256 s;
    if (live == 0xff) {
      s = _mm256_loadu_ps(sr);
    } else {
      for (int l = 0; l < 8; ++l) row[l] = (live >> l) & 1 ? sr[l] : 0.0f;
      s = _mm256_load_ps(row);
    }
    const __m256 gt = _mm256_and_ps(active, _mm256_cmp_ps(s, m, _CMP_GT_OQ));
    // Inactive lanes exponentiate 0 (their results are not used).
    const __m256 d = _mm256_and_ps(active, _mm256_blendv_ps(_mm256_sub_ps(s, m), _mm256_sub_ps(m, s), gt));
    __m256 e;
    if (vector_exp) {
      e = Exp8(d, tab);
    } else {
      alignas(32) float t[8];
      _mm256_store_ps(t, d);
      for (float& x : t) x = std::exp(x);
      e = _mm256_load_ps(t);
    }
    const __m256 ms = _mm256_blendv_ps(one, e, gt);
    const __m256 vs = _mm256_blendv_ps(e, one, gt);
    m = _mm256_blendv_ps(m, s, gt);
    sum = _mm256_blendv_ps(sum, _mm256_fmadd_ps(sum, ms, vs), active);
    float* msr = mss + (j - j0) * nqp + i0;
    float* vsr = vss + (j - j0) * nqp + i0;
    if (lanes == 8) {
      _mm256_storeu_ps(msr, ms);
      _mm256_storeu_ps(vsr, vs);
    } else {
      alignas(32) float a[8], b[8];
      _mm256_store_ps(a, ms);
      _mm256_store_ps(b, vs);
      for (int l = 0; l < lanes; ++l) {
        msr[l] = a[l];
        vsr[l] = b[l];
      }
    }
  }
  _mm256_store_ps(mv, m);
  _mm256_store_ps(sv, sum);
  for (int l = 0; l < lanes; ++l) {
    m_io[l] = mv[l];
    sum_io[l] = sv[l];
  }
}


// f16 rounding of every lane (what storing to and reloading from f16 does).
MOESPLIT_TARGET inline __m256 RoundF16x8(__m256 v) {
  return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

// DotVector(dk, K row, q16) with the key row and the query as f32 values
// (kr: the f32 of f16 keys, q: the f32 of f16(q)): the same FMAs in the same
// lanes, the same reduction and the same double tail.
MOESPLIT_TARGET inline float DotRowF32(int64_t dk, const float* kr, const float* q) {
  const int64_t np = dk & ~(kStep - 1);
  float r = 0.0f;
  if (np > 0) {
    __m256 lo[4], hi[4];
    for (int j = 0; j < 4; ++j) lo[j] = hi[j] = _mm256_setzero_ps();
    for (int64_t i = 0; i < np; i += kStep) {
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        const int64_t e = i + j * kLanes;
        lo[j] = _mm256_fmadd_ps(_mm256_load_ps(kr + e), _mm256_load_ps(q + e), lo[j]);
        hi[j] = _mm256_fmadd_ps(_mm256_load_ps(kr + e + 8), _mm256_load_ps(q + e + 8), hi[j]);
      }
    }
    r = ReduceLoHi(lo, hi);
    if (np == dk) return r;
  }
  double sum = r;
  for (int64_t e = np; e < dk; ++e) sum += static_cast<double>(kr[e] * q[e]);
  return static_cast<float>(sum);
}

// acc (dv f16 values held as f32, 8 lanes at a time) over positions
// [0, n): acc = f16(acc * ms) where ms != 1, then acc = f16(fma(V, vs, acc)),
// as ScaleVector and MadVector compute them (the hardware conversion for
// whole 8-lane blocks, the scalar one past the last; vrow: V rows in f32,
// stride dvp; ms/vs: this query's factors, stride nqp).
template <int kVecs>
MOESPLIT_TARGET inline void AccumulateBlock(const float* vrow, int64_t dvp, int64_t n, const float* ms,
                                            const float* vs, int64_t nqp, float* acc) {
  __m256 a[kVecs];
#pragma GCC unroll 8
  for (int u = 0; u < kVecs; ++u) a[u] = _mm256_load_ps(acc + 8 * u);
  for (int64_t j = 0; j < n; ++j) {
    const float m = ms[j * nqp];
    if (m != 1.0f) {
      const __m256 f = _mm256_set1_ps(m);
#pragma GCC unroll 8
      for (int u = 0; u < kVecs; ++u) a[u] = RoundF16x8(_mm256_mul_ps(a[u], f));
    }
    const __m256 v = _mm256_set1_ps(vs[j * nqp]);
    const float* vr = vrow + j * dvp;
#pragma GCC unroll 8
    for (int u = 0; u < kVecs; ++u) a[u] = RoundF16x8(_mm256_fmadd_ps(_mm256_load_ps(vr + 8 * u), v, a[u]));
  }
#pragma GCC unroll 8
  for (int u = 0; u < kVecs; ++u) _mm256_store_ps(acc + 8 * u, a[u]);
}

// Positions ahead of the one being read whose K and V rows are prefetched
// (a line per 32 f16 values) by both fused group kernels: at decode the
// cache is past the caches and a group reads each row once. GCC 12 drops
// the prefetches of a helper (a lambda, an inline function without the
// caller's target) inlined into a target region: they are written out where
// they are issued (checked with objdump: prefetcht0 in GroupScores16 and
// AttendGroup512/256).
constexpr int64_t kPrefetchRows = 16;

// AttendHead for every query of the group, fused as AttendGroup512 is (see
// attention.h) with 8-lane registers: each key and value row converted
// once for all queries, the scores of a chunk of positions first, then the
// online softmax of 8 queries at once (Softmax8, exp as ExpF32), then each
// query's accumulation in f32 registers rounded through f16 after every step.
MOESPLIT_TARGET void AttendGroup256(const GroupAttention& g) {
  const int64_t n_q = g.n_q, dk = g.dk, dv = g.dv;
  const int64_t qs = (dk + 7) / 8 * 8;
  const int64_t dv8 = dv / 8 * 8;       // lanes of whole 8-lane blocks
  const int64_t dvp = (dv + 7) / 8 * 8;  // padded row
  float* qf = ThreadScratch(0, n_q * qs);
  const int64_t nqp = n_q;
  float* scores = ThreadScratch(1, nqp * kChunk);
  float* mss = ThreadScratch(2, nqp * kChunk);
  float* vss = ThreadScratch(3, nqp * kChunk);
  float* acc = ThreadScratch(4, n_q * dvp);
  float* vrows = ThreadScratch(5, kChunk * dvp);
  float* state = ThreadScratch(6, 2 * n_q);  // running max [0, n_q), sum [n_q, 2 n_q)
  float* krow = ThreadScratch(7, qs);
  const bool vector_exp = Exp8MatchesLibm();
  int64_t max_kv = 0;
  for (int64_t i = 0; i < n_q; ++i) {
    for (int64_t c = 0; c < dk; ++c) qf[i * qs + c] = Fp16ToFp32(Fp32ToFp16(g.q[i][c]));
    for (int64_t c = 0; c < dvp; ++c) acc[i * dvp + c] = 0.0f;
    state[i] = -INFINITY;
    state[n_q + i] = 0.0f;
    max_kv = std::max(max_kv, g.n_kv[i]);
  }
  const int64_t dk8 = dk / 8 * 8;
  for (int64_t j0 = 0; j0 < max_kv; j0 += kChunk) {
    const int64_t j1 = std::min(max_kv, j0 + kChunk);
    for (int64_t j = j0; j < j1; ++j) {
      const uint16_t* kr = g.k + j * g.k_stride;
      const int64_t ahead = std::min(j + kPrefetchRows, max_kv - 1);
      const uint16_t* kn = g.k + ahead * g.k_stride;
      for (int64_t c = 0; c < dk8; c += 8) {
        if ((c & 31) == 0) _mm_prefetch(reinterpret_cast<const char*>(kn + c), _MM_HINT_T0);
        _mm256_store_ps(krow + c, Load8(kr + c));
      }
      for (int64_t c = dk8; c < dk; ++c) krow[c] = Fp16ToFp32(kr[c]);
      for (int64_t i = 0; i < n_q; ++i) {
        if (j < g.n_kv[i]) scores[(j - j0) * nqp + i] = DotRowF32(dk, krow, qf + i * qs) * g.scale;
      }
      const uint16_t* vr = g.v + j * g.v_stride;
      float* row = vrows + (j - j0) * dvp;
      const uint16_t* vn = g.v + ahead * g.v_stride;
      for (int64_t c = 0; c < dv8; c += 8) {
        if ((c & 31) == 0) _mm_prefetch(reinterpret_cast<const char*>(vn + c), _MM_HINT_T0);
        _mm256_store_ps(row + c, Load8(vr + c));
      }
      for (int64_t c = dv8; c < dv; ++c) row[c] = Fp16ToFp32(vr[c]);
      for (int64_t c = dv; c < dvp; ++c) row[c] = 0.0f;
    }
    for (int64_t i0 = 0; i0 < n_q; i0 += 8) {
      Softmax8(scores, nqp, i0, j0, j1, g.n_kv, static_cast<int>(std::min<int64_t>(8, n_q - i0)),
               vector_exp, state + i0, state + n_q + i0, mss, vss);
    }
    for (int64_t i = 0; i < n_q; ++i) {
      const int64_t end = std::min(j1, g.n_kv[i]);
      if (end <= j0) continue;
      float* a = acc + i * dvp;
      const float* ms = mss + i;
      const float* vs = vss + i;
      int64_t c = 0;
      for (; c + 64 <= dv8; c += 64) AccumulateBlock<8>(vrows + c, dvp, end - j0, ms, vs, nqp, a + c);
      for (; c < dv8; c += 8) AccumulateBlock<1>(vrows + c, dvp, end - j0, ms, vs, nqp, a + c);
      for (; c < dv; ++c) {  // the scalar tail, as MadScalar / ScaleScalar
        float x = a[c];
        for (int64_t j = j0; j < end; ++j) {
          const float f = ms[(j - j0) * nqp];
          if (f != 1.0f) x = Fp16ToFp32(Fp32ToFp16(x * f));
          x = Fp16ToFp32(Fp32ToFp16(std::fma(vrows[(j - j0) * dvp + c], vs[(j - j0) * nqp], x)));
        }
        a[c] = x;
      }
    }
  }
  FinishGroup(g, state, state + n_q, acc, dvp);
}

// The same operations with 16-lane registers: one accumulator per ggml
// accumulator, the reduction as above.
#define MOESPLIT_TARGET512 __attribute__((target("avx512f,avx512dq,avx2,fma,f16c")))
// GCC 12 warns about the undefined pass-through operand of unmasked AVX-512
// intrinsics (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

MOESPLIT_TARGET512 inline __m512 Load16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
MOESPLIT_TARGET512 inline void Store16(uint16_t* p, __m512 v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                      _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

MOESPLIT_TARGET512 float DotVector512(int64_t n, const uint16_t* x, const uint16_t* y) {
  const int64_t np = n & ~(kStep - 1);
  if (np == 0) return DotTail(0, n, x, y, 0.0);
  __m512 acc[4];
  for (int j = 0; j < 4; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t i = 0; i < np; i += kStep) {
    for (int j = 0; j < 4; ++j) {
      const int64_t e = i + j * kLanes;
      acc[j] = _mm512_fmadd_ps(Load16(x + e), Load16(y + e), acc[j]);
    }
  }
  const __m512 v = _mm512_add_ps(_mm512_add_ps(acc[0], acc[2]), _mm512_add_ps(acc[1], acc[3]));
  const __m256 t8 = _mm256_add_ps(_mm512_extractf32x8_ps(v, 1), _mm512_castps512_ps256(v));
  const __m128 t4 = _mm_add_ps(_mm256_extractf128_ps(t8, 1), _mm256_castps256_ps128(t8));
  float t[4];
  _mm_storeu_ps(t, t4);
  const float r0 = t[0] + t[2];
  const float r1 = t[1] + t[3];
  return DotTail(np, n, x, y, r0 + r1);
}

MOESPLIT_TARGET512 void MadVector512(int64_t n, uint16_t* y, const uint16_t* x, float v) {
  const __m512 vv = _mm512_set1_ps(v);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) Store16(y + i, _mm512_fmadd_ps(Load16(x + i), vv, Load16(y + i)));
  MadVector(n - i, y + i, x + i, v);
}

MOESPLIT_TARGET512 void ScaleVector512(int64_t n, uint16_t* y, float v) {
  const __m512 vv = _mm512_set1_ps(v);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) Store16(y + i, _mm512_mul_ps(Load16(y + i), vv));
  ScaleVector(n - i, y + i, v);
}

// f16 rounding of every lane (what storing to and reloading from f16 does).
MOESPLIT_TARGET512 inline __m512 RoundF16(__m512 v) {
  return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

// ggml's reduction of the 4 accumulators: ((a0+a2)+(a1+a3)), 16 -> 8 -> 4
// lanes, then (l0+l2)+(l1+l3) (as DotVector512).
MOESPLIT_TARGET512 inline float ReduceDot(const __m512 a[4]) {
  const __m512 v = _mm512_add_ps(_mm512_add_ps(a[0], a[2]), _mm512_add_ps(a[1], a[3]));
  const __m256 t8 = _mm256_add_ps(_mm512_extractf32x8_ps(v, 1), _mm512_castps512_ps256(v));
  const __m128 t4 = _mm_add_ps(_mm256_extractf128_ps(t8, 1), _mm256_castps256_ps128(t8));
  const __m128 r = _mm_add_ps(t4, _mm_movehl_ps(t4, t4));  // l0+l2, l1+l3
  return _mm_cvtss_f32(_mm_add_ss(r, _mm_shuffle_ps(r, r, 1)));
}

// Scores s[j - j0][i] = DotF16(K[j], q16_i) * scale (row stride nqp) for
// positions [j0, j1) below each query's n_kv. NB > 0: dk's 64-blocks (NB of
// them) stay in registers across the queries; NB = 0: any dk. The K and V
// rows kPrefetchRows positions ahead (at most last_row) are prefetched.
template <int NB>
MOESPLIT_TARGET512 void GroupScores(const GroupAttention& g, const float* qf, int64_t qs,
                                    int64_t j0, int64_t j1, int64_t last_row, int64_t nqp,
                                    float* scores) {
  const int64_t np = g.dk & ~(kStep - 1);
  const int64_t nb = np / kStep;
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t j = j0; j < j1; ++j) {
    const uint16_t* kr = g.k + j * g.k_stride;
    const int64_t ahead = std::min(j + kPrefetchRows, last_row);
    const uint16_t* kn = g.k + ahead * g.k_stride;
    const uint16_t* vn = g.v + ahead * g.v_stride;
    for (int64_t c = 0; c < g.dk; c += 32) {
      _mm_prefetch(reinterpret_cast<const char*>(kn + c), _MM_HINT_T0);
    }
    for (int64_t c = 0; c < g.dv; c += 32) {
      _mm_prefetch(reinterpret_cast<const char*>(vn + c), _MM_HINT_T0);
    }
    __m512 kv[NB > 0 ? NB * 4 : 1];
    if constexpr (NB > 0) {
      for (int u = 0; u < NB * 4; ++u) kv[u] = Load16(kr + u * kLanes);
    }
    for (int64_t i = 0; i < g.n_q; ++i) {
      if (j >= g.n_kv[i]) continue;
      const float* q = qf + i * qs;
      float r = 0.0f;
      if (nb > 0) {
        __m512 a[4] = {zero, zero, zero, zero};
        if constexpr (NB > 0) {
          for (int b = 0; b < NB; ++b) {
            for (int u = 0; u < 4; ++u) {
              a[u] = _mm512_fmadd_ps(kv[b * 4 + u], _mm512_load_ps(q + b * kStep + u * kLanes),
                                     a[u]);
            }
          }
        } else {
          for (int64_t b = 0; b < nb; ++b) {
            for (int u = 0; u < 4; ++u) {
              const int64_t e = b * kStep + u * kLanes;
              a[u] = _mm512_fmadd_ps(Load16(kr + e), _mm512_load_ps(q + e), a[u]);
            }
          }
        }
        r = ReduceDot(a);
      }
      if (np < g.dk) {  // the tail in double, as DotTail
        double sum = r;
        for (int64_t e = np; e < g.dk; ++e) {
          sum += static_cast<double>(Fp16ToFp32(kr[e]) * q[e]);
        }
        r = static_cast<float>(sum);
      }
      scores[(j - j0) * nqp + i] = r * g.scale;
    }
  }
}

// a + b of the 256-bit halves selected by imm (_mm512_shuffle_f32x4).
#define MOESPLIT_PAIR_ADD(a, b, lo, hi)                        \
  _mm512_add_ps(_mm512_shuffle_f32x4((a), (b), (lo)), _mm512_shuffle_f32x4((a), (b), (hi)))

// ReduceDot of 16 queries at once: v[i] = (a0+a2)+(a1+a3) of query i; the
// same pairs are added (16 -> 8 -> 4 lanes, then (l0+l2)+(l1+l3)), the
// lanes of several queries sharing a register. Returns the 16 sums in
// query order.
MOESPLIT_TARGET512 inline __m512 ReduceDot16(const __m512 v[16]) {
  __m512 p[8], q[4], r[2];
  // [v0[0:8], v1[0:8]] + [v0[8:16], v1[8:16]]: lanes l + 8 and l.
  for (int i = 0; i < 8; ++i) {
    p[i] = MOESPLIT_PAIR_ADD(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0),
                             _MM_SHUFFLE(3, 2, 3, 2));
  }
  // t8[0:4] + t8[4:8] of four queries.
  for (int i = 0; i < 4; ++i) {
    q[i] = MOESPLIT_PAIR_ADD(p[2 * i], p[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0),
                             _MM_SHUFFLE(3, 1, 3, 1));
  }
  // Per 128-bit lane k: l0+l2, l1+l3 of queries k (q[2i]) and 4+k (q[2i+1]).
  for (int i = 0; i < 2; ++i) {
    r[i] = _mm512_add_ps(_mm512_shuffle_ps(q[2 * i], q[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(q[2 * i], q[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
  // Lane 4k + m: (l0+l2) + (l1+l3) of query k + 4m.
  const __m512 f = _mm512_add_ps(_mm512_shuffle_ps(r[0], r[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_ps(r[0], r[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(order, f);
}
#undef MOESPLIT_PAIR_ADD

// GroupScores for dk = 64 * NB (no tail), 16 queries per reduction. Scores
// of positions at or past a query's n_kv are computed too (the rows exist:
// another query of the group reads them) and never read.
//
// The K and V rows kPrefetchRows positions ahead (at most last_row) are
// prefetched from the loads of the K rows, a line (32 f16 values) per two
// vectors: V's only over its first dk columns (dv <= dk in every model we
// run; MLA's V lies inside its K row).
template <int NB>
MOESPLIT_TARGET512 void GroupScores16(const GroupAttention& g, const float* qf, int64_t qs,
                                      int64_t j0, int64_t j1, int64_t last_row, int64_t nqp,
                                      float* scores) {
  const __m512 zero = _mm512_setzero_ps();
// The prefetches of row `ahead`'s lines holding K (and V) vector u, written
// out in each loop (a macro, not a helper: see kPrefetchRows).
#define MOESPLIT_PREFETCH_KV(ahead, u)                                                          \
  if (((u) & 1) == 0) {                                                                        \
    _mm_prefetch(reinterpret_cast<const char*>(g.k + (ahead) * g.k_stride + (u) * kLanes),     \
                 _MM_HINT_T0);                                                                 \
    if ((u) * kLanes < g.dv) {                                                                 \
      _mm_prefetch(reinterpret_cast<const char*>(g.v + (ahead) * g.v_stride + (u) * kLanes),   \
                   _MM_HINT_T0);                                                               \
    }                                                                                          \
  }
  const __m512 scale = _mm512_set1_ps(g.scale);
  int64_t j = j0;
  // Two positions at a time: each query vector loaded once for both.
  for (; NB <= 2 && j + 2 <= j1; j += 2) {
    const uint16_t* kr0 = g.k + j * g.k_stride;
    const uint16_t* kr1 = kr0 + g.k_stride;
    const int64_t a0 = std::min(j + kPrefetchRows, last_row);
    const int64_t a1 = std::min(j + 1 + kPrefetchRows, last_row);
    __m512 k0[NB * 4], k1[NB * 4];
#pragma GCC unroll 16
    for (int u = 0; u < NB * 4; ++u) {
      MOESPLIT_PREFETCH_KV(a0, u)
      MOESPLIT_PREFETCH_KV(a1, u)
      k0[u] = Load16(kr0 + u * kLanes);
      k1[u] = Load16(kr1 + u * kLanes);
    }
    for (int64_t i0 = 0; i0 < g.n_q; i0 += 16) {
      __m512 v0[16], v1[16];
#pragma GCC unroll 16
      for (int l = 0; l < 16; ++l) {
        if (i0 + l >= g.n_q) {
          v0[l] = v1[l] = zero;
          continue;
        }
        const float* q = qf + (i0 + l) * qs;
        __m512 a[4], b[4];
#pragma GCC unroll 16
        for (int u = 0; u < 4; ++u) {
          const __m512 x = _mm512_load_ps(q + u * kLanes);
          a[u] = _mm512_fmadd_ps(k0[u], x, zero);
          b[u] = _mm512_fmadd_ps(k1[u], x, zero);
        }
#pragma GCC unroll 16
        for (int bl = 1; bl < NB; ++bl) {
#pragma GCC unroll 16
          for (int u = 0; u < 4; ++u) {
            const __m512 x = _mm512_load_ps(q + bl * kStep + u * kLanes);
            a[u] = _mm512_fmadd_ps(k0[bl * 4 + u], x, a[u]);
            b[u] = _mm512_fmadd_ps(k1[bl * 4 + u], x, b[u]);
          }
        }
        v0[l] = _mm512_add_ps(_mm512_add_ps(a[0], a[2]), _mm512_add_ps(a[1], a[3]));
        v1[l] = _mm512_add_ps(_mm512_add_ps(b[0], b[2]), _mm512_add_ps(b[1], b[3]));
      }
      _mm512_store_ps(scores + (j - j0) * nqp + i0, _mm512_mul_ps(ReduceDot16(v0), scale));
      _mm512_store_ps(scores + (j + 1 - j0) * nqp + i0, _mm512_mul_ps(ReduceDot16(v1), scale));
    }
  }
  for (; j < j1; ++j) {
    const uint16_t* kr = g.k + j * g.k_stride;
    const int64_t a0 = std::min(j + kPrefetchRows, last_row);
    __m512 kv[NB * 4];
#pragma GCC unroll 16
    for (int u = 0; u < NB * 4; ++u) {
      MOESPLIT_PREFETCH_KV(a0, u)
      kv[u] = Load16(kr + u * kLanes);
    }
    for (int64_t i0 = 0; i0 < g.n_q; i0 += 16) {
      __m512 v[16];
#pragma GCC unroll 16
      for (int l = 0; l < 16; ++l) {
        if (i0 + l >= g.n_q) {
          v[l] = zero;
          continue;
        }
        const float* q = qf + (i0 + l) * qs;
        __m512 a[4];
#pragma GCC unroll 16
        for (int u = 0; u < 4; ++u) a[u] = _mm512_fmadd_ps(kv[u], _mm512_load_ps(q + u * kLanes), zero);
#pragma GCC unroll 16
        for (int b = 1; b < NB; ++b) {
#pragma GCC unroll 16
          for (int u = 0; u < 4; ++u) {
            a[u] = _mm512_fmadd_ps(kv[b * 4 + u], _mm512_load_ps(q + b * kStep + u * kLanes), a[u]);
          }
        }
        v[l] = _mm512_add_ps(_mm512_add_ps(a[0], a[2]), _mm512_add_ps(a[1], a[3]));
      }
      _mm512_store_ps(scores + (j - j0) * nqp + i0, _mm512_mul_ps(ReduceDot16(v), scale));
    }
  }
}

// GroupScores16 for dk = 64 * nb with nb > 4 (MLA's 576), whose key rows do
// not fit the registers: each pair of rows is converted to f32 once into kf
// (2 x qs floats, 64-byte aligned; L1) and read from there for every query.
// The same FMAs into the same accumulators (the first on zero), the same
// reduction (ReduceDot16): GroupScores' bits, without converting a key row
// again for every query.
MOESPLIT_TARGET512 void GroupScoresWide(const GroupAttention& g, const float* qf, int64_t qs,
                                        int64_t j0, int64_t j1, int64_t last_row, int64_t nqp,
                                        float* kf, float* scores) {
  const int64_t nb = g.dk / kStep;
  const __m512 zero = _mm512_setzero_ps();
  const __m512 scale = _mm512_set1_ps(g.scale);
  for (int64_t j = j0; j < j1; j += 2) {
    const int64_t rows = std::min<int64_t>(2, j1 - j);
    for (int64_t r = 0; r < rows; ++r) {
      const uint16_t* kr = g.k + (j + r) * g.k_stride;
      const int64_t ahead = std::min(j + r + kPrefetchRows, last_row);
      for (int64_t u = 0; u < g.dk / kLanes; ++u) {
        MOESPLIT_PREFETCH_KV(ahead, u)
        _mm512_store_ps(kf + r * qs + u * kLanes, Load16(kr + u * kLanes));
      }
    }
    // One row left: the second is the first again, its scores not stored.
    const float* k0 = kf;
    const float* k1 = rows == 2 ? kf + qs : kf;
    for (int64_t i0 = 0; i0 < g.n_q; i0 += 16) {
      __m512 v0[16], v1[16];
      for (int l = 0; l < 16; ++l) {
        if (i0 + l >= g.n_q) {
          v0[l] = v1[l] = zero;
          continue;
        }
        const float* q = qf + (i0 + l) * qs;
        __m512 a[4] = {zero, zero, zero, zero}, b[4] = {zero, zero, zero, zero};
        for (int64_t bl = 0; bl < nb; ++bl) {
#pragma GCC unroll 4
          for (int u = 0; u < 4; ++u) {
            const int64_t e = bl * kStep + u * kLanes;
            const __m512 x = _mm512_load_ps(q + e);
            a[u] = _mm512_fmadd_ps(_mm512_load_ps(k0 + e), x, a[u]);
            b[u] = _mm512_fmadd_ps(_mm512_load_ps(k1 + e), x, b[u]);
          }
        }
        v0[l] = _mm512_add_ps(_mm512_add_ps(a[0], a[2]), _mm512_add_ps(a[1], a[3]));
        v1[l] = _mm512_add_ps(_mm512_add_ps(b[0], b[2]), _mm512_add_ps(b[1], b[3]));
      }
      _mm512_store_ps(scores + (j - j0) * nqp + i0, _mm512_mul_ps(ReduceDot16(v0), scale));
      if (rows == 2) {
        _mm512_store_ps(scores + (j + 1 - j0) * nqp + i0, _mm512_mul_ps(ReduceDot16(v1), scale));
      }
    }
  }
}
#undef MOESPLIT_PREFETCH_KV

// ToF16 16 values at a time; a block holding a NaN goes through the scalar
// conversion (whose NaN encoding the hardware's need not match).
MOESPLIT_TARGET512 void ToF16Vector512(int64_t n, const float* src, uint16_t* dst) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const __m512 x = _mm512_loadu_ps(src + i);
    if (_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q) != 0) {
      for (int l = 0; l < kLanes; ++l) dst[i + l] = Fp32ToFp16(src[i + l]);
    } else {
      Store16(dst + i, x);
    }
  }
  for (; i < n; ++i) dst[i] = Fp32ToFp16(src[i]);
}

// glibc's expf (2.28 and later, the build with FMA: __expf_fma) on 16
// lanes, bit for bit: x * 32/ln2 = k + r in double, 2^(k/32) from a table of
// 32 entries, a cubic in r, the product rounded to float once; the same
// special cases (-inf -> 0, NaN -> NaN, overflow to inf, underflow to 0 or
// the smallest subnormal). Exp16MatchesLibm checks it against the library at
// run time before AttendGroup512 uses it (the table: ExpTable, above).
MOESPLIT_TARGET512 inline __m512d ExpHalf(__m512d xd, const ExpTable& tab) {
  const __m512d inv_ln2_n = _mm512_set1_pd(0x1.71547652b82fep0 * 32);
  const __m512d shift = _mm512_set1_pd(0x1.8p52);
  const __m512d kd0 = _mm512_fmadd_pd(inv_ln2_n, xd, shift);
  const __m512i ki = _mm512_castpd_si512(kd0);
  const __m512d kd = _mm512_sub_pd(kd0, shift);
  const __m512d r = _mm512_fmsub_pd(inv_ln2_n, xd, kd);
  const __m512i t0 =
      _mm512_permutex2var_epi64(_mm512_loadu_si512(tab.t), ki, _mm512_loadu_si512(tab.t + 8));
  const __m512i t1 =
      _mm512_permutex2var_epi64(_mm512_loadu_si512(tab.t + 16), ki, _mm512_loadu_si512(tab.t + 24));
  const __m512i t =
      _mm512_mask_blend_epi64(_mm512_test_epi64_mask(ki, _mm512_set1_epi64(16)), t0, t1);
  const __m512d s = _mm512_castsi512_pd(_mm512_add_epi64(t, _mm512_slli_epi64(ki, 47)));
  const __m512d z = _mm512_fmadd_pd(r, _mm512_set1_pd(0x1.c6af84b912394p-5 / (32.0 * 32 * 32)),
                                    _mm512_set1_pd(0x1.ebfce50fac4f3p-3 / (32.0 * 32)));
  const __m512d r2 = _mm512_mul_pd(r, r);
  const __m512d y =
      _mm512_fmadd_pd(r, _mm512_set1_pd(0x1.62e42ff0c52d6p-1 / 32), _mm512_set1_pd(1.0));
  return _mm512_mul_pd(_mm512_fmadd_pd(z, r2, y), s);
}

MOESPLIT_TARGET512 inline __m512 Exp16(__m512 x) {
  const ExpTable& tab = ExpTab();
  const __m256 lo = _mm512_cvtpd_ps(ExpHalf(_mm512_cvtps_pd(_mm512_castps512_ps256(x)), tab));
  const __m256 hi = _mm512_cvtpd_ps(ExpHalf(_mm512_cvtps_pd(_mm512_extractf32x8_ps(x, 1)), tab));
  __m512 e = _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
  // |x| >= 88 or not finite (glibc's abstop >= top12(88.0f)).
  const __m512i top =
      _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(x), 20), _mm512_set1_epi32(0x7ff));
  const __mmask16 big = _mm512_cmpgt_epi32_mask(top, _mm512_set1_epi32(0x42a));
  if (big == 0) return e;
  const __mmask16 nonfinite = _mm512_mask_cmpgt_epi32_mask(big, top, _mm512_set1_epi32(0x7f7));
  const __mmask16 over = _mm512_mask_cmp_ps_mask(big, x, _mm512_set1_ps(0x1.62e42ep6f), _CMP_GT_OQ);
  const __mmask16 under =
      _mm512_mask_cmp_ps_mask(big, x, _mm512_set1_ps(-0x1.9fe368p6f), _CMP_LT_OQ);
  const __mmask16 tiny =
      _mm512_mask_cmp_ps_mask(big, x, _mm512_set1_ps(-0x1.9d1d9ep6f), _CMP_LT_OQ);
  e = _mm512_mask_mov_ps(e, tiny, _mm512_set1_ps(0x1.4p-75f * 0x1.4p-75f));
  e = _mm512_mask_mov_ps(e, under, _mm512_setzero_ps());
  e = _mm512_mask_mov_ps(e, over, _mm512_set1_ps(INFINITY));
  // x + x: NaN quieted, +inf; -inf gives 0.
  const __mmask16 minus_inf = _mm512_mask_cmpeq_epi32_mask(
      nonfinite, _mm512_castps_si512(x), _mm512_set1_epi32(static_cast<int>(0xff800000u)));
  e = _mm512_mask_mov_ps(e, nonfinite, _mm512_add_ps(x, x));
  return _mm512_mask_mov_ps(e, minus_inf, _mm512_setzero_ps());
}

MOESPLIT_TARGET512 void ExpStore16(const float* x, float* y) {
  _mm512_storeu_ps(y, Exp16(_mm512_loadu_ps(x)));
}

bool Exp16MatchesLibm() {
  static const bool ok = ExpStoreMatchesLibm(ExpStore16, 16);
  return ok;
}

// The online softmax of 16 queries (lanes) over positions [j0, j1), as
// AttendHead computes it per query: for each position below the query's
// n_kv, the accumulator's rescale factor ms and the value weight vs
// (ms[(j - j0) * nqp + i], likewise vs), the running max m and sum.
MOESPLIT_TARGET512 void Softmax16(const float* scores, int64_t nqp, int64_t j0, int64_t j1,
                                  const int64_t* n_kv, int lanes, bool vector_exp, float* m_io,
                                  float* sum_io, float* mss, float* vss) {
  alignas(64) int32_t nk[16];
  for (int l = 0; l < 16; ++l)
    nk[l] = l < lanes ? static_cast<int32_t>(std::min<int64_t>(n_kv[l], j1)) : 0;
  const __m512i nkv = _mm512_load_si512(nk);
  const __m512 one = _mm512_set1_ps(1.0f);
  __m512 m = _mm512_loadu_ps(m_io), sum = _mm512_loadu_ps(sum_io);
  for (int64_t j = j0; j < j1; ++j) {
    const __mmask16 active =
        _mm512_cmpgt_epi32_mask(nkv, _mm512_set1_epi32(static_cast<int32_t>(j)));
    if (active == 0) break;
    const __m512 s = _mm512_load_ps(scores + (j - j0) * nqp);
    const __mmask16 gt = _mm512_mask_cmp_ps_mask(active, s, m, _CMP_GT_OQ);
    const __m512 d = _mm512_mask_blend_ps(gt, _mm512_sub_ps(s, m), _mm512_sub_ps(m, s));
    __m512 e;
    if (vector_exp) {
      e = Exp16(d);
    } else {
      alignas(64) float t[16];
      _mm512_store_ps(t, d);
      for (float& x : t) x = std::exp(x);
      e = _mm512_load_ps(t);
    }
    const __m512 ms = _mm512_mask_blend_ps(gt, one, e);
    const __m512 vs = _mm512_mask_blend_ps(gt, e, one);
    m = _mm512_mask_mov_ps(m, gt, s);
    sum = _mm512_mask_mov_ps(sum, active, _mm512_fmadd_ps(sum, ms, vs));
    _mm512_store_ps(mss + (j - j0) * nqp, ms);
    _mm512_store_ps(vss + (j - j0) * nqp, vs);
  }
  _mm512_storeu_ps(m_io, m);
  _mm512_storeu_ps(sum_io, sum);
}

// acc = f16(acc * ms) where ms != 1 (the identity on f16 values otherwise),
// then acc = f16(fma(V[j], vs, acc)), for positions [j0, end) of queries
// i and i2 (2 queries interleaved: the rounding chains are long). The
// accumulators are f32 registers holding f16 values (RoundF16 after every
// step: the bits a stored f16 would have); vrow holds V[j0..] in f32.
template <int DVV>
MOESPLIT_TARGET512 void Accumulate2(const float* vrow, int64_t dvp, int64_t j0, int64_t end,
                                    const float* mss, const float* vss, int64_t nqp, int64_t i,
                                    float* acc_i, float* acc_i2) {
  __m512 a[DVV], b[DVV];
#pragma GCC unroll 16
  for (int u = 0; u < DVV; ++u) {
    a[u] = _mm512_load_ps(acc_i + u * kLanes);
    b[u] = _mm512_load_ps(acc_i2 + u * kLanes);
  }
  for (int64_t j = j0; j < end; ++j) {
    const float* ms = mss + (j - j0) * nqp + i;
    const float* vs = vss + (j - j0) * nqp + i;
    if (ms[0] != 1.0f) {
      const __m512 f = _mm512_set1_ps(ms[0]);
#pragma GCC unroll 16
      for (int u = 0; u < DVV; ++u) a[u] = RoundF16(_mm512_mul_ps(a[u], f));
    }
    if (ms[1] != 1.0f) {
      const __m512 f = _mm512_set1_ps(ms[1]);
#pragma GCC unroll 16
      for (int u = 0; u < DVV; ++u) b[u] = RoundF16(_mm512_mul_ps(b[u], f));
    }
    const __m512 va = _mm512_set1_ps(vs[0]), vb = _mm512_set1_ps(vs[1]);
    const float* vr = vrow + (j - j0) * dvp;
#pragma GCC unroll 16
    for (int u = 0; u < DVV; ++u) {
      const __m512 x = _mm512_load_ps(vr + u * kLanes);
      a[u] = RoundF16(_mm512_fmadd_ps(x, va, a[u]));
      b[u] = RoundF16(_mm512_fmadd_ps(x, vb, b[u]));
    }
  }
#pragma GCC unroll 16
  for (int u = 0; u < DVV; ++u) {
    _mm512_store_ps(acc_i + u * kLanes, a[u]);
    _mm512_store_ps(acc_i2 + u * kLanes, b[u]);
  }
}

template <int DVV>
MOESPLIT_TARGET512 void Accumulate1(const float* vrow, int64_t dvp, int64_t j0, int64_t end,
                                    const float* mss, const float* vss, int64_t nqp, int64_t i,
                                    float* acc_i) {
  __m512 a[DVV];
#pragma GCC unroll 16
  for (int u = 0; u < DVV; ++u) a[u] = _mm512_load_ps(acc_i + u * kLanes);
  for (int64_t j = j0; j < end; ++j) {
    const float ms = mss[(j - j0) * nqp + i];
    if (ms != 1.0f) {
      const __m512 f = _mm512_set1_ps(ms);
#pragma GCC unroll 16
      for (int u = 0; u < DVV; ++u) a[u] = RoundF16(_mm512_mul_ps(a[u], f));
    }
    const __m512 va = _mm512_set1_ps(vss[(j - j0) * nqp + i]);
    const float* vr = vrow + (j - j0) * dvp;
#pragma GCC unroll 16
    for (int u = 0; u < DVV; ++u)
      a[u] = RoundF16(_mm512_fmadd_ps(_mm512_load_ps(vr + u * kLanes), va, a[u]));
  }
#pragma GCC unroll 16
  for (int u = 0; u < DVV; ++u) _mm512_store_ps(acc_i + u * kLanes, a[u]);
}

// The accumulation of every query over positions [j0, j1) for 16 * DVV
// values of each row: V rows (f32) at vrow and the accumulators at acc, both
// with row stride dvp (>= 16 * DVV: wider rows go DVV vectors at a time,
// which changes no value's chain of steps).
template <int DVV>
MOESPLIT_TARGET512 void AccumulateGroup(const GroupAttention& g, const float* vrow, int64_t dvp,
                                        int64_t j0, int64_t j1, const float* mss, const float* vss,
                                        int64_t nqp, float* acc) {
  int64_t i = 0;
  for (; i + 2 <= g.n_q; i += 2) {
    const int64_t e0 = std::min(j1, g.n_kv[i]), e1 = std::min(j1, g.n_kv[i + 1]);
    const int64_t e = std::min(e0, e1);
    if (e > j0) {
      Accumulate2<DVV>(vrow, dvp, j0, e, mss, vss, nqp, i, acc + i * dvp, acc + (i + 1) * dvp);
    }
    // The longer one's remaining positions alone.
    if (e0 > std::max(e, j0)) {
      Accumulate1<DVV>(vrow + (std::max(e, j0) - j0) * dvp, dvp, std::max(e, j0), e0,
                       mss + (std::max(e, j0) - j0) * nqp, vss + (std::max(e, j0) - j0) * nqp, nqp,
                       i, acc + i * dvp);
    }
    if (e1 > std::max(e, j0)) {
      Accumulate1<DVV>(vrow + (std::max(e, j0) - j0) * dvp, dvp, std::max(e, j0), e1,
                       mss + (std::max(e, j0) - j0) * nqp, vss + (std::max(e, j0) - j0) * nqp, nqp,
                       i + 1, acc + (i + 1) * dvp);
    }
  }
  if (i < g.n_q) {
    const int64_t e0 = std::min(j1, g.n_kv[i]);
    if (e0 > j0) Accumulate1<DVV>(vrow, dvp, j0, e0, mss, vss, nqp, i, acc + i * dvp);
  }
}

MOESPLIT_TARGET512 void AttendGroup512(const GroupAttention& g) {
  const int64_t n_q = g.n_q, dk = g.dk, dv = g.dv;
  const int64_t qs = (dk + kLanes - 1) / kLanes * kLanes;
  const int64_t dvv = (dv + kLanes - 1) / kLanes;  // vectors per value row
  const int64_t dvp = dvv * kLanes;
  const int64_t dv_full = dv / kLanes * kLanes;
  const bool vector_exp = Exp16MatchesLibm();
  float* qf = ThreadScratch(0, n_q * qs);
  const int64_t nqp = (n_q + 15) / 16 * 16;
  float* scores = ThreadScratch(1, nqp * kChunk);
  // Rescale factors and value weights, [position][query] as the scores.
  float* mss = ThreadScratch(2, nqp * kChunk);
  float* vss = ThreadScratch(3, nqp * kChunk);
  // The f16 accumulators, as AttendHead keeps them, held as f32 values.
  float* acc = ThreadScratch(4, n_q * dvp);
  float* vrows = ThreadScratch(5, kChunk * dvp);  // V[j0 .. j1) in f32
  float* state = ThreadScratch(6, 2 * nqp);       // running max [0, nqp), sum [nqp, 2 nqp)
  float* krows = ThreadScratch(7, 2 * qs);        // GroupScoresWide's two K rows in f32
  int64_t max_kv = 0;
  for (int64_t i = 0; i < n_q; ++i) {
    int64_t c = 0;
    for (; c + kLanes <= dk; c += kLanes) {  // f32(f16(q)), NaN blocks as ToF16
      const __m512 x = _mm512_loadu_ps(g.q[i] + c);
      if (_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q) != 0) break;
      _mm512_store_ps(qf + i * qs + c, RoundF16(x));
    }
    for (; c < dk; ++c) qf[i * qs + c] = Fp16ToFp32(Fp32ToFp16(g.q[i][c]));
    for (int64_t c = 0; c < dvp; ++c) acc[i * dvp + c] = 0.0f;
    max_kv = std::max(max_kv, g.n_kv[i]);
  }
  for (int64_t i = 0; i < nqp; ++i) {
    state[i] = -INFINITY;
    state[nqp + i] = 0.0f;
  }
  for (int64_t j0 = 0; j0 < max_kv; j0 += kChunk) {
    const int64_t j1 = std::min(max_kv, j0 + kChunk);
    switch (dk % kStep == 0 ? dk / kStep : 0) {
      case 1: GroupScores16<1>(g, qf, qs, j0, j1, max_kv - 1, nqp, scores); break;
      case 2: GroupScores16<2>(g, qf, qs, j0, j1, max_kv - 1, nqp, scores); break;
      case 3: GroupScores16<3>(g, qf, qs, j0, j1, max_kv - 1, nqp, scores); break;
      case 4: GroupScores16<4>(g, qf, qs, j0, j1, max_kv - 1, nqp, scores); break;
      case 0:
        // It writes only the scores below each query's n_kv; Softmax16 loads
        // whole rows (masking the rest), so they start as zeros.
        std::fill(scores, scores + (j1 - j0) * nqp, 0.0f);
        GroupScores<0>(g, qf, qs, j0, j1, max_kv - 1, nqp, scores);
        break;
      default: GroupScoresWide(g, qf, qs, j0, j1, max_kv - 1, nqp, krows, scores); break;
    }
    for (int64_t i0 = 0; i0 < n_q; i0 += 16) {
      Softmax16(scores + i0, nqp, j0, j1, g.n_kv + i0,
                static_cast<int>(std::min<int64_t>(16, n_q - i0)), vector_exp, state + i0,
                state + nqp + i0, mss + i0, vss + i0);
    }
    for (int64_t j = j0; j < j1; ++j) {
      const uint16_t* vr = g.v + j * g.v_stride;
      float* row = vrows + (j - j0) * dvp;
      // The rows 16 positions on (a line per 32 values): at decode the
      // scores pass's prefetches of this chunk's V rows have left L1 by
      // now. 16 measured best (32 was not better), see tests/bench/README.md.
      if (j + 16 < j1) {
        for (int64_t c = 0; c < dv; c += 32) {
          _mm_prefetch(reinterpret_cast<const char*>(vr + 16 * g.v_stride + c), _MM_HINT_T0);
        }
      }
      for (int64_t c = 0; c < dv_full; c += kLanes) _mm512_store_ps(row + c, Load16(vr + c));
      for (int64_t c = dv_full; c < dv; ++c) row[c] = Fp16ToFp32(vr[c]);
      for (int64_t c = dv; c < dvp; ++c) row[c] = 0.0f;
    }
    using AccumulateFn = void (*)(const GroupAttention&, const float*, int64_t, int64_t, int64_t,
                                  const float*, const float*, int64_t, float*);
    static constexpr AccumulateFn kAccumulate[] = {nullptr,
                                                   AccumulateGroup<1>,
                                                   AccumulateGroup<2>,
                                                   AccumulateGroup<3>,
                                                   AccumulateGroup<4>,
                                                   AccumulateGroup<5>,
                                                   AccumulateGroup<6>,
                                                   AccumulateGroup<7>,
                                                   AccumulateGroup<8>};
    // Rows wider than 8 vectors (MLA's 512 values) in slices of 8 vectors,
    // each held in registers over the chunk's positions.
    for (int64_t s = 0; s < dvv; s += 8) {
      kAccumulate[std::min<int64_t>(8, dvv - s)](g, vrows + s * kLanes, dvp, j0, j1, mss, vss, nqp,
                                                 acc + s * kLanes);
    }
  }
  FinishGroup(g, state, state + nqp, acc, dvp);
}

enum class Level { kScalar, kAvx2, kAvx512 };

Level Pick(F16Kernels k) {
  static const bool kAvx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                            __builtin_cpu_supports("f16c");
  // _mm512_extractf32x8_ps needs AVX512DQ.
  static const bool kAvx512 = kAvx2 && __builtin_cpu_supports("avx512f") &&
                              __builtin_cpu_supports("avx512dq");
  if (k == F16Kernels::kScalar || !kAvx2) return Level::kScalar;
  if (k == F16Kernels::kAvx2 || !kAvx512) return Level::kAvx2;
  return Level::kAvx512;
}

#else

enum class Level { kScalar, kAvx2, kAvx512 };
Level Pick(F16Kernels) { return Level::kScalar; }
float DotVector(int64_t n, const uint16_t* x, const uint16_t* y) { return DotScalar(n, x, y); }
void MadVector(int64_t n, uint16_t* y, const uint16_t* x, float v) { MadScalar(n, y, x, v); }
void ScaleVector(int64_t n, uint16_t* y, float v) { ScaleScalar(n, y, v); }
float DotVector512(int64_t n, const uint16_t* x, const uint16_t* y) { return DotScalar(n, x, y); }
void MadVector512(int64_t n, uint16_t* y, const uint16_t* x, float v) { MadScalar(n, y, x, v); }
void ScaleVector512(int64_t n, uint16_t* y, float v) { ScaleScalar(n, y, v); }
void AttendGroup512(const GroupAttention&) {}
void AttendGroup256(const GroupAttention&) {}
bool Exp16MatchesLibm() { return false; }
bool Exp8MatchesLibm() { return false; }
void ToF16Vector512(int64_t n, const float* src, uint16_t* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = Fp32ToFp16(src[i]);
}

#endif

}  // namespace

float DotF16(int64_t n, const uint16_t* x, const uint16_t* y, F16Kernels k) {
  switch (Pick(k)) {
    case Level::kAvx512: return DotVector512(n, x, y);
    case Level::kAvx2: return DotVector(n, x, y);
    case Level::kScalar: break;
  }
  return DotScalar(n, x, y);
}

void MadF16(int64_t n, uint16_t* y, const uint16_t* x, float v, F16Kernels k) {
  switch (Pick(k)) {
    case Level::kAvx512: return MadVector512(n, y, x, v);
    case Level::kAvx2: return MadVector(n, y, x, v);
    case Level::kScalar: break;
  }
  MadScalar(n, y, x, v);
}

void ScaleF16(int64_t n, uint16_t* y, float v, F16Kernels k) {
  switch (Pick(k)) {
    case Level::kAvx512: return ScaleVector512(n, y, v);
    case Level::kAvx2: return ScaleVector(n, y, v);
    case Level::kScalar: break;
  }
  ScaleScalar(n, y, v);
}

bool VectorExpInUse() {
  switch (Pick(F16Kernels::kAuto)) {
    case Level::kAvx512: return Exp16MatchesLibm();
    case Level::kAvx2: return Exp8MatchesLibm();
    case Level::kScalar: break;
  }
  return false;
}

void ExpF32(int64_t n, const float* x, float* y) {
  int64_t i = 0;
#ifdef MOESPLIT_HAVE_X86_F16C
  if (VectorExpInUse()) {
    if (Pick(F16Kernels::kAuto) == Level::kAvx512) {
      for (; i + kLanes <= n; i += kLanes) ExpStore16(x + i, y + i);
    } else {
      for (; i + 8 <= n; i += 8) ExpStore8(x + i, y + i);
    }
  }
#endif
  for (; i < n; ++i) y[i] = std::exp(x[i]);
}

void ToF16(int64_t n, const float* src, uint16_t* dst) {
  if (Pick(F16Kernels::kAuto) == Level::kAvx512) return ToF16Vector512(n, src, dst);
  for (int64_t i = 0; i < n; ++i) dst[i] = Fp32ToFp16(src[i]);
}

void AttendHead(const HeadAttention& a, uint16_t* acc16, float* out, F16Kernels k) {
  for (int64_t c = 0; c < a.dv; ++c) acc16[c] = 0;
  float m = -INFINITY;
  float sum = 0.0f;
  for (int64_t j = 0; j < a.n_kv; ++j) {
    const float s = DotF16(a.dk, a.k + j * a.k_stride, a.q16, k) * a.scale;
    float ms = 1.0f;
    float vs = 1.0f;
    if (s > m) {
      ms = std::exp(m - s);
      m = s;
      ScaleF16(a.dv, acc16, ms, k);
    } else {
      vs = std::exp(s - m);
    }
    MadF16(a.dv, acc16, a.v + j * a.v_stride, vs, k);
    sum = std::fma(sum, ms, vs);
  }
  for (int64_t c = 0; c < a.dv; ++c) out[c] = Fp16ToFp32(acc16[c]);
  if (a.sink > -INFINITY) ApplySink(a.sink, m, &sum, out, a.dv);
  const float inv = sum == 0.0f ? 0.0f : 1.0f / sum;
  for (int64_t c = 0; c < a.dv; ++c) out[c] *= inv;
}

int64_t GroupQueryBytes(int64_t dk, int64_t dv) {
  const auto lanes = [](int64_t n) { return (n + kLanes - 1) / kLanes * kLanes; };
  // f32(q), the accumulator, and the chunk's scores, rescale factors and
  // value weights.
  return static_cast<int64_t>(sizeof(float)) * (lanes(dk) + lanes(dv) + 3 * kChunk);
}

void AttendGroup(const GroupAttention& g, F16Kernels k) {
  if (g.n_q <= 0) return;
  if (Pick(k) == Level::kAvx512) return AttendGroup512(g);
  if (Pick(k) == Level::kAvx2) return AttendGroup256(g);
  std::vector<uint16_t> q16(g.dk), acc16(g.dv);
  HeadAttention a;
  a.q16 = q16.data();
  a.k = g.k;
  a.v = g.v;
  a.k_stride = g.k_stride;
  a.v_stride = g.v_stride;
  a.dk = g.dk;
  a.dv = g.dv;
  a.scale = g.scale;
  for (int64_t i = 0; i < g.n_q; ++i) {
    ToF16(g.dk, g.q[i], q16.data());
    a.n_kv = g.n_kv[i];
    a.sink = g.sinks != nullptr ? g.sinks[i] : -INFINITY;
    AttendHead(a, acc16.data(), g.out[i], k);
  }
}

}  // namespace moesplit::model::internal
