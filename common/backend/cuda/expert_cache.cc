#include "common/backend/cuda/expert_cache.h"

#include <algorithm>
#include <array>

#include "absl/strings/str_cat.h"
#include "common/backend/cuda/cuda_status.h"
#include "common/base/status.h"

namespace moesplit::cuda {

namespace {

// gate, up, down of a layer, in slot order.
std::array<const model::ExpertTensorView*, 3> Parts(const model::LayerWeights& L) {
  return {&L.gate_exps, &L.up_exps, &L.down_exps};
}

}  // namespace

absl::Status GpuExpertCache::CheckCopyable(const model::Model& m) {
  for (int l = 0; l < m.n_layer(); ++l) {
    for (const model::ExpertTensorView* v : Parts(m.layer(l))) {
      if (v->data == nullptr) continue;
      if (v->packed) {
        return absl::UnimplementedError(
            "GPU expert cache: the model's experts are in the CPU's packed layout, not GGUF's");
      }
      if (!raw::DeviceSupports(v->type)) {
        return absl::UnimplementedError(absl::StrCat(
            "GPU expert cache: the kernels do not decode ", std::string(GgmlTypeName(v->type))));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status GpuExpertCache::CopyExpert(const model::Model& model, int layer, int expert,
                                        backend::Stream* stream, backend::Buffer& dst,
                                        uint64_t offset) {
  for (const model::ExpertTensorView* v : Parts(model.layer(layer))) {
    RETURN_IF_ERROR(stream->CopyToDevice(dst, offset, v->Expert(expert).data, v->expert_bytes));
    offset += v->expert_bytes;
  }
  return absl::OkStatus();
}

uint64_t GpuExpertCache::ExpertBytes(const model::Model& model, int layer) {
  const model::LayerWeights& L = model.layer(layer);
  return L.gate_exps.expert_bytes + L.up_exps.expert_bytes + L.down_exps.expert_bytes;
}

uint64_t GpuExpertCache::SlotBytes(const model::Model& model) {
  uint64_t b = 0;
  for (int l = 0; l < model.n_layer(); ++l) b = std::max(b, ExpertBytes(model, l));
  return b;
}

GpuExpertCache::Weights GpuExpertCache::WeightsAt(const model::Model& model, int layer,
                                                  int expert, void* base) {
  Weights w;
  uint8_t* p = static_cast<uint8_t*>(base);
  raw::DeviceMatrix* out[3] = {&w.gate, &w.up, &w.down};
  int i = 0;
  for (const model::ExpertTensorView* v : Parts(model.layer(layer))) {
    const quant::WeightView e = v->Expert(expert);
    *out[i++] = {e.type, p, e.n_rows, e.n_cols, e.row_bytes};
    p += v->expert_bytes;
  }
  return w;
}

GpuExpertCache::Weights GpuExpertCache::weights(int layer, int expert) const {
  return WeightsAt(*model_, layer, expert, slot(policy_.Lookup(layer, expert)));
}

absl::StatusOr<std::unique_ptr<GpuExpertCache>> GpuExpertCache::Create(
    backend::Device* device, std::shared_ptr<const model::Model> model,
    const GpuExpertCacheOptions& options) {
  if (device == nullptr || model == nullptr) {
    return absl::InvalidArgumentError("GPU expert cache: needs a device and a model");
  }
  const model::HyperParams& hp = model->hparams();
  if (hp.n_expert < 1) return absl::InvalidArgumentError("GPU expert cache: the model has no experts");
  RETURN_IF_ERROR(CheckCopyable(*model));
  model::ExpertCacheOptions po;
  po.n_layer = model->n_layer();
  po.n_expert = static_cast<int>(hp.n_expert);
  po.n_slots = std::min<int64_t>(options.n_slots, int64_t{po.n_layer} * po.n_expert);
  po.decay = options.decay;
  po.prefetch_credit = options.prefetch_credit;
  for (int l = 0; l < po.n_layer; ++l) po.expert_bytes.push_back(ExpertBytes(*model, l));
  ASSIGN_OR_RETURN(model::ExpertCache policy, model::ExpertCache::Create(po));
  GpuExpertCacheOptions o = options;
  o.n_slots = po.n_slots;
  const model::Model& m = *model;
  std::unique_ptr<GpuExpertCache> c(new GpuExpertCache(std::move(model), std::move(policy), o));
  c->device_ = device;
  c->slot_bytes_ = SlotBytes(m);
  c->n_ff_ = hp.n_ff_exp;
  if (o.n_slots > 0) {
    if (c->slot_bytes_ == 0) return absl::InvalidArgumentError("GPU expert cache: empty experts");
    if (static_cast<uint64_t>(o.n_slots) > (uint64_t{1} << 50) / c->slot_bytes_) {
      return absl::ResourceExhaustedError(absl::StrCat("GPU expert cache: ", o.n_slots, " slots"));
    }
    ASSIGN_OR_RETURN(c->slots_, device->Allocate(c->slot_bytes_ * o.n_slots));
  }
  ASSIGN_OR_RETURN(c->copy_, device->CreateStream());
  c->ready_.resize(m.n_layer());
  for (auto& e : c->ready_) {
    ASSIGN_OR_RETURN(e, device->CreateEvent());
  }
  c->want_.assign(m.n_layer(), 0);
  c->waited_.assign(m.n_layer(), 0);
  ASSIGN_OR_RETURN(c->copies_, device->CreateEvent());
  GpuExpertCache* self = c.get();
  c->uploader_ = std::thread([self] { self->UploaderLoop(); });
  c->Publish();
  return c;
}

absl::Status GpuExpertCache::Preload(absl::Span<const ExpertKey> resident) {
  const int64_t n_expert = policy_.n_expert();
  std::vector<bool> seen(static_cast<size_t>(policy_.n_layer()) * n_expert, false);
  for (const ExpertKey& k : resident) {
    if (k.layer < 0 || k.layer >= policy_.n_layer() || k.expert < 0 || k.expert >= n_expert) {
      return absl::InvalidArgumentError(
          absl::StrCat("expert (", k.layer, ", ", k.expert, ") is not in the model"));
    }
    if (seen[k.layer * n_expert + k.expert] || Resident(k.layer, k.expert)) {
      return absl::InvalidArgumentError(
          absl::StrCat("expert (", k.layer, ", ", k.expert, ") listed twice"));
    }
    seen[k.layer * n_expert + k.expert] = true;
  }
  if (static_cast<int64_t>(resident.size()) > options_.n_slots - policy_.resident()) {
    return absl::InvalidArgumentError(absl::StrCat("preloading ", resident.size(),
                                                   " experts into ", options_.n_slots -
                                                   policy_.resident(), " free slots"));
  }
  // Free slots admit every miss (checked above: enough of them), so one
  // Access per key places it; then the copies.
  std::vector<model::ExpertAdmission> all;
  for (const ExpertKey& k : resident) {
    std::vector<model::ExpertAdmission> admitted;
    const int32_t id[1] = {k.expert};
    RETURN_IF_ERROR(policy_.Access(k.layer, id, &admitted));
    all.insert(all.end(), admitted.begin(), admitted.end());
  }
  RETURN_IF_ERROR(UploadAdmissions(all));
  RETURN_IF_ERROR(WaitIssued(queued_seq_));
  RETURN_IF_ERROR(copy_->Synchronize());
  // The preload is not traffic: counters start at zero.
  policy_.ResetStats();
  policy_.EndStep();
  Publish();
  return absl::OkStatus();
}

GpuExpertCache::~GpuExpertCache() {
  if (uploader_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(qmu_);
      stop_ = true;
    }
    qcv_.notify_all();
    uploader_.join();
  }
  if (copy_ != nullptr) copy_->Synchronize().IgnoreError();
}

void GpuExpertCache::UploaderLoop() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(qmu_);
      qcv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and nothing left
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    absl::Status st;
    {
      std::lock_guard<std::mutex> lock(qmu_);
      st = upload_error_;
    }
    // After a failure nothing more is copied (the error is reported to the
    // forward at its next call); the jobs are still marked issued.
    if (st.ok()) {
      std::vector<bool> touched(ready_.size(), false);
      for (const model::ExpertAdmission& a : job.admitted) {
        if (st.ok()) {
          st = CopyExpert(*model_, a.layer, a.expert, copy_.get(), *slots_,
                          static_cast<uint64_t>(a.slot) * slot_bytes_);
        }
        touched[a.layer] = true;
      }
      for (size_t l = 0; l < touched.size() && st.ok(); ++l) {
        if (touched[l]) st = copy_->Record(*ready_[l]);
      }
    }
    {
      std::lock_guard<std::mutex> lock(qmu_);
      if (!st.ok() && upload_error_.ok()) upload_error_ = st;
      issued_seq_ = job.seq;
    }
    qcv_.notify_all();
  }
}

absl::Status GpuExpertCache::WaitIssued(uint64_t seq) {
  std::unique_lock<std::mutex> lock(qmu_);
  qcv_.wait(lock, [&] { return issued_seq_ >= seq; });
  return upload_error_;
}

absl::Status GpuExpertCache::WaitReady(int layer, backend::Stream* compute) {
  if (layer < 0 || layer >= static_cast<int>(want_.size()) || want_[layer] <= waited_[layer]) {
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(WaitIssued(want_[layer]));
  waited_[layer] = want_[layer];
  return compute->Wait(*ready_[layer]);
}

absl::Status GpuExpertCache::OrderAfterUploads(backend::Stream* compute) {
  RETURN_IF_ERROR(WaitIssued(queued_seq_));
  // The uploader is idle now (only this thread queues): its stream is ours.
  RETURN_IF_ERROR(copy_->Record(*copies_));
  return compute->Wait(*copies_);
}

absl::Status GpuExpertCache::Access(int layer, absl::Span<const int32_t> experts,
                                    std::vector<model::ExpertAdmission>* admitted) {
  admitted->clear();
  return policy_.Access(layer, experts, admitted);
}

absl::Status GpuExpertCache::Prefetch(int layer, absl::Span<const int32_t> experts) {
  std::vector<model::ExpertAdmission> admitted;
  RETURN_IF_ERROR(policy_.Prefetch(layer, experts, &admitted));
  return UploadAdmissions(admitted);
}

void GpuExpertCache::EndStep() {
  policy_.EndStep();
  Publish();
}

absl::Status GpuExpertCache::UploadAdmissions(
    absl::Span<const model::ExpertAdmission> admitted) {
  if (admitted.empty()) return absl::OkStatus();
  Job job;
  job.admitted.assign(admitted.begin(), admitted.end());
  {
    std::lock_guard<std::mutex> lock(qmu_);
    RETURN_IF_ERROR(upload_error_);
    job.seq = ++queued_seq_;
    for (const model::ExpertAdmission& a : admitted) want_[a.layer] = job.seq;
    queue_.push_back(std::move(job));
  }
  qcv_.notify_all();
  return absl::OkStatus();
}

absl::Status GpuExpertCache::CopyFromDevice(int layer, int expert, const void* src,
                                            backend::Stream* stream) {
  const int64_t s = policy_.Lookup(layer, expert);
  if (s < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("expert (", layer, ", ", expert, ") has no slot to fill"));
  }
  RETURN_IF_CUDA_ERROR(
      raw::MemcpyAsync(slot(s), src, ExpertBytes(*model_, layer), 2, stream->native()));
  return absl::OkStatus();
}

void GpuExpertCache::Publish() {
  GpuExpertCacheSnapshot s;
  s.stats = policy_.stats();
  s.n_slots = options_.n_slots;
  s.slot_bytes = slot_bytes_;
  s.resident_per_layer.resize(policy_.n_layer());
  for (int l = 0; l < policy_.n_layer(); ++l) s.resident_per_layer[l] = policy_.resident_in_layer(l);
  std::lock_guard<std::mutex> lock(mu_);
  published_ = std::move(s);
}

GpuExpertCacheSnapshot GpuExpertCache::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return published_;
}

}  // namespace moesplit::cuda
