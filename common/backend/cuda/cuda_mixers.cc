// The token mixers of the CUDA forward: GQA attention (plain or gated; with
// gpt-oss's biases, sinks and sliding windows) over the paged KV cache,
// deepseek2's multi-head latent attention over its latent cache, and the
// gated DeltaNet over the conv and recurrent state (cuda_forward.h, the file
// comment; kernels in internal/cuda_raw.h).
#include <cmath>

#include "common/backend/cuda/cuda_forward.h"
#include "common/backend/cuda/cuda_status.h"
#include "common/backend/cuda/internal/block_codec.h"
#include "common/backend/cuda/internal/cuda_raw.h"
#include "common/backend/cuda/internal/forward_buffers.h"
#include "common/base/status.h"

namespace moesplit::cuda {

using internal::LayerW;
using model::HyperParams;

absl::Status CudaForward::Attention(int il, int64_t n, absl::Span<const Segment> segs) {
  const HyperParams& hp = model_->hparams();
  const LayerW& L = w_->layers[il];
  Workspace& ws = *ws_;
  void* s = stream_->native();
  const raw::GemmContext g{ws.scratch, ws.sizes.scratch};
  const int64_t d = hp.n_embd, hd = hp.head_dim_k;
  const bool gated = hp.layers[il].mixer == model::MixerKind::kGatedAttention;
  RETURN_IF_CUDA_ERROR(raw::RmsNorm(ws.x, L.attn_norm.p, n, d, hp.rms_eps, ws.h, s));
  {
    // Q, K and V read the same rounded activations: round once.
    const float* in = ws.h;
    raw::GemmContext gi = g;
    const auto r = codec::ActRoundingOf(L.wq.m.type);
    if (r != codec::ActRounding::kNone && r == codec::ActRoundingOf(L.wk.m.type) &&
        r == codec::ActRoundingOf(L.wv.m.type) && n * d <= ws.sizes.scratch) {
      RETURN_IF_CUDA_ERROR(raw::RoundActivations(L.wq.m.type, ws.h, n, d, ws.scratch, s));
      in = ws.scratch;
      gi = raw::GemmContext{};  // already rounded
    }
    if (gated) {
      // Per head [query, gate] (llama.cpp's views of Qcur_full): the
      // queries to q, the gates stay in qg for after the attention.
      RETURN_IF_CUDA_ERROR(raw::MatMul(L.wq.m, in, n, ws.qg, gi, s));
      RETURN_IF_CUDA_ERROR(raw::SplitQueryGate(ws.qg, n, hp.n_head, hd, ws.q, s));
    } else {
      RETURN_IF_CUDA_ERROR(raw::MatMul(L.wq.m, in, n, ws.q, gi, s));
    }
    RETURN_IF_CUDA_ERROR(raw::MatMul(L.wk.m, in, n, ws.k, gi, s));
    RETURN_IF_CUDA_ERROR(raw::MatMul(L.wv.m, in, n, ws.v, gi, s));
  }
  if (L.bq.p) RETURN_IF_CUDA_ERROR(raw::AddBias(ws.q, L.bq.p, n, hp.n_head * hd, s));
  if (L.bk.p) RETURN_IF_CUDA_ERROR(raw::AddBias(ws.k, L.bk.p, n, hp.n_head_kv * hd, s));
  if (L.bv.p) RETURN_IF_CUDA_ERROR(raw::AddBias(ws.v, L.bv.p, n, hp.n_head_kv * hd, s));
  if (hp.qk_norm_whole) {
    // One RMSNorm over each whole projection, then RoPE per head.
    if (L.q_norm.p) {
      RETURN_IF_CUDA_ERROR(raw::RmsNorm(ws.q, L.q_norm.p, n, hp.n_head * hd, hp.rms_eps, ws.q, s));
      RETURN_IF_CUDA_ERROR(
          raw::RmsNorm(ws.k, L.k_norm.p, n, hp.n_head_kv * hd, hp.rms_eps, ws.k, s));
    }
    RETURN_IF_CUDA_ERROR(raw::QkNormRope(ws.q, nullptr, hp.n_head, ws.k, nullptr, hp.n_head_kv,
                                          n, hd, hp.rms_eps, hp.rope.n_rot, ws.rope, s));
  } else {
    RETURN_IF_CUDA_ERROR(raw::QkNormRope(ws.q, L.q_norm.p, hp.n_head, ws.k, L.k_norm.p,
                                          hp.n_head_kv, n, hd, hp.rms_eps, hp.rope.n_rot,
                                          ws.rope, s));
  }
  // Each sequence's tokens against its own paged cache.
  const int64_t kd = hp.n_head_kv * hd, qd = hp.n_head * hd;
  for (const Segment& g : segs) {
    const CudaKvCache* cache = g.cache;
    raw::PagedKv kv;
    kv.type = cache->type();
    kv.k = cache->k(il);
    kv.v = cache->v(il);
    kv.k_row_bytes = cache->k_row_bytes();
    kv.v_row_bytes = cache->v_row_bytes();
    kv.page_size = cache->page_size();
    kv.block_table = cache->block_table(il);
    RETURN_IF_CUDA_ERROR(raw::KvWrite(kv, ws.k + g.first * kd, ws.v + g.first * kd, g.n, g.pos0,
                                      kd, kd, s));
    raw::AttentionParams ap;
    ap.q = ws.q + g.first * qd;
    ap.out = ws.attn + g.first * hp.n_head * hp.head_dim_v;
    ap.kv = kv;
    ap.n_tok = g.n;
    ap.pos0 = g.pos0;
    ap.n_head = static_cast<int>(hp.n_head);
    ap.n_head_kv = static_cast<int>(hp.n_head_kv);
    ap.head_dim = static_cast<int>(hd);
    ap.scale = hp.attn_scale();
    ap.window = hp.layers[il].sliding_window;
    ap.sinks = L.sinks.p;
    ap.split_scratch = ws.split;
    ap.split_scratch_elems = ws.sizes.split;
    RETURN_IF_CUDA_ERROR(raw::Attention(ap, s));
  }
  if (gated) RETURN_IF_CUDA_ERROR(raw::ApplyHeadGate(ws.attn, ws.qg, n * hp.n_head, hd, s));
  RETURN_IF_CUDA_ERROR(raw::MatMul(L.wo.m, ws.attn, n, ws.o, g, s));
  if (L.bo.p) RETURN_IF_CUDA_ERROR(raw::AddBias(ws.o, L.bo.p, n, d, s));
  RETURN_IF_CUDA_ERROR(raw::Add(ws.x, ws.o, n * d, s));
  return absl::OkStatus();
}

absl::Status CudaForward::Mla(int il, int64_t n, absl::Span<const Segment> segs) {
  const HyperParams& hp = model_->hparams();
  const LayerW& L = w_->layers[il];
  Workspace& ws = *ws_;
  void* s = stream_->native();
  const raw::GemmContext g{ws.scratch, ws.sizes.scratch};
  const int64_t d = hp.n_embd, heads = hp.n_head, rot = hp.rope.n_rot;
  const int64_t lora = hp.kv_lora_rank, dq = hp.head_dim_k_mla, nope = dq - rot;
  const int64_t dv = hp.head_dim_v_mla;
  const int64_t kd = hp.head_dim_k;  // lora + rot: the cache row and the absorbed query
  RETURN_IF_CUDA_ERROR(raw::RmsNorm(ws.x, L.attn_norm.p, n, d, hp.rms_eps, ws.h, s));
  // The queries: n x heads x (nope + rot).
  if (L.wq_a.present()) {
    const int64_t ql = hp.q_lora_rank;
    RETURN_IF_CUDA_ERROR(raw::MatMul(L.wq_a.m, ws.h, n, ws.mla_qa, g, s));
    RETURN_IF_CUDA_ERROR(raw::RmsNorm(ws.mla_qa, L.q_a_norm.p, n, ql, hp.rms_eps, ws.mla_qa, s));
    RETURN_IF_CUDA_ERROR(raw::MatMul(L.wq_b.m, ws.mla_qa, n, ws.mla_q, g, s));
  } else {
    RETURN_IF_CUDA_ERROR(raw::MatMul(L.wq.m, ws.h, n, ws.mla_q, g, s));
  }
  // The position's cache row: the normed latent, then the roped key part.
  RETURN_IF_CUDA_ERROR(raw::MatMul(L.wkv_a.m, ws.h, n, ws.k, g, s));
  RETURN_IF_CUDA_ERROR(
      raw::RmsNormStrided(ws.k, kd, L.kv_a_norm.p, n, lora, hp.rms_eps, ws.k, kd, s));
  RETURN_IF_CUDA_ERROR(raw::RopeNorm(ws.k + lora, n, kd, 1, kd, rot, ws.rope, s));
  RETURN_IF_CUDA_ERROR(raw::RopeNorm(ws.mla_q + nope, n, heads * dq, heads, dq, rot, ws.rope, s));
  // The absorbed queries, n x heads x kd: [attn_k_b[h] . q_nope, q_pe].
  RETURN_IF_CUDA_ERROR(raw::CopyRows(ws.mla_q, dq, ws.mla_in, nope, n * heads, nope, s));
  RETURN_IF_CUDA_ERROR(raw::CopyRows(ws.mla_q + nope, dq, ws.q + lora, kd, n * heads, rot, s));
  // Per head h: y[t][h] (at out_stride) = w[h] . x[t][h] (in_dim values),
  // the rows rounded in place first to the weight's activation type.
  auto per_head = [&](const internal::DeviceMatrixBuf& w, uint64_t head_bytes, float* x,
                      int64_t in_dim, float* y, int64_t out_stride) -> absl::Status {
    RETURN_IF_CUDA_ERROR(raw::RoundActivations(w.m.type, x, n * heads, in_dim, x, s));
    raw::GroupedMatVecParams p;
    p.w = w.m;
    p.group_bytes = head_bytes;
    p.n_groups = heads;
    p.x = x;
    p.x_tok = heads * in_dim;
    p.x_group = in_dim;
    p.y = y;
    p.y_tok = heads * out_stride;
    p.y_group = out_stride;
    p.n_tok = n;
    RETURN_IF_CUDA_ERROR(raw::GroupedMatVec(p, s));
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(per_head(L.wk_b, L.wk_b.head_bytes, ws.mla_in, nope, ws.q, kd));
  // Each sequence's tokens against its own paged cache: one K row per
  // position, V its first lora values.
  for (const Segment& sg : segs) {
    const CudaKvCache* cache = sg.cache;
    raw::PagedKv kv;
    kv.type = cache->type();
    kv.k = kv.v = cache->k(il);
    kv.k_row_bytes = kv.v_row_bytes = cache->k_row_bytes();
    kv.page_size = cache->page_size();
    kv.block_table = cache->block_table(il);
    RETURN_IF_CUDA_ERROR(raw::KvWrite(kv, ws.k + sg.first * kd, nullptr, sg.n, sg.pos0, kd, 0, s));
    raw::AttentionParams ap;
    ap.q = ws.q + sg.first * heads * kd;
    ap.out = ws.attn + sg.first * heads * lora;
    ap.kv = kv;
    ap.n_tok = sg.n;
    ap.pos0 = sg.pos0;
    ap.n_head = static_cast<int>(heads);
    ap.n_head_kv = 1;
    ap.head_dim = static_cast<int>(kd);
    ap.head_dim_v = static_cast<int>(lora);
    ap.scale = hp.attn_scale();
    ap.split_scratch = ws.split;
    ap.split_scratch_elems = ws.sizes.split;
    RETURN_IF_CUDA_ERROR(raw::Attention(ap, s));
  }
  // The heads' values, n x heads x dv: attn_v_b[h] . latent result.
  RETURN_IF_ERROR(per_head(L.wv_b, L.wv_b.head_bytes, ws.attn, lora, ws.mla_q, dv));
  RETURN_IF_CUDA_ERROR(raw::MatMul(L.wo.m, ws.mla_q, n, ws.o, g, s));
  RETURN_IF_CUDA_ERROR(raw::Add(ws.x, ws.o, n * d, s));
  return absl::OkStatus();
}

absl::Status CudaForward::DeltaNet(int il, int64_t n, absl::Span<const Segment> segs) {
  const HyperParams& hp = model_->hparams();
  const LayerW& L = w_->layers[il];
  Workspace& ws = *ws_;
  void* s = stream_->native();
  const raw::GemmContext g{ws.scratch, ws.sizes.scratch};
  const int64_t d = hp.n_embd, channels = hp.ssm_conv_channels(), inner = hp.ssm_inner();
  const int64_t n_v = hp.ssm_n_v_heads, n_k = hp.ssm_n_k_heads, dim = hp.ssm_head_k;
  RETURN_IF_CUDA_ERROR(raw::RmsNorm(ws.x, L.attn_norm.p, n, d, hp.rms_eps, ws.h, s));
  {
    // The four products read the same rounded activations: round once.
    const float* in = ws.h;
    raw::GemmContext gi = g;
    const auto r = codec::ActRoundingOf(L.ssm_qkv.m.type);
    if (r != codec::ActRounding::kNone && r == codec::ActRoundingOf(L.ssm_z.m.type) &&
        r == codec::ActRoundingOf(L.ssm_beta.m.type) &&
        r == codec::ActRoundingOf(L.ssm_alpha.m.type) && n * d <= ws.sizes.scratch) {
      RETURN_IF_CUDA_ERROR(raw::RoundActivations(L.ssm_qkv.m.type, ws.h, n, d, ws.scratch, s));
      in = ws.scratch;
      gi = raw::GemmContext{};
    }
    RETURN_IF_CUDA_ERROR(raw::MatMul(L.ssm_qkv.m, in, n, ws.dn_qkv, gi, s));
    RETURN_IF_CUDA_ERROR(raw::MatMul(L.ssm_z.m, in, n, ws.dn_z, gi, s));
    RETURN_IF_CUDA_ERROR(raw::MatMul(L.ssm_beta.m, in, n, ws.dn_beta, gi, s));
    RETURN_IF_CUDA_ERROR(raw::MatMul(L.ssm_alpha.m, in, n, ws.dn_g, gi, s));
  }
  RETURN_IF_CUDA_ERROR(
      raw::DeltaNetGates(ws.dn_beta, ws.dn_g, L.ssm_dt_bias.p, L.ssm_a.p, n, n_v, s));
  // A sequence's first tokens of the step read its committed state; its
  // later micro-batches continue from what the earlier ones wrote.
  auto first_of_step = [](const Segment& sg) { return sg.pos0 == sg.cache->n_past(); };
  for (const Segment& sg : segs) {
    raw::ConvParams cp;
    cp.x = cp.y = ws.dn_qkv + sg.first * channels;
    cp.stride = channels;
    cp.n_tok = sg.n;
    cp.channels = channels;
    cp.w = L.ssm_conv.p;
    cp.kernel = static_cast<int>(hp.ssm_conv_kernel);
    cp.state_out = sg.cache->conv_out(il);
    cp.state_in = first_of_step(sg) ? sg.cache->conv_in(il) : cp.state_out;
    RETURN_IF_CUDA_ERROR(raw::ConvSilu(cp, s));
  }
  RETURN_IF_CUDA_ERROR(raw::L2NormHeads(ws.dn_qkv, n, 2 * n_k, dim, channels, hp.rms_eps, s));
  for (const Segment& sg : segs) {
    raw::DeltaRuleParams dp;
    dp.qkv = ws.dn_qkv + sg.first * channels;
    dp.stride = channels;
    dp.g = ws.dn_g + sg.first * n_v;
    dp.beta = ws.dn_beta + sg.first * n_v;
    dp.out = ws.dn_out + sg.first * inner;
    dp.state_out = sg.cache->recurrent_out(il);
    dp.state_in = first_of_step(sg) ? sg.cache->recurrent_in(il) : dp.state_out;
    dp.n_tok = sg.n;
    dp.n_k_heads = static_cast<int>(n_k);
    dp.n_v_heads = static_cast<int>(n_v);
    dp.dim = static_cast<int>(dim);
    dp.grouped_heads = hp.ssm_grouped_heads;
    RETURN_IF_CUDA_ERROR(raw::DeltaRule(dp, s));
  }
  RETURN_IF_CUDA_ERROR(raw::GatedRmsNorm(ws.dn_out, ws.dn_z, L.ssm_norm.p, n * n_v, dim,
                                         hp.rms_eps, ws.dn_out, s));
  RETURN_IF_CUDA_ERROR(raw::MatMul(L.ssm_out.m, ws.dn_out, n, ws.o, g, s));
  RETURN_IF_CUDA_ERROR(raw::Add(ws.x, ws.o, n * d, s));
  return absl::OkStatus();
}

}  // namespace moesplit::cuda
