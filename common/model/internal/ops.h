// Element-wise and small vector ops of the CPU reference forward pass,
// written to follow ggml's CPU arithmetic (sums of squares and softmax
// denominators in double, as ggml_float).
//
// Thread-safe: pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "common/model/arch.h"

namespace moesplit::model::internal {

// y[i] = x[i] / sqrt(mean(x^2) + eps) * w[i]   (n elements; y may alias x;
// w == nullptr means no weight).
void RmsNorm(const float* x, const float* w, int64_t n, float eps, float* y);

// RmsNorm of `rows` rows of n: row r from x + r * x_stride into
// y + r * y_stride (y may alias x row for row). Bit for bit RmsNorm per
// row; on AVX-512 CPUs the sums of squares of 8 rows run in the 8 double
// lanes of a register, each lane in RmsNorm's order.
void RmsNormRows(const float* x, int64_t x_stride, const float* w, int64_t rows, int64_t n,
                 float eps, float* y, int64_t y_stride);

// ggml's AVX-512 exp approximation (ggml_v_expf, "max error 1.45358 plus
// 0.5 ulps"), evaluated one lane at a time with the same fused operations.
float GgmlVExpf(float x);
inline constexpr int64_t kGgmlVectorWidth = 16;

// y[i] = x[i] / (1 + GgmlVExpf(0 - x[i])) * u[i] (u == nullptr: no factor)
// for i < n, bit for bit the scalar expression, 16 lanes at a time on
// AVX-512 (ggml_v_expf's scalef), 8 on AVX2 (ldexp in two exact halves;
// where exp(-x) is subnormal, 1 + exp(-x) is 1 either way). y may alias x
// or u. REQUIRES: n % kGgmlVectorWidth == 0.
void SiluVector(const float* x, const float* u, int64_t n, float* y);
// The same with the kernel of `lanes` (16: AVX-512, 8: AVX2, 1: scalar), for
// tests. REQUIRES: the CPU has its instructions.
void SiluVectorLanes(int lanes, const float* x, const float* u, int64_t n, float* y);

// out[i] = SiLU(gate[i]) * up[i] over `rows` rows of `cols`, SiLU(x) =
// x / (1 + exp(-x)), as ggml_vec_swiglu_f32 on AVX-512: the first
// cols - cols % 16 elements of each row with GgmlVExpf, the rest with expf.
// out may alias gate or up.
void SwiGlu(const float* gate, const float* up, int64_t rows, int64_t cols, float* out);
// relu(x)^2 of n values into y (y may alias x): ggml_relu then ggml_sqr
// (LLM_FFN_RELU_SQR).
void ReluSq(const float* x, int64_t n, float* y);

// ggml's CPU GELU (tanh form) through its f16 table: 0 for x <= -10, x for
// x >= 10, else f16(gelu(f16(x))) (GGML_GELU_FP16).
float GeluF16Table(float x);
// out[i] = GeluF16Table(gate[i]) * up[i] for i < n, as ggml_vec_geglu_f32.
// out may alias gate or up.
void GeGlu(const float* gate, const float* up, int64_t n, float* out);

inline float Sigmoid(float x) { return 1.0f / (1.0f + __builtin_expf(-x)); }

// In-place softmax over n values, as ggml's soft_max on AVX-512: blocks of
// 16 through GgmlVExpf, each block summed as _mm512_reduce_add_ps into a
// double total, the tail through expf; then x *= float(1 / total).
void Softmax(float* x, int64_t n);

// Router: probabilities = softmax(logits[0..n_expert)); picks the k largest
// (ties -> lower id) in descending order into ids[0..k), their probabilities
// into weights[0..k), renormalised to sum 1 when `normalize`.
// REQUIRES: 1 <= k <= n_expert. `logits` is overwritten with the probabilities.
void SelectExperts(float* logits, int n_expert, int k, bool normalize, int32_t* ids,
                   float* weights);
// gpt-oss's router (LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX_WEIGHT): the k
// largest logits (ties -> lower id) in descending order into ids[0..k), and
// the softmax over those k logits into weights[0..k). `logits` is unchanged.
void SelectExpertsSoftmaxOfTopK(const float* logits, int n_expert, int k, int32_t* ids,
                                float* weights);

// The general router (deepseek2; also the plain softmax case): scores =
// softmax(logits) or sigmoid(logit) per expert; selection = scores + bias
// (when given); with n_groups > 1 only the n_group_used groups (experts
// split into n_groups equal consecutive ranges) with the largest sum of
// their two best selection values compete (ties -> lower group); the k
// largest selection values (ties -> lower id) in descending order into
// ids[0..k); their unbiased scores into weights (softmax over those k for
// kSoftmaxSelected), renormalised to sum 1 (sum in double, as ggml_sum_rows)
// when `normalize`, then times `scale` when it is not 1. As llama.cpp's
// build_moe_ffn. `logits` is overwritten with the scores.
struct RouterChoice {
  RouterSpec::Scoring scoring = RouterSpec::Scoring::kSoftmax;
  int n_expert = 0;
  int k = 0;
  bool normalize = false;
  float scale = 1.0f;
  const float* bias = nullptr;  // n_expert selection biases, or nullptr
  int n_groups = 0;
  int n_group_used = 0;
};
void SelectExpertsGeneral(const RouterChoice& rc, float* logits, int32_t* ids, float* weights);
// Whether a layer routes with SelectExpertsGeneral rather than one of the two
// fixed forms (softmax then top-k; gpt-oss's top-k then softmax): sigmoid
// scores, a selection bias, expert groups, a weight scale, or normalised
// weights of a scoring other than softmax (deepseek2's router).
bool UsesGeneralRouter(const HyperParams& hp, bool selection_bias);

// RoPE angles for one position: cos/sin of theta_i for i in [0, n_rot/2)
// (theta_i divided by freq_factors[i] where RopeParams has them),
// following ggml's rope_yarn (theta_i = pos * base^(-2i/n_rot), computed by
// repeated multiplication in float as ggml does; YaRN / linear scaling from
// RopeParams).
struct RopeAngles {
  std::vector<float> cos, sin;  // n_rot / 2 each
};
void ComputeRopeAngles(const RopeParams& p, int64_t pos, RopeAngles* out);
// Multi-section RoPE (RopeParams::multi_section): whether rotary pair
// `pair` takes the token's position (true) or the extra position, 0 for
// text (false: not rotated).
bool MultiSectionPairRotates(const std::array<int, 4>& sections, int64_t pair);

// NEOX rotation of one head vector of `head_dim` elements in place: pairs
// (x[i], x[i + n_rot/2]) for i < n_rot/2; dimensions >= n_rot unchanged.
void ApplyRopeNeox(const RopeAngles& a, int64_t n_rot, float* x);
// NORM rotation (ggml's default mode): adjacent pairs (x[2i], x[2i + 1]).
void ApplyRopeNorm(const RopeAngles& a, int64_t n_rot, float* x);

// YaRN correction dims (ggml_rope_yarn_corr_dims).
void RopeYarnCorrDims(int64_t n_rot, int64_t n_ctx_orig, float freq_base, float beta_fast,
                      float beta_slow, float dims[2]);

// Index of the largest value (ties -> lower index). REQUIRES: n >= 1.
int64_t Argmax(const float* x, int64_t n);

}  // namespace moesplit::model::internal
