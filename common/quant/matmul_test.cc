#include "common/quant/matmul.h"

#include <cmath>
#include <string>
#include <vector>

#include "common/base/thread_pool.h"
#include "common/quant/packed.h"
#include "common/quant/internal/test_util.h"
#include "common/quant/quant.h"
#include "common/quant/random_blocks.h"
#include "gtest/gtest.h"

namespace moesplit::quant {
namespace {

using testing::Bytes;
using testing::Name;
using testing::RandomActivations;

struct Weights {
  std::vector<uint8_t> bytes;
  WeightView view;
};

// n_rows random rows of `type`, each padded by `pad` bytes.
Weights MakeWeights(GgmlType type, int64_t n_rows, int64_t n_cols, uint64_t pad, uint64_t seed) {
  Weights w;
  const uint64_t rb = *RowBytes(type, n_cols);
  w.bytes.assign((rb + pad) * n_rows, 0xEE);
  for (int64_t r = 0; r < n_rows; ++r) {
    EXPECT_TRUE(FillRandomBlocks(type, seed + r, 0.04f, w.bytes.data() + r * (rb + pad), n_cols).ok());
  }
  w.view = WeightView{type, w.bytes.data(), n_rows, n_cols, rb + pad};
  return w;
}

// The documented contract computed the slow way: quantise each token, dot
// every row with the registered kernel.
std::vector<float> NaiveMatMul(const WeightView& w, const std::vector<float>& x, int64_t n_tokens) {
  const TypeTraits* t = GetTypeTraits(w.type);
  std::vector<float> y(n_tokens * w.n_rows);
  std::vector<uint8_t> a = Bytes(t->vec_dot_type, w.n_cols);
  for (int64_t tok = 0; tok < n_tokens; ++tok) {
    EXPECT_TRUE(QuantizeRow(t->vec_dot_type, x.data() + tok * w.n_cols, a.data(), w.n_cols).ok());
    for (int64_t r = 0; r < w.n_rows; ++r) {
      y[tok * w.n_rows + r] = t->vec_dot(w.n_cols, w.data + r * w.row_bytes, a.data());
    }
  }
  return y;
}

TEST(MatMulTest, MatchesNaiveLoopForTypesShapesAndThreads) {
  struct Shape {
    int64_t rows, cols, tokens;
    uint64_t pad;
  };
  const Shape shapes[] = {{1, 256, 1, 0}, {37, 512, 3, 0}, {64, 1024, 7, 0},
                          {19, 256, 33, 32}, {5, 768, 2, 12}};
  const GgmlType types[] = {GgmlType::kF32,  GgmlType::kF16,   GgmlType::kBF16,
                            GgmlType::kQ8_0, GgmlType::kQ4_0,  GgmlType::kQ4_1,
                            GgmlType::kQ5_0, GgmlType::kQ2_K,  GgmlType::kQ3_K,
                            GgmlType::kQ4_K, GgmlType::kQ5_K,  GgmlType::kQ6_K,
                            GgmlType::kIQ4_NL, GgmlType::kIQ4_XS, GgmlType::kMXFP4};
  ThreadPool pool1(1), pool3(3), pool4(4);
  ThreadPool* pools[] = {nullptr, &pool1, &pool3, &pool4};
  for (GgmlType type : types) {
    for (const Shape& s : shapes) {
      const Weights w = MakeWeights(type, s.rows, s.cols, s.pad, 1000 + s.rows);
      const std::vector<float> x = RandomActivations(s.tokens * s.cols, 3 + s.tokens);
      const std::vector<float> want = NaiveMatMul(w.view, x, s.tokens);
      for (ThreadPool* pool : pools) {
        std::vector<float> y(s.tokens * s.rows, NAN);
        const absl::Status st = MatMul(w.view, x.data(), s.tokens, y.data(), pool);
        const std::string label = Name(type) + " " + std::to_string(s.rows) + "x" +
                                  std::to_string(s.cols) + " tokens " + std::to_string(s.tokens) +
                                  " threads " + std::to_string(pool ? pool->size() : 0);
        ASSERT_TRUE(st.ok()) << label << ": " << st;
        int64_t bad = 0;
        for (size_t i = 0; i < y.size(); ++i) bad += !(y[i] == want[i]);
        EXPECT_EQ(bad, 0) << label << ": outputs differ from the per-row dot";
      }
    }
  }
}

// Against plain f64 arithmetic on the dequantised weights: the difference is
// bounded by what the activation rounding explains, sum |w_i (a_i - x_i)|
// (a = x after the round trip through the vec_dot_type), plus float rounding.
TEST(MatMulTest, ApproximatesDequantisedProduct) {
  for (GgmlType type : {GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kF16,
                        GgmlType::kIQ4_XS, GgmlType::kMXFP4}) {
    const int64_t rows = 24, cols = 512, tokens = 4;
    const Weights w = MakeWeights(type, rows, cols, 0, 77);
    const std::vector<float> x = RandomActivations(tokens * cols, 9);
    std::vector<float> y(tokens * rows);
    ThreadPool pool(2);
    ASSERT_TRUE(MatMul(w.view, x.data(), tokens, y.data(), &pool).ok()) << Name(type);
    const GgmlType act_type = GetTypeTraits(type)->vec_dot_type;
    std::vector<uint8_t> q = Bytes(act_type, cols);
    for (int64_t t = 0; t < tokens; ++t) {
      ASSERT_TRUE(QuantizeRow(act_type, x.data() + t * cols, q.data(), cols).ok());
      const std::vector<float> a = testing::Dequant(act_type, q.data(), cols);
      for (int64_t r = 0; r < rows; ++r) {
        const std::vector<float> wr =
            testing::Dequant(type, w.view.data + r * w.view.row_bytes, cols);
        double dot = 0, bound = 0, mag = 0;
        for (int64_t i = 0; i < cols; ++i) {
          dot += double(wr[i]) * x[t * cols + i];
          bound += std::fabs(double(wr[i]) * (double(a[i]) - x[t * cols + i]));
          mag += std::fabs(double(wr[i]) * a[i]);
        }
        EXPECT_NEAR(y[t * rows + r], dot, bound + 2e-5 * mag + 1e-6)
            << Name(type) << " row " << r << " token " << t;
      }
    }
  }
}

TEST(MatMulTest, EmptyShapes) {
  const Weights w = MakeWeights(GgmlType::kQ8_0, 4, 64, 0, 1);
  std::vector<float> y(8, 5.0f);
  EXPECT_TRUE(MatMul(w.view, nullptr, 0, nullptr, nullptr).ok());
  WeightView no_rows = w.view;
  no_rows.n_rows = 0;
  EXPECT_TRUE(MatMul(no_rows, nullptr, 3, nullptr, nullptr).ok());
  WeightView no_cols{GgmlType::kQ8_0, nullptr, 4, 0, 0};
  EXPECT_TRUE(MatMul(no_cols, nullptr, 2, y.data(), nullptr).ok());
  for (float v : y) EXPECT_EQ(v, 0.0f);
}

// MatMuls gives each product MatMul's bits, fused or not: K-quants, Q8_0,
// f32, f16 and bf16 products of one activation (more than three activation
// types: one MatMul each), packed and GGUF rows, token counts on both sides
// of the tiled GEMM's threshold, any pool.
TEST(MatMulTest, ProductsOfOneActivationEqualTheirMatMuls) {
  const int64_t cols = 512;
  struct Spec {
    GgmlType type;
    int64_t rows;
    bool packed;
  };
  const std::vector<std::vector<Spec>> sets = {
      {{GgmlType::kQ4_K, 64, true}, {GgmlType::kQ4_K, 16, true}, {GgmlType::kQ6_K, 32, true}},
      {{GgmlType::kQ4_K, 37, false}, {GgmlType::kQ6_K, 19, false}, {GgmlType::kQ8_0, 48, true},
       {GgmlType::kF32, 5, false}},
      {{GgmlType::kQ5_K, 16, false}, {GgmlType::kF16, 7, false}, {GgmlType::kBF16, 3, false},
       {GgmlType::kQ8_0, 9, false}},  // four activation types
      {{GgmlType::kMXFP4, 32, true}, {GgmlType::kQ8_0, 1, false}},
  };
  ThreadPool pool1(1), pool3(3);
  ThreadPool* pools[] = {nullptr, &pool1, &pool3};
  for (size_t si = 0; si < sets.size(); ++si) {
    std::vector<Weights> ws;
    std::vector<std::vector<uint8_t>> packed;
    for (size_t i = 0; i < sets[si].size(); ++i) {
      const Spec& sp = sets[si][i];
      ws.push_back(MakeWeights(sp.type, sp.rows, cols, 0, 77 + 13 * i + si));
      if (sp.packed) {
        packed.emplace_back(PackedMatrixBytes(sp.type, sp.rows, cols));
        PackRows(sp.type, ws.back().bytes.data(), ws.back().view.row_bytes, sp.rows, cols,
                 packed.back().data());
        ws.back().view.data = packed.back().data();
        ws.back().view.packed = true;
      }
    }
    for (int64_t tokens : {1, 2, 4, 5, 9}) {
      const std::vector<float> x = RandomActivations(tokens * cols, 40 + tokens);
      for (ThreadPool* pool : pools) {
        std::vector<Product> ps;
        std::vector<std::vector<float>> ys(ws.size()), want(ws.size());
        for (size_t i = 0; i < ws.size(); ++i) {
          ys[i].assign(tokens * ws[i].view.n_rows, NAN);
          want[i].assign(tokens * ws[i].view.n_rows, NAN);
          ASSERT_TRUE(MatMul(ws[i].view, x.data(), tokens, want[i].data(), nullptr).ok());
          ps.push_back({ws[i].view, ys[i].data()});
        }
        ASSERT_TRUE(MatMuls(ps, x.data(), tokens, pool).ok());
        for (size_t i = 0; i < ws.size(); ++i) {
          int64_t bad = 0;
          for (size_t k = 0; k < ys[i].size(); ++k) bad += !(ys[i][k] == want[i][k]);
          EXPECT_EQ(bad, 0) << "set " << si << " product " << i << " (" << Name(ws[i].view.type)
                            << ") tokens " << tokens << " threads " << (pool ? pool->size() : 0);
        }
      }
    }
  }
  // A bad product is refused before any is computed.
  Weights a = MakeWeights(GgmlType::kQ4_K, 16, cols, 0, 1);
  std::vector<float> x = RandomActivations(cols, 1), ya(16, 7.0f), yb(16, 7.0f);
  WeightView bad = a.view;
  bad.n_cols = 200;
  const Product ps[] = {{a.view, ya.data()}, {bad, yb.data()}};
  EXPECT_EQ(MatMuls(ps, x.data(), 1, nullptr).code(), absl::StatusCode::kInvalidArgument);
  for (float v : ya) EXPECT_EQ(v, 7.0f);
}

// GroupedMatMul gives each row group MatMul's bits on its own activations:
// packed (K-quant, Q5_0) and GGUF rows, groups of whole 16-row units and not
// (one MatMul per group), token counts on both sides of the tiled GEMM's
// threshold, any pool; a group count that does not divide the rows is
// refused with the output untouched.
TEST(MatMulTest, GroupedProductsEqualTheirMatMuls) {
  struct Spec {
    GgmlType type;
    int64_t groups, rows, cols;  // rows per group
    bool packed;
  };
  const Spec specs[] = {{GgmlType::kQ4_K, 4, 32, 512, true},  {GgmlType::kQ5_0, 6, 16, 128, true},
                        {GgmlType::kQ5_0, 3, 32, 96, false},  {GgmlType::kQ4_K, 2, 48, 256, false},
                        {GgmlType::kQ8_0, 5, 8, 64, false},   {GgmlType::kF32, 2, 16, 32, false}};
  ThreadPool pool1(1), pool3(3);
  ThreadPool* pools[] = {nullptr, &pool1, &pool3};
  for (const Spec& sp : specs) {
    if (sp.packed && !PackedPreferred(sp.type)) continue;  // Q5_0: canonical dots on SIMD levels only
    Weights w = MakeWeights(sp.type, sp.groups * sp.rows, sp.cols, 0, 5 + sp.groups);
    std::vector<uint8_t> packed;
    if (sp.packed) {
      packed.resize(PackedMatrixBytes(sp.type, sp.groups * sp.rows, sp.cols));
      PackRows(sp.type, w.bytes.data(), w.view.row_bytes, sp.groups * sp.rows, sp.cols, packed.data());
      w.view.data = packed.data();
      w.view.packed = true;
    }
    const uint64_t group_bytes = sp.packed ? PackedMatrixBytes(sp.type, sp.rows, sp.cols) : sp.rows * w.view.row_bytes;
    for (int64_t tokens : {1, 3, 5, 9}) {
      const std::vector<float> x = RandomActivations(sp.groups * tokens * sp.cols, 60 + tokens);
      std::vector<float> want(sp.groups * tokens * sp.rows, NAN);
      for (int64_t g = 0; g < sp.groups; ++g) {
        WeightView wg = w.view;
        wg.n_rows = sp.rows;
        wg.data += g * group_bytes;
        ASSERT_TRUE(MatMul(wg, x.data() + g * tokens * sp.cols, tokens, want.data() + g * tokens * sp.rows,
                           nullptr).ok());
      }
      for (ThreadPool* pool : pools) {
        std::vector<float> y(want.size(), NAN);
        ASSERT_TRUE(GroupedMatMul(w.view, sp.groups, x.data(), tokens, y.data(), pool).ok());
        int64_t bad = 0;
        for (size_t k = 0; k < y.size(); ++k) bad += !(y[k] == want[k]);
        EXPECT_EQ(bad, 0) << Name(sp.type) << (sp.packed ? " packed" : " rows") << ", " << sp.groups
                          << " groups of " << sp.rows << ", tokens " << tokens << " threads "
                          << (pool ? pool->size() : 0);
      }
    }
  }
  Weights a = MakeWeights(GgmlType::kQ4_K, 48, 256, 0, 1);
  std::vector<float> x = RandomActivations(5 * 256, 1), y(48, 7.0f);
  EXPECT_EQ(GroupedMatMul(a.view, 5, x.data(), 1, y.data(), nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GroupedMatMul(a.view, 0, x.data(), 1, y.data(), nullptr).code(), absl::StatusCode::kInvalidArgument);
  WeightView bad = a.view;
  bad.n_cols = 200;
  EXPECT_EQ(GroupedMatMul(bad, 3, x.data(), 1, y.data(), nullptr).code(), absl::StatusCode::kInvalidArgument);
  for (float v : y) EXPECT_EQ(v, 7.0f);
}

TEST(MatMulTest, BadArgumentsAreInvalidArgument) {
  const Weights good = MakeWeights(GgmlType::kQ4_K, 4, 256, 0, 1);
  std::vector<float> x(2 * 512), y(2 * 8);
  struct Case {
    std::string what;
    WeightView w;
    const float* x;
    int64_t tokens;
    float* y;
  };
  auto with = [&](auto edit) {
    WeightView w = good.view;
    edit(w);
    return w;
  };
  const Case cases[] = {
      {"unsupported type", with([](WeightView& w) { w.type = GgmlType::kI32; }), x.data(), 2, y.data()},
      {"no dot kernel (Q8_K)", with([](WeightView& w) { w.type = GgmlType::kQ8_K; }), x.data(), 2, y.data()},
      {"partial block", with([](WeightView& w) { w.n_cols = 200; }), x.data(), 2, y.data()},
      {"row_bytes too small", with([](WeightView& w) { w.row_bytes = 143; }), x.data(), 2, y.data()},
      {"negative rows", with([](WeightView& w) { w.n_rows = -1; }), x.data(), 2, y.data()},
      {"negative cols", with([](WeightView& w) { w.n_cols = -256; }), x.data(), 2, y.data()},
      {"negative tokens", good.view, x.data(), -1, y.data()},
      {"null weights", with([](WeightView& w) { w.data = nullptr; }), x.data(), 2, y.data()},
      {"misaligned data", with([](WeightView& w) { w.data += 1; }), x.data(), 2, y.data()},
      {"misaligned row_bytes", with([](WeightView& w) { w.row_bytes += 1; }), x.data(), 2, y.data()},
      {"misaligned f32 rows", with([](WeightView& w) {
         w.type = GgmlType::kF32;
         w.row_bytes = 256 * 4 + 2;
       }), x.data(), 2, y.data()},
      {"null activations", good.view, nullptr, 2, y.data()},
      {"null output", good.view, x.data(), 2, nullptr},
  };
  for (const Case& c : cases) {
    const absl::Status s = MatMul(c.w, c.x, c.tokens, c.y, nullptr);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.what << ": " << s;
  }
}

}  // namespace
}  // namespace moesplit::quant
