#include "common/backend/cuda/cuda_forward.h"

#include <chrono>
#include <climits>
#include <cmath>
#include <functional>
#include <future>

#include "absl/strings/str_cat.h"
#include "common/backend/cuda/cuda_backend.h"
#include "common/backend/cuda/cuda_status.h"
#include "common/backend/cuda/internal/block_codec.h"
#include "common/backend/cuda/internal/cuda_raw.h"
#include "common/backend/cuda/internal/forward_buffers.h"
#include "common/backend/cuda/internal/router_row.h"
#include "common/base/status.h"
#include "common/model/internal/ops.h"
#include "common/quant/quant.h"

namespace moesplit::cuda {

using model::HyperParams;
using model::LogitsMode;
using internal::DeviceMatrixBuf;
using internal::DeviceVec;
using internal::LayerW;

// ------------------------------------------------------------------ weights

namespace {

uint64_t MatrixBytes(const quant::WeightView& w) {
  return w.data == nullptr ? 0 : static_cast<uint64_t>(w.n_rows) * w.row_bytes;
}
uint64_t VecBytes(const std::vector<float>& v) { return v.size() * sizeof(float); }

// Calls fn(view) for every matrix the device holds of the layers, by the
// tensor table (a per-head tensor: its first head's).
template <typename Fn>
void ForEachLayerMatrix(const model::Model& m, Fn fn) {
  for (int il = 0; il < m.n_layer(); ++il) {
    model::ForEachLayerTensor(
        [&](auto row, const auto& w) {
          if constexpr (row.form == model::TensorForm::kMatrix) {
            if (w.data != nullptr) fn(w);
          } else if constexpr (row.form == model::TensorForm::kHeads) {
            if (w.data != nullptr) fn(w.Expert(0));
          }
        },
        m.layer(il));
  }
}

// The workspace's element counts are the memory planner's
// (plan::GpuWorkspace, in the plan): its geometry constants must agree.
static_assert(plan::kGpuAttentionChunk == raw::kAttentionChunk);
static_assert(plan::kGpuDecodeTokens == raw::kDecodeTokens);

bool HasMla(const HyperParams& hp) {
  for (const model::LayerSpec& l : hp.layers) {
    if (l.mixer == model::MixerKind::kMla) return true;
  }
  return false;
}

// The grouped router of layer L (deepseek2's; model::internal::
// UsesGeneralRouter), for the kernel.
raw::GroupedRouter GroupedRouterOf(const HyperParams& hp, const float* selection_bias) {
  raw::GroupedRouter r;
  r.sigmoid = hp.router_scoring == model::RouterSpec::Scoring::kSigmoid;
  r.n_expert = static_cast<int>(hp.n_expert);
  r.k = static_cast<int>(hp.n_expert_used);
  r.normalize = hp.norm_topk;
  r.scale = hp.expert_weights_scale;
  r.bias = selection_bias;
  r.n_groups = hp.n_expert_groups > 1 ? static_cast<int>(hp.n_expert_groups) : 1;
  r.n_group_used = hp.n_expert_groups > 1 ? static_cast<int>(hp.n_group_used) : 1;
  return r;
}

absl::Status CheckSupported(const model::Model& m) {
  const HyperParams& hp = m.hparams();
  bool general = false;
  for (int il = 0; il < m.n_layer(); ++il) {
    general = general || (hp.layers[il].ffn == model::FfnKind::kMoe &&
                          model::internal::UsesGeneralRouter(hp, !m.layer(il).router_sel_b.empty()));
  }
  if (general) {
    if (hp.router_scoring == model::RouterSpec::Scoring::kSoftmaxSelected) {
      return absl::UnimplementedError(
          "CUDA router: top-k-then-softmax scoring with a selection bias, groups or a weight scale");
    }
    if (const char* bad = codec::CheckGroupedRouter(GroupedRouterOf(hp, nullptr))) {
      return absl::UnimplementedError(absl::StrCat(
          "CUDA router: ", bad, " (", hp.n_expert, " experts, top ", hp.n_expert_used, ", ",
          hp.n_expert_groups, " groups, ", hp.n_group_used, " used)"));
    }
  }
  // Not yet on CUDA: per-layer attention geometry, RoPE frequency divisors,
  // V norm, GeGLU, the Gemma norms and scales around the FFN.
  if (hp.per_layer_geometry() || !hp.rope.freq_factors.empty() || hp.v_rms_norm ||
      hp.expert_ffn.activation == model::ExpertActivation::kGeGlu ||
      hp.dense_activation != model::ExpertActivation::kSwiGlu || hp.final_logit_softcap != 0 ||
      hp.embed_scale_sqrt_d) {
    return absl::UnimplementedError(absl::StrCat(
        "CUDA forward: ", hp.arch, "'s per-layer attention geometry, RoPE divisors, V norm, "
        "GeGLU and extra FFN norms are CPU-only for now"));
  }
  if (HasMla(hp)) {
    raw::AttentionParams a;
    a.kv.type = GgmlType::kF16;
    a.n_head = static_cast<int>(hp.n_head);
    a.n_head_kv = static_cast<int>(hp.n_head_kv);
    a.head_dim = static_cast<int>(hp.head_dim_k);
    a.head_dim_v = static_cast<int>(hp.head_dim_v);
    if (hp.n_head_kv != 1 || !raw::AttentionShapeSupported(a) ||
        hp.rope.n_rot > hp.head_dim_k_mla || !hp.rope.norm_style) {
      return absl::UnimplementedError(absl::StrCat(
          "CUDA MLA needs one latent KV head of up to ", raw::kMaxAttentionDimK,
          " values (latent + rope key), a latent of a power of two from 32 to ",
          raw::kMaxAttentionDimV, " and NORM RoPE; the model has ", hp.n_head_kv, " x ",
          hp.head_dim_k, " / ", hp.head_dim_v));
    }
  } else if (hp.head_dim_k != hp.head_dim_v || hp.head_dim_k % 32 != 0 ||
             hp.head_dim_k > 256) {
    return absl::UnimplementedError(absl::StrCat("CUDA attention needs head_dim_k == head_dim_v, "
                                                 "a multiple of 32 up to 256; the model has ",
                                                 hp.head_dim_k, " / ", hp.head_dim_v));
  } else if (hp.rope.norm_style || hp.rope.n_rot > hp.head_dim_k) {
    return absl::UnimplementedError("CUDA attention: only NEOX RoPE with n_rot <= head_dim");
  }
  for (const model::LayerSpec& l : hp.layers) {
    if (l.mixer == model::MixerKind::kMamba2 || l.mixer == model::MixerKind::kNone ||
        l.ffn == model::FfnKind::kNone) {
      return absl::UnimplementedError(absl::StrCat(
          "CUDA forward: ", std::string(model::MixerKindName(l.mixer)), " / ",
          std::string(model::FfnKindName(l.ffn)),
          " layers (Mamba-2, a mixer or an FFN alone: nemotron_h_moe) have no CUDA kernels yet"));
    }
  }
  if (!model::IsGated(hp.expert_ffn.activation) || hp.moe_latent > 0) {
    return absl::UnimplementedError(absl::StrCat(
        "CUDA forward: expert activation ", model::ExpertFfnName(hp.expert_ffn),
        hp.moe_latent > 0 ? " with LatentMoE" : "", " has no CUDA kernels yet"));
  }
  if (hp.n_recurrent_layers() > 0) {
    const int64_t dim = hp.ssm_head_k;
    if (hp.ssm_head_v != dim || dim % 16 != 0 || dim < 16 || dim > raw::kMaxDeltaDim ||
        hp.ssm_n_k_heads < 1 || hp.ssm_n_v_heads < 1) {
      return absl::UnimplementedError(absl::StrCat(
          "CUDA gated DeltaNet needs equal key and value head sizes, a multiple of 16 up to ",
          raw::kMaxDeltaDim, "; the model has ", hp.ssm_head_k, " / ", hp.ssm_head_v));
    }
    if (hp.ssm_conv_kernel < 2 || hp.ssm_conv_kernel > raw::kMaxConvKernel) {
      return absl::UnimplementedError(absl::StrCat("CUDA gated DeltaNet: conv kernel ",
                                                   hp.ssm_conv_kernel, " not in [2, ",
                                                   raw::kMaxConvKernel, "]"));
    }
  }
  if (hp.n_expert > 1024 || hp.n_expert_used < 1) {
    return absl::UnimplementedError(absl::StrCat("CUDA router: n_expert ", hp.n_expert));
  }
  absl::Status st;
  auto check = [&](const quant::WeightView& w) {
    if (st.ok() && !raw::DeviceSupports(w.type)) {
      st = absl::UnimplementedError(
          absl::StrCat("CUDA kernels do not decode ", std::string(GgmlTypeName(w.type))));
    }
  };
  ForEachLayerMatrix(m, check);
  check(m.token_embd());
  check(m.output());
  return st;
}

}  // namespace

absl::StatusOr<plan::MemoryPlan> PlanFor(const model::Model& m, const CudaForwardOptions& o,
                                         backend::Device* device) {
  plan::PlanOptions po;
  po.budget_bytes = o.gpu_memory_budget;
  if (po.budget_bytes == 0) {
    ASSIGN_OR_RETURN(const backend::MemoryInfo mem, device->Memory());
    po.budget_bytes = mem.free_bytes + device->allocated_bytes();
  }
  switch (o.kv_type) {
    case GgmlType::kF16: po.kv_type = plan::KvType::kF16; break;
    case GgmlType::kQ8_0: po.kv_type = plan::KvType::kQ8_0; break;
    case GgmlType::kQ4_0: po.kv_type = plan::KvType::kQ4_0; break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "KV cache type ", std::string(GgmlTypeName(o.kv_type)), " (supported: F16, Q8_0, Q4_0)"));
  }
  po.n_ctx = o.n_ctx;
  po.n_parallel = 1;
  po.n_ubatch = o.max_batch;
  po.kv_page_size = o.kv_page_size;
  po.stream_buffers = o.stream_buffers;
  po.margin_bytes = 0;
  return plan::PlanMemory(plan::ShapeOfModel(m), po);
}

namespace {

GgmlType KvGgmlType(plan::KvType t) {
  switch (t) {
    case plan::KvType::kQ8_0: return GgmlType::kQ8_0;
    case plan::KvType::kQ4_0: return GgmlType::kQ4_0;
    case plan::KvType::kF16: break;
  }
  return GgmlType::kF16;
}

}  // namespace

namespace {

absl::Status UploadMatrix(backend::Device* dev, backend::Stream* s, const quant::WeightView& w,
                          DeviceMatrixBuf* out) {
  if (w.data == nullptr) return absl::OkStatus();
  const uint64_t bytes = MatrixBytes(w);
  ASSIGN_OR_RETURN(out->buf, dev->Allocate(bytes));
  RETURN_IF_ERROR(s->CopyToDevice(*out->buf, 0, w.data, bytes));
  out->m = {w.type, out->buf->data(), w.n_rows, w.n_cols, w.row_bytes};
  return absl::OkStatus();
}

// Every head's matrix of an MLA per-head tensor; out->m is one head's shape.
absl::Status UploadHeads(backend::Device* dev, backend::Stream* s,
                         const model::ExpertTensorView& v, internal::DeviceHeads* out) {
  if (v.data == nullptr) return absl::OkStatus();
  const uint64_t bytes = v.expert_bytes * static_cast<uint64_t>(v.n_expert);
  ASSIGN_OR_RETURN(out->buf, dev->Allocate(bytes));
  RETURN_IF_ERROR(s->CopyToDevice(*out->buf, 0, v.data, bytes));
  out->m = {v.type, out->buf->data(), v.n_out, v.n_in, v.row_bytes};
  out->head_bytes = v.expert_bytes;
  return absl::OkStatus();
}

absl::Status UploadVec(backend::Device* dev, backend::Stream* s, const std::vector<float>& v,
                       DeviceVec* out) {
  if (v.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(out->buf, dev->Allocate(VecBytes(v)));
  RETURN_IF_ERROR(s->CopyToDevice(*out->buf, 0, v.data(), VecBytes(v)));
  out->p = static_cast<const float*>(out->buf->data());
  return absl::OkStatus();
}

}  // namespace

namespace {

// What Create checks before planning or allocating anything.
absl::Status CheckCreate(const model::Model& model, const model::ExpertBackend* experts,
                         const backend::Device* device, GgmlType kv_type) {
  if (device == nullptr || device->kind() != backend::DeviceKind::kCuda || experts == nullptr) {
    return absl::InvalidArgumentError("CudaForward: needs a CUDA device and an expert backend");
  }
  RETURN_IF_ERROR(CheckSupported(model));
  if (HasMla(model.hparams()) && kv_type != GgmlType::kF16) {
    return absl::UnimplementedError(absl::StrCat(
        "CUDA MLA attention reads an F16 KV cache only (asked for ",
        std::string(GgmlTypeName(kv_type)), ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaForward>> CudaForward::Create(
    std::shared_ptr<const model::Model> model, model::ExpertBackend* experts,
    backend::Device* device, const CudaForwardOptions& options) {
  RETURN_IF_ERROR(CheckCreate(*model, experts, device, options.kv_type));
  ASSIGN_OR_RETURN(const plan::MemoryPlan plan, PlanFor(*model, options, device));
  return Create(std::move(model), experts, device, plan, options);
}

absl::StatusOr<std::unique_ptr<CudaForward>> CudaForward::Create(
    std::shared_ptr<const model::Model> model, model::ExpertBackend* experts,
    backend::Device* device, const plan::MemoryPlan& plan, const CudaForwardOptions& run) {
  const plan::PlanOptions& po = plan.options;
  RETURN_IF_ERROR(CheckCreate(*model, experts, device, KvGgmlType(po.kv_type)));
  if (po.n_ubatch < 1 || po.n_ubatch > plan::kGpuMaxMicroBatch) {
    return absl::InvalidArgumentError(
        absl::StrCat("micro-batch ", po.n_ubatch, " not in [1, ", plan::kGpuMaxMicroBatch, "]"));
  }
  if (po.stream_buffers < 1 || po.stream_buffers > 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("stream_buffers ", po.stream_buffers, " not in [1, 16]"));
  }
  if (run.stream_min_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("stream_min_tokens ", run.stream_min_tokens, " is negative"));
  }
  if (plan.hp.n_layer != model->hparams().n_layer || plan.hp.n_embd != model->hparams().n_embd) {
    return absl::InvalidArgumentError("CudaForward: the memory plan is of another model");
  }
  // What the plan allocates besides the expert cache, whose slots take the
  // rest (the margin and the prefix cache's device tier stay free).
  const uint64_t need = plan.dense.total() + plan.workspace.total() + plan.kv_cache +
                        plan.recurrent_state;
  const uint64_t budget = po.budget_bytes;
  if (need + device->allocated_bytes() > budget) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "GPU memory plan of ", need, " bytes (dense weights ", plan.dense.total(), ", KV cache ",
        plan.kv_cache, ", recurrent state ", plan.recurrent_state, ", workspace ",
        plan.workspace.total(), ") exceeds the budget of ", budget, " bytes (",
        device->allocated_bytes(), " already in use)"));
  }
  if (device->budget() == 0 || device->budget() > budget) device->set_budget(budget);
  CudaForwardOptions options = run;
  options.n_ctx = po.n_ctx;
  options.kv_type = KvGgmlType(po.kv_type);
  options.kv_page_size = static_cast<int>(po.kv_page_size);
  options.max_batch = po.n_ubatch;
  options.stream_buffers = po.stream_buffers;
  options.gpu_memory_budget = budget;

  std::unique_ptr<CudaForward> f(new CudaForward());
  f->model_ = std::move(model);
  f->experts_ = experts;
  f->device_ = device;
  f->options_ = options;
  f->plan_ = plan;
  ASSIGN_OR_RETURN(f->stream_, device->CreateStream());
  ASSIGN_OR_RETURN(f->copied_, device->CreateEvent());
  const model::Model& m = *f->model_;
  backend::Stream* s = f->stream_.get();
  f->w_ = std::make_unique<Weights>();
  Weights& W = *f->w_;
  if (m.tied_output()) {
    RETURN_IF_ERROR(UploadMatrix(device, s, m.token_embd(), &W.embd));
    W.output.m = W.embd.m;
  } else {
    RETURN_IF_ERROR(UploadMatrix(device, s, m.output(), &W.output));
  }
  RETURN_IF_ERROR(UploadVec(device, s, m.output_norm(), &W.output_norm));
  W.layers.resize(m.n_layer());
  for (int il = 0; il < m.n_layer(); ++il) {
    // Every row of the tensor table the device holds (not the routed experts).
    absl::Status st;
    model::ForEachLayerTensor(
        [&](auto row, const auto& host, auto& dev) {
          if (!st.ok()) return;
          if constexpr (row.form == model::TensorForm::kMatrix) {
            st = UploadMatrix(device, s, host, &dev);
          } else if constexpr (row.form == model::TensorForm::kVector) {
            st = UploadVec(device, s, host, &dev);
          } else if constexpr (row.form == model::TensorForm::kHeads) {
            st = UploadHeads(device, s, host, &dev);
          }
        },
        m.layer(il), W.layers[il]);
    RETURN_IF_ERROR(st);
  }
  RETURN_IF_ERROR(s->Synchronize());

  // Workspace.
  f->ws_ = std::make_unique<Workspace>();
  Workspace& ws = *f->ws_;
  ws.sizes = plan.workspace_elems;
  const WorkspaceSizes& z = ws.sizes;
  auto alloc = [&](int64_t elems, auto** p) -> absl::Status {
    if (elems <= 0) return absl::OkStatus();
    ASSIGN_OR_RETURN(auto b, device->Allocate(static_cast<uint64_t>(elems) * sizeof(**p)));
    *p = static_cast<std::remove_reference_t<decltype(*p)>>(b->data());
    ws.bufs.push_back(std::move(b));
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(alloc(z.x, &ws.x));
  RETURN_IF_ERROR(alloc(z.x, &ws.h));
  RETURN_IF_ERROR(alloc(z.x, &ws.o));
  RETURN_IF_ERROR(alloc(z.x, &ws.part));
  RETURN_IF_ERROR(alloc(z.q, &ws.q));
  RETURN_IF_ERROR(alloc(z.k, &ws.k));
  RETURN_IF_ERROR(alloc(z.v, &ws.v));
  RETURN_IF_ERROR(alloc(z.attn, &ws.attn));
  RETURN_IF_ERROR(alloc(z.router, &ws.router));
  RETURN_IF_ERROR(alloc(z.topk, &ws.wts));
  RETURN_IF_ERROR(alloc(z.topk, &ws.ids));
  RETURN_IF_ERROR(alloc(z.sh, &ws.sh_g));
  RETURN_IF_ERROR(alloc(z.sh, &ws.sh_u));
  if (z.sh > 0) RETURN_IF_ERROR(alloc(z.tokens, &ws.sh_s));
  RETURN_IF_ERROR(alloc(z.rope, &ws.rope));
  RETURN_IF_ERROR(alloc(z.logits, &ws.logits));
  RETURN_IF_ERROR(alloc(z.scratch, &ws.scratch));
  RETURN_IF_ERROR(alloc(z.split, &ws.split));
  RETURN_IF_ERROR(alloc(z.x, &ws.ex_in));
  RETURN_IF_ERROR(alloc(z.x, &ws.ex_out));
  RETURN_IF_ERROR(alloc(z.ex_ff, &ws.ex_g));
  RETURN_IF_ERROR(alloc(z.ex_ff, &ws.ex_u));
  RETURN_IF_ERROR(alloc(z.topk, &ws.ex_w));
  RETURN_IF_ERROR(alloc(z.topk, &ws.ex_idx));
  RETURN_IF_ERROR(alloc(z.tokens, &ws.tokens));
  RETURN_IF_ERROR(alloc(z.router, &ws.pred_logits));
  RETURN_IF_ERROR(alloc(z.topk, &ws.pred_wts));
  RETURN_IF_ERROR(alloc(z.topk, &ws.pred_ids));
  RETURN_IF_ERROR(alloc(z.mixer(), &ws.qg));
  ws.dn_qkv = ws.qg;  // one buffer: no layer is both gated attention and DeltaNet
  RETURN_IF_ERROR(alloc(z.dn_inner, &ws.dn_z));
  RETURN_IF_ERROR(alloc(z.dn_inner, &ws.dn_out));
  RETURN_IF_ERROR(alloc(z.dn_heads, &ws.dn_beta));
  RETURN_IF_ERROR(alloc(z.dn_heads, &ws.dn_g));
  RETURN_IF_ERROR(alloc(z.mla_q, &ws.mla_q));
  RETURN_IF_ERROR(alloc(z.mla_qa, &ws.mla_qa));
  RETURN_IF_ERROR(alloc(z.mla_in, &ws.mla_in));
  ASSIGN_OR_RETURN(ws.pin_pred_ids, PinnedHostBuffer::Create(z.topk * sizeof(int32_t)));
  // Streamed prefill: staging buffers, their copy stream and events.
  f->experts_on_gpu_ = m.hparams().n_expert > 0 && GpuExpertCache::CheckCopyable(m).ok();
  if (options.stream_min_tokens > 0 && !f->experts_on_gpu_) {
    return absl::UnimplementedError(
        "streamed prefill: the routed experts are not all in a GGUF format the kernels decode");
  }
  if (z.stream_buffers > 0 && z.slot_bytes > 0) {
    ASSIGN_OR_RETURN(f->stage_copy_, device->CreateStream());
    for (int i = 0; i < z.stream_buffers; ++i) {
      ASSIGN_OR_RETURN(auto b, device->Allocate(z.slot_bytes));
      ASSIGN_OR_RETURN(auto ready, device->CreateEvent());
      ASSIGN_OR_RETURN(auto free, device->CreateEvent());
      f->staging_.push_back(std::move(b));
      f->stage_ready_.push_back(std::move(ready));
      f->stage_free_.push_back(std::move(free));
    }
  }
  if (options.pin_expert_source) {
    // One range over every routed-expert tensor (GGUF keeps them between
    // the layers' dense tensors; those are page-locked too, harmlessly).
    const uint8_t* lo = nullptr;
    const uint8_t* hi = nullptr;
    for (int il = 0; il < m.n_layer(); ++il) {
      const model::LayerWeights& L = m.layer(il);
      for (const model::ExpertTensorView* v : {&L.gate_exps, &L.up_exps, &L.down_exps}) {
        if (v->data == nullptr) continue;
        const uint8_t* end = v->data + v->expert_bytes * v->n_expert;
        if (lo == nullptr || v->data < lo) lo = v->data;
        if (hi == nullptr || end > hi) hi = end;
      }
    }
    if (lo != nullptr) {
      auto reg = HostRegistration::Create(lo, static_cast<uint64_t>(hi - lo), /*read_only=*/true);
      if (reg.ok()) f->pinned_source_ = std::move(*reg);
    }
    f->stats_.expert_source_pinned = f->pinned_source_ != nullptr;
  }
  ASSIGN_OR_RETURN(ws.pin_h, PinnedHostBuffer::Create(z.x * sizeof(float)));
  ASSIGN_OR_RETURN(ws.pin_x, PinnedHostBuffer::Create(z.x * sizeof(float)));
  ASSIGN_OR_RETURN(ws.pin_part, PinnedHostBuffer::Create(z.x * sizeof(float)));
  ASSIGN_OR_RETURN(ws.pin_ids, PinnedHostBuffer::Create(z.topk * sizeof(int32_t)));
  ASSIGN_OR_RETURN(ws.pin_wts, PinnedHostBuffer::Create(z.topk * sizeof(float)));
  ASSIGN_OR_RETURN(ws.pin_ex_idx, PinnedHostBuffer::Create(z.topk * sizeof(int32_t)));
  ASSIGN_OR_RETURN(ws.pin_ex_w, PinnedHostBuffer::Create(z.topk * sizeof(float)));
  return f;
}

CudaForward::~CudaForward() {
  if (stream_ != nullptr) stream_->Synchronize().IgnoreError();
}

absl::StatusOr<std::unique_ptr<CudaKvCache>> CudaForward::CreateCache() const {
  return CudaKvCache::Create(device_, model_->hparams(), options_.n_ctx, options_.kv_type,
                             options_.kv_page_size, options_.max_batch);
}

// ------------------------------------------------------------------ Eval

namespace {
using SteadyClock = std::chrono::steady_clock;
double SecondsSince(SteadyClock::time_point t) {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}
}  // namespace

absl::Status CudaForward::Eval(absl::Span<const int32_t> tokens, CudaKvCache* cache,
                               LogitsMode mode, std::vector<float>* logits) {
  const CudaSequenceBatch one[1] = {{cache, tokens, mode, logits}};
  return EvalBatch(one);
}

absl::Status CudaForward::EvalBatch(absl::Span<const CudaSequenceBatch> seqs) {
  const HyperParams& hp = model_->hparams();
  if (seqs.empty()) return absl::InvalidArgumentError("EvalBatch: no sequences");
  int64_t total = 0;
  for (size_t e = 0; e < seqs.size(); ++e) {
    const CudaSequenceBatch& q = seqs[e];
    const std::string who = seqs.size() == 1 ? "Eval" : absl::StrCat("EvalBatch entry ", e);
    if (q.tokens.empty()) return absl::InvalidArgumentError(absl::StrCat(who, ": empty batch"));
    if (q.cache == nullptr || !q.cache->Matches(hp)) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, ": KV cache missing or made for another model"));
    }
    for (size_t f = 0; f < e; ++f) {
      if (seqs[f].cache == q.cache) {
        return absl::InvalidArgumentError(
            absl::StrCat(who, ": the KV cache of entry ", f, " appears twice"));
      }
    }
    if (q.mode != LogitsMode::kNone && q.logits == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, ": logits requested without an output vector"));
    }
    for (size_t i = 0; i < q.tokens.size(); ++i) {
      if (q.tokens[i] < 0 || q.tokens[i] >= hp.n_vocab) {
        return absl::InvalidArgumentError(absl::StrCat(
            who, ": token ", i, " has id ", q.tokens[i], ", outside [0, ", hp.n_vocab, ")"));
      }
    }
    RETURN_IF_ERROR(q.cache->CheckRoom(static_cast<int64_t>(q.tokens.size())));
    RETURN_IF_ERROR(q.cache->WindowIntact());
    total += static_cast<int64_t>(q.tokens.size());
  }
  if (total > INT32_MAX / hp.n_expert_used) {
    return absl::InvalidArgumentError(
        absl::StrCat("Eval: batch of ", total, " tokens is too large"));
  }
  const int64_t nv = hp.n_vocab;
  for (const CudaSequenceBatch& q : seqs) {
    if (q.mode == LogitsMode::kAll) q.logits->resize(q.tokens.size() * nv);
    if (q.mode == LogitsMode::kLast) q.logits->resize(nv);
  }
  const auto t_eval = SteadyClock::now();
  // The entries' tokens one after another, in micro-batches of max_batch
  // tokens; a micro-batch may hold parts of several sequences (Segments).
  std::vector<int32_t> all;
  all.reserve(total);
  std::vector<int64_t> first(seqs.size());
  for (size_t e = 0; e < seqs.size(); ++e) {
    first[e] = static_cast<int64_t>(all.size());
    all.insert(all.end(), seqs[e].tokens.begin(), seqs[e].tokens.end());
  }
  const int64_t B = options_.max_batch;
  std::vector<Segment> segs;
  for (int64_t s = 0; s < total; s += B) {
    const int64_t cn = std::min(B, total - s);
    segs.clear();
    for (size_t e = 0; e < seqs.size(); ++e) {
      const int64_t b = std::max(first[e], s);
      const int64_t end = std::min<int64_t>(first[e] + seqs[e].tokens.size(), s + cn);
      if (b >= end) continue;
      segs.push_back({seqs[e].cache, b - s, end - b, seqs[e].cache->n_past() + (b - first[e]), e});
      seqs[e].cache->NoteWrite(segs.back().pos0 + segs.back().n);
    }
    RETURN_IF_ERROR(EvalChunk(absl::MakeConstSpan(all).subspan(s, cn), segs));
    for (const Segment& g : segs) {
      const CudaSequenceBatch& q = seqs[g.entry];
      const int64_t done = g.pos0 - q.cache->n_past();  // the entry's tokens before g
      if (q.mode == LogitsMode::kAll) {
        RETURN_IF_ERROR(Head(g.first, g.n, q.logits->data() + done * nv));
      } else if (q.mode == LogitsMode::kLast &&
                 done + g.n == static_cast<int64_t>(q.tokens.size())) {
        RETURN_IF_ERROR(Head(g.first + g.n - 1, 1, q.logits->data()));
      }
    }
  }
  RETURN_IF_ERROR(stream_->Synchronize());
  for (const CudaSequenceBatch& q : seqs) q.cache->Commit(static_cast<int64_t>(q.tokens.size()));
  stats_.eval_seconds += SecondsSince(t_eval);
  stats_.evals++;
  stats_.tokens += total;
  return absl::OkStatus();
}

absl::Status CudaForward::EvalChunk(absl::Span<const int32_t> tokens,
                                    absl::Span<const Segment> segs) {
  const HyperParams& hp = model_->hparams();
  Workspace& ws = *ws_;
  void* s = stream_->native();
  const int64_t n = static_cast<int64_t>(tokens.size());
  // The stream may still read rope_host / tokens of the previous chunk.
  RETURN_IF_ERROR(stream_->Synchronize());
  const int64_t half = hp.rope.n_rot / 2;
  ws.rope_host.resize(n * half * 2);
  model::internal::RopeAngles a;
  for (const Segment& g : segs) {
    for (int64_t t = g.first; t < g.first + g.n; ++t) {
      model::internal::ComputeRopeAngles(hp.rope, g.pos0 + (t - g.first), &a);
      for (int64_t i = 0; i < half; ++i) {
        ws.rope_host[(t * half + i) * 2] = a.cos[i];
        ws.rope_host[(t * half + i) * 2 + 1] = a.sin[i];
      }
    }
  }
  RETURN_IF_CUDA_ERROR(raw::MemcpyAsync(ws.rope, ws.rope_host.data(),
                                        ws.rope_host.size() * sizeof(float), 0, s));
  if (w_->embd.present()) {
    RETURN_IF_CUDA_ERROR(raw::MemcpyAsync(ws.tokens, tokens.data(), n * sizeof(int32_t), 0, s));
    RETURN_IF_CUDA_ERROR(raw::DequantRows(w_->embd.m, ws.tokens, 0, n, ws.x, s));
  } else {
    // The embedding rows on the host (the CPU reference's dequantiser), up.
    const quant::WeightView& e = model_->token_embd();
    float* x = static_cast<float*>(ws.pin_x->data());
    for (int64_t t = 0; t < n; ++t) {
      RETURN_IF_ERROR(quant::DequantizeRow(e.type, e.data + tokens[t] * e.row_bytes,
                                           x + t * hp.n_embd, hp.n_embd));
    }
    RETURN_IF_CUDA_ERROR(raw::MemcpyAsync(ws.x, x, n * hp.n_embd * sizeof(float), 0, s));
  }
  for (int il = 0; il < model_->n_layer(); ++il) {
    layer_start_ = SteadyClock::now();
    if (hp.is_recurrent(il)) {
      RETURN_IF_ERROR(DeltaNet(il, n, segs));
    } else if (hp.layers[il].mixer == model::MixerKind::kMla) {
      RETURN_IF_ERROR(Mla(il, n, segs));
    } else {
      RETURN_IF_ERROR(Attention(il, n, segs));
    }
    if (hp.layers[il].ffn == model::FfnKind::kDense) {
      RETURN_IF_ERROR(DenseFfn(il, n));
    } else {
      RETURN_IF_ERROR(MoeFfn(il, n));
    }
  }
  if (expert_cache_ != nullptr) expert_cache_->EndStep();
  return absl::OkStatus();
}

absl::Status CudaForward::MoeFfn(int il, int64_t n) {
  const HyperParams& hp = model_->hparams();
  const LayerW& L = w_->layers[il];
  Workspace& ws = *ws_;
  void* s = stream_->native();
  const raw::GemmContext g{ws.scratch, ws.sizes.scratch};
  const int64_t d = hp.n_embd, k = hp.n_expert_used;
  RETURN_IF_CUDA_ERROR(raw::RmsNorm(ws.x, L.ffn_norm.p, n, d, hp.rms_eps, ws.h, s));
  // The router's logits (+ its bias), then the model's scoring.
  auto route = [&](const LayerW& R, float* logits, int32_t* ids, float* wts) -> absl::Status {
    RETURN_IF_CUDA_ERROR(raw::MatMul(R.router.m, ws.h, n, logits, g, s));
    if (R.router_b.p) RETURN_IF_CUDA_ERROR(raw::AddBias(logits, R.router_b.p, n, hp.n_expert, s));
    const int ne = static_cast<int>(hp.n_expert), kk = static_cast<int>(k);
    if (model::internal::UsesGeneralRouter(hp, R.router_sel_b.p != nullptr)) {
      RETURN_IF_CUDA_ERROR(raw::SelectExpertsGrouped(GroupedRouterOf(hp, R.router_sel_b.p),
                                                     logits, n, ids, wts, s));
    } else if (hp.router_scoring == model::RouterSpec::Scoring::kSoftmaxSelected) {
      RETURN_IF_CUDA_ERROR(raw::SelectExpertsTopKSoftmax(logits, n, ne, kk, ids, wts, s));
    } else {
      RETURN_IF_CUDA_ERROR(raw::SelectExperts(logits, n, ne, kk, hp.norm_topk, ids, wts, s));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(route(L, ws.router, ws.ids, ws.wts));
  RETURN_IF_CUDA_ERROR(raw::MemcpyAsync(ws.pin_h->data(), ws.h, n * d * sizeof(float), 1, s));
  RETURN_IF_CUDA_ERROR(raw::MemcpyAsync(ws.pin_ids->data(), ws.ids, n * k * sizeof(int32_t), 1, s));
  RETURN_IF_CUDA_ERROR(raw::MemcpyAsync(ws.pin_wts->data(), ws.wts, n * k * sizeof(float), 1, s));
  // The next layer's experts, predicted by its router on this layer's h, for
  // the cache to prefetch (not while streaming: those copies would compete).
  const bool streams = options_.stream_min_tokens > 0 && n >= options_.stream_min_tokens;
  const bool predict = expert_cache_ != nullptr && expert_cache_->options().prefetch && !streams &&
                       il + 1 < model_->n_layer() && w_->layers[il + 1].router.present();
  if (predict) {
    RETURN_IF_ERROR(route(w_->layers[il + 1], ws.pred_logits, ws.pred_ids, ws.pred_wts));
    RETURN_IF_CUDA_ERROR(raw::MemcpyAsync(ws.pin_pred_ids->data(), ws.pred_ids,
                                          n * k * sizeof(int32_t), 1, s));
  }
  RETURN_IF_ERROR(stream_->Record(*copied_));
  // The shared expert runs on the GPU while the host computes the routed ones.
  if (L.shexp_down.present()) {
    RETURN_IF_ERROR(SwiGluFfn(L.shexp_gate, L.shexp_up, L.shexp_down, n));
    if (L.shexp_gate_inp.present()) {
      RETURN_IF_CUDA_ERROR(raw::MatMul(L.shexp_gate_inp.m, ws.h, n, ws.sh_s, g, s));
      RETURN_IF_CUDA_ERROR(raw::ScaleRowsBySigmoid(ws.o, ws.sh_s, n, d, s));
    }
    RETURN_IF_CUDA_ERROR(raw::Add(ws.x, ws.o, n * d, s));
  }
  stats_.enqueue_seconds += SecondsSince(layer_start_);
  const auto t_wait = SteadyClock::now();
  RETURN_IF_ERROR(copied_->Synchronize());
  stats_.gpu_wait_seconds += SecondsSince(t_wait);
  auto t_host = SteadyClock::now();

  model::ExpertCall call;
  call.call_id = next_call_id_++;
  call.layer = il;
  call.n_tokens = static_cast<int32_t>(n);
  call.d = static_cast<int32_t>(d);
  const float* h = static_cast<const float*>(ws.pin_h->data());
  const int32_t* ids = static_cast<const int32_t*>(ws.pin_ids->data());
  const float* wts = static_cast<const float*>(ws.pin_wts->data());
  call.expert_ids.assign(ids, ids + n * k);
  call.weights.assign(wts, wts + n * k);
  call.token_offsets.resize(n + 1);
  for (int64_t t = 0; t <= n; ++t) call.token_offsets[t] = static_cast<uint32_t>(t * k);
  for (int64_t i = 0; i < n * k; ++i) {
    if (call.expert_ids[i] < 0 || call.expert_ids[i] >= hp.n_expert ||
        !std::isfinite(call.weights[i])) {
      return absl::InternalError(absl::StrCat("layer ", il, ": the GPU router produced expert ",
                                              call.expert_ids[i], " with weight ",
                                              call.weights[i]));
    }
  }
  // The host's share (call's routing once GpuExperts has taken the GPU's)
  // computes from the pinned copy of h and answers into the pinned upload
  // buffer: no copies on this side. When the layer streams experts, it
  // starts on another thread before the streamed copies are queued (from
  // pageable memory, queueing them blocks this thread while the bytes are
  // staged).
  float* part = static_cast<float*>(ws.pin_part->data());
  double host_call_s = 0;
  auto host_call = [this, &call, h, n, d, part, &host_call_s]() -> absl::Status {
    model::ExpertCallView v = call;
    v.hidden = absl::MakeConstSpan(h, n * d);
    const auto t0 = SteadyClock::now();
    absl::Status st = experts_->ComputeInto(v, part, nullptr);
    host_call_s = SecondsSince(t0);
    return st;
  };
  std::future<absl::Status> host_done;  // declared after call: joined first
  auto start_host = [&] { host_done = std::async(std::launch::async, host_call); };
  RETURN_IF_ERROR(GpuExperts(il, &call, start_host));
  if (predict) {
    const int32_t* pred = static_cast<const int32_t*>(ws.pin_pred_ids->data());
    RETURN_IF_ERROR(expert_cache_->Prefetch(il + 1, absl::MakeConstSpan(pred, n * k)));
  }
  stats_.expert_cache_misses += call.expert_ids.size();
  stats_.host_seconds += SecondsSince(t_host);
  if (call.expert_ids.empty()) return absl::OkStatus();  // every pair ran on the GPU
  RETURN_IF_ERROR(host_done.valid() ? host_done.get() : host_call());
  stats_.expert_seconds += host_call_s;
  stats_.expert_calls++;
  t_host = SteadyClock::now();
  RETURN_IF_CUDA_ERROR(raw::MemcpyAsync(ws.part, part, n * d * sizeof(float), 0, s));
  RETURN_IF_CUDA_ERROR(raw::Add(ws.x, ws.part, n * d, s));
  stats_.host_seconds += SecondsSince(t_host);
  return absl::OkStatus();
}

absl::Status CudaForward::SwiGluFfn(const internal::DeviceMatrixBuf& gate,
                                     const internal::DeviceMatrixBuf& up,
                                     const internal::DeviceMatrixBuf& down, int64_t n) {
  Workspace& ws = *ws_;
  void* s = stream_->native();
  const raw::GemmContext g{ws.scratch, ws.sizes.scratch};
  const int64_t ff = up.m.n_rows;
  RETURN_IF_CUDA_ERROR(raw::MatMul(gate.m, ws.h, n, ws.sh_g, g, s));
  RETURN_IF_CUDA_ERROR(raw::MatMul(up.m, ws.h, n, ws.sh_u, g, s));
  RETURN_IF_CUDA_ERROR(raw::SwiGlu(ws.sh_g, ws.sh_u, n * ff, ws.sh_g, s));
  RETURN_IF_CUDA_ERROR(raw::MatMul(down.m, ws.sh_g, n, ws.o, g, s));
  return absl::OkStatus();
}

absl::Status CudaForward::DenseFfn(int il, int64_t n) {
  const HyperParams& hp = model_->hparams();
  const LayerW& L = w_->layers[il];
  Workspace& ws = *ws_;
  void* s = stream_->native();
  RETURN_IF_CUDA_ERROR(raw::RmsNorm(ws.x, L.ffn_norm.p, n, hp.n_embd, hp.rms_eps, ws.h, s));
  RETURN_IF_ERROR(SwiGluFfn(L.ffn_gate, L.ffn_up, L.ffn_down, n));
  RETURN_IF_CUDA_ERROR(raw::Add(ws.x, ws.o, n * hp.n_embd, s));
  return absl::OkStatus();
}

absl::Status CudaForward::GpuExperts(int il, model::ExpertCall* call,
                                     const std::function<void()>& start_host) {
  GpuExpertCache* cache = expert_cache_.get();
  const int64_t n = call->n_tokens;
  const int64_t threshold = options_.stream_min_tokens;
  const bool streams = threshold > 0 && n >= threshold && !staging_.empty() && experts_on_gpu_;
  if (cache == nullptr && !streams) return absl::OkStatus();
  const model::Model& m = *model_;
  const int64_t n_expert = m.hparams().n_expert;
  // (token, weight) pairs per expert, tokens in order.
  std::vector<std::vector<std::pair<int32_t, float>>> pairs(n_expert);
  for (int64_t t = 0; t < n; ++t) {
    for (uint32_t i = call->token_offsets[t]; i < call->token_offsets[t + 1]; ++i) {
      pairs[call->expert_ids[i]].push_back({static_cast<int32_t>(t), call->weights[i]});
    }
  }
  // Where each expert runs: its cache slot, a streamed copy, or the host.
  enum Where : uint8_t { kHost, kCached, kStreamed };
  std::vector<Where> where(n_expert, kHost);
  for (int64_t e = 0; e < n_expert; ++e) {
    if (pairs[e].empty()) continue;
    if (cache != nullptr && cache->Resident(il, static_cast<int>(e))) {
      where[e] = kCached;
    } else if (streams && static_cast<int64_t>(pairs[e].size()) >= threshold) {
      where[e] = kStreamed;
    }
  }
  // The policy sees the layer's routing before anything is queued: hits
  // are pinned, winning misses admitted (streamed ones fill their slot from
  // the staging buffer below, the others are copied from the host).
  std::vector<bool> fill_from_staging(n_expert, false);
  if (cache != nullptr) {
    RETURN_IF_ERROR(cache->WaitReady(il, stream_.get()));
    std::vector<model::ExpertAdmission> admitted, from_host;
    RETURN_IF_ERROR(cache->Access(il, call->expert_ids, &admitted));
    for (const model::ExpertAdmission& a : admitted) {
      if (where[a.expert] == kStreamed) {
        fill_from_staging[a.expert] = true;
      } else {
        from_host.push_back(a);
      }
    }
    RETURN_IF_ERROR(cache->UploadAdmissions(from_host));
    if (from_host.size() != admitted.size()) {
      // Slots the compute stream fills from staging below: after every
      // upload queued so far (one may target the same slot).
      RETURN_IF_ERROR(cache->OrderAfterUploads(stream_.get()));
    }
  }
  // The host's share, and the GPU's rows grouped by expert (ascending id).
  std::vector<uint32_t> offsets;
  std::vector<int32_t> ids;
  std::vector<float> weights;
  model::FilterRouting(*call, 0, static_cast<int>(n), [&](int e) { return where[e] == kHost; },
                       &offsets, &ids, &weights);
  const uint64_t n_gpu = call->expert_ids.size() - ids.size();
  if (n_gpu == 0) return absl::OkStatus();
  // From here `call` is the host's share.
  call->token_offsets = std::move(offsets);
  call->expert_ids = std::move(ids);
  call->weights = std::move(weights);
  if (streams && !call->expert_ids.empty() && start_host) start_host();
  Workspace& ws = *ws_;
  void* s = stream_->native();
  int32_t* pin_idx = static_cast<int32_t*>(ws.pin_ex_idx->data());
  float* pin_w = static_cast<float*>(ws.pin_ex_w->data());
  int64_t k = 0;
  for (int64_t e = 0; e < n_expert; ++e) {
    if (where[e] == kHost) continue;
    for (const auto& [t, w] : pairs[e]) {
      pin_idx[k] = t;
      pin_w[k++] = w;
    }
  }
  RETURN_IF_CUDA_ERROR(raw::MemcpyAsync(ws.ex_idx, pin_idx, k * sizeof(int32_t), 0, s));
  RETURN_IF_CUDA_ERROR(raw::MemcpyAsync(ws.ex_w, pin_w, k * sizeof(float), 0, s));
  int64_t off = 0;
  uint64_t cached_pairs = 0;
  for (int64_t e = 0; e < n_expert; ++e) {
    if (where[e] == kHost) continue;
    const int64_t cnt = static_cast<int64_t>(pairs[e].size());
    if (where[e] == kCached) {
      RETURN_IF_ERROR(ExpertOnGpu(cache->weights(il, static_cast<int>(e)), il, static_cast<int>(e), off,
                                  cnt));
      cached_pairs += cnt;
    } else {
      // Copy into the next staging buffer once the compute stream is done
      // with its previous expert; compute once the copy is in.
      const size_t b = static_cast<size_t>(next_stage_++ % static_cast<int64_t>(staging_.size()));
      backend::Buffer& buf = *staging_[b];
      RETURN_IF_ERROR(stage_copy_->Wait(*stage_free_[b]));
      RETURN_IF_ERROR(GpuExpertCache::CopyExpert(m, il, static_cast<int>(e), stage_copy_.get(),
                                                 buf, 0));
      RETURN_IF_ERROR(stage_copy_->Record(*stage_ready_[b]));
      RETURN_IF_ERROR(stream_->Wait(*stage_ready_[b]));
      RETURN_IF_ERROR(ExpertOnGpu(GpuExpertCache::WeightsAt(m, il, static_cast<int>(e), buf.data()),
                                  il, static_cast<int>(e), off, cnt));
      if (fill_from_staging[e]) {
        RETURN_IF_ERROR(cache->CopyFromDevice(il, static_cast<int>(e), buf.data(), stream_.get()));
      }
      RETURN_IF_ERROR(stream_->Record(*stage_free_[b]));
      stats_.streamed_experts++;
      stats_.streamed_pairs += cnt;
      stats_.streamed_bytes += GpuExpertCache::ExpertBytes(m, il);
    }
    off += cnt;
  }
  stats_.expert_cache_hits += cached_pairs;
  return absl::OkStatus();
}

absl::Status CudaForward::ExpertOnGpu(const GpuExpertCache::Weights& w, int il, int expert,
                                      int64_t off, int64_t cnt) {
  Workspace& ws = *ws_;
  void* s = stream_->native();
  const raw::GemmContext g{ws.scratch, ws.sizes.scratch};
  const int64_t d = model_->hparams().n_embd;
  const int64_t ff = w.up.n_rows;
  RETURN_IF_CUDA_ERROR(raw::GatherRows(ws.h, ws.ex_idx + off, cnt, d, ws.ex_in, s));
  // Gate and up read the same rounded activations: round the gathered rows
  // once, in place.
  raw::GemmContext gu = g;
  const auto r = codec::ActRoundingOf(w.gate.type);
  if (r != codec::ActRounding::kNone && r == codec::ActRoundingOf(w.up.type)) {
    RETURN_IF_CUDA_ERROR(raw::RoundActivations(w.gate.type, ws.ex_in, cnt, d, ws.ex_in, s));
    gu = raw::GemmContext{};
  }
  RETURN_IF_CUDA_ERROR(raw::MatMul(w.gate, ws.ex_in, cnt, ws.ex_g, gu, s));
  RETURN_IF_CUDA_ERROR(raw::MatMul(w.up, ws.ex_in, cnt, ws.ex_u, gu, s));
  // E(h) = W_down . act(W_gate . h + b_gate, W_up . h + b_up) + b_down, the
  // biases where the model has them (model::ExpertFfnSpec).
  const LayerW& L = w_->layers[il];
  if (L.gate_exps_b.p) {
    RETURN_IF_CUDA_ERROR(raw::AddBias(ws.ex_g, L.gate_exps_b.p + expert * ff, cnt, ff, s));
  }
  if (L.up_exps_b.p) {
    RETURN_IF_CUDA_ERROR(raw::AddBias(ws.ex_u, L.up_exps_b.p + expert * ff, cnt, ff, s));
  }
  const model::ExpertFfnSpec& ffn = model_->hparams().expert_ffn;
  if (ffn.activation == model::ExpertActivation::kSwiGluOai) {
    RETURN_IF_CUDA_ERROR(
        raw::SwiGluOai(ws.ex_g, ws.ex_u, cnt * ff, ffn.alpha, ffn.limit, ws.ex_g, s));
  } else {
    RETURN_IF_CUDA_ERROR(raw::SwiGlu(ws.ex_g, ws.ex_u, cnt * ff, ws.ex_g, s));
  }
  RETURN_IF_CUDA_ERROR(raw::MatMul(w.down, ws.ex_g, cnt, ws.ex_out, g, s));
  if (L.down_exps_b.p) {
    RETURN_IF_CUDA_ERROR(raw::AddBias(ws.ex_out, L.down_exps_b.p + expert * d, cnt, d, s));
  }
  RETURN_IF_CUDA_ERROR(
      raw::ScatterAddScaled(ws.x, ws.ex_out, ws.ex_idx + off, ws.ex_w + off, cnt, d, s));
  return absl::OkStatus();
}

absl::StatusOr<plan::PrefillSwitch> CudaForward::MeasurePrefillSwitch(int64_t tokens) {
  const model::Model& m = *model_;
  const HyperParams& hp = m.hparams();
  if (staging_.empty() || !experts_on_gpu_) {
    return absl::FailedPreconditionError(
        "streamed prefill is not possible for this model (no routed experts in a GGUF format the "
        "kernels decode)");
  }
  if (tokens < 1 || tokens > options_.max_batch) {
    return absl::InvalidArgumentError(absl::StrCat("measuring with ", tokens,
                                                   " tokens; must be in [1, max_batch = ",
                                                   options_.max_batch, "]"));
  }
  int il = 0;
  while (il < m.n_layer() && m.layer(il).gate_exps.data == nullptr) ++il;
  if (il == m.n_layer()) return absl::FailedPreconditionError("the model has no routed experts");
  Workspace& ws = *ws_;
  void* s = stream_->native();
  RETURN_IF_ERROR(stream_->Synchronize());
  RETURN_IF_ERROR(stage_copy_->Synchronize());
  const uint64_t expert_bytes = GpuExpertCache::ExpertBytes(m, il);
  backend::Buffer& buf = *staging_[0];
  auto copy_expert = [&](int64_t e) {
    return GpuExpertCache::CopyExpert(m, il, static_cast<int>(e), stage_copy_.get(), buf, 0);
  };
  // 1. Host -> device, from the real source (first pass untimed: it may read
  // the file into the page cache).
  const int64_t n_copy = std::min<int64_t>(hp.n_expert, 64);
  for (int64_t e = 0; e < n_copy; ++e) RETURN_IF_ERROR(copy_expert(e));
  RETURN_IF_ERROR(stage_copy_->Synchronize());
  auto t = SteadyClock::now();
  for (int64_t e = 0; e < n_copy; ++e) RETURN_IF_ERROR(copy_expert(e));
  RETURN_IF_ERROR(stage_copy_->Synchronize());
  const double h2d_s = SecondsSince(t);
  // 2. The GPU computing expert 0 for `tokens` rows of zeros (weights 0:
  // x += 0, the residual is left as it was).
  RETURN_IF_ERROR(copy_expert(0));
  RETURN_IF_ERROR(stage_copy_->Synchronize());
  std::vector<int32_t> rows(tokens);
  for (int64_t i = 0; i < tokens; ++i) rows[i] = static_cast<int32_t>(i);
  int32_t* pin_idx = static_cast<int32_t*>(ws.pin_ex_idx->data());
  float* pin_w = static_cast<float*>(ws.pin_ex_w->data());
  std::copy(rows.begin(), rows.end(), pin_idx);
  std::fill(pin_w, pin_w + tokens, 0.0f);
  RETURN_IF_CUDA_ERROR(raw::MemcpyAsync(ws.ex_idx, pin_idx, tokens * sizeof(int32_t), 0, s));
  RETURN_IF_CUDA_ERROR(raw::MemcpyAsync(ws.ex_w, pin_w, tokens * sizeof(float), 0, s));
  RETURN_IF_CUDA_ERROR(raw::Memset(ws.h, 0, tokens * hp.n_embd * sizeof(float), s));
  const GpuExpertCache::Weights w = GpuExpertCache::WeightsAt(m, il, 0, buf.data());
  RETURN_IF_ERROR(ExpertOnGpu(w, il, 0, 0, tokens));  // warm-up
  RETURN_IF_ERROR(stream_->Synchronize());
  constexpr int kReps = 3;
  t = SteadyClock::now();
  for (int r = 0; r < kReps; ++r) RETURN_IF_ERROR(ExpertOnGpu(w, il, 0, 0, tokens));
  RETURN_IF_ERROR(stream_->Synchronize());
  const double gpu_s = SecondsSince(t) / kReps;
  // 3. The expert backend: `tokens` tokens, each routed to experts 0..k-1.
  const int64_t k = hp.n_expert_used;
  model::ExpertCall call;
  call.layer = il;
  call.n_tokens = static_cast<int32_t>(tokens);
  call.d = static_cast<int32_t>(hp.n_embd);
  call.hidden.resize(tokens * hp.n_embd);
  for (size_t i = 0; i < call.hidden.size(); ++i) {
    call.hidden[i] = static_cast<float>(static_cast<int>(i * 2654435761u % 2001) - 1000) * 1e-3f;
  }
  for (int64_t i = 0; i < tokens; ++i) {
    call.token_offsets.push_back(static_cast<uint32_t>(i * k));
    for (int64_t j = 0; j < k; ++j) {
      call.expert_ids.push_back(static_cast<int32_t>(j));
      call.weights.push_back(1.0f / k);
    }
  }
  call.token_offsets.push_back(static_cast<uint32_t>(tokens * k));
  model::ExpertResult res;
  double cpu_s = 0;
  for (int r = 0; r < 2; ++r) {  // the first call may pay first-touch costs
    call.call_id = next_call_id_++;
    t = SteadyClock::now();
    RETURN_IF_ERROR(experts_->Compute(call, &res));
    cpu_s = SecondsSince(t);
  }
  plan::PrefillRates rates = plan::ModelPrefillRates(hp.n_embd, hp.n_ff_exp, expert_bytes);
  rates.h2d_bytes_per_s = static_cast<double>(expert_bytes) * n_copy / std::max(h2d_s, 1e-9);
  rates.gpu_flops_per_s = rates.flops_per_token * tokens / std::max(gpu_s, 1e-9);
  rates.cpu_tokens_per_s = static_cast<double>(tokens * k) / std::max(cpu_s, 1e-9);
  ASSIGN_OR_RETURN(plan::PrefillSwitch sw, plan::ComputePrefillSwitch(rates));
  options_.stream_min_tokens = sw.threshold_tokens.value_or(0);
  prefill_rates_ = rates;
  return sw;
}

absl::Status CudaForward::Head(int64_t first, int64_t rows, float* out) {
  const HyperParams& hp = model_->hparams();
  Workspace& ws = *ws_;
  void* s = stream_->native();
  const raw::GemmContext g{ws.scratch, ws.sizes.scratch};
  const int64_t d = hp.n_embd, nv = hp.n_vocab;
  const auto t_head = SteadyClock::now();
  for (int64_t r0 = 0; r0 < rows; r0 += ws.sizes.head_rows) {
    const int64_t rc = std::min(ws.sizes.head_rows, rows - r0);
    RETURN_IF_CUDA_ERROR(raw::RmsNorm(ws.x + (first + r0) * d, w_->output_norm.p, rc, d,
                                      hp.rms_eps, ws.h, s));
    RETURN_IF_CUDA_ERROR(raw::MatMul(w_->output.m, ws.h, rc, ws.logits, g, s));
    RETURN_IF_CUDA_ERROR(
        raw::MemcpyAsync(out + r0 * nv, ws.logits, rc * nv * sizeof(float), 1, s));
    RETURN_IF_ERROR(stream_->Synchronize());
  }
  stats_.head_seconds += SecondsSince(t_head);
  return absl::OkStatus();
}

absl::StatusOr<GpuDense> AllocateGpuDense(std::shared_ptr<const model::Model> model,
                                          model::ExpertBackend* experts, backend::Device* device,
                                          const plan::MemoryPlan& plan,
                                          const CudaForwardOptions& run) {
  GpuDense d;
  ASSIGN_OR_RETURN(d.forward, CudaForward::Create(model, experts, device, plan, run));
  for (int64_t i = 0; i < plan.options.n_parallel; ++i) {
    ASSIGN_OR_RETURN(auto state, d.forward->CreateCache());
    d.states.push_back(std::move(state));
  }
  if (plan.expert_cache.slots > 0) {
    GpuExpertCacheOptions eo;
    eo.n_slots = plan.expert_cache.slots;
    ASSIGN_OR_RETURN(d.expert_cache, GpuExpertCache::Create(device, model, eo));
    d.forward->AttachExpertCache(d.expert_cache);
  }
  return d;
}

}  // namespace moesplit::cuda
