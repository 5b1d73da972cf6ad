// The fused InProcessExperts (common/model/expert.cc) against the previous
// implementation (one quant::MatMul per expert for gate, up and down, SwiGlu
// from the model's ops), at every kernel level the CPU has, for every weight
// format and mixed formats (Q4_K_M-style gate/up Q4_K + down Q6_K; a
// UD-IQ1_S-style IQ1_S + IQ1_M; gate and up in different activation formats), decode-sized and prefill-sized
// calls, one and several threads: the results must be bit-identical. Also:
// a token's result does not depend on the rest of the batch.
//
// (Lives in common/quant because it is the quant kernels' end-to-end check;
// it links moesplit_model.)

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "common/base/thread_pool.h"
#include "common/model/expert.h"
#include "common/model/internal/ops.h"
#include "common/quant/internal/kernels.h"
#include "common/quant/matmul.h"
#include "common/quant/quant.h"
#include "common/quant/random_blocks.h"
#include "gtest/gtest.h"

// Counts allocations (any thread) while g_counting is set. (GCC flags the
// malloc/free pair inside the replaced operators as mismatched once they are
// inlined into new/delete expressions; they are the matching pair.)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
static std::atomic<bool> g_counting{false};
static std::atomic<int64_t> g_allocations{0};

void* operator new(std::size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace moesplit::model {
namespace {

constexpr int kExperts = 8;

struct Formats {
  std::string name;
  GgmlType gate, up, down;
};

// One layer of random experts (n_embd d, n_ff ff) of the given formats.
struct Experts {
  Experts(const Formats& f, int64_t d, int64_t ff) : d(d), ff(ff) {
    LayerExperts L;
    L.gate = Make(f.gate, d, ff, 11);
    L.up = Make(f.up, d, ff, 12);
    L.down = Make(f.down, ff, d, 13);
    store = std::make_unique<ExpertStore>(std::vector<LayerExperts>{L}, 1, kExperts, 0, 0, d, ff);
  }
  ExpertTensorView Make(GgmlType type, int64_t n_in, int64_t n_out, uint64_t seed) {
    const uint64_t row = *RowBytes(type, n_in);
    buffers.emplace_back(row * n_out * kExperts);
    std::vector<uint8_t>& buf = buffers.back();
    EXPECT_TRUE(quant::FillRandomBlocks(type, seed, 1.0f / std::sqrt(float(n_in)), buf.data(),
                                        n_in * n_out * kExperts)
                    .ok());
    return {type, buf.data(), n_in, n_out, kExperts, row, row * n_out};
  }
  int64_t d, ff;
  std::vector<std::vector<uint8_t>> buffers;
  std::unique_ptr<ExpertStore> store;
};

// The previous InProcessExperts::Compute, verbatim in substance.
std::vector<float> PreviousImplementation(const ExpertStore& store, const ExpertCall& call, ThreadPool* pool) {
  const int64_t d = call.d, ff = store.n_ff();
  const size_t n_entries = call.expert_ids.size();
  std::vector<std::vector<int32_t>> by_expert(store.n_expert());
  for (size_t k = 0; k < n_entries; ++k) by_expert[call.expert_ids[k]].push_back(static_cast<int32_t>(k));
  std::vector<float> out(n_entries * d);
  for (int32_t e = 0; e < static_cast<int32_t>(by_expert.size()); ++e) {
    const std::vector<int32_t>& entries = by_expert[e];
    if (entries.empty()) continue;
    const int64_t n = static_cast<int64_t>(entries.size());
    std::vector<float> x(n * d);
    for (int64_t r = 0; r < n; ++r) {
      const auto it = std::upper_bound(call.token_offsets.begin(), call.token_offsets.end(),
                                       static_cast<uint32_t>(entries[r]));
      const int64_t t = (it - call.token_offsets.begin()) - 1;
      std::copy_n(call.hidden.data() + t * d, d, x.data() + r * d);
    }
    std::vector<float> gate(n * ff), up(n * ff), y(n * d);
    EXPECT_TRUE(quant::MatMul(store.Gate(call.layer, e), x.data(), n, gate.data(), pool).ok());
    EXPECT_TRUE(quant::MatMul(store.Up(call.layer, e), x.data(), n, up.data(), pool).ok());
    internal::SwiGlu(gate.data(), up.data(), n, ff, gate.data());
    EXPECT_TRUE(quant::MatMul(store.Down(call.layer, e), gate.data(), n, y.data(), pool).ok());
    for (int64_t r = 0; r < n; ++r) std::copy_n(y.data() + r * d, d, out.data() + entries[r] * d);
  }
  std::vector<float> partial(call.n_tokens * d, 0.0f);
  for (int32_t t = 0; t < call.n_tokens; ++t) {
    float* dst = partial.data() + t * d;
    for (uint32_t k = call.token_offsets[t]; k < call.token_offsets[t + 1]; ++k) {
      const float w = call.weights[k];
      const float* src = out.data() + k * d;
      for (int64_t i = 0; i < d; ++i) dst[i] += src[i] * w;
    }
  }
  return partial;
}

// Random routing: token t gets top_k distinct experts (every 7th token none);
// a few hidden rows are scaled up so SiLU sees saturating inputs.
ExpertCall RandomCall(int64_t d, int n_tokens, int top_k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  ExpertCall c;
  c.call_id = seed;
  c.n_tokens = n_tokens;
  c.d = static_cast<int32_t>(d);
  c.hidden.resize(n_tokens * d);
  for (float& v : c.hidden) v = normal(rng);
  for (int t = 0; t < n_tokens; t += 5) {
    for (int64_t i = 0; i < d; ++i) c.hidden[t * d + i] *= 40.0f;
  }
  c.token_offsets.push_back(0);
  for (int t = 0; t < n_tokens; ++t) {
    if (t % 7 != 6) {
      std::vector<int32_t> ids(kExperts);
      for (int e = 0; e < kExperts; ++e) ids[e] = e;
      std::shuffle(ids.begin(), ids.end(), rng);
      for (int j = 0; j < top_k; ++j) {
        c.expert_ids.push_back(ids[j]);
        c.weights.push_back(0.1f + std::uniform_real_distribution<float>(0, 1)(rng));
      }
    }
    c.token_offsets.push_back(static_cast<uint32_t>(c.expert_ids.size()));
  }
  return c;
}

class LevelGuard {
 public:
  LevelGuard() : saved_(quant::ActiveKernelLevel()) {}
  ~LevelGuard() { quant::SetActiveKernelLevel(saved_); }

 private:
  quant::KernelLevel saved_;
};

std::vector<quant::KernelLevel> LevelsToTest() {
  std::vector<quant::KernelLevel> out = {quant::KernelLevel::kScalar};
  if (quant::internal::CpuHasAvx2()) out.push_back(quant::KernelLevel::kAvx2);
  if (quant::internal::CpuHasAvx512Vnni()) out.push_back(quant::KernelLevel::kAvx512);
  if (quant::internal::CpuHasAmxInt8()) out.push_back(quant::KernelLevel::kAmx);
  return out;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), 4 * a.size()) == 0;
}

class FusedExpertsTest : public ::testing::TestWithParam<Formats> {};

TEST_P(FusedExpertsTest, BitIdenticalToPreviousImplementationAtEveryLevel) {
  const Formats& f = GetParam();
  const bool k256 = TypeInfo(f.gate).block_size == 256 || TypeInfo(f.up).block_size == 256 ||
                    TypeInfo(f.down).block_size == 256;
  const int64_t d = k256 ? 512 : 96, ff = k256 ? 256 : 64;
  Experts ex(f, d, ff);
  ThreadPool pool(3);
  InProcessExperts threaded(*ex.store, &pool), single(*ex.store, nullptr);
  LevelGuard guard;
  struct CallCase {
    const char* what;
    int n_tokens, top_k;
  };
  for (const CallCase& cc : {CallCase{"decode", 1, 4}, CallCase{"small batch", 5, 2},
                             CallCase{"prefill", 40, 4}}) {
    const ExpertCall call = RandomCall(d, cc.n_tokens, cc.top_k, 100 + cc.n_tokens);
    for (quant::KernelLevel level : LevelsToTest()) {
      quant::SetActiveKernelLevel(level);
      const std::vector<float> want = PreviousImplementation(*ex.store, call, nullptr);
      ExpertResult a, b;
      ASSERT_TRUE(threaded.Compute(call, &a).ok());
      ASSERT_TRUE(single.Compute(call, &b).ok());
      EXPECT_EQ(a.call_id, call.call_id);
      EXPECT_TRUE(SameBits(a.partial, want)) << f.name << " " << cc.what << " level " << static_cast<int>(level);
      EXPECT_TRUE(SameBits(b.partial, want)) << f.name << " " << cc.what << " level "
                                             << static_cast<int>(level) << " (no pool)";
    }
  }
}

TEST_P(FusedExpertsTest, TokenResultDoesNotDependOnTheBatch) {
  const Formats& f = GetParam();
  const bool k256 = TypeInfo(f.gate).block_size == 256 || TypeInfo(f.down).block_size == 256 ||
                    TypeInfo(f.up).block_size == 256;
  const int64_t d = k256 ? 256 : 64, ff = k256 ? 256 : 32;
  Experts ex(f, d, ff);
  ThreadPool pool(2);
  InProcessExperts experts(*ex.store, &pool);
  const ExpertCall batch = RandomCall(d, 24, 6, 7);
  ExpertResult all;
  ASSERT_TRUE(experts.Compute(batch, &all).ok());
  for (int t = 0; t < batch.n_tokens; t += 5) {
    ExpertCall one;
    one.call_id = 1;
    one.n_tokens = 1;
    one.d = batch.d;
    one.hidden.assign(batch.hidden.begin() + t * d, batch.hidden.begin() + (t + 1) * d);
    one.token_offsets = {0, batch.token_offsets[t + 1] - batch.token_offsets[t]};
    for (uint32_t k = batch.token_offsets[t]; k < batch.token_offsets[t + 1]; ++k) {
      one.expert_ids.push_back(batch.expert_ids[k]);
      one.weights.push_back(batch.weights[k]);
    }
    ExpertResult r;
    ASSERT_TRUE(experts.Compute(one, &r).ok());
    EXPECT_EQ(0, std::memcmp(r.partial.data(), all.partial.data() + t * d, 4 * d)) << f.name << " token " << t;
  }
}

TEST(FusedExpertsAllocationTest, RepeatedCallsDoNotAllocate) {
  Experts ex({"Q4_K_M", GgmlType::kQ4_K, GgmlType::kQ4_K, GgmlType::kQ6_K}, 512, 256);
  ThreadPool pool(3);
  InProcessExperts experts(*ex.store, &pool);
  for (int n_tokens : {1, 40}) {
    const ExpertCall call = RandomCall(512, n_tokens, 4, 3);
    ExpertResult r;
    g_allocations.store(0);
    g_counting.store(true);
    ASSERT_TRUE(experts.Compute(call, &r).ok());  // sizes the scratch
    g_counting.store(false);
    EXPECT_GT(g_allocations.load(), 0) << "the counter counts";
    g_allocations.store(0);
    g_counting.store(true);
    const absl::Status st = experts.Compute(call, &r);
    g_counting.store(false);
    ASSERT_TRUE(st.ok());
    EXPECT_EQ(g_allocations.load(), 0) << n_tokens << " tokens";
  }
}

std::vector<Formats> AllFormats() {
  std::vector<Formats> out;
  for (GgmlType t : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ4_0, GgmlType::kQ4_1,
                     GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ8_0, GgmlType::kQ2_K, GgmlType::kQ3_K,
                     GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kIQ4_NL,
                     GgmlType::kIQ4_XS, GgmlType::kMXFP4, GgmlType::kIQ1_S, GgmlType::kIQ1_M,
                     GgmlType::kIQ2_XXS, GgmlType::kIQ2_XS, GgmlType::kIQ2_S, GgmlType::kIQ3_XXS,
                     GgmlType::kIQ3_S, GgmlType::kTQ1_0, GgmlType::kTQ2_0}) {
    out.push_back({std::string(GgmlTypeName(t)), t, t, t});
  }
  out.push_back({"UD_IQ1_S", GgmlType::kIQ1_S, GgmlType::kIQ1_S, GgmlType::kIQ1_M});
  out.push_back({"Q4_K_M", GgmlType::kQ4_K, GgmlType::kQ4_K, GgmlType::kQ6_K});
  out.push_back({"mixed_act", GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ5_1});
  out.push_back({"float_down", GgmlType::kQ8_0, GgmlType::kQ8_0, GgmlType::kF16});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Formats, FusedExpertsTest, ::testing::ValuesIn(AllFormats()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace moesplit::model
