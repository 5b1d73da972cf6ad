// CPU reference forward pass of an MoE transformer whose layers the
// architecture describes (arch.h: HyperParams::layers): qwen3moe / qwen2moe
// (every layer GQA attention + routed MoE) and qwen35moe (gated DeltaNet
// with a gated full-attention layer every fourth, routed MoE + a gated
// shared expert).
//
// Per block, for a batch of n tokens at positions n_past .. n_past + n - 1:
//   h   = RMSNorm(x) * attn_norm
//   mixer, by the layer's kind:
//   attention / gated attention:
//     q,k,v = Wq h (+bq), Wk h (+bk), Wv h (+bv); gated: Wq gives per head
//             [q, gate]
//     q,k = per-head RMSNorm * q_norm / k_norm        (when present; minimax-m2:
//           one RMSNorm over the whole projection, qk_norm_whole)
//     q,k = NEOX RoPE(pos) on n_rot dims              (RopeParams; multi-section)
//     K,V cache[pos] = f16(k), f16(v)
//     a   = softmax(q . K^T / sqrt(head_dim_k), causal) . V   per head, GQA,
//           as llama.cpp's CPU flash-attention kernel computes it (f16 query,
//           online softmax, f16 accumulator; internal/attention.h)
//     gated: a *= sigmoid(gate)
//     x  += Wo a
//   gated DeltaNet (internal/delta_net.h; llama.cpp's qwen35moe linear
//   attention with ggml_gated_delta_net):
//     qkv = SiLU(causal depthwise conv(W_qkv h)) over the conv state
//     q,k = per-head L2-normalised; beta = sigmoid(W_beta h);
//     g = softplus(W_alpha h + dt_bias) * ssm_a                    per value head
//     S = S * exp(g); S += k (beta (v - S k))^T; o = S q / sqrt(head_k)
//            (value head h reads key head h % n_k_heads; qwen3next: h / (n_v / n_k))
//     x  += W_out (RMSNorm(o) * ssm_norm * SiLU(W_z h))          per value head
//   multi-head latent attention (deepseek2, llama.cpp's absorbed form):
//     q   = Wq_b (RMSNorm(Wq_a h) * q_a_norm)   (or Wq h without a q LoRA)
//     c,r = Wkv_a h: the latent c (kv_lora) and the shared key part r (n_rot)
//     c   = RMSNorm(c) * kv_a_norm; r = NORM RoPE(r); q_pe = NORM RoPE(q_pe)
//     K cache[pos] = f16([c, r]) (one KV head; V is its first kv_lora values)
//     per head: Q = [Wk_b[h] q_nope, q_pe]; a = softmax(Q . K^T * scale) . V
//               (scale: HyperParams::attn_scale), o_h = Wv_b[h] a
//     x  += Wo o
//   Mamba-2 (nemotron_h_moe; llama.cpp's build_mamba2_layer, ggml_ssm_scan):
//     [z | xBC | dt] = W_in h; xBC = SiLU(causal depthwise conv(xBC) + b);
//     dt = softplus(dt + dt_bias); per head (B/C group h / (heads / groups)):
//     S = S * exp(dt * A) + B (x dt), y = S C + D x     token by token
//     x  += W_out (RMSNorm per group(y * SiLU(z)) * ssm_norm)
//   (a layer may have no mixer or no FFN: nemotron_h_moe's layers are one or
//   the other, each with its one norm)
//   h   = RMSNorm(x) * ffn_norm   (qwen35moe: post_attention_norm)
//   dense-FFN layers (deepseek2's leading ones): x += W_down (SiLU(W_gate h) * W_up h)
//   p   = softmax(W_router h); top-k (ties -> lower id); renormalise when
//         hparams.norm_topk (deepseek2: sigmoid or softmax scores, a
//         selection bias and expert groups, times expert_weights_scale:
//         internal::SelectExpertsGeneral)
//   x  += ExpertBackend(h, top-k ids, weights)
//         + sigmoid(w_shexp_gate . h) * SharedExpert(h)   (when present)
// then logits = W_out (RMSNorm(x) * output_norm).
// Gemma's additions, each where the model has it (gemma4): x = embedding *
// sqrt(d); per-layer KV heads, head sizes and RoPE (HyperParams::kv_heads,
// head_k, head_v, rope_of; RoPE divisors freq_factors); V = the raw K
// projection without attn_v, V RMS-normed without weight, attention scale
// 1; the mixer output RMS-normed (attn_post_norm) before its residual add;
// on an MoE layer with ffn_gate/up/down a GeGLU MLP on ffn_norm(x) beside
// the experts on ffn_pre_norm_2(x), the router on RMSNorm(x) / sqrt(d) *
// router_scale, each expert's weight times down_exps_scale[e], then
// x += ffn_post_norm(ffn_post_norm_1(mlp) + ffn_post_norm_2(experts)); x *=
// out_scale after the layer; logits = c * tanh(logits / c) (soft-cap c).
//
// Arithmetic follows llama.cpp's CPU backend (AVX-512 build) so that the
// oracle fixtures match to the bit where the kernels allow: matrix products
// go through quant::MatMul (activations converted to the weight's
// vec_dot_type); RMSNorm sums squares in double; SwiGLU and the router
// softmax use ggml's vectorised exp in blocks of 16 (internal/ops.h);
// attention is ggml's flash-attention kernel (internal/attention.h).
//
// Thread-safety: SequenceState is not thread-safe. Eval() calls on distinct
// states may run concurrently (they share the pool and the expert backend,
// which must then be thread-safe). Each call borrows a workspace (reused,
// uninitialised activation buffers) from a small mutex-guarded free list, so
// a step allocates nothing large after the first of its size; workspaces
// over 1 GiB are not kept.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/base/thread_pool.h"
#include "common/model/expert.h"
#include "common/model/model.h"
#include "common/model/sequence_state.h"

namespace moesplit::model {

enum class LogitsMode { kNone, kLast, kAll };

// One sequence's part of a batched step (Forward::EvalBatch): `tokens` run at
// positions state->n_past() .. and are appended to `state`; *logits receives
// n_vocab floats per requested position of THIS sequence (as Eval).
struct SequenceBatch {
  SequenceState* state = nullptr;
  absl::Span<const int32_t> tokens;
  LogitsMode mode = LogitsMode::kNone;
  std::vector<float>* logits = nullptr;
};

class Forward {
 public:
  // `experts` computes the routed experts (e.g. an InProcessExperts over the
  // same model); `pool` may be nullptr. Both must outlive this object.
  // Dense Q4_K / Q5_K / Q6_K matrices whose shape fits are copied into the packed
  // layout when quant::PackedPreferred and pack_dense (results unchanged,
  // bit for bit).
  Forward(std::shared_ptr<const Model> model, ExpertBackend* experts, ThreadPool* pool,
          bool pack_dense = true);
  ~Forward();

  const Model& model() const { return *model_; }

  // Runs `tokens` at positions state->n_past() .. and appends them to the
  // state. *logits receives n_vocab floats per requested position (all
  // tokens, the last, or none), row-major.
  // Errors, checked before any work, leave the state unchanged:
  //   InvalidArgument: empty batch, a token id outside [0, n_vocab), a state
  //     made for other hyper-parameters;
  //   OutOfRange: the batch does not fit in the state's context.
  // An error from the expert backend or a kernel also leaves the state as
  // it was (n_past and the committed recurrent states; K/V positions past
  // n_past may have been overwritten).
  absl::Status Eval(absl::Span<const int32_t> tokens, SequenceState* state, LogitsMode mode,
                    std::vector<float>* logits) const;

  // Several sequences in one step (continuous batching): the tokens of every
  // entry are concatenated for the dense matrix products, attention runs per
  // token over its own sequence's cache, a DeltaNet layer runs each
  // sequence's tokens in order over its own recurrent state, and each MoE
  // layer sends ONE
  // ExpertCall for all tokens of the step. A token's result does not depend
  // on which other tokens share the step, as long as the kernels give the
  // same bits for a row whatever the number of rows (quant::MatMul and the
  // expert backends promise that; forward_test checks EvalBatch == Eval).
  // Errors as Eval, checked for every entry before any work (then no state
  // changes); also InvalidArgument for an empty list or a state that appears
  // twice. An error during the step leaves every state as it was.
  absl::Status EvalBatch(absl::Span<const SequenceBatch> seqs) const;

  // Wall time spent in each part of the steps so far (all Evals, summed;
  // for benchmarks): the attention, DeltaNet and Mamba-2 mixers (their
  // projections included), the FFNs (MoE: router, shared expert and the wait for the
  // expert backend) and the output head (final norm and vocabulary product).
  struct PartTimes {
    double attention_s = 0, deltanet_s = 0, mamba2_s = 0, moe_s = 0, head_s = 0;
  };
  PartTimes part_times() const;

 private:
  struct Batch;
  struct Workspace;
  absl::Status Embed(absl::Span<const int32_t> tokens, float* x) const;
  absl::Status CheckEntry(const SequenceBatch& s) const;
  absl::Status Step(absl::Span<const SequenceBatch> seqs, Batch& b) const;
  absl::Status Attention(int il, Batch& b) const;
  absl::Status DeltaNet(int il, Batch& b) const;
  absl::Status Mamba2(int il, Batch& b) const;
  // Attention of the batch's tokens [t_begin, t_end) (their K/V rows written).
  void AttendHeads(int il, const Batch& b, int64_t t_begin, int64_t t_end, const float* q, float* out) const;
  absl::Status MoeFfn(int il, Batch& b) const;
  absl::Status Mla(int il, Batch& b) const;
  // MLA's per-head products: for each of t's heads h and token i < n,
  // y[(i * heads + h) * y_head ..] = W_h x[(i * heads + h) * x_head ..]
  // (t.n_in values in, t.n_out out), W_h = head h of `stacked` (t's heads
  // stacked: quant::GroupedMatMul).
  absl::Status HeadProducts(const quant::WeightView& stacked, const ExpertTensorView& t, int64_t n,
                            const float* x, int64_t x_head, float* y, int64_t y_head,
                            Workspace& ws) const;
  absl::Status DenseFfn(int il, Batch& b) const;
  // act(gate . h, up . h) then down (SwiGLU or GeGLU), or for a non-gated
  // act (IsGated false: relu^2) act(up . h) then down, gate unread; n rows of
  // h into *out.
  absl::Status GatedFfn(ExpertActivation act, const quant::WeightView& gate,
                        const quant::WeightView& up, const quant::WeightView& down,
                        const float* h, int64_t n, Workspace& ws, float* out) const;
  absl::Status SharedExpert(int il, const float* h, int64_t n, Workspace& ws) const;
  absl::Status Head(const Batch& b, absl::Span<const SequenceBatch> seqs) const;
  std::unique_ptr<Workspace> AcquireWorkspace() const;
  void ReleaseWorkspace(std::unique_ptr<Workspace> ws) const;

  // The dense matrices the products read: the model's, or packed copies
  // (quant/packed.h; same bits, faster kernels) where the CPU prefers them.
  // A layer's matrices as the forward reads them: for each row of the tensor
  // table marked CPU-packed, a packed copy where the type has a packed layout
  // (the GGUF rows otherwise); MLA's per-head matrices, all heads stacked as
  // one matrix (packed when HeadsPack). The other matrices are the GGUF rows.
  using DenseWeights = LayerTensors<quant::WeightView, NoTensor, quant::WeightView, NoTensor>;
  // The heads of t stacked as one matrix (GGUF tensors' heads are
  // contiguous); an empty view for a tensor without data.
  static quant::WeightView Stacked(const ExpertTensorView& t);
  // Whether t's stacked heads may be packed: each head whole 16-row strips
  // (a strip must not straddle two heads).
  static bool HeadsPack(const ExpertTensorView& t);
  // Bytes of w's packed copy (64-byte multiple), 0 when it stays as it is.
  static uint64_t PackedCopyBytes(const quant::WeightView& w, bool pack);
  // w's packed copy, at *arena (advanced) when arena is not null, else in a
  // buffer of its own; w itself when it is not packed.
  quant::WeightView MaybePacked(const quant::WeightView& w, bool pack, uint8_t** arena);

  std::shared_ptr<const Model> model_;
  ExpertBackend* experts_;
  ThreadPool* pool_;
  std::vector<DenseWeights> dense_;  // per layer
  quant::WeightView output_;
  // The packed copies: one arena on huge pages, as the routed experts (a
  // decode step streams every dense matrix once per token; on huge pages
  // it measured a little faster than on 4 KiB pages, see
  // tests/bench/README.md), or buffers of their own where no arena could
  // be had.
  std::shared_ptr<uint8_t[]> packed_arena_;
  std::vector<std::unique_ptr<uint8_t[]>> packed_;
  mutable std::atomic<uint64_t> next_call_id_{1};
  mutable std::atomic<uint64_t> attention_ns_{0}, deltanet_ns_{0}, mamba2_ns_{0}, moe_ns_{0},
      head_ns_{0};
  mutable std::mutex ws_mu_;
  mutable std::vector<std::unique_ptr<Workspace>> ws_free_;  // guarded by ws_mu_
};

// Greedy decoding: evaluates `prompt` (non-empty; InvalidArgument otherwise)
// at the state's n_past, then n_predict times picks argmax (ties -> lower id) of the
// last logits, reports it to `on_token` (return false to stop early) and
// feeds it back. Returns the generated ids. Stops early at a token in
// `stop_ids` (which is included in the result). Errors as Forward::Eval.
absl::StatusOr<std::vector<int32_t>> GreedyGenerate(
    const Forward& forward, SequenceState* state, absl::Span<const int32_t> prompt,
    int n_predict, absl::Span<const int32_t> stop_ids = {},
    const std::function<bool(int32_t)>& on_token = nullptr);

}  // namespace moesplit::model
