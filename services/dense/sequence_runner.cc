#include "services/dense/sequence_runner.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "common/plan/memory_plan.h"

#if MOESPLIT_HAVE_CUDA
#include "common/backend/cuda/cuda_backend.h"
#include "common/backend/cuda/cuda_device.h"
#include "common/backend/cuda/cuda_forward.h"
#endif

namespace moesplit::dense {
namespace {

// InvalidArgument for a slot outside [0, n), not started or listed twice.
absl::Status CheckSlots(absl::Span<const RunnerEntry> entries, const std::vector<bool>& started) {
  const int n = static_cast<int>(started.size());
  std::vector<bool> seen(n, false);
  for (const RunnerEntry& e : entries) {
    if (e.slot < 0 || e.slot >= n) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence slot ", e.slot, " outside [0, ", n, ")"));
    }
    if (!started[e.slot]) {
      return absl::InvalidArgumentError(absl::StrCat("sequence slot ", e.slot, " is not started"));
    }
    if (seen[e.slot]) {
      return absl::InvalidArgumentError(absl::StrCat("sequence slot ", e.slot, " listed twice"));
    }
    seen[e.slot] = true;
  }
  return absl::OkStatus();
}

// The checks Start shares on both backends.
absl::Status CheckStart(int slot, int64_t positions, const std::vector<bool>& started,
                        int64_t n_ctx) {
  if (slot < 0 || slot >= static_cast<int>(started.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence slot ", slot, " outside [0, ", started.size(), ")"));
  }
  if (started[slot]) {
    return absl::FailedPreconditionError(absl::StrCat("sequence slot ", slot, " is in use"));
  }
  if (positions < 1 || positions > n_ctx) {
    return absl::InvalidArgumentError(
        absl::StrCat("a sequence of ", positions, " positions; the context holds 1 .. ", n_ctx));
  }
  return absl::OkStatus();
}

absl::Status CheckStarted(int slot, const std::vector<bool>& started) {
  if (slot < 0 || slot >= static_cast<int>(started.size()) || !started[slot]) {
    return absl::InvalidArgumentError(absl::StrCat("sequence slot ", slot, " is not started"));
  }
  return absl::OkStatus();
}

// The prefix-cache copies over a slot's state, alike for model::SequenceState
// and cuda::CudaKvCache (`State` is either).
template <typename State>
absl::Status ExportKvOf(const State& st, int64_t begin, int64_t end, std::vector<uint8_t>* out) {
  if (begin < 0 || begin > end || end > st.n_past()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot export positions [", begin, ", ", end,
                                                   ") of a sequence of ", st.n_past()));
  }
  const size_t at = out->size();
  out->resize(at + st.kv_bytes_per_position() * static_cast<uint64_t>(end - begin));
  absl::Status s = st.ExportKv(begin, end, out->data() + at);
  if (!s.ok()) out->resize(at);
  return s;
}

template <typename State>
absl::Status ExportRecurrentOf(const State& st, std::vector<uint8_t>* out) {
  const size_t at = out->size();
  out->resize(at + st.recurrent_bytes());
  if constexpr (std::is_void_v<decltype(st.ExportRecurrent(out->data()))>) {
    st.ExportRecurrent(out->data() + at);
    return absl::OkStatus();
  } else {
    absl::Status s = st.ExportRecurrent(out->data() + at);
    if (!s.ok()) out->resize(at);
    return s;
  }
}

class CpuRunner final : public SequenceRunner {
 public:
  CpuRunner(std::unique_ptr<model::Forward> f, int slots, int64_t n_ctx, int64_t max_step)
      : forward_(std::move(f)), n_ctx_(n_ctx), max_step_(max_step), states_(slots), started_(slots, false) {}
  int slots() const override { return static_cast<int>(states_.size()); }
  absl::Status Start(int slot, int64_t positions) override {
    RETURN_IF_ERROR(CheckStart(slot, positions, started_, n_ctx_));
    ASSIGN_OR_RETURN(states_[slot],
                     model::SequenceState::Create(forward_->model().hparams(), positions, max_step_));
    started_[slot] = true;
    used_ += states_[slot]->bytes();
    return absl::OkStatus();
  }
  void Release(int slot) override {
    if (slot < 0 || slot >= slots() || !started_[slot]) return;
    used_ -= states_[slot]->bytes();
    states_[slot].reset();
    started_[slot] = false;
  }
  absl::Status EvalBatch(absl::Span<const RunnerEntry> entries) override {
    RETURN_IF_ERROR(CheckSlots(entries, started_));
    std::vector<model::SequenceBatch> b;
    for (const RunnerEntry& e : entries) {
      b.push_back({states_[e.slot].get(), e.tokens, e.mode, e.logits});
    }
    return forward_->EvalBatch(b);
  }
  int64_t n_past(int slot) const override { return states_[slot]->n_past(); }
  int64_t capacity(int slot) const override { return states_[slot]->n_ctx(); }
  uint64_t state_bytes_used() const override { return used_; }
  uint64_t state_bytes_capacity() const override {
    return model::SequenceState::BytesFor(forward_->model().hparams(), n_ctx_, max_step_) * slots();
  }
  std::string name() const override { return "cpu"; }
  uint64_t kv_bytes_per_position() const override {
    return model::SequenceState::KvBytesPerPosition(forward_->model().hparams());
  }
  uint64_t recurrent_bytes() const override {
    return model::SequenceState::RecurrentBytes(forward_->model().hparams());
  }
  absl::Status ExportKv(int slot, int64_t begin, int64_t end,
                        std::vector<uint8_t>* out) override {
    RETURN_IF_ERROR(CheckStarted(slot, started_));
    return ExportKvOf(*states_[slot], begin, end, out);
  }
  absl::Status ExportRecurrent(int slot, std::vector<uint8_t>* out) override {
    RETURN_IF_ERROR(CheckStarted(slot, started_));
    return ExportRecurrentOf(*states_[slot], out);
  }
  absl::Status ImportKv(int slot, int64_t pos, absl::Span<const uint8_t> kv) override {
    RETURN_IF_ERROR(CheckStarted(slot, started_));
    return states_[slot]->ImportKv(pos, kv.data(), kv.size());
  }
  absl::Status Resume(int slot, int64_t n, absl::Span<const uint8_t> recurrent) override {
    RETURN_IF_ERROR(CheckStarted(slot, started_));
    return states_[slot]->Resume(n, recurrent.data(), recurrent.size());
  }

 private:
  std::unique_ptr<model::Forward> forward_;
  const int64_t n_ctx_;
  const int64_t max_step_;
  std::vector<std::unique_ptr<model::SequenceState>> states_;
  std::vector<bool> started_;
  std::atomic<uint64_t> used_{0};
};

#if MOESPLIT_HAVE_CUDA
// Prefix-cache rows in the runner's device memory (SequenceRunner::ExportKvDevice).
class CudaDeviceRows final : public DeviceRows {
 public:
  CudaDeviceRows(backend::Device* device, std::unique_ptr<backend::Buffer> buffer)
      : device_(device), buffer_(std::move(buffer)) {}
  uint64_t bytes() const override { return buffer_->size(); }
  absl::StatusOr<std::vector<uint8_t>> ToHost() const override {
    std::vector<uint8_t> out(bytes());
    ASSIGN_OR_RETURN(auto stream, device_->CreateStream());
    RETURN_IF_ERROR(stream->CopyToHost(out.data(), *buffer_, 0, out.size()));
    RETURN_IF_ERROR(stream->Synchronize());
    return out;
  }
  uint8_t* data() const { return static_cast<uint8_t*>(buffer_->data()); }
  backend::Buffer& buffer() { return *buffer_; }

 private:
  backend::Device* device_;
  std::unique_ptr<backend::Buffer> buffer_;
};

class CudaRunner final : public SequenceRunner {
 public:
  CudaRunner(std::unique_ptr<backend::Device> d, std::unique_ptr<cuda::CudaForward> f,
             std::vector<std::unique_ptr<cuda::CudaKvCache>> c,
             std::shared_ptr<cuda::GpuExpertCache> ec, GpuRunnerInfo info)
      : device_(std::move(d)),
        forward_(std::move(f)),
        caches_(std::move(c)),
        started_(caches_.size(), false),
        expert_cache_(std::move(ec)),
        info_(std::move(info)) {}
  ~CudaRunner() override {
    caches_.clear();
    forward_.reset();
    expert_cache_.reset();
  }
  int slots() const override { return static_cast<int>(caches_.size()); }
  absl::Status Start(int slot, int64_t positions) override {
    RETURN_IF_ERROR(CheckStart(slot, positions, started_, caches_[0]->n_ctx()));
    caches_[slot]->Clear();
    started_[slot] = true;
    used_ += caches_[slot]->bytes();
    return absl::OkStatus();
  }
  void Release(int slot) override {
    if (slot < 0 || slot >= slots() || !started_[slot]) return;
    started_[slot] = false;
    used_ -= caches_[slot]->bytes();
  }
  absl::Status EvalBatch(absl::Span<const RunnerEntry> entries) override {
    RETURN_IF_ERROR(CheckSlots(entries, started_));
    std::vector<cuda::CudaSequenceBatch> b;
    for (const RunnerEntry& e : entries) {
      b.push_back({caches_[e.slot].get(), e.tokens, e.mode, e.logits});
    }
    return forward_->EvalBatch(b);
  }
  int64_t n_past(int slot) const override { return caches_[slot]->n_past(); }
  int64_t capacity(int slot) const override { return caches_[slot]->n_ctx(); }
  uint64_t state_bytes_used() const override { return used_; }
  uint64_t state_bytes_capacity() const override {
    return caches_.empty() ? 0 : caches_[0]->bytes() * caches_.size();
  }
  std::string name() const override { return "cuda:" + device_->name(); }
  uint64_t kv_bytes_per_position() const override { return caches_[0]->kv_bytes_per_position(); }
  uint64_t recurrent_bytes() const override { return caches_[0]->recurrent_bytes(); }
  absl::Status ExportKv(int slot, int64_t begin, int64_t end,
                        std::vector<uint8_t>* out) override {
    RETURN_IF_ERROR(CheckStarted(slot, started_));
    return ExportKvOf(*caches_[slot], begin, end, out);
  }
  absl::Status ExportRecurrent(int slot, std::vector<uint8_t>* out) override {
    RETURN_IF_ERROR(CheckStarted(slot, started_));
    return ExportRecurrentOf(*caches_[slot], out);
  }
  absl::Status ImportKv(int slot, int64_t pos, absl::Span<const uint8_t> kv) override {
    RETURN_IF_ERROR(CheckStarted(slot, started_));
    return caches_[slot]->ImportKv(pos, kv.data(), kv.size());
  }
  absl::Status Resume(int slot, int64_t n, absl::Span<const uint8_t> recurrent) override {
    RETURN_IF_ERROR(CheckStarted(slot, started_));
    return caches_[slot]->Resume(n, recurrent.data(), recurrent.size());
  }
  bool has_device_memory() const override { return true; }
  absl::StatusOr<DeviceRowsRef> ExportKvDevice(int slot, int64_t begin, int64_t end) override {
    RETURN_IF_ERROR(CheckStarted(slot, started_));
    RETURN_IF_ERROR(caches_[slot]->CheckExport(begin, end));
    ASSIGN_OR_RETURN(auto rows, NewRows(kv_bytes_per_position() * static_cast<uint64_t>(end - begin)));
    RETURN_IF_ERROR(caches_[slot]->ExportKvToDevice(begin, end, rows->data()));
    return rows;
  }
  absl::StatusOr<DeviceRowsRef> UploadKv(absl::Span<const uint8_t> kv) override {
    ASSIGN_OR_RETURN(auto rows, NewRows(kv.size()));
    ASSIGN_OR_RETURN(auto stream, device_->CreateStream());
    RETURN_IF_ERROR(stream->CopyToDevice(rows->buffer(), 0, kv.data(), kv.size()));
    RETURN_IF_ERROR(stream->Synchronize());
    return rows;
  }
  absl::Status ImportKvDevice(int slot, int64_t pos, const DeviceRows& kv) override {
    RETURN_IF_ERROR(CheckStarted(slot, started_));
    const auto* rows = dynamic_cast<const CudaDeviceRows*>(&kv);
    if (rows == nullptr) {
      return absl::InvalidArgumentError("prefix-cache rows not in this runner's device memory");
    }
    return caches_[slot]->ImportKvFromDevice(pos, rows->data(), rows->bytes());
  }
  const plan::MemoryPlan* memory_plan() const override { return &forward_->plan(); }
  GpuRunnerInfo gpu_info() const override {
    GpuRunnerInfo info = info_;
    if (expert_cache_ != nullptr) {
      cuda::GpuExpertCacheSnapshot snap = expert_cache_->Snapshot();
      info.cache_stats = snap.stats;
      info.resident_per_layer = std::move(snap.resident_per_layer);
    }
    return info;
  }

 private:
  std::unique_ptr<backend::Device> device_;
  std::unique_ptr<cuda::CudaForward> forward_;
  std::vector<std::unique_ptr<cuda::CudaKvCache>> caches_;
  std::vector<bool> started_;
  std::atomic<uint64_t> used_{0};
  std::shared_ptr<cuda::GpuExpertCache> expert_cache_;
  const GpuRunnerInfo info_;  // the fields fixed at start-up

  absl::StatusOr<std::shared_ptr<CudaDeviceRows>> NewRows(uint64_t bytes) {
    if (bytes == 0) return absl::InvalidArgumentError("no prefix-cache rows to hold");
    ASSIGN_OR_RETURN(auto buffer, device_->Allocate(bytes));
    return std::make_shared<CudaDeviceRows>(device_.get(), std::move(buffer));
  }
};

absl::StatusOr<std::unique_ptr<SequenceRunner>> MakeCuda(
    std::shared_ptr<const model::Model> model, model::ExpertBackend* experts,
    const RunnerOptions& o) {
  ASSIGN_OR_RETURN(auto device, cuda::CreateCudaDevice(0));
  // The memory plan, once: n_parallel sequence states, the workspace for
  // micro-batches of the engine's step, the dense weights, the margin and
  // the prefix cache's device tier must fit the budget (its refusal says by
  // how much and what would fit); the hot-expert cache gets the rest. Every
  // allocation below follows it, and metrics, logs and GetModel print it.
  plan::PlanOptions po;
  po.budget_bytes = o.gpu_memory;
  if (po.budget_bytes == 0) {
    ASSIGN_OR_RETURN(const backend::MemoryInfo mem, device->Memory());
    po.budget_bytes = mem.free_bytes;
  }
  po.n_ctx = o.n_ctx;
  po.n_parallel = o.n_parallel;
  po.n_ubatch = std::min<int64_t>(o.max_step, plan::kGpuMaxMicroBatch);
  po.prefix_cache_device_bytes = o.prefix_cache_device;
  po.expert_cache_slots = o.expert_cache_slots;
  ASSIGN_OR_RETURN(po.kv_type, plan::ParseKvType(o.kv_type));
  auto memory_plan = plan::PlanMemory(plan::ShapeOfModel(*model), po);
  if (memory_plan.status().code() == absl::StatusCode::kResourceExhausted) {
    return absl::ResourceExhaustedError(
        absl::StrCat("GPU memory plan does not fit: ", memory_plan.status().message()));
  }
  RETURN_IF_ERROR(memory_plan.status());
  cuda::CudaForwardOptions co;
  co.pin_expert_source = o.pin_experts;
  if (o.prefill_stream_min_tokens > 0) co.stream_min_tokens = o.prefill_stream_min_tokens;
  ASSIGN_OR_RETURN(cuda::GpuDense gpu,
                   cuda::AllocateGpuDense(model, experts, device.get(), *memory_plan, co));
  cuda::CudaForward* forward = gpu.forward.get();
  GpuRunnerInfo info;
  // Streamed prefill: the switch-over measured here unless configured.
  if (o.prefill_stream_min_tokens < 0) {
    auto sw = forward->MeasurePrefillSwitch(std::min<int64_t>(256, memory_plan->options.n_ubatch));
    if (sw.ok()) {
      const plan::PrefillRates& r = forward->prefill_rates();
      info.stream_note = absl::StrCat(
          "measured: host->device ", absl::SixDigits(r.h2d_bytes_per_s / 1e9), " GB/s, GPU ",
          absl::SixDigits(r.gpu_flops_per_s / 1e12), " TFLOP/s, experts on the CPU ",
          absl::SixDigits(r.cpu_tokens_per_s), " tokens/s");
    } else {
      info.stream_note = absl::StrCat("off: ", sw.status().message());
    }
  } else {
    info.stream_note = o.prefill_stream_min_tokens == 0 ? "off (configured)" : "configured";
  }
  info.stream_min_tokens = forward->stream_min_tokens();
  if (gpu.expert_cache != nullptr) {
    info.expert_cache = true;
    info.cache_slots = gpu.expert_cache->options().n_slots;
    info.cache_bytes = gpu.expert_cache->bytes();
  }
  return std::unique_ptr<SequenceRunner>(
      new CudaRunner(std::move(device), std::move(gpu.forward), std::move(gpu.states),
                     std::move(gpu.expert_cache), std::move(info)));
}
#endif

}  // namespace

absl::StatusOr<DeviceRowsRef> SequenceRunner::ExportKvDevice(int, int64_t, int64_t) {
  return NoDeviceMemory();
}
absl::StatusOr<DeviceRowsRef> SequenceRunner::UploadKv(absl::Span<const uint8_t>) {
  return NoDeviceMemory();
}
absl::Status SequenceRunner::ImportKvDevice(int, int64_t, const DeviceRows&) {
  return NoDeviceMemory();
}
absl::Status SequenceRunner::NoDeviceMemory() const {
  return absl::UnimplementedError(
      absl::StrCat("the ", name(), " runner keeps no state in device memory"));
}

bool HaveCudaBackend() { return MOESPLIT_HAVE_CUDA != 0; }

GpuMemoryUse QueryGpuMemory() {
  GpuMemoryUse use;
#if MOESPLIT_HAVE_CUDA
  const std::vector<cuda::DeviceInfo> devices = cuda::ListDevices();
  if (!devices.empty()) {
    use.total = devices[0].total_bytes;
    use.free = devices[0].free_bytes;
    use.used = use.total - std::min(use.total, use.free);
  }
#endif
  return use;
}

absl::StatusOr<std::unique_ptr<SequenceRunner>> CreateSequenceRunner(
    std::shared_ptr<const model::Model> model, model::ExpertBackend* experts, ThreadPool* pool,
    const RunnerOptions& o) {
  if (o.backend != "auto" && o.backend != "cpu" && o.backend != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown backend '", o.backend, "' (auto, cpu or cuda)"));
  }
  if (o.kv_type != "f16" && o.kv_type != "q8_0" && o.kv_type != "q4_0") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown KV type '", o.kv_type, "' (f16, q8_0 or q4_0)"));
  }
  if (o.n_parallel < 1 || o.n_parallel > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("parallel sequences ", o.n_parallel, " not in [1, 1024]"));
  }
  if (o.expert_cache_slots < -1 || o.prefill_stream_min_tokens < -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expert cache slots (", o.expert_cache_slots, ") and the prefill stream threshold (",
        o.prefill_stream_min_tokens, ") must be -1 (automatic), 0 (off) or positive"));
  }
  if (o.backend != "cpu") {
#if MOESPLIT_HAVE_CUDA
    auto gpu = MakeCuda(model, experts, o);
    if (gpu.ok() || o.backend == "cuda") return gpu;
    // auto: fall back to the CPU when there is no usable device (saying why
    // when there is a device but the plan does not fit it).
    if (gpu.status().code() != absl::StatusCode::kUnavailable) {
      std::fprintf(stderr, "moesplit: not using the GPU: %s\n",
                   std::string(gpu.status().message()).c_str());
    }
#else
    if (o.backend == "cuda") {
      return absl::UnavailableError("this build has no CUDA backend (nvcc was not found)");
    }
#endif
  }
  if (o.n_ctx < 1) return absl::InvalidArgumentError(absl::StrCat("context ", o.n_ctx, " < 1"));
  auto forward = std::make_unique<model::Forward>(model, experts, pool);
  if (o.max_step < 1) return absl::InvalidArgumentError(absl::StrCat("step of ", o.max_step, " tokens < 1"));
  return std::unique_ptr<SequenceRunner>(new CpuRunner(std::move(forward), o.n_parallel, o.n_ctx, o.max_step));
}

}  // namespace moesplit::dense
