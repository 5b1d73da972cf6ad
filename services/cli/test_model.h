// Synthetic test models: random-weight GGUF files of any qwen3moe / qwen2moe /
// qwen35moe / gpt-oss / deepseek2 / glm4moe shape (with NextN / MTP blocks
// after the trunk when asked) that llama.cpp and moesplit load.
//
// A TestModelSpec gives the architecture, the shape, the file type (a
// llama.cpp type mix such as Q4_K_M, see type_mix.h) and a seed. The file
// holds:
//   1. metadata: general.architecture / type / name / file_type /
//      quantization_version, every {arch}.* hyper-parameter llama.cpp reads
//      (context_length, embedding_length, block_count, feed_forward_length,
//      expert_feed_forward_length, [expert_shared_feed_forward_length],
//      attention.head_count / head_count_kv / key_length / value_length /
//      layer_norm_rms_epsilon, rope.freq_base, expert_count,
//      expert_used_count; gpt-oss: attention.sliding_window and YaRN's
//      rope.scaling.* as the published files have them), and a small
//      byte-level BPE vocabulary (MakeTestVocab: tokenizer.ggml.*) plus a
//      ChatML chat template (gpt-oss: the harmony specials, the gpt-4o
//      pre-tokenizer and a harmony template);
//   2. the tensors of common/model's ArchDescription, each in the type the
//      mix picks, filled with FillRandomBlocks: standard deviation
//      1/sqrt(fan_in) for projections, routers and experts (fan_in = ne[0]),
//      2/sqrt(n_embd) for the output head, 1 for the token embeddings,
//      0.02 for biases; every RMSNorm weight is exactly 1. The output rows
//      of the vocabulary's <|unused_N|> padding tokens and of the byte
//      tokens other than printable ASCII and '\n' get 1/20 of the output
//      scale, so that sampled text is made of real, printable tokens.
// The bytes depend only on the spec (not on the thread count): each tensor is
// filled in fixed 1 Mi-element chunks seeded from (seed, tensor name, chunk).
// Tensors are produced one at a time through GgufWriter's fill callback, so
// memory stays at one tensor (the largest, for Qwen3-30B-A3B Q6_K
// ffn_down_exps, is ~165 MB) whatever the model size.
//
// Thread-safe: functions are reentrant.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/base/thread_pool.h"
#include "common/gguf/gguf_writer.h"
#include "common/gguf/types.h"
#include "common/model/arch.h"
#include "common/tokenizer/vocab_spec.h"

namespace moesplit::cli {

struct TestModelSpec {
  std::string arch = "qwen3moe";
  std::string name;  // general.name; empty -> "moesplit-test-<arch>"
  int64_t n_layer = 4;
  int64_t n_embd = 256;
  int64_t n_head = 4;
  int64_t n_head_kv = 2;
  int64_t head_dim = 64;
  int64_t n_expert = 8;
  int64_t n_expert_used = 2;
  int64_t n_ff_exp = 256;
  int64_t n_ff_shexp = 512;  // qwen2moe, qwen35moe
  // qwen35moe: partial multi-section rotary and the gated DeltaNet layers.
  int64_t n_rot = 0;  // rope.dimension_count; 0 = head_dim
  std::vector<int64_t> rope_sections = {11, 11, 10, 0};
  int64_t ssm_conv_kernel = 4;
  int64_t ssm_n_k_heads = 16;
  int64_t ssm_n_v_heads = 32;
  int64_t ssm_head = 128;
  int64_t full_attention_interval = 4;
  // nemotron_h_moe (LayerPattern::kPerLayerKinds): one letter per layer, M
  // Mamba-2, * attention, E MoE (the published hybrid_override_pattern;
  // empty: "MEMEM*EM" repeated); the Mamba-2 state size (ssm.state_size;
  // ssm_head is the head size, ssm_n_k_heads the B/C groups, ssm_n_v_heads
  // the heads) and LatentMoE's width (0: none).
  std::string layer_kinds;
  int64_t ssm_state = 128;
  int64_t moe_latent = 0;
  // gpt-oss: sliding-window attention on the even layers, YaRN RoPE.
  int64_t sliding_window = 128;
  double rope_scaling_factor = 32;
  int64_t rope_orig_ctx = 4096;
  // deepseek2 (MLA): head_dim is the query/key head (nope + rope = n_rot),
  // head_dim_v the value head; the cache holds kv_lora + n_rot per position.
  int64_t q_lora_rank = 0;   // 0: attn_q directly (DeepSeek-V2-Lite)
  int64_t kv_lora_rank = 64;
  int64_t head_dim_v = 32;
  int64_t n_dense_lead = 1;  // leading dense-FFN layers (FFN n_ff)
  int64_t n_expert_shared = 1;
  int64_t n_expert_groups = 0;
  int64_t n_group_used = 0;
  double expert_weights_scale = 1.0;
  bool expert_weights_norm = true;
  int64_t expert_gating_func = 2;  // 1 softmax, 2 sigmoid
  double rope_yarn_log_mul = 0;    // rope.scaling.yarn_log_multiplier as written
  int64_t n_ff = 512;        // feed_forward_length (metadata only; deepseek2, glm4moe: the dense FFN)
  // NextN / MTP blocks after the trunk (nextn_predict_layers; block_count is
  // n_layer + n_nextn): a full-attention block with routed experts plus the
  // nextn.* tensors (eh_proj, enorm, hnorm, shared_head_norm).
  int64_t n_nextn = 0;
  bool qk_norm = true;       // glm4moe: the optional per-head QK-norm
  // gemma4: every swa_period-th layer full attention (head_dim, n_head_kv,
  // rope_freq_base; "proportional" RoPE: the first rope_partial of its pairs
  // rotate, through rope_freqs), the others sliding (sliding_window) with
  // their own head size, KV heads and RoPE base; no attn_v on the full
  // layers (V = K); a GeGLU MLP of n_ff beside the experts; tied output;
  // final logit soft-capping.
  int64_t swa_period = 6;
  int64_t head_dim_swa = 256;
  int64_t n_head_kv_swa = 8;
  double rope_freq_base_swa = 1e4;
  double rope_partial = 0.25;
  double final_logit_softcap = 30;
  int64_t n_vocab = 1024;
  int64_t n_ctx = 4096;
  double rope_freq_base = 1e6;
  double rms_eps = 1e-6;
  std::string type = "Q4_K_M";
  uint64_t seed = 1;
  int threads = 0;  // fill threads; 0 = all cores
};

// Named shapes. "qwen3-30b-a3b": 48 layers, n_embd 2048, 32 query / 4 KV
// heads of 128, 128 experts top-8, expert FFN 768, FFN 6144 (vocabulary
// 1024); "qwen3.5-35b-a3b" (Qwen3.5/3.6-35B-A3B's published config): 40
// layers, 10 x (3 gated DeltaNet + 1 gated attention), n_embd 2048,
// attention 16 / 2 heads of 256 with 64 rotary dims in sections 11/11/10,
// DeltaNet 16 key and 32 value heads of 128, conv kernel 4, 256 experts
// top-8 of FFN 512 plus a shared expert of 512, vocabulary 248320, context
// 262144; "gpt-oss-20b" / "gpt-oss-120b" (openai/gpt-oss's configs): 24 / 36
// layers, n_embd 2880, 64 query / 8 KV heads of 64, window 128 on alternate
// layers, YaRN x32 from 4096 positions (base 150000), 32 / 128 experts top-4
// of FFN 2880, vocabulary 201088, context 131072, type MXFP4_MOE;
// "deepseek-v3" / "kimi-k2" / "deepseek-v2-lite" (deepseek2, their published
// configs): 61 / 61 / 27 layers, n_embd 7168 / 7168 / 2048, 128 / 64 / 16
// MLA heads (q LoRA 1536 / 1536 / none, kv LoRA 512, nope 128 + rope 64, v
// 128), 3 / 1 / 1 leading dense layers (FFN 18432 / 18432 / 10944), 256 /
// 384 / 64 experts top-8 / 8 / 6 of FFN 2048 / 2048 / 1408 plus 1 / 1 / 2
// shared, sigmoid / sigmoid / softmax router, groups 8 of which 4 are used
// (V3 only), weights normalised x 2.5 / x 2.827 / unnormalised, YaRN x40 /
// x32 / x40 from 4096 positions, vocabulary 129280 / 163840 / 102400,
// context 163840 / 131072 / 163840; "glm-4.5-air" / "glm-4.7" (glm4moe,
// zai-org's configs; GLM-4.7 has GLM-4.5/4.6's shape): 46 / 92 layers + 1
// NextN block, n_embd 4096 / 5120, 96 query / 8 KV heads of 128 with biases,
// 64 rotary dims, QK-norm on GLM-4.7 only, 1 / 3 leading dense layers (FFN
// 10944 / 12288), 128 / 160 experts top-8 of FFN 1408 / 1536 plus 1 shared,
// sigmoid router with selection bias, weights normalised x 1 / x 2.5,
// vocabulary 151552, context 131072 / 202752; "glm-4.7-flash" (deepseek2 as
// its GGUFs): 47 layers + 1 NextN block, n_embd 2048, 20 MLA heads (q LoRA
// 768, kv LoRA 512, nope 192 + rope 64, v 256), no YaRN, 1 dense layer (FFN
// 10240), 64 experts top-4 of FFN 1536 plus 1 shared, no groups, x 1.8,
// vocabulary 154880, context 202752; "qwen3.6-35b-a3b-mtp": qwen3.5-35b-a3b
// plus its MTP block; "nemotron-3-nano-30b-a3b" / "nemotron-3-super-120b-a12b"
// (nemotron_h_moe, NVIDIA's published configs): 52 / 88 layers in the
// hybrid_override_pattern (23 / 40 Mamba-2, 6 / 8 attention, 23 / 40 MoE),
// n_embd 2688 / 4096, attention 32 / 2 heads of 128 without RoPE, Mamba-2
// 64 / 128 heads of 64 with 8 B/C groups, state 128, conv kernel 4, 128 /
// 512 experts top-6 / 22 of FFN 1856 / 2688 (relu^2) plus a shared expert of
// 3712 / 5376, LatentMoE of 1024 (Super only), sigmoid router with
// selection bias, weights normalised x 2.5 / x 5, vocabulary 131072,
// context 262144 (Super's MTP block is left out); "gemma-4-26b-a4b" (gemma4,
// google/gemma-4-26B-A4B's config as llama.cpp's converter writes it): 30
// layers in the pattern 5 sliding (window 1024, 8 KV heads of 256, RoPE base
// 1e4 over the whole head) + 1 full (2 KV heads of 512, V = K, base 1e6 on
// a quarter of the pairs), n_embd 2816, 16 query heads, a GeGLU MLP of 2112
// beside 128 experts top-8 of FFN 704, tied embeddings, soft-cap 30,
// vocabulary 262144, context 262144; "tiny"
// (the defaults above, the oracle fixtures' shape). The
// context is 4096 unless the preset says otherwise. InvalidArgument
// otherwise.
absl::StatusOr<TestModelSpec> PresetSpec(absl::string_view preset);
// The names PresetSpec takes, in the order the help and the docs list them.
const std::vector<std::string>& PresetNames();

// The hyper-parameters the spec describes (n_ff_shexp as given, also for
// qwen3moe, which has no shared expert).
model::HyperParams ToHyperParams(const TestModelSpec& spec);

// InvalidArgument naming the field: unsupported architecture or type,
// non-positive sizes, n_head not a multiple of n_head_kv, odd head_dim,
// n_expert_used > n_expert, n_expert > 512, a shared expert on qwen3moe
// (n_ff_shexp is ignored there), n_vocab < 259, or a tensor type that
// common/quant cannot compute.
absl::Status ValidateSpec(const TestModelSpec& spec);

// Rows [first_row, first_row + n_rows) of a tensor filled with one scale.
struct RowSegment {
  int64_t first_row = 0;
  int64_t n_rows = 0;
  float scale = 0;  // standard deviation of the random weights
};

// One tensor of the planned file.
struct PlannedTensor {
  std::string name;
  GgmlType type;
  std::vector<int64_t> ne;  // ggml order
  model::TensorRole role;
  bool ones = false;        // RMSNorm weight: every element 1
  // Every element this value instead of random (DeltaNet's ssm_a, which
  // must be negative for the state to decay).
  std::optional<float> constant;
  // F32 values given one by one (gemma4's rope_freqs).
  std::vector<float> values;
  // Cover every row, in order; one segment unless rows differ in scale.
  std::vector<RowSegment> segments;
};

// The tensors of the model, in file order (globals, then layer by layer).
// With `vocab` (of spec.n_vocab tokens), output.weight rows of unused and
// unprintable byte tokens get their smaller scale.
absl::StatusOr<std::vector<PlannedTensor>> PlanTensors(
    const TestModelSpec& spec, const VocabSpec* vocab = nullptr);

// Adds the metadata, vocabulary and tensors to `writer`; the tensors are
// filled when the writer writes, on `pool` (nullptr: the writing thread),
// which must outlive that. Errors as ValidateSpec.
absl::Status AddTestModel(const TestModelSpec& spec, GgufWriter* writer,
                          ThreadPool* pool = nullptr);

// Validates, then writes the model to `path` (through `path`.tmp-<pid>,
// renamed when complete, so a reader never sees a partial file).
// With `progress_prefix`, models of 64 MiB or more report progress on
// stderr under it (common/base/progress.h).
absl::Status WriteTestModel(const TestModelSpec& spec, const std::string& path,
                            const std::string& progress_prefix = "");

}  // namespace moesplit::cli
