#include "services/dense/sequence_runner.h"

#include <cstdio>
#include <filesystem>

#include "common/model/testing/tiny_model.h"
#include "gtest/gtest.h"

namespace moesplit::dense {
namespace {

// A tiny model (head_dim 32, for the GPU attention) and its in-process experts.
// Starts slot 0 for the whole context and evaluates `tokens` there.
absl::Status Eval(SequenceRunner& r, absl::Span<const int32_t> tokens, std::vector<float>* logits) {
  if (absl::Status s = r.Start(0, 32); !s.ok()) return s;
  const RunnerEntry e[1] = {{0, tokens, model::LogitsMode::kLast, logits}};
  return r.EvalBatch(e);
}

class SequenceRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model::testing::TinyModelOptions o;
    o.head_dim = 32;
    auto m = model::testing::MakeTinyModel(o);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = *m;
    experts_ = std::make_unique<model::InProcessExperts>(model::ExpertStore(model_), nullptr);
  }
  std::shared_ptr<const model::Model> model_;
  std::unique_ptr<model::InProcessExperts> experts_;
};

TEST_F(SequenceRunnerTest, ChoosesTheBackend) {
  RunnerOptions ro;
  ro.n_ctx = 32;
  ro.backend = "tpu";
  EXPECT_EQ(CreateSequenceRunner(model_, experts_.get(), nullptr, ro).status().code(),
            absl::StatusCode::kInvalidArgument);
  ro.backend = "cpu";
  ro.kv_type = "q5_0";
  EXPECT_EQ(CreateSequenceRunner(model_, experts_.get(), nullptr, ro).status().code(),
            absl::StatusCode::kInvalidArgument);
  ro.kv_type = "f16";
  ro.expert_cache_slots = -2;
  EXPECT_EQ(CreateSequenceRunner(model_, experts_.get(), nullptr, ro).status().code(),
            absl::StatusCode::kInvalidArgument);
  ro.expert_cache_slots = -1;
  ro.prefill_stream_min_tokens = -5;
  EXPECT_EQ(CreateSequenceRunner(model_, experts_.get(), nullptr, ro).status().code(),
            absl::StatusCode::kInvalidArgument);
  ro.prefill_stream_min_tokens = -1;
  auto cpu = CreateSequenceRunner(model_, experts_.get(), nullptr, ro);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ((*cpu)->name(), "cpu");
  std::vector<float> logits;
  const int32_t tokens[3] = {1, 2, 3};
  ASSERT_TRUE(Eval(**cpu, tokens, &logits).ok());
  EXPECT_EQ((*cpu)->n_past(0), 3);
  EXPECT_EQ(logits.size(), static_cast<size_t>(model_->hparams().n_vocab));
  (*cpu)->Release(0);
  ASSERT_TRUE((*cpu)->Start(0, 32).ok());
  EXPECT_EQ((*cpu)->n_past(0), 0);
  (*cpu)->Release(0);

  // auto: the GPU when usable, else the CPU; both evaluate the same tokens.
  ro.backend = "auto";
  auto any = CreateSequenceRunner(model_, experts_.get(), nullptr, ro);
  ASSERT_TRUE(any.ok()) << any.status();
  std::vector<float> again;
  ASSERT_TRUE(Eval(**any, tokens, &again).ok());
  ASSERT_EQ(again.size(), logits.size());
  double err = 0, ref = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    err += (again[i] - logits[i]) * double(again[i] - logits[i]);
    ref += double(logits[i]) * logits[i];
  }
  EXPECT_LE(err / ref, 1e-4) << (*any)->name();
  const GpuRunnerInfo info = (*any)->gpu_info();
  std::printf("runner %s: expert cache %s (%lld slots), streamed prefill from %lld tokens (%s)\n",
              (*any)->name().c_str(), info.expert_cache ? "on" : "off",
              static_cast<long long>(info.cache_slots),
              static_cast<long long>(info.stream_min_tokens), info.stream_note.c_str());
  if ((*any)->name() == "cpu") {
    EXPECT_FALSE(info.expert_cache);
  } else {
    // The automatic cache takes what the budget leaves (a tiny model: all of
    // its experts fit), and the switch-over was measured or said why not.
    EXPECT_TRUE(info.expert_cache);
    EXPECT_GT(info.cache_slots, 0);
    EXPECT_FALSE(info.stream_note.empty());
    EXPECT_EQ(info.resident_per_layer.size(), static_cast<size_t>(model_->n_layer()));
  }

  ro.backend = "cuda";
  auto gpu = CreateSequenceRunner(model_, experts_.get(), nullptr, ro);
  if ((*any)->name() == "cpu") {
    EXPECT_EQ(gpu.status().code(), absl::StatusCode::kUnavailable) << gpu.status();
  } else {
    EXPECT_TRUE(gpu.ok()) << gpu.status();
  }
}

// Several sequences on one runner: the GPU runner holds n_parallel KV caches
// and batches them; each slot gets the logits it gets alone.
TEST_F(SequenceRunnerTest, SlotsBatchLikeSeparateSequences) {
  RunnerOptions ro;
  ro.n_ctx = 32;
  ro.n_parallel = 0;
  EXPECT_EQ(CreateSequenceRunner(model_, experts_.get(), nullptr, ro).status().code(),
            absl::StatusCode::kInvalidArgument);
  ro.n_parallel = 2;
  // No GPU expert cache: it learns between the runs below, moving experts
  // from the CPU's kernels to the GPU's (equal within rounding, not bits).
  ro.expert_cache_slots = 0;
  auto r = CreateSequenceRunner(model_, experts_.get(), nullptr, ro);
  ASSERT_TRUE(r.ok()) << r.status();
  // CPU and GPU runners alike hold n_parallel slots.
  EXPECT_EQ((*r)->slots(), 2) << (*r)->name();
  const int32_t a[3] = {1, 2, 3}, b[2] = {7, 8};
  std::vector<float> la, lb, ga, gb;
  ASSERT_TRUE(Eval(**r, a, &la).ok());
  (*r)->Release(0);
  ASSERT_TRUE(Eval(**r, b, &lb).ok());
  (*r)->Release(0);
  ASSERT_TRUE((*r)->Start(0, 32).ok());
  ASSERT_TRUE((*r)->Start(1, 8).ok());
  EXPECT_EQ((*r)->Start(1, 8).code(), absl::StatusCode::kFailedPrecondition);
  const RunnerEntry both[2] = {{0, a, model::LogitsMode::kLast, &ga},
                               {1, b, model::LogitsMode::kLast, &gb}};
  ASSERT_TRUE((*r)->EvalBatch(both).ok());
  EXPECT_EQ(ga, la);
  EXPECT_EQ(gb, lb);
  EXPECT_EQ((*r)->n_past(0), 3);
  EXPECT_EQ((*r)->n_past(1), 2);
  const RunnerEntry out_of_range[1] = {{(*r)->slots(), a, model::LogitsMode::kNone, nullptr}};
  EXPECT_EQ((*r)->EvalBatch(out_of_range).code(), absl::StatusCode::kInvalidArgument);
  const RunnerEntry twice[2] = {{0, a, model::LogitsMode::kNone, nullptr},
                                {0, b, model::LogitsMode::kNone, nullptr}};
  EXPECT_EQ((*r)->EvalBatch(twice).code(), absl::StatusCode::kInvalidArgument);
  (*r)->Release(1);
  const RunnerEntry released[1] = {{1, b, model::LogitsMode::kNone, nullptr}};
  EXPECT_EQ((*r)->EvalBatch(released).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*r)->n_past(0), 3);  // the refused steps changed nothing
}

// The runner owns the state accounting the engine's KV gauges show.
TEST_F(SequenceRunnerTest, ReportsTheStateItHolds) {
  RunnerOptions ro;
  ro.backend = "cpu";
  ro.n_ctx = 32;
  ro.n_parallel = 3;
  auto r = CreateSequenceRunner(model_, experts_.get(), nullptr, ro);
  ASSERT_TRUE(r.ok()) << r.status();
  const uint64_t full = model::SequenceState::BytesFor(model_->hparams(), 32);
  EXPECT_EQ((*r)->state_bytes_capacity(), 3 * full);
  EXPECT_EQ((*r)->state_bytes_used(), 0u);
  ASSERT_TRUE((*r)->Start(2, 8).ok());
  EXPECT_EQ((*r)->capacity(2), 8);
  EXPECT_EQ((*r)->state_bytes_used(), model::SequenceState::BytesFor(model_->hparams(), 8));
  EXPECT_EQ((*r)->Start(0, 33).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*r)->Start(3, 8).code(), absl::StatusCode::kInvalidArgument);
  (*r)->Release(2);
  (*r)->Release(2);  // twice: a no-op
  EXPECT_EQ((*r)->state_bytes_used(), 0u);
}

// The prefix-cache tests' tiny model of `arch` (qwen35moe: 4 layers, so
// that it has DeltaNet and attention layers) and runner options (two
// 64-position slots; on the GPU no expert cache and no streamed prefill).
absl::StatusOr<std::shared_ptr<const model::Model>> CacheTestModel(const std::string& arch) {
  model::testing::TinyModelOptions mo;
  mo.arch = arch;
  mo.head_dim = 32;
  mo.n_layer = arch == "qwen35moe" ? 4 : 2;
  return model::testing::MakeTinyModel(mo);
}

RunnerOptions CacheTestOptions(const std::string& kv_type) {
  RunnerOptions ro;
  ro.n_ctx = 64;
  ro.n_parallel = 2;
  ro.kv_type = kv_type;
  ro.expert_cache_slots = 0;
  ro.prefill_stream_min_tokens = 0;
  return ro;
}

// The prefix cache's copies: K/V rows and the recurrent state exported from
// one slot at a block boundary and imported into another give the next
// tokens the logits they get in the slot that computed them, bit for bit
// (the CPU's f16 rows; on the GPU, also the emulated one, the cache's own
// type, f16 and q8_0), for a plain and a hybrid (gated DeltaNet) model.
// deepseek2 (the fixture: MLA layers keep one latent row per position, no
// V rows) and gpt-oss (sliding windows) as well.
TEST(SequenceRunnerCacheTest, ExportedStateResumesBitForBit) {
  for (const std::string arch : {"qwen3moe", "qwen35moe", "gpt-oss", "deepseek2"}) {
    for (const std::string kv_type : {"f16", "q8_0"}) {
      absl::StatusOr<std::shared_ptr<const model::Model>> m;
      if (arch == "deepseek2") {
        const std::string path =
            std::string(MOESPLIT_FIXTURES_DIR) + "/models/deepseek2-tiny-f16.gguf";
        if (!std::filesystem::exists(path)) continue;
        m = model::Model::Open(path);
      } else {
        m = CacheTestModel(arch);
      }
      ASSERT_TRUE(m.ok()) << m.status();
      model::InProcessExperts experts(model::ExpertStore(*m), nullptr);
      auto r = CreateSequenceRunner(*m, &experts, nullptr, CacheTestOptions(kv_type));
      ASSERT_TRUE(r.ok()) << r.status();
      SequenceRunner& run = **r;
      if (run.name() == "cpu" && kv_type != "f16") continue;  // the CPU keeps f16
      const std::string what = arch + " " + kv_type + " " + run.name();
      std::vector<int32_t> tokens;
      for (int i = 0; i < 21; ++i) tokens.push_back((i * 7 + 3) % 40);
      const auto all = absl::MakeConstSpan(tokens);
      ASSERT_TRUE(run.Start(0, 64).ok());
      const RunnerEntry head[1] = {{0, all.subspan(0, 16), model::LogitsMode::kNone, nullptr}};
      ASSERT_TRUE(run.EvalBatch(head).ok()) << what;
      std::vector<uint8_t> kv, state;
      ASSERT_TRUE(run.ExportKv(0, 0, 8, &kv).ok());
      ASSERT_TRUE(run.ExportKv(0, 8, 16, &kv).ok());  // appended
      ASSERT_TRUE(run.ExportRecurrent(0, &state).ok());
      EXPECT_EQ(kv.size(), 16 * run.kv_bytes_per_position()) << what;
      EXPECT_EQ(state.size(), run.recurrent_bytes()) << what;
      EXPECT_EQ(run.recurrent_bytes() > 0, arch == "qwen35moe") << what;
      EXPECT_EQ(run.ExportKv(0, 0, 17, &kv).code(), absl::StatusCode::kInvalidArgument);
      EXPECT_EQ(kv.size(), 16 * run.kv_bytes_per_position());  // a refused export adds nothing
      std::vector<float> want, got;
      const RunnerEntry tail0[1] = {{0, all.subspan(16), model::LogitsMode::kLast, &want}};
      ASSERT_TRUE(run.EvalBatch(tail0).ok());

      ASSERT_TRUE(run.Start(1, 64).ok());
      const auto half = absl::MakeConstSpan(kv).subspan(0, kv.size() / 2);
      ASSERT_TRUE(run.ImportKv(1, 0, half).ok());
      ASSERT_TRUE(run.ImportKv(1, 8, absl::MakeConstSpan(kv).subspan(kv.size() / 2)).ok());
      EXPECT_EQ(run.ImportKv(1, 60, kv).code(), absl::StatusCode::kInvalidArgument) << what;
      EXPECT_EQ(run.ImportKv(1, 0, absl::MakeConstSpan(kv).subspan(1)).code(),
                absl::StatusCode::kInvalidArgument);
      std::vector<uint8_t> bad(state.size() + 4);
      EXPECT_EQ(run.Resume(1, 16, bad).code(), absl::StatusCode::kInvalidArgument);
      EXPECT_EQ(run.Resume(1, 65, state).code(), absl::StatusCode::kInvalidArgument);
      EXPECT_EQ(run.n_past(1), 0);
      ASSERT_TRUE(run.Resume(1, 16, state).ok());
      EXPECT_EQ(run.n_past(1), 16);
      const RunnerEntry tail1[1] = {{1, all.subspan(16), model::LogitsMode::kLast, &got}};
      ASSERT_TRUE(run.EvalBatch(tail1).ok());
      EXPECT_EQ(got, want) << what;
      run.Release(1);
      EXPECT_EQ(run.ImportKv(1, 0, half).code(), absl::StatusCode::kInvalidArgument);
    }
  }
}

// Rows that are not any runner's device memory.
class HostRows final : public DeviceRows {
 public:
  explicit HostRows(std::vector<uint8_t> rows) : rows_(std::move(rows)) {}
  uint64_t bytes() const override { return rows_.size(); }
  absl::StatusOr<std::vector<uint8_t>> ToHost() const override { return rows_; }

 private:
  std::vector<uint8_t> rows_;
};

// The prefix cache's device tier: a slot's rows copied into device memory
// are ExportKv's bytes, host rows copied up come back unchanged, and rows
// imported from the device resume the sequence bit for bit, as ImportKv's
// do. The CPU runner has no device memory and says so.
TEST(SequenceRunnerCacheTest, DeviceRowsAreTheExportedRowsAndResumeBitForBit) {
  for (const std::string arch : {"qwen3moe", "qwen35moe", "gpt-oss"}) {
    for (const std::string kv_type : {"f16", "q8_0"}) {
      auto m = CacheTestModel(arch);
      ASSERT_TRUE(m.ok()) << m.status();
      model::InProcessExperts experts(model::ExpertStore(*m), nullptr);
      auto r = CreateSequenceRunner(*m, &experts, nullptr, CacheTestOptions(kv_type));
      ASSERT_TRUE(r.ok()) << r.status();
      SequenceRunner& run = **r;
      const std::string what = arch + " " + kv_type + " " + run.name();
      std::vector<int32_t> tokens;
      for (int i = 0; i < 21; ++i) tokens.push_back((i * 5 + 1) % 40);
      const auto all = absl::MakeConstSpan(tokens);
      ASSERT_TRUE(run.Start(0, 64).ok());
      const RunnerEntry head[1] = {{0, all.subspan(0, 16), model::LogitsMode::kNone, nullptr}};
      ASSERT_TRUE(run.EvalBatch(head).ok()) << what;
      if (!run.has_device_memory()) {
        EXPECT_EQ(run.name(), "cpu");
        EXPECT_EQ(run.ExportKvDevice(0, 0, 8).status().code(), absl::StatusCode::kUnimplemented);
        EXPECT_EQ(run.UploadKv(std::vector<uint8_t>(8)).status().code(),
                  absl::StatusCode::kUnimplemented);
        EXPECT_EQ(run.ImportKvDevice(0, 0, HostRows({1, 2})).code(),
                  absl::StatusCode::kUnimplemented);
        break;  // one model says it
      }
      std::vector<uint8_t> kv, state;  // the rows of [0, 8), then of [8, 16)
      ASSERT_TRUE(run.ExportKv(0, 0, 8, &kv).ok());
      ASSERT_TRUE(run.ExportKv(0, 8, 16, &kv).ok());
      ASSERT_TRUE(run.ExportRecurrent(0, &state).ok());
      absl::StatusOr<DeviceRowsRef> front = run.ExportKvDevice(0, 0, 8);
      ASSERT_TRUE(front.ok()) << front.status() << " " << what;
      EXPECT_EQ((*front)->bytes(), 8 * run.kv_bytes_per_position());
      absl::StatusOr<std::vector<uint8_t>> front_host = (*front)->ToHost();
      ASSERT_TRUE(front_host.ok());
      EXPECT_EQ(*front_host, std::vector<uint8_t>(kv.begin(), kv.begin() + kv.size() / 2)) << what;
      EXPECT_EQ(run.ExportKvDevice(0, 0, 17).status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_EQ(run.ExportKvDevice(1, 0, 8).status().code(), absl::StatusCode::kInvalidArgument);
      const auto back_half = absl::MakeConstSpan(kv).subspan(kv.size() / 2);
      absl::StatusOr<DeviceRowsRef> back = run.UploadKv(back_half);
      ASSERT_TRUE(back.ok()) << back.status();
      absl::StatusOr<std::vector<uint8_t>> back_host = (*back)->ToHost();
      ASSERT_TRUE(back_host.ok());
      EXPECT_EQ(*back_host, std::vector<uint8_t>(back_half.begin(), back_half.end()));
      std::vector<float> want, got;
      const RunnerEntry tail0[1] = {{0, all.subspan(16), model::LogitsMode::kLast, &want}};
      ASSERT_TRUE(run.EvalBatch(tail0).ok());

      ASSERT_TRUE(run.Start(1, 64).ok());
      EXPECT_EQ(run.ImportKvDevice(1, 0, HostRows(*front_host)).code(),
                absl::StatusCode::kInvalidArgument);  // not device memory
      EXPECT_EQ(run.ImportKvDevice(1, 60, **front).code(), absl::StatusCode::kInvalidArgument);
      ASSERT_TRUE(run.ImportKvDevice(1, 0, **front).ok()) << what;
      ASSERT_TRUE(run.ImportKvDevice(1, 8, **back).ok()) << what;
      ASSERT_TRUE(run.Resume(1, 16, state).ok());
      const RunnerEntry tail1[1] = {{1, all.subspan(16), model::LogitsMode::kLast, &got}};
      ASSERT_TRUE(run.EvalBatch(tail1).ok());
      EXPECT_EQ(got, want) << what;
    }
  }
}

}  // namespace
}  // namespace moesplit::dense
