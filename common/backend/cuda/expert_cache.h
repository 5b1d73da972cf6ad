// GpuExpertCache: the hot-expert cache's storage on the device. A fixed pool
// of slots (each sized for the largest routed expert of the model: gate + up
// + down in their GGUF formats) and the frequency-aware policy that decides
// which (layer, expert) occupies them (model::ExpertCache: decayed LFU,
// admission by score, pinning within a step, prefetch credit). CudaForward
// drives it once per MoE layer and step:
//
//   1. ResidentNow(layer, e): the experts whose weights are on the device
//      (hits are computed on the GPU, the rest go to the ExpertBackend);
//   2. WaitReady(layer, compute): the compute stream waits for the copies
//      of the layer's slots that are still in flight;
//   3. Access(layer, routed ids): the policy counts hits and misses and
//      admits missed experts that now win a slot; their weights are copied
//      host -> device (UploadAdmissions) unless the caller has them on the
//      device already (streamed prefill: CopyFromDevice on the compute
//      stream). Uploads are issued by the cache's own uploader thread on its
//      own copy stream: from pageable memory cudaMemcpyAsync blocks the
//      issuing thread while it stages the bytes, so the forward's thread
//      never issues them and goes on (CPU experts, next layers);
//   4. Prefetch(layer + 1, predicted ids): the same for the next layer's
//      predicted experts (its router applied to this layer's hidden state);
//   5. EndStep() after the step: the policy decays and unpins.
//
// Hazards: a slot is only ever overwritten for an expert the policy admits,
// and the policy never evicts an expert touched in the current step (pinned),
// while CudaForward synchronises its compute stream at the start of every
// step: no kernel in flight reads a slot that a copy overwrites. A copy into
// a slot of layer l is followed by an event that the compute stream waits
// for before it next computes layer l (WaitReady waits on the host until the
// uploader has issued that copy, then orders the compute stream after it).
// Before the compute stream writes a slot itself (CopyFromDevice), the
// caller calls OrderAfterUploads: every upload issued so far (possibly to
// the same slot for an earlier occupant) comes first.
//
// Host source: the model's expert tensors (the GGUF mapping, or any host
// view with the GGUF layout). Copies from pageable memory are slower than
// from page-locked memory; CudaForward page-locks the source when asked
// (HostRegistration, cuda_backend.h).
//
// Errors: InvalidArgument for a key outside the model or a repeated key;
// RESOURCE_EXHAUSTED (nothing kept) when the device's budget or memory runs
// out. Thread-safety: one thread drives a cache (the forward's); Snapshot()
// may be called from any thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/backend/backend.h"
#include "common/backend/cuda/internal/cuda_raw.h"
#include "common/model/expert_cache.h"
#include "common/model/model.h"

namespace moesplit::cuda {

struct ExpertKey {
  int layer = 0;
  int expert = 0;
};

struct GpuExpertCacheOptions {
  int64_t n_slots = 0;           // experts the device holds (>= 0)
  double decay = 0.99;           // the policy's per-step score decay, in (0, 1]
  double prefetch_credit = 0.5;  // score a prediction adds (>= 0)
  bool prefetch = true;          // whether CudaForward predicts the next layer
};

// What the metrics need, copied under a lock (Snapshot).
struct GpuExpertCacheSnapshot {
  model::ExpertCacheStats stats;
  std::vector<int64_t> resident_per_layer;
  int64_t n_slots = 0;
  uint64_t slot_bytes = 0;
};

class GpuExpertCache {
 public:
  // An empty cache of options.n_slots slots. InvalidArgument for bad
  // options; RESOURCE_EXHAUSTED when the slots do not fit the device.
  static absl::StatusOr<std::unique_ptr<GpuExpertCache>> Create(
      backend::Device* device, std::shared_ptr<const model::Model> model,
      const GpuExpertCacheOptions& options);
  ~GpuExpertCache();

  // Device bytes of one expert (gate + up + down) of `layer`, and of a slot
  // (the largest layer's).
  static uint64_t ExpertBytes(const model::Model& model, int layer);
  static uint64_t SlotBytes(const model::Model& model);

  // Whether (layer, expert) occupies a slot (its copy may still be in flight:
  // WaitReady orders the compute stream after it).
  bool Resident(int layer, int expert) const {
    return layer >= 0 && layer < policy_.n_layer() && expert >= 0 &&
           expert < policy_.n_expert() && policy_.Lookup(layer, expert) >= 0;
  }
  struct Weights {
    raw::DeviceMatrix gate, up, down;
  };
  // REQUIRES: Resident(layer, expert).
  Weights weights(int layer, int expert) const;
  // OK when every routed expert of `model` can be copied to the device as it
  // is (GGUF layout, a format the kernels decode); Unimplemented naming why.
  // (The experts' biases live with the CUDA forward's dense weights.)
  static absl::Status CheckCopyable(const model::Model& model);
  // Queues the copy of (layer, expert)'s gate, up and down from the model's
  // host tensors into `dst` at `offset` (WeightsAt's layout) on `stream`.
  static absl::Status CopyExpert(const model::Model& model, int layer, int expert,
                                 backend::Stream* stream, backend::Buffer& dst, uint64_t offset);
  // The device matrices of (layer, expert) laid out at `base` (a slot or a
  // staging buffer of SlotBytes).
  static Weights WeightsAt(const model::Model& model, int layer, int expert, void* base);

  // Puts `resident` into free slots now (uploaded before it returns; the
  // policy then treats them as any resident: a warm start, or a fixed
  // placement for tests and benchmarks). InvalidArgument (nothing changed)
  // for a key outside the model, a key listed twice or already resident, or
  // more keys than free slots.
  absl::Status Preload(absl::Span<const ExpertKey> resident);

  // Steps 2-5 of the file comment. `on_device`, when given, says which of
  // the admitted experts the caller holds in device memory already (their
  // slots are then filled by CopyFromDevice, not from the host).
  absl::Status WaitReady(int layer, backend::Stream* compute);
  absl::Status Access(int layer, absl::Span<const int32_t> experts,
                      std::vector<model::ExpertAdmission>* admitted);
  absl::Status Prefetch(int layer, absl::Span<const int32_t> experts);
  void EndStep();

  // Copies the host weights of each admission into its slot on the copy
  // stream and marks the layer for WaitReady.
  absl::Status UploadAdmissions(absl::Span<const model::ExpertAdmission> admitted);
  // Orders `compute` after every upload queued so far (waits on the host
  // until the uploader has issued them). Call before CopyFromDevice.
  absl::Status OrderAfterUploads(backend::Stream* compute);
  // Fills the slot of an admitted (layer, expert) from `src` (SlotBytes of
  // device memory holding that expert at WeightsAt's layout), on `stream`.
  absl::Status CopyFromDevice(int layer, int expert, const void* src, backend::Stream* stream);

  const model::ExpertCache& policy() const { return policy_; }
  const GpuExpertCacheOptions& options() const { return options_; }
  int64_t n_resident() const { return policy_.resident(); }
  int64_t n_resident(int layer) const {
    return layer >= 0 && layer < policy_.n_layer() ? policy_.resident_in_layer(layer) : 0;
  }
  // Device bytes of the slots.
  uint64_t bytes() const { return slot_bytes_ * static_cast<uint64_t>(options_.n_slots); }
  uint64_t slot_bytes() const { return slot_bytes_; }
  int64_t n_ff() const { return n_ff_; }
  // Thread-safe copy of the counters and the residency (for metrics).
  GpuExpertCacheSnapshot Snapshot() const;

 private:
  GpuExpertCache(std::shared_ptr<const model::Model> model, model::ExpertCache policy,
                 const GpuExpertCacheOptions& options)
      : model_(std::move(model)), policy_(std::move(policy)), options_(options) {}
  uint8_t* slot(int64_t s) const { return static_cast<uint8_t*>(slots_->data()) + s * slot_bytes_; }
  void Publish();
  // The uploader thread: issues the copies of queued admissions in order.
  void UploaderLoop();
  // Waits until the uploader has issued job `seq`; its first error if any.
  absl::Status WaitIssued(uint64_t seq);

  std::shared_ptr<const model::Model> model_;
  model::ExpertCache policy_;
  GpuExpertCacheOptions options_;
  backend::Device* device_ = nullptr;
  uint64_t slot_bytes_ = 0;
  int64_t n_ff_ = 0;
  std::unique_ptr<backend::Buffer> slots_;
  std::unique_ptr<backend::Stream> copy_;               // the uploader's (and OrderAfterUploads')
  std::vector<std::unique_ptr<backend::Event>> ready_;  // per layer, recorded by the uploader
  std::unique_ptr<backend::Event> copies_;              // OrderAfterUploads' mark
  // Forward thread only: per layer, the last upload job touching it and the
  // last one the compute stream was ordered after.
  std::vector<uint64_t> want_, waited_;
  // The uploader's queue (guarded by qmu_).
  struct Job {
    uint64_t seq = 0;
    std::vector<model::ExpertAdmission> admitted;
  };
  std::mutex qmu_;
  std::condition_variable qcv_;
  std::deque<Job> queue_;
  uint64_t queued_seq_ = 0, issued_seq_ = 0;
  absl::Status upload_error_;
  bool stop_ = false;
  std::thread uploader_;
  mutable std::mutex mu_;
  GpuExpertCacheSnapshot published_;                    // guarded by mu_
};

}  // namespace moesplit::cuda
