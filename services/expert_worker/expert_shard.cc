#include "services/expert_worker/expert_shard.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/base/cpu_count.h"
#include "common/base/progress.h"
#include "common/base/status.h"
#include "common/gguf/gguf.h"
#include "common/model/model.h"
#include "common/quant/packed.h"
#include "services/expert_worker/memory_budget.h"

namespace moesplit::worker {

struct ExpertShard::NodePart {
  int node = -1;
  int expert_begin = 0, expert_end = 0;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<model::InProcessExperts> experts;  // the part's copy, or
  std::unique_ptr<ExpertTier> tier;                   // its tier (tiered())
  model::ExpertBackend* backend = nullptr;            // whichever it has
  model::ExpertCall routing;  // the part's entries (SubCall)
  std::vector<float> partial;
  absl::Status status;
};

namespace {

// A non-gated activation's layer: the gate tensor views up (Model::BindLayer),
// so the shard copies up once and views the copy twice.
bool GateViewsUp(const model::LayerWeights& lw) { return lw.gate_exps.data == lw.up_exps.data; }

// Bytes of experts [eb, ee) of one 3-D tensor in the worker's memory: in
// the packed layout where the CPU's kernels read it fastest.
uint64_t SliceBytes(const model::ExpertTensorView& v, int eb, int ee) {
  return model::CopiedExpertBytes(v, eb, ee, quant::PackedPreferred(v.type));
}

// `call` with only its entries whose expert is in [eb, ee) (kept in
// *routing); the hidden state is the call's own.
model::ExpertCallView SubCall(const model::ExpertCallView& call, int eb, int ee,
                              model::ExpertCall* routing) {
  model::FilterRouting(call, 0, call.n_tokens, [&](int e) { return e >= eb && e < ee; },
                       &routing->token_offsets, &routing->expert_ids, &routing->weights);
  model::ExpertCallView sub = call;
  sub.token_offsets = routing->token_offsets;
  sub.expert_ids = routing->expert_ids;
  sub.weights = routing->weights;
  return sub;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ExpertShard>> ExpertShard::Load(const ShardOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(std::shared_ptr<const model::Model> m, model::Model::Open(options.model_path));
  const auto& hp = m->hparams();
  ASSIGN_OR_RETURN(ShardSpec shard,
                   ResolveShard(options.shard, m->n_layer(), static_cast<int>(hp.n_expert)));
  std::unique_ptr<ExpertShard> s(new ExpertShard());
  // Nodes and their contiguous expert ranges.
  std::vector<int> nodes = NumaNodesFor(options.numa);
  const int n_local = shard.expert_end - shard.expert_begin;
  if (static_cast<int>(nodes.size()) > n_local) nodes.resize(n_local);
  const int n_nodes = static_cast<int>(nodes.size());
  std::vector<uint64_t> sizes(n_nodes, 0);
  uint64_t copy_bytes = 0;  // what the copies write (the progress line's total)
  for (int i = 0; i < n_nodes; ++i) {
    auto part = std::make_unique<NodePart>();
    part->node = nodes[i];
    part->expert_begin = shard.expert_begin + n_local * i / n_nodes;
    part->expert_end = shard.expert_begin + n_local * (i + 1) / n_nodes;
    for (int l = shard.layer_begin; l < shard.layer_end; ++l) {
      const auto& lw = m->layer(l);
      if (lw.gate_exps.data == nullptr) continue;  // a dense-FFN layer: no experts
      for (const auto* v : {&lw.gate_exps, &lw.up_exps, &lw.down_exps}) {
        if (v == &lw.gate_exps && GateViewsUp(lw)) continue;  // copied once, as up
        sizes[i] += SliceBytes(*v, part->expert_begin, part->expert_end) + 64;
        copy_bytes += SliceBytes(*v, part->expert_begin, part->expert_end);
      }
    }
    s->parts_.push_back(std::move(part));
  }
  s->shard_bytes_ = copy_bytes;
  const uint64_t budget =
      options.expert_ram > 0 ? options.expert_ram : DefaultExpertRam(ReadMemoryFacts());
  const int total_threads = options.threads > 0
                                ? options.threads
                                : AvailableCpuCount();
  if (copy_bytes > budget) return LoadTiered(std::move(s), std::move(m), shard, nodes, budget,
                                             total_threads, options, start);
  const bool shared = !options.shm_prefix.empty() &&
                      (options.expert_memory == ExpertMemory::kShared ||
                       (options.expert_memory == ExpertMemory::kAuto && SharedMemoryHugePages()));
  ASSIGN_OR_RETURN(s->arena_,
                   ExpertArena::Create(nodes, sizes, shared ? options.shm_prefix : std::string()));
  std::set<std::string> formats;
  // Progress on stderr for shards of 64 MiB or more (common/base/progress.h).
  std::optional<LoadProgress> progress;
  if (copy_bytes >= (64u << 20)) {
    progress.emplace("moesplit-expert-worker: loading experts", copy_bytes);
  }
  for (int i = 0; i < n_nodes; ++i) {
    NodePart& part = *s->parts_[i];
    const std::vector<int> cpus = CpusOfNode(part.node);
    const int threads = std::max(1, total_threads / n_nodes);
    part.pool = std::make_unique<ThreadPool>(threads);
    if (part.node >= 0 && n_nodes > 1) {
      part.pool->RunOnAll([&](int t) { if (t > 0) PinCurrentThread(cpus); });
    }
    // Views first, then the copies (packing where the CPU's kernels read the
    // packed layout fastest) by the node's pool from a thread pinned to the
    // node, so first touch places the pages there too.
    std::vector<model::LayerExperts> layers;
    std::vector<model::ExpertCopyJob> jobs;
    std::vector<size_t> layer_jobs;  // where each layer's jobs begin in `jobs`
    uint8_t* dst = s->arena_->region(i).data;
    for (int l = shard.layer_begin; l < shard.layer_end; ++l) {
      const auto& lw = m->layer(l);
      model::LayerExperts le;
      if (lw.gate_exps.data == nullptr) {  // a dense-FFN layer: loads nothing
        layers.push_back(std::move(le));
        continue;
      }
      model::ExpertTensorView* out[3] = {&le.gate, &le.up, &le.down};
      const model::ExpertTensorView* in[3] = {&lw.gate_exps, &lw.up_exps, &lw.down_exps};
      layer_jobs.push_back(jobs.size());
      const bool gate_is_up = GateViewsUp(lw);
      for (int k = gate_is_up ? 1 : 0; k < 3; ++k) {
        const bool pack = quant::PackedPreferred(in[k]->type);
        *out[k] = model::CopiedExpertView(*in[k], part.expert_begin, part.expert_end, pack, dst);
        jobs.push_back({in[k], part.expert_begin, part.expert_end, pack, dst});
        dst += (SliceBytes(*in[k], part.expert_begin, part.expert_end) + 63) / 64 * 64;
      }
      if (gate_is_up) le.gate = le.up;
      model::SliceExpertBiases(lw, part.expert_begin, part.expert_end, hp.n_ff_exp,
                               hp.n_embd_experts(), &le);
      layers.push_back(std::move(le));
    }
    std::thread copier([&] {
      if (part.node >= 0) PinCurrentThread(cpus);
      // A layer (its tensors) at a time, for the progress line.
      layer_jobs.push_back(jobs.size());
      for (size_t li = 0; li + 1 < layer_jobs.size(); ++li) {
        const size_t j = layer_jobs[li], n = layer_jobs[li + 1] - j;
        model::RunExpertCopies(absl::MakeConstSpan(jobs).subspan(j, n), part.pool.get());
        uint64_t bytes = 0;
        for (size_t k = j; k < j + n; ++k) {
          bytes += SliceBytes(*jobs[k].src, jobs[k].eb, jobs[k].ee);
        }
        if (progress) progress->Add(bytes);
      }
    });
    copier.join();
    for (const auto& le : layers) {
      if (le.gate.data == nullptr) continue;
      for (const auto* v : {&le.gate, &le.up, &le.down}) formats.insert(std::string(GgmlTypeName(v->type)));
    }
    model::ExpertStore store(std::move(layers), m->n_layer(), static_cast<int>(hp.n_expert),
                             shard.layer_begin, part.expert_begin, hp.n_embd_experts(), hp.n_ff_exp,
                             nullptr, hp.expert_ffn);
    part.experts = std::make_unique<model::InProcessExperts>(std::move(store), part.pool.get());
    part.backend = part.experts.get();
  }
  if (progress) progress->Finish();
  if (n_nodes > 1) s->drivers_ = std::make_unique<ThreadPool>(n_nodes);
  s->lock_warning_ = s->arena_->LockAll();
  std::vector<uint64_t> resident;
  for (const auto& r : s->arena_->regions()) resident.push_back(r.size);
  s->Describe(*m, shard, nodes, resident, formats, options);
  // The worker computes from its own copy: drop the file's pages it read.
  const std::string path = options.model_path;
  m.reset();
  if (const int fd = open(path.c_str(), O_RDONLY); fd >= 0) {
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
  }
  s->load_seconds_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return s;
}

absl::StatusOr<std::unique_ptr<ExpertShard>> ExpertShard::LoadTiered(
    std::unique_ptr<ExpertShard> s, std::shared_ptr<const model::Model> m, const ShardSpec& shard,
    const std::vector<int>& nodes, uint64_t budget, int total_threads, const ShardOptions& options,
    std::chrono::steady_clock::time_point start) {
  const int n_nodes = static_cast<int>(nodes.size());
  const int n_local = shard.expert_end - shard.expert_begin;
  std::set<std::string> formats;
  for (int l = shard.layer_begin; l < shard.layer_end; ++l) {
    const auto& lw = m->layer(l);
    if (lw.gate_exps.data == nullptr) continue;
    for (const auto* v : {&lw.gate_exps, &lw.up_exps, &lw.down_exps}) {
      formats.insert(std::string(GgmlTypeName(v->type)));
    }
  }
  std::vector<uint64_t> resident;
  for (int i = 0; i < n_nodes; ++i) {
    NodePart& part = *s->parts_[i];
    const std::vector<int> cpus = CpusOfNode(part.node);
    part.pool = std::make_unique<ThreadPool>(std::max(1, total_threads / n_nodes));
    if (part.node >= 0 && n_nodes > 1) {
      part.pool->RunOnAll([&](int t) { if (t > 0) PinCurrentThread(cpus); });
    }
    TierOptions to;
    to.budget_bytes = budget / n_local * (part.expert_end - part.expert_begin);
    to.io_threads = options.io_threads;
    to.reader = options.reader;
    ASSIGN_OR_RETURN(part.tier, ExpertTier::Create(m, shard.layer_begin, shard.layer_end,
                                                   part.expert_begin, part.expert_end,
                                                   part.pool.get(), to));
    part.backend = part.tier.get();
    resident.push_back(static_cast<uint64_t>(part.tier->n_slots()) * part.tier->slot_bytes());
  }
  if (n_nodes > 1) s->drivers_ = std::make_unique<ThreadPool>(n_nodes);
  s->Describe(*m, shard, nodes, resident, formats, options);
  s->load_seconds_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return s;
}

void ExpertShard::Hint(int layer, absl::Span<const int32_t> experts) {
  for (const auto& p : parts_) {
    if (p->tier != nullptr) p->tier->Hint(layer, experts);
  }
}

TierStats ExpertShard::tier_stats() const {
  TierStats sum;
  for (const auto& p : parts_) {
    if (p->tier == nullptr) continue;
    const TierStats t = p->tier->stats();
    sum.n_slots += t.n_slots;
    sum.slot_bytes = std::max(sum.slot_bytes, t.slot_bytes);
    sum.resident += t.resident;
    sum.hits += t.hits;
    sum.misses += t.misses;
    sum.reads += t.reads;
    sum.bytes_read += t.bytes_read;
    sum.read_errors += t.read_errors;
    sum.read_seconds += t.read_seconds;
    sum.prefetches += t.prefetches;
    sum.prefetch_used += t.prefetch_used;
    sum.prefetch_unused += t.prefetch_unused;
    for (size_t b = 0; b < sum.read_buckets.size(); ++b) sum.read_buckets[b] += t.read_buckets[b];
  }
  return sum;
}

void ExpertShard::Describe(const model::Model& model, const ShardSpec& shard,
                           const std::vector<int>& nodes, const std::vector<uint64_t>& resident,
                           const std::set<std::string>& formats, const ShardOptions& options) {
  const model::Model* m = &model;
  const auto& hp = m->hparams();
  const int n_nodes = static_cast<int>(nodes.size());
  ExpertShard* s = this;
  transport::WorkerDescription& d = s->description_;
  d.model_identity = m->file().Identity();
  d.model_name = m->file().GetStringOr("general.name", "").value_or("");
  d.architecture = m->arch().name;
  d.n_layer = m->n_layer();
  d.n_expert = static_cast<int>(hp.n_expert);
  d.d = static_cast<int>(hp.n_embd_experts());  // the width expert calls carry (LatentMoE)
  d.n_ff = static_cast<int>(hp.n_ff_exp);
  d.layer_begin = shard.layer_begin;
  d.layer_end = shard.layer_end;
  d.expert_begin = shard.expert_begin;
  d.expert_end = shard.expert_end;
  d.formats.assign(formats.begin(), formats.end());
  for (int i = 0; i < n_nodes; ++i) {
    d.numa_nodes.push_back({nodes[i], resident[i], s->parts_[i]->pool->size()});
    d.resident_bytes += resident[i];
    d.threads += s->parts_[i]->pool->size();
  }
  d.worker_id = options.worker_id;
  d.max_tokens = options.max_tokens;
  d.expert_ffn = model::ExpertFfnName(hp.expert_ffn);
}

ExpertShard::~ExpertShard() = default;

absl::Status ExpertShard::ComputeInto(const model::ExpertCallView& call, float* partial,
                                      uint64_t* worker_ns) {
  if (worker_ns != nullptr) *worker_ns = 0;
  RETURN_IF_ERROR(transport::CheckCallTokens(call, description_.max_tokens));
  std::lock_guard<std::mutex> lock(mu_);
  if (call.layer < description_.layer_begin || call.layer >= description_.layer_end) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layer ", call.layer, " is not in this worker's shard (layers ",
        description_.layer_begin, "-", description_.layer_end - 1, ")"));
  }
  if (parts_.size() == 1) return parts_[0]->backend->ComputeInto(call, partial, nullptr);
  // The parts' split reads the routing before their stores validate it.
  bool ok = call.n_tokens >= 0 &&
            call.hidden.size() == static_cast<size_t>(call.n_tokens) * call.d &&
            call.token_offsets.size() == static_cast<size_t>(call.n_tokens) + 1 &&
            call.token_offsets[0] == 0 && call.expert_ids.size() == call.weights.size() &&
            call.token_offsets.back() == call.expert_ids.size();
  for (int t = 0; ok && t < call.n_tokens; ++t) {
    ok = call.token_offsets[t] <= call.token_offsets[t + 1];
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expert call ", call.call_id, ": malformed (sizes or token offsets)"));
  }
  drivers_->RunOnAll([&](int i) {
    NodePart& p = *parts_[i];
    const model::ExpertCallView sub = SubCall(call, p.expert_begin, p.expert_end, &p.routing);
    p.partial.resize(call.hidden.size());
    p.status = p.backend->ComputeInto(sub, p.partial.data(), nullptr);
  });
  std::fill(partial, partial + call.hidden.size(), 0.0f);
  for (auto& p : parts_) {
    RETURN_IF_ERROR(p->status);
    for (size_t i = 0; i < call.hidden.size(); ++i) partial[i] += p->partial[i];
  }
  return absl::OkStatus();
}

}  // namespace moesplit::worker
