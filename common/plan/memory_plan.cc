#include "common/plan/memory_plan.h"

#include <algorithm>
#include <cinttypes>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/base/status.h"
#include "common/model/sequence_state.h"
#include "common/plan/byte_size.h"
#include "nlohmann/json.hpp"

namespace moesplit::plan {
namespace {

using model::TensorRole;

constexpr int64_t kQuantBlock = 32;        // q8_0 / q4_0 elements per block

uint64_t CeilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

}  // namespace

std::string_view KvTypeName(KvType t) {
  switch (t) {
    case KvType::kF16: return "f16";
    case KvType::kQ8_0: return "q8_0";
    case KvType::kQ4_0: return "q4_0";
  }
  return "?";
}

absl::StatusOr<KvType> ParseKvType(absl::string_view name) {
  const std::string n = absl::AsciiStrToLower(name);
  for (KvType t : {KvType::kF16, KvType::kQ8_0, KvType::kQ4_0}) {
    if (n == KvTypeName(t)) return t;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown KV type '", name, "' (supported: f16, q8_0, q4_0)"));
}

uint64_t KvElementBytes(KvType t, int64_t n) {
  switch (t) {
    case KvType::kF16: return static_cast<uint64_t>(n) * 2;
    case KvType::kQ8_0: return static_cast<uint64_t>(n / kQuantBlock) * 34;
    case KvType::kQ4_0: return static_cast<uint64_t>(n / kQuantBlock) * 18;
  }
  return 0;
}

absl::Status SetTensorBytes(ShapeTensor* t) {
  if (t->ne.empty()) return absl::InvalidArgumentError(absl::StrCat(t->name, ": no shape"));
  int64_t rows = 1;
  for (size_t i = 1; i < t->ne.size(); ++i) rows *= t->ne[i];
  const std::optional<uint64_t> row = RowBytes(t->type, t->ne[0]);
  if (!row.has_value() || t->ne[0] <= 0 || rows <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        t->name, ": rows of ", t->ne[0], " elements are not whole ",
        AbslView(GgmlTypeName(t->type)), " blocks"));
  }
  t->n_bytes = *row * static_cast<uint64_t>(rows);
  return absl::OkStatus();
}

ModelShape ShapeOfModel(const model::Model& m) {
  ModelShape s;
  s.hp = m.hparams();
  s.tied_output = m.tied_output();
  auto add = [&](const GgufTensor* t, TensorRole role, int layer) {
    if (t == nullptr) return;
    ShapeTensor st{t->name, role, layer, t->type,
                   std::vector<int64_t>(t->ne.begin(), t->ne.begin() + t->n_dims),
                   t->n_bytes};
    (layer >= m.n_layer() ? s.nextn_tensors : s.tensors).push_back(std::move(st));
  };
  const int n_blocks = m.n_layer() + m.n_nextn();
  for (const model::TensorSpec& spec : m.arch().tensors) {
    if (!model::IsLayerTensor(spec.id)) {
      add(m.tensor(spec.id), spec.role, -1);
      continue;
    }
    for (int il = 0; il < n_blocks; ++il) add(m.tensor(spec.id, il), spec.role, il);
  }
  for (const model::TensorSpec& spec : model::NextNTensors()) {
    for (int il = m.n_layer(); il < n_blocks; ++il) add(m.tensor(spec.id, il), spec.role, il);
  }
  return s;
}

absl::StatusOr<ModelShape> ShapeFromTypes(
    const model::HyperParams& hp,
    GgmlType (*type_of)(const model::TensorSpec&, int, const model::HyperParams&),
    bool (*include_optional)(const model::TensorSpec&)) {
  const model::ArchDescription* arch = model::FindArch(hp.arch);
  if (arch == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported architecture '", hp.arch,
                                                   "' (supported: ",
                                                   model::SupportedArchNames(), ")"));
  }
  if (hp.n_layer <= 0 || hp.n_embd <= 0 || hp.n_vocab <= 0 || hp.n_expert <= 0) {
    return absl::InvalidArgumentError("n_layer, n_embd, n_vocab and n_expert must be positive");
  }
  if (static_cast<int64_t>(hp.layers.size()) != hp.n_layer) {
    return absl::InvalidArgumentError(absl::StrCat("the hyper-parameters describe ",
                                                   hp.layers.size(), " layers of ", hp.n_layer));
  }
  ModelShape s;
  s.hp = hp;
  s.tied_output = true;
  const int n_trunk = static_cast<int>(hp.n_layer);
  const int n_blocks = n_trunk + static_cast<int>(hp.n_nextn());
  auto add = [&](const model::TensorSpec& spec, int il) -> absl::Status {
    ShapeTensor t;
    t.name = model::TensorName(spec, il < 0 ? 0 : il);
    t.role = spec.role;
    t.layer = il;
    t.type = type_of(spec, il, hp);
    for (int d = 0; d < spec.n_dims; ++d) t.ne.push_back(model::ResolveDim(hp, spec.shape[d]));
    RETURN_IF_ERROR(SetTensorBytes(&t));
    if (spec.id == model::TensorId::kOutput) s.tied_output = false;
    (il >= n_trunk ? s.nextn_tensors : s.tensors).push_back(std::move(t));
    return absl::OkStatus();
  };
  auto wanted = [&](const model::TensorSpec& spec) {
    return spec.required || include_optional == nullptr || include_optional(spec);
  };
  for (const model::TensorSpec& spec : arch->tensors) {
    if (!wanted(spec)) continue;
    if (!model::IsLayerTensor(spec.id)) {
      RETURN_IF_ERROR(add(spec, -1));
      continue;
    }
    for (int il = 0; il < n_blocks; ++il) {
      const model::LayerSpec& l = il < n_trunk ? hp.layers[il] : hp.nextn_layers[il - n_trunk];
      if (model::LayerSelected(spec.layers, l)) RETURN_IF_ERROR(add(spec, il));
    }
  }
  for (const model::TensorSpec& spec : model::NextNTensors()) {
    if (!wanted(spec)) continue;
    for (int il = n_trunk; il < n_blocks; ++il) RETURN_IF_ERROR(add(spec, il));
  }
  return s;
}

namespace {

DenseWeightBytes DenseBytes(const ModelShape& s, uint64_t* host_embd, uint64_t* host_experts) {
  DenseWeightBytes d;
  *host_embd = 0;
  *host_experts = 0;
  for (const ShapeTensor& t : s.tensors) {
    switch (t.role) {
      case TensorRole::kDense: d.attention += t.n_bytes; break;
      case TensorRole::kNorm: d.norms += t.n_bytes; break;
      case TensorRole::kRouter: d.routers += t.n_bytes; break;
      case TensorRole::kSharedExpert: d.shared_experts += t.n_bytes; break;
      case TensorRole::kOutput: d.output_head += t.n_bytes; break;
      case TensorRole::kRoutedExpert:
        *host_experts += t.n_bytes;
        if (absl::EndsWith(t.name, ".bias")) d.expert_biases += t.n_bytes;
        break;
      case TensorRole::kEmbeddings:
        if (s.tied_output) d.output_head += t.n_bytes; else *host_embd += t.n_bytes;
        break;
    }
  }
  return d;
}

// The widest input of a GPU matrix product, in elements.
int64_t WidestGpuInput(const ModelShape& s) {
  int64_t widest = std::max(s.hp.n_embd, s.hp.n_ff_exp);
  for (const ShapeTensor& t : s.tensors) {
    if (t.ne.size() != 2 || t.ne[1] == 1) continue;
    const bool gpu = t.role == TensorRole::kDense || t.role == TensorRole::kSharedExpert ||
                     t.role == TensorRole::kRouter || t.role == TensorRole::kOutput ||
                     (t.role == TensorRole::kEmbeddings && s.tied_output);
    if (gpu) widest = std::max(widest, t.ne[0]);
  }
  return widest;
}

}  // namespace

GpuWorkspaceElems GpuWorkspace(const ModelShape& s, int64_t B, int64_t n_ctx,
                               int stream_buffers) {
  const model::HyperParams& hp = s.hp;
  bool shared_expert = false;
  for (const ShapeTensor& t : s.tensors) shared_expert |= t.role == TensorRole::kSharedExpert;
  GpuWorkspaceElems w;
  w.x = B * hp.n_embd;
  // The widest layer's (their sizes differ where the geometry is per layer).
  int64_t hk = hp.head_dim_k, hv = hp.head_dim_v, kv_k = hp.n_head_kv * hp.head_dim_k,
          kv_v = hp.n_head_kv * hp.head_dim_v;
  for (int il = 0; il < static_cast<int>(hp.layers.size()); ++il) {
    hk = std::max(hk, hp.head_k(il));
    hv = std::max(hv, hp.head_v(il));
    kv_k = std::max(kv_k, hp.kv_heads(il) * hp.head_k(il));
    kv_v = std::max(kv_v, hp.kv_heads(il) * hp.head_v(il));
  }
  w.q = B * hp.n_head * hk;
  w.k = B * kv_k;
  w.v = B * kv_v;
  w.attn = B * hp.n_head * hv;
  w.router = B * hp.n_expert;
  w.topk = B * hp.n_expert_used;
  // The shared expert's and the dense-FFN layers' intermediate rows.
  bool dense_ffn = false, mla = false;
  for (const model::LayerSpec& l : hp.layers) {
    dense_ffn |= l.ffn == model::FfnKind::kDense;
    mla |= l.mixer == model::MixerKind::kMla;
  }
  w.sh = std::max(shared_expert ? B * hp.n_ff_shexp : 0, dense_ffn ? B * hp.n_ff : 0);
  w.ex_ff = B * hp.n_ff_exp;
  w.rope = B * hp.rope.n_rot;
  w.head_rows = std::min(B, kGpuHeadRows);
  w.logits = w.head_rows * hp.n_vocab;
  w.scratch = B * WidestGpuInput(s);
  w.split = kGpuDecodeTokens * hp.n_head *
            static_cast<int64_t>(CeilDiv(n_ctx, kGpuAttentionChunk)) * (hp.head_dim_v + 2);
  w.tokens = B;
  bool gated_attention = false;
  for (const model::LayerSpec& l : hp.layers) {
    gated_attention |= l.mixer == model::MixerKind::kGatedAttention;
  }
  if (gated_attention) w.qg = 2 * B * hp.n_head * hp.head_dim_k;
  if (mla) {
    w.mla_q = B * hp.n_head * std::max(hp.head_dim_k_mla, hp.head_dim_v_mla);
    w.mla_qa = B * hp.q_lora_rank;
    w.mla_in = B * hp.n_head * (hp.head_dim_k_mla - hp.rope.n_rot);
  }
  if (hp.n_recurrent_layers() > 0) {
    w.dn_qkv = B * hp.ssm_conv_channels();
    w.dn_inner = B * hp.ssm_inner();
    w.dn_heads = B * hp.ssm_n_v_heads;
  }
  for (uint64_t b : ExpertBytesPerLayer(s)) w.slot_bytes = std::max(w.slot_bytes, b);
  w.stream_buffers = hp.n_expert > 0 ? stream_buffers : 0;
  return w;
}

WorkspaceBytes GpuWorkspaceElems::Bytes() const {
  WorkspaceBytes b;
  const uint64_t floats = 6 * x + q + k + v + attn + 2 * router + 3 * topk + 2 * ex_ff + rope +
                          (sh > 0 ? 2 * sh + tokens : 0) + mixer() + 2 * dn_inner +
                          2 * dn_heads + mla_q + mla_qa + mla_in;
  const uint64_t ints = 3 * topk + tokens;
  b.activations = 4 * (floats + ints);
  b.logits = 4 * static_cast<uint64_t>(logits);
  b.attention = 4 * static_cast<uint64_t>(split);
  b.rounding = 4 * static_cast<uint64_t>(scratch);
  b.staging = slot_bytes * static_cast<uint64_t>(stream_buffers);
  return b;
}

int64_t GpuKvLayout::pages_total() const {
  int64_t n = 0;
  for (int64_t p : layer_pages) n += p;
  return n;
}

uint64_t GpuKvLayout::Bytes(uint64_t row_bytes) const {
  if (pages_total() == 0) return 0;
  const uint64_t tables = 1 + ring_sizes.size();
  return static_cast<uint64_t>(positions_total()) * row_bytes +
         tables * static_cast<uint64_t>(n_pages) * sizeof(int32_t);
}

uint64_t GpuKvLayout::Bytes(const std::function<uint64_t(int64_t)>& row_bytes) const {
  if (pages_total() == 0) return 0;
  const uint64_t tables = 1 + ring_sizes.size();
  uint64_t rows = 0;
  for (size_t il = 0; il < layer_pages.size(); ++il) {
    if (layer_pages[il] == 0) continue;
    rows += static_cast<uint64_t>(layer_pages[il] * page_size) * row_bytes(layer_values[il]);
  }
  return rows + tables * static_cast<uint64_t>(n_pages) * sizeof(int32_t);
}

GpuKvLayout GpuKvLayoutOf(const model::HyperParams& hp, int64_t n_ctx, int64_t max_step,
                          int64_t page_size) {
  GpuKvLayout l;
  l.page_size = page_size;
  l.n_pages = static_cast<int64_t>(CeilDiv(n_ctx, page_size));
  l.layer_pages.assign(hp.layers.size(), 0);
  l.layer_values.assign(hp.layers.size(), 0);
  for (size_t il = 0; il < hp.layers.size(); ++il) {
    const model::LayerSpec& spec = hp.layers[il];
    if (!model::IsAttention(spec.mixer)) continue;
    l.layer_values[il] = model::SequenceState::KvValuesPerPosition(hp, static_cast<int>(il));
    int64_t pages = l.n_pages;
    if (spec.sliding_window > 0) {
      pages = std::min<int64_t>(
          pages, static_cast<int64_t>(CeilDiv(spec.sliding_window + max_step - 1, page_size)));
    }
    l.layer_pages[il] = pages;
    if (pages < l.n_pages &&
        std::find(l.ring_sizes.begin(), l.ring_sizes.end(), pages) == l.ring_sizes.end()) {
      l.ring_sizes.push_back(pages);
    }
  }
  std::sort(l.ring_sizes.begin(), l.ring_sizes.end());
  return l;
}

namespace {

absl::Status CheckOptions(const ModelShape& s, const PlanOptions& o) {
  if (o.budget_bytes == 0) return absl::InvalidArgumentError("the GPU memory budget must be > 0");
  if (o.n_ctx <= 0) return absl::InvalidArgumentError(absl::StrCat("--ctx must be > 0, got ", o.n_ctx));
  if (o.n_parallel <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("--parallel must be > 0, got ", o.n_parallel));
  }
  if (o.n_ubatch <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("--ubatch must be > 0, got ", o.n_ubatch));
  }
  if (o.kv_page_size <= 0 || o.kv_page_size > (int64_t{1} << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the KV page size must be in [1, 2^20], got ", o.kv_page_size));
  }
  // Keeps every product below in 64 bits.
  if (o.n_ctx > (int64_t{1} << 32) || o.n_parallel > (int64_t{1} << 16) ||
      o.n_ubatch > (int64_t{1} << 24)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--ctx ", o.n_ctx, ", --parallel ", o.n_parallel, " or --ubatch ", o.n_ubatch,
        " is beyond what the planner handles (2^32, 2^16, 2^24)"));
  }
  const model::HyperParams& hp = s.hp;
  if (o.kv_type != KvType::kF16 &&
      (hp.head_dim_k % kQuantBlock != 0 || hp.head_dim_v % kQuantBlock != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV type ", AbslView(KvTypeName(o.kv_type)), " needs head dims that are multiples of 32; this model has ",
        hp.head_dim_k, " / ", hp.head_dim_v, " (use --kv-type f16)"));
  }
  if (hp.n_layer <= 0 || hp.n_embd <= 0 || hp.n_head_kv <= 0) {
    return absl::InvalidArgumentError("the model shape has zero layers, width or KV heads");
  }
  return absl::OkStatus();
}

MemoryPlan FixedPart(const ModelShape& s, const PlanOptions& o) {
  MemoryPlan p;
  p.options = o;
  p.hp = s.hp;
  p.dense = DenseBytes(s, &p.host_token_embd, &p.host_routed_experts);
  for (const ShapeTensor& t : s.nextn_tensors) p.host_nextn += t.n_bytes;
  // Only the attention layers keep a KV cache (MLA layers: the latent and
  // the rope key only); DeltaNet layers keep a fixed-size state
  // (model::SequenceState's arithmetic). A model's attention layers all
  // keep rows of one size.
  int64_t values = 0;
  for (int l = 0; l < static_cast<int>(s.hp.layers.size()); ++l) {
    values = std::max(values, model::SequenceState::KvValuesPerPosition(s.hp, l));
  }
  p.kv_row_bytes = values > 0 ? KvElementBytes(o.kv_type, values) : 0;
  p.kv_layout = GpuKvLayoutOf(s.hp, o.n_ctx, o.n_ubatch, o.kv_page_size);
  // Each layer's own rows (they differ where the geometry does per layer).
  const auto row_bytes = [&](int64_t v) { return KvElementBytes(o.kv_type, v); };
  p.kv_bytes_per_position = 0;
  for (int64_t v : p.kv_layout.layer_values) p.kv_bytes_per_position += row_bytes(v);
  p.kv_cache = p.kv_layout.Bytes(row_bytes) * static_cast<uint64_t>(o.n_parallel);
  p.recurrent_bytes_per_sequence =
      model::SequenceState::kRecurrentBuffers * model::SequenceState::RecurrentBytes(s.hp);
  p.recurrent_state = p.recurrent_bytes_per_sequence * static_cast<uint64_t>(o.n_parallel);
  p.workspace_elems = GpuWorkspace(s, o.n_ubatch, o.n_ctx, o.stream_buffers);
  p.workspace = p.workspace_elems.Bytes();
  p.margin = o.margin_bytes;
  p.prefix_cache_device = o.prefix_cache_device_bytes;
  return p;
}

}  // namespace

absl::StatusOr<std::vector<WorkerShare>> PlanWorkers(const ModelShape& s,
                                                     uint64_t worker_bytes) {
  if (worker_bytes == 0) return absl::InvalidArgumentError("worker memory of 0 bytes");
  const int n = static_cast<int>(std::max<int64_t>(s.hp.n_layer, 0));
  std::vector<uint64_t> layer(n, 0);
  for (const ShapeTensor& t : s.tensors) {
    if (t.role == TensorRole::kRoutedExpert && t.layer >= 0 && t.layer < n) {
      layer[t.layer] += t.n_bytes;
    }
  }
  uint64_t largest = 0;
  for (int l = 0; l < n; ++l) {
    if (layer[l] > worker_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "layer ", l, "'s routed experts (", FormatBytes(layer[l]),
          ") do not fit in one worker of ", FormatBytes(worker_bytes),
          " (split that layer by expert ids: --shard layers=L,experts=A-B)"));
    }
    largest = std::max(largest, layer[l]);
  }
  // Consecutive ranges, greedily filled up to `cap`.
  auto split = [&](uint64_t cap) {
    std::vector<WorkerShare> out;
    for (int l = 0; l < n; ++l) {
      if (out.empty() || out.back().bytes + layer[l] > cap) out.push_back({l, l, 0});
      out.back().layer_end = l + 1;
      out.back().bytes += layer[l];
    }
    return out;
  };
  const size_t count = split(worker_bytes).size();
  // The smallest cap that needs no more workers than that: the balanced split.
  uint64_t lo = largest, hi = worker_bytes;
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (split(mid).size() <= count) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return split(lo);
}

std::string FormatWorkers(const std::vector<WorkerShare>& workers, uint64_t worker_bytes) {
  std::string out = absl::StrCat("expert-workers: ", workers.size(), " of ",
                                 FormatBytes(worker_bytes), " (routed experts only)\n");
  for (size_t i = 0; i < workers.size(); ++i) {
    const WorkerShare& w = workers[i];
    absl::StrAppend(&out, "  worker ", i, ": --shard layers=", w.layer_begin, "-",
                    w.layer_end - 1, "  ", FormatBytes(w.bytes), "\n");
  }
  return out;
}

absl::StatusOr<HostTierPlan> PlanHostTier(const ModelShape& shape, uint64_t host_bytes,
                                          const std::vector<WorkerShare>& workers) {
  if (host_bytes == 0) return absl::InvalidArgumentError("host memory must be more than 0 bytes");
  const std::vector<uint64_t> per_expert = ExpertBytesPerLayer(shape);
  std::vector<WorkerShare> ranges = workers;
  if (ranges.empty()) ranges.push_back({0, static_cast<int>(shape.hp.n_layer), 0});
  HostTierPlan plan;
  plan.host_bytes = host_bytes;
  for (const WorkerShare& w : ranges) {
    HostTierShare share;
    share.layer_begin = w.layer_begin;
    share.layer_end = w.layer_end;
    uint64_t per_token = 0;
    for (int l = w.layer_begin; l < w.layer_end; ++l) {
      share.expert_bytes += per_expert[l] * static_cast<uint64_t>(shape.hp.n_expert);
      per_token += per_expert[l] * static_cast<uint64_t>(shape.hp.n_expert_used);
    }
    share.ram_bytes = std::min(share.expert_bytes, host_bytes);
    share.resident_share =
        share.expert_bytes > 0 ? static_cast<double>(share.ram_bytes) / share.expert_bytes : 1.0;
    share.disk_bytes_per_token =
        static_cast<uint64_t>(static_cast<double>(per_token) * (1.0 - share.resident_share));
    plan.disk_bytes_per_token += share.disk_bytes_per_token;
    plan.shares.push_back(share);
  }
  if (plan.shares.size() == 1 && plan.shares[0].expert_bytes == 0) {
    return absl::InvalidArgumentError("the model has no routed experts");
  }
  return plan;
}

std::string FormatHostTier(const HostTierPlan& plan, uint64_t disk_bytes_per_second) {
  std::string out = absl::StrCat("routed experts in ", FormatBytes(plan.host_bytes),
                                 " of host RAM per host (the rest read from disk):\n");
  for (const HostTierShare& s : plan.shares) {
    absl::StrAppend(&out, "  layers ", s.layer_begin, "-", s.layer_end - 1, ": ",
                    FormatBytes(s.ram_bytes), " of ", FormatBytes(s.expert_bytes), " in RAM (",
                    absl::StrFormat("%.1f", 100.0 * s.resident_share), "%), ",
                    FormatBytes(s.disk_bytes_per_token),
                    " read per decode token (uniform routing)\n");
  }
  if (disk_bytes_per_second > 0 && plan.disk_bytes_per_token > 0) {
    absl::StrAppend(&out, "  decode bound by the disk at ",
                    FormatBytes(disk_bytes_per_second), "/s: ",
                    absl::StrFormat("%.2f", static_cast<double>(disk_bytes_per_second) /
                                                plan.disk_bytes_per_token),
                    " tokens/s\n");
  }
  return out;
}

std::vector<uint64_t> ExpertBytesPerLayer(const ModelShape& s) {
  std::vector<uint64_t> per_layer(std::max<int64_t>(s.hp.n_layer, 0), 0);
  if (s.hp.n_expert <= 0) return per_layer;
  for (const ShapeTensor& t : s.tensors) {
    if (t.role == TensorRole::kRoutedExpert && t.ne.size() == 3 && t.layer >= 0 &&
        t.layer < s.hp.n_layer) {
      per_layer[t.layer] += t.n_bytes / static_cast<uint64_t>(s.hp.n_expert);
    }
  }
  return per_layer;
}

model::ExpertCacheOptions ExpertCacheOptionsFor(const ModelShape& shape, const MemoryPlan& plan) {
  model::ExpertCacheOptions o;
  o.n_layer = static_cast<int>(shape.hp.n_layer);
  o.n_expert = static_cast<int>(shape.hp.n_expert);
  o.n_slots = plan.expert_cache.slots;
  o.expert_bytes = ExpertBytesPerLayer(shape);
  return o;
}

namespace {

ExpertCachePlan CachePlan(const ModelShape& s, uint64_t bytes) {
  ExpertCachePlan c;
  c.bytes = bytes;
  c.experts_per_layer = s.hp.n_expert;
  for (uint64_t b : ExpertBytesPerLayer(s)) {
    if (b > 0) ++c.moe_layers;
    c.slot_bytes = std::max(c.slot_bytes, b);
  }
  if (c.slot_bytes > 0) c.slots = static_cast<int64_t>(bytes / c.slot_bytes);
  c.slots = std::min(c.slots, c.moe_layers * c.experts_per_layer);
  if (c.moe_layers > 0) c.slots_per_layer = c.slots / c.moe_layers;
  return c;
}

bool Fits(const ModelShape& s, const PlanOptions& o) {
  return FixedPart(s, o).fixed_bytes() <= o.budget_bytes;
}

// "try --ctx 32768 or --kv-type q4_0", or "" when nothing helps.
std::string Suggestion(const ModelShape& s, const PlanOptions& o) {
  std::vector<std::string> tries;
  // The largest multiple of 1024 below the requested context that fits.
  PlanOptions c = o;
  int64_t lo = 0, hi = o.n_ctx / 1024;
  while (lo < hi) {  // largest k in [0, hi) with ctx = k * 1024 fitting
    const int64_t mid = (lo + hi + 1) / 2;
    c.n_ctx = mid * 1024;
    if (mid * 1024 < o.n_ctx && Fits(s, c)) lo = mid; else hi = mid - 1;
  }
  if (lo > 0) tries.push_back(absl::StrCat("--ctx ", lo * 1024));
  for (KvType t : {KvType::kQ8_0, KvType::kQ4_0}) {
    if (KvElementBytes(t, 1024) >= KvElementBytes(o.kv_type, 1024)) continue;
    PlanOptions k = o;
    k.kv_type = t;
    if (s.hp.head_dim_k % kQuantBlock == 0 && s.hp.head_dim_v % kQuantBlock == 0 && Fits(s, k)) {
      tries.push_back(absl::StrCat("--kv-type ", AbslView(KvTypeName(t))));
      break;
    }
  }
  if (o.n_parallel > 1) {
    PlanOptions p = o;
    for (p.n_parallel = o.n_parallel - 1; p.n_parallel >= 1; --p.n_parallel) {
      if (Fits(s, p)) {
        tries.push_back(absl::StrCat("--parallel ", p.n_parallel));
        break;
      }
    }
  }
  if (o.prefix_cache_device_bytes > 0) {
    PlanOptions d = o;
    d.prefix_cache_device_bytes = 0;
    if (Fits(s, d)) tries.push_back("a smaller --cache-device");
  }
  if (tries.empty()) return "";
  return absl::StrCat("; try ", absl::StrJoin(tries, " or "));
}

std::string Gib(uint64_t b) { return absl::StrFormat("%.2f GiB", ToGiB(b)); }

}  // namespace

absl::StatusOr<MemoryPlan> PlanMemory(const ModelShape& shape, const PlanOptions& options) {
  RETURN_IF_ERROR(CheckOptions(shape, options));
  MemoryPlan p = FixedPart(shape, options);
  if (p.host_routed_experts == 0) {
    return absl::InvalidArgumentError("the model has no routed experts to plan for");
  }
  const uint64_t need = p.fixed_bytes();
  if (need > options.budget_bytes) {
    std::string hint = Suggestion(shape, options);
    if (hint.empty()) {
      hint = absl::StrCat("; the dense weights, a 1024-position KV cache and the workspace "
                          "alone do not fit");
    }
    return absl::ResourceExhaustedError(absl::StrCat(
        "needs ", Gib(need), " (dense weights ", Gib(p.dense.total()), " + KV cache ",
        Gib(p.kv_cache),
        p.recurrent_state > 0 ? absl::StrCat(" + recurrent state ", Gib(p.recurrent_state)) : "",
        " + workspace ", Gib(p.workspace.total()), " + margin ", Gib(p.margin),
        p.prefix_cache_device > 0
            ? absl::StrCat(" + prefix cache ", Gib(p.prefix_cache_device))
            : "",
        "), budget ", Gib(options.budget_bytes), ": ", Gib(need - options.budget_bytes),
        " short", hint));
  }
  p.expert_cache = CachePlan(shape, options.budget_bytes - need);
  if (options.expert_cache_slots >= 0) {
    // A configured slot count: exactly that many, if they fit.
    const ExpertCachePlan& rest = p.expert_cache;
    if (options.expert_cache_slots > rest.slots) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "--expert-cache ", options.expert_cache_slots, " slots of ",
          FormatBytes(rest.slot_bytes), " do not fit: the budget leaves ", Gib(rest.bytes),
          " after the rest of the plan (", rest.slots, " slots)"));
    }
    p.expert_cache = CachePlan(shape, rest.slot_bytes * options.expert_cache_slots);
  }
  return p;
}

namespace {

void Row(std::string* out, absl::string_view name, uint64_t bytes, absl::string_view note = "") {
  absl::StrAppendFormat(out, "  %-24s %16s  %10s  %s\n", name, absl::StrCat(bytes),
                        FormatBytes(bytes), note);
}

}  // namespace

std::string FormatPlanTable(const MemoryPlan& p) {
  const PlanOptions& o = p.options;
  const model::HyperParams& hp = p.hp;
  std::string out;
  absl::StrAppendFormat(&out,
                        "model:    %s, %d layers, d %d, %d/%d heads x %d, %d experts top-%d, "
                        "expert FFN %d, vocab %d\n",
                        hp.arch, hp.n_layer, hp.n_embd, hp.n_head, hp.n_head_kv, hp.head_dim_k,
                        hp.n_expert, hp.n_expert_used, hp.n_ff_exp, hp.n_vocab);
  const bool mamba2 = std::any_of(hp.layers.begin(), hp.layers.end(), [](const auto& l) {
    return l.mixer == model::MixerKind::kMamba2;
  });
  if (mamba2) {
    absl::StrAppendFormat(&out,
                          "layers:   %d Mamba-2 (%d heads x %d, state %d, %d groups, conv %d) + %d "
                          "attention + %d MoE\n",
                          hp.n_recurrent_layers(), hp.ssm_n_v_heads, hp.ssm_head_v, hp.ssm_head_k,
                          hp.ssm_n_k_heads, hp.ssm_conv_kernel, hp.n_attention_layers(),
                          hp.n_moe_layers());
  } else if (hp.n_recurrent_layers() > 0) {
    absl::StrAppendFormat(&out,
                          "layers:   %d gated DeltaNet (%d/%d heads x %d, conv %d) + %d "
                          "attention\n",
                          hp.n_recurrent_layers(), hp.ssm_n_k_heads, hp.ssm_n_v_heads,
                          hp.ssm_head_k, hp.ssm_conv_kernel, hp.n_attention_layers());
  }
  absl::StrAppendFormat(&out, "options:  ctx %d x %d sequence%s, KV %s, micro-batch %d\n",
                        o.n_ctx, o.n_parallel, o.n_parallel == 1 ? "" : "s",
                        AbslView(KvTypeName(o.kv_type)), o.n_ubatch);
  absl::StrAppendFormat(&out, "budget:   %d bytes (%s)\n\n", o.budget_bytes,
                        FormatBytes(o.budget_bytes));
  absl::StrAppendFormat(&out, "  %-24s %16s  %10s\n", "GPU", "bytes", "");
  Row(&out, "dense weights", p.dense.total());
  Row(&out, mamba2 ? "  attention + Mamba-2"
            : hp.n_recurrent_layers() > 0 ? "  attention + DeltaNet" : "  attention",
      p.dense.attention);
  Row(&out, "  norms", p.dense.norms);
  Row(&out, "  routers", p.dense.routers);
  Row(&out, "  shared experts", p.dense.shared_experts);
  if (p.dense.expert_biases > 0) Row(&out, "  routed-expert biases", p.dense.expert_biases);
  Row(&out, "  output head", p.dense.output_head,
      p.host_token_embd == 0 ? "(tied: the token embedding, on the GPU)" : "");
  if (p.kv_layout.ring_sizes.empty()) {
    Row(&out, "KV cache", p.kv_cache,
        absl::StrFormat("%d bytes/position x %d x %d (%d attention layer%s)",
                        p.kv_bytes_per_position, o.n_ctx, o.n_parallel, hp.n_attention_layers(),
                        hp.n_attention_layers() == 1 ? "" : "s"));
  } else {
    int64_t full = 0, sliding = 0, ring = 0, full_values = 0, sliding_values = 0;
    for (size_t il = 0; il < p.kv_layout.layer_pages.size(); ++il) {
      const int64_t pages = p.kv_layout.layer_pages[il];
      if (pages == 0) continue;
      if (pages < p.kv_layout.n_pages) {
        ++sliding;
        ring = std::max(ring, pages * p.kv_layout.page_size);
        sliding_values = p.kv_layout.layer_values[il];
      } else {
        ++full;
        full_values = p.kv_layout.layer_values[il];
      }
    }
    if (full_values == sliding_values || full == 0 || sliding == 0) {
      Row(&out, "KV cache", p.kv_cache,
          absl::StrFormat("%d bytes/layer-position x %d: %d full-attention layer%s x %d + %d "
                          "sliding-window layer%s x %d (window + micro-batch)",
                          p.kv_row_bytes, o.n_parallel, full, full == 1 ? "" : "s",
                          p.kv_layout.n_pages * p.kv_layout.page_size, sliding,
                          sliding == 1 ? "" : "s", ring));
    } else {
      Row(&out, "KV cache", p.kv_cache,
          absl::StrFormat("x %d: %d full-attention layer%s x %d positions x %d bytes + %d "
                          "sliding-window layer%s x %d (window + micro-batch) x %d bytes",
                          o.n_parallel, full, full == 1 ? "" : "s",
                          p.kv_layout.n_pages * p.kv_layout.page_size,
                          KvElementBytes(o.kv_type, full_values), sliding,
                          sliding == 1 ? "" : "s", ring,
                          KvElementBytes(o.kv_type, sliding_values)));
    }
  }
  if (p.recurrent_state > 0) {
    Row(&out, "recurrent state", p.recurrent_state,
        absl::StrFormat("%d bytes/sequence x %d (%d %s layers, any context)",
                        p.recurrent_bytes_per_sequence, o.n_parallel,
                        hp.n_recurrent_layers(), mamba2 ? "Mamba-2" : "DeltaNet"));
  }
  Row(&out, "workspace", p.workspace.total());
  Row(&out, "  activations", p.workspace.activations);
  Row(&out, "  logits", p.workspace.logits);
  Row(&out, "  attention scratch", p.workspace.attention);
  Row(&out, "  rounding scratch", p.workspace.rounding);
  Row(&out, "  prefill staging", p.workspace.staging,
      absl::StrFormat("(%d streamed experts in flight)", o.stream_buffers));
  Row(&out, "margin", p.margin);
  if (p.prefix_cache_device > 0) {
    Row(&out, "prefix cache (device)", p.prefix_cache_device, "(--cache-device)");
  }
  const ExpertCachePlan& c = p.expert_cache;
  const int64_t all = c.moe_layers * c.experts_per_layer;
  Row(&out, "expert cache", c.bytes,
      absl::StrFormat("%d experts of %d bytes = %d per layer of %d (%.1f%%)", c.slots,
                      c.slot_bytes, c.slots_per_layer, c.experts_per_layer,
                      all ? 100.0 * c.slots / all : 0.0));
  Row(&out, "total", p.gpu_total());
  absl::StrAppendFormat(&out, "\n  %-24s\n", "host (CPU)");
  Row(&out, "token embedding", p.host_token_embd,
      p.host_token_embd ? "(rows gathered per step, copied up)" : "(tied: on the GPU)");
  Row(&out, "routed experts", p.host_routed_experts, "(expert-workers)");
  if (p.host_nextn > 0) {
    Row(&out, "NextN/MTP blocks", p.host_nextn,
        absl::StrFormat("(%d block(s) after the trunk: loaded, kept aside, not run)",
                        p.hp.n_nextn()));
  }
  return out;
}

std::string FormatPlanJson(const MemoryPlan& p) {
  const PlanOptions& o = p.options;
  nlohmann::ordered_json j;
  j["budget_bytes"] = o.budget_bytes;
  j["options"] = {{"ctx", o.n_ctx},
                  {"parallel", o.n_parallel},
                  {"kv_type", std::string(KvTypeName(o.kv_type))},
                  {"ubatch", o.n_ubatch},
                  {"margin_bytes", o.margin_bytes}};
  j["gpu"] = {
      {"dense_weights",
       {{"total", p.dense.total()},
        {"attention", p.dense.attention},
        {"norms", p.dense.norms},
        {"routers", p.dense.routers},
        {"shared_experts", p.dense.shared_experts},
        {"output_head", p.dense.output_head},
        {"expert_biases", p.dense.expert_biases}}},
      {"kv_cache",
       {{"total", p.kv_cache},
        {"bytes_per_position", p.kv_bytes_per_position},
        {"layer_positions_per_sequence", p.kv_layout.positions_total()},
        {"attention_layers", p.hp.n_attention_layers()}}},
      {"recurrent_state",
       {{"total", p.recurrent_state},
        {"bytes_per_sequence", p.recurrent_bytes_per_sequence},
        {"deltanet_layers", p.hp.n_recurrent_layers()}}},
      {"workspace",
       {{"total", p.workspace.total()},
        {"activations", p.workspace.activations},
        {"logits", p.workspace.logits},
        {"attention", p.workspace.attention},
        {"rounding", p.workspace.rounding},
        {"staging", p.workspace.staging}}},
      {"margin", p.margin},
      {"prefix_cache_device", p.prefix_cache_device},
      {"expert_cache",
       {{"total", p.expert_cache.bytes},
        {"slot_bytes", p.expert_cache.slot_bytes},
        {"slots", p.expert_cache.slots},
        {"slots_per_layer", p.expert_cache.slots_per_layer},
        {"moe_layers", p.expert_cache.moe_layers},
        {"experts_per_layer", p.expert_cache.experts_per_layer}}},
      {"total", p.gpu_total()}};
  j["host"] = {{"token_embd", p.host_token_embd},
               {"routed_experts", p.host_routed_experts},
               {"nextn", p.host_nextn}};
  return j.dump(2) + "\n";
}

}  // namespace moesplit::plan
