#include "common/model/arch.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status.h"
#include "common/model/internal/str.h"

namespace moesplit::model {
namespace {

using D = Dim;
using R = TensorRole;
using T = TensorId;

// The global tensors every architecture has.
std::vector<TensorSpec> GlobalTensors() {
  return {
      {T::kTokenEmbd, "token_embd.weight", R::kEmbeddings, 2, {D::kEmbd, D::kVocab}, true},
      {T::kOutputNorm, "output_norm.weight", R::kNorm, 1, {D::kEmbd}, true},
      // Absent output -> tied to token_embd.
      {T::kOutput, "output.weight", R::kOutput, 2, {D::kEmbd, D::kVocab}, false},
  };
}

// The attention projections of the layers `sel`; `q` is kQ, or kQGated for
// gated attention (query and gate per head).
void AddAttention(std::vector<TensorSpec>& t, LayerSel sel, Dim q) {
  t.push_back({T::kAttnQ, "attn_q.weight", R::kDense, 2, {D::kEmbd, q}, true, sel});
  t.push_back({T::kAttnK, "attn_k.weight", R::kDense, 2, {D::kEmbd, D::kK}, true, sel});
  t.push_back({T::kAttnV, "attn_v.weight", R::kDense, 2, {D::kEmbd, D::kV}, true, sel});
  t.push_back(
      {T::kAttnOutput, "attn_output.weight", R::kDense, 2, {D::kAttnOut, D::kEmbd}, true, sel});
}

void AddQkNorm(std::vector<TensorSpec>& t, LayerSel sel) {
  t.push_back({T::kAttnQNorm, "attn_q_norm.weight", R::kNorm, 1, {D::kHeadK}, true, sel});
  t.push_back({T::kAttnKNorm, "attn_k_norm.weight", R::kNorm, 1, {D::kHeadK}, true, sel});
}

// The router and the routed experts of the MoE layers.
void AddRoutedExperts(std::vector<TensorSpec>& t) {
  const LayerSel m = LayerSel::kMoe;
  t.push_back({T::kRouter, "ffn_gate_inp.weight", R::kRouter, 2, {D::kEmbd, D::kExpert}, true, m});
  t.push_back({T::kExpGate, "ffn_gate_exps.weight", R::kRoutedExpert, 3,
               {D::kEmbd, D::kFfExp, D::kExpert}, true, m});
  t.push_back({T::kExpUp, "ffn_up_exps.weight", R::kRoutedExpert, 3,
               {D::kEmbd, D::kFfExp, D::kExpert}, true, m});
  t.push_back({T::kExpDown, "ffn_down_exps.weight", R::kRoutedExpert, 3,
               {D::kFfExp, D::kEmbd, D::kExpert}, true, m});
}

// A shared expert scaled by sigmoid(ffn_gate_inp_shexp . h).
void AddGatedSharedExpert(std::vector<TensorSpec>& t) {
  const LayerSel m = LayerSel::kMoe;
  t.push_back({T::kShexpGateInp, "ffn_gate_inp_shexp.weight", R::kSharedExpert, 1,
               {D::kEmbd}, true, m});
  t.push_back({T::kShexpGate, "ffn_gate_shexp.weight", R::kSharedExpert, 2,
               {D::kEmbd, D::kFfShexp}, true, m});
  t.push_back({T::kShexpUp, "ffn_up_shexp.weight", R::kSharedExpert, 2,
               {D::kEmbd, D::kFfShexp}, true, m});
  t.push_back({T::kShexpDown, "ffn_down_shexp.weight", R::kSharedExpert, 2,
               {D::kFfShexp, D::kEmbd}, true, m});
}

// The tensors of every attention + MoE-FFN layer, in the order the earlier
// descriptions listed them (the order test models are written in).
std::vector<TensorSpec> AttentionMoeTensors() {
  std::vector<TensorSpec> t = GlobalTensors();
  t.push_back({T::kAttnNorm, "attn_norm.weight", R::kNorm, 1, {D::kEmbd}, true});
  AddAttention(t, LayerSel::kAll, D::kQ);
  t.push_back({T::kFfnNorm, "ffn_norm.weight", R::kNorm, 1, {D::kEmbd}, true});
  AddRoutedExperts(t);
  return t;
}

std::vector<TensorSpec> Qwen3MoeTensors() {
  std::vector<TensorSpec> t = AttentionMoeTensors();
  AddQkNorm(t, LayerSel::kAll);
  return t;
}

std::vector<TensorSpec> Qwen2MoeTensors() {
  std::vector<TensorSpec> t = AttentionMoeTensors();
  t.push_back({T::kAttnQBias, "attn_q.bias", R::kDense, 1, {D::kQ}, true});
  t.push_back({T::kAttnKBias, "attn_k.bias", R::kDense, 1, {D::kK}, true});
  t.push_back({T::kAttnVBias, "attn_v.bias", R::kDense, 1, {D::kV}, true});
  AddGatedSharedExpert(t);
  return t;
}

// llama.cpp: llama_model_qwen35moe (load_arch_tensors).
std::vector<TensorSpec> Qwen35MoeTensors() {
  std::vector<TensorSpec> t = GlobalTensors();
  t.push_back({T::kAttnNorm, "attn_norm.weight", R::kNorm, 1, {D::kEmbd}, true});
  AddAttention(t, LayerSel::kAttention, D::kQGated);
  AddQkNorm(t, LayerSel::kAttention);
  const LayerSel dn = LayerSel::kDeltaNet;
  t.push_back({T::kSsmQkv, "attn_qkv.weight", R::kDense, 2, {D::kEmbd, D::kSsmConvDim}, true, dn});
  t.push_back({T::kSsmZ, "attn_gate.weight", R::kDense, 2, {D::kEmbd, D::kSsmInner}, true, dn});
  t.push_back(
      {T::kSsmConv, "ssm_conv1d.weight", R::kDense, 2, {D::kSsmKernel, D::kSsmConvDim}, true, dn});
  t.push_back({T::kSsmDtBias, "ssm_dt.bias", R::kDense, 1, {D::kSsmVHeads}, true, dn});
  t.push_back({T::kSsmA, "ssm_a", R::kDense, 1, {D::kSsmVHeads}, true, dn});
  t.push_back({T::kSsmBeta, "ssm_beta.weight", R::kDense, 2, {D::kEmbd, D::kSsmVHeads}, true, dn});
  t.push_back(
      {T::kSsmAlpha, "ssm_alpha.weight", R::kDense, 2, {D::kEmbd, D::kSsmVHeads}, true, dn});
  t.push_back({T::kSsmNorm, "ssm_norm.weight", R::kNorm, 1, {D::kSsmHeadV}, true, dn});
  t.push_back({T::kSsmOut, "ssm_out.weight", R::kDense, 2, {D::kSsmInner, D::kEmbd}, true, dn});
  // The residual stream after the mixer is normed by post_attention_norm
  // before the FFN: the role of ffn_norm elsewhere.
  t.push_back({T::kFfnNorm, "post_attention_norm.weight", R::kNorm, 1, {D::kEmbd}, true});
  AddRoutedExperts(t);
  AddGatedSharedExpert(t);
  return t;
}

// llama.cpp: llama_model_minimax_m2 (load_arch_tensors): GQA with one
// RMSNorm over the whole q and the whole k projection, a router with the
// selection bias exp_probs_b, no shared expert, an untied output head.
std::vector<TensorSpec> MiniMaxM2Tensors() {
  std::vector<TensorSpec> t = AttentionMoeTensors();
  t.push_back({T::kAttnQNorm, "attn_q_norm.weight", R::kNorm, 1, {D::kQ}, true});
  t.push_back({T::kAttnKNorm, "attn_k_norm.weight", R::kNorm, 1, {D::kK}, true});
  t.push_back({T::kRouterSelBias, "exp_probs_b.bias", R::kRouter, 1, {D::kExpert}, true,
               LayerSel::kMoe});
  return t;
}

// llama.cpp: llama_model_qwen3next (load_arch_tensors): qwen35moe's layers
// with ONE fused ssm_ba (per key head g: the beta rows, then the alpha rows
// of its value heads) instead of ssm_beta + ssm_alpha, and the DeltaNet
// input either as attn_qkv + attn_gate or, in files converted before 2026,
// as the fused ssm_in (per key head g: q_g, k_g, then the v and the z rows
// of its value heads). Model::Load splits both into the qwen35moe fields.
std::vector<TensorSpec> Qwen3NextTensors() {
  std::vector<TensorSpec> t;
  for (const TensorSpec& s : Qwen35MoeTensors()) {
    if (s.id == T::kSsmBeta || s.id == T::kSsmAlpha) continue;
    t.push_back(s);
    if (s.id == T::kSsmQkv || s.id == T::kSsmZ) t.back().required = false;
    if (s.id == T::kSsmZ) {
      t.push_back({T::kSsmIn, "ssm_in.weight", R::kDense, 2, {D::kEmbd, D::kSsmQkvz}, false,
                   LayerSel::kDeltaNet});
    }
    if (s.id == T::kSsmA) {
      t.push_back({T::kSsmBa, "ssm_ba.weight", R::kDense, 2, {D::kEmbd, D::kSsmBa}, true,
                   LayerSel::kDeltaNet});
    }
  }
  return t;
}

// llama.cpp: llama_model_openai_moe (load_arch_tensors).
std::vector<TensorSpec> GptOssTensors() {
  std::vector<TensorSpec> t = GlobalTensors();
  t.push_back({T::kAttnNorm, "attn_norm.weight", R::kNorm, 1, {D::kEmbd}, true});
  AddAttention(t, LayerSel::kAll, D::kQ);
  t.push_back({T::kAttnQBias, "attn_q.bias", R::kDense, 1, {D::kQ}, true});
  t.push_back({T::kAttnKBias, "attn_k.bias", R::kDense, 1, {D::kK}, true});
  t.push_back({T::kAttnVBias, "attn_v.bias", R::kDense, 1, {D::kV}, true});
  t.push_back({T::kAttnOutputBias, "attn_output.bias", R::kDense, 1, {D::kEmbd}, true});
  t.push_back({T::kAttnSinks, "attn_sinks.weight", R::kDense, 1, {D::kHead}, true});
  t.push_back({T::kFfnNorm, "post_attention_norm.weight", R::kNorm, 1, {D::kEmbd}, true});
  AddRoutedExperts(t);
  const LayerSel m = LayerSel::kMoe;
  t.push_back({T::kRouterBias, "ffn_gate_inp.bias", R::kRouter, 1, {D::kExpert}, true, m});
  t.push_back({T::kExpGateBias, "ffn_gate_exps.bias", R::kRoutedExpert, 2,
               {D::kFfExp, D::kExpert}, true, m});
  t.push_back({T::kExpUpBias, "ffn_up_exps.bias", R::kRoutedExpert, 2,
               {D::kFfExp, D::kExpert}, true, m});
  t.push_back({T::kExpDownBias, "ffn_down_exps.bias", R::kRoutedExpert, 2,
               {D::kEmbd, D::kExpert}, true, m});
  return t;
}

// llama.cpp: llama_model_deepseek2 (load_arch_tensors), the MLA layout
// (attn_k_b / attn_v_b; the older fused attn_kv_b is refused at parse).
std::vector<TensorSpec> DeepSeek2Tensors() {
  std::vector<TensorSpec> t = GlobalTensors();
  t.push_back({T::kAttnNorm, "attn_norm.weight", R::kNorm, 1, {D::kEmbd}, true});
  // q through the LoRA pair, or attn_q when attention.q_lora_rank is 0 /
  // absent (ParseHyperParams + Model check which one is there).
  t.push_back({T::kAttnQA, "attn_q_a.weight", R::kDense, 2, {D::kEmbd, D::kQLora}, false});
  t.push_back({T::kAttnQANorm, "attn_q_a_norm.weight", R::kNorm, 1, {D::kQLora}, false});
  t.push_back({T::kAttnQB, "attn_q_b.weight", R::kDense, 2, {D::kQLora, D::kQMla}, false});
  t.push_back({T::kAttnQ, "attn_q.weight", R::kDense, 2, {D::kEmbd, D::kQMla}, false});
  t.push_back(
      {T::kAttnKvAMqa, "attn_kv_a_mqa.weight", R::kDense, 2, {D::kEmbd, D::kKvAMqa}, true});
  t.push_back({T::kAttnKvANorm, "attn_kv_a_norm.weight", R::kNorm, 1, {D::kKvLora}, true});
  t.push_back(
      {T::kAttnKB, "attn_k_b.weight", R::kDense, 3, {D::kNope, D::kKvLora, D::kHead}, true});
  t.push_back(
      {T::kAttnVB, "attn_v_b.weight", R::kDense, 3, {D::kKvLora, D::kHeadVMla, D::kHead}, true});
  t.push_back(
      {T::kAttnOutput, "attn_output.weight", R::kDense, 2, {D::kAttnOutMla, D::kEmbd}, true});
  t.push_back({T::kFfnNorm, "ffn_norm.weight", R::kNorm, 1, {D::kEmbd}, true});
  const LayerSel dense = LayerSel::kDenseFfn;
  t.push_back({T::kFfnGate, "ffn_gate.weight", R::kDense, 2, {D::kEmbd, D::kFf}, true, dense});
  t.push_back({T::kFfnUp, "ffn_up.weight", R::kDense, 2, {D::kEmbd, D::kFf}, true, dense});
  t.push_back({T::kFfnDown, "ffn_down.weight", R::kDense, 2, {D::kFf, D::kEmbd}, true, dense});
  AddRoutedExperts(t);
  const LayerSel m = LayerSel::kMoe;
  t.push_back(
      {T::kRouterSelBias, "exp_probs_b.bias", R::kRouter, 1, {D::kExpert}, false, m});
  t.push_back({T::kShexpGate, "ffn_gate_shexp.weight", R::kSharedExpert, 2,
               {D::kEmbd, D::kFfShexp}, true, m});
  t.push_back({T::kShexpUp, "ffn_up_shexp.weight", R::kSharedExpert, 2,
               {D::kEmbd, D::kFfShexp}, true, m});
  t.push_back({T::kShexpDown, "ffn_down_shexp.weight", R::kSharedExpert, 2,
               {D::kFfShexp, D::kEmbd}, true, m});
  return t;
}

// llama.cpp: llama_model_glm4_moe (load_arch_tensors): GQA with optional
// q/k/v biases and optional QK-norm, post_attention_norm before the FFN,
// leading dense-FFN layers, then a router with the selection bias and an
// ungated shared expert.
std::vector<TensorSpec> Glm4MoeTensors() {
  std::vector<TensorSpec> t = GlobalTensors();
  t.push_back({T::kAttnNorm, "attn_norm.weight", R::kNorm, 1, {D::kEmbd}, true});
  AddAttention(t, LayerSel::kAll, D::kQ);
  t.push_back({T::kAttnQBias, "attn_q.bias", R::kDense, 1, {D::kQ}, false});
  t.push_back({T::kAttnKBias, "attn_k.bias", R::kDense, 1, {D::kK}, false});
  t.push_back({T::kAttnVBias, "attn_v.bias", R::kDense, 1, {D::kV}, false});
  t.push_back({T::kAttnQNorm, "attn_q_norm.weight", R::kNorm, 1, {D::kHeadK}, false});
  t.push_back({T::kAttnKNorm, "attn_k_norm.weight", R::kNorm, 1, {D::kHeadK}, false});
  t.push_back({T::kFfnNorm, "post_attention_norm.weight", R::kNorm, 1, {D::kEmbd}, true});
  const LayerSel dense = LayerSel::kDenseFfn;
  t.push_back({T::kFfnGate, "ffn_gate.weight", R::kDense, 2, {D::kEmbd, D::kFf}, true, dense});
  t.push_back({T::kFfnUp, "ffn_up.weight", R::kDense, 2, {D::kEmbd, D::kFf}, true, dense});
  t.push_back({T::kFfnDown, "ffn_down.weight", R::kDense, 2, {D::kFf, D::kEmbd}, true, dense});
  AddRoutedExperts(t);
  const LayerSel m = LayerSel::kMoe;
  t.push_back({T::kRouterSelBias, "exp_probs_b.bias", R::kRouter, 1, {D::kExpert}, true, m});
  t.push_back({T::kShexpGate, "ffn_gate_shexp.weight", R::kSharedExpert, 2,
               {D::kEmbd, D::kFfShexp}, true, m});
  t.push_back({T::kShexpUp, "ffn_up_shexp.weight", R::kSharedExpert, 2,
               {D::kEmbd, D::kFfShexp}, true, m});
  t.push_back({T::kShexpDown, "ffn_down_shexp.weight", R::kSharedExpert, 2,
               {D::kFfShexp, D::kEmbd}, true, m});
  return t;
}

// llama.cpp: llama_model_nemotron_h (load_arch_tensors): one norm per
// layer (attn_norm, before the mixer or, on the MoE layers, before the FFN:
// ffn_norm's role there), Mamba-2 mixers, GQA without RoPE, and MoE layers
// of non-gated relu^2 experts, a sigmoid router with the selection bias,
// LatentMoE's projections around the routed experts (Super / Ultra), and an
// ungated relu^2 shared expert.
std::vector<TensorSpec> NemotronHMoeTensors() {
  std::vector<TensorSpec> t = GlobalTensors();
  t.push_back({T::kAttnNorm, "attn_norm.weight", R::kNorm, 1, {D::kEmbd}, true, LayerSel::kMixer});
  t.push_back(
      {T::kFfnNorm, "attn_norm.weight", R::kNorm, 1, {D::kEmbd}, true, LayerSel::kFfnOnly});
  const LayerSel a = LayerSel::kAttention;
  AddAttention(t, a, D::kQ);
  t.push_back({T::kAttnOutputBias, "attn_output.bias", R::kDense, 1, {D::kEmbd}, false, a});
  const LayerSel mb = LayerSel::kMamba2;
  t.push_back(
      {T::kSsmIn, "ssm_in.weight", R::kDense, 2, {D::kEmbd, D::kSsmInMamba2}, true, mb});
  t.push_back(
      {T::kSsmConv, "ssm_conv1d.weight", R::kDense, 2, {D::kSsmKernel, D::kSsmConvDim}, true, mb});
  t.push_back({T::kSsmConvBias, "ssm_conv1d.bias", R::kDense, 1, {D::kSsmConvDim}, false, mb});
  t.push_back({T::kSsmDtBias, "ssm_dt.bias", R::kDense, 1, {D::kSsmVHeads}, true, mb});
  t.push_back({T::kSsmA, "ssm_a", R::kDense, 2, {D::kOne, D::kSsmVHeads}, true, mb});
  t.push_back({T::kSsmD, "ssm_d", R::kDense, 2, {D::kOne, D::kSsmVHeads}, true, mb});
  t.push_back(
      {T::kSsmNorm, "ssm_norm.weight", R::kNorm, 2, {D::kSsmNormGroup, D::kSsmGroups}, true, mb});
  t.push_back({T::kSsmOut, "ssm_out.weight", R::kDense, 2, {D::kSsmInner, D::kEmbd}, true, mb});
  const LayerSel m = LayerSel::kMoe;
  t.push_back({T::kRouter, "ffn_gate_inp.weight", R::kRouter, 2, {D::kEmbd, D::kExpert}, true, m});
  t.push_back({T::kRouterSelBias, "exp_probs_b.bias", R::kRouter, 1, {D::kExpert}, true, m});
  t.push_back({T::kFfnLatentDown, "ffn_latent_down.weight", R::kDense, 2,
               {D::kEmbd, D::kEmbdExperts}, false, m});
  t.push_back({T::kFfnLatentUp, "ffn_latent_up.weight", R::kDense, 2,
               {D::kEmbdExperts, D::kEmbd}, false, m});
  t.push_back({T::kExpUp, "ffn_up_exps.weight", R::kRoutedExpert, 3,
               {D::kEmbdExperts, D::kFfExp, D::kExpert}, true, m});
  t.push_back({T::kExpDown, "ffn_down_exps.weight", R::kRoutedExpert, 3,
               {D::kFfExp, D::kEmbdExperts, D::kExpert}, true, m});
  t.push_back({T::kShexpUp, "ffn_up_shexp.weight", R::kSharedExpert, 2,
               {D::kEmbd, D::kFfShexp}, true, m});
  t.push_back({T::kShexpDown, "ffn_down_shexp.weight", R::kSharedExpert, 2,
               {D::kFfShexp, D::kEmbd}, true, m});
  return t;
}

// llama.cpp: llama_model_gemma4 (load_arch_tensors), the MoE layers of
// Gemma-4-26B-A4B: attention with Q/K norms (V from K where attn_v is
// absent), post-attention norm, a dense GeGLU MLP beside the routed experts
// (fused gate/up, a factor per expert on its down output), a router on
// RMSNorm(x) / sqrt(d) * ffn_gate_inp.scale, the extra FFN norms and a
// per-layer output scale; rope_freqs for the full-attention layers.
std::vector<TensorSpec> Gemma4Tensors() {
  std::vector<TensorSpec> t = GlobalTensors();
  t.push_back({T::kRopeFreqs, "rope_freqs.weight", R::kNorm, 1, {D::kRopePairs}, false});
  t.push_back({T::kAttnNorm, "attn_norm.weight", R::kNorm, 1, {D::kEmbd}, true});
  AddAttention(t, LayerSel::kAll, D::kQ);
  for (TensorSpec& s : t) {
    if (s.id == T::kAttnV) s.required = false;
  }
  AddQkNorm(t, LayerSel::kAll);
  t.push_back({T::kAttnPostNorm, "post_attention_norm.weight", R::kNorm, 1, {D::kEmbd}, true});
  t.push_back({T::kFfnNorm, "ffn_norm.weight", R::kNorm, 1, {D::kEmbd}, true});
  t.push_back({T::kFfnGate, "ffn_gate.weight", R::kDense, 2, {D::kEmbd, D::kFf}, true});
  t.push_back({T::kFfnUp, "ffn_up.weight", R::kDense, 2, {D::kEmbd, D::kFf}, true});
  t.push_back({T::kFfnDown, "ffn_down.weight", R::kDense, 2, {D::kFf, D::kEmbd}, true});
  t.push_back({T::kFfnPostNorm, "post_ffw_norm.weight", R::kNorm, 1, {D::kEmbd}, true});
  const LayerSel m = LayerSel::kMoe;
  t.push_back({T::kRouter, "ffn_gate_inp.weight", R::kRouter, 2, {D::kEmbd, D::kExpert}, true, m});
  t.push_back({T::kRouterScale, "ffn_gate_inp.scale", R::kRouter, 1, {D::kEmbd}, true, m});
  t.push_back({T::kFfnPreNorm2, "pre_ffw_norm_2.weight", R::kNorm, 1, {D::kEmbd}, true, m});
  t.push_back({T::kFfnPostNorm1, "post_ffw_norm_1.weight", R::kNorm, 1, {D::kEmbd}, true, m});
  t.push_back({T::kFfnPostNorm2, "post_ffw_norm_2.weight", R::kNorm, 1, {D::kEmbd}, true, m});
  // Fused gate/up, or (older conversions) the two tensors: Model::Load
  // checks that one of the forms is there.
  t.push_back({T::kExpGateUp, "ffn_gate_up_exps.weight", R::kRoutedExpert, 3,
               {D::kEmbd, D::kFfExp2, D::kExpert}, false, m});
  t.push_back({T::kExpGate, "ffn_gate_exps.weight", R::kRoutedExpert, 3,
               {D::kEmbd, D::kFfExp, D::kExpert}, false, m});
  t.push_back({T::kExpUp, "ffn_up_exps.weight", R::kRoutedExpert, 3,
               {D::kEmbd, D::kFfExp, D::kExpert}, false, m});
  t.push_back({T::kExpDown, "ffn_down_exps.weight", R::kRoutedExpert, 3,
               {D::kFfExp, D::kEmbd, D::kExpert}, true, m});
  t.push_back({T::kExpDownScale, "ffn_down_exps.scale", R::kRoutedExpert, 1, {D::kExpert},
               false, m});
  t.push_back({T::kLayerOutScale, "layer_output_scale.weight", R::kNorm, 1, {D::kOne}, false});
  return t;
}

// llama.cpp: LLM_TENSOR_NEXTN_* (glm4moe, deepseek2, qwen35moe load_arch_tensors).
std::vector<TensorSpec> MakeNextNTensors() {
  return {
      {T::kNextnEhProj, "nextn.eh_proj.weight", R::kDense, 2, {D::kEmbd2, D::kEmbd}, true},
      {T::kNextnEnorm, "nextn.enorm.weight", R::kNorm, 1, {D::kEmbd}, true},
      {T::kNextnHnorm, "nextn.hnorm.weight", R::kNorm, 1, {D::kEmbd}, true},
      {T::kNextnSharedHeadNorm, "nextn.shared_head_norm.weight", R::kNorm, 1, {D::kEmbd},
       false},
      {T::kNextnEmbedTokens, "nextn.embed_tokens.weight", R::kEmbeddings, 2,
       {D::kEmbd, D::kVocab}, false},
      {T::kNextnSharedHeadHead, "nextn.shared_head_head.weight", R::kOutput, 2,
       {D::kEmbd, D::kVocab}, false},
  };
}

const std::vector<ArchDescription>& Registry() {
  static const auto* const kArchs = new std::vector<ArchDescription>{
      // llama.cpp: llm_build_qwen3moe, build_moe_ffn(norm_w = true).
      {.name = "qwen3moe",
       .key_prefix = "qwen3moe",
       .router = {.default_norm_topk = true},
       .tensors = Qwen3MoeTensors()},
      // llama.cpp: llm_build_qwen2moe, build_moe_ffn(norm_w = false) plus a
      // shared expert scaled by sigmoid(ffn_gate_inp_shexp . h).
      {.name = "qwen2moe",
       .key_prefix = "qwen2moe",
       .router = {.default_norm_topk = false},
       .tensors = Qwen2MoeTensors()},
      // llama.cpp: llama_model_qwen35moe: three gated-DeltaNet layers for
      // every gated full-attention layer (IMROPE), build_moe_ffn(norm_w =
      // true), a shared expert scaled by sigmoid(ffn_gate_inp_shexp . h).
      {.name = "qwen35moe",
       .key_prefix = "qwen35moe",
       .router = {.default_norm_topk = true},
       .pattern = LayerPattern::kFullAttentionInterval,
       .attention = MixerKind::kGatedAttention,
       .multi_section_rope = true,
       .tensors = Qwen35MoeTensors()},
      // llama.cpp: llama_model_qwen3next: qwen35moe's hybrid with the fused
      // ssm_ba (and legacy ssm_in) file layouts, value head h reading key
      // head h / (value heads / key heads), plain NEOX RoPE (no sections).
      {.name = "qwen3next",
       .key_prefix = "qwen3next",
       .router = {.default_norm_topk = true},
       .pattern = LayerPattern::kFullAttentionInterval,
       .attention = MixerKind::kGatedAttention,
       .ssm_grouped_heads = true,
       .tensors = Qwen3NextTensors()},
      // llama.cpp: llama_model_minimax_m2: GQA with whole-projection QK-norm,
      // partial NEOX RoPE, build_moe_ffn(norm_w = true) with sigmoid scores
      // (expert_gating_func, which the converter writes) and the selection
      // bias, no weight scale, no shared expert.
      {.name = "minimax-m2",
       .key_prefix = "minimax-m2",
       .router = {.scoring = RouterSpec::Scoring::kSigmoid,
                  .default_norm_topk = true,
                  .gating_func_key = true},
       .qk_norm_whole = true,
       .tensors = MiniMaxM2Tensors()},
      // llama.cpp: llama_model_openai_moe: biased GQA attention with a sink
      // logit per head, sliding-window attention on alternate layers, YaRN
      // RoPE; router with a bias, softmax over the selected experts
      // (LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX_WEIGHT); biased experts with
      // the clamped SwiGLU (LLM_FFN_SWIGLU_OAI_MOE, alpha 1.702, limit 7).
      {.name = "gpt-oss",
       .key_prefix = "gpt-oss",
       .router = {.scoring = RouterSpec::Scoring::kSoftmaxSelected, .default_norm_topk = false},
       .sliding_window = true,
       .expert_ffn = {.activation = ExpertActivation::kSwiGluOai, .alpha = 1.702f, .limit = 7.0f},
       .tensors = GptOssTensors()},
      // llama.cpp: llama_model_deepseek2 (DeepSeek-V2/V3, Kimi-K2,
      // Moonlight): MLA in the absorbed form, NORM RoPE with YaRN's
      // attention-scale correction, leading dense-FFN layers, then a router
      // with sigmoid (or softmax) scores, a selection bias and expert groups,
      // weights normalised and scaled, plus ungated shared experts.
      {.name = "deepseek2",
       .key_prefix = "deepseek2",
       .router = {.scoring = RouterSpec::Scoring::kSoftmax,
                  .default_norm_topk = false,
                  .gating_func_key = true,
                  .weights_scale_key = true,
                  .expert_groups = true,
                  // llama_model_deepseek2::load_arch_hparams: GLM-4.7-Flash.
                  .inferred = {{.trunk_layers = {47, 48},
                                .n_vocab = 154880,
                                .scoring = RouterSpec::Scoring::kSigmoid}}},
       .attention = MixerKind::kMla,
       .expert_ffn = {},
       .rope_norm = true,
       .leading_dense_layers = true,
       .shared_expert_count = true,
       .rope_yarn_log_multiplier = true,
       .tensors = DeepSeek2Tensors()},
      // llama.cpp: llama_model_glm4_moe (GLM-4.5 / 4.6 / 4.7): GQA with q/k/v
      // biases added before the per-head QK-norm (both optional), partial
      // NEOX RoPE, post_attention_norm as the FFN's pre-norm, leading
      // dense-FFN layers, a sigmoid router (expert_gating_func absent or 0:
      // sigmoid) whose choice adds the selection bias exp_probs_b while the
      // weights are the unbiased scores, normalised and scaled, plus an
      // ungated shared expert of expert_shared_count experts.
      {.name = "glm4moe",
       .key_prefix = "glm4moe",
       .router = {.scoring = RouterSpec::Scoring::kSigmoid,
                  .default_norm_topk = false,
                  .gating_func_key = true,
                  .weights_scale_key = true,
                  .expert_groups = true},
       .leading_dense_layers = true,
       .shared_expert_count = true,
       .tensors = Glm4MoeTensors()},
      // llama.cpp: llama_model_nemotron_h(_moe) (NVIDIA Nemotron-3 Nano /
      // Super / Ultra): per-layer kinds from the head_count_kv /
      // feed_forward_length arrays (Mamba-2, attention without RoPE, MoE),
      // build_moe_ffn(LLM_FFN_RELU_SQR, sigmoid gating, exp_probs_b,
      // expert_weights_norm / _scale, expert groups) plus the ungated relu^2
      // shared expert, LatentMoE when moe_latent_size is set.
      {.name = "nemotron_h_moe",
       .key_prefix = "nemotron_h_moe",
       .router = {.scoring = RouterSpec::Scoring::kSigmoid,
                  .default_norm_topk = false,
                  .weights_scale_key = true,
                  .expert_groups = true},
       .pattern = LayerPattern::kPerLayerKinds,
       .attention = MixerKind::kAttention,
       .recurrent = MixerKind::kMamba2,
       .expert_ffn = {.activation = ExpertActivation::kReluSq},
       .ssm_grouped_heads = true,
       .rope = false,
       .moe_latent = true,
       .tensors = NemotronHMoeTensors()},
      // llama.cpp: llama_model_gemma4 (Gemma-4-26B-A4B's MoE layers):
      // sliding-window and full-attention layers from a per-layer pattern
      // with their own head sizes, KV heads and RoPE ("proportional" RoPE
      // through rope_freqs on the full ones), attention scale 1, V RMS-normed
      // (from K where attn_v is absent), embeddings times sqrt(d), a GeGLU
      // MLP beside GeGLU experts, softmax router with normalised weights,
      // final logit soft-capping.
      {.name = "gemma4",
       .key_prefix = "gemma4",
       .router = {.default_norm_topk = true},
       .sliding_window = true,
       .expert_ffn = {.activation = ExpertActivation::kGeGlu},
       .swa_own_geometry = true,
       .unit_attention_scale = true,
       .v_rms_norm = true,
       .embed_scale_sqrt_d = true,
       .dense_activation = ExpertActivation::kGeGlu,
       .tensors = Gemma4Tensors()},
  };
  return *kArchs;
}

// Reads an integer key that may also be a per-layer array of equal values.
// Absent: `def` when given, else InvalidArgument.
absl::StatusOr<int64_t> ReadInt(const GgufFile& f, const std::string& key,
                                std::optional<int64_t> def) {
  const GgufValue* v = f.Find(key);
  if (v == nullptr) {
    if (def.has_value()) return *def;
    return absl::InvalidArgumentError(
        absl::StrCat(f.path(), ": missing hyper-parameter '", key, "'"));
  }
  if (v->type() == GgufValueType::kArray) {
    std::vector<int64_t> vals = v->ints();
    for (uint64_t u : v->uints()) vals.push_back(static_cast<int64_t>(u));
    if (vals.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(f.path(), ": key '", key, "': empty or non-integer array"));
    }
    for (int64_t x : vals) {
      if (x != vals[0]) {
        return absl::InvalidArgumentError(absl::StrCat(
            f.path(), ": key '", key, "': per-layer values differ (unsupported)"));
      }
    }
    return vals[0];
  }
  auto r = v->AsInt();
  if (!r.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.path(), ": key '", key, "': ", r.status().message()));
  }
  return *r;
}

// A per-layer integer key whose non-zero entries must be equal: that value
// (0 when every entry is 0 or the key is absent). InvalidArgument naming the
// key when two non-zero entries differ or one is negative.
absl::StatusOr<int64_t> ReadNonZero(const GgufFile& f, const std::string& key) {
  const GgufValue* v = f.Find(key);
  if (v == nullptr) return 0;
  if (v->type() != GgufValueType::kArray) return ReadInt(f, key, std::nullopt);
  std::vector<int64_t> vals = v->ints();
  for (uint64_t u : v->uints()) vals.push_back(static_cast<int64_t>(u));
  int64_t value = 0;
  for (int64_t x : vals) {
    if (x < 0 || (x != 0 && value != 0 && x != value)) {
      return absl::InvalidArgumentError(absl::StrCat(
          f.path(), ": key '", key, "': per-layer values ", value, " and ", x,
          " (the non-zero entries must be equal)"));
    }
    if (x != 0) value = x;
  }
  return value;
}

// Reads an integer (or bool) key as one value per layer: a scalar for every
// layer, or an array of exactly n_layer entries. Absent: `def` for every
// layer when given, else InvalidArgument.
absl::StatusOr<std::vector<int64_t>> ReadIntPerLayer(const GgufFile& f, const std::string& key,
                                                     int64_t n_layer,
                                                     std::optional<int64_t> def) {
  const GgufValue* v = f.Find(key);
  if (v == nullptr || v->type() != GgufValueType::kArray) {
    ASSIGN_OR_RETURN(const int64_t x, ReadInt(f, key, def));
    return std::vector<int64_t>(n_layer, x);
  }
  std::vector<int64_t> vals = v->ints();
  for (uint64_t u : v->uints()) vals.push_back(static_cast<int64_t>(u));
  if (static_cast<int64_t>(vals.size()) < n_layer) {
    return absl::InvalidArgumentError(absl::StrCat(f.path(), ": key '", key, "' has ",
                                                   vals.size(), " entries for ", n_layer,
                                                   " layers"));
  }
  vals.resize(n_layer);
  return vals;
}

absl::StatusOr<double> ReadFloat(const GgufFile& f, const std::string& key,
                                 std::optional<double> def) {
  if (f.Find(key) == nullptr) {
    if (def.has_value()) return *def;
    return absl::InvalidArgumentError(
        absl::StrCat(f.path(), ": missing hyper-parameter '", key, "'"));
  }
  auto r = f.GetFloat(key);
  if (!r.ok()) return absl::InvalidArgumentError(r.status().message());
  if (!std::isfinite(*r)) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.path(), ": key '", key, "' is not finite"));
  }
  return *r;
}

absl::Status Positive(const GgufFile& f, std::string_view key, int64_t v,
                      int64_t limit = int64_t{1} << 24) {
  if (v <= 0 || v > limit) {
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": hyper-parameter '", internal::Sv(key), "' = ", v, " out of range [1, ", limit, "]"));
  }
  return absl::OkStatus();
}

absl::Status ParseRope(const GgufFile& f, const std::string& p, HyperParams* hp) {
  RopeParams& r = hp->rope;
  ASSIGN_OR_RETURN(r.n_rot, ReadInt(f, p + ".rope.dimension_count", hp->head_dim_k));
  if (r.n_rot <= 0 || r.n_rot > hp->head_dim_k || r.n_rot % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": rope.dimension_count = ", r.n_rot, " must be even and in [2, ",
        hp->head_dim_k, "]"));
  }
  ASSIGN_OR_RETURN(double base, ReadFloat(f, p + ".rope.freq_base", 10000.0));
  if (base <= 1.0) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.path(), ": rope.freq_base = ", base, " must be > 1"));
  }
  r.freq_base = static_cast<float>(base);
  ASSIGN_OR_RETURN(double factor, ReadFloat(f, p + ".rope.scaling.factor", 0.0));
  if (factor < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.path(), ": rope.scaling.factor = ", factor, " is negative"));
  }
  r.freq_scale = factor == 0.0 ? 1.0f : static_cast<float>(1.0 / factor);
  std::string type_name = "none";
  if (f.Find(p + ".rope.scaling.type") != nullptr) {
    auto s = f.GetString(p + ".rope.scaling.type");
    if (!s.ok()) return absl::InvalidArgumentError(s.status().message());
    type_name = *s;
  } else if (factor != 0.0 && factor != 1.0) {
    type_name = "linear";
  }
  if (type_name == "none") {
    r.scaling = RopeScaling::kNone;
    r.freq_scale = 1.0f;
  } else if (type_name == "linear") {
    r.scaling = RopeScaling::kLinear;
  } else if (type_name == "yarn") {
    r.scaling = RopeScaling::kYarn;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": unsupported rope.scaling.type '", type_name, "'"));
  }
  ASSIGN_OR_RETURN(r.n_ctx_orig,
                   ReadInt(f, p + ".rope.scaling.original_context_length", hp->n_ctx_train));
  RETURN_IF_ERROR(Positive(f, "rope.scaling.original_context_length", r.n_ctx_orig,
                           int64_t{1} << 30));
  const double ext_def = r.scaling == RopeScaling::kYarn ? 1.0 : 0.0;
  ASSIGN_OR_RETURN(double ext, ReadFloat(f, p + ".rope.scaling.yarn_ext_factor", ext_def));
  ASSIGN_OR_RETURN(double attn, ReadFloat(f, p + ".rope.scaling.attn_factor", 1.0));
  ASSIGN_OR_RETURN(double fast, ReadFloat(f, p + ".rope.scaling.yarn_beta_fast", 32.0));
  ASSIGN_OR_RETURN(double slow, ReadFloat(f, p + ".rope.scaling.yarn_beta_slow", 1.0));
  r.ext_factor = static_cast<float>(ext);
  r.attn_factor = static_cast<float>(attn);
  if (r.ext_factor != 0.0f) {
    r.attn_factor = YarnAttnFactor(r.freq_scale, r.yarn_log_mul, static_cast<float>(attn));
  }
  r.beta_fast = static_cast<float>(fast);
  r.beta_slow = static_cast<float>(slow);
  return absl::OkStatus();
}

absl::Status ParseAttention(const GgufFile& f, const std::string& p, const ArchDescription& arch,
                            HyperParams* hp) {
  ASSIGN_OR_RETURN(hp->n_head, ReadInt(f, p + ".attention.head_count", std::nullopt));
  RETURN_IF_ERROR(Positive(f, "attention.head_count", hp->n_head, 4096));
  const std::string kv_key = p + ".attention.head_count_kv";
  const GgufValue* kv_arr = f.Find(kv_key);
  if (arch.pattern == LayerPattern::kPerLayerKinds) {
    // The attention layers' value; a model without any keeps head_count.
    ASSIGN_OR_RETURN(hp->n_head_kv, ReadNonZero(f, kv_key));
    if (hp->n_head_kv == 0) hp->n_head_kv = hp->n_head;
  } else if (arch.swa_own_geometry && kv_arr != nullptr &&
             kv_arr->type() == GgufValueType::kArray) {
    // Per-layer values (ParseLayers sets each layer's); the global one is
    // the last layer's until then.
    ASSIGN_OR_RETURN(std::vector<int64_t> kv, ReadIntPerLayer(f, kv_key, hp->n_layer, std::nullopt));
    hp->n_head_kv = kv.back();
  } else {
    ASSIGN_OR_RETURN(hp->n_head_kv, ReadInt(f, kv_key, hp->n_head));
  }
  RETURN_IF_ERROR(Positive(f, "attention.head_count_kv", hp->n_head_kv, 4096));
  if (hp->n_head % hp->n_head_kv != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": attention.head_count ", hp->n_head,
        " is not a multiple of attention.head_count_kv ", hp->n_head_kv));
  }
  const int64_t def_head = hp->n_embd / hp->n_head;
  ASSIGN_OR_RETURN(hp->head_dim_k, ReadInt(f, p + ".attention.key_length", def_head));
  RETURN_IF_ERROR(Positive(f, "attention.key_length", hp->head_dim_k, 65536));
  ASSIGN_OR_RETURN(hp->head_dim_v, ReadInt(f, p + ".attention.value_length", def_head));
  RETURN_IF_ERROR(Positive(f, "attention.value_length", hp->head_dim_v, 65536));
  ASSIGN_OR_RETURN(double eps,
                   ReadFloat(f, p + ".attention.layer_norm_rms_epsilon", std::nullopt));
  if (eps <= 0 || eps >= 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": attention.layer_norm_rms_epsilon = ", eps, " must be in (0, 1)"));
  }
  hp->rms_eps = static_cast<float>(eps);
  return absl::OkStatus();
}

absl::Status ParseExperts(const GgufFile& f, const std::string& p,
                          const ArchDescription& arch, HyperParams* hp) {
  if (arch.pattern == LayerPattern::kPerLayerKinds) {
    // The MoE layers' value (0 on the others).
    ASSIGN_OR_RETURN(hp->n_ff, ReadNonZero(f, p + ".feed_forward_length"));
  } else {
    ASSIGN_OR_RETURN(hp->n_ff, ReadInt(f, p + ".feed_forward_length", 0));
  }
  if (hp->n_ff < 0) return Positive(f, "feed_forward_length", hp->n_ff);
  ASSIGN_OR_RETURN(hp->n_expert, ReadInt(f, p + ".expert_count", std::nullopt));
  RETURN_IF_ERROR(Positive(f, "expert_count", hp->n_expert, 65536));
  ASSIGN_OR_RETURN(hp->n_expert_used, ReadInt(f, p + ".expert_used_count", std::nullopt));
  RETURN_IF_ERROR(Positive(f, "expert_used_count", hp->n_expert_used, hp->n_expert));
  const int64_t ff_exp_def = hp->n_ff / hp->n_expert_used;
  ASSIGN_OR_RETURN(hp->n_ff_exp, ReadInt(f, p + ".expert_feed_forward_length",
                                         ff_exp_def > 0 ? std::optional<int64_t>(ff_exp_def)
                                                        : std::nullopt));
  RETURN_IF_ERROR(Positive(f, "expert_feed_forward_length", hp->n_ff_exp));
  ASSIGN_OR_RETURN(hp->n_ff_shexp,
                   ReadInt(f, p + ".expert_shared_feed_forward_length", hp->n_ff));
  if (hp->n_ff_shexp < 0) {
    return Positive(f, "expert_shared_feed_forward_length", hp->n_ff_shexp);
  }
  const std::string norm_key = p + ".expert_weights_norm";
  if (f.Find(norm_key) != nullptr) {
    auto b = f.GetBool(norm_key);
    if (!b.ok()) return absl::InvalidArgumentError(b.status().message());
    hp->norm_topk = *b;
  } else {
    hp->norm_topk = arch.router.default_norm_topk;
  }
  return absl::OkStatus();
}

// The recurrent layers' hyper-parameters (llama.cpp's ssm_* keys): gated
// DeltaNet (group_count key heads of state_size, time_step_rank value
// heads) or Mamba-2 (group_count B/C groups of state_size, time_step_rank
// heads of inner_size / time_step_rank channels).
absl::Status ParseSsm(const GgufFile& f, const std::string& p, HyperParams* hp) {
  ASSIGN_OR_RETURN(hp->ssm_conv_kernel, ReadInt(f, p + ".ssm.conv_kernel", std::nullopt));
  RETURN_IF_ERROR(Positive(f, "ssm.conv_kernel", hp->ssm_conv_kernel, 64));
  ASSIGN_OR_RETURN(hp->ssm_head_k, ReadInt(f, p + ".ssm.state_size", std::nullopt));
  RETURN_IF_ERROR(Positive(f, "ssm.state_size", hp->ssm_head_k, 4096));
  ASSIGN_OR_RETURN(hp->ssm_n_k_heads, ReadInt(f, p + ".ssm.group_count", std::nullopt));
  RETURN_IF_ERROR(Positive(f, "ssm.group_count", hp->ssm_n_k_heads, 4096));
  ASSIGN_OR_RETURN(hp->ssm_n_v_heads, ReadInt(f, p + ".ssm.time_step_rank", std::nullopt));
  RETURN_IF_ERROR(Positive(f, "ssm.time_step_rank", hp->ssm_n_v_heads, 4096));
  ASSIGN_OR_RETURN(const int64_t inner, ReadInt(f, p + ".ssm.inner_size", std::nullopt));
  RETURN_IF_ERROR(Positive(f, "ssm.inner_size", inner, int64_t{1} << 20));
  if (inner % hp->ssm_n_v_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.path(), ": ssm.inner_size ", inner,
                     " is not a multiple of ssm.time_step_rank ", hp->ssm_n_v_heads));
  }
  hp->ssm_head_v = inner / hp->ssm_n_v_heads;
  if (hp->ssm_n_v_heads % hp->ssm_n_k_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": ssm.time_step_rank ", hp->ssm_n_v_heads,
        " (value heads) is not a multiple of ssm.group_count ", hp->ssm_n_k_heads));
  }
  bool delta_net = false;
  for (const LayerSpec& l : hp->layers) delta_net |= l.mixer == MixerKind::kGatedDeltaNet;
  if (delta_net && hp->ssm_head_v != hp->ssm_head_k) {
    // llama.cpp's delta rule (ggml_gated_delta_net) requires square states.
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": gated DeltaNet value head size ", hp->ssm_head_v,
        " (ssm.inner_size / ssm.time_step_rank) differs from ssm.state_size ", hp->ssm_head_k));
  }
  return absl::OkStatus();
}

// LayerPattern::kPerLayerKinds (llama.cpp's nemotron_h: is_recr when both
// entries are 0, attention when only the FFN length is).
absl::Status ParseLayerKinds(const GgufFile& f, const std::string& p, const ArchDescription& arch,
                             HyperParams* hp) {
  ASSIGN_OR_RETURN(const std::vector<int64_t> kv,
                   ReadIntPerLayer(f, p + ".attention.head_count_kv", hp->n_layer + hp->n_nextn(),
                                   std::nullopt));
  ASSIGN_OR_RETURN(const std::vector<int64_t> ff,
                   ReadIntPerLayer(f, p + ".feed_forward_length", hp->n_layer + hp->n_nextn(),
                                   std::nullopt));
  for (int64_t il = 0; il < hp->n_layer; ++il) {
    LayerSpec& l = hp->layers[il];
    if (kv[il] == 0 && ff[il] == 0) {
      l = LayerSpec{arch.recurrent, FfnKind::kNone};
    } else if (ff[il] == 0) {
      l = LayerSpec{arch.attention, FfnKind::kNone};
    } else if (kv[il] == 0) {
      l = LayerSpec{MixerKind::kNone, FfnKind::kMoe};
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          f.path(), ": layer ", il, " has both attention.head_count_kv ", kv[il],
          " and feed_forward_length ", ff[il], " (a layer is one mixer or one FFN)"));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseSwaGeometry(const GgufFile& f, const std::string& p, HyperParams* hp);

// One LayerSpec per layer from the description's pattern.
absl::Status ParseLayers(const GgufFile& f, const std::string& p, const ArchDescription& arch,
                         HyperParams* hp) {
  if (arch.attention == MixerKind::kGatedAttention && hp->head_dim_k != hp->head_dim_v) {
    // The gate has head_dim_k values per head and scales the head's output.
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": gated attention needs attention.key_length ", hp->head_dim_k,
        " == attention.value_length ", hp->head_dim_v));
  }
  int64_t interval = 4;
  if (arch.pattern == LayerPattern::kFullAttentionInterval) {
    ASSIGN_OR_RETURN(interval, ReadInt(f, p + ".full_attention_interval", 4));
    RETURN_IF_ERROR(Positive(f, "full_attention_interval", interval, hp->n_layer + 1));
  }
  hp->layers = LayerSpecs(arch, hp->n_layer, interval);
  if (arch.pattern == LayerPattern::kPerLayerKinds) RETURN_IF_ERROR(ParseLayerKinds(f, p, arch, hp));
  // A NextN / MTP block is a full-attention block with routed experts
  // (llama.cpp's load_block_mtp), whatever the trunk's pattern says for its
  // index.
  for (LayerSpec& l : hp->nextn_layers) l = LayerSpec{arch.attention, FfnKind::kMoe, 0, true};
  for (int64_t il = 0; il < std::min(hp->n_dense_lead, hp->n_layer); ++il) {
    hp->layers[il].ffn = FfnKind::kDense;
  }
  if (arch.sliding_window) {
    ASSIGN_OR_RETURN(const int64_t window,
                     ReadInt(f, p + ".attention.sliding_window", std::nullopt));
    RETURN_IF_ERROR(Positive(f, "attention.sliding_window", window, int64_t{1} << 30));
    const std::string pattern_key = p + ".attention.sliding_window_pattern";
    const GgufValue* pattern = f.Find(pattern_key);
    if (pattern != nullptr && pattern->type() == GgufValueType::kArray) {
      // One bool per layer (llama.cpp's get_key_or_arr into is_swa_impl).
      ASSIGN_OR_RETURN(const std::vector<int64_t> swa,
                       ReadIntPerLayer(f, pattern_key, hp->n_layer, std::nullopt));
      for (int64_t il = 0; il < hp->n_layer; ++il) {
        if (IsAttention(hp->layers[il].mixer) && swa[il] != 0) {
          hp->layers[il].sliding_window = window;
        }
      }
    } else {
      ASSIGN_OR_RETURN(const int64_t period, ReadInt(f, pattern_key, 2));
      RETURN_IF_ERROR(Positive(f, "attention.sliding_window_pattern", period, 4096));
      // llama_hparams::set_swa_pattern(period): layer il slides when
      // il % period < period - 1 (period 1: none does).
      for (int64_t il = 0; il < hp->n_layer; ++il) {
        if (IsAttention(hp->layers[il].mixer) && il % period < period - 1) {
          hp->layers[il].sliding_window = window;
        }
      }
    }
  }
  if (arch.swa_own_geometry) RETURN_IF_ERROR(ParseSwaGeometry(f, p, hp));
  if (hp->n_recurrent_layers() > 0) RETURN_IF_ERROR(ParseSsm(f, p, hp));
  return absl::OkStatus();
}

// ArchDescription::swa_own_geometry, after the sliding windows are known:
// the sliding layers' head sizes and RoPE, every layer's KV heads. The
// global geometry (HyperParams::n_head_kv, head_dim_k/v, rope) is the
// full-attention layers'; a layer whose own differs keeps it in LayerSpec.
absl::Status ParseSwaGeometry(const GgufFile& f, const std::string& p, HyperParams* hp) {
  ASSIGN_OR_RETURN(const int64_t shared, ReadInt(f, p + ".attention.shared_kv_layers", 0));
  ASSIGN_OR_RETURN(const int64_t per_layer_embd,
                   ReadInt(f, p + ".embedding_length_per_layer_input", 0));
  if (shared != 0 || per_layer_embd != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": ", hp->arch, " with attention.shared_kv_layers ", shared,
        " / embedding_length_per_layer_input ", per_layer_embd,
        " (KV shared between layers, per-layer embeddings: the small dense models) is not "
        "supported; only 0 / 0 (the MoE model's)"));
  }
  ASSIGN_OR_RETURN(const std::vector<int64_t> kv,
                   ReadIntPerLayer(f, p + ".attention.head_count_kv", hp->n_layer, hp->n_head));
  ASSIGN_OR_RETURN(const int64_t hk_swa,
                   ReadInt(f, p + ".attention.key_length_swa", hp->head_dim_k));
  RETURN_IF_ERROR(Positive(f, "attention.key_length_swa", hk_swa, 65536));
  ASSIGN_OR_RETURN(const int64_t hv_swa,
                   ReadInt(f, p + ".attention.value_length_swa", hp->head_dim_v));
  RETURN_IF_ERROR(Positive(f, "attention.value_length_swa", hv_swa, 65536));
  // The full-attention layers' KV heads are the global ones.
  for (int64_t il = 0; il < hp->n_layer; ++il) {
    if (hp->layers[il].sliding_window == 0) hp->n_head_kv = kv[il];
  }
  for (int64_t il = 0; il < hp->n_layer; ++il) {
    LayerSpec& l = hp->layers[il];
    RETURN_IF_ERROR(Positive(f, "attention.head_count_kv", kv[il], 4096));
    if (hp->n_head % kv[il] != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          f.path(), ": attention.head_count ", hp->n_head,
          " is not a multiple of layer ", il, "'s attention.head_count_kv ", kv[il]));
    }
    if (kv[il] != hp->n_head_kv) l.n_head_kv = kv[il];
    if (l.sliding_window > 0) {
      if (hk_swa != hp->head_dim_k) l.head_dim_k = hk_swa;
      if (hv_swa != hp->head_dim_v) l.head_dim_v = hv_swa;
    }
  }
  RopeParams& r = hp->rope_swa;
  r = hp->rope;
  ASSIGN_OR_RETURN(r.n_rot, ReadInt(f, p + ".rope.dimension_count_swa", hk_swa));
  if (r.n_rot <= 0 || r.n_rot > hk_swa || r.n_rot % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": rope.dimension_count_swa = ", r.n_rot, " must be even and in [2, ", hk_swa,
        "]"));
  }
  ASSIGN_OR_RETURN(const double base, ReadFloat(f, p + ".rope.freq_base_swa", hp->rope.freq_base));
  if (base <= 1.0) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.path(), ": rope.freq_base_swa = ", base, " must be > 1"));
  }
  r.freq_base = static_cast<float>(base);
  hp->has_rope_swa = true;
  return absl::OkStatus();
}

// rope.dimension_sections: four section sizes in rotary pairs.
absl::Status ParseRopeSections(const GgufFile& f, const std::string& p, HyperParams* hp) {
  const std::string key = p + ".rope.dimension_sections";
  const GgufValue* v = f.Find(key);
  if (v == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.path(), ": missing hyper-parameter '", key, "'"));
  }
  std::vector<int64_t> vals = v->ints();
  for (uint64_t u : v->uints()) vals.push_back(static_cast<int64_t>(u));
  if (v->type() != GgufValueType::kArray || vals.empty() || vals.size() > 4) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.path(), ": key '", key, "' must be an array of up to 4 integers"));
  }
  RopeParams& r = hp->rope;
  int64_t sum = 0;
  for (size_t i = 0; i < vals.size(); ++i) {
    if (vals[i] < 0 || vals[i] > 4096) {
      return absl::InvalidArgumentError(
          absl::StrCat(f.path(), ": key '", key, "' has a section of ", vals[i], " pairs"));
    }
    r.sections[i] = static_cast<int>(vals[i]);
    sum += vals[i];
  }
  if (r.sections[0] + r.sections[1] + r.sections[2] == 0 || sum > hp->head_dim_k) {
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": key '", key, "' sections sum to ", sum, " pairs; need 1 .. ",
        hp->head_dim_k, " with a time, height or width section"));
  }
  r.multi_section = true;
  return absl::OkStatus();
}

// The vocabulary size as llama.cpp's hyper-parameter loaders see it before
// the tensors: `{prefix}.vocab_size`, else the tokenizer's token count, else 0.
absl::StatusOr<int64_t> VocabSizeKey(const GgufFile& f, const std::string& p) {
  if (f.Find(p + ".vocab_size") != nullptr) return ReadInt(f, p + ".vocab_size", std::nullopt);
  const GgufValue* tokens = f.Find("tokenizer.ggml.tokens");
  if (tokens == nullptr || tokens->type() != GgufValueType::kArray) return 0;
  return static_cast<int64_t>(tokens->size());
}

// The router's optional keys (RouterSpec): llama.cpp's expert_gating_func,
// expert_weights_scale, expert_group_count / expert_group_used_count.
absl::Status ParseRouterKeys(const GgufFile& f, const std::string& p, const RouterSpec& spec,
                             HyperParams* hp) {
  if (spec.gating_func_key) {
    ASSIGN_OR_RETURN(const int64_t gating, ReadInt(f, p + ".expert_gating_func", 0));
    switch (gating) {
      case 0:  // absent / none: the description's scoring, or an inferred one
        for (const RouterSpec::InferredGating& g : spec.inferred) {
          if (std::find(g.trunk_layers.begin(), g.trunk_layers.end(), hp->n_layer) ==
              g.trunk_layers.end()) {
            continue;
          }
          ASSIGN_OR_RETURN(const int64_t n_vocab, VocabSizeKey(f, p));
          if (n_vocab == g.n_vocab) hp->router_scoring = g.scoring;
        }
        break;
      case 1: hp->router_scoring = RouterSpec::Scoring::kSoftmax; break;
      case 2: hp->router_scoring = RouterSpec::Scoring::kSigmoid; break;
      case 3: hp->router_scoring = RouterSpec::Scoring::kSoftmaxSelected; break;
      default:
        return absl::InvalidArgumentError(absl::StrCat(
            f.path(), ": expert_gating_func = ", gating,
            " is not supported (1 softmax, 2 sigmoid, 3 softmax of the selected)"));
    }
  }
  if (spec.weights_scale_key) {
    ASSIGN_OR_RETURN(const double scale, ReadFloat(f, p + ".expert_weights_scale", 0.0));
    if (scale < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(f.path(), ": expert_weights_scale = ", scale, " is negative"));
    }
    hp->expert_weights_scale = scale == 0.0 ? 1.0f : static_cast<float>(scale);
  }
  if (!spec.expert_groups) return absl::OkStatus();
  ASSIGN_OR_RETURN(hp->n_expert_groups, ReadInt(f, p + ".expert_group_count", 0));
  ASSIGN_OR_RETURN(hp->n_group_used, ReadInt(f, p + ".expert_group_used_count", 0));
  if (hp->n_expert_groups > 1) {
    const int64_t per_group = hp->n_expert / hp->n_expert_groups;
    if (hp->n_expert % hp->n_expert_groups != 0 || per_group < 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          f.path(), ": expert_group_count ", hp->n_expert_groups, " must divide expert_count ",
          hp->n_expert, " into groups of at least 2"));
    }
    if (hp->n_group_used < 1 || hp->n_group_used >= hp->n_expert_groups ||
        hp->n_group_used * per_group < hp->n_expert_used) {
      return absl::InvalidArgumentError(absl::StrCat(
          f.path(), ": expert_group_used_count ", hp->n_group_used, " must be in [1, ",
          hp->n_expert_groups - 1, "] and its groups hold expert_used_count ",
          hp->n_expert_used, " experts"));
    }
  } else if (hp->n_expert_groups < 0) {
    return Positive(f, "expert_group_count", hp->n_expert_groups);
  }
  return absl::OkStatus();
}

// Multi-head latent attention's sizes (MixerKind::kMla); after
// ParseAttention and ParseRope.
absl::Status ParseMla(const GgufFile& f, const std::string& p, HyperParams* hp) {
  if (f.Find(p + ".attention.key_length_mla") == nullptr ||
      f.FindTensor("blk.0.attn_kv_b.weight") != nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": ", hp->arch, " without attention.key_length_mla / attn_k_b + attn_v_b (the "
        "older fused attn_kv_b layout) is not supported; convert the model with a current "
        "llama.cpp convert_hf_to_gguf.py"));
  }
  ASSIGN_OR_RETURN(hp->q_lora_rank, ReadInt(f, p + ".attention.q_lora_rank", 0));
  if (hp->q_lora_rank < 0) return Positive(f, "attention.q_lora_rank", hp->q_lora_rank);
  ASSIGN_OR_RETURN(hp->kv_lora_rank, ReadInt(f, p + ".attention.kv_lora_rank", std::nullopt));
  RETURN_IF_ERROR(Positive(f, "attention.kv_lora_rank", hp->kv_lora_rank, 65536));
  ASSIGN_OR_RETURN(hp->head_dim_k_mla, ReadInt(f, p + ".attention.key_length_mla", std::nullopt));
  RETURN_IF_ERROR(Positive(f, "attention.key_length_mla", hp->head_dim_k_mla, 65536));
  ASSIGN_OR_RETURN(hp->head_dim_v_mla,
                   ReadInt(f, p + ".attention.value_length_mla", std::nullopt));
  RETURN_IF_ERROR(Positive(f, "attention.value_length_mla", hp->head_dim_v_mla, 65536));
  const int64_t n_rot = hp->rope.n_rot;
  if (hp->head_dim_k_mla <= n_rot) {
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": attention.key_length_mla ", hp->head_dim_k_mla,
        " leaves no non-rotary part beside rope.dimension_count ", n_rot));
  }
  // The cache's view (llama.cpp's MQA form): one KV head of latent + rope.
  if (hp->n_head_kv != 1 || hp->head_dim_k != hp->kv_lora_rank + n_rot ||
      hp->head_dim_v != hp->kv_lora_rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": MLA needs attention.head_count_kv 1 (is ", hp->n_head_kv,
        "), key_length = kv_lora_rank + rope.dimension_count = ", hp->kv_lora_rank + n_rot,
        " (is ", hp->head_dim_k, ") and value_length = kv_lora_rank = ", hp->kv_lora_rank,
        " (is ", hp->head_dim_v, ")"));
  }
  return absl::OkStatus();
}

// ArchDescription::leading_dense_layers; after ParseExperts.
absl::Status ParseLeadingDense(const GgufFile& f, const std::string& p, HyperParams* hp) {
  ASSIGN_OR_RETURN(hp->n_dense_lead, ReadInt(f, p + ".leading_dense_block_count", 0));
  if (hp->n_dense_lead < 0 || hp->n_dense_lead > hp->n_layer) {
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": leading_dense_block_count = ", hp->n_dense_lead, " out of range [0, ",
        hp->n_layer, "]"));
  }
  if (hp->n_dense_lead > 0) RETURN_IF_ERROR(Positive(f, "feed_forward_length", hp->n_ff));
  return absl::OkStatus();
}

// ArchDescription::shared_expert_count (llama.cpp: the shared experts are
// one FFN of n_ff_exp x expert_shared_count); after ParseExperts.
absl::Status ParseSharedExpertCount(const GgufFile& f, const std::string& p, HyperParams* hp) {
  ASSIGN_OR_RETURN(const int64_t n_shared, ReadInt(f, p + ".expert_shared_count", std::nullopt));
  RETURN_IF_ERROR(Positive(f, "expert_shared_count", n_shared, 1024));
  hp->n_ff_shexp = hp->n_ff_exp * n_shared;
  return absl::OkStatus();
}

}  // namespace

float YarnAttnFactor(float freq_scale, float yarn_log_mul, float attn_factor) {
  // llama.cpp (llama_context): yarn_attn_factor = get_mscale(factor) times
  // 1 / (1 + 0.1 ln factor), which cancels the factor ggml's rope_yarn
  // applies (ComputeRopeAngles does too) -- computed the same way, in
  // float, so the product rounds as there.
  const float f = 1.0f / freq_scale;
  auto get_mscale = [](float scale, float m) {
    return scale <= 1.0f ? 1.0f : 0.1f * m * std::log(scale) + 1.0f;
  };
  float a = get_mscale(f, 1.0f);
  if (yarn_log_mul != 0.0f) {
    // With yarn_log_multiplier (deepseek2's mscale_all_dim): mscale is
    // assumed 1, except that deepseek2 takes mscale = mscale_all_dim when
    // that is not 1 ([TAG_DEEPSEEK2_YARN_LOG_MUL_FIX]).
    const float m = yarn_log_mul != 1.0f ? yarn_log_mul : 1.0f;
    a = get_mscale(f, m) / get_mscale(f, yarn_log_mul);
  }
  a *= 1.0f / (1.0f + 0.1f * std::log(f));
  return a * attn_factor;
}

std::string_view MixerKindName(MixerKind kind) {
  switch (kind) {
    case MixerKind::kAttention: return "attention";
    case MixerKind::kGatedAttention: return "gated_attention";
    case MixerKind::kGatedDeltaNet: return "gated_deltanet";
    case MixerKind::kMla: return "mla";
    case MixerKind::kMamba2: return "mamba2";
    case MixerKind::kNone: return "none";
  }
  return "?";
}

std::string_view FfnKindName(FfnKind kind) {
  switch (kind) {
    case FfnKind::kMoe: return "moe";
    case FfnKind::kDense: return "dense";
    case FfnKind::kNone: return "none";
  }
  return "?";
}

std::vector<LayerSpec> LayerSpecs(const ArchDescription& arch, int64_t n_layer,
                                  int64_t full_attention_interval) {
  std::vector<LayerSpec> layers(std::max<int64_t>(n_layer, 0),
                                LayerSpec{arch.attention, FfnKind::kMoe});
  if (arch.pattern == LayerPattern::kFullAttentionInterval) {
    for (int64_t il = 0; il < n_layer; ++il) {
      if ((il + 1) % full_attention_interval != 0) layers[il].mixer = MixerKind::kGatedDeltaNet;
    }
  }
  return layers;
}

bool LayerSelected(LayerSel sel, const LayerSpec& spec) {
  switch (sel) {
    case LayerSel::kAll: return true;
    case LayerSel::kAttention: return IsAttention(spec.mixer);
    case LayerSel::kDeltaNet: return spec.mixer == MixerKind::kGatedDeltaNet;
    case LayerSel::kMoe: return spec.ffn == FfnKind::kMoe;
    case LayerSel::kDenseFfn: return spec.ffn == FfnKind::kDense;
    case LayerSel::kMamba2: return spec.mixer == MixerKind::kMamba2;
    case LayerSel::kMixer: return spec.mixer != MixerKind::kNone;
    case LayerSel::kFfnOnly: return spec.mixer == MixerKind::kNone;
  }
  return false;
}

int HyperParams::n_attention_layers() const {
  int n = 0;
  for (const LayerSpec& l : layers) n += IsAttention(l.mixer);
  return n;
}

int HyperParams::n_recurrent_layers() const {
  int n = 0;
  for (const LayerSpec& l : layers) n += IsRecurrent(l.mixer);
  return n;
}

int HyperParams::n_moe_layers() const {
  int n = 0;
  for (const LayerSpec& l : layers) n += l.ffn == FfnKind::kMoe;
  return n;
}

bool HyperParams::per_layer_geometry() const {
  for (const LayerSpec& l : layers) {
    if (l.n_head_kv > 0 || l.head_dim_k > 0 || l.head_dim_v > 0) return true;
  }
  return has_rope_swa;
}

float HyperParams::attn_scale() const {
  if (unit_attention_scale) return 1.0f;
  if (layers.empty() || layers[0].mixer != MixerKind::kMla) {
    return 1.0f / std::sqrt(static_cast<float>(head_dim_k));
  }
  // llama.cpp's deepseek2 graph: undo the rope attn_factor's 1 / (1 + 0.1
  // ln(1/freq_scale)), then mscale = that * (1 + 0.1 log_mul ln(1/freq_scale)).
  const float f = std::log(1.0f / rope.freq_scale);
  const float attn_factor_org = rope.attn_factor * (1.0f + 0.1f * f);
  const float mscale = attn_factor_org * (1.0f + 0.1f * rope.yarn_log_mul * f);
  return 1.0f * mscale * mscale / std::sqrt(static_cast<float>(head_dim_k_mla));
}

std::string ExpertFfnName(const ExpertFfnSpec& ffn) {
  switch (ffn.activation) {
    case ExpertActivation::kSwiGlu: return "swiglu";
    case ExpertActivation::kSwiGluOai:
      return absl::StrCat("swiglu_oai(alpha=", ffn.alpha, ",limit=", ffn.limit, ")");
    case ExpertActivation::kReluSq: return "relu_sq";
    case ExpertActivation::kGeGlu: return "geglu";
  }
  return "?";
}

std::string_view TensorRoleName(TensorRole role) {
  switch (role) {
    case TensorRole::kEmbeddings: return "embeddings";
    case TensorRole::kOutput: return "output";
    case TensorRole::kNorm: return "norm";
    case TensorRole::kDense: return "dense";
    case TensorRole::kRouter: return "router";
    case TensorRole::kSharedExpert: return "shared_experts";
    case TensorRole::kRoutedExpert: return "routed_experts";
  }
  return "?";
}

std::string_view RopeScalingName(RopeScaling s) {
  switch (s) {
    case RopeScaling::kNone: return "none";
    case RopeScaling::kLinear: return "linear";
    case RopeScaling::kYarn: return "yarn";
  }
  return "?";
}

const std::vector<TensorSpec>& NextNTensors() {
  static const auto* const kTensors = new std::vector<TensorSpec>(MakeNextNTensors());
  return *kTensors;
}

const ArchDescription* FindArch(std::string_view arch) {
  for (const ArchDescription& d : Registry()) {
    if (d.name == arch) return &d;
  }
  return nullptr;
}

std::string SupportedArchNames() {
  std::vector<std::string> names;
  for (const ArchDescription& d : Registry()) names.emplace_back(d.name);
  return absl::StrJoin(names, ", ");
}

absl::StatusOr<HyperParams> ParseHyperParams(const GgufFile& f,
                                             const ArchDescription& arch) {
  HyperParams hp;
  hp.arch = std::string(arch.name);
  const std::string p(arch.key_prefix);
  ASSIGN_OR_RETURN(hp.n_embd, ReadInt(f, p + ".embedding_length", std::nullopt));
  RETURN_IF_ERROR(Positive(f, "embedding_length", hp.n_embd, int64_t{1} << 20));
  ASSIGN_OR_RETURN(hp.n_layer, ReadInt(f, p + ".block_count", std::nullopt));
  RETURN_IF_ERROR(Positive(f, "block_count", hp.n_layer, 4096));
  // NextN / MTP blocks at the end of block_count are not trunk layers
  // (HyperParams::nextn_layers).
  ASSIGN_OR_RETURN(const int64_t nextn, ReadInt(f, p + ".nextn_predict_layers", 0));
  if (nextn < 0 || nextn >= hp.n_layer) {
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": hyper-parameter 'nextn_predict_layers' = ", nextn,
        " out of range [0, ", hp.n_layer - 1, "] (block_count ", hp.n_layer,
        " counts the trunk and the NextN/MTP blocks after it)"));
  }
  hp.n_layer -= nextn;
  ASSIGN_OR_RETURN(hp.n_ctx_train, ReadInt(f, p + ".context_length", std::nullopt));
  RETURN_IF_ERROR(Positive(f, "context_length", hp.n_ctx_train, int64_t{1} << 30));
  RETURN_IF_ERROR(ParseAttention(f, p, arch, &hp));
  hp.rope.norm_style = arch.rope_norm;
  if (arch.rope_yarn_log_multiplier) {
    ASSIGN_OR_RETURN(const double log_mul,
                     ReadFloat(f, p + ".rope.scaling.yarn_log_multiplier", 0.0));
    // llama.cpp cancels the 0.1 its convert script multiplied in.
    hp.rope.yarn_log_mul = static_cast<float>(log_mul) / 0.1f;
  }
  if (arch.rope) RETURN_IF_ERROR(ParseRope(f, p, &hp));
  if (arch.multi_section_rope) RETURN_IF_ERROR(ParseRopeSections(f, p, &hp));
  RETURN_IF_ERROR(ParseExperts(f, p, arch, &hp));
  hp.router_scoring = arch.router.scoring;
  RETURN_IF_ERROR(ParseRouterKeys(f, p, arch.router, &hp));
  if (arch.attention == MixerKind::kMla) RETURN_IF_ERROR(ParseMla(f, p, &hp));
  if (arch.leading_dense_layers) RETURN_IF_ERROR(ParseLeadingDense(f, p, &hp));
  if (arch.shared_expert_count) RETURN_IF_ERROR(ParseSharedExpertCount(f, p, &hp));
  if (arch.moe_latent) {
    ASSIGN_OR_RETURN(hp.moe_latent, ReadInt(f, p + ".moe_latent_size", 0));
    if (hp.moe_latent < 0 || hp.moe_latent > hp.n_embd) {
      return absl::InvalidArgumentError(absl::StrCat(
          f.path(), ": moe_latent_size = ", hp.moe_latent, " out of range [0, ", hp.n_embd, "]"));
    }
  }
  hp.nextn_layers.resize(nextn);
  RETURN_IF_ERROR(ParseLayers(f, p, arch, &hp));
  hp.expert_ffn = arch.expert_ffn;
  hp.dense_activation = arch.dense_activation;
  hp.embed_scale_sqrt_d = arch.embed_scale_sqrt_d;
  hp.v_rms_norm = arch.v_rms_norm;
  hp.unit_attention_scale = arch.unit_attention_scale;
  ASSIGN_OR_RETURN(const double softcap, ReadFloat(f, p + ".final_logit_softcapping", 0.0));
  if (softcap < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.path(), ": final_logit_softcapping = ", softcap, " is negative"));
  }
  hp.final_logit_softcap = static_cast<float>(softcap);
  hp.qk_norm_whole = arch.qk_norm_whole;
  hp.ssm_grouped_heads = arch.ssm_grouped_heads;
  return hp;
}

int64_t ResolveDim(const HyperParams& hp, Dim dim, int layer) {
  const bool own = layer >= 0 && layer < static_cast<int>(hp.layers.size());
  const int64_t kv = own ? hp.kv_heads(layer) : hp.n_head_kv;
  const int64_t hk = own ? hp.head_k(layer) : hp.head_dim_k;
  const int64_t hv = own ? hp.head_v(layer) : hp.head_dim_v;
  switch (dim) {
    case Dim::kOne: return 1;
    case Dim::kEmbd: return hp.n_embd;
    case Dim::kEmbd2: return 2 * hp.n_embd;
    case Dim::kQ: return hp.n_head * hk;
    case Dim::kK: return kv * hk;
    case Dim::kV: return kv * hv;
    case Dim::kAttnOut: return hp.n_head * hv;
    case Dim::kHeadK: return hk;
    case Dim::kHead: return hp.n_head;
    case Dim::kExpert: return hp.n_expert;
    case Dim::kFfExp: return hp.n_ff_exp;
    case Dim::kFfShexp: return hp.n_ff_shexp;
    case Dim::kVocab: return hp.n_vocab;
    case Dim::kQGated: return 2 * hp.n_head * hp.head_dim_k;
    case Dim::kSsmConvDim: return hp.ssm_conv_channels();
    case Dim::kSsmInner: return hp.ssm_inner();
    case Dim::kSsmVHeads: return hp.ssm_n_v_heads;
    case Dim::kSsmHeadV: return hp.ssm_head_v;
    case Dim::kSsmKernel: return hp.ssm_conv_kernel;
    case Dim::kQLora: return hp.q_lora_rank;
    case Dim::kKvLora: return hp.kv_lora_rank;
    case Dim::kKvAMqa: return hp.kv_lora_rank + hp.rope.n_rot;
    case Dim::kQMla: return hp.n_head * hp.head_dim_k_mla;
    case Dim::kNope: return hp.head_dim_k_mla - hp.rope.n_rot;
    case Dim::kHeadVMla: return hp.head_dim_v_mla;
    case Dim::kAttnOutMla: return hp.n_head * hp.head_dim_v_mla;
    case Dim::kFf: return hp.n_ff;
    case Dim::kSsmBa: return 2 * hp.ssm_n_v_heads;
    case Dim::kSsmQkvz: return hp.ssm_conv_channels() + hp.ssm_inner();
    case Dim::kSsmInMamba2: return hp.ssm_inner() + hp.ssm_conv_channels() + hp.ssm_n_v_heads;
    case Dim::kSsmNormGroup: return hp.ssm_inner() / std::max<int64_t>(hp.ssm_n_k_heads, 1);
    case Dim::kSsmGroups: return hp.ssm_n_k_heads;
    case Dim::kEmbdExperts: return hp.n_embd_experts();
    case Dim::kFfExp2: return 2 * hp.n_ff_exp;
    case Dim::kRopePairs: return hp.rope.n_rot / 2;
  }
  return 0;
}

bool IsLayerTensor(TensorId id) { return static_cast<int>(id) >= kFirstLayerTensor; }

std::string TensorName(const TensorSpec& spec, int layer) {
  if (!IsLayerTensor(spec.id)) return std::string(spec.name);
  return absl::StrCat("blk.", layer, ".", internal::Sv(spec.name));
}

}  // namespace moesplit::model
