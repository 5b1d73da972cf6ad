// The tensor table: every tensor the model layer knows, as one list.
//
// Each per-layer tensor is one row of MOESPLIT_LAYER_TENSORS:
//   1. its TensorId,
//   2. its form once loaded (TensorForm): a matrix (2-D, rows in the file's
//      type), a vector (1-D or a small 2-D tensor dequantised to f32), the
//      per-head matrices of one 3-D tensor (MLA's attn_k_b / attn_v_b) or the
//      routed experts' 3-D tensor,
//   3. the name of its field in every per-layer holder (LayerTensors),
//   4. whether the CPU forward keeps a packed copy of it (matrices and heads
//      only; quant/packed.h): the projections a decode step streams whole.
// The TensorId enum, the host's LayerWeights (model.h), the CPU forward's
// packed copies (forward.h), the CUDA forward's device copies and the
// loaders, packers and uploaders that fill them are all generated from, or
// walk, this one list; which tensors an architecture has, their GGUF names,
// roles and shapes are its description (arch.h). Adding a tensor is a row
// here plus the descriptions that use it.
//
// Thread-safe: types and constants only.
#pragma once

#include <type_traits>

namespace moesplit::model {

// id, form, field, CPU-packed
#define MOESPLIT_LAYER_TENSORS(X)                                      \
  X(kAttnNorm, kVector, attn_norm, false)                              \
  X(kAttnQ, kMatrix, wq, true)                                         \
  X(kAttnK, kMatrix, wk, true)                                         \
  X(kAttnV, kMatrix, wv, true)                                         \
  X(kAttnOutput, kMatrix, wo, true)                                    \
  X(kAttnQBias, kVector, bq, false)                                    \
  X(kAttnKBias, kVector, bk, false)                                    \
  X(kAttnVBias, kVector, bv, false)                                    \
  X(kAttnQNorm, kVector, q_norm, false)                                \
  X(kAttnKNorm, kVector, k_norm, false)                                \
  X(kFfnNorm, kVector, ffn_norm, false)                                \
  X(kSsmQkv, kMatrix, ssm_qkv, true)                                   \
  X(kSsmZ, kMatrix, ssm_z, true)                                       \
  X(kSsmConv, kVector, ssm_conv, false)                                \
  X(kSsmDtBias, kVector, ssm_dt_bias, false)                           \
  X(kSsmA, kVector, ssm_a, false)                                      \
  X(kSsmBeta, kMatrix, ssm_beta, false)                                \
  X(kSsmAlpha, kMatrix, ssm_alpha, false)                              \
  X(kSsmNorm, kVector, ssm_norm, false)                                \
  X(kSsmOut, kMatrix, ssm_out, true)                                   \
  X(kSsmBa, kMatrix, ssm_ba, false)                                    \
  X(kSsmIn, kMatrix, ssm_in, true)                                     \
  X(kRouter, kMatrix, router, false)                                   \
  X(kExpGate, kExperts, gate_exps, false)                              \
  X(kExpUp, kExperts, up_exps, false)                                  \
  X(kExpDown, kExperts, down_exps, false)                              \
  X(kShexpGateInp, kMatrix, shexp_gate_inp, false)                     \
  X(kShexpGate, kMatrix, shexp_gate, true)                             \
  X(kShexpUp, kMatrix, shexp_up, true)                                 \
  X(kShexpDown, kMatrix, shexp_down, true)                             \
  X(kAttnOutputBias, kVector, bo, false)                               \
  X(kAttnSinks, kVector, sinks, false)                                 \
  X(kRouterBias, kVector, router_b, false)                             \
  X(kExpGateBias, kVector, gate_exps_b, false)                         \
  X(kExpUpBias, kVector, up_exps_b, false)                             \
  X(kExpDownBias, kVector, down_exps_b, false)                         \
  X(kAttnQA, kMatrix, wq_a, true)                                      \
  X(kAttnQANorm, kVector, q_a_norm, false)                             \
  X(kAttnQB, kMatrix, wq_b, true)                                      \
  X(kAttnKvAMqa, kMatrix, wkv_a, true)                                 \
  X(kAttnKvANorm, kVector, kv_a_norm, false)                           \
  X(kAttnKB, kHeads, wk_b, true)                                       \
  X(kAttnVB, kHeads, wv_b, true)                                       \
  X(kFfnGate, kMatrix, ffn_gate, true)                                 \
  X(kFfnUp, kMatrix, ffn_up, true)                                     \
  X(kFfnDown, kMatrix, ffn_down, true)                                 \
  X(kRouterSelBias, kVector, router_sel_b, false)                     \
  X(kSsmConvBias, kVector, ssm_conv_b, false)                          \
  X(kSsmD, kVector, ssm_d, false)                                      \
  X(kFfnLatentDown, kMatrix, ffn_latent_down, true)                    \
  X(kFfnLatentUp, kMatrix, ffn_latent_up, true)                        \
  X(kNextnEhProj, kMatrix, nextn_eh_proj, false)                       \
  X(kNextnEnorm, kVector, nextn_enorm, false)                          \
  X(kNextnHnorm, kVector, nextn_hnorm, false)                          \
  X(kNextnSharedHeadNorm, kVector, nextn_shared_head_norm, false)      \
  X(kNextnEmbedTokens, kMatrix, nextn_embed_tokens, false)             \
  X(kNextnSharedHeadHead, kMatrix, nextn_shared_head_head, false)     \
  X(kAttnPostNorm, kVector, attn_post_norm, false)                     \
  X(kFfnPostNorm1, kVector, ffn_post_norm_1, false)                    \
  X(kFfnPreNorm2, kVector, ffn_pre_norm_2, false)                      \
  X(kFfnPostNorm2, kVector, ffn_post_norm_2, false)                    \
  X(kFfnPostNorm, kVector, ffn_post_norm, false)                       \
  X(kRouterScale, kVector, router_scale, false)                        \
  X(kExpGateUp, kExperts, gate_up_exps, false)                         \
  X(kExpDownScale, kVector, down_exps_scale, false)                    \
  X(kLayerOutScale, kVector, out_scale, false)

// What the rows mean (arch.h's descriptions give each its GGUF name):
//   attn_norm, ffn_norm (qwen35moe, gpt-oss: post_attention_norm): RMSNorm
//     weights before the mixer and before the FFN;
//   wq wk wv wo (+ biases bq bk bv bo, QK-norm q_norm k_norm, a sink logit
//     per head): GQA attention; gated attention's wq has 2 x head_dim_k rows
//     per head, the query then the gate;
//   ssm_*: gated DeltaNet (attn_qkv: the conv's q, k, v input; attn_gate:
//     the output gate z; ssm_conv1d [kernel, channels]; ssm_dt.bias and
//     ssm_a = -exp(A_log) per value head; ssm_beta / ssm_alpha: write
//     strength and decay projections; ssm_norm per value head; ssm_out;
//     ssm_ba and ssm_in: qwen3next's fused file layouts, split at load into
//     ssm_beta / ssm_alpha and ssm_qkv / ssm_z, then empty: Model::Load);
//   Mamba-2 reuses ssm_in (its in-projection [z | xBC | dt], kept whole),
//     ssm_conv (+ its bias ssm_conv_b), ssm_dt_bias, ssm_a (-exp(A_log) per
//     head), ssm_d (the skip D per head), ssm_norm (d_inner weights, normed
//     in groups) and ssm_out;
//   ffn_latent_down / ffn_latent_up: LatentMoE's projections around the
//     routed experts;
//   router (+ router_b; router_sel_b: the selection bias exp_probs_b, added
//     to the scores for choosing only), the routed experts (one row per
//     expert for their biases), the shared expert and its sigmoid gate;
//   wq_a q_a_norm wq_b wkv_a kv_a_norm wk_b wv_b: multi-head latent
//     attention (the q LoRA, the compressed KV latent + shared rope key,
//     per head the key and value up-projections);
//   ffn_gate ffn_up ffn_down: a dense SwiGLU FFN (leading dense layers);
//   nextn_*: a NextN / MTP block's own tensors (arch.h NextNTensors()):
//     eh_proj [2 d -> d] over [enorm(embedding), hnorm(hidden)],
//     shared_head_norm, and its own embeddings / head where it has them;
//     held by the Model only (never run, packed or uploaded);
//   attn_post_norm: RMSNorm of the mixer's output before the residual add;
//   ffn_post_norm_1 / ffn_pre_norm_2 / ffn_post_norm_2 / ffn_post_norm: a
//     dense MLP beside the routed experts (ffn_gate/up/down on an MoE
//     layer): its output normed by ffn_post_norm_1, the experts' input by
//     ffn_pre_norm_2 (instead of ffn_norm) and their output by
//     ffn_post_norm_2, their sum by ffn_post_norm;
//   router_scale: the router reads RMSNorm(x) / sqrt(n_embd) * router_scale
//     (no weight) instead of the experts' input;
//   gate_up_exps: the routed experts' gate and up fused (per expert the
//     n_ff_exp gate rows, then the up rows): Model::Load makes gate_exps and
//     up_exps views of its halves and leaves it empty;
//   down_exps_scale: one factor per routed expert on its down output
//     (folded into the routing weights: expert.h);
//   out_scale: one factor on the residual stream after the layer.

// Every tensor the forward pass knows about: the global ones, then one row
// of MOESPLIT_LAYER_TENSORS each.
enum class TensorId : int {
  kTokenEmbd = 0,
  kOutputNorm,
  kOutput,
  kRopeFreqs,  // per rotary pair, a divisor of its frequency (full-attention layers)
#define MOESPLIT_X(id, form, field, pack) id,
  MOESPLIT_LAYER_TENSORS(MOESPLIT_X)
#undef MOESPLIT_X
  kCount,
};
inline constexpr int kTensorIdCount = static_cast<int>(TensorId::kCount);
inline constexpr int kFirstLayerTensor = static_cast<int>(TensorId::kAttnNorm);

enum class TensorForm {
  kMatrix,   // rows of the file's type
  kVector,   // f32 values
  kHeads,    // one matrix per head of a 3-D tensor
  kExperts,  // one matrix per routed expert of a 3-D tensor
};

// A field a holder does not keep (e.g. the device copy of a routed expert).
struct NoTensor {};

// One layer's tensors held as M (matrices), V (vectors), H (heads) and E
// (routed experts), a field per row, named as in the list.
template <class M, class V, class H, class E>
struct LayerTensors {
  using Matrix = M;
  using Vector = V;
  using Heads = H;
  using Experts = E;
#define MOESPLIT_FORM_kMatrix M
#define MOESPLIT_FORM_kVector V
#define MOESPLIT_FORM_kHeads H
#define MOESPLIT_FORM_kExperts E
#define MOESPLIT_X(id, form, field, pack) [[no_unique_address]] MOESPLIT_FORM_##form field{};
  MOESPLIT_LAYER_TENSORS(MOESPLIT_X)
#undef MOESPLIT_X
#undef MOESPLIT_FORM_kMatrix
#undef MOESPLIT_FORM_kVector
#undef MOESPLIT_FORM_kHeads
#undef MOESPLIT_FORM_kExperts
};

// What a walker learns of a row besides its fields: the form as a
// compile-time constant (so `if constexpr` picks the code for the field's
// type), the id and whether the CPU packs it.
template <TensorForm F>
struct TensorRow {
  static constexpr TensorForm form = F;
  TensorId id;
  bool cpu_packed;
};

// Calls fn(TensorRow<form>{id, cpu_packed}, holders.field...) for every row,
// in the list's order: the same field of each holder side by side (e.g. a
// host LayerWeights and its device copy).
template <class Fn, class... Holders>
void ForEachLayerTensor(Fn&& fn, Holders&... holders) {
#define MOESPLIT_X(id, form, field, pack) \
  fn(TensorRow<TensorForm::form>{TensorId::id, pack}, holders.field...);
  MOESPLIT_LAYER_TENSORS(MOESPLIT_X)
#undef MOESPLIT_X
}

}  // namespace moesplit::model
