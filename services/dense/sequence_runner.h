// SequenceRunner: one sequence's forward pass and KV cache behind one
// interface, so the dense engine runs on the CPU reference forward
// (model::Forward + model::KvCache) or on the GPU (cuda::CudaForward +
// cuda::CudaKvCache) alike.
//
// --backend auto picks CUDA when a device exists (and the model fits the
// budget), else the CPU; cuda fails with UNAVAILABLE / RESOURCE_EXHAUSTED
// when it cannot; cpu never touches the GPU.
//
// Thread-safety: not thread-safe (the engine serialises sequences).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/base/thread_pool.h"
#include "common/model/expert.h"
#include "common/model/expert_cache.h"
#include "common/model/forward.h"
#include "common/model/model.h"

namespace moesplit::dense {

struct RunnerOptions {
  std::string backend = "auto";   // auto | cpu | cuda
  int64_t n_ctx = 4096;
  uint64_t gpu_memory = 0;        // bytes; 0 = the device's free memory
  std::string kv_type = "f16";    // GPU KV cache: f16 | q8_0 | q4_0
  // Sequences the GPU runner holds at once (one KV cache of n_ctx each,
  // checked against the budget by the memory planner). The CPU runner has 1.
  int n_parallel = 1;
  // GPU hot-expert cache slots: -1 = what the budget leaves after the plan
  // (less kExpertCacheMargin); 0 = no cache.
  int64_t expert_cache_slots = -1;
  // Streamed prefill threshold (tokens per expert): -1 = measured at
  // start-up (cuda::CudaForward::MeasurePrefillSwitch); 0 = off.
  int64_t prefill_stream_min_tokens = -1;
  bool pin_experts = false;       // page-lock the experts' host copy source
};

// Left free of the GPU budget when the expert cache takes "the rest".
inline constexpr uint64_t kExpertCacheMargin = uint64_t{256} << 20;

// The GPU side's state for metrics and logs (zeros on the CPU).
struct GpuRunnerInfo {
  bool expert_cache = false;
  int64_t cache_slots = 0;
  uint64_t cache_bytes = 0;
  model::ExpertCacheStats cache_stats;
  std::vector<int64_t> resident_per_layer;
  int64_t stream_min_tokens = 0;      // 0: streamed prefill off
  std::string stream_note;            // how the threshold was set (measured rates, or why off)
};

// One slot's part of a step (SequenceRunner::EvalBatch).
struct RunnerEntry {
  int slot = 0;
  absl::Span<const int32_t> tokens;
  model::LogitsMode mode = model::LogitsMode::kNone;
  std::vector<float>* logits = nullptr;
};

class SequenceRunner {
 public:
  virtual ~SequenceRunner() = default;
  // Sequences held at once (one KV cache each), slots 0 .. slots() - 1.
  virtual int slots() const = 0;
  // One step for several slots, as model::Forward::EvalBatch on their caches
  // (a token's logits as if alone). InvalidArgument, changing nothing, for a
  // slot out of range or listed twice.
  virtual absl::Status EvalBatch(absl::Span<const RunnerEntry> entries) = 0;
  virtual int64_t n_past(int slot) const = 0;
  virtual void Clear(int slot) = 0;
  // Slot 0 alone.
  absl::Status Eval(absl::Span<const int32_t> tokens, model::LogitsMode mode,
                    std::vector<float>* logits) {
    const RunnerEntry e[1] = {{0, tokens, mode, logits}};
    return EvalBatch(e);
  }
  int64_t n_past() const { return n_past(0); }
  void Clear() { Clear(0); }
  // "cpu" or "cuda:<device name>".
  virtual std::string name() const = 0;
  // Thread-safe (may be called while another thread runs Eval).
  virtual GpuRunnerInfo gpu_info() const { return {}; }
};

// InvalidArgument for an unknown backend or KV type; see the file comment.
// `experts` and `pool` must outlive the runner.
absl::StatusOr<std::unique_ptr<SequenceRunner>> CreateSequenceRunner(
    std::shared_ptr<const model::Model> model, model::ExpertBackend* experts, ThreadPool* pool,
    const RunnerOptions& options);

// Whether this build has the CUDA backend.
bool HaveCudaBackend();

// Device 0's memory in use (total - free) and its total, in bytes; zeros
// without the CUDA backend or a device.
struct GpuMemoryUse {
  uint64_t used = 0, total = 0, free = 0;
};
GpuMemoryUse QueryGpuMemory();

}  // namespace moesplit::dense
