// A host emulation of the kernel ABI of internal/cuda_raw.h (no nvcc, no CUDA
// headers), so that the GPU orchestration (cuda_forward.cc, expert_cache.cc,
// cuda_backend.cc) and its tests run on the CPU in CI. It proves nothing about
// the kernels themselves: only a run on a device does.
//
// One emulated device, synchronous: a stream or an event is an opaque heap
// token, every "kernel" runs to completion on the calling thread, MemcpyAsync
// is memcpy. Device memory is 256-byte-aligned host memory counted against an
// emulated total (MOESPLIT_EMULATED_GPU_BYTES, default 16 GiB); going over it
// is cudaErrorMemoryAllocation, never an abort. Unlike a real device, every
// kernel and copy checks that the device pointers it is given lie inside live
// emulated allocations (whole extents), and answers cudaErrorIllegalAddress
// (or InvalidValue for a copy of the wrong kind) otherwise: a host pointer
// passed as a device one, or an extent past a buffer, is an error here.
//
// The numerics follow the .cu files: the same element decoders and activation
// rounding (block_codec.h), the router's row code (router_row.h), and the
// kernels' summation orders (the mat-vec's lanes and warp butterflies,
// RmsNorm's thread-strided double sums, attention's warps or, for an F16
// cache, llama.cpp's f16 flash-attention order, chunk partials in the split
// scratch and the in-order chunk merge). Host expf / sqrtf are not the
// device's, so the results are close to the GPU's, not bit-identical (with an
// F16 cache the attention is the CPU reference's to the bit).
// The gated-DeltaNet ops and the gated attention's gate (delta_net.cu) are
// emulated in delta_net_emulated.cc, on the same allocation table
// (EmulatedOnDevice, internal/emulated.h).
// Thread-safe: the allocation table has a mutex; kernels touch only their
// arguments.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <vector>

#include "common/backend/cuda/internal/block_codec.h"
#include "common/backend/cuda/internal/cuda_raw.h"
#include "common/backend/cuda/internal/emulated.h"
#include "common/backend/cuda/internal/router_row.h"

namespace moesplit::cuda::raw {
namespace {

// cudaError_t values the emulation answers with.
constexpr int kSuccess = 0;
constexpr int kInvalidValue = 1;          // cudaErrorInvalidValue
constexpr int kMemoryAllocation = 2;      // cudaErrorMemoryAllocation
constexpr int kNoDevice = 100;            // cudaErrorNoDevice
constexpr int kInvalidDevice = 101;       // cudaErrorInvalidDevice
constexpr int kIllegalAddress = 700;      // cudaErrorIllegalAddress
constexpr int kAlreadyRegistered = 712;   // cudaErrorHostMemoryAlreadyRegistered
constexpr int kNotRegistered = 713;       // cudaErrorHostMemoryNotRegistered
constexpr uint64_t kAlign = 256;

uint64_t EmulatedTotal() {
  static const uint64_t total = [] {
    const char* env = std::getenv("MOESPLIT_EMULATED_GPU_BYTES");
    if (env != nullptr && *env != '\0') {
      char* end = nullptr;
      const unsigned long long v = std::strtoull(env, &end, 10);
      if (end != env && *end == '\0' && v > 0) return static_cast<uint64_t>(v);
    }
    return uint64_t{16} << 30;
  }();
  return total;
}

// The live device allocations: address -> bytes.
struct Memory {
  std::mutex mu;
  std::map<uintptr_t, uint64_t> blocks;
  uint64_t allocated = 0;  // rounded sizes, as MemGetInfo reports them
};
Memory& Mem() {
  static Memory* m = new Memory;  // never destroyed: buffers may outlive statics
  return *m;
}

uint64_t Rounded(uint64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// Whether [p, p + bytes) lies inside one live device allocation.
bool OnDevice(const void* p, uint64_t bytes) {
  if (p == nullptr) return false;
  Memory& m = Mem();
  std::lock_guard<std::mutex> lock(m.mu);
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = m.blocks.upper_bound(a);
  if (it == m.blocks.begin()) return false;
  --it;
  return a - it->first <= it->second && bytes <= it->second - (a - it->first);
}

// Kernel argument checks: a device extent of `bytes` at p (nothing to check
// for an empty extent).
struct Extents {
  bool ok = true;
  Extents& Dev(const void* p, uint64_t bytes) {
    if (ok && bytes > 0 && !OnDevice(p, bytes)) ok = false;
    return *this;
  }
  Extents& Floats(const void* p, int64_t n) { return Dev(p, static_cast<uint64_t>(n) * 4); }
};
CallResult Illegal(const char* kernel) { return {kIllegalAddress, kernel}; }

// One token per heap byte: distinct non-null handles.
struct Handle {
  char tag;
};

// -------------------------------------------------------- format dispatch
// out[i] = element c0 + i of the row, i < n (DecodeRowElement, as the kernels).
template <GgmlType F>
void DecodeRow(const uint8_t* row, int64_t c0, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = codec::DecodeRowElement<F>(row, c0 + i);
}

struct FormatInfo {
  void (*decode)(const uint8_t* row, int64_t c0, int64_t n, float* out) = nullptr;
  int elems = 0, bytes = 0;  // per block
};

template <GgmlType F>
FormatInfo InfoOf() {
  return {&DecodeRow<F>, codec::Format<F>::kElems, codec::Format<F>::kBytes};
}

// The formats the kernels decode (dispatch.cuh's list); decode == nullptr
// for any other.
FormatInfo Info(GgmlType t) {
  switch (t) {
#define MS_CASE(T) \
  case GgmlType::T: return InfoOf<GgmlType::T>();
    MS_CASE(kF32) MS_CASE(kF16) MS_CASE(kBF16) MS_CASE(kQ4_0) MS_CASE(kQ4_1) MS_CASE(kQ5_0)
    MS_CASE(kQ5_1) MS_CASE(kQ8_0) MS_CASE(kQ8_1) MS_CASE(kMXFP4) MS_CASE(kQ2_K) MS_CASE(kQ3_K)
    MS_CASE(kQ4_K) MS_CASE(kQ5_K) MS_CASE(kQ6_K) MS_CASE(kQ8_K) MS_CASE(kIQ4_NL)
    MS_CASE(kIQ4_XS) MS_CASE(kIQ2_XXS) MS_CASE(kIQ2_XS) MS_CASE(kIQ2_S) MS_CASE(kIQ3_XXS)
    MS_CASE(kIQ3_S) MS_CASE(kIQ1_S) MS_CASE(kIQ1_M) MS_CASE(kTQ1_0) MS_CASE(kTQ2_0)
#undef MS_CASE
    default: return {};
  }
}

// Bytes the kernels read of row r's first n_cols elements.
uint64_t UsedRowBytes(const FormatInfo& f, int64_t n_cols) {
  return static_cast<uint64_t>((n_cols + f.elems - 1) / f.elems) * f.bytes;
}

// The extent of rows [first, first + n) of w.
bool RowsOnDevice(const DeviceMatrix& w, const FormatInfo& f, int64_t first, int64_t n) {
  if (n <= 0) return true;
  const uint8_t* base = static_cast<const uint8_t*>(w.data) + first * w.row_bytes;
  return OnDevice(base, (n - 1) * w.row_bytes + UsedRowBytes(f, w.n_cols));
}

// The value lane 0 of a warp holds after the xor-shuffle butterfly
// (offsets 16, 8, 4, 2, 1) over v[0..31]; v is overwritten.
template <typename T>
T WarpSum(T* v) {
  for (int off = 16; off > 0; off >>= 1) {
    for (int l = 0; l < off; ++l) v[l] = v[l] + v[l + off];
  }
  return v[0];
}

// dequant.cu's WarpsPerRow and mat-vec block shape.
constexpr int kMatVecWarps = 8;
int WarpsPerRow(int64_t n_rows, int64_t n_cols) {
  int wpr = 1;
  while (wpr < kMatVecWarps && n_rows * wpr < 8192 && n_cols >= 64 * wpr * 2) wpr *= 2;
  return wpr;
}

// MatVecKernel's arithmetic for one decoded row and one token: lane q of the
// row's 32 * wpr lanes sums elements q, q + 32 * wpr, ...; each warp's lanes
// by the butterfly, then the warps in order.
float RowDot(const float* row, const float* x, int64_t n_cols, int wpr, float* lanes) {
  const int n_lanes = 32 * wpr;
  for (int q = 0; q < n_lanes; ++q) {
    float acc = 0.0f;
    for (int64_t c = q; c < n_cols; c += n_lanes) acc += row[c] * x[c];
    lanes[q] = acc;
  }
  float s = WarpSum(lanes);
  for (int i = 1; i < wpr; ++i) s += WarpSum(lanes + 32 * i);
  return s;
}

// ------------------------------------------------------------ paged KV
uint8_t* SlotRow(uint8_t* base, const PagedKv& kv, int64_t pos, uint64_t row_bytes) {
  const int64_t page = kv.block_table[pos / kv.page_size];
  return base + (page * kv.page_size + pos % kv.page_size) * static_cast<int64_t>(row_bytes);
}

// The block table entries for positions [0, n_pos) and the K / V rows they
// name (kd / vd elements of the KV format) are device memory.
bool KvOnDevice(const PagedKv& kv, int64_t n_pos, int64_t first, uint64_t k_used,
                uint64_t v_used) {
  if (kv.page_size <= 0) return false;
  const int64_t pages = (n_pos + kv.page_size - 1) / kv.page_size;
  if (!OnDevice(kv.block_table, static_cast<uint64_t>(pages) * 4)) return false;
  for (int64_t p = first; p < n_pos; ++p) {
    if (!OnDevice(SlotRow(kv.k, kv, p, kv.k_row_bytes), k_used) ||
        !OnDevice(SlotRow(kv.v, kv, p, kv.v_row_bytes), v_used)) {
      return false;
    }
  }
  return true;
}

constexpr int kAttnWarps = 8;
constexpr int kChunk = kAttentionChunk;

// attention.cu's FirstPos: the first position token t attends.
int64_t FirstPos(const AttentionParams& p, int64_t n_kv) {
  return p.window > 0 && n_kv > p.window ? n_kv - p.window : 0;
}

// AttentionPartialKernel (Q8_0 / Q4_0 caches) for launch tokens [t0, t0 +
// nt): every (query head, token, chunk) partial {max, sum, acc[hd]} written
// to the split scratch in the kernel's layout, with its arithmetic (query
// rounded to K's vec_dot type per 32 dimensions; warp w takes positions
// begin + w, + 8, ...; lane sums then the butterfly; warps merged in order).
void AttentionPartials(const AttentionParams& p, const FormatInfo& f, int64_t t0, int64_t nt,
                       int n_chunks) {
  const int hd = p.head_dim, nv = hd / 32;
  const int group = p.n_head / p.n_head_kv;
  std::vector<float> qr(static_cast<size_t>(group) * hd), kk(hd), vv(hd), o(hd), lanes(32);
  std::vector<float> m(static_cast<size_t>(group) * kAttnWarps),
      l(static_cast<size_t>(group) * kAttnWarps),
      acc(static_cast<size_t>(group) * kAttnWarps * hd);
  for (int64_t tl = 0; tl < nt; ++tl) {
    const int64_t t = t0 + tl;
    const int64_t n_kv = p.pos0 + t + 1;
    for (int kvh = 0; kvh < p.n_head_kv; ++kvh) {
      const int h0 = kvh * group;
      for (int g = 0; g < group; ++g) {
        const float* q = p.q + (t * p.n_head + h0 + g) * hd;
        float* r = qr.data() + static_cast<size_t>(g) * hd;
        for (int j = 0; j < nv; ++j) {
          const float* qb = q + 32 * j;
          if (p.kv.type == GgmlType::kF16) {
            for (int i = 0; i < 32; ++i) r[32 * j + i] = codec::HalfToFloat(codec::FloatToHalf(qb[i]));
          } else {
            float amax = 0.0f;
            for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(qb[i]));
            for (int i = 0; i < 32; ++i) r[32 * j + i] = codec::RoundQ8_0(qb[i], amax);
          }
        }
      }
      for (int c = 0; c < n_chunks; ++c) {
        const int64_t chunk0 = static_cast<int64_t>(c) * kChunk, first = FirstPos(p, n_kv);
        if (chunk0 >= n_kv) break;  // past this token's causal range
        if (chunk0 + kChunk <= first) continue;  // wholly before its window
        const int64_t begin = std::max(chunk0, first);
        const int64_t end = std::min<int64_t>(chunk0 + kChunk, n_kv);
        std::fill(m.begin(), m.end(), -INFINITY);
        std::fill(l.begin(), l.end(), 0.0f);
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t pos = begin; pos < end; ++pos) {
          const int w = static_cast<int>((pos - begin) % kAttnWarps);
          // Head kvh's elements kvh * hd .. kvh * hd + hd - 1 of the rows.
          const int64_t col0 = static_cast<int64_t>(kvh) * hd;
          f.decode(SlotRow(p.kv.k, p.kv, pos, p.kv.k_row_bytes), col0, hd, kk.data());
          f.decode(SlotRow(p.kv.v, p.kv, pos, p.kv.v_row_bytes), col0, hd, vv.data());
          for (int g = 0; g < group; ++g) {
            const float* r = qr.data() + static_cast<size_t>(g) * hd;
            for (int lane = 0; lane < 32; ++lane) {
              float s = 0.0f;
              for (int j = 0; j < nv; ++j) s += r[lane + 32 * j] * kk[lane + 32 * j];
              lanes[lane] = s;
            }
            float s = WarpSum(lanes.data());
            s *= p.scale;
            const size_t gw = static_cast<size_t>(g) * kAttnWarps + w;
            const float m_new = std::fmax(m[gw], s);
            const float corr = expf(m[gw] - m_new);
            const float ps = expf(s - m_new);
            l[gw] = l[gw] * corr + ps;
            float* a = acc.data() + gw * hd;
            for (int i = 0; i < hd; ++i) a[i] = a[i] * corr + ps * vv[i];
            m[gw] = m_new;
          }
        }
        for (int g = 0; g < group; ++g) {
          const size_t g0 = static_cast<size_t>(g) * kAttnWarps;
          float big = -INFINITY;
          for (int w = 0; w < kAttnWarps; ++w) big = std::fmax(big, m[g0 + w]);
          float* part = p.split_scratch +
                        ((tl * p.n_head + h0 + g) * n_chunks + c) * static_cast<int64_t>(hd + 2);
          float total = 0.0f;
          std::fill(o.begin(), o.end(), 0.0f);
          for (int w = 0; w < kAttnWarps; ++w) {
            const float fw = l[g0 + w] > 0.0f ? expf(m[g0 + w] - big) : 0.0f;
            total += l[g0 + w] * fw;
            const float* a = acc.data() + (g0 + w) * hd;
            for (int i = 0; i < hd; ++i) o[i] += a[i] * fw;
          }
          part[0] = big;
          part[1] = total;
          for (int i = 0; i < hd; ++i) part[2 + i] = o[i];
        }
      }
    }
  }
}

// AttentionF16Kernel (F16 cache): llama.cpp's CPU flash attention within
// each chunk, one (query head, token, chunk) at a time: the positions in
// order, the query and the V accumulator in f16, the scores summed in
// DotF16's AVX-512 order (blocks of 64: lanes (j, l) by fma, the pair sums,
// the 16 -> 1 tree; the rest in double).
float F16Round(float x) { return codec::HalfToFloat(codec::FloatToHalf(x)); }

float DotF16Order(int hd, const float* k, const float* q) {
  const int np = hd & ~63;
  double dot = 0.0;
  if (np > 0) {
    float lanes[32];
    for (int lane = 0; lane < 32; ++lane) {
      const int jlo = lane >> 4, l16 = lane & 15;
      float a_lo = 0.0f, a_hi = 0.0f;
      for (int b = 0; b < np; b += 64) {
        const int e_lo = b + jlo * 16 + l16, e_hi = e_lo + 32;
        a_lo = std::fma(k[e_lo], q[e_lo], a_lo);
        a_hi = std::fma(k[e_hi], q[e_hi], a_hi);
      }
      lanes[lane] = a_lo + a_hi;
    }
    dot = WarpSum(lanes);
  }
  for (int e = np; e < hd; ++e) dot += static_cast<double>(k[e] * q[e]);
  return static_cast<float>(dot);
}

void AttentionPartialsF16(const AttentionParams& p, const FormatInfo& f, int64_t t0, int64_t nt,
                          int n_chunks) {
  const int hd = p.head_dim, hv = AttentionDimV(p), group = p.n_head / p.n_head_kv;
  std::vector<float> q16(hd), acc(hv), kk(hd), vv(hv);
  for (int64_t tl = 0; tl < nt; ++tl) {
    const int64_t t = t0 + tl;
    const int64_t n_kv = p.pos0 + t + 1;
    for (int h = 0; h < p.n_head; ++h) {
      const int64_t col0 = static_cast<int64_t>(h / group) * hd;
      const int64_t vcol0 = static_cast<int64_t>(h / group) * hv;
      for (int i = 0; i < hd; ++i) q16[i] = F16Round(p.q[(t * p.n_head + h) * hd + i]);
      for (int c = 0; c < n_chunks; ++c) {
        const int64_t chunk0 = static_cast<int64_t>(c) * kChunk, first = FirstPos(p, n_kv);
        if (chunk0 >= n_kv) break;
        if (chunk0 + kChunk <= first) continue;
        const int64_t begin = std::max(chunk0, first);
        const int64_t end = std::min<int64_t>(chunk0 + kChunk, n_kv);
        std::fill(acc.begin(), acc.end(), 0.0f);
        float m = -INFINITY, sum = 0.0f;
        for (int64_t pos = begin; pos < end; ++pos) {
          f.decode(SlotRow(p.kv.k, p.kv, pos, p.kv.k_row_bytes), col0, hd, kk.data());
          f.decode(SlotRow(p.kv.v, p.kv, pos, p.kv.v_row_bytes), vcol0, hv, vv.data());
          const float s = DotF16Order(hd, kk.data(), q16.data()) * p.scale;
          float ms = 1.0f, vs = 1.0f;
          if (s > m) {
            ms = expf(m - s);
            m = s;
            for (int i = 0; i < hv; ++i) acc[i] = F16Round(acc[i] * ms);
          } else {
            vs = expf(s - m);
          }
          for (int i = 0; i < hv; ++i) acc[i] = F16Round(std::fma(vv[i], vs, acc[i]));
          sum = std::fma(sum, ms, vs);
        }
        float* part = p.split_scratch +
                      ((tl * p.n_head + h) * n_chunks + c) * static_cast<int64_t>(hv + 2);
        part[0] = m;
        part[1] = sum;
        for (int i = 0; i < hv; ++i) part[2 + i] = acc[i];
      }
    }
  }
}

// AttentionMergeKernel: a token's chunk partials merged in chunk order.
void AttentionMerge(const AttentionParams& p, int64_t t0, int64_t nt, int n_chunks) {
  const int hd = AttentionDimV(p);
  for (int64_t tl = 0; tl < nt; ++tl) {
    const int64_t t = t0 + tl;
    const int64_t n_kv = p.pos0 + t + 1;
    const int c0 = static_cast<int>(FirstPos(p, n_kv) / kChunk);
    const int nc = static_cast<int>((n_kv + kChunk - 1) / kChunk);
    for (int h = 0; h < p.n_head; ++h) {
      const float* part = p.split_scratch + (tl * p.n_head + h) * n_chunks * int64_t{hd + 2};
      for (int e = 0; e < hd; ++e) {
        float m = -INFINITY, l = 0.0f, o = 0.0f;
        for (int c = c0; c < nc; ++c) {
          const float* pc = part + static_cast<int64_t>(c) * (hd + 2);
          const float m_new = std::fmax(m, pc[0]);
          const float a = expf(m - m_new), b = expf(pc[0] - m_new);
          l = l * a + pc[1] * b;
          o = o * a + pc[2 + e] * b;
          m = m_new;
        }
        if (p.sinks != nullptr) {
          const float z = p.sinks[h];
          if (z > m) {
            const float ms = expf(m - z);
            o *= ms;
            l = std::fma(l, ms, 1.0f);
          } else {
            l = std::fma(l, 1.0f, expf(z - m));
          }
        }
        p.out[(t * p.n_head + h) * hd + e] = o * (1.0f / l);
      }
    }
  }
}

}  // namespace

// ------------------------------------------------------------------ runtime
bool EmulatedOnDevice(const void* p, uint64_t bytes) { return OnDevice(p, bytes); }

int DeviceCount() { return 1; }

CallResult DeviceProperties(int index, RawDeviceInfo* info) {
  if (index != 0) return {kInvalidDevice, "cudaGetDeviceProperties"};
  static const char kName[] = "moesplit emulated CUDA device (host memory)";
  std::memset(info->name, 0, sizeof info->name);
  std::memcpy(info->name, kName, sizeof kName);
  info->major = 0;
  info->minor = 0;
  return MemGetInfo(&info->free_bytes, &info->total_bytes);
}

CallResult Saxpy(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a * x[i] + y[i];
  return {};
}

const char* ErrorString(int code) {
  switch (code) {
    case kSuccess: return "no error";
    case kInvalidValue: return "invalid argument";
    case kMemoryAllocation: return "out of memory (emulated device)";
    case kNoDevice: return "no CUDA-capable device is detected";
    case kInvalidDevice: return "invalid device ordinal";
    case kAlreadyRegistered: return "part or all of the requested memory range is already mapped";
    case kNotRegistered: return "pointer does not correspond to a registered memory region";
    case kIllegalAddress:
      return "an illegal memory access was encountered (emulated: a device pointer outside "
             "every live allocation)";
    default: return "unknown error";
  }
}
bool IsOutOfMemory(int code) { return code == kMemoryAllocation; }
bool IsNoDevice(int code) { return code == kNoDevice; }

CallResult SetDevice(int index) {
  return {index == 0 ? kSuccess : kInvalidDevice, "cudaSetDevice"};
}

CallResult MemGetInfo(uint64_t* free_bytes, uint64_t* total_bytes) {
  Memory& m = Mem();
  std::lock_guard<std::mutex> lock(m.mu);
  *total_bytes = EmulatedTotal();
  *free_bytes = *total_bytes - std::min(m.allocated, *total_bytes);
  return {kSuccess, "cudaMemGetInfo"};
}

CallResult Malloc(void** p, size_t bytes) {
  *p = nullptr;
  if (bytes == 0) return {kSuccess, "cudaMalloc"};  // as cudaMalloc: success, no memory
  const uint64_t size = Rounded(bytes);
  Memory& m = Mem();
  std::lock_guard<std::mutex> lock(m.mu);
  if (size < bytes || size > EmulatedTotal() - std::min(m.allocated, EmulatedTotal())) {
    return {kMemoryAllocation, "cudaMalloc"};
  }
  void* q = std::aligned_alloc(kAlign, size);
  if (q == nullptr) return {kMemoryAllocation, "cudaMalloc"};
  m.blocks[reinterpret_cast<uintptr_t>(q)] = size;
  m.allocated += size;
  *p = q;
  return {kSuccess, "cudaMalloc"};
}

void Free(void* p) {
  if (p == nullptr) return;
  Memory& m = Mem();
  {
    std::lock_guard<std::mutex> lock(m.mu);
    auto it = m.blocks.find(reinterpret_cast<uintptr_t>(p));
    if (it == m.blocks.end()) return;  // not ours (cudaFree would fail): leave it
    m.allocated -= it->second;
    m.blocks.erase(it);
  }
  std::free(p);
}

CallResult MallocHost(void** p, size_t bytes) {
  *p = std::aligned_alloc(kAlign, Rounded(bytes == 0 ? 1 : bytes));
  return {*p != nullptr ? kSuccess : kMemoryAllocation, "cudaMallocHost"};
}
void FreeHost(void* p) { std::free(p); }

// Registered host ranges (address -> bytes): registering overlapping ranges
// or unregistering an unknown one fails as with the real runtime.
struct Registered {
  std::mutex mu;
  std::map<uintptr_t, uint64_t> ranges;
};
Registered& Reg() {
  static Registered* r = new Registered;
  return *r;
}

CallResult HostRegister(void* p, size_t bytes, bool read_only) {
  (void)read_only;
  if (p == nullptr || bytes == 0 || OnDevice(p, 1)) return {kInvalidValue, "cudaHostRegister"};
  Registered& r = Reg();
  std::lock_guard<std::mutex> lock(r.mu);
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto next = r.ranges.lower_bound(a);
  if (next != r.ranges.end() && next->first < a + bytes) {
    return {kAlreadyRegistered, "cudaHostRegister"};
  }
  if (next != r.ranges.begin() && std::prev(next)->first + std::prev(next)->second > a) {
    return {kAlreadyRegistered, "cudaHostRegister"};
  }
  r.ranges[a] = bytes;
  return {kSuccess, "cudaHostRegister"};
}

CallResult HostUnregister(void* p) {
  Registered& r = Reg();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.ranges.erase(reinterpret_cast<uintptr_t>(p)) == 0) {
    return {kNotRegistered, "cudaHostUnregister"};
  }
  return {kSuccess, "cudaHostUnregister"};
}

CallResult Memset(void* p, int value, size_t bytes, void* stream) {
  if (bytes > 0 && !OnDevice(p, bytes)) return {kInvalidValue, "cudaMemsetAsync"};
  if (bytes > 0) std::memset(p, value, bytes);
  return {kSuccess, "cudaMemsetAsync"};
}

CallResult MemcpyAsync(void* dst, const void* src, size_t bytes, int kind, void* stream) {
  if (bytes == 0) return {};
  const bool dst_dev = OnDevice(dst, bytes), src_dev = OnDevice(src, bytes);
  const bool ok = kind == 0   ? dst_dev && !src_dev
                  : kind == 1 ? src_dev && !dst_dev
                  : kind == 2 ? src_dev && dst_dev
                              : false;
  if (!ok || dst == nullptr || src == nullptr) return {kInvalidValue, "cudaMemcpyAsync"};
  std::memmove(dst, src, bytes);
  return {kSuccess, "cudaMemcpyAsync"};
}

CallResult StreamCreate(void** stream) {
  *stream = new Handle{'s'};
  return {kSuccess, "cudaStreamCreateWithFlags"};
}
void StreamDestroy(void* stream) { delete static_cast<Handle*>(stream); }
CallResult StreamSynchronize(void* stream) { return {kSuccess, "cudaStreamSynchronize"}; }
CallResult StreamWaitEvent(void* stream, void* event) {
  return {event != nullptr ? kSuccess : kInvalidValue, "cudaStreamWaitEvent"};
}
CallResult EventCreate(void** event) {
  *event = new Handle{'e'};
  return {kSuccess, "cudaEventCreateWithFlags"};
}
void EventDestroy(void* event) { delete static_cast<Handle*>(event); }
CallResult EventRecord(void* event, void* stream) {
  return {event != nullptr ? kSuccess : kInvalidValue, "cudaEventRecord"};
}
CallResult EventSynchronize(void* event) {
  return {event != nullptr ? kSuccess : kInvalidValue, "cudaEventSynchronize"};
}
CallResult EventQuery(void* event, bool* done) {
  *done = true;  // every recorded piece of work has already run
  return {event != nullptr ? kSuccess : kInvalidValue, "cudaEventQuery"};
}

// ------------------------------------------------------------ matrices
bool DeviceSupports(GgmlType type) { return Info(type).decode != nullptr; }

CallResult DequantRows(const DeviceMatrix& w, const int32_t* row_ids, int64_t first_row,
                       int64_t n_out, float* out, void* stream) {
  if (n_out <= 0 || w.n_cols <= 0) return {};
  const FormatInfo f = Info(w.type);
  if (f.decode == nullptr) return {kInvalidValue, "DequantRows: unsupported format"};
  if (!Extents().Floats(out, n_out * w.n_cols).Dev(row_ids, row_ids ? n_out * 4 : 0).ok) {
    return Illegal("DequantRowsKernel<<<>>>");
  }
  for (int64_t i = 0; i < n_out; ++i) {
    const int64_t row = row_ids != nullptr ? row_ids[i] : first_row + i;
    if (row < 0 || row >= w.n_rows || !RowsOnDevice(w, f, row, 1)) {
      return Illegal("DequantRowsKernel<<<>>>");
    }
    f.decode(static_cast<const uint8_t*>(w.data) + row * w.row_bytes, 0, w.n_cols,
             out + i * w.n_cols);
  }
  return {};
}

CallResult GroupedMatVec(const GroupedMatVecParams& p, void* stream) {
  if (p.n_tok < 1 || p.n_tok / kMaxMatVecTokens > 65535 || p.n_groups < 1 ||
      p.n_groups > 65535) {
    return {kInvalidValue, "GroupedMatVec: n_tok / n_groups"};
  }
  const DeviceMatrix& w0 = p.w;
  if (w0.n_rows == 0) return {};
  const FormatInfo f = Info(w0.type);
  if (f.decode == nullptr) return {kInvalidValue, "GroupedMatVec: unsupported format"};
  const int wpr = WarpsPerRow(w0.n_rows, w0.n_cols);
  std::vector<float> row(w0.n_cols), lanes(32 * wpr);
  for (int64_t g = 0; g < p.n_groups; ++g) {
    DeviceMatrix w = w0;
    w.data = static_cast<const uint8_t*>(w0.data) + g * p.group_bytes;
    if (!RowsOnDevice(w, f, 0, w.n_rows)) return Illegal("MatVecKernel<<<>>>");
    for (int64_t t = 0; t < p.n_tok; ++t) {
      if (!Extents()
               .Floats(p.x + t * p.x_tok + g * p.x_group, w.n_cols)
               .Floats(p.y + t * p.y_tok + g * p.y_group, w.n_rows)
               .ok) {
        return Illegal("MatVecKernel<<<>>>");
      }
    }
    // (y must not alias x: the kernel reads x while other blocks write y.)
    for (int64_t r = 0; r < w.n_rows; ++r) {
      f.decode(static_cast<const uint8_t*>(w.data) + r * w.row_bytes, 0, w.n_cols, row.data());
      for (int64_t t = 0; t < p.n_tok; ++t) {
        p.y[t * p.y_tok + g * p.y_group + r] =
            RowDot(row.data(), p.x + t * p.x_tok + g * p.x_group, w.n_cols, wpr, lanes.data());
      }
    }
  }
  return {};
}

CallResult MatVec(const DeviceMatrix& w, const float* x, int64_t n_tok, float* y,
                  void* stream) {
  if (n_tok < 1 || n_tok / kMaxMatVecTokens > 65535) return {kInvalidValue, "MatVec: n_tok"};
  if (w.n_rows == 0) return {};
  if (Info(w.type).decode == nullptr) return {kInvalidValue, "MatVec: unsupported format"};
  GroupedMatVecParams p;
  p.w = w;
  p.n_groups = 1;
  p.x = x;
  p.x_tok = w.n_cols;
  p.y = y;
  p.y_tok = w.n_rows;
  p.n_tok = n_tok;
  return GroupedMatVec(p, stream);
}

CallResult RoundActivations(GgmlType weight_type, const float* x, int64_t n_tok, int64_t n_cols,
                            float* out, void* stream) {
  const codec::ActRounding r = codec::ActRoundingOf(weight_type);
  const int unit = codec::ActRoundingBlock(r);
  if (n_cols % unit != 0) return {kInvalidValue, "RoundActivations: row not whole blocks"};
  const int64_t units = n_tok * n_cols / unit;
  if (units <= 0) return {};
  if (!Extents().Floats(x, units * unit).Floats(out, units * unit).ok) {
    return Illegal("RoundActivations<<<>>>");
  }
  for (int64_t u = 0; u < units; ++u) codec::RoundActivations(r, x + u * unit, out + u * unit);
  return {};
}

CallResult MatMul(const DeviceMatrix& w, const float* x, int64_t n_tok, float* y,
                  const GemmContext& ctx, void* stream) {
  if (n_tok <= 0 || w.n_rows == 0) return {};
  if (ctx.act == nullptr || codec::ActRoundingOf(w.type) == codec::ActRounding::kNone) {
    return MatVec(w, x, n_tok, y, stream);
  }
  int64_t chunk = ctx.act_elems / w.n_cols;
  if (chunk < 1) return {kInvalidValue, "MatMul: activation buffer smaller than one row"};
  if (chunk > kMaxMatVecTokens) chunk -= chunk % kMaxMatVecTokens;
  for (int64_t t0 = 0; t0 < n_tok; t0 += chunk) {
    const int64_t nt = std::min(n_tok - t0, chunk);
    CallResult r = RoundActivations(w.type, x + t0 * w.n_cols, nt, w.n_cols, ctx.act, stream);
    if (!r.ok()) return r;
    r = MatVec(w, ctx.act, nt, y + t0 * w.n_rows, stream);
    if (!r.ok()) return r;
  }
  return {};
}

// ------------------------------------------------------------ element-wise
namespace {
// RmsScale of norm.cuh: 256 threads, thread i sums the squares of elements
// i, i + 256, ... in double, each warp by the butterfly, the warps in order.
float RmsScale(const float* x, int64_t d, float eps) {
  constexpr int kThreads = 256;
  double partial[kThreads];
  for (int th = 0; th < kThreads; ++th) {
    double sum = 0.0;
    for (int64_t i = th; i < d; i += kThreads) sum += static_cast<double>(x[i]) * x[i];
    partial[th] = sum;
  }
  double total = 0.0;
  for (int w = 0; w < kThreads / 32; ++w) total += WarpSum(partial + 32 * w);
  const float mean = static_cast<float>(total / static_cast<double>(d));
  return 1.0f / std::sqrt(mean + eps);
}

void RotateNeox(float* v, const float* cs, int64_t half) {
  for (int64_t i = 0; i < half; ++i) {
    const float c = cs[2 * i], s = cs[2 * i + 1];
    const float x0 = v[i], x1 = v[i + half];
    v[i] = x0 * c - x1 * s;
    v[i + half] = x0 * s + x1 * c;
  }
}
}  // namespace

CallResult RmsNorm(const float* x, const float* w, int64_t rows, int64_t d, float eps,
                   float* y, void* stream) {
  return RmsNormStrided(x, d, w, rows, d, eps, y, d, stream);
}

CallResult RmsNormStrided(const float* x, int64_t x_stride, const float* w, int64_t rows,
                          int64_t d, float eps, float* y, int64_t y_stride, void* stream) {
  if (rows <= 0) return {};
  if (!Extents()
           .Floats(x, (rows - 1) * x_stride + d)
           .Floats(y, (rows - 1) * y_stride + d)
           .Floats(w, w ? d : 0)
           .ok) {
    return Illegal("RmsNormKernel<<<>>>");
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * x_stride;
    float* yr = y + r * y_stride;
    const float scale = RmsScale(xr, d, eps);
    for (int64_t i = 0; i < d; ++i) {
      const float v = xr[i] * scale;
      yr[i] = w != nullptr ? v * w[i] : v;
    }
  }
  return {};
}

CallResult RopeNeox(float* x, int64_t n_tok, int64_t n_heads, int64_t head_dim, int64_t n_rot,
                    const float* cos_sin, void* stream) {
  if (n_tok <= 0 || n_heads <= 0 || n_rot < 2) return {};
  const int64_t half = n_rot / 2;
  if (!Extents().Floats(x, n_tok * n_heads * head_dim).Floats(cos_sin, n_tok * half * 2).ok) {
    return Illegal("RopeNeoxKernel<<<>>>");
  }
  for (int64_t t = 0; t < n_tok; ++t) {
    for (int64_t h = 0; h < n_heads; ++h) {
      RotateNeox(x + (t * n_heads + h) * head_dim, cos_sin + t * half * 2, half);
    }
  }
  return {};
}

CallResult RopeNorm(float* x, int64_t n_tok, int64_t tok_stride, int64_t n_heads,
                    int64_t head_stride, int64_t n_rot, const float* cos_sin, void* stream) {
  if (n_tok <= 0 || n_heads <= 0 || n_rot < 2) return {};
  const int64_t half = n_rot / 2;
  if (!Extents()
           .Floats(x, (n_tok - 1) * tok_stride + (n_heads - 1) * head_stride + 2 * half)
           .Floats(cos_sin, n_tok * half * 2)
           .ok) {
    return Illegal("RopeNormKernel<<<>>>");
  }
  for (int64_t t = 0; t < n_tok; ++t) {
    const float* cs = cos_sin + t * half * 2;
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + t * tok_stride + h * head_stride;
      for (int64_t i = 0; i < half; ++i) {
        const float c = cs[2 * i], sn = cs[2 * i + 1];
        const float x0 = v[2 * i], x1 = v[2 * i + 1];
        v[2 * i] = x0 * c - x1 * sn;
        v[2 * i + 1] = x0 * sn + x1 * c;
      }
    }
  }
  return {};
}

CallResult CopyRows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride,
                    int64_t rows, int64_t cols, void* stream) {
  if (rows * cols <= 0) return {};
  if (!Extents()
           .Floats(src, (rows - 1) * src_stride + cols)
           .Floats(dst, (rows - 1) * dst_stride + cols)
           .ok) {
    return Illegal("CopyRowsKernel<<<>>>");
  }
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(dst + r * dst_stride, src + r * src_stride, cols * sizeof(float));
  }
  return {};
}

CallResult QkNormRope(float* q, const float* q_norm, int64_t n_head, float* k,
                      const float* k_norm, int64_t n_head_kv, int64_t n_tok, int64_t head_dim,
                      float eps, int64_t n_rot, const float* cos_sin, void* stream) {
  if (n_tok <= 0) return {};
  const int64_t half = n_rot / 2, hd = head_dim;
  if (!Extents()
           .Floats(q, n_tok * n_head * hd)
           .Floats(k, n_tok * n_head_kv * hd)
           .Floats(q_norm, q_norm ? hd : 0)
           .Floats(k_norm, k_norm ? hd : 0)
           .Floats(cos_sin, n_tok * half * 2)
           .ok) {
    return Illegal("QkNormRopeKernel<<<>>>");
  }
  for (int64_t t = 0; t < n_tok; ++t) {
    for (int64_t h = 0; h < n_head + n_head_kv; ++h) {
      const bool is_q = h < n_head;
      float* v = is_q ? q + (t * n_head + h) * hd : k + (t * n_head_kv + (h - n_head)) * hd;
      const float* w = is_q ? q_norm : k_norm;
      if (w != nullptr) {
        const float scale = RmsScale(v, hd, eps);
        for (int64_t i = 0; i < hd; ++i) v[i] = v[i] * scale * w[i];
      }
      RotateNeox(v, cos_sin + t * half * 2, half);
    }
  }
  return {};
}

CallResult AddBias(float* y, const float* b, int64_t rows, int64_t cols, void* stream) {
  if (rows * cols <= 0) return {};
  if (!Extents().Floats(y, rows * cols).Floats(b, cols).ok) return Illegal("AddBiasKernel<<<>>>");
  for (int64_t i = 0; i < rows * cols; ++i) y[i] += b[i % cols];
  return {};
}

CallResult Add(float* x, const float* y, int64_t n, void* stream) {
  if (n <= 0) return {};
  if (!Extents().Floats(x, n).Floats(y, n).ok) return Illegal("AddKernel<<<>>>");
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
  return {};
}

CallResult SwiGlu(const float* gate, const float* up, int64_t n, float* out, void* stream) {
  if (n <= 0) return {};
  if (!Extents().Floats(gate, n).Floats(up, n).Floats(out, n).ok) {
    return Illegal("SwiGluKernel<<<>>>");
  }
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
  return {};
}

CallResult SwiGluOai(const float* gate, const float* up, int64_t n, float alpha, float limit,
                     float* out, void* stream) {
  if (n <= 0) return {};
  if (!Extents().Floats(gate, n).Floats(up, n).Floats(out, n).ok) {
    return Illegal("SwiGluOaiKernel<<<>>>");
  }
  for (int64_t i = 0; i < n; ++i) {
    const float x = std::fmin(gate[i], limit);
    const float y = std::fmin(std::fmax(up[i], -limit), limit);
    out[i] = x / (1.0f + expf(alpha * (-x))) * (y + 1.0f);
  }
  return {};
}

CallResult ScaleRowsBySigmoid(float* y, const float* g, int64_t rows, int64_t cols,
                              void* stream) {
  if (rows * cols <= 0) return {};
  if (!Extents().Floats(y, rows * cols).Floats(g, rows).ok) {
    return Illegal("ScaleRowsBySigmoidKernel<<<>>>");
  }
  for (int64_t i = 0; i < rows * cols; ++i) y[i] *= 1.0f / (1.0f + expf(-g[i / cols]));
  return {};
}

CallResult GatherRows(const float* src, const int32_t* rows, int64_t n, int64_t d, float* dst,
                      void* stream) {
  if (n * d <= 0) return {};
  if (!Extents().Dev(rows, n * 4).Floats(dst, n * d).ok) return Illegal("GatherRowsKernel<<<>>>");
  for (int64_t i = 0; i < n; ++i) {
    const float* s = src + static_cast<int64_t>(rows[i]) * d;
    if (!OnDevice(s, d * 4)) return Illegal("GatherRowsKernel<<<>>>");
    std::memcpy(dst + i * d, s, d * 4);
  }
  return {};
}

CallResult ScatterAddScaled(float* dst, const float* src, const int32_t* rows, const float* w,
                            int64_t n, int64_t d, void* stream) {
  if (n * d <= 0) return {};
  if (!Extents().Dev(rows, n * 4).Floats(src, n * d).Floats(w, n).ok) {
    return Illegal("ScatterAddScaledKernel<<<>>>");
  }
  for (int64_t i = 0; i < n; ++i) {
    float* o = dst + static_cast<int64_t>(rows[i]) * d;
    if (!OnDevice(o, d * 4)) return Illegal("ScatterAddScaledKernel<<<>>>");
    for (int64_t c = 0; c < d; ++c) o[c] += w[i] * src[i * d + c];
  }
  return {};
}

// ------------------------------------------------------------ router
CallResult SelectExperts(float* logits, int64_t rows, int n_expert, int k, bool normalize,
                         int32_t* ids, float* weights, void* stream) {
  if (rows <= 0) return {};
  if (k < 1 || k > n_expert || n_expert > 1024) {
    return {kInvalidValue, "SelectExperts: k / n_expert out of range"};
  }
  if (!Extents().Floats(logits, rows * n_expert).Dev(ids, rows * k * 4).Floats(weights, rows * k).ok) {
    return Illegal("SelectExpertsKernel<<<>>>");
  }
  for (int64_t r = 0; r < rows; ++r) {
    codec::SelectExpertsRow(logits + r * n_expert, n_expert, k, normalize, ids + r * k,
                            weights + r * k);
  }
  return {};
}

CallResult SelectExpertsTopKSoftmax(const float* logits, int64_t rows, int n_expert, int k,
                                    int32_t* ids, float* weights, void* stream) {
  if (rows <= 0) return {};
  if (k < 1 || k > n_expert || n_expert > 1024) {
    return {kInvalidValue, "SelectExpertsTopKSoftmax: k / n_expert out of range"};
  }
  if (!Extents().Floats(logits, rows * n_expert).Dev(ids, rows * k * 4).Floats(weights, rows * k).ok) {
    return Illegal("SelectExpertsTopKSoftmaxKernel<<<>>>");
  }
  for (int64_t r = 0; r < rows; ++r) {
    codec::SelectExpertsTopKSoftmaxRow(logits + r * n_expert, n_expert, k, ids + r * k,
                                       weights + r * k);
  }
  return {};
}

CallResult SelectExpertsGrouped(const GroupedRouter& r, float* logits, int64_t rows,
                                int32_t* ids, float* weights, void* stream) {
  if (rows <= 0) return {};
  if (const char* bad = codec::CheckGroupedRouter(r)) return {kInvalidValue, bad};
  if (!Extents()
           .Floats(logits, rows * r.n_expert)
           .Dev(ids, rows * r.k * 4)
           .Floats(weights, rows * r.k)
           .Floats(r.bias, r.bias ? r.n_expert : 0)
           .ok) {
    return Illegal("SelectExpertsGroupedKernel<<<>>>");
  }
  for (int64_t i = 0; i < rows; ++i) {
    codec::SelectExpertsGroupedRow(r, logits + i * r.n_expert, ids + i * r.k, weights + i * r.k);
  }
  return {};
}

// ------------------------------------------------------------ paged KV + attention
bool KvTypeSupported(GgmlType type) {
  return type == GgmlType::kF16 || type == GgmlType::kQ8_0 || type == GgmlType::kQ4_0;
}

CallResult KvWrite(const PagedKv& kv, const float* k, const float* v, int64_t n_tok,
                   int64_t pos0, int64_t kd, int64_t vd, void* stream) {
  if (n_tok <= 0) return {};
  if (!KvTypeSupported(kv.type)) return {kInvalidValue, "KvWrite: KV type"};
  const FormatInfo f = Info(kv.type);
  if (kd % f.elems != 0 || vd % f.elems != 0) {
    return {kInvalidValue, "KvWrite: row not a multiple of the KV block"};
  }
  if (!Extents().Floats(k, n_tok * kd).Floats(v, n_tok * vd).ok ||
      !KvOnDevice(kv, pos0 + n_tok, pos0, UsedRowBytes(f, kd), UsedRowBytes(f, vd))) {
    return Illegal("KvWriteKernel<<<>>>");
  }
  for (int64_t t = 0; t < n_tok; ++t) {
    for (int side = 0; side < 2; ++side) {
      const int64_t dim = side == 0 ? kd : vd;
      uint8_t* row = SlotRow(side == 0 ? kv.k : kv.v, kv, pos0 + t,
                             side == 0 ? kv.k_row_bytes : kv.v_row_bytes);
      const float* src = (side == 0 ? k : v) + t * dim;
      for (int64_t u = 0; u < dim / f.elems; ++u) {
        uint8_t* dst = row + u * f.bytes;
        const float* s = src + u * f.elems;
        if (kv.type == GgmlType::kF16) {
          const uint16_t h = codec::FloatToHalf(s[0]);
          dst[0] = static_cast<uint8_t>(h & 0xFF);
          dst[1] = static_cast<uint8_t>(h >> 8);
        } else if (kv.type == GgmlType::kQ8_0) {
          codec::EncodeQ8_0(s, dst);
        } else {
          codec::EncodeQ4_0(s, dst);
        }
      }
    }
  }
  return {};
}

CallResult Attention(const AttentionParams& p, void* stream) {
  if (p.n_tok <= 0) return {};
  if (!KvTypeSupported(p.kv.type)) return {kInvalidValue, "Attention: KV type"};
  if (!AttentionShapeSupported(p)) return {kInvalidValue, "Attention: unsupported head shape"};
  if (p.split_scratch == nullptr) return {kInvalidValue, "Attention: no split scratch"};
  if (p.window < 0) return {kInvalidValue, "Attention: negative window"};
  const FormatInfo f = Info(p.kv.type);
  const int hd = p.head_dim, hv = AttentionDimV(p);
  const uint64_t k_used = UsedRowBytes(f, static_cast<int64_t>(p.n_head_kv) * hd);
  const uint64_t v_used = UsedRowBytes(f, static_cast<int64_t>(p.n_head_kv) * hv);
  if (!Extents()
           .Floats(p.q, p.n_tok * p.n_head * hd)
           .Floats(p.out, p.n_tok * p.n_head * hv)
           .ok ||
      (p.sinks != nullptr && !Extents().Floats(p.sinks, p.n_head).ok) ||
      !KvOnDevice(p.kv, p.pos0 + p.n_tok, 0, k_used, v_used)) {
    return Illegal("AttentionPartialKernel<<<>>>");
  }
  int64_t t0 = 0;
  while (t0 < p.n_tok) {
    const int n_chunks = static_cast<int>((p.pos0 + p.n_tok + kChunk - 1) / kChunk);
    const int64_t per_token = static_cast<int64_t>(p.n_head) * n_chunks * (hv + 2);
    int64_t nt = p.split_scratch_elems / per_token;
    if (nt < 1) return {kInvalidValue, "Attention: split scratch too small"};
    nt = std::min<int64_t>({nt, p.n_tok - t0, 65535});
    if (!Extents().Floats(p.split_scratch, nt * per_token).ok) {
      return Illegal("AttentionPartialKernel<<<>>>");
    }
    if (p.kv.type == GgmlType::kF16) {
      AttentionPartialsF16(p, f, t0, nt, n_chunks);
    } else {
      AttentionPartials(p, f, t0, nt, n_chunks);
    }
    AttentionMerge(p, t0, nt, n_chunks);
    t0 += nt;
  }
  return {};
}

}  // namespace moesplit::cuda::raw
