#include "services/expert_worker/expert_tier.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/base/scratch_buffer.h"
#include "common/base/status.h"
#include "common/quant/packed.h"

namespace moesplit::worker {
namespace {

uint64_t Align64(uint64_t n) { return (n + 63) / 64 * 64; }

const model::ExpertTensorView* TensorOf(const model::LayerWeights& lw, int k) {
  return k == 0 ? &lw.gate_exps : k == 1 ? &lw.up_exps : &lw.down_exps;
}

}  // namespace

// Fixed I/O threads, each with its own staging buffer. Submit() queues a
// read and returns; Run() queues a batch and returns when all of it is done.
// Reads run in the order queued (a call's reads queue behind the hints'
// before it, which are the same layer's).
class ExpertTier::IoQueue {
 public:
  using Task = std::function<void(std::vector<uint8_t>* staging)>;

  explicit IoQueue(int n) {
    for (int i = 0; i < n; ++i) threads_.emplace_back([this] { Loop(); });
  }
  // Drops what is queued, joins the running reads.
  ~IoQueue() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

  void Submit(Task t) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(t));
    }
    cv_.notify_one();
  }

  void Run(std::vector<Task> tasks) {
    if (tasks.empty()) return;
    struct Batch {
      std::mutex mu;
      std::condition_variable cv;
      size_t left = 0;
    } batch;
    batch.left = tasks.size();
    for (auto& t : tasks) {
      Submit([&batch, t = std::move(t)](std::vector<uint8_t>* staging) {
        t(staging);
        std::lock_guard<std::mutex> lock(batch.mu);
        if (--batch.left == 0) batch.cv.notify_all();
      });
    }
    std::unique_lock<std::mutex> lock(batch.mu);
    batch.cv.wait(lock, [&] { return batch.left == 0; });
  }

 private:
  void Loop() {
    std::vector<uint8_t> staging;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      Task t = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      t(&staging);
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

uint64_t ExpertTier::SlotBytes(const model::Model& m, int layer_begin, int layer_end) {
  uint64_t most = 0;
  for (int l = layer_begin; l < layer_end; ++l) {
    const model::LayerWeights& lw = m.layer(l);
    if (lw.gate_exps.data == nullptr) continue;
    uint64_t bytes = 0;
    for (int k = 0; k < 3; ++k) {
      const model::ExpertTensorView* v = TensorOf(lw, k);
      bytes += Align64(model::CopiedExpertBytes(*v, 0, 1, quant::PackedPreferred(v->type)));
    }
    most = std::max(most, bytes);
  }
  return most;
}

absl::StatusOr<std::unique_ptr<ExpertTier>> ExpertTier::Create(
    std::shared_ptr<const model::Model> model, int layer_begin, int layer_end, int expert_begin,
    int expert_end, ThreadPool* pool, TierOptions options) {
  if (layer_begin >= layer_end || expert_begin >= expert_end) {
    return absl::InvalidArgumentError("expert tier: empty layer or expert range");
  }
  std::unique_ptr<ExpertTier> t(new ExpertTier());
  const auto& hp = model->hparams();
  t->layer_begin_ = layer_begin;
  t->layer_end_ = layer_end;
  t->expert_begin_ = expert_begin;
  t->expert_end_ = expert_end;
  t->n_ff_ = hp.n_ff_exp;
  t->d_ = hp.n_embd_experts();  // LatentMoE: the experts' width
  t->slot_bytes_ = SlotBytes(*model, layer_begin, layer_end);
  if (t->slot_bytes_ == 0) {
    return absl::InvalidArgumentError("expert tier: no layer of the shard has routed experts");
  }
  const int n_local = expert_end - expert_begin;
  const int n_keys = (layer_end - layer_begin) * n_local;
  t->n_slots_ = static_cast<int>(
      std::min<uint64_t>(options.budget_bytes / t->slot_bytes_, static_cast<uint64_t>(n_keys)));
  if (t->n_slots_ < 1) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "expert memory budget of ", options.budget_bytes, " bytes holds no expert (one takes ",
        t->slot_bytes_, " bytes)"));
  }
  t->slots_ = AllocateHugePageBytes(static_cast<uint64_t>(t->n_slots_) * t->slot_bytes_);
  if (t->slots_ == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot allocate ", t->n_slots_, " expert slots of ", t->slot_bytes_, " bytes"));
  }
  // Per layer: where each tensor's expert 0 lies on disk and in a slot.
  std::vector<model::LayerExperts> shape;
  for (int l = layer_begin; l < layer_end; ++l) {
    const model::LayerWeights& lw = model->layer(l);
    LayerLayout lay;
    model::LayerExperts le;
    if (lw.gate_exps.data != nullptr) {
      lay.has_experts = true;
      uint64_t at = 0;
      model::ExpertTensorView* sv[3] = {&le.gate, &le.up, &le.down};
      for (int k = 0; k < 3; ++k) {
        const model::ExpertTensorView* v = TensorOf(lw, k);
        lay.pack[k] = quant::PackedPreferred(v->type);
        lay.offset[k] = at;
        at += Align64(model::CopiedExpertBytes(*v, 0, 1, lay.pack[k]));
        ASSIGN_OR_RETURN(const GgufFile::FileLocation loc, model->file().Locate(v->data));
        lay.path[k] = loc.path;
        lay.file_offset[k] = loc.offset;
        *sv[k] = *v;
        sv[k]->n_expert = n_local;  // the shard's experts, for validation only
      }
      t->biases_ = t->biases_ || !lw.gate_exps_b.empty() || !lw.up_exps_b.empty() ||
                   !lw.down_exps_b.empty();
    }
    t->layout_.push_back(lay);
    shape.push_back(std::move(le));
  }
  t->shape_ = std::make_unique<model::ExpertStore>(
      shape, model->n_layer(), static_cast<int>(hp.n_expert), layer_begin, expert_begin,
      hp.n_embd_experts(), hp.n_ff_exp, nullptr, hp.expert_ffn);
  t->compute_ = std::make_unique<model::InProcessExperts>(*t->shape_, pool);
  if (t->biases_) {
    t->gate_b_.assign(static_cast<size_t>(t->n_slots_) * t->n_ff_, 0.0f);
    t->up_b_.assign(static_cast<size_t>(t->n_slots_) * t->n_ff_, 0.0f);
    t->down_b_.assign(static_cast<size_t>(t->n_slots_) * t->d_, 0.0f);
    t->gate_b_ptr_ = t->gate_b_.data();
    t->up_b_ptr_ = t->up_b_.data();
    t->down_b_ptr_ = t->down_b_.data();
  }
  t->policy_ = std::make_unique<ExpertSlotPolicy>(t->n_slots_, n_keys);
  t->state_.assign(t->n_slots_, kInvalid);
  t->prefetched_.assign(t->n_slots_, 0);
  t->reader_ = options.reader ? options.reader : std::make_shared<DirectFileReader>();
  t->io_ = std::make_unique<IoQueue>(std::max(1, options.io_threads));
  t->stats_.n_slots = t->n_slots_;
  t->stats_.slot_bytes = t->slot_bytes_;
  t->model_ = std::move(model);
  return t;
}

ExpertTier::~ExpertTier() {
  io_.reset();  // its reads use the policy and the slots
}

void ExpertTier::Reuse(int slot) {
  if (prefetched_[slot]) {
    prefetched_[slot] = 0;
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++stats_.prefetch_unused;
  }
}

void ExpertTier::Hint(int layer, absl::Span<const int32_t> experts) {
  if (layer < layer_begin_ || layer >= layer_end_ || !layout_[layer - layer_begin_].has_experts) {
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const int32_t e : experts) {
    if (e < expert_begin_ || e >= expert_end_) continue;
    const int key = Key(layer, e);
    if (policy_->SlotOf(key) >= 0) continue;  // resident or on its way
    int evicted;
    const int slot = policy_->Assign(key, &evicted, /*probation_only=*/true);
    if (slot < 0) break;  // every other slot is protected or pinned
    Reuse(slot);
    state_[slot] = kLoading;
    prefetched_[slot] = 1;
    ++prefetches_in_flight_;
    {
      std::lock_guard<std::mutex> s(stats_mu_);
      ++stats_.prefetches;
    }
    io_->Submit([this, slot, layer, e](std::vector<uint8_t>* staging) {
      const absl::Status st = Fill(slot, layer, e, staging);
      std::lock_guard<std::mutex> l(mu_);
      state_[slot] = st.ok() ? kReady : kInvalid;  // invalid: the call that needs it reads it
      policy_->Unpin(slot);
      --prefetches_in_flight_;
      cv_.notify_all();
    });
  }
}

TierStats ExpertTier::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

absl::Status ExpertTier::Fill(int slot, int layer, int expert, std::vector<uint8_t>* staging) {
  const model::LayerWeights& lw = model_->layer(layer);
  const LayerLayout& lay = layout_[layer - layer_begin_];
  uint8_t* dst = slots_.get() + static_cast<uint64_t>(slot) * slot_bytes_;
  const auto start = std::chrono::steady_clock::now();
  uint64_t bytes = 0;
  absl::Status status;
  for (int k = 0; k < 3 && status.ok(); ++k) {
    const model::ExpertTensorView* v = TensorOf(lw, k);
    if (staging->size() < v->expert_bytes) staging->resize(v->expert_bytes);
    status = reader_->Read(lay.path[k], lay.file_offset[k] + expert * v->expert_bytes,
                           v->expert_bytes, staging->data());
    if (!status.ok()) break;
    bytes += v->expert_bytes;
    model::ExpertTensorView src = *v;
    src.data = staging->data();
    src.n_expert = 1;
    model::CopyExperts(src, 0, 1, lay.pack[k], dst + lay.offset[k]);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (status.ok() && biases_) {
    auto copy = [&](const std::vector<float>& from, int64_t width, float* to) {
      if (from.empty()) return;
      std::memcpy(to + static_cast<size_t>(slot) * width,
                  from.data() + static_cast<size_t>(expert) * width, width * sizeof(float));
    };
    copy(lw.gate_exps_b, n_ff_, gate_b_ptr_);
    copy(lw.up_exps_b, n_ff_, up_b_ptr_);
    copy(lw.down_exps_b, d_, down_b_ptr_);
  }
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_.bytes_read += bytes;
  if (!status.ok()) {
    ++stats_.read_errors;
    return status;
  }
  ++stats_.reads;
  stats_.read_seconds += seconds;
  size_t b = 0;
  while (b < kTierReadBuckets.size() && seconds > kTierReadBuckets[b]) ++b;
  ++stats_.read_buckets[b];
  return absl::OkStatus();
}

absl::Status ExpertTier::ComputeInto(const model::ExpertCallView& call, float* partial,
                                     uint64_t* worker_ns) {
  if (worker_ns != nullptr) *worker_ns = 0;
  RETURN_IF_ERROR(model::ValidateExpertCall(call, *shape_));
  std::lock_guard<std::mutex> lock(call_mu_);
  // Runs of whole tokens whose distinct experts fit in the slots.
  const int n_local = expert_end_ - expert_begin_;
  std::vector<uint32_t> seen(n_local, 0);  // run number + 1 that counted the expert
  uint32_t run = 0;
  int t0 = 0;
  while (t0 < call.n_tokens) {
    ++run;
    int distinct = 0, t = t0;
    for (; t < call.n_tokens; ++t) {
      int added = 0;
      for (uint32_t k = call.token_offsets[t]; k < call.token_offsets[t + 1]; ++k) {
        uint32_t& s = seen[call.expert_ids[k] - expert_begin_];
        if (s != run) {
          s = run;
          ++added;
        }
      }
      if (distinct + added > n_slots_) {
        if (t == t0) {
          return absl::ResourceExhaustedError(absl::StrCat(
              "expert call ", call.call_id, ": token ", t, " of layer ", call.layer, " needs ",
              added, " experts but the expert memory holds ", n_slots_,
              " (raise --expert-ram)"));
        }
        break;  // token t starts the next run (its marks are redone there)
      }
      distinct += added;
    }
    RETURN_IF_ERROR(ComputeTokens(call, t0, t, partial + static_cast<size_t>(t0) * call.d));
    t0 = t;
  }
  return absl::OkStatus();
}

absl::Status ExpertTier::ComputeTokens(const model::ExpertCallView& call, int t0, int t1,
                                       float* partial) {
  const uint32_t k0 = call.token_offsets[t0], k1 = call.token_offsets[t1];
  const int n_local = expert_end_ - expert_begin_;
  std::vector<int> slot_of(n_local, -1);
  std::vector<int> pinned;
  std::vector<std::pair<int, int>> reads, waits;  // (slot, expert)
  uint64_t hits = 0, prefetch_used = 0;
  std::unique_lock<std::mutex> lock(mu_);
  auto unpin_all = [&] {
    for (int p : pinned) policy_->Unpin(p);
  };
  for (uint32_t k = k0; k < k1; ++k) {
    const int e = call.expert_ids[k];
    if (slot_of[e - expert_begin_] >= 0) continue;
    const int key = Key(call.layer, e);
    policy_->Touch(key);
    int slot;
    for (;;) {
      slot = policy_->SlotOf(key);
      if (slot >= 0) {  // resident, or being read on a hint
        policy_->Pin(slot);
        if (prefetched_[slot]) {
          prefetched_[slot] = 0;
          ++prefetch_used;
        }
        if (state_[slot] == kLoading) {
          waits.emplace_back(slot, e);
        } else if (state_[slot] == kInvalid) {  // a hint's read failed
          state_[slot] = kLoading;
          reads.emplace_back(slot, e);
        } else {
          ++hits;
        }
        break;
      }
      int evicted;
      slot = policy_->Assign(key, &evicted);
      if (slot >= 0) {
        Reuse(slot);
        state_[slot] = kLoading;
        reads.emplace_back(slot, e);
        break;
      }
      // Every slot is pinned: by this run (which fits) and by hints' reads,
      // whose end frees theirs.
      if (prefetches_in_flight_ == 0) {
        unpin_all();
        return absl::InternalError("expert tier: no free slot");
      }
      cv_.wait(lock);
    }
    slot_of[e - expert_begin_] = slot;
    pinned.push_back(slot);
  }
  // The misses, read in parallel; then the hints' reads this run waits for
  // (one failed is read again here).
  absl::Status failed;
  const uint64_t n_misses = reads.size() + waits.size();  // a hint's read counts as a miss
  for (int round = 0; round < 2 && failed.ok(); ++round) {
    lock.unlock();
    std::vector<absl::Status> status(reads.size());
    std::vector<IoQueue::Task> tasks;
    for (size_t i = 0; i < reads.size(); ++i) {
      tasks.push_back([this, &reads, &status, &call, i](std::vector<uint8_t>* staging) {
        status[i] = Fill(reads[i].first, call.layer, reads[i].second, staging);
      });
    }
    io_->Run(std::move(tasks));
    lock.lock();
    for (size_t i = 0; i < reads.size(); ++i) {
      const int slot = reads[i].first;
      if (status[i].ok()) {
        state_[slot] = kReady;
        continue;
      }
      state_[slot] = kInvalid;
      policy_->Drop(slot);
      std::erase(pinned, slot);
      if (failed.ok()) {
        failed = absl::Status(status[i].code(),
                              absl::StrCat("expert call ", call.call_id, ": layer ", call.layer,
                                           " expert ", reads[i].second, ": ", status[i].message()));
      }
    }
    reads.clear();
    for (const auto& [slot, e] : waits) {
      cv_.wait(lock, [&, slot = slot] { return state_[slot] != kLoading; });
      if (state_[slot] == kInvalid) {
        state_[slot] = kLoading;
        reads.emplace_back(slot, e);
      }
    }
    waits.clear();
    if (reads.empty()) break;
  }
  for (const auto& [slot, e] : reads) state_[slot] = kInvalid;  // not re-read after a failure
  {
    std::lock_guard<std::mutex> s(stats_mu_);
    stats_.hits += hits;
    stats_.misses += n_misses;
    stats_.prefetch_used += prefetch_used;
    stats_.resident = policy_->resident();
  }
  if (!failed.ok()) {
    unpin_all();
    return failed;
  }
  lock.unlock();
  // The call over the slots: expert e is slot slot_of[e].
  slot_ids_.resize(k1 - k0);
  for (uint32_t k = k0; k < k1; ++k) slot_ids_[k - k0] = slot_of[call.expert_ids[k] - expert_begin_];
  offsets_.resize(t1 - t0 + 1);
  for (int t = t0; t <= t1; ++t) offsets_[t - t0] = call.token_offsets[t] - k0;
  model::ExpertCallView sub = call;
  sub.n_tokens = t1 - t0;
  sub.hidden = call.hidden.subspan(static_cast<size_t>(t0) * call.d,
                                   static_cast<size_t>(t1 - t0) * call.d);
  sub.token_offsets = offsets_;
  sub.expert_ids = slot_ids_;
  sub.weights = call.weights.subspan(k0, k1 - k0);
  const model::LayerWeights& lw = model_->layer(call.layer);
  const LayerLayout& lay = layout_[call.layer - layer_begin_];
  model::LayerExperts le;
  model::ExpertTensorView* out[3] = {&le.gate, &le.up, &le.down};
  for (int k = 0; k < 3; ++k) {
    *out[k] = model::CopiedExpertView(*TensorOf(lw, k), 0, n_slots_, lay.pack[k],
                                      slots_.get() + lay.offset[k]);
    out[k]->expert_bytes = slot_bytes_;  // expert i is slot i
  }
  // The slots' biases lent to the call's store, and taken back after.
  if (!lw.gate_exps_b.empty()) le.gate_b = std::move(gate_b_);
  if (!lw.up_exps_b.empty()) le.up_b = std::move(up_b_);
  if (!lw.down_exps_b.empty()) le.down_b = std::move(down_b_);
  // Moved, not copied (an initializer list would copy): the bias buffers
  // keep their addresses.
  std::vector<model::LayerExperts> one;
  one.push_back(std::move(le));
  model::ExpertStore store(std::move(one), model_->n_layer(), n_slots_, call.layer, 0, d_, n_ff_,
                           nullptr, model_->hparams().expert_ffn);
  const absl::Status s = compute_->ComputeWith(store, sub, partial);
  model::LayerExperts& back = store.MutableLayer(call.layer);
  if (!lw.gate_exps_b.empty()) gate_b_ = std::move(back.gate_b);
  if (!lw.up_exps_b.empty()) up_b_ = std::move(back.up_b);
  if (!lw.down_exps_b.empty()) down_b_ = std::move(back.down_b);
  lock.lock();
  unpin_all();
  return s;
}

}  // namespace moesplit::worker
