// Kernels of the gated-DeltaNet mixer (qwen35moe's linear-attention layers)
// on the CPU, following llama.cpp's CPU ops: ggml_ssm_conv + ggml_silu for
// the causal conv, ggml_l2_norm, ggml_softplus, and ggml_gated_delta_net
// (the recurrent delta rule token by token, which is also what llama.cpp's
// CPU backend runs for a whole prompt).
//
// The explicit 16-lane loops (DotLanes) fix the summation order in the
// source, so every instruction set the compiler targets gives the same bits.
//
// Thread-safe: pure functions over caller-owned memory.
#pragma once

#include <cstdint>

namespace moesplit::model::internal {

// Causal depthwise conv of one sequence's n tokens over `channels`
// channels, each followed by SiLU:
//   y[t][c] = SiLU(sum_{j<K} in[t + j][c] * w[c * K + j])
// where in = the K-1 taps of `state_in` (channel c's at c * (K-1), oldest
// first) followed by x's rows (x[t][c] at x + t * x_stride + c). The last
// K-1 inputs go to `state_out` (same layout; may not alias state_in).
// y[t][c] at y + t * y_stride + c. SiLU as ggml_vec_silu_f32 on AVX-512
// (ggml's vectorised exp in blocks of 16, expf for the rest of each row).
// `bias` (channels values, or nullptr) is added to each sum before the SiLU
// (Mamba-2's conv1d bias: ggml_add after ggml_ssm_conv).
void ConvSilu(const float* x, int64_t x_stride, int64_t n, int64_t channels, const float* w,
              int64_t kernel, const float* state_in, float* state_out, float* y,
              int64_t y_stride, const float* bias = nullptr);

// ggml_l2_norm of `rows` rows of n floats in place: x /= max(sqrt(sum x^2), eps),
// the sum in double. Row r at x + r * stride.
void L2NormRows(float* x, int64_t rows, int64_t n, int64_t stride, float eps);

// log(1 + exp(x)), x itself above 20 (ggml's op_softplus).
float Softplus(float x);

// One value head of the gated delta rule over n tokens of one sequence
// (ggml_gated_delta_net, K = 1). The state is dv x dk (row j = value
// dimension j, contiguous over the key dimension); dk == dv == `dim`.
// For each token t, with q, k, v rows at q + t * q_stride (etc.), the decay
// g[t * g_stride] and the write strength beta[t * g_stride]:
//   S *= exp(g); delta = (v - S k) * beta; S += delta k^T; o = S q / sqrt(dim)
// o's row t at out + t * out_stride. Reads `state_in` for the first token
// and leaves the state after the last one in `state_out` (may not alias).
struct DeltaRuleHead {
  const float* q;
  const float* k;
  const float* v;
  int64_t q_stride, k_stride, v_stride;
  const float* g;
  const float* beta;
  int64_t g_stride;
  float* out;
  int64_t out_stride;
};
// The SIMD form DeltaRule runs: the best this CPU has, or at most AVX2
// (tests, so that the AVX2 form is checked on AVX-512 CPUs too).
enum class DeltaRuleForm { kAuto, kAvx2 };
// On AVX-512 and AVX2 CPUs (dim a multiple of 16) 16 lanes per step, 4 rows
// at a time, in DeltaRuleReference's order: the same bits on every CPU.
// state_out on a 64-byte boundary (32 for AVX2) lets the last token's state
// go out with non-temporal stores (see delta_net.cc); any alignment works.
void DeltaRule(const DeltaRuleHead& h, int64_t n, int64_t dim, const float* state_in,
               float* state_out, DeltaRuleForm form = DeltaRuleForm::kAuto);
// The plain loops (the order every SIMD path follows); for tests.
void DeltaRuleReference(const DeltaRuleHead& h, int64_t n, int64_t dim, const float* state_in,
                        float* state_out);

// Mamba-2's selective scan of one head over n tokens of one sequence
// (ggml_ssm_scan with a scalar A, K = 1). The state is head_dim x d_state
// (row i = channel i, contiguous over the state). For each token t, with
// dt' = dt[t * dt_stride] (softplus already applied), x row at
// x + t * x_stride (head_dim values), B and C rows at b / c + t * bc_stride
// (d_state values each):
//   dA = exp(dt' * a); S[i] = S[i] * dA + B * (x[i] * dt'); y[i] = S[i] . C
// (the dot product in 16 lanes added pairwise, then the d_state % 16 tail
// in order: the same bits on every CPU)
// y's row t at y + t * y_stride. Reads `state_in` for the first token and
// leaves the state after the last one in `state_out` (may not alias).
struct SsmScanHead {
  const float* x;
  const float* b;
  const float* c;
  int64_t x_stride, bc_stride;
  const float* dt;
  int64_t dt_stride;
  float a;
  float* y;
  int64_t y_stride;
};
void SsmScan(const SsmScanHead& h, int64_t n, int64_t head_dim, int64_t d_state,
             const float* state_in, float* state_out);

// ggml_silu of n values into y (y may alias x): the first n - n % 16 with
// ggml's vectorised exp, the rest with expf.
void SiluRow(const float* x, int64_t n, float* y);

}  // namespace moesplit::model::internal
