// Quantisers, dot kernels and the kernel registry.

#include "common/quant/quant.h"

#include <cmath>
#include <string>
#include <vector>

#include "common/gguf/gguf.h"
#include "common/quant/internal/kernels.h"
#include "common/quant/internal/test_util.h"
#include "common/quant/random_blocks.h"
#include "gtest/gtest.h"

namespace moesplit::quant {
namespace {

using testing::Bytes;
using testing::Dequant;
using testing::Name;
using testing::RandomActivations;

// ---- registry ---------------------------------------------------------------

TEST(QuantRegistryTest, TraitsForEverySupportedType) {
  struct Row {
    GgmlType type;
    GgmlType vec_dot_type;
  };
  const Row rows[] = {
      {GgmlType::kF32, GgmlType::kF32},     {GgmlType::kF16, GgmlType::kF16},
      {GgmlType::kBF16, GgmlType::kBF16},   {GgmlType::kQ4_0, GgmlType::kQ8_0},
      {GgmlType::kQ4_1, GgmlType::kQ8_1},   {GgmlType::kQ5_0, GgmlType::kQ8_0},
      {GgmlType::kQ5_1, GgmlType::kQ8_1},   {GgmlType::kQ8_0, GgmlType::kQ8_0},
      {GgmlType::kQ2_K, GgmlType::kQ8_K},   {GgmlType::kQ3_K, GgmlType::kQ8_K},
      {GgmlType::kQ4_K, GgmlType::kQ8_K},   {GgmlType::kQ5_K, GgmlType::kQ8_K},
      {GgmlType::kQ6_K, GgmlType::kQ8_K},   {GgmlType::kIQ4_NL, GgmlType::kQ8_0},
      {GgmlType::kIQ4_XS, GgmlType::kQ8_K}, {GgmlType::kMXFP4, GgmlType::kQ8_0},
  };
  for (const Row& row : rows) {
    const TypeTraits* t = GetTypeTraits(row.type);
    ASSERT_NE(t, nullptr) << Name(row.type);
    EXPECT_EQ(t->type, row.type) << Name(row.type);
    EXPECT_NE(t->dequantize, nullptr) << Name(row.type);
    EXPECT_NE(t->quantize, nullptr) << Name(row.type);
    EXPECT_EQ(t->vec_dot_type, row.vec_dot_type) << Name(row.type);
    EXPECT_NE(t->vec_dot, nullptr) << Name(row.type);
    EXPECT_TRUE(CheckSupported(row.type).ok()) << Name(row.type);
    // Activation formats have a quantiser.
    const TypeTraits* act = GetTypeTraits(row.vec_dot_type);
    ASSERT_NE(act, nullptr) << Name(row.type);
    EXPECT_NE(act->quantize, nullptr) << Name(row.type);
  }
}

TEST(QuantRegistryTest, ActivationFormatsHaveNoDotKernel) {
  for (GgmlType type : {GgmlType::kQ8_1, GgmlType::kQ8_K}) {
    const TypeTraits* t = GetTypeTraits(type);
    ASSERT_NE(t, nullptr) << Name(type);
    EXPECT_NE(t->dequantize, nullptr) << Name(type);
    EXPECT_NE(t->quantize, nullptr) << Name(type);
    EXPECT_EQ(t->vec_dot, nullptr) << Name(type);
  }
}

TEST(QuantRegistryTest, UnsupportedTypes) {
  for (GgmlType type : {GgmlType::kI32, GgmlType::kF64, static_cast<GgmlType>(77)}) {
    EXPECT_EQ(GetTypeTraits(type), nullptr) << static_cast<uint32_t>(type);
    EXPECT_FALSE(CanDequantize(type)) << static_cast<uint32_t>(type);
    const absl::Status s = CheckSupported(type);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << static_cast<uint32_t>(type);
  }
  EXPECT_NE(CheckSupported(GgmlType::kI32).message().find("unsupported tensor type I32"), std::string::npos);
}

// The i-quant / ternary formats are supported with Q8_K activations (ggml's
// vec_dot_type for them) but have no quantiser: QuantizeRow refuses them.
TEST(QuantRegistryTest, IQuantTypesComputeButDoNotQuantize) {
  for (GgmlType type : testing::NoQuantizerTypes()) {
    const TypeTraits* t = GetTypeTraits(type);
    ASSERT_NE(t, nullptr) << Name(type);
    EXPECT_TRUE(CheckSupported(type).ok()) << Name(type);
    EXPECT_TRUE(CanDequantize(type)) << Name(type);
    EXPECT_EQ(t->vec_dot_type, GgmlType::kQ8_K) << Name(type);
    EXPECT_NE(t->vec_dot, nullptr) << Name(type);
    EXPECT_NE(t->vec_dot_rows, nullptr) << Name(type);
    EXPECT_EQ(t->quantize, nullptr) << Name(type);
    // Two zeroed blocks decode (to zeros: every scale is +0), a partial block
    // does not, and there is no quantiser.
    std::vector<uint8_t> blocks = testing::Bytes(type, 512);
    std::vector<float> out(512, 1.0f);
    EXPECT_TRUE(DequantizeRow(type, blocks.data(), out.data(), 512).ok()) << Name(type);
    for (float v : out) ASSERT_EQ(v, 0.0f) << Name(type);
    EXPECT_EQ(DequantizeRow(type, blocks.data(), out.data(), 100).code(),
              absl::StatusCode::kInvalidArgument) << Name(type);
    std::vector<float> x(256, 0.5f);
    const absl::Status q = QuantizeRow(type, x.data(), blocks.data(), 256);
    EXPECT_EQ(q.code(), absl::StatusCode::kInvalidArgument) << Name(type);
    EXPECT_NE(q.message().find("no quantiser for type " + Name(type)), std::string::npos) << q;
  }
}

// Restores the active level when a test changes it.
class LevelGuard {
 public:
  LevelGuard() : saved_(ActiveKernelLevel()) {}
  ~LevelGuard() { SetActiveKernelLevel(saved_); }

 private:
  KernelLevel saved_;
};

TEST(QuantRegistryTest, ScalarLevelUsesScalarKernels) {
  LevelGuard guard;
  SetActiveKernelLevel(KernelLevel::kScalar);
  EXPECT_EQ(ActiveKernelLevel(), KernelLevel::kScalar);
  for (GgmlType type : testing::WeightTypes()) {
    EXPECT_EQ(GetTypeTraits(type)->vec_dot, internal::ScalarVecDot(type)) << Name(type);
  }
}

float FakeDot(int64_t, const void*, const void*) { return 42.0f; }

TEST(QuantRegistryTest, RegisterPicksHighestLevelNotAboveActive) {
  LevelGuard guard;
  RegisterVecDot(GgmlType::kQ8_0, KernelLevel::kAmx, FakeDot);
  SetActiveKernelLevel(KernelLevel::kAmx);
  EXPECT_EQ(ActiveKernelLevel(), KernelLevel::kAmx);
  EXPECT_EQ(GetTypeTraits(GgmlType::kQ8_0)->vec_dot, FakeDot);
  EXPECT_NE(GetTypeTraits(GgmlType::kQ4_0)->vec_dot, FakeDot);
  SetActiveKernelLevel(KernelLevel::kAvx512);
  EXPECT_NE(GetTypeTraits(GgmlType::kQ8_0)->vec_dot, FakeDot);
  SetActiveKernelLevel(KernelLevel::kScalar);
  EXPECT_EQ(GetTypeTraits(GgmlType::kQ8_0)->vec_dot, internal::ScalarVecDot(GgmlType::kQ8_0));
  RegisterVecDot(GgmlType::kQ8_0, KernelLevel::kAmx, nullptr);  // unregister
  SetActiveKernelLevel(KernelLevel::kAmx);
  EXPECT_NE(GetTypeTraits(GgmlType::kQ8_0)->vec_dot, FakeDot);
  EXPECT_NE(GetTypeTraits(GgmlType::kQ8_0)->vec_dot, nullptr);
}

// ---- argument checks ---------------------------------------------------------

TEST(QuantArgsTest, BadArgumentsAreInvalidArgument) {
  std::vector<float> f(512);
  std::vector<uint8_t> b(4096);
  struct Case {
    std::string what;
    absl::Status status;
  };
  const Case cases[] = {
      {"dequant partial block", DequantizeRow(GgmlType::kQ4_0, b.data(), f.data(), 33)},
      {"dequant partial superblock", DequantizeRow(GgmlType::kQ4_K, b.data(), f.data(), 128)},
      {"dequant negative n", DequantizeRow(GgmlType::kF32, b.data(), f.data(), -1)},
      {"dequant unsupported", DequantizeRow(GgmlType::kI32, b.data(), f.data(), 256)},
      {"dequant null src", DequantizeRow(GgmlType::kQ8_0, nullptr, f.data(), 32)},
      {"dequant null dst", DequantizeRow(GgmlType::kQ8_0, b.data(), nullptr, 32)},
      {"quant no quantiser", QuantizeRow(GgmlType::kIQ1_M, f.data(), b.data(), 256)},
      {"quant partial block", QuantizeRow(GgmlType::kQ8_0, f.data(), b.data(), 48)},
      {"quant unsupported", QuantizeRow(GgmlType::kTQ2_0, f.data(), b.data(), 256)},
      {"quant null dst", QuantizeRow(GgmlType::kQ6_K, f.data(), nullptr, 256)},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(c.status.code(), absl::StatusCode::kInvalidArgument) << c.what << ": " << c.status;
  }
  EXPECT_TRUE(DequantizeRow(GgmlType::kQ4_K, nullptr, nullptr, 0).ok());
}

// ---- quantisers ----------------------------------------------------------------

// llama-quantize without an importance matrix writes exactly what the
// reference quantisers do (quantize_iq4_nl / quantize_iq4_xs with ntry 7 for
// the IQ4 formats). formats.gguf's f32.weight is the first 64 rows of the
// random f32 token_embd every fixture model was quantised from, so quantising
// it must reproduce those models' token_embd rows byte for byte.
TEST(QuantizerTest, ReproducesLlamaQuantizeBytes) {
  auto formats = GgufFile::Open(testing::FixturePath("models/formats.gguf"));
  ASSERT_TRUE(formats.ok()) << formats.status();
  const GgufTensor* src = (*formats)->FindTensor("f32.weight");
  ASSERT_NE(src, nullptr);
  const float* x = reinterpret_cast<const float*>(src->data);
  const int64_t n = src->n_elements();
  struct Case {
    std::string file, tensor;
    GgmlType type;
  };
  const Case cases[] = {
      {"formats", "q4_0.weight", GgmlType::kQ4_0},
      {"formats", "q4_1.weight", GgmlType::kQ4_1},
      {"formats", "q5_0.weight", GgmlType::kQ5_0},
      {"formats", "q5_1.weight", GgmlType::kQ5_1},
      {"qwen3moe-tiny-f16", "token_embd.weight", GgmlType::kF16},
      {"qwen3moe-tiny-q8_0", "token_embd.weight", GgmlType::kQ8_0},
      {"qwen3moe-tiny-q2_k", "token_embd.weight", GgmlType::kQ2_K},
      {"qwen3moe-tiny-q3_k_m", "token_embd.weight", GgmlType::kQ3_K},
      {"qwen3moe-tiny-q4_k_m", "token_embd.weight", GgmlType::kQ4_K},
      {"qwen3moe-tiny-q6_k", "token_embd.weight", GgmlType::kQ6_K},
      {"qwen3moe-tiny-iq4_nl", "token_embd.weight", GgmlType::kIQ4_NL},
      {"qwen3moe-tiny-iq4_xs", "token_embd.weight", GgmlType::kIQ4_XS},
  };
  for (const Case& c : cases) {
    auto file = GgufFile::Open(testing::FixturePath("models/" + c.file + ".gguf"));
    ASSERT_TRUE(file.ok()) << c.file << ": " << file.status();
    const GgufTensor* t = (*file)->FindTensor(c.tensor);
    ASSERT_NE(t, nullptr) << c.file << "/" << c.tensor;
    ASSERT_EQ(t->type, c.type) << c.file << "/" << c.tensor;
    ASSERT_EQ(t->ne[0], src->ne[0]) << Name(c.type);
    ASSERT_GE(t->n_elements(), n) << Name(c.type);
    std::vector<uint8_t> got = Bytes(c.type, n);
    ASSERT_TRUE(QuantizeRow(c.type, x, got.data(), n).ok()) << Name(c.type);
    int64_t diff = 0, first = -1;
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i] != t->data[i] && diff++ == 0) first = static_cast<int64_t>(i);
    }
    EXPECT_EQ(diff, 0) << Name(c.type) << " vs " << c.file << ": " << diff << " of "
                       << got.size() << " bytes differ, first at " << first;
  }
}

// quantise -> dequantise of Gaussian data with outliers: relative RMS error
// (||x - deq(q(x))|| / ||x||) within ~1.3x what ggml's quantisers reach on
// this data (a wrong scale or rounding rule at least doubles it).
TEST(QuantizerTest, RoundTripErrorBounds) {
  struct Case {
    GgmlType type;
    double max_rel_rms;
  };
  const Case cases[] = {
      {GgmlType::kF32, 0.0},      {GgmlType::kF16, 3e-4},    {GgmlType::kBF16, 2.5e-3},
      {GgmlType::kQ8_0, 0.012},   {GgmlType::kQ8_1, 0.012},  {GgmlType::kQ8_K, 0.025},
      {GgmlType::kQ5_0, 0.08},    {GgmlType::kQ5_1, 0.06},   {GgmlType::kQ4_0, 0.16},
      {GgmlType::kQ4_1, 0.12},    {GgmlType::kIQ4_NL, 0.13}, {GgmlType::kMXFP4, 0.2},
      {GgmlType::kQ6_K, 0.035},   {GgmlType::kQ5_K, 0.06},   {GgmlType::kQ4_K, 0.12},
      {GgmlType::kIQ4_XS, 0.13},  {GgmlType::kQ3_K, 0.25},   {GgmlType::kQ2_K, 0.45},
  };
  for (const Case& c : cases) {
    for (uint32_t seed : {1u, 2u, 3u}) {
      const int64_t n = 4096;
      const std::vector<float> x = RandomActivations(n, seed, 0.05f);
      std::vector<uint8_t> q = Bytes(c.type, n);
      ASSERT_TRUE(QuantizeRow(c.type, x.data(), q.data(), n).ok()) << Name(c.type);
      const std::vector<float> y = Dequant(c.type, q.data(), n);
      double err2 = 0, ref2 = 0;
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_TRUE(std::isfinite(y[i])) << Name(c.type) << " at " << i;
        err2 += (double(y[i]) - x[i]) * (double(y[i]) - x[i]);
        ref2 += double(x[i]) * x[i];
      }
      const double rel = std::sqrt(err2 / ref2);
      EXPECT_LE(rel, c.max_rel_rms) << Name(c.type) << " seed " << seed;
      if (c.type != GgmlType::kF32) {
        EXPECT_GT(rel, 0.0) << Name(c.type) << " is lossless?";
      }
    }
  }
}

TEST(QuantizerTest, ZeroInputGivesZeros) {
  for (GgmlType type : testing::WeightTypes()) {
    if (GetTypeTraits(type)->quantize == nullptr) continue;  // NoQuantizerTypes
    const int64_t n = 512;
    std::vector<float> x(n, 0.0f);
    std::vector<uint8_t> q = Bytes(type, n);
    ASSERT_TRUE(QuantizeRow(type, x.data(), q.data(), n).ok()) << Name(type);
    for (float v : Dequant(type, q.data(), n)) ASSERT_EQ(v, 0.0f) << Name(type);
  }
}

// ---- dot kernels -----------------------------------------------------------

// Weights of every type (random valid blocks) against quantised activations:
//  (a) vec_dot equals the f64 dot of the two dequantised rows up to float
//      rounding (Q4_1/Q5_1 also round the activation block sums to f16);
//  (b) it differs from the f64 dot of dequant(w) with the f32 activations by
//      no more than the activation rounding can explain, sum |w_i (a_i - x_i)|.
void CheckDot(GgmlType type, VecDotFn dot, int64_t n, uint64_t seed, const std::string& label) {
  const TypeTraits* t = GetTypeTraits(type);
  std::vector<uint8_t> w = Bytes(type, n);
  ASSERT_TRUE(FillRandomBlocks(type, seed, 0.03f, w.data(), n).ok()) << label;
  const std::vector<float> x = RandomActivations(n, static_cast<uint32_t>(seed) + 100);
  std::vector<uint8_t> a = Bytes(t->vec_dot_type, n);
  ASSERT_TRUE(QuantizeRow(t->vec_dot_type, x.data(), a.data(), n).ok()) << label;
  const std::vector<float> wd = Dequant(type, w.data(), n);
  const std::vector<float> ad = Dequant(t->vec_dot_type, a.data(), n);
  double exact_q = 0, abs_q = 0, exact_x = 0, act_err = 0;
  for (int64_t i = 0; i < n; ++i) {
    exact_q += double(wd[i]) * ad[i];
    abs_q += std::fabs(double(wd[i]) * ad[i]);
    exact_x += double(wd[i]) * x[i];
    act_err += std::fabs(double(wd[i]) * (double(ad[i]) - x[i]));
  }
  const double got = dot(n, w.data(), a.data());
  const bool sums_in_f16 = type == GgmlType::kQ4_1 || type == GgmlType::kQ5_1;
  const double tol_q = (sums_in_f16 ? 2e-3 : 2e-5) * abs_q + 1e-6;
  EXPECT_NEAR(got, exact_q, tol_q) << label << " n=" << n << " vs dequantised operands";
  const double tol_x = act_err + tol_q;
  EXPECT_NEAR(got, exact_x, tol_x) << label << " n=" << n << " vs f32 activations";
}

TEST(VecDotTest, ScalarKernelsMatchDequantisedDot) {
  for (GgmlType type : testing::WeightTypes()) {
    for (int64_t n : {256, 1024, 4096}) {
      for (uint64_t seed : {7u, 8u}) {
        CheckDot(type, internal::ScalarVecDot(type), n, seed, Name(type) + " scalar");
      }
    }
  }
}

TEST(VecDotTest, ActiveKernelsMatchDequantisedDot) {
  for (GgmlType type : testing::WeightTypes()) {
    for (int64_t n : {256, 2048}) {
      CheckDot(type, GetTypeTraits(type)->vec_dot, n, 11, Name(type) + " active");
    }
  }
}

TEST(VecDotTest, SimdKernelsAreRegisteredWhereTheCpuHasThem) {
#if defined(__x86_64__)
  if (!internal::CpuHasAvx2()) GTEST_SKIP() << "no AVX2/FMA/F16C";
  LevelGuard guard;
  EXPECT_GE(static_cast<int>(ActiveKernelLevel()), static_cast<int>(KernelLevel::kAvx2));
  SetActiveKernelLevel(KernelLevel::kAvx2);
  for (GgmlType type : {GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    EXPECT_NE(GetTypeTraits(type)->vec_dot, internal::ScalarVecDot(type)) << Name(type);
  }
#else
  GTEST_SKIP() << "not x86-64";
#endif
}

// Every registered level agrees with the scalar kernel to float rounding.
TEST(VecDotTest, EveryLevelAgreesWithScalar) {
  LevelGuard guard;
  for (KernelLevel level : {KernelLevel::kAvx2, KernelLevel::kAvx512, KernelLevel::kAmx}) {
    SetActiveKernelLevel(level);
    for (GgmlType type : testing::WeightTypes()) {
      const TypeTraits* t = GetTypeTraits(type);
      for (int64_t n : {256, 512, 4096}) {
        std::vector<uint8_t> w = Bytes(type, n);
        ASSERT_TRUE(FillRandomBlocks(type, n, 0.02f, w.data(), n).ok());
        const std::vector<float> x = RandomActivations(n, 5);
        std::vector<uint8_t> a = Bytes(t->vec_dot_type, n);
        ASSERT_TRUE(QuantizeRow(t->vec_dot_type, x.data(), a.data(), n).ok());
        const float want = internal::ScalarVecDot(type)(n, w.data(), a.data());
        const float got = t->vec_dot(n, w.data(), a.data());
        EXPECT_NEAR(got, want, 1e-5 * std::fabs(want) + 1e-5)
            << Name(type) << " level " << static_cast<int>(level) << " n=" << n;
      }
    }
  }
}

}  // namespace
}  // namespace moesplit::quant
