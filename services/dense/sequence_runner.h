// SequenceRunner: the per-sequence state of every running sequence and the
// forward pass that advances them, behind one interface, so the dense engine
// runs on the CPU reference forward (model::Forward + model::SequenceState)
// or on the GPU (cuda::CudaForward + cuda::CudaKvCache) without branching
// on the backend. A runner has slots() slots; the engine Starts a slot for a
// new sequence, steps any set of started slots together (EvalBatch: a
// token's logits as if alone), and Releases the slot when the sequence
// ends. The runner owns the state's memory and reports it
// (state_bytes_used / state_bytes_capacity), so metrics are right on both
// backends.
//
// CPU: Start allocates a SequenceState of the positions asked for (KV of the
// attention layers + the DeltaNet layers' fixed state), Release frees it.
// GPU: the slots' caches are planned and allocated at start-up for the full
// context (the memory planner checks they fit); Start clears one.
//
// --backend auto picks CUDA when a device exists (and the model fits the
// budget and the GPU kernels cover its layers), else the CPU, saying why;
// cuda fails with UNAVAILABLE / RESOURCE_EXHAUSTED / UNIMPLEMENTED when it
// cannot; cpu never touches the GPU.
//
// Thread-safety: not thread-safe (the engine thread drives it), except
// gpu_info() and state_bytes_used(), which may be read from any thread.
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
#include "common/plan/memory_plan.h"
#include "common/plan/serving_defaults.h"
#include "services/dense/prefix_cache.h"

namespace moesplit::dense {

struct RunnerOptions {
  std::string backend = "auto";   // auto | cpu | cuda
  int64_t n_ctx = defaults::kContext;
  uint64_t gpu_memory = 0;        // bytes; 0 = the device's free memory
  std::string kv_type{defaults::kKvType};  // GPU KV cache: f16 | q8_0 | q4_0
  // Sequences the runner holds at once (slots). On the GPU one KV cache of
  // n_ctx each, checked against the budget by the memory planner.
  int n_parallel = 1;
  // GPU hot-expert cache slots: -1 = what the budget leaves after the rest
  // of the memory plan (less its margin); 0 = no cache.
  int64_t expert_cache_slots = -1;
  // Streamed prefill threshold (tokens per expert): -1 = measured at
  // start-up (cuda::CudaForward::MeasurePrefillSwitch); 0 = off.
  int64_t prefill_stream_min_tokens = -1;
  bool pin_experts = false;       // page-lock the experts' host copy source
  // The most tokens of one sequence a step holds (the engine's step_tokens):
  // sizes the CPU states' sliding-window rings (model::SequenceState), so
  // that the prefix cache can still export the blocks a step completed.
  int64_t max_step = defaults::kStepTokens;
  // GPU: device memory the prefix cache's device tier may hold (its budget,
  // --cache-device), planned with the rest and left out of the expert cache.
  uint64_t prefix_cache_device = 0;
};

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
  // Sequences held at once, slots 0 .. slots() - 1.
  virtual int slots() const = 0;
  // Readies `slot` for a new sequence of up to `positions` positions
  // (1 .. n_ctx): empty state, n_past 0. InvalidArgument for a slot or size
  // out of range, FailedPrecondition for a slot already started,
  // ResourceExhausted when the state does not fit in memory.
  virtual absl::Status Start(int slot, int64_t positions) = 0;
  // Ends the slot's sequence and frees what it held. A no-op for a slot not
  // started.
  virtual void Release(int slot) = 0;
  // One step for several started slots, as model::Forward::EvalBatch on
  // their states (a token's logits as if alone). InvalidArgument, changing
  // nothing, for a slot out of range, not started or listed twice.
  virtual absl::Status EvalBatch(absl::Span<const RunnerEntry> entries) = 0;
  // REQUIRES: slot started.
  virtual int64_t n_past(int slot) const = 0;
  virtual int64_t capacity(int slot) const = 0;  // positions the slot holds
  // Bytes of per-sequence state held now, and what slots() sequences at the
  // full context take (the KV-cache gauges).
  virtual uint64_t state_bytes_used() const = 0;
  virtual uint64_t state_bytes_capacity() const = 0;
  // "cpu" or "cuda:<device name>".
  virtual std::string name() const = 0;

  // The prefix cache's copies (prefix_cache.h) of a started slot's state in
  // the runner's own format, so that importing a block is a copy: on the
  // CPU model::SequenceState's f16 rows (memcpy), on the GPU the KV
  // cache's element type (device <-> host copies, cuda::CudaKvCache).
  // Bytes of one position's K/V rows over the attention layers, and of the
  // recurrent layers' state (0 without DeltaNet layers).
  virtual uint64_t kv_bytes_per_position() const = 0;
  virtual uint64_t recurrent_bytes() const = 0;
  // Positions [begin, end) of the slot's K/V (InvalidArgument outside
  // [0, n_past]) and its recurrent state at n_past, appended to *out.
  virtual absl::Status ExportKv(int slot, int64_t begin, int64_t end,
                                std::vector<uint8_t>* out) = 0;
  virtual absl::Status ExportRecurrent(int slot, std::vector<uint8_t>* out) = 0;
  // Writes exported rows at positions [pos, ...) (n_past unchanged), then
  // Resume makes the slot's sequence n positions long with that recurrent
  // state (empty without DeltaNet layers). InvalidArgument for a slot not
  // started, a range outside its capacity or a wrong size.
  virtual absl::Status ImportKv(int slot, int64_t pos, absl::Span<const uint8_t> kv) = 0;
  virtual absl::Status Resume(int slot, int64_t n, absl::Span<const uint8_t> recurrent) = 0;
  // The prefix cache's device tier (prefix_cache.h), on runners whose state
  // is in device memory (has_device_memory()): positions [begin, end) of a
  // started slot's K/V copied into a new device buffer (device to device;
  // InvalidArgument outside [0, n_past], ResourceExhausted over the device
  // budget), exported host rows copied up into one, and such rows written
  // into a slot at [pos, ...) as ImportKv does. The rows hold device memory
  // of this runner and must not outlive it. Unimplemented elsewhere.
  virtual bool has_device_memory() const { return false; }
  virtual absl::StatusOr<DeviceRowsRef> ExportKvDevice(int slot, int64_t begin, int64_t end);
  virtual absl::StatusOr<DeviceRowsRef> UploadKv(absl::Span<const uint8_t> kv);
  virtual absl::Status ImportKvDevice(int slot, int64_t pos, const DeviceRows& kv);
  // Thread-safe (may be called while another thread runs EvalBatch).
  virtual GpuRunnerInfo gpu_info() const { return {}; }
  // The GPU memory plan every device allocation followed (what `moesplit
  // plan` prints for the same options); nullptr on the CPU.
  virtual const plan::MemoryPlan* memory_plan() const { return nullptr; }

 protected:
  absl::Status NoDeviceMemory() const;  // the device-tier methods' answer
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
