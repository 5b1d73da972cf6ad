// Plain-C++ surface of the .cu files (compiled by nvcc without Abseil);
// common/backend/cuda/*.cc turn CallResult into absl::Status (ToStatus in
// cuda_status.h). Every function returns the first failing CUDA call
// (code 0 = success); launches are checked with cudaGetLastError. Streams and
// other handles are passed as void* (cudaStream_t, cudaEvent_t).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/gguf/types.h"

namespace moesplit::cuda::raw {

struct CallResult {
  int code = 0;            // cudaError_t
  const char* call = "";   // the call that returned it
  bool ok() const { return code == 0; }
};

struct RawDeviceInfo {
  char name[256] = {0};
  int major = 0, minor = 0;
  uint64_t free_bytes = 0, total_bytes = 0;
};

// ----------------------------------------------------------- runtime (cuda_kernels.cu)
int DeviceCount();
CallResult DeviceProperties(int index, RawDeviceInfo* info);
CallResult Saxpy(float a, const float* x, float* y, int64_t n);
const char* ErrorString(int code);
bool IsOutOfMemory(int code);
bool IsNoDevice(int code);

CallResult SetDevice(int index);
CallResult MemGetInfo(uint64_t* free_bytes, uint64_t* total_bytes);
CallResult Malloc(void** p, size_t bytes);
void Free(void* p);
CallResult MallocHost(void** p, size_t bytes);
void FreeHost(void* p);
// Page-locks existing host memory [p, p + bytes) (cudaHostRegister, read-only
// mappings allowed when read_only) / releases it. Copies from it then run at
// full speed and truly asynchronously.
CallResult HostRegister(void* p, size_t bytes, bool read_only);
CallResult HostUnregister(void* p);
CallResult Memset(void* p, int value, size_t bytes, void* stream);
// kind: 0 host->device, 1 device->host, 2 device->device.
CallResult MemcpyAsync(void* dst, const void* src, size_t bytes, int kind, void* stream);
CallResult StreamCreate(void** stream);
void StreamDestroy(void* stream);
CallResult StreamSynchronize(void* stream);
CallResult StreamWaitEvent(void* stream, void* event);
CallResult EventCreate(void** event);
void EventDestroy(void* event);
CallResult EventRecord(void* event, void* stream);
CallResult EventSynchronize(void* event);
CallResult EventQuery(void* event, bool* done);

// ------------------------------------------------------------ matrices (dequant.cu, gemm.cu)
// A weight matrix in a ggml format, resident on the device: n_rows rows of
// n_cols elements, row r at data + r * row_bytes.
struct DeviceMatrix {
  GgmlType type = GgmlType::kF32;
  const void* data = nullptr;
  int64_t n_rows = 0;
  int64_t n_cols = 0;
  uint64_t row_bytes = 0;
};

// Whether the kernels decode `type` (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0, Q8_1, Q2_K..Q6_K, Q8_K, IQ4_NL, IQ4_XS, MXFP4).
bool DeviceSupports(GgmlType type);

// out[i][c] = w[row(i)][c] as f32, row(i) = row_ids[i] when row_ids (device
// int32) is given, else first_row + i; i < n_out. Rows must be < n_rows
// (row_ids are trusted: validate them before). Embedding get_rows and the
// dequantise-then-GEMM path.
CallResult DequantRows(const DeviceMatrix& w, const int32_t* row_ids, int64_t first_row,
                       int64_t n_out, float* out, void* stream);

// y[t][r] = sum_c w[r][c] * x[t][c] for t < n_tok (<= 8 x 65535), r <
// n_rows; x: n_tok x n_cols f32, y: n_tok x n_rows f32 (row-major). The
// weight is decoded in the kernel (no scratch); tokens go in groups of
// kMaxMatVecTokens per block, and a token's result does not depend on n_tok.
inline constexpr int kMaxMatVecTokens = 8;
CallResult MatVec(const DeviceMatrix& w, const float* x, int64_t n_tok, float* y, void* stream);

// out = x (n_tok x n_cols) rounded as the CPU reference rounds the
// activations of a product with a weight of `weight_type` (its vec_dot_type:
// Q8_0 / Q8_K blocks, F16, BF16, none for F32; codec::ActRoundingOf). out may
// alias x. InvalidValue when n_cols is not whole blocks.
CallResult RoundActivations(GgmlType weight_type, const float* x, int64_t n_tok, int64_t n_cols,
                            float* out, void* stream);

// The GEMM context: a buffer for the rounded activations.
struct GemmContext {
  float* act = nullptr;   // nullptr: f32 activations as given (no rounding)
  int64_t act_elems = 0;  // >= n_cols of every matrix (one token)
};
// y = x . w^T as MatVec, for any n_tok >= 1, with x rounded first as
// RoundActivations (in chunks of act_elems / n_cols tokens) when ctx.act is
// set. The CPU reference computes the same products (to float rounding).
CallResult MatMul(const DeviceMatrix& w, const float* x, int64_t n_tok, float* y,
                  const GemmContext& ctx, void* stream);

// Per-head products (MLA's attn_k_b / attn_v_b, one matrix per query head):
// for every group g < n_groups and token t < n_tok (<= 8 x 65535),
//   y[t * y_tok + g * y_group + r] = sum_c w_g[r][c] * x[t * x_tok + g * x_group + c],
// w_g the matrix of w.n_rows x w.n_cols at w.data + g * group_bytes; each
// (group, token) as MatVec computes it (the same lanes and order). The
// activations are used as given: round them first (RoundActivations).
// n_groups <= 65535.
struct GroupedMatVecParams {
  DeviceMatrix w;  // one group's matrix
  uint64_t group_bytes = 0;
  int64_t n_groups = 0;
  const float* x = nullptr;
  int64_t x_tok = 0, x_group = 0;
  float* y = nullptr;
  int64_t y_tok = 0, y_group = 0;
  int64_t n_tok = 0;
};
CallResult GroupedMatVec(const GroupedMatVecParams& p, void* stream);

// ------------------------------------------------------------ element-wise (norm.cu, elementwise.cu, rope.cu)
// y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w, rows of d (w nullable; y may
// alias x). Sum of squares in double, as the CPU reference.
CallResult RmsNorm(const float* x, const float* w, int64_t rows, int64_t d, float eps,
                   float* y, void* stream);
// RmsNorm of the first d values of rows that lie x_stride (y_stride) floats
// apart; the rest of each row is left as it is (MLA's latent norm).
CallResult RmsNormStrided(const float* x, int64_t x_stride, const float* w, int64_t rows,
                          int64_t d, float eps, float* y, int64_t y_stride, void* stream);
// NEOX RoPE in place on n_tok x n_heads heads of head_dim: pairs (i, i +
// n_rot/2), i < n_rot/2, rotated by cos_sin[t][i] = {cos, sin} (device,
// n_tok x n_rot/2 x 2, computed on the host by the CPU reference code).
CallResult RopeNeox(float* x, int64_t n_tok, int64_t n_heads, int64_t head_dim, int64_t n_rot,
                    const float* cos_sin, void* stream);
// NORM-style RoPE (deepseek2) in place: for token t < n_tok and head h <
// n_heads, the n_rot values at x + t * tok_stride + h * head_stride, pairs
// (2i, 2i + 1) rotated by cos_sin[t][i] (as RopeNeox's table):
//   x0' = x0 cos - x1 sin,  x1' = x0 sin + x1 cos.
CallResult RopeNorm(float* x, int64_t n_tok, int64_t tok_stride, int64_t n_heads,
                    int64_t head_stride, int64_t n_rot, const float* cos_sin, void* stream);
// dst[r * dst_stride + c] = src[r * src_stride + c] for r < rows, c < cols
// (the regions must not overlap).
CallResult CopyRows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride,
                    int64_t rows, int64_t cols, void* stream);
// The per-head norms and RoPE of attention in one launch: RmsNorm (as
// RmsNorm, rows of head_dim, skipped for a side whose weight is null) then
// RopeNeox, on q (n_tok x n_head heads) and k (n_tok x n_head_kv heads), in
// place; the same values as the four separate calls.
CallResult QkNormRope(float* q, const float* q_norm, int64_t n_head, float* k,
                      const float* k_norm, int64_t n_head_kv, int64_t n_tok, int64_t head_dim,
                      float eps, int64_t n_rot, const float* cos_sin, void* stream);
// y[r][c] += b[c]
CallResult AddBias(float* y, const float* b, int64_t rows, int64_t cols, void* stream);
// x[i] += y[i]
CallResult Add(float* x, const float* y, int64_t n, void* stream);
// out[i] = SiLU(gate[i]) * up[i]; out may alias gate.
CallResult SwiGlu(const float* gate, const float* up, int64_t n, float* out, void* stream);
// gpt-oss's clamped SwiGLU, as the CPU's (common/model/expert.cc): x =
// min(gate[i], limit), y = clamp(up[i], -limit, limit), out[i] = x / (1 +
// exp(alpha * -x)) * (y + 1); out may alias gate.
CallResult SwiGluOai(const float* gate, const float* up, int64_t n, float alpha, float limit,
                     float* out, void* stream);
// y[r][c] *= sigmoid(g[r])
CallResult ScaleRowsBySigmoid(float* y, const float* g, int64_t rows, int64_t cols,
                              void* stream);

// dst[i][:] = src[rows[i]][:] for i < n (rows of d; rows on the device).
CallResult GatherRows(const float* src, const int32_t* rows, int64_t n, int64_t d, float* dst,
                      void* stream);
// dst[rows[i]][:] += w[i] * src[i][:] for i < n, in order of i (one launch
// per call; rows may repeat only across calls).
CallResult ScatterAddScaled(float* dst, const float* src, const int32_t* rows, const float* w,
                            int64_t n, int64_t d, void* stream);

// ------------------------------------------------------------ router (router.cu)
// Per row of n_expert logits (overwritten by the softmax probabilities):
// top-k (descending, ties -> lower id) into ids / weights (rows x k),
// weights renormalised to sum 1 when `normalize`. REQUIRES: 1 <= k <=
// n_expert <= 1024.
CallResult SelectExperts(float* logits, int64_t rows, int n_expert, int k, bool normalize,
                         int32_t* ids, float* weights, void* stream);
// gpt-oss's router (RouterSpec::Scoring::kSoftmaxSelected): per row, the k
// largest logits (descending, ties -> lower id) into ids, and the softmax of
// those k (max, exp, sum in double, scale by the reciprocal) into weights;
// the logits are left as they are. REQUIRES: 1 <= k <= n_expert <= 1024.
CallResult SelectExpertsTopKSoftmax(const float* logits, int64_t rows, int n_expert, int k,
                                    int32_t* ids, float* weights, void* stream);
// deepseek2's router (the CPU's model::internal::SelectExpertsGeneral): per
// row, the scores (softmax as SelectExperts, or sigmoid 1 / (1 + exp(-x)))
// overwrite the logits; selection values = scores + bias (bias nullable);
// with n_groups > 1 the n_group_used groups of n_expert / n_groups experts
// whose two best selection values sum highest (in double, rounded to float;
// ties -> lower group) stay eligible; the k best eligible (ties -> lower
// id) are chosen, each weighted by its score (without the bias), the
// weights renormalised to sum 1 (in double) when `normalize`, then times
// `scale`. REQUIRES: 1 <= k <= n_expert <= 1024, n_groups <= kMaxExpertGroups
// dividing n_expert, n_group_used <= n_groups.
inline constexpr int kMaxExpertGroups = 64;
struct GroupedRouter {
  bool sigmoid = false;  // else softmax
  int n_expert = 0, k = 0;
  bool normalize = false;
  float scale = 1.0f;
  const float* bias = nullptr;  // device, n_expert, or null
  int n_groups = 1, n_group_used = 1;
};
CallResult SelectExpertsGrouped(const GroupedRouter& r, float* logits, int64_t rows,
                                int32_t* ids, float* weights, void* stream);

// ------------------------------------------------------------ paged KV + attention (attention.cu)
// One layer's paged K and V: position p of a sequence lives in page
// block_table[p / page_size], slot p % page_size; the row of that slot is
// n_head_kv * head_dim elements of `type` (F16, Q8_0 or Q4_0) at
// base + (page * page_size + slot) * row_bytes.
struct PagedKv {
  GgmlType type = GgmlType::kF16;
  uint8_t* k = nullptr;
  uint8_t* v = nullptr;
  uint64_t k_row_bytes = 0, v_row_bytes = 0;
  int page_size = 0;
  const int32_t* block_table = nullptr;  // device
};
bool KvTypeSupported(GgmlType type);

// Stores k (n_tok x kd) and v (n_tok x vd) f32 at positions pos0 .. pos0 + n_tok - 1
// (quantised per 32-block with ggml's reference quantisers for Q8_0/Q4_0).
CallResult KvWrite(const PagedKv& kv, const float* k, const float* v, int64_t n_tok,
                   int64_t pos0, int64_t kd, int64_t vd, void* stream);

struct AttentionParams {
  const float* q = nullptr;  // n_tok x n_head x head_dim
  float* out = nullptr;      // n_tok x n_head x head_dim_v
  PagedKv kv;
  int64_t n_tok = 0;
  int64_t pos0 = 0;          // token t attends positions first(t) .. pos0 + t
  // head_dim (K) % 32 == 0, <= 256, and head_dim_v = 0 (the same); or, an
  // F16 cache only, head_dim_v a power of two from 32 to kMaxAttentionDimV
  // and any head_dim up to kMaxAttentionDimK (MLA: K = latent + rope key,
  // V = the latent, read from the K rows: kv.v = kv.k). See
  // AttentionShapeSupported.
  int n_head = 0, n_head_kv = 0, head_dim = 0, head_dim_v = 0;
  float scale = 1.0f;
  // Sliding window (gpt-oss's even layers): W > 0 makes first(t) =
  // max(0, pos0 + t - W + 1), the last W positions; 0 attends from 0.
  int64_t window = 0;
  // Learned per-head sink logits (gpt-oss; device, n_head floats), or null:
  // a softmax entry without a value, folded into the merged {max, sum, acc}
  // as the CPU reference does (common/model/internal/attention.h).
  const float* sinks = nullptr;
  // Chunk partials: at least n_head * ceil((pos0 + n_tok) / kAttentionChunk)
  // * (V dimension + 2) floats (one token per launch); more lets more tokens
  // go per launch (AttentionScratchElems: kDecodeTokens at n_ctx).
  float* split_scratch = nullptr;
  int64_t split_scratch_elems = 0;
};
// Causal softmax(q . K^T * scale) . V per head, GQA (query head h reads KV
// head h / (n_head / n_head_kv)), online softmax. The positions of every
// token are split into chunks of kAttentionChunk; each chunk's partial {max,
// sum, acc} over the positions of the chunk the token attends is computed
// (chunks wholly before first(t) are skipped), then a second kernel merges a
// token's chunks in order (f32), applies the sink when there is one, and
// returns acc * (1 / sum).
//   F16 cache: within a chunk, llama.cpp's CPU flash attention (as the CPU
//   reference, common/model/internal/attention.h): the positions in order,
//   query and V accumulator in f16, scores summed in DotF16's order. Up to
//   kAttentionChunk positions the result is the CPU reference's but for the
//   last bits of the device's expf. One warp per (query head, token, chunk).
//   Q8_0 / Q4_0 caches: f32 math, one block per (KV head or a subgroup of
//   its query heads, token, chunk), each K/V row decoded once for the query
//   heads sharing it, the positions spread over 8 warps. Decode over a long context
// thus spreads over hundreds of blocks, and a token's result is the same in
// any batch (prefill, micro-batches and decode agree bit for bit).
inline constexpr int kAttentionChunk = 256;
inline constexpr int kMaxAttentionDimK = 576;  // DeepSeek-V3's 512 + 64
inline constexpr int kMaxAttentionDimV = 512;
// Scratch floats for kDecodeTokens tokens attending up to n_ctx positions in
// one launch (longer batches go in several launches); head_dim_v: the V
// dimension.
inline constexpr int kDecodeTokens = 8;
inline int64_t AttentionScratchElems(int n_head, int head_dim_v, int64_t n_ctx) {
  const int64_t chunks = (n_ctx + kAttentionChunk - 1) / kAttentionChunk;
  return static_cast<int64_t>(kDecodeTokens) * n_head * chunks * (head_dim_v + 2);
}
// The V dimension of `p` (head_dim when head_dim_v is 0), and whether K and
// V differ (the MLA form: F16 only).
inline int AttentionDimV(const AttentionParams& p) {
  return p.head_dim_v != 0 ? p.head_dim_v : p.head_dim;
}
inline bool AttentionSplitKV(const AttentionParams& p) {
  return p.head_dim_v != 0 && p.head_dim_v != p.head_dim;
}
// Whether `p`'s head shape is one the kernels take (see AttentionParams).
inline bool AttentionShapeSupported(const AttentionParams& p) {
  if (p.n_head_kv < 1 || p.n_head % p.n_head_kv != 0) return false;
  if (!AttentionSplitKV(p)) {
    return p.head_dim % 32 == 0 && p.head_dim >= 32 && p.head_dim <= 256;
  }
  const int hv = p.head_dim_v;
  return p.kv.type == GgmlType::kF16 && p.head_dim >= 1 && p.head_dim <= kMaxAttentionDimK &&
         hv >= 32 && hv <= kMaxAttentionDimV && (hv & (hv - 1)) == 0;
}
CallResult Attention(const AttentionParams& p, void* stream);

// ------------------------------------------------------------ gated DeltaNet (delta_net.cu)
// The ops of qwen35moe's linear-attention layers and of its gated attention,
// as the CPU reference computes them (common/model/internal/delta_net.h,
// forward.cc). Host expf / logf are not the device's: the emulation gives
// the CPU's bits where the order of the sums allows (the delta rule, the
// conv sums), the device results are close.

// Causal depthwise conv + SiLU over one sequence's n_tok tokens, per channel
// c < channels:
//   y[t][c] = SiLU(sum_{j<kernel} in(t + j, c) * w[c * kernel + j])
// (f32, the taps in order; SiLU(s) = s / (1 + exp(-s))), where in(i, c) is
// state_in[c * (kernel - 1) + i] for i < kernel - 1 (0 when state_in is
// null: a fresh sequence), then x[(i - kernel + 1) * stride + c]. The last
// kernel - 1 inputs go to state_out (same layout). One thread per channel
// walks the tokens in order, so y may alias x and state_out state_in.
// REQUIRES: 2 <= kernel <= kMaxConvKernel.
inline constexpr int kMaxConvKernel = 8;
struct ConvParams {
  const float* x = nullptr;
  float* y = nullptr;
  int64_t stride = 0;  // floats from one token's row to the next (x and y)
  int64_t n_tok = 0;
  int64_t channels = 0;
  const float* w = nullptr;  // channels x kernel
  int kernel = 0;
  const float* state_in = nullptr;  // channels x (kernel - 1), or null
  float* state_out = nullptr;
};
CallResult ConvSilu(const ConvParams& p, void* stream);

// In place, n_tok x n_heads rows of dim: row (t, h) at x + t * stride + h *
// dim becomes x / max(sqrt(sum x^2), eps), the f32 squares summed in double
// (ggml_l2_norm). One warp per row (lane-strided sums, the butterfly).
CallResult L2NormHeads(float* x, int64_t n_tok, int64_t n_heads, int64_t dim, int64_t stride,
                       float eps, void* stream);

// The per-head gates of n_tok tokens x n_heads value heads, in place:
//   beta = sigmoid(beta);  g = softplus(g + dt_bias[h]) * a[h]
// with softplus(x) = x > 20 ? x : log(1 + exp(x)).
CallResult DeltaNetGates(float* beta, float* g, const float* dt_bias, const float* a,
                         int64_t n_tok, int64_t n_heads, void* stream);

// The gated delta rule (recurrent form) over one sequence's n_tok tokens.
// Value head h (< n_v_heads) reads key head kh (h % n_k_heads, or grouped: below): token t's
// query at qkv + t * stride + kh * dim, key at + (n_k_heads + kh) * dim,
// value at + (2 n_k_heads + h) * dim; its state S (dim x dim, row j = value
// dimension j) starts from state_in + h * dim * dim (zeros when null) and,
// token by token,
//   S *= exp(g[t][h]); delta = (v - S k) * beta[t][h]; S += delta k^T;
//   out[t][h] = S q / sqrt(dim)                 (out: n_tok x n_v_heads x dim)
// ends in state_out (may alias state_in). Each row's dot products sum 16
// lanes (lane l: elements l, l + 16, ... in order), then the lanes
// pairwise (8, 4, 2, 1): the CPU's DotLanes order. REQUIRES: dim % 16 == 0,
// 16 <= dim <= kMaxDeltaDim.
inline constexpr int kMaxDeltaDim = 256;
struct DeltaRuleParams {
  const float* qkv = nullptr;
  int64_t stride = 0;
  const float* g = nullptr;     // n_tok x n_v_heads
  const float* beta = nullptr;  // n_tok x n_v_heads
  float* out = nullptr;
  const float* state_in = nullptr;
  float* state_out = nullptr;
  int64_t n_tok = 0;
  int n_k_heads = 0, n_v_heads = 0, dim = 0;
  // Value head h reads key head h / (n_v_heads / n_k_heads) (qwen3next)
  // instead of h % n_k_heads (model::HyperParams::ssm_key_head).
  bool grouped_heads = false;
};
CallResult DeltaRule(const DeltaRuleParams& p, void* stream);

// y[r] = RmsNorm(x[r]) * w * SiLU(z[r]) for rows of d (as RmsNorm, then
// times z / (1 + exp(-z))); y may alias x.
CallResult GatedRmsNorm(const float* x, const float* z, const float* w, int64_t rows, int64_t d,
                        float eps, float* y, void* stream);

// Gated attention: the doubled q projection holds per (token, head) the
// query then the gate, hd each (qg: n_tok x n_head x 2 hd). SplitQueryGate
// copies the queries to q (n_tok x n_head x hd); ApplyHeadGate scales rows
// r < rows (token x head) of attn (hd each): attn[r][i] *= sigmoid(qg[r *
// 2 hd + hd + i]).
CallResult SplitQueryGate(const float* qg, int64_t n_tok, int64_t n_head, int64_t hd, float* q,
                          void* stream);
CallResult ApplyHeadGate(float* attn, const float* qg, int64_t rows, int64_t hd, void* stream);

}  // namespace moesplit::cuda::raw
