// CPU reference forward pass of an MoE transformer (qwen3moe / qwen2moe
// family) and its KV cache.
//
// Per block, for a batch of n tokens at positions n_past .. n_past + n - 1:
//   h   = RMSNorm(x) * attn_norm
//   q,k,v = Wq h (+bq), Wk h (+bk), Wv h (+bv)
//   q,k = per-head RMSNorm * q_norm / k_norm        (when present)
//   q,k = NEOX RoPE(pos)                            (theta, scaling: RopeParams)
//   K,V cache[pos] = f16(k), f16(v)
//   a   = softmax(q . K^T / sqrt(head_dim_k), causal) . V   per head, GQA,
//         as llama.cpp's CPU flash-attention kernel computes it (f16 query,
//         online softmax, f16 accumulator; internal/attention.h)
//   x  += Wo a
//   h   = RMSNorm(x) * ffn_norm
//   p   = softmax(W_router h); top-k (ties -> lower id); renormalise when
//         hparams.norm_topk
//   x  += ExpertBackend(h, top-k ids, weights)
//         + sigmoid(w_shexp_gate . h) * SharedExpert(h)   (when present)
// then logits = W_out (RMSNorm(x) * output_norm).
//
// Arithmetic follows llama.cpp's CPU backend (AVX-512 build) so that the
// oracle fixtures match to the bit where the kernels allow: matrix products
// go through quant::MatMul (activations converted to the weight's
// vec_dot_type); RMSNorm sums squares in double; SwiGLU and the router
// softmax use ggml's vectorised exp in blocks of 16 (internal/ops.h);
// attention is ggml's flash-attention kernel (internal/attention.h).
//
// Thread-safety: KvCache is not thread-safe. Eval() calls on distinct caches
// may run concurrently (they share the pool and the expert backend, which
// must then be thread-safe). Each call borrows a workspace (reused,
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

namespace moesplit::model {

// Keys and values of every layer for up to n_ctx positions, stored as IEEE
// f16 (like llama.cpp's default cache), position-major:
//   K of layer l, position p: n_head_kv * head_dim_k values at k(l, p);
//   V of layer l, position p: n_head_kv * head_dim_v values at v(l, p).
class KvCache {
 public:
  // InvalidArgument for n_ctx < 1; ResourceExhausted when the allocation fails.
  static absl::StatusOr<std::unique_ptr<KvCache>> Create(const HyperParams& hp,
                                                         int64_t n_ctx);

  int64_t n_ctx() const { return n_ctx_; }
  int64_t n_past() const { return n_past_; }
  int n_layer() const { return static_cast<int>(k_.size()); }
  uint64_t bytes() const;
  // Whether the layout fits a model with these hyper-parameters.
  bool Matches(const HyperParams& hp) const;

  // Forgets every position (contents are overwritten by later Evals).
  void Clear() { n_past_ = 0; }
  // Keeps the first n positions. InvalidArgument when n > n_past().
  absl::Status Truncate(int64_t n);
  // OkStatus when n_new more positions fit; OutOfRange naming n_past, n_new
  // and n_ctx otherwise.
  absl::Status CheckRoom(int64_t n_new) const;

  // Raw storage (the forward pass writes positions >= n_past, then Commit).
  uint16_t* k(int layer, int64_t pos) { return k_[layer].get() + pos * k_row_; }
  const uint16_t* k(int layer, int64_t pos) const { return k_[layer].get() + pos * k_row_; }
  uint16_t* v(int layer, int64_t pos) { return v_[layer].get() + pos * v_row_; }
  const uint16_t* v(int layer, int64_t pos) const { return v_[layer].get() + pos * v_row_; }
  // REQUIRES: CheckRoom(n_new).ok().
  void Commit(int64_t n_new) { n_past_ += n_new; }

 private:
  KvCache() = default;
  int64_t n_ctx_ = 0;
  int64_t n_past_ = 0;
  int64_t k_row_ = 0;  // n_head_kv * head_dim_k
  int64_t v_row_ = 0;  // n_head_kv * head_dim_v
  // Left uninitialised: a large allocation's pages are only touched (become
  // resident) as positions are written, so a sequence that reserves the
  // whole context costs memory for what it uses.
  std::vector<std::unique_ptr<uint16_t[]>> k_, v_;
};

enum class LogitsMode { kNone, kLast, kAll };

// One sequence's part of a batched step (Forward::EvalBatch): `tokens` run at
// positions cache->n_past() .. and are appended to `cache`; *logits receives
// n_vocab floats per requested position of THIS sequence (as Eval).
struct SequenceBatch {
  KvCache* cache = nullptr;
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

  // Runs `tokens` at positions cache->n_past() .. and appends them to the
  // cache. *logits receives n_vocab floats per requested position (all
  // tokens, the last, or none), row-major.
  // Errors, checked before any work, leave the cache unchanged:
  //   InvalidArgument: empty batch, a token id outside [0, n_vocab), a cache
  //     made for other hyper-parameters;
  //   OutOfRange: the batch does not fit in the cache.
  // An error from the expert backend or a kernel also leaves n_past unchanged
  // (positions past n_past may have been overwritten).
  absl::Status Eval(absl::Span<const int32_t> tokens, KvCache* cache, LogitsMode mode,
                    std::vector<float>* logits) const;

  // Several sequences in one step (continuous batching): the tokens of every
  // entry are concatenated for the dense matrix products, attention runs per
  // token over its own sequence's cache, and each MoE layer sends ONE
  // ExpertCall for all tokens of the step. A token's result does not depend
  // on which other tokens share the step, as long as the kernels give the
  // same bits for a row whatever the number of rows (quant::MatMul and the
  // expert backends promise that; forward_test checks EvalBatch == Eval).
  // Errors as Eval, checked for every entry before any work (then no cache
  // changes); also InvalidArgument for an empty list or a cache that appears
  // twice. An error during the step leaves every n_past unchanged.
  absl::Status EvalBatch(absl::Span<const SequenceBatch> seqs) const;

 private:
  struct Batch;
  struct Workspace;
  absl::Status Embed(absl::Span<const int32_t> tokens, float* x) const;
  absl::Status CheckEntry(const SequenceBatch& s) const;
  absl::Status Step(absl::Span<const SequenceBatch> seqs, Batch& b) const;
  absl::Status Attention(int il, Batch& b) const;
  void AttendHeads(int il, const Batch& b, const float* q, float* out) const;
  absl::Status MoeFfn(int il, Batch& b) const;
  absl::Status SharedExpert(int il, const float* h, int64_t n, Workspace& ws) const;
  absl::Status Head(const Batch& b, absl::Span<const SequenceBatch> seqs) const;
  std::unique_ptr<Workspace> AcquireWorkspace() const;
  void ReleaseWorkspace(std::unique_ptr<Workspace> ws) const;

  // The dense matrices the products read: the model's, or packed copies
  // (quant/packed.h; same bits, faster kernels) where the CPU prefers them.
  struct DenseWeights {
    quant::WeightView wq, wk, wv, wo, shexp_gate, shexp_up, shexp_down;
  };
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
  // decode step streams every dense matrix once per token; 16 Q4_K matrices
  // of 4.7 MB read back to back ran 0.9-1.2x, ~1.05x on average, of the
  // speed of the same on 4 KiB pages on a noisy 2-vCPU VM), or buffers of
  // their own where no arena could be had.
  std::shared_ptr<uint8_t[]> packed_arena_;
  std::vector<std::unique_ptr<uint8_t[]>> packed_;
  mutable std::atomic<uint64_t> next_call_id_{1};
  mutable std::mutex ws_mu_;
  mutable std::vector<std::unique_ptr<Workspace>> ws_free_;  // guarded by ws_mu_
};

// Greedy decoding: evaluates `prompt` (non-empty; InvalidArgument otherwise)
// at the cache's n_past, then n_predict times picks argmax (ties -> lower id) of the
// last logits, reports it to `on_token` (return false to stop early) and
// feeds it back. Returns the generated ids. Stops early at a token in
// `stop_ids` (which is included in the result). Errors as Forward::Eval.
absl::StatusOr<std::vector<int32_t>> GreedyGenerate(
    const Forward& forward, KvCache* cache, absl::Span<const int32_t> prompt,
    int n_predict, absl::Span<const int32_t> stop_ids = {},
    const std::function<bool(int32_t)>& on_token = nullptr);

}  // namespace moesplit::model
