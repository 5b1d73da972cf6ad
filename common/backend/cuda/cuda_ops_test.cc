// Backend consistency: every CUDA op against the CPU reference (common/quant
// dequantisers, common/model/internal ops, a double-precision attention), per
// format, with tolerances per op. Skips without a GPU.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "common/backend/cuda/cuda_backend.h"
#include "common/base/fp16.h"
#include "common/backend/cuda/cuda_device.h"
#include "common/backend/cuda/cuda_status.h"
#include "common/backend/cuda/internal/cuda_raw.h"
#include "common/model/internal/attention.h"
#include "common/model/internal/delta_net.h"
#include "common/model/internal/ops.h"
#include "common/quant/quant.h"
#include "common/quant/random_blocks.h"
#include "gtest/gtest.h"

namespace moesplit::cuda {
namespace {

float Fp16RoundTrip(float x) { return Fp16ToFp32(Fp32ToFp16(x)); }

class CudaOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dev = CreateCudaDevice(0);
    if (!dev.ok()) GTEST_SKIP() << "no CUDA device: " << dev.status();
    dev_ = std::move(*dev);
    auto s = dev_->CreateStream();
    ASSERT_TRUE(s.ok()) << s.status();
    stream_ = std::move(*s);
  }

  template <typename T>
  T* Upload(const std::vector<T>& v) {
    auto b = dev_->Allocate(std::max<size_t>(1, v.size() * sizeof(T)));
    EXPECT_TRUE(b.ok()) << b.status();
    EXPECT_TRUE(stream_->CopyToDevice(**b, 0, v.data(), v.size() * sizeof(T)).ok());
    T* p = static_cast<T*>((*b)->data());
    bufs_.push_back(std::move(*b));
    return p;
  }
  template <typename T>
  T* Zeros(size_t n) { return Upload(std::vector<T>(n, T{})); }
  template <typename T>
  std::vector<T> Download(const T* p, size_t n) {
    std::vector<T> out(n);
    EXPECT_TRUE(ToStatus(raw::MemcpyAsync(out.data(), p, n * sizeof(T), 1, stream_->native())).ok());
    EXPECT_TRUE(stream_->Synchronize().ok());
    return out;
  }
  void* s() { return stream_->native(); }

  std::unique_ptr<backend::Device> dev_;
  std::unique_ptr<backend::Stream> stream_;
  std::vector<std::unique_ptr<backend::Buffer>> bufs_;
};

const GgmlType kWeightTypes[] = {
    GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ4_0,   GgmlType::kQ4_1,
    GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ8_0, GgmlType::kMXFP4,  GgmlType::kQ2_K,
    GgmlType::kQ3_K, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K,   GgmlType::kIQ4_NL,
    GgmlType::kIQ4_XS, GgmlType::kIQ2_XXS, GgmlType::kIQ2_XS, GgmlType::kIQ2_S, GgmlType::kIQ3_XXS,
    GgmlType::kIQ3_S, GgmlType::kIQ1_S, GgmlType::kIQ1_M, GgmlType::kTQ1_0, GgmlType::kTQ2_0};

struct HostMatrix {
  GgmlType type;
  int64_t rows, cols;
  uint64_t row_bytes;
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // dequantised on the CPU
};

HostMatrix RandomMatrix(GgmlType t, int64_t rows, int64_t cols, uint64_t seed) {
  HostMatrix m{t, rows, cols, *RowBytes(t, cols), {}, {}};
  m.bytes.resize(m.row_bytes * rows + 16);
  EXPECT_TRUE(quant::FillRandomBlocks(t, seed, 0.05f, m.bytes.data(), rows * cols).ok());
  m.values.resize(rows * cols);
  EXPECT_TRUE(quant::DequantizeRow(t, m.bytes.data(), m.values.data(), rows * cols).ok());
  return m;
}

std::vector<float> RandomVector(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

TEST_F(CudaOpsTest, DequantRowsIsBitExactForEveryFormat) {
  for (GgmlType t : kWeightTypes) {
    HostMatrix m = RandomMatrix(t, 40, 512, 17);
    raw::DeviceMatrix dm{t, Upload(m.bytes), m.rows, m.cols, m.row_bytes};
    float* out = Zeros<float>(m.values.size());
    ASSERT_TRUE(ToStatus(raw::DequantRows(dm, nullptr, 0, m.rows, out, s())).ok());
    std::vector<float> got = Download(out, m.values.size());
    EXPECT_EQ(0, std::memcmp(got.data(), m.values.data(), got.size() * 4)) << GgmlTypeName(t);
    // get_rows with ids.
    std::vector<int32_t> ids = {39, 0, 7, 7};
    float* rows = Zeros<float>(ids.size() * m.cols);
    ASSERT_TRUE(ToStatus(raw::DequantRows(dm, Upload(ids), 0, 4, rows, s())).ok());
    got = Download(rows, ids.size() * m.cols);
    for (size_t i = 0; i < ids.size(); ++i) {
      EXPECT_EQ(0, std::memcmp(got.data() + i * m.cols, m.values.data() + ids[i] * m.cols,
                               m.cols * 4))
          << GgmlTypeName(t) << " row " << ids[i];
    }
  }
}

// y = x . w^T in double from the CPU-dequantised weights.
std::vector<double> Reference(const HostMatrix& m, const std::vector<float>& x, int64_t n,
                              std::vector<double>* mag) {
  std::vector<double> y(n * m.rows);
  mag->assign(n * m.rows, 0.0);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t r = 0; r < m.rows; ++r) {
      double acc = 0, a = 0;
      for (int64_t c = 0; c < m.cols; ++c) {
        acc += double(m.values[r * m.cols + c]) * x[t * m.cols + c];
        a += std::fabs(double(m.values[r * m.cols + c]) * x[t * m.cols + c]);
      }
      y[t * m.rows + r] = acc;
      (*mag)[t * m.rows + r] = a;
    }
  }
  return y;
}

// x rounded as the CPU rounds the activations of a product with a weight of
// type t: through the vec_dot_type's quantiser and dequantiser.
std::vector<float> CpuRoundedActivations(GgmlType t, const std::vector<float>& x) {
  const GgmlType vdt = quant::GetTypeTraits(t)->vec_dot_type;
  if (vdt == GgmlType::kF32) return x;
  std::vector<uint8_t> q(*RowBytes(vdt, static_cast<int64_t>(x.size())));
  std::vector<float> out(x.size());
  EXPECT_TRUE(quant::QuantizeRow(vdt, x.data(), q.data(), x.size()).ok());
  EXPECT_TRUE(quant::DequantizeRow(vdt, q.data(), out.data(), x.size()).ok());
  return out;
}

TEST_F(CudaOpsTest, MatMulMatchesTheCpuForEveryFormatAndBatch) {
  for (GgmlType t : kWeightTypes) {
    HostMatrix m = RandomMatrix(t, 72, 768, 5);
    raw::DeviceMatrix dm{t, Upload(m.bytes), m.rows, m.cols, m.row_bytes};
    // Rounded activations through a buffer of 10 rows (several chunks), and
    // f32 activations (no buffer).
    float* act = Zeros<float>(10 * m.cols);
    const raw::GemmContext rounded{act, 10 * m.cols}, plain{};
    std::vector<float> single;  // token 0 evaluated alone
    for (int64_t n : {1, 3, 8, 9, 40, 130}) {
      std::vector<float> x = RandomVector(n * m.cols, 100);  // same first tokens for every n
      for (int pass = 0; pass < 2; ++pass) {
        float* y = Zeros<float>(n * m.rows);
        ASSERT_TRUE(
            ToStatus(raw::MatMul(dm, Upload(x), n, y, pass ? plain : rounded, s())).ok());
        std::vector<float> got = Download(y, n * m.rows);
        std::vector<double> mag;
        std::vector<double> want = Reference(m, pass ? x : CpuRoundedActivations(t, x), n, &mag);
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_NEAR(got[i], want[i], 1e-5 * mag[i] + 1e-6)
              << GgmlTypeName(t) << " n_tok " << n << " pass " << pass << " index " << i;
        }
        // A token's values do not depend on the batch it is in.
        if (pass == 0 && n == 1) single = got;
        if (pass == 0) {
          ASSERT_EQ(0, std::memcmp(got.data(), single.data(), m.rows * sizeof(float)))
              << GgmlTypeName(t) << " n_tok " << n;
        }
      }
    }
  }
}

TEST_F(CudaOpsTest, RmsNormRopeAndElementwiseMatchTheCpu) {
  const int64_t rows = 6, d = 128;
  std::vector<float> x = RandomVector(rows * d, 1, 3.0f), w = RandomVector(d, 2);
  float* dx = Upload(x);
  float* dy = Zeros<float>(rows * d);
  ASSERT_TRUE(ToStatus(raw::RmsNorm(dx, Upload(w), rows, d, 1e-6f, dy, s())).ok());
  std::vector<float> got = Download(dy, rows * d);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> want(d);
    model::internal::RmsNorm(x.data() + r * d, w.data(), d, 1e-6f, want.data());
    for (int64_t i = 0; i < d; ++i) ASSERT_NEAR(got[r * d + i], want[i], 1e-5 * std::fabs(want[i]) + 1e-6);
  }
  // RoPE: 3 tokens at positions 5, 6, 7 of 2 heads, n_rot 64 of head_dim 128.
  model::RopeParams rp;
  rp.n_rot = 64;
  rp.freq_base = 1e6f;
  std::vector<float> cs;
  std::vector<float> want = x;
  for (int t = 0; t < 3; ++t) {
    model::internal::RopeAngles a;
    model::internal::ComputeRopeAngles(rp, 5 + t, &a);
    for (int i = 0; i < 32; ++i) {
      cs.push_back(a.cos[i]);
      cs.push_back(a.sin[i]);
    }
    for (int h = 0; h < 2; ++h) model::internal::ApplyRopeNeox(a, 64, want.data() + (t * 2 + h) * d);
  }
  ASSERT_TRUE(ToStatus(raw::RopeNeox(dx, 3, 2, d, 64, Upload(cs), s())).ok());
  got = Download(dx, rows * d);
  for (int64_t i = 0; i < rows * d; ++i) ASSERT_NEAR(got[i], want[i], 1e-5) << i;

  // QkNormRope: the same values as RmsNorm + RopeNeox per side (3 tokens, 4
  // query heads, 2 key heads), with and without the norms.
  const float* dcs = Upload(cs);
  for (bool with_norm : {true, false}) {
    std::vector<float> q = RandomVector(3 * 4 * d, 21, 2.0f), k = RandomVector(3 * 2 * d, 22, 2.0f);
    const float* qw = with_norm ? Upload(RandomVector(d, 23)) : nullptr;
    const float* kw = with_norm ? Upload(RandomVector(d, 24)) : nullptr;
    float *q1 = Upload(q), *k1 = Upload(k), *q2 = Upload(q), *k2 = Upload(k);
    if (with_norm) {
      ASSERT_TRUE(ToStatus(raw::RmsNorm(q1, qw, 12, d, 1e-6f, q1, s())).ok());
      ASSERT_TRUE(ToStatus(raw::RmsNorm(k1, kw, 6, d, 1e-6f, k1, s())).ok());
    }
    ASSERT_TRUE(ToStatus(raw::RopeNeox(q1, 3, 4, d, 64, dcs, s())).ok());
    ASSERT_TRUE(ToStatus(raw::RopeNeox(k1, 3, 2, d, 64, dcs, s())).ok());
    ASSERT_TRUE(ToStatus(raw::QkNormRope(q2, qw, 4, k2, kw, 2, 3, d, 1e-6f, 64, dcs, s())).ok());
    const std::vector<float> a = Download(q1, q.size()), b = Download(q2, q.size());
    const std::vector<float> c = Download(k1, k.size()), e = Download(k2, k.size());
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << "q, norm " << with_norm;
    EXPECT_EQ(0, std::memcmp(c.data(), e.data(), c.size() * 4)) << "k, norm " << with_norm;
  }

  // SwiGLU, Add, AddBias, ScaleRowsBySigmoid.
  std::vector<float> g = RandomVector(rows * d, 3), u = RandomVector(rows * d, 4);
  float* dg = Upload(g);
  ASSERT_TRUE(ToStatus(raw::SwiGlu(dg, Upload(u), rows * d, dg, s())).ok());
  std::vector<float> sw(rows * d);
  model::internal::SwiGlu(g.data(), u.data(), rows, d, sw.data());
  got = Download(dg, rows * d);
  for (int64_t i = 0; i < rows * d; ++i) ASSERT_NEAR(got[i], sw[i], 1e-5 * std::fabs(sw[i]) + 1e-6);
  float* du = Upload(u);
  ASSERT_TRUE(ToStatus(raw::Add(du, Upload(g), rows * d, s())).ok());
  ASSERT_TRUE(ToStatus(raw::AddBias(du, Upload(w), rows, d, s())).ok());
  std::vector<float> gate = RandomVector(rows, 9);
  ASSERT_TRUE(ToStatus(raw::ScaleRowsBySigmoid(du, Upload(gate), rows, d, s())).ok());
  got = Download(du, rows * d);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < d; ++i) {
      const float want_v = (u[r * d + i] + g[r * d + i] + w[i]) * model::internal::Sigmoid(gate[r]);
      ASSERT_NEAR(got[r * d + i], want_v, 1e-5 * std::fabs(want_v) + 1e-6);
    }
  }
}

TEST_F(CudaOpsTest, GatherAndScatterAddRows) {
  const int64_t rows = 9, d = 70;
  std::vector<float> src = RandomVector(rows * d, 51), dst = RandomVector(rows * d, 52);
  const std::vector<int32_t> idx = {4, 0, 8};
  const std::vector<float> w = {0.5f, -2.0f, 3.0f};
  float* dsrc = Upload(src);
  float* gathered = Zeros<float>(idx.size() * d);
  ASSERT_TRUE(ToStatus(raw::GatherRows(dsrc, Upload(idx), 3, d, gathered, s())).ok());
  const std::vector<float> g = Download(gathered, idx.size() * d);
  float* ddst = Upload(dst);
  ASSERT_TRUE(ToStatus(raw::ScatterAddScaled(ddst, gathered, Upload(idx), Upload(w), 3, d, s())).ok());
  const std::vector<float> got = Download(ddst, rows * d);
  std::vector<float> want = dst;
  for (size_t i = 0; i < idx.size(); ++i) {
    for (int64_t c = 0; c < d; ++c) {
      ASSERT_EQ(g[i * d + c], src[idx[i] * d + c]);
      want[idx[i] * d + c] += w[i] * src[idx[i] * d + c];
    }
  }
  for (int64_t i = 0; i < rows * d; ++i) ASSERT_FLOAT_EQ(got[i], want[i]) << i;
}

TEST_F(CudaOpsTest, RouterTopKMatchesTheCpu) {
  for (bool normalize : {false, true}) {
    const int rows = 33, ne = 128, k = 8;
    std::vector<float> logits = RandomVector(rows * ne, 21, 2.0f);
    // A tie: experts 3 and 9 of row 0 share the top value -> 3 first.
    logits[3] = logits[9] = 50.0f;
    float* dl = Upload(logits);
    int32_t* ids = Zeros<int32_t>(rows * k);
    float* wts = Zeros<float>(rows * k);
    ASSERT_TRUE(ToStatus(raw::SelectExperts(dl, rows, ne, k, normalize, ids, wts, s())).ok());
    std::vector<int32_t> got_ids = Download(ids, rows * k);
    std::vector<float> got_w = Download(wts, rows * k);
    for (int r = 0; r < rows; ++r) {
      std::vector<int32_t> want_ids(k);
      std::vector<float> want_w(k);
      model::internal::SelectExperts(logits.data() + r * ne, ne, k, normalize, want_ids.data(),
                                     want_w.data());
      for (int i = 0; i < k; ++i) {
        ASSERT_EQ(got_ids[r * k + i], want_ids[i]) << "row " << r << " rank " << i;
        ASSERT_NEAR(got_w[r * k + i], want_w[i], 1e-5) << "row " << r << " rank " << i;
      }
    }
    EXPECT_EQ(got_ids[0], 3);
    EXPECT_EQ(got_ids[1], 9);
  }
  EXPECT_FALSE(ToStatus(raw::SelectExperts(nullptr, 1, 4, 5, false, nullptr, nullptr, s())).ok());
}

// The query as the attention rounds it: to K's vec_dot_type (F16 for an F16
// cache, Q8_0 for Q8_0 / Q4_0), as llama.cpp's CPU attention does.
std::vector<float> RoundQuery(GgmlType kv_type, const std::vector<float>& q) {
  std::vector<float> out(q.size());
  if (kv_type == GgmlType::kF16) {
    for (size_t i = 0; i < q.size(); ++i) out[i] = Fp16RoundTrip(q[i]);
    return out;
  }
  std::vector<uint8_t> tmp(*RowBytes(GgmlType::kQ8_0, static_cast<int64_t>(q.size())));
  EXPECT_TRUE(quant::QuantizeRow(GgmlType::kQ8_0, q.data(), tmp.data(), q.size()).ok());
  EXPECT_TRUE(quant::DequantizeRow(GgmlType::kQ8_0, tmp.data(), out.data(), q.size()).ok());
  return out;
}

// The attention of n tokens at pos0 (q, out: all the tokens' rows) over `kv`.
raw::AttentionParams AttentionOf(const raw::PagedKv& kv, const float* q, float* out,
                                 int64_t pos0, int64_t n, int n_head, int n_head_kv, int hd,
                                 float* scratch, int64_t scratch_elems) {
  raw::AttentionParams p;
  p.q = q + pos0 * n_head * hd;
  p.out = out + pos0 * n_head * hd;
  p.kv = kv;
  p.n_tok = n;
  p.pos0 = pos0;
  p.n_head = n_head;
  p.n_head_kv = n_head_kv;
  p.head_dim = hd;
  p.scale = 1.0f / std::sqrt(float(hd));
  p.split_scratch = scratch;
  p.split_scratch_elems = scratch_elems;
  return p;
}

// The F16 cache's attention as the contract states it: per chunk of
// kAttentionChunk positions, llama.cpp's CPU flash attention with an f16
// accumulator (the CPU reference's primitives, common/model/internal/
// attention.h), then the chunks' {max, sum, acc} merged in order in f32.
// k16 / v16: position p's head at + p * stride (f16).
// hd: the K and query dimension, hv the V one (MLA: V is the start of K).
std::vector<float> F16Attention(const float* q, const uint16_t* k16, const uint16_t* v16,
                                int64_t k_stride, int64_t v_stride, int64_t n_kv, int hd, int hv,
                                float scale) {
  std::vector<uint16_t> q16(hd), acc(hv);
  model::internal::ToF16(hd, q, q16.data());
  float m = -INFINITY, l = 0.0f;
  std::vector<float> o(hv, 0.0f);
  for (int64_t begin = 0; begin < n_kv; begin += raw::kAttentionChunk) {
    const int64_t end = std::min<int64_t>(begin + raw::kAttentionChunk, n_kv);
    std::fill(acc.begin(), acc.end(), 0);
    float cm = -INFINITY, csum = 0.0f;
    for (int64_t j = begin; j < end; ++j) {
      const float s = model::internal::DotF16(hd, k16 + j * k_stride, q16.data()) * scale;
      float ms = 1.0f, vs = 1.0f;
      if (s > cm) {
        ms = std::exp(cm - s);
        cm = s;
        model::internal::ScaleF16(hv, acc.data(), ms);
      } else {
        vs = std::exp(s - cm);
      }
      model::internal::MadF16(hv, acc.data(), v16 + j * v_stride, vs);
      csum = std::fma(csum, ms, vs);
    }
    const float m_new = std::max(m, cm);
    const float a = std::exp(m - m_new), b = std::exp(cm - m_new);
    l = l * a + csum * b;
    for (int i = 0; i < hv; ++i) o[i] = o[i] * a + Fp16ToFp32(acc[i]) * b;
    m = m_new;
  }
  for (float& x : o) x *= 1.0f / l;
  return o;
}
std::vector<float> F16Attention(const float* q, const uint16_t* k16, const uint16_t* v16,
                                int64_t stride, int64_t n_kv, int hd, float scale) {
  return F16Attention(q, k16, v16, stride, stride, n_kv, hd, hd, scale);
}

// got against want to a few f16 steps of the row's largest value (the device
// rounds the f16 accumulator after its own expf, whose last bit may differ
// from the host's; the emulation gives want exactly).
void ExpectNearF16Row(const float* got, const std::vector<float>& want, const char* what) {
  float big = 0.0f;
  for (float w : want) big = std::max(big, std::abs(w));
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 2e-3f * big + 1e-7f) << what << " dim " << i;
  }
}

// Paged KV write + attention against double-precision attention over the
// CPU-quantised-then-dequantised K and V, with a shuffled block table; the
// F16 cache also against F16Attention (llama.cpp's f16 accumulator, whose
// rounding puts it ~1e-3 from the double-precision values).
TEST_F(CudaOpsTest, PagedAttentionMatchesTheCpuForEveryKvType) {
  const int n_head = 8, n_head_kv = 2, hd = 128, page = 16, n_pages = 8;
  const int64_t kd = n_head_kv * hd;
  for (GgmlType kt : {GgmlType::kF16, GgmlType::kQ8_0, GgmlType::kQ4_0}) {
    const uint64_t rb = *RowBytes(kt, kd);
    std::vector<int32_t> table(n_pages);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937(4));
    raw::PagedKv kv;
    kv.type = kt;
    kv.k = Zeros<uint8_t>(rb * page * n_pages);
    kv.v = Zeros<uint8_t>(rb * page * n_pages);
    kv.k_row_bytes = kv.v_row_bytes = rb;
    kv.page_size = page;
    kv.block_table = Upload(table);
    // Two calls: a prompt of 37 tokens, then one decode token at 37.
    const int64_t total = 38;
    std::vector<float> k = RandomVector(total * kd, 31), v = RandomVector(total * kd, 32);
    std::vector<float> q = RandomVector(total * n_head * hd, 33);
    float* dk = Upload(k);
    float* dv = Upload(v);
    float* dq = Upload(q);
    float* out = Zeros<float>(total * n_head * hd);
    const int64_t scratch_elems = raw::AttentionScratchElems(n_head, hd, total);
    float* scratch = Zeros<float>(scratch_elems);
    for (auto [pos0, n] : {std::pair<int64_t, int64_t>{0, 37}, {37, 1}}) {
      ASSERT_TRUE(ToStatus(raw::KvWrite(kv, dk + pos0 * kd, dv + pos0 * kd, n, pos0, kd, kd, s())).ok());
      const raw::AttentionParams p =
          AttentionOf(kv, dq, out, pos0, n, n_head, n_head_kv, hd, scratch, scratch_elems);
      ASSERT_TRUE(ToStatus(raw::Attention(p, s())).ok());
    }
    std::vector<float> got = Download(out, total * n_head * hd);
    const std::vector<float> qr = RoundQuery(kt, q);
    // Reference K/V as the cache holds them.
    std::vector<float> kq(total * kd), vq(total * kd);
    std::vector<uint8_t> tmp(rb);
    for (int64_t t = 0; t < total; ++t) {
      if (kt == GgmlType::kF16) {
        for (int64_t i = 0; i < kd; ++i) {
          kq[t * kd + i] = Fp16RoundTrip(k[t * kd + i]);
          vq[t * kd + i] = Fp16RoundTrip(v[t * kd + i]);
        }
        continue;
      }
      ASSERT_TRUE(quant::QuantizeRow(kt, k.data() + t * kd, tmp.data(), kd).ok());
      ASSERT_TRUE(quant::DequantizeRow(kt, tmp.data(), kq.data() + t * kd, kd).ok());
      ASSERT_TRUE(quant::QuantizeRow(kt, v.data() + t * kd, tmp.data(), kd).ok());
      ASSERT_TRUE(quant::DequantizeRow(kt, tmp.data(), vq.data() + t * kd, kd).ok());
    }
    std::vector<uint16_t> k16(total * kd), v16(total * kd);
    model::internal::ToF16(total * kd, k.data(), k16.data());
    model::internal::ToF16(total * kd, v.data(), v16.data());
    for (int64_t t = 0; t < total; ++t) {
      for (int h = 0; h < n_head; ++h) {
        const int kvh = h / (n_head / n_head_kv);
        std::vector<double> sc(t + 1);
        double mx = -1e300;
        for (int64_t p = 0; p <= t; ++p) {
          double dot = 0;
          for (int i = 0; i < hd; ++i) dot += double(qr[(t * n_head + h) * hd + i]) * kq[p * kd + kvh * hd + i];
          sc[p] = dot / std::sqrt(double(hd));
          mx = std::max(mx, sc[p]);
        }
        double sum = 0;
        for (double& x : sc) sum += (x = std::exp(x - mx));
        for (int i = 0; i < hd; ++i) {
          double o = 0;
          for (int64_t p = 0; p <= t; ++p) o += sc[p] * vq[p * kd + kvh * hd + i];
          ASSERT_NEAR(got[(t * n_head + h) * hd + i], o / sum,
                      kt == GgmlType::kF16 ? 5e-3 : 2e-5)
              << GgmlTypeName(kt) << " token " << t << " head " << h << " dim " << i;
        }
        if (kt == GgmlType::kF16) {
          const std::string what = "token " + std::to_string(t) + " head " + std::to_string(h);
          ExpectNearF16Row(got.data() + (t * n_head + h) * hd,
                           F16Attention(q.data() + (t * n_head + h) * hd, k16.data() + kvh * hd,
                                        v16.data() + kvh * hd, kd, t + 1, hd,
                                        1.0f / std::sqrt(float(hd))),
                           what.c_str());
        }
      }
    }
  }
}

// Decode over a long context: many chunks per token (several blocks), merged
// by a second kernel, with a GQA group wider than one block's heads (8 query
// heads of 256 dims: two subgroups of 4). Against a double-precision
// reference; a token's result does not depend on the batch or on how many
// tokens the scratch lets one launch hold.
TEST_F(CudaOpsTest, SplitKDecodeMatchesTheReference) {
  const int n_head = 8, n_head_kv = 1, hd = 256, page = 64;
  const int64_t kd = n_head_kv * hd, total = 2000;
  const int n_pages = static_cast<int>((total + page - 1) / page);
  std::vector<int32_t> table(n_pages);
  std::iota(table.rbegin(), table.rend(), 0);  // reversed page order
  raw::PagedKv kv;
  kv.type = GgmlType::kF16;
  const uint64_t rb = *RowBytes(kv.type, kd);
  kv.k = Zeros<uint8_t>(rb * page * n_pages);
  kv.v = Zeros<uint8_t>(rb * page * n_pages);
  kv.k_row_bytes = kv.v_row_bytes = rb;
  kv.page_size = page;
  kv.block_table = Upload(table);
  std::vector<float> k = RandomVector(total * kd, 41), v = RandomVector(total * kd, 42);
  // Two decode tokens at positions 1998 and 1999.
  std::vector<float> q = RandomVector(2 * n_head * hd, 43, 0.5f);
  ASSERT_TRUE(ToStatus(raw::KvWrite(kv, Upload(k), Upload(v), total, 0, kd, kd, s())).ok());
  raw::AttentionParams p;
  p.q = Upload(q);
  p.kv = kv;
  p.n_tok = 2;
  p.pos0 = total - 2;
  p.n_head = n_head;
  p.n_head_kv = n_head_kv;
  p.head_dim = hd;
  p.scale = 1.0f / std::sqrt(float(hd));
  // A scratch for one token per launch, then one for both at once.
  const int64_t one = n_head * ((total + raw::kAttentionChunk - 1) / raw::kAttentionChunk) * (hd + 2);
  p.split_scratch_elems = one;
  p.split_scratch = Zeros<float>(one);
  p.out = Zeros<float>(2 * n_head * hd);
  ASSERT_TRUE(ToStatus(raw::Attention(p, s())).ok());
  const std::vector<float> unsplit = Download(p.out, 2 * n_head * hd);
  p.split_scratch_elems = raw::AttentionScratchElems(n_head, hd, total);
  p.split_scratch = Zeros<float>(p.split_scratch_elems);
  p.out = Zeros<float>(2 * n_head * hd);
  ASSERT_TRUE(ToStatus(raw::Attention(p, s())).ok());
  const std::vector<float> split = Download(p.out, 2 * n_head * hd);
  EXPECT_EQ(0, std::memcmp(split.data(), unsplit.data(), split.size() * sizeof(float)));
  // The second token alone.
  raw::AttentionParams p1 = p;
  p1.q = p.q + n_head * hd;
  p1.n_tok = 1;
  p1.pos0 = total - 1;
  p1.out = Zeros<float>(n_head * hd);
  ASSERT_TRUE(ToStatus(raw::Attention(p1, s())).ok());
  const std::vector<float> alone = Download(p1.out, n_head * hd);
  EXPECT_EQ(0, std::memcmp(alone.data(), split.data() + n_head * hd, alone.size() * sizeof(float)));
  // Too small a scratch is refused.
  p.split_scratch_elems = one - 1;
  EXPECT_FALSE(ToStatus(raw::Attention(p, s())).ok());
  const std::vector<float> qr = RoundQuery(GgmlType::kF16, q);
  std::vector<uint16_t> k16(total * kd), v16(total * kd);
  model::internal::ToF16(total * kd, k.data(), k16.data());
  model::internal::ToF16(total * kd, v.data(), v16.data());
  for (int t = 0; t < 2; ++t) {
    const int64_t n_kv = total - 1 + t;
    for (int h = 0; h < n_head; ++h) {
      std::vector<double> sc(n_kv);
      double mx = -1e300;
      for (int64_t pos = 0; pos < n_kv; ++pos) {
        double dot = 0;
        for (int i = 0; i < hd; ++i) {
          dot += double(qr[(t * n_head + h) * hd + i]) * Fp16RoundTrip(k[pos * kd + i]);
        }
        sc[pos] = dot / std::sqrt(double(hd));
        mx = std::max(mx, sc[pos]);
      }
      double sum = 0;
      for (double& x : sc) sum += (x = std::exp(x - mx));
      for (int i = 0; i < hd; ++i) {
        double o = 0;
        for (int64_t pos = 0; pos < n_kv; ++pos) o += sc[pos] * Fp16RoundTrip(v[pos * kd + i]);
        const size_t at = (t * n_head + h) * hd + i;
        // 8 chunks of f16 accumulation (see F16Attention).
        ASSERT_NEAR(split[at], o / sum, 3e-4) << "token " << t << " head " << h << " dim " << i;
      }
      const std::string what = "token " + std::to_string(t) + " head " + std::to_string(h);
      ExpectNearF16Row(split.data() + (t * n_head + h) * hd,
                       F16Attention(q.data() + (t * n_head + h) * hd, k16.data(), v16.data(), kd,
                                    n_kv, hd, 1.0f / std::sqrt(float(hd))),
                       what.c_str());
    }
  }
}

// gpt-oss's router: the top-k logits, then the softmax of those k, against
// the CPU's; ties -> lower id; the logits are left as they were.
TEST_F(CudaOpsTest, TopKSoftmaxRouterMatchesTheCpu) {
  const int rows = 17, ne = 32, k = 4;
  std::vector<float> logits = RandomVector(rows * ne, 22, 3.0f);
  logits[5] = logits[2] = 40.0f;  // row 0: a tie at the top -> 2 first
  float* dl = Upload(logits);
  int32_t* ids = Zeros<int32_t>(rows * k);
  float* wts = Zeros<float>(rows * k);
  ASSERT_TRUE(ToStatus(raw::SelectExpertsTopKSoftmax(dl, rows, ne, k, ids, wts, s())).ok());
  const std::vector<int32_t> got_ids = Download(ids, rows * k);
  const std::vector<float> got_w = Download(wts, rows * k);
  EXPECT_EQ(Download(dl, rows * ne), logits);
  for (int r = 0; r < rows; ++r) {
    std::vector<int32_t> want_ids(k);
    std::vector<float> want_w(k);
    model::internal::SelectExpertsSoftmaxOfTopK(logits.data() + r * ne, ne, k, want_ids.data(),
                                                want_w.data());
    for (int i = 0; i < k; ++i) {
      ASSERT_EQ(got_ids[r * k + i], want_ids[i]) << "row " << r << " rank " << i;
      ASSERT_NEAR(got_w[r * k + i], want_w[i], 1e-6) << "row " << r << " rank " << i;
    }
  }
  EXPECT_EQ(got_ids[0], 2);
  EXPECT_EQ(got_ids[1], 5);
  EXPECT_FALSE(
      ToStatus(raw::SelectExpertsTopKSoftmax(dl, 1, 4, 5, nullptr, nullptr, s())).ok());
}

// Sliding windows and sinks (gpt-oss): token t attends the last W positions
// and a per-head sink logit joins the softmax's sum. Against double-precision
// attention over the cached K/V; the F16 cache also against the CPU
// reference's AttendHead (same sink step) where the window lies within one
// chunk. The windows cross chunk boundaries (300 positions, chunks of 256):
// chunks wholly before a token's window are skipped by both kernels.
TEST_F(CudaOpsTest, SlidingWindowAndSinksMatchTheCpu) {
  const int n_head = 8, n_head_kv = 2, hd = 64, page = 16;
  const int64_t kd = n_head_kv * hd, total = 300;
  const int n_pages = static_cast<int>((total + page - 1) / page);
  std::vector<float> sinks = RandomVector(n_head, 41, 2.0f);
  sinks[3] = 30.0f;  // a sink that dominates its head: the z > max branch
  for (GgmlType kt : {GgmlType::kF16, GgmlType::kQ8_0}) {
    for (int64_t window : {int64_t{40}, int64_t{1}, int64_t{260}}) {
      SCOPED_TRACE(std::string(GgmlTypeName(kt)) + " window " + std::to_string(window));
      const uint64_t rb = *RowBytes(kt, kd);
      std::vector<int32_t> table(n_pages);
      std::iota(table.begin(), table.end(), 0);
      std::shuffle(table.begin(), table.end(), std::mt19937(5));
      raw::PagedKv kv;
      kv.type = kt;
      kv.k = Zeros<uint8_t>(rb * page * n_pages);
      kv.v = Zeros<uint8_t>(rb * page * n_pages);
      kv.k_row_bytes = kv.v_row_bytes = rb;
      kv.page_size = page;
      kv.block_table = Upload(table);
      std::vector<float> k = RandomVector(total * kd, 51), v = RandomVector(total * kd, 52);
      std::vector<float> q = RandomVector(total * n_head * hd, 53, 2.0f);
      float* dk = Upload(k);
      float* dv = Upload(v);
      float* dq = Upload(q);
      float* dsinks = Upload(sinks);
      float* out = Zeros<float>(total * n_head * hd);
      const int64_t scratch_elems = raw::AttentionScratchElems(n_head, hd, total);
      float* scratch = Zeros<float>(scratch_elems);
      // A prompt of 290 tokens, then decode tokens one at a time.
      std::vector<std::pair<int64_t, int64_t>> calls = {{0, 290}};
      for (int64_t p = 290; p < total; ++p) calls.push_back({p, 1});
      for (auto [pos0, n] : calls) {
        ASSERT_TRUE(
            ToStatus(raw::KvWrite(kv, dk + pos0 * kd, dv + pos0 * kd, n, pos0, kd, kd, s())).ok());
        raw::AttentionParams p =
            AttentionOf(kv, dq, out, pos0, n, n_head, n_head_kv, hd, scratch, scratch_elems);
        p.window = window;
        p.sinks = dsinks;
        ASSERT_TRUE(ToStatus(raw::Attention(p, s())).ok());
      }
      const std::vector<float> got = Download(out, total * n_head * hd);
      const std::vector<float> qr = RoundQuery(kt, q);
      std::vector<float> kq(total * kd), vq(total * kd);
      std::vector<uint8_t> tmp(rb);
      for (int64_t t = 0; t < total; ++t) {
        ASSERT_TRUE(quant::QuantizeRow(kt, k.data() + t * kd, tmp.data(), kd).ok());
        ASSERT_TRUE(quant::DequantizeRow(kt, tmp.data(), kq.data() + t * kd, kd).ok());
        ASSERT_TRUE(quant::QuantizeRow(kt, v.data() + t * kd, tmp.data(), kd).ok());
        ASSERT_TRUE(quant::DequantizeRow(kt, tmp.data(), vq.data() + t * kd, kd).ok());
      }
      std::vector<uint16_t> k16(total * kd), v16(total * kd), q16(hd), acc16(hd);
      model::internal::ToF16(total * kd, k.data(), k16.data());
      model::internal::ToF16(total * kd, v.data(), v16.data());
      std::vector<float> cpu(hd);
      for (int64_t t = 0; t < total; ++t) {
        const int64_t first = std::max<int64_t>(0, t - window + 1);
        for (int h = 0; h < n_head; ++h) {
          const int kvh = h / (n_head / n_head_kv);
          std::vector<double> sc(t + 1 - first);
          double mx = sinks[h];
          for (int64_t p = first; p <= t; ++p) {
            double dot = 0;
            for (int i = 0; i < hd; ++i) {
              dot += double(qr[(t * n_head + h) * hd + i]) * kq[p * kd + kvh * hd + i];
            }
            sc[p - first] = dot / std::sqrt(double(hd));
            mx = std::max(mx, sc[p - first]);
          }
          double sum = std::exp(double(sinks[h]) - mx);
          for (double& x : sc) sum += (x = std::exp(x - mx));
          for (int i = 0; i < hd; ++i) {
            double o = 0;
            for (int64_t p = first; p <= t; ++p) o += sc[p - first] * vq[p * kd + kvh * hd + i];
            // F16: the f16 accumulator's rounding (the scores here are
            // larger than in the test above: q of scale 2).
            ASSERT_NEAR(got[(t * n_head + h) * hd + i], o / sum,
                        kt == GgmlType::kF16 ? 1.5e-2 : 2e-5)
                << "token " << t << " head " << h << " dim " << i;
          }
          if (kt == GgmlType::kF16 && first / raw::kAttentionChunk == t / raw::kAttentionChunk) {
            model::internal::ToF16(hd, q.data() + (t * n_head + h) * hd, q16.data());
            model::internal::HeadAttention a;
            a.q16 = q16.data();
            a.k = k16.data() + first * kd + kvh * hd;
            a.v = v16.data() + first * kd + kvh * hd;
            a.k_stride = a.v_stride = kd;
            a.n_kv = t + 1 - first;
            a.dk = a.dv = hd;
            a.scale = 1.0f / std::sqrt(float(hd));
            a.sink = sinks[h];
            model::internal::AttendHead(a, acc16.data(), cpu.data());
            const std::string what = "token " + std::to_string(t) + " head " + std::to_string(h);
            ExpectNearF16Row(got.data() + (t * n_head + h) * hd, cpu, what.c_str());
          }
        }
      }
    }
  }
}

// ------------------------------------------------------------ gated DeltaNet

float Near(float want, float rel = 1e-5f) { return rel * std::fabs(want) + 1e-6f; }

// The conv + SiLU over a conv state, the L2 norm, the gates, the delta rule
// and the gated RMSNorm against the CPU reference (delta_net.h), a step
// split in two calls that continue in place as the forward does. The
// emulation gives the CPU's delta rule to the bit (same lane order, host
// expf); a device's expf may differ in the last bits.
TEST_F(CudaOpsTest, DeltaNetOpsMatchTheCpu) {
  const int n_k = 2, n_v = 4, dim = 32, kernel = 4, taps = kernel - 1;
  const int64_t channels = 2 * n_k * dim + n_v * dim, n = 5, split = 3;
  const float eps = 1e-6f;
  // Conv + SiLU.
  std::vector<float> x = RandomVector(n * channels, 61), w = RandomVector(channels * kernel, 62, 0.5f);
  std::vector<float> st = RandomVector(channels * taps, 63);
  std::vector<float> y(n * channels), st_out(channels * taps);
  model::internal::ConvSilu(x.data(), channels, n, channels, w.data(), kernel, st.data(),
                            st_out.data(), y.data(), channels);
  float* dx = Upload(x);
  float* dst_in = Upload(st);
  float* dst_out = Zeros<float>(channels * taps);
  raw::ConvParams cp;
  cp.stride = channels;
  cp.channels = channels;
  cp.w = Upload(w);
  cp.kernel = kernel;
  cp.x = cp.y = dx;
  cp.n_tok = split;
  cp.state_in = dst_in;
  cp.state_out = dst_out;
  ASSERT_TRUE(ToStatus(raw::ConvSilu(cp, s())).ok());
  cp.x = cp.y = dx + split * channels;
  cp.n_tok = n - split;
  cp.state_in = dst_out;  // in place
  ASSERT_TRUE(ToStatus(raw::ConvSilu(cp, s())).ok());
  std::vector<float> got = Download(dx, n * channels);
  for (int64_t i = 0; i < n * channels; ++i) ASSERT_NEAR(got[i], y[i], Near(y[i])) << i;
  EXPECT_EQ(Download(dst_out, channels * taps), st_out);  // the last inputs, as they were
  // A fresh state (null) reads zeros.
  std::vector<float> zeros(channels * taps, 0.0f), y0(channels), st0(channels * taps);
  model::internal::ConvSilu(x.data(), channels, 1, channels, w.data(), kernel, zeros.data(),
                            st0.data(), y0.data(), channels);
  float* dx0 = Upload(std::vector<float>(x.begin(), x.begin() + channels));
  cp.x = cp.y = dx0;
  cp.n_tok = 1;
  cp.state_in = nullptr;
  cp.state_out = dst_out;
  ASSERT_TRUE(ToStatus(raw::ConvSilu(cp, s())).ok());
  got = Download(dx0, channels);
  for (int64_t i = 0; i < channels; ++i) ASSERT_NEAR(got[i], y0[i], Near(y0[i])) << i;
  EXPECT_EQ(Download(dst_out, channels * taps), st0);

  // L2 norm of the q and k heads (the CPU's conv output as the input).
  std::vector<float> qkv = y;
  for (int64_t t = 0; t < n; ++t) {
    model::internal::L2NormRows(qkv.data() + t * channels, 2 * n_k, dim, dim, eps);
  }
  float* dqkv = Upload(y);
  ASSERT_TRUE(ToStatus(raw::L2NormHeads(dqkv, n, 2 * n_k, dim, channels, eps, s())).ok());
  got = Download(dqkv, n * channels);
  for (int64_t i = 0; i < n * channels; ++i) ASSERT_NEAR(got[i], qkv[i], Near(qkv[i])) << i;

  // Gates.
  std::vector<float> beta = RandomVector(n * n_v, 64), g = RandomVector(n * n_v, 65, 3.0f);
  g[0] = 25.0f;  // softplus' linear branch
  const std::vector<float> dt = RandomVector(n_v, 66), a = {-0.5f, -1.0f, -0.05f, -2.0f};
  float* dbeta = Upload(beta);
  float* dg = Upload(g);
  ASSERT_TRUE(ToStatus(raw::DeltaNetGates(dbeta, dg, Upload(dt), Upload(a), n, n_v, s())).ok());
  for (int64_t i = 0; i < n * n_v; ++i) {
    beta[i] = model::internal::Sigmoid(beta[i]);
    g[i] = model::internal::Softplus(g[i] + dt[i % n_v]) * a[i % n_v];
  }
  const std::vector<float> gbeta = Download(dbeta, n * n_v), gg = Download(dg, n * n_v);
  for (int64_t i = 0; i < n * n_v; ++i) {
    ASSERT_NEAR(gbeta[i], beta[i], Near(beta[i])) << i;
    ASSERT_NEAR(gg[i], g[i], Near(g[i])) << i;
  }

  // The delta rule on the CPU's normalised qkv, gates and a random state;
  // value head h reading key head h % n_k (qwen35moe) or h / (n_v / n_k)
  // (qwen3next, grouped_heads).
  const std::vector<float> s0 = RandomVector(n_v * dim * dim, 67, 0.1f);
  std::vector<float> out(n * n_v * dim), s1(n_v * dim * dim);
  raw::DeltaRuleParams dp;
  for (const bool grouped : {false, true}) {
    model::HyperParams heads;
    heads.ssm_n_k_heads = n_k;
    heads.ssm_n_v_heads = n_v;
    heads.ssm_grouped_heads = grouped;
    for (int h = 0; h < n_v; ++h) {
      const int64_t kh = heads.ssm_key_head(h);
      model::internal::DeltaRuleHead dh;
      dh.q = qkv.data() + kh * dim;
      dh.k = qkv.data() + (n_k + kh) * dim;
      dh.v = qkv.data() + (2 * n_k + h) * dim;
      dh.q_stride = dh.k_stride = dh.v_stride = channels;
      dh.g = g.data() + h;
      dh.beta = beta.data() + h;
      dh.g_stride = n_v;
      dh.out = out.data() + h * dim;
      dh.out_stride = n_v * dim;
      model::internal::DeltaRule(dh, n, dim, s0.data() + h * dim * dim,
                                 s1.data() + h * dim * dim);
    }
    float* dq = Upload(qkv);
    float* dgate = Upload(g);
    float* dbeta2 = Upload(beta);
    float* dout = Zeros<float>(n * n_v * dim);
    float* ds_in = Upload(s0);
    float* ds_out = Zeros<float>(n_v * dim * dim);
    dp.stride = channels;
    dp.n_k_heads = n_k;
    dp.n_v_heads = n_v;
    dp.dim = dim;
    dp.grouped_heads = grouped;
    for (int part = 0; part < 2; ++part) {
      const int64_t t0 = part == 0 ? 0 : split;
      dp.qkv = dq + t0 * channels;
      dp.g = dgate + t0 * n_v;
      dp.beta = dbeta2 + t0 * n_v;
      dp.out = dout + t0 * n_v * dim;
      dp.n_tok = part == 0 ? split : n - split;
      dp.state_in = part == 0 ? ds_in : ds_out;
      dp.state_out = ds_out;
      ASSERT_TRUE(ToStatus(raw::DeltaRule(dp, s())).ok());
    }
    const std::vector<float> gout = Download(dout, out.size()), gs = Download(ds_out, s1.size());
#ifdef MOESPLIT_CUDA_EMULATED
    EXPECT_EQ(gout, out) << grouped;
    EXPECT_EQ(gs, s1) << grouped;
#endif
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_NEAR(gout[i], out[i], Near(out[i], 1e-4f)) << i << " grouped " << grouped;
    }
    for (size_t i = 0; i < s1.size(); ++i) {
      ASSERT_NEAR(gs[i], s1[i], Near(s1[i], 1e-4f)) << i << " grouped " << grouped;
    }
  }

  // Gated RMSNorm per value head: RmsNorm(o) * ssm_norm * SiLU(z).
  const std::vector<float> z = RandomVector(n * n_v * dim, 68), nw = RandomVector(dim, 69);
  std::vector<float> want(out.size()), sz(z.size());
  model::internal::RmsNormRows(out.data(), dim, nw.data(), n * n_v, dim, eps, want.data(), dim);
  model::internal::SiluRow(z.data(), static_cast<int64_t>(z.size()), sz.data());
  for (size_t i = 0; i < want.size(); ++i) want[i] *= sz[i];
  float* dn = Upload(out);
  ASSERT_TRUE(ToStatus(raw::GatedRmsNorm(dn, Upload(z), Upload(nw), n * n_v, dim, eps, dn, s())).ok());
  got = Download(dn, out.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], Near(want[i])) << i;

  // Bad shapes are refused before any work.
  dp.dim = 24;
  EXPECT_FALSE(raw::DeltaRule(dp, s()).ok());
  cp.kernel = raw::kMaxConvKernel + 1;
  EXPECT_FALSE(raw::ConvSilu(cp, s()).ok());
}

// Gated attention: the doubled q projection split into queries and gates,
// the gate applied to the heads' output; multi-section RoPE through the
// angle table (pairs on the extra position are left as they are).
TEST_F(CudaOpsTest, GatedAttentionOpsAndMultiSectionRope) {
  const int64_t n_tok = 3, n_head = 4, hd = 64, rows = n_tok * n_head;
  const std::vector<float> qg = RandomVector(rows * 2 * hd, 71), at = RandomVector(rows * hd, 72);
  float* dqg = Upload(qg);
  float* dq = Zeros<float>(rows * hd);
  float* dat = Upload(at);
  ASSERT_TRUE(ToStatus(raw::SplitQueryGate(dqg, n_tok, n_head, hd, dq, s())).ok());
  ASSERT_TRUE(ToStatus(raw::ApplyHeadGate(dat, dqg, rows, hd, s())).ok());
  const std::vector<float> q = Download(dq, rows * hd), gated = Download(dat, rows * hd);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < hd; ++i) {
      ASSERT_EQ(q[r * hd + i], qg[r * 2 * hd + i]);
      const float want = at[r * hd + i] * model::internal::Sigmoid(qg[r * 2 * hd + hd + i]);
      ASSERT_NEAR(gated[r * hd + i], want, Near(want));
    }
  }
  // IMROPE, sections {2, 2, 2, 2} over 8 pairs (n_rot 16 of 64): pairs 6
  // and 7 take the extra position (0 for text) and stay unrotated.
  model::RopeParams rp;
  rp.n_rot = 16;
  rp.freq_base = 1e6f;
  rp.multi_section = true;
  rp.sections = {2, 2, 2, 2};
  std::vector<float> cs, want = q;
  for (int64_t t = 0; t < n_tok; ++t) {
    model::internal::RopeAngles a;
    model::internal::ComputeRopeAngles(rp, 10 + t, &a);
    for (int i = 0; i < 8; ++i) {
      cs.push_back(a.cos[i]);
      cs.push_back(a.sin[i]);
    }
    for (int64_t h = 0; h < n_head; ++h) {
      model::internal::ApplyRopeNeox(a, 16, want.data() + (t * n_head + h) * hd);
    }
  }
  std::vector<float> k = RandomVector(n_tok * hd, 73);
  float* dk = Upload(k);
  ASSERT_TRUE(ToStatus(raw::QkNormRope(dq, nullptr, n_head, dk, nullptr, 1, n_tok, hd, 1e-6f, 16,
                                       Upload(cs), s())).ok());
  const std::vector<float> roped = Download(dq, rows * hd);
  for (int64_t i = 0; i < rows * hd; ++i) ASSERT_NEAR(roped[i], want[i], 1e-5) << i;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i : {6, 7, 14, 15}) {  // pairs 6, 7: elements (6, 14), (7, 15)
      EXPECT_EQ(roped[r * hd + i], q[r * hd + i]) << "row " << r << " element " << i;
    }
    EXPECT_NE(roped[r * hd + 0], q[r * hd + 0]);
  }
}

// Per-head products (MLA's attn_k_b / attn_v_b): each (group, token) equals
// MatVec of that group's matrix on that token's row, bit for bit, with
// strided inputs and outputs.
TEST_F(CudaOpsTest, GroupedMatVecEqualsMatVecPerGroup) {
  for (GgmlType t : {GgmlType::kF16, GgmlType::kQ8_0, GgmlType::kQ4_K}) {
    const int64_t groups = 5, rows = 48, cols = 256;
    HostMatrix m = RandomMatrix(t, groups * rows, cols, 41);
    const uint64_t group_bytes = m.row_bytes * rows;
    const uint8_t* dw = Upload(m.bytes);
    for (int64_t n : {1, 3, 9}) {
      // x: token t's group g row at t * (groups * cols + 7) + g * cols; y: at
      // t * (groups * (rows + 3)) + g * (rows + 3).
      const int64_t x_tok = groups * cols + 7, y_group = rows + 3, y_tok = groups * y_group;
      std::vector<float> x = RandomVector(n * x_tok, 42);
      const float* dx = Upload(x);
      float* dy = Zeros<float>(n * y_tok);
      raw::GroupedMatVecParams p;
      p.w = {t, dw, rows, cols, m.row_bytes};
      p.group_bytes = group_bytes;
      p.n_groups = groups;
      p.x = dx;
      p.x_tok = x_tok;
      p.x_group = cols;
      p.y = dy;
      p.y_tok = y_tok;
      p.y_group = y_group;
      p.n_tok = n;
      ASSERT_TRUE(ToStatus(raw::GroupedMatVec(p, s())).ok()) << GgmlTypeName(t);
      const std::vector<float> got = Download(dy, n * y_tok);
      for (int64_t g = 0; g < groups; ++g) {
        std::vector<float> xg(n * cols);
        for (int64_t tok = 0; tok < n; ++tok) {
          std::copy_n(x.data() + tok * x_tok + g * cols, cols, xg.data() + tok * cols);
        }
        float* yg = Zeros<float>(n * rows);
        const raw::DeviceMatrix wg{t, dw + g * group_bytes, rows, cols, m.row_bytes};
        ASSERT_TRUE(ToStatus(raw::MatVec(wg, Upload(xg), n, yg, s())).ok());
        const std::vector<float> want = Download(yg, n * rows);
        for (int64_t tok = 0; tok < n; ++tok) {
          ASSERT_EQ(0, std::memcmp(got.data() + tok * y_tok + g * y_group, want.data() + tok * rows,
                                   rows * sizeof(float)))
              << GgmlTypeName(t) << " n_tok " << n << " group " << g << " token " << tok;
        }
      }
    }
  }
  raw::GroupedMatVecParams bad;
  bad.n_tok = 1;
  EXPECT_FALSE(ToStatus(raw::GroupedMatVec(bad, s())).ok());  // no groups
}

// MLA's element-wise pieces: the latent's norm over part of each row, NORM
// RoPE at a stride, strided row copies.
TEST_F(CudaOpsTest, StridedNormNormRopeAndRowCopiesMatchTheCpu) {
  const int64_t rows = 5, stride = 80, d = 64, rot = 16;
  std::vector<float> x = RandomVector(rows * stride, 51, 2.0f), w = RandomVector(d, 52);
  float* dx = Upload(x);
  ASSERT_TRUE(ToStatus(raw::RmsNormStrided(dx, stride, Upload(w), rows, d, 1e-6f, dx, stride, s())).ok());
  std::vector<float> got = Download(dx, rows * stride);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> want(d);
    model::internal::RmsNorm(x.data() + r * stride, w.data(), d, 1e-6f, want.data());
    for (int64_t i = 0; i < d; ++i) {
      ASSERT_NEAR(got[r * stride + i], want[i], 1e-5 * std::fabs(want[i]) + 1e-6) << r << " " << i;
    }
    // The rest of the row is left as it was.
    EXPECT_EQ(0, std::memcmp(got.data() + r * stride + d, x.data() + r * stride + d,
                             (stride - d) * sizeof(float)));
  }
  // NORM RoPE of 3 heads of 24 values each (rope part at offset 8 of each
  // head), 5 tokens at positions 3.. of a YaRN-scaled table.
  model::RopeParams rp;
  rp.n_rot = rot;
  rp.freq_base = 1e4f;
  rp.scaling = model::RopeScaling::kYarn;
  rp.freq_scale = 0.25f;
  rp.ext_factor = 1.0f;
  rp.n_ctx_orig = 64;
  rp.norm_style = true;
  const int64_t heads = 3, hd = 24, tok_stride = heads * hd + 5;
  std::vector<float> q = RandomVector(rows * tok_stride, 53), cs, want = q;
  for (int64_t t = 0; t < rows; ++t) {
    model::internal::RopeAngles a;
    model::internal::ComputeRopeAngles(rp, 3 + t, &a);
    for (int64_t i = 0; i < rot / 2; ++i) {
      cs.push_back(a.cos[i]);
      cs.push_back(a.sin[i]);
    }
    for (int64_t h = 0; h < heads; ++h) {
      model::internal::ApplyRopeNorm(a, rot, want.data() + t * tok_stride + h * hd + 8);
    }
  }
  float* dq = Upload(q);
  ASSERT_TRUE(ToStatus(raw::RopeNorm(dq + 8, rows, tok_stride, heads, hd, rot, Upload(cs), s())).ok());
  got = Download(dq, q.size());
  // Products and sums as the CPU's, no contraction (--fmad=false): exact.
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
  // Row copies: columns 8..23 of each head row into a packed buffer.
  float* packed = Zeros<float>(rows * heads * 16);
  ASSERT_TRUE(ToStatus(raw::CopyRows(dq + 8, hd, packed, 16, heads, 16, s())).ok());
  const std::vector<float> pk = Download(packed, heads * 16);
  for (int64_t h = 0; h < heads; ++h) {
    EXPECT_EQ(0, std::memcmp(pk.data() + h * 16, got.data() + h * hd + 8, 16 * sizeof(float)));
  }
}

// deepseek2's router: sigmoid scores, selection bias, 4 groups of which 2
// are kept, normalised and scaled weights, as the CPU's
// SelectExpertsGeneral; also without groups and with softmax scores.
TEST_F(CudaOpsTest, GroupedRouterMatchesTheCpu) {
  const int rows = 37, ne = 64, k = 6;
  struct Case {
    bool sigmoid;
    int groups, used;
    bool normalize;
    float scale;
    bool bias;
  };
  for (const Case& c : {Case{true, 4, 2, true, 2.5f, true}, Case{true, 1, 1, true, 1.0f, true},
                        Case{false, 8, 3, false, 16.0f, false}}) {
    std::vector<float> logits = RandomVector(rows * ne, 61, 2.0f);
    const std::vector<float> bias = RandomVector(ne, 62, 0.5f);
    // Exact ties among the selection values of row 0: experts 5 and 7.
    logits[5] = logits[7] = 9.0f;
    std::vector<float> bias_row = bias;
    if (c.bias) bias_row[7] = bias_row[5];
    raw::GroupedRouter r;
    r.sigmoid = c.sigmoid;
    r.n_expert = ne;
    r.k = k;
    r.normalize = c.normalize;
    r.scale = c.scale;
    r.bias = c.bias ? Upload(bias_row) : nullptr;
    r.n_groups = c.groups;
    r.n_group_used = c.used;
    float* dl = Upload(logits);
    int32_t* ids = Zeros<int32_t>(rows * k);
    float* wts = Zeros<float>(rows * k);
    ASSERT_TRUE(ToStatus(raw::SelectExpertsGrouped(r, dl, rows, ids, wts, s())).ok());
    const std::vector<int32_t> got_ids = Download(ids, rows * k);
    const std::vector<float> got_w = Download(wts, rows * k);
    model::internal::RouterChoice rc;
    rc.scoring = c.sigmoid ? model::RouterSpec::Scoring::kSigmoid : model::RouterSpec::Scoring::kSoftmax;
    rc.n_expert = ne;
    rc.k = k;
    rc.normalize = c.normalize;
    rc.scale = c.scale;
    rc.bias = c.bias ? bias_row.data() : nullptr;
    rc.n_groups = c.groups;
    rc.n_group_used = c.used;
    for (int row = 0; row < rows; ++row) {
      std::vector<float> l(logits.begin() + row * ne, logits.begin() + (row + 1) * ne);
      std::vector<int32_t> want_ids(k);
      std::vector<float> want_w(k);
      model::internal::SelectExpertsGeneral(rc, l.data(), want_ids.data(), want_w.data());
      for (int i = 0; i < k; ++i) {
        ASSERT_EQ(got_ids[row * k + i], want_ids[i]) << "row " << row << " rank " << i;
        ASSERT_NEAR(got_w[row * k + i], want_w[i], 1e-5 * std::fabs(want_w[i]) + 1e-7)
            << "row " << row << " rank " << i;
      }
    }
  }
  raw::GroupedRouter bad;
  bad.n_expert = 10;
  bad.k = 2;
  bad.n_groups = 3;  // does not divide 10
  EXPECT_FALSE(ToStatus(raw::SelectExpertsGrouped(bad, nullptr, 1, nullptr, nullptr, s())).ok());
}

// MLA's attention: one KV head whose rows hold K (latent + rope key, any
// size up to 576) and whose V is the first head_dim_v values of K, over an
// F16 cache with a shuffled block table, in two calls (a prompt then a
// decode token) past one chunk; against the chunked f16 reference and, for
// tokens within the first chunk, the CPU reference's AttendGroup (the same
// bits but for the device's expf).
TEST_F(CudaOpsTest, LatentAttentionMatchesTheCpu) {
  struct Shape {
    int kd, vd, n_head;
  };
  for (const Shape& sh : {Shape{80, 64, 4}, Shape{576, 512, 8}}) {
    const int page = 64, n_pages = 6;
    const int64_t total = 300;  // two chunks
    const uint64_t rb = *RowBytes(GgmlType::kF16, sh.kd);
    std::vector<int32_t> table(n_pages);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937(7));
    raw::PagedKv kv;
    kv.type = GgmlType::kF16;
    kv.k = kv.v = Zeros<uint8_t>(rb * page * n_pages);
    kv.k_row_bytes = kv.v_row_bytes = rb;
    kv.page_size = page;
    kv.block_table = Upload(table);
    std::vector<float> k = RandomVector(total * sh.kd, 71);
    std::vector<float> q = RandomVector(total * sh.n_head * sh.kd, 72, 0.3f);
    float* dk = Upload(k);
    float* dq = Upload(q);
    float* out = Zeros<float>(total * sh.n_head * sh.vd);
    const int64_t scratch_elems = raw::AttentionScratchElems(sh.n_head, sh.vd, total);
    float* scratch = Zeros<float>(scratch_elems);
    const float scale = 0.11f;
    for (auto [pos0, n] : {std::pair<int64_t, int64_t>{0, total - 1}, {total - 1, 1}}) {
      ASSERT_TRUE(ToStatus(raw::KvWrite(kv, dk + pos0 * sh.kd, nullptr, n, pos0, sh.kd, 0, s())).ok());
      raw::AttentionParams p;
      p.q = dq + pos0 * sh.n_head * sh.kd;
      p.out = out + pos0 * sh.n_head * sh.vd;
      p.kv = kv;
      p.n_tok = n;
      p.pos0 = pos0;
      p.n_head = sh.n_head;
      p.n_head_kv = 1;
      p.head_dim = sh.kd;
      p.head_dim_v = sh.vd;
      p.scale = scale;
      p.split_scratch = scratch;
      p.split_scratch_elems = scratch_elems;
      ASSERT_TRUE(ToStatus(raw::Attention(p, s())).ok());
    }
    const std::vector<float> got = Download(out, total * sh.n_head * sh.vd);
    std::vector<uint16_t> k16(total * sh.kd);
    model::internal::ToF16(total * sh.kd, k.data(), k16.data());
    for (int64_t t : {int64_t{0}, int64_t{1}, int64_t{100}, int64_t{255}, int64_t{256}, total - 1}) {
      for (int h = 0; h < sh.n_head; ++h) {
        const float* qh = q.data() + (t * sh.n_head + h) * sh.kd;
        const float* gh = got.data() + (t * sh.n_head + h) * sh.vd;
        const std::string what = "kd " + std::to_string(sh.kd) + " token " + std::to_string(t) +
                                 " head " + std::to_string(h);
        ExpectNearF16Row(gh, F16Attention(qh, k16.data(), k16.data(), sh.kd, sh.kd, t + 1, sh.kd,
                                          sh.vd, scale),
                         what.c_str());
        if (t >= raw::kAttentionChunk) continue;
        std::vector<float> want(sh.vd);
        const float* qp[1] = {qh};
        const int64_t nkv[1] = {t + 1};
        float* op[1] = {want.data()};
        model::internal::GroupAttention g;
        g.k = g.v = k16.data();
        g.k_stride = g.v_stride = sh.kd;
        g.dk = sh.kd;
        g.dv = sh.vd;
        g.scale = scale;
        g.n_q = 1;
        g.q = qp;
        g.n_kv = nkv;
        g.out = op;
        model::internal::AttendGroup(g);
        ExpectNearF16Row(gh, want, (what + " (CPU reference)").c_str());
      }
    }
  }
  // Split K/V needs an F16 cache and a power-of-two V.
  raw::AttentionParams p;
  p.n_tok = 1;
  p.n_head = p.n_head_kv = 1;
  p.head_dim = 80;
  p.head_dim_v = 48;
  p.split_scratch = Zeros<float>(64);
  p.split_scratch_elems = 64;
  p.kv.type = GgmlType::kF16;
  EXPECT_FALSE(ToStatus(raw::Attention(p, s())).ok());
  p.head_dim_v = 64;
  p.kv.type = GgmlType::kQ8_0;
  EXPECT_FALSE(ToStatus(raw::Attention(p, s())).ok());
}

}  // namespace
}  // namespace moesplit::cuda
