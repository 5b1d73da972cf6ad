// Architecture descriptions: what a GGUF model of a given `general.architecture`
// contains and how its hyper-parameters are read, as data.
//
// An ArchDescription lists
//   1. the metadata key prefix ("qwen3moe" -> "qwen3moe.embedding_length"),
//   2. the global tensors (embeddings, output norm, output head) and the
//      per-layer tensors, each with its GGUF name, its role (dense / router /
//      shared expert / routed expert / embeddings / output / norm), its shape
//      in terms of hyper-parameters (ggml order, ne[0] innermost), whether it
//      is required, and which layers it belongs to (every layer, or only the
//      layers of one mixer or FFN kind: LayerSel),
//   3. the layer pattern: which mixer each layer has (every layer the same,
//      or gated DeltaNet with a full-attention layer every
//      `{prefix}.full_attention_interval` layers),
//   4. the router (RouterSpec: softmax over all experts, top-k; whether the
//      selected weights are renormalised by default — the metadata key
//      `{prefix}.expert_weights_norm` overrides it).
// The parsed hyper-parameters carry one LayerSpec per layer (mixer, FFN);
// everything downstream (forward passes, sequence state, memory planner,
// engine, workers) reads those specs instead of assuming one layer kind.
// Adding an architecture means a description here plus the kernels of any
// mixer it introduces.
//
// Hyper-parameters (all under the prefix):
//   embedding_length, block_count, context_length, attention.head_count,
//   attention.head_count_kv (default head_count), attention.key_length /
//   attention.value_length (default embedding_length / head_count),
//   attention.layer_norm_rms_epsilon, rope.freq_base (default 10000),
//   rope.dimension_count (default key_length), rope.dimension_sections
//   (multi-section RoPE, qwen35moe), rope.scaling.type
//   ("none" | "linear" | "yarn"; default none, or linear when a factor is
//   given), rope.scaling.factor (freq_scale = 1/factor),
//   rope.scaling.original_context_length (default context_length),
//   rope.scaling.yarn_ext_factor / yarn_beta_fast / yarn_beta_slow /
//   attn_factor (ggml defaults), expert_count, expert_used_count,
//   expert_feed_forward_length (default feed_forward_length/expert_used_count),
//   expert_shared_feed_forward_length (default feed_forward_length),
//   feed_forward_length (optional), expert_weights_norm (optional);
//   gated DeltaNet layers: ssm.conv_kernel, ssm.state_size (key head size),
//   ssm.group_count (key heads), ssm.time_step_rank (value heads),
//   ssm.inner_size (value heads x value head size), full_attention_interval
//   (default 4); sliding-window architectures: attention.sliding_window,
//   attention.sliding_window_pattern (default 2; or a per-layer bool array,
//   true = sliding); final_logit_softcapping (default 0: none);
//   ArchDescription::swa_own_geometry: attention.key_length_swa,
//   value_length_swa, rope.freq_base_swa, rope.dimension_count_swa,
//   attention.shared_kv_layers (must be 0), embedding_length_per_layer_input
//   (must be 0).
//   nextn_predict_layers (default 0): NextN / MTP blocks counted in
//   block_count after the trunk (see HyperParams::nextn_layers);
//   LayerPattern::kPerLayerKinds: attention.head_count_kv and
//   feed_forward_length as per-layer arrays (0 where the layer has no
//   attention / no FFN; the non-zero entries equal), moe_latent_size
//   (ArchDescription::moe_latent; default 0).
// Other integer keys may also be arrays with one equal value per layer.
//
// Thread-safe: descriptions are immutable; parsing functions are pure.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/gguf/gguf.h"
#include "common/model/tensor_table.h"

namespace moesplit::model {

enum class TensorRole {
  kEmbeddings,
  kOutput,
  kNorm,           // RMSNorm weights (attention, FFN, output, QK-norm)
  kDense,          // attention projections and their biases
  kRouter,         // ffn_gate_inp
  kSharedExpert,   // shared expert FFN and its sigmoid gate
  kRoutedExpert,   // 3-D expert tensors
};
std::string_view TensorRoleName(TensorRole role);
inline constexpr int kTensorRoleCount = 7;

// TensorId, kTensorIdCount, kFirstLayerTensor: common/model/tensor_table.h.

// Symbolic dimensions resolved against HyperParams.
enum class Dim {
  kOne,
  kEmbd,       // n_embd
  kEmbd2,      // 2 * n_embd (a NextN block's eh_proj input)
  kQ,          // n_head * head_dim_k
  kQGated,     // 2 * n_head * head_dim_k (query and gate per head)
  kK,          // n_head_kv * head_dim_k
  kV,          // n_head_kv * head_dim_v
  kAttnOut,    // n_head * head_dim_v
  kHeadK,      // head_dim_k
  kHead,       // n_head
  kExpert,     // n_expert
  kFfExp,      // n_ff_exp
  kFfShexp,    // n_ff_shexp
  kVocab,      // n_vocab (taken from token_embd)
  kSsmConvDim, // 2 * ssm key heads * key head size + ssm.inner_size
  kSsmInner,   // ssm.inner_size (value heads x value head size)
  kSsmVHeads,  // ssm value heads
  kSsmHeadV,   // ssm value head size
  kSsmKernel,  // ssm.conv_kernel
  // MLA (deepseek2):
  kQLora,      // q_lora_rank
  kKvLora,     // kv_lora_rank
  kKvAMqa,     // kv_lora_rank + n_rot
  kQMla,       // n_head * head_dim_k_mla (nope + rope per head)
  kNope,       // head_dim_k_mla - n_rot
  kHeadVMla,   // head_dim_v_mla
  kAttnOutMla, // n_head * head_dim_v_mla
  kFf,         // feed_forward_length (dense FFN)
  kSsmBa,      // 2 * ssm value heads (qwen3next's fused ssm_ba: beta and alpha)
  kSsmQkvz,    // ssm_conv_channels + ssm.inner_size (the legacy fused ssm_in: q, k, v and z)
  // Mamba-2 (nemotron_h_moe):
  kSsmInMamba2,   // 2 * ssm.inner_size + 2 * groups * state + heads: [z | xBC | dt]
  kSsmNormGroup,  // ssm.inner_size / ssm.group_count (one RMSNorm group)
  kSsmGroups,     // ssm.group_count
  kEmbdExperts,   // the routed experts' width: moe_latent_size (LatentMoE), else n_embd
  kFfExp2,     // 2 * n_ff_exp (fused gate and up experts)
  kRopePairs,  // rope.n_rot / 2 of the full-attention layers (rope_freqs)
};

// The layers a per-layer tensor belongs to.
enum class LayerSel {
  kAll,
  kAttention,  // full (softmax) attention mixers, gated or not
  kDeltaNet,   // gated DeltaNet mixers
  kMoe,        // routed-MoE FFNs
  kDenseFfn,   // dense SwiGLU FFNs
  kMamba2,     // Mamba-2 mixers
  kMixer,      // layers with a mixer (MixerKind::kNone excluded)
  kFfnOnly,    // layers without a mixer (an FFN alone)
};

struct TensorSpec {
  TensorId id;
  // Global: the full name ("token_embd.weight"). Per layer: the name after
  // "blk.<i>." ("attn_q.weight").
  std::string_view name;
  TensorRole role;
  int n_dims;                 // 1..3
  std::array<Dim, 3> shape;   // ggml order; entries past n_dims unused
  bool required;
  LayerSel layers = LayerSel::kAll;
};

// A layer's token mixer.
enum class MixerKind {
  kAttention,       // GQA softmax attention with a KV cache
  kGatedAttention,  // the same, output scaled by sigmoid(gate) from a doubled q projection
  kGatedDeltaNet,   // linear attention with a fixed-size conv + recurrent state
  // Multi-head latent attention (deepseek2), in llama.cpp's absorbed form:
  // one KV "head" per position holding the normed latent (kv_lora_rank)
  // and the roped key part (n_rot), head_dim_k = kv_lora + n_rot; the value
  // is the latent itself (head_dim_v = kv_lora_rank), so the cache keeps
  // only K (SequenceState). Each query head's nope part is absorbed through
  // attn_k_b, its output through attn_v_b.
  kMla,
  // Mamba-2 (nemotron_h_moe), llama.cpp's build_mamba2_layer: in-projection
  // to [z | xBC | dt]; causal depthwise conv (+ bias) and SiLU over xBC;
  // dt = softplus(dt + dt_bias); per head h a scalar A (ssm_a) and the
  // selective scan over a head_dim x d_state state, heads sharing a B/C
  // group consecutively (ssm_key_head); y += D x; y *= SiLU(z); RMSNorm in
  // groups of d_inner / groups; out-projection. A fixed-size conv +
  // recurrent state, as kGatedDeltaNet.
  kMamba2,
  // No mixer: the layer is its FFN alone (nemotron_h_moe's MoE layers),
  // normed by its one norm (ffn_norm in the tensor table).
  kNone,
};
std::string_view MixerKindName(MixerKind kind);
inline bool IsAttention(MixerKind k) {
  return k == MixerKind::kAttention || k == MixerKind::kGatedAttention || k == MixerKind::kMla;
}
// A mixer with a fixed-size conv + recurrent state (SequenceState).
inline bool IsRecurrent(MixerKind k) {
  return k == MixerKind::kGatedDeltaNet || k == MixerKind::kMamba2;
}

// A layer's feed-forward block.
enum class FfnKind {
  kMoe,    // routed experts (computed by the expert backend), plus the shared expert when present
  kDense,  // a dense SwiGLU FFN (ffn_gate/up/down); no routed experts, no expert call
  kNone,   // no FFN: the layer is its mixer alone (nemotron_h_moe's Mamba-2 / attention layers)
};
std::string_view FfnKindName(FfnKind kind);

struct LayerSpec {
  MixerKind mixer = MixerKind::kAttention;
  FfnKind ffn = FfnKind::kMoe;
  // Attention mixers: 0 attends to every earlier position; W > 0 to the last
  // W positions only (the token itself and W - 1 before it), llama.cpp's
  // LLAMA_SWA_TYPE_STANDARD.
  int64_t sliding_window = 0;
  // A NextN / MTP block (HyperParams::nextn_layers): loaded and kept aside,
  // never run as a trunk layer.
  bool nextn = false;
  // Attention geometry of this layer where it differs from HyperParams'
  // (0: theirs; read them through HyperParams::kv_heads(il) and so on).
  int64_t n_head_kv = 0;
  int64_t head_dim_k = 0;
  int64_t head_dim_v = 0;
};

// Which mixer each layer has.
enum class LayerPattern {
  kUniform,                // every layer has ArchDescription::attention
  kFullAttentionInterval,  // layer i is `attention` when (i + 1) % interval == 0, else gated DeltaNet
  // Per layer from `{prefix}.attention.head_count_kv[i]` and
  // `{prefix}.feed_forward_length[i]` (llama.cpp's nemotron_h): both 0 =
  // ArchDescription::recurrent mixer alone, only the FFN length 0 =
  // `attention` alone, else a routed-MoE FFN alone (MixerKind::kNone).
  kPerLayerKinds,
};

// How the router turns its logits (plus ffn_gate_inp.bias when the model has
// it) into the chosen experts and their weights.
struct RouterSpec {
  enum class Scoring {
    kSoftmax,          // softmax over all experts, then top-k
    kSoftmaxSelected,  // top-k of the logits, then softmax over those k (gpt-oss)
    kSigmoid,          // sigmoid of each logit, then top-k (DeepSeek-V3)
  };
  Scoring scoring = Scoring::kSoftmax;
  bool default_norm_topk = false;   // renormalise the selected weights to sum 1
  // `{prefix}.expert_gating_func` (1 softmax, 2 sigmoid, 3 softmax of the
  // selected; absent or 0: `scoring`, or `inferred` below) chooses the
  // scoring.
  bool gating_func_key = false;
  // `{prefix}.expert_weights_scale` (absent or 0: 1) multiplies the weights.
  bool weights_scale_key = false;
  // `{prefix}.expert_group_count` / `expert_group_used_count` restrict the
  // choice to the best groups (HyperParams::n_expert_groups).
  bool expert_groups = false;
  // Files that omit expert_gating_func but whose trunk has one of
  // `trunk_layers` layers and whose vocabulary (`{prefix}.vocab_size`, else
  // the tokenizer's token count) is `n_vocab` are scored `scoring` (llama.cpp
  // infers sigmoid so for GLM-4.7-Flash stored as deepseek2: 47 or 48 trunk
  // layers, 154880 tokens).
  struct InferredGating {
    std::vector<int64_t> trunk_layers;
    int64_t n_vocab = 0;
    Scoring scoring = Scoring::kSoftmax;
  };
  std::vector<InferredGating> inferred{};
};

// The routed experts' FFN: E(h) = W_down . act(W_gate . h + b_gate, W_up . h + b_up) + b_down
// (the biases only where the model has them).
enum class ExpertActivation {
  kSwiGlu,     // SiLU(g) * u
  kSwiGluOai,  // gpt-oss: min(g, L) * sigmoid(alpha * min(g, L)) * (clamp(u, -L, L) + 1)
  // Non-gated: relu(u)^2, no gate tensor (nemotron_h_moe's LLM_FFN_RELU_SQR);
  // the shared expert too.
  kReluSq,
  // GELU(g) * u, GELU's tanh form as ggml's CPU backend evaluates it: from
  // a table over f16 (g rounded to f16, the result rounded to f16), 0 for
  // g <= -10 and g for g >= 10.
  kGeGlu,
};
// Whether the activation reads a gate projection (ffn_gate_exps / _shexp).
inline bool IsGated(ExpertActivation a) { return a != ExpertActivation::kReluSq; }
struct ExpertFfnSpec {
  ExpertActivation activation = ExpertActivation::kSwiGlu;
  float alpha = 1.702f;  // kSwiGluOai only
  float limit = 7.0f;    // kSwiGluOai only
};
// "swiglu", "swiglu_oai(alpha=1.702,limit=7)": what a worker describes and the
// dense side checks at connect time (the biases travel with the weights).
std::string ExpertFfnName(const ExpertFfnSpec& ffn);

struct ArchDescription {
  std::string_view name;        // general.architecture
  std::string_view key_prefix;  // metadata prefix
  RouterSpec router;
  LayerPattern pattern = LayerPattern::kUniform;
  MixerKind attention = MixerKind::kAttention;  // the kind of the full-attention layers
  // LayerPattern::kPerLayerKinds: the kind of the recurrent layers.
  MixerKind recurrent = MixerKind::kGatedDeltaNet;
  // Sliding-window attention on some layers: `{prefix}.attention.sliding_window`
  // positions on layer i when i % period < period - 1, with the period from
  // `{prefix}.attention.sliding_window_pattern` (default 2: the even layers).
  bool sliding_window = false;
  ExpertFfnSpec expert_ffn{};
  bool multi_section_rope = false;  // rope.dimension_sections required (RopeParams)
  // RoPE pairs: NEOX (i, i + n_rot/2) or NORM, adjacent (2i, 2i + 1).
  bool rope_norm = false;
  // Layers below `{prefix}.leading_dense_block_count` have a dense SwiGLU
  // FFN (feed_forward_length) instead of routed experts.
  bool leading_dense_layers = false;
  // The shared expert is `{prefix}.expert_shared_count` experts fused:
  // n_ff_shexp = expert_shared_count x expert_feed_forward_length.
  bool shared_expert_count = false;
  // `{prefix}.rope.scaling.yarn_log_multiplier` is read (YaRN's
  // attention-scale correction, RopeParams::yarn_log_mul).
  bool rope_yarn_log_multiplier = false;
  // QK-norm is ONE RMSNorm over the whole q projection (attn_q_norm of
  // n_head x head_dim_k weights) and one over the whole k projection
  // (n_head_kv x head_dim_k), before the split into heads (minimax-m2),
  // instead of one per head (head_dim_k weights).
  bool qk_norm_whole = false;
  // Gated DeltaNet: value head h reads key head h / (value heads / key
  // heads), its group's (qwen3next's repeat-interleave), instead of key head
  // h % key heads (qwen35moe's broadcast).
  bool ssm_grouped_heads = false;
  // Attention applies RoPE (false: none, whatever rope.* keys the file
  // has; RopeParams::n_rot is then 0).
  bool rope = true;
  // `{prefix}.moe_latent_size` is read (LatentMoE: HyperParams::moe_latent).
  bool moe_latent = false;
  // Sliding-window layers have their own geometry: head sizes
  // `{prefix}.attention.key_length_swa` / `value_length_swa` and RoPE
  // `rope.freq_base_swa` / `rope.dimension_count_swa`
  // (HyperParams::rope_swa); the full-attention layers rotate with the
  // optional global `rope_freqs.weight` divisors. `attention.head_count_kv`
  // may then differ per layer (an array).
  bool swa_own_geometry = false;
  // The attention logits are q . k unscaled (the Q/K norms set the scale).
  bool unit_attention_scale = false;
  // V is RMS-normed (no weight) per head before the cache; a layer without
  // attn_v takes V from the raw K projection (before k_norm and RoPE).
  bool v_rms_norm = false;
  // The embeddings are multiplied by sqrt(n_embd).
  bool embed_scale_sqrt_d = false;
  // The dense FFN's activation (a layer's ffn_gate/up/down: leading dense
  // layers, or the dense MLP beside the routed experts).
  ExpertActivation dense_activation = ExpertActivation::kSwiGlu;
  // An `attention` of MixerKind::kMla reads the MLA sizes:
  // attention.q_lora_rank (0 / absent: a direct attn_q), kv_lora_rank,
  // key_length_mla, value_length_mla.
  // The shared expert output is scaled by sigmoid(ffn_gate_inp_shexp . h)
  // when that tensor is present.
  std::vector<TensorSpec> tensors;  // global then per layer
};

// The tensors of a NextN / MTP block besides its mixer and FFN (which are
// the description's, for the block's LayerSpec), the same in every
// architecture (llama.cpp's LLM_TENSOR_NEXTN_*): eh_proj, enorm, hnorm and
// the optional shared_head_norm, embed_tokens, shared_head_head.
const std::vector<TensorSpec>& NextNTensors();

// The tensors of a NextN / MTP block besides its mixer and FFN (which are
// the description's, for the block's LayerSpec), the same in every
// architecture (llama.cpp's LLM_TENSOR_NEXTN_*): eh_proj, enorm, hnorm and
// the optional shared_head_norm, embed_tokens, shared_head_head.
const std::vector<TensorSpec>& NextNTensors();

// The description of `arch`, or nullptr.
const ArchDescription* FindArch(std::string_view arch);
// Names of all described architectures ("qwen2moe, qwen3moe, qwen35moe").
std::string SupportedArchNames();

enum class RopeScaling { kNone, kLinear, kYarn };
std::string_view RopeScalingName(RopeScaling s);

// Rotary embeddings, NEOX style: pairs (i, i + n_rot/2) of each head rotate.
struct RopeParams {
  int64_t n_rot = 0;          // rotated dimensions per head (even)
  // Interleaved multi-section RoPE (ggml's IMROPE, Qwen3.5): pair i takes
  // the time, height or width position by i % 3 within the sections, or
  // the extra position (0 for text) past them. Text tokens have equal
  // time, height and width positions, so only pairs that fall on the extra
  // position differ from plain NEOX RoPE: they are not rotated.
  bool multi_section = false;
  std::array<int, 4> sections = {0, 0, 0, 0};
  float freq_base = 10000.0f;
  RopeScaling scaling = RopeScaling::kNone;
  float freq_scale = 1.0f;    // 1 / rope.scaling.factor
  int64_t n_ctx_orig = 0;     // YaRN's original context
  float ext_factor = 0.0f;    // YaRN extrapolation mix (1 for yarn, else 0)
  float attn_factor = 1.0f;
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
  bool norm_style = false;    // NORM (adjacent pairs) instead of NEOX
  // Per rotary pair, a divisor of its angle (ggml's freq_factors; the
  // model's rope_freqs.weight, set by Model::Load); empty: none.
  std::vector<float> freq_factors;
  // deepseek2's rope.scaling.yarn_log_multiplier / 0.1 (llama.cpp's
  // rope_yarn_log_mul; 0 when absent): the attention-scale correction.
  float yarn_log_mul = 0.0f;
};

// YaRN's rope attn_factor (RopeParams::attn_factor when ext_factor != 0):
// llama.cpp's cparams.yarn_attn_factor from 1 / rope.scaling.factor, the
// yarn_log_mul above and rope.scaling.attn_factor.
float YarnAttnFactor(float freq_scale, float yarn_log_mul, float attn_factor);

struct HyperParams {
  std::string arch;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_ctx_train = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim_k = 0;
  int64_t head_dim_v = 0;
  int64_t n_vocab = 0;  // from the token_embd tensor (0 until the model sets it)
  float rms_eps = 1e-6f;
  RopeParams rope;
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff = 0;        // feed_forward_length, 0 when absent
  int64_t n_ff_exp = 0;
  int64_t n_ff_shexp = 0;  // 0 when neither key nor fallback exists
  bool norm_topk = false;  // renormalise the selected expert weights
  RouterSpec::Scoring router_scoring = RouterSpec::Scoring::kSoftmax;
  // Expert groups (0 / 1: none): experts split into n_expert_groups equal
  // groups; only the n_group_used groups with the largest sum of their two
  // best (biased) scores compete for the top-k.
  int64_t n_expert_groups = 0;
  int64_t n_group_used = 0;
  float expert_weights_scale = 1.0f;  // the selected weights' factor (after any norm)
  ExpertFfnSpec expert_ffn;
  // The dense FFNs' activation (ArchDescription::dense_activation).
  ExpertActivation dense_activation = ExpertActivation::kSwiGlu;
  // `{prefix}.final_logit_softcapping` (0: none): logits = c * tanh(logits / c).
  float final_logit_softcap = 0.0f;
  bool embed_scale_sqrt_d = false;  // ArchDescription::embed_scale_sqrt_d
  bool v_rms_norm = false;          // ArchDescription::v_rms_norm
  bool unit_attention_scale = false;
  // ArchDescription::swa_own_geometry: the sliding-window layers' RoPE.
  bool has_rope_swa = false;
  RopeParams rope_swa;
  // MLA (MixerKind::kMla): head_dim_k = kv_lora_rank + n_rot and head_dim_v
  // = kv_lora_rank (the cache's view); the per-head sizes of the model:
  int64_t q_lora_rank = 0;     // 0: attn_q directly
  int64_t kv_lora_rank = 0;
  int64_t head_dim_k_mla = 0;  // nope + rope per query head
  int64_t head_dim_v_mla = 0;  // value per head after attn_v_b
  int64_t n_dense_lead = 0;    // leading dense-FFN layers
  // LatentMoE (`{prefix}.moe_latent_size`, 0: none): the routed experts work
  // on ffn_latent_down h (moe_latent values) and their sum goes back
  // through ffn_latent_up; the router and the shared expert read h itself.
  int64_t moe_latent = 0;
  // The routed experts' input width: moe_latent, or n_embd.
  int64_t n_embd_experts() const { return moe_latent > 0 ? moe_latent : n_embd; }
  // The attention logit scale: 1/sqrt(head_dim_k), or for MLA llama.cpp's
  // mscale^2 / sqrt(head_dim_k_mla) (YaRN's correction), or 1
  // (unit_attention_scale).
  float attn_scale() const;
  // Layer il's attention geometry (LayerSpec's where it has its own).
  int64_t kv_heads(int il) const {
    return layers[il].n_head_kv > 0 ? layers[il].n_head_kv : n_head_kv;
  }
  int64_t head_k(int il) const { return layers[il].head_dim_k > 0 ? layers[il].head_dim_k : head_dim_k; }
  int64_t head_v(int il) const { return layers[il].head_dim_v > 0 ? layers[il].head_dim_v : head_dim_v; }
  const RopeParams& rope_of(int il) const {
    return has_rope_swa && layers[il].sliding_window > 0 ? rope_swa : rope;
  }
  // Whether some layer's geometry differs from the global one.
  bool per_layer_geometry() const;
  int n_moe_layers() const;
  // Gated DeltaNet layers (0 when the model has none).
  int64_t ssm_conv_kernel = 0;  // conv taps per channel
  int64_t ssm_head_k = 0;       // key (and query) head size
  int64_t ssm_n_k_heads = 0;    // key heads (which one a value head reads: ssm_key_head)
  int64_t ssm_n_v_heads = 0;    // value heads
  int64_t ssm_head_v = 0;       // value head size
  // ArchDescription::ssm_grouped_heads: value head h reads key head
  // h / (ssm_n_v_heads / ssm_n_k_heads) instead of h % ssm_n_k_heads.
  bool ssm_grouped_heads = false;
  // ArchDescription::qk_norm_whole: q_norm / k_norm span the whole projection.
  bool qk_norm_whole = false;
  // One entry per layer.
  std::vector<LayerSpec> layers;
  // NextN / MTP blocks (`{prefix}.nextn_predict_layers`): the last blocks of
  // `block_count`, kept apart from the trunk. n_layer, `layers` and
  // everything that runs, plans, caches or serves the model count the trunk
  // only; block n_layer + i is nextn_layers[i]: the description's
  // full-attention mixer (`attention`, whatever the layer pattern says for
  // that index) and a routed-MoE FFN, plus NextNTensors().
  std::vector<LayerSpec> nextn_layers;
  int64_t n_nextn() const { return static_cast<int64_t>(nextn_layers.size()); }

  // The key head value head h reads.
  int64_t ssm_key_head(int64_t h) const {
    return ssm_grouped_heads ? h / (ssm_n_v_heads / ssm_n_k_heads) : h % ssm_n_k_heads;
  }
  bool is_recurrent(int il) const { return IsRecurrent(layers[il].mixer); }
  int n_attention_layers() const;
  int n_recurrent_layers() const;
  // The conv input width: DeltaNet's q, k and v channels; Mamba-2's xBC
  // (x: inner, B and C: group_count x state_size each, with ssm_n_k_heads
  // = groups and ssm_head_k = state size).
  int64_t ssm_conv_channels() const { return 2 * ssm_n_k_heads * ssm_head_k + ssm_inner(); }
  int64_t ssm_inner() const { return ssm_n_v_heads * ssm_head_v; }
  // One recurrent layer's state per sequence, in floats: the conv's last
  // kernel - 1 inputs per channel, and a head_v x head_k matrix per value
  // head (Mamba-2: head_dim x d_state per head, as ggml_ssm_scan keeps it).
  int64_t ssm_conv_state_floats() const {
    return (ssm_conv_kernel > 1 ? ssm_conv_kernel - 1 : 0) * ssm_conv_channels();
  }
  int64_t ssm_recurrent_state_floats() const { return ssm_n_v_heads * ssm_head_v * ssm_head_k; }
};

// Reads and checks the hyper-parameters of `arch` from `file`'s metadata.
// InvalidArgument naming the key for a missing required key, a value of the
// wrong type, or an inconsistent value (zero sizes, head_count not a multiple
// of head_count_kv, expert_used_count > expert_count, odd n_rot, ...).
absl::StatusOr<HyperParams> ParseHyperParams(const GgufFile& file,
                                             const ArchDescription& arch);

// The per-layer specs of `arch` for n_layer layers; `full_attention_interval`
// is read for LayerPattern::kFullAttentionInterval only (REQUIRES: >= 1).
std::vector<LayerSpec> LayerSpecs(const ArchDescription& arch, int64_t n_layer,
                                  int64_t full_attention_interval = 4);

// Whether a per-layer tensor of `sel` belongs to layer `spec`.
bool LayerSelected(LayerSel sel, const LayerSpec& spec);

// The number of elements a symbolic dimension stands for (the attention
// sizes of layer `layer` when >= 0: HyperParams::kv_heads and so on).
int64_t ResolveDim(const HyperParams& hp, Dim dim, int layer = -1);

// "blk.3.attn_q.weight" for a per-layer spec, the name itself for a global.
std::string TensorName(const TensorSpec& spec, int layer);
bool IsLayerTensor(TensorId id);

}  // namespace moesplit::model
