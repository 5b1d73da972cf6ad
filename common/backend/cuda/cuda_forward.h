// The GPU dense forward pass: model::Forward's contract (common/model/
// forward.h) with attention, norms, routers, shared experts and the output
// head on a CUDA device, and the routed experts through an ExpertBackend on
// the CPU. The mixer of each layer (HyperParams::layers) runs on the GPU:
//   attention: q/k/v products, QK-norm + NEOX RoPE (partial and
//        multi-section: the host-computed angle table leaves the pairs on
//        the extra position unrotated), paged attention; gated attention
//        (qwen35moe) splits the doubled q projection into queries and gates
//        and scales the heads' output by sigmoid(gate);
//   gated DeltaNet (qwen35moe): qkv / z / beta / alpha products, the gates,
//        causal conv + SiLU over the sequence's conv state, L2-normed q and
//        k heads, the recurrent delta rule over its recurrent state, the
//        gated RMSNorm, ssm_out (delta_net.cu; internal/cuda_raw.h);
//   multi-head latent attention (deepseek2), the CPU reference's absorbed
//        form: q through the q LoRA (or attn_q), the KV latent + rope key
//        (attn_kv_a_mqa, the latent's norm, NORM RoPE) written to the cache
//        as the position's one K row, each head's nope query through its
//        attn_k_b into the latent space, attention with K = that row and V
//        = its latent part, each head's result out through its attn_v_b
//        (GroupedMatVec), then attn_output;
// then a dense-FFN layer (deepseek2's leading ones): x += FFN(ffn_norm(x));
// or a MoE layer:
//   GPU: h = ffn_norm(x); router logits -> softmax top-k (ties -> lower id),
//        gpt-oss's top-k then softmax, or deepseek2's sigmoid scores with a
//        selection bias, expert groups and a weight scale
//   GPU -> host: h, ids, weights (pinned, async; an event marks them)
//   GPU: shared expert (+ sigmoid gate) queued, x += shared   (overlaps)
//   GPU: pairs whose expert is resident in an attached GpuExpertCache, and
//        in a micro-batch of at least stream_min_tokens tokens the pairs of
//        every expert with that many tokens (streamed prefill: its weights
//        are copied from the host into one of stream_buffers staging
//        buffers on a copy stream, so the copy of one expert overlaps the
//        compute of the previous):
//        x[t] += w * E(h[t])   (gather rows, mat-mul per expert, scatter-add)
//   cache: the policy sees the layer's routing (hits, misses, admissions:
//        streamed experts fill their new slot from the staging buffer, the
//        others are copied from the host on the cache's copy stream), then
//        the next layer's router applied to h predicts its experts, which
//        are prefetched the same way (micro-batches that do not stream)
//   host: ExpertBackend::Compute(ExpertCall of the remaining pairs) -> partial
//        (while the GPU computes its experts and the copies run)
//   host -> GPU: x += partial
// Weights stay in their GGUF formats on the device; every product first
// rounds its activations to the weight type's vec_dot_type (Q8_0 / Q8_K
// blocks, F16, BF16) as llama.cpp and the CPU reference do, then runs an
// in-kernel-dequantising matrix kernel (tokens in groups of 8). Every kernel
// computes a token's values independently of the batch it is in, so prefill,
// micro-batches and decode give the same logits bit for bit. Attention reads a
// paged KV cache (f16, q8_0 or q4_0; CudaKvCache) through a block table.
//
// Memory: one plan::MemoryPlan (common/plan) is the only input of the
// allocations: the dense weights and the workspace here, each sequence's
// state (CreateCache), the hot-expert cache's slots (the dense service's
// runner). Create() refuses with RESOURCE_EXHAUSTED (allocating nothing)
// when the plan does not fit the budget (options.gpu_memory_budget, else the
// device's free memory), and sets the device's budget to it.
//
// Thread-safety: one Eval at a time per CudaForward (it owns one stream and
// one workspace); not thread-safe.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/backend/backend.h"
#include "common/backend/cuda/cuda_backend.h"
#include "common/backend/cuda/expert_cache.h"
#include "common/model/expert.h"
#include "common/model/forward.h"
#include "common/model/model.h"
#include "common/plan/memory_plan.h"
#include "common/plan/prefill_switch.h"

namespace moesplit::cuda {

namespace internal {
struct DeviceMatrixBuf;  // internal/forward_buffers.h
}  // namespace internal

// What a CudaForward is asked for. The sizes (n_ctx .. stream_buffers,
// gpu_memory_budget) are a memory plan's options (PlanFor); the forward
// allocates from that plan only. The rest are run-time choices.
struct CudaForwardOptions {
  int64_t n_ctx = defaults::kContext;    // KV positions planned for one sequence
  GgmlType kv_type = GgmlType::kF16;     // F16, Q8_0 or Q4_0
  int kv_page_size = plan::kGpuKvPage;   // positions per KV page
  int64_t max_batch = defaults::kStepTokens;  // tokens per micro-batch of Eval
  uint64_t gpu_memory_budget = 0;        // 0: the device's free memory
  // Streamed prefill: an expert with at least this many tokens in one
  // micro-batch is computed on the GPU from a streamed copy of its weights.
  // 0: never; MeasurePrefillSwitch() sets it from measured rates.
  int64_t stream_min_tokens = 0;
  int stream_buffers = 2;                // staging buffers (>= 2 to overlap)
  // Page-lock the model's routed-expert tensors on the host (cudaHostRegister)
  // so that streamed and cache copies run at full speed; when the system
  // refuses, copies go from pageable memory (stats: expert_source_pinned).
  bool pin_expert_source = false;
};

// The plan of one sequence, without margin, that `options` ask for on
// `device` (a budget of 0: its free memory plus what it holds already).
// Errors: PlanMemory's (InvalidArgument for bad sizes or a KV type other
// than F16, Q8_0, Q4_0; ResourceExhausted when it does not fit).
absl::StatusOr<plan::MemoryPlan> PlanFor(const model::Model& model,
                                         const CudaForwardOptions& options,
                                         backend::Device* device);

// One sequence's state on the device (the GPU counterpart of
// model::SequenceState, from the same layer specs; cuda_kv_cache.cc):
//   - attention layers (plain or gated): keys and values in pages of
//     page_size positions; position p of the sequence is in page
//     block_table[p / page_size]. By default the table is 0, 1, 2, ... (the
//     pages in order); a paged-KV allocator may set its own. DeltaNet layers
//     have no KV (k(l) / v(l) REQUIRE an attention layer).
//   - sliding-window layers (gpt-oss) keep a ring of the window plus one
//     step's tokens (max_step; plan::GpuKvLayout): their own block table
//     maps page i to ring page i % ring pages, so the kernels address them
//     as any layer. Rewinding a sequence with rings is possible only as far
//     back as the ring still holds the window (see Truncate).
//   - gated-DeltaNet layers: two buffers of f32 each, the conv state
//     (channels x (kernel - 1), channel-major, oldest tap first) followed by
//     the recurrent state (value heads x head_v x head_k, row j = value
//     dimension j): model::SequenceState's layout.
// Commit on success, as the CPU state: a step reads the current buffer
// (conv_in / recurrent_in) and writes the other one (conv_out /
// recurrent_out; a sequence whose tokens span several micro-batches of one
// step updates it in place after its first); Commit() makes it current. A
// failed step never commits, so n_past and the current buffers stay as
// they were (K/V rows past n_past may have been overwritten). A fresh
// state (after Create, Clear or Truncate(0)) has no current buffer: the
// *_in views are null and the kernels read zeros, so clearing costs no
// device work.
// Rewinding: K/V positions can be forgotten; a recurrent state cannot, and
// the GPU keeps no checkpoints: with DeltaNet layers Truncate(n) succeeds
// only for n == n_past or n == 0 (FailedPrecondition otherwise, nothing
// changed). With sliding-window rings a position n can be resumed from only
// while its ring still holds the window before it: E - n <= keep, E the
// furthest position written (a failed step's writes count), keep = ring
// positions - window (>= max_step - 1). Truncate(n) refuses otherwise
// (FailedPrecondition), and a step on a cache whose failed step overwrote
// the window before n_past is refused (WindowIntact) rather than computed
// from overwritten rows; Clear() restores it.
// Not thread-safe; one step at a time.
class CudaKvCache {
 public:
  // InvalidArgument: n_ctx < 1, page_size < 1, unsupported type, rows not a
  // multiple of the type's block; RESOURCE_EXHAUSTED: the device refused.
  // max_step: the most tokens of this sequence one forward pass writes before
  // they attend (the forward's max_batch); sizes the sliding-window rings.
  static absl::StatusOr<std::unique_ptr<CudaKvCache>> Create(backend::Device* device,
                                                             const model::HyperParams& hp,
                                                             int64_t n_ctx, GgmlType type,
                                                             int page_size, int64_t max_step);
  // Bytes Create would allocate (for planning): KvBytes + RecurrentBytes.
  static absl::StatusOr<uint64_t> Bytes(const model::HyperParams& hp, int64_t n_ctx,
                                        GgmlType type, int page_size, int64_t max_step);
  // The attention layers' pages and the block tables (0 without attention
  // layers): plan::GpuKvLayout's bytes.
  static absl::StatusOr<uint64_t> KvBytes(const model::HyperParams& hp, int64_t n_ctx,
                                          GgmlType type, int page_size, int64_t max_step);
  // Both buffers of every DeltaNet layer (plan::MemoryPlan::recurrent_state
  // for one sequence).
  static uint64_t RecurrentBytes(const model::HyperParams& hp);

  int64_t n_ctx() const { return n_ctx_; }
  int64_t n_past() const { return n_past_; }
  int64_t n_pages() const { return n_pages_; }
  int page_size() const { return page_size_; }
  GgmlType type() const { return type_; }
  uint64_t bytes() const { return bytes_; }
  bool Matches(const model::HyperParams& hp) const;

  void Clear() {
    n_past_ = 0;
    written_end_ = 0;
    fresh_ = true;
  }
  absl::Status Truncate(int64_t n);
  absl::Status CheckRoom(int64_t n_new) const;
  // n_past += n_new; the written recurrent buffers become current.
  void Commit(int64_t n_new);
  // The forward is about to write positions up to `end` - 1 (see the class
  // comment).
  void NoteWrite(int64_t end) { written_end_ = std::max(written_end_, end); }
  // OK when the sliding-window rings still hold the window before n_past
  // (always without rings); FailedPrecondition otherwise.
  absl::Status WindowIntact() const;

  // Sets the block table: ceil(n_ctx / page_size) distinct page ids in [0,
  // n_pages). InvalidArgument otherwise (nothing changed). Blocks until
  // copied.
  absl::Status SetBlockTable(absl::Span<const int32_t> pages);

  // Prefix-cache copies (services/dense/prefix_cache.h), device <-> host,
  // blocking, in the cache's own element type (a q8_0 cache exports q8_0
  // rows): for each attention layer in order, its K rows of positions
  // [begin, end) then its V rows (kv_bytes_per_position() * (end - begin)
  // bytes, following the block table); the recurrent state: for each
  // DeltaNet layer, the committed conv then recurrent state
  // (model::SequenceState's layout, recurrent_bytes() bytes).
  uint64_t kv_bytes_per_position() const;
  uint64_t recurrent_bytes() const;
  // InvalidArgument unless 0 <= begin <= end <= n_past (CheckExport).
  absl::Status ExportKv(int64_t begin, int64_t end, uint8_t* out) const;
  absl::Status CheckExport(int64_t begin, int64_t end) const;
  // Writes rows at [pos, pos + bytes / kv_bytes_per_position()); n_past unchanged.
  absl::Status ImportKv(int64_t pos, const uint8_t* in, uint64_t bytes);
  // The same two with the rows in this device's memory (device-to-device
  // copies: the prefix cache's device tier).
  absl::Status ExportKvToDevice(int64_t begin, int64_t end, uint8_t* out) const;
  absl::Status ImportKvFromDevice(int64_t pos, const uint8_t* in, uint64_t bytes);
  // Zeros when fresh.
  absl::Status ExportRecurrent(uint8_t* out) const;
  // n_past = n with this committed recurrent state (empty without DeltaNet
  // layers). InvalidArgument for n outside [0, n_ctx] or a wrong size.
  absl::Status Resume(int64_t n, const uint8_t* recurrent, uint64_t bytes);

  // Device views for the kernels (internal use by CudaForward). An MLA
  // layer keeps K rows only (the latent and the rope key; prefix-cache
  // exports carry no V rows): its V is the latent at the start of each K
  // row, so v() is k() and v_row_bytes() k_row_bytes().
  uint8_t* k(int layer) const;
  uint8_t* v(int layer) const;
  uint64_t k_row_bytes() const { return k_row_bytes_; }
  uint64_t v_row_bytes() const { return v_row_bytes_ > 0 ? v_row_bytes_ : k_row_bytes_; }
  // The block table layer `layer`'s kernels read (a ring's for a
  // sliding-window layer).
  const int32_t* block_table(int layer) const;
  // Positions layer `layer` holds (n_pages x page_size, or its ring's).
  int64_t layer_positions(int layer) const;
  // DeltaNet layers: the committed states (null when fresh) and the buffers
  // the running step writes.
  const float* conv_in(int layer) const;
  const float* recurrent_in(int layer) const;
  float* conv_out(int layer) const;
  float* recurrent_out(int layer) const;

 private:
  CudaKvCache() = default;
  bool recurrent() const;
  backend::Device* device_ = nullptr;
  int64_t n_ctx_ = 0, n_past_ = 0, n_pages_ = 0;
  int page_size_ = 0;
  GgmlType type_ = GgmlType::kF16;
  uint64_t k_row_bytes_ = 0, v_row_bytes_ = 0, bytes_ = 0;
  int64_t conv_floats_ = 0, ssm_floats_ = 0;
  std::vector<model::MixerKind> kinds_;
  std::vector<std::unique_ptr<backend::Buffer>> k_, v_;  // per layer; null for DeltaNet
  std::vector<std::unique_ptr<backend::Buffer>> rec_[2];  // per layer; null for attention
  int cur_ = 0;        // rec_[cur_] is committed unless fresh_
  bool fresh_ = true;  // no step committed since Create / Clear
  std::unique_ptr<backend::Buffer> table_;  // null without attention layers
  // Sliding-window rings: per layer its pages (0 for DeltaNet), the ring
  // tables by ring size, and how far back Truncate may go (-1: no rings).
  std::vector<int64_t> layer_pages_;
  std::vector<std::pair<int64_t, std::unique_ptr<backend::Buffer>>> ring_tables_;
  std::vector<int> ring_of_layer_;  // index into ring_tables_, -1 for none
  int64_t ring_keep_ = -1;
  int64_t written_end_ = 0;
  std::vector<int32_t> host_table_;         // the block table as set
  // Copies positions [pos, pos + n) of every attention layer (ExportKv's
  // layout) between the pages and `other`: to it (out) or from it; `other`
  // in host memory or, with other_on_device, in this device's.
  absl::Status CopyRows(int64_t pos, int64_t n, uint8_t* other, bool out,
                        bool other_on_device) const;
};

// Cumulative counters of one CudaForward.
struct CudaForwardStats {
  uint64_t evals = 0;
  uint64_t tokens = 0;
  uint64_t expert_calls = 0;
  double expert_seconds = 0;  // host time inside ExpertBackend::Compute
  uint64_t expert_cache_hits = 0;    // (token, expert) pairs computed on the GPU
  uint64_t expert_cache_misses = 0;  // pairs sent to the ExpertBackend
  uint64_t streamed_experts = 0;     // experts computed from a streamed copy
  uint64_t streamed_pairs = 0;       // their (token, expert) pairs
  uint64_t streamed_bytes = 0;       // weights copied host -> device for them
  bool expert_source_pinned = false;
  // Host time per phase (Eval's wall time = their sum, up to the small rest):
  double eval_seconds = 0;     // all of Eval
  double enqueue_seconds = 0;  // queueing the GPU work of attention, norm and router
  double gpu_wait_seconds = 0; // waiting for that work and the copy of h, ids, weights
  double host_seconds = 0;     // building the expert call, cached experts, partial upload
  double head_seconds = 0;     // output norm + head, logits copy included
};

// One sequence's part of a batched step (CudaForward::EvalBatch), as
// model::SequenceBatch: `tokens` run at positions cache->n_past() .. and are
// appended to `cache`; *logits receives n_vocab floats per requested
// position of this sequence.
struct CudaSequenceBatch {
  CudaKvCache* cache = nullptr;
  absl::Span<const int32_t> tokens;
  model::LogitsMode mode = model::LogitsMode::kNone;
  std::vector<float>* logits = nullptr;
};

class CudaForward {
 public:
  // Checks that the model is supported (qwen3moe / qwen2moe / qwen35moe /
  // gpt-oss shapes: head_dim a multiple of 32 up to 256 with head_dim_k ==
  // head_dim_v and NEOX RoPE; deepseek2's MLA: one latent KV head of up to
  // 576 values, a latent of a power of two from 32 to 512, NORM RoPE, an F16
  // KV cache; DeltaNet heads of equal key and value size, a multiple of 16
  // up to 256, conv kernel 2..8; n_expert <= 1024, at most 64 expert groups;
  // every weight in a format the kernels decode; not yet gemma4's per-layer
  // attention geometry, RoPE divisors, V norm, GeGLU and extra FFN norms;
  // InvalidArgument / Unimplemented otherwise), checks the plan against the budget, uploads the
  // dense weights. `device` must be a CUDA device; `experts` and `device`
  // must outlive the object.
  static absl::StatusOr<std::unique_ptr<CudaForward>> Create(
      std::shared_ptr<const model::Model> model, model::ExpertBackend* experts,
      backend::Device* device, const CudaForwardOptions& options);
  // The same from a plan made for this model (plan::PlanMemory): the dense
  // weights and the workspace are allocated as `plan` says, CreateCache
  // gives a sequence state of plan.options' context, KV type and pages; the
  // sizes in `options` are not read. ResourceExhausted when the device
  // already holds so much that the plan's allocations exceed its budget.
  static absl::StatusOr<std::unique_ptr<CudaForward>> Create(
      std::shared_ptr<const model::Model> model, model::ExpertBackend* experts,
      backend::Device* device, const plan::MemoryPlan& plan, const CudaForwardOptions& options);
  ~CudaForward();

  const model::Model& model() const { return *model_; }
  // The plan it was allocated from.
  const plan::MemoryPlan& plan() const { return plan_; }
  const CudaForwardStats& stats() const { return stats_; }

  // Routed experts resident in `cache` (made for this model on this device)
  // are computed on the GPU from now on, and the forward drives its policy
  // (see the file comment); nullptr detaches.
  void AttachExpertCache(std::shared_ptr<GpuExpertCache> cache) {
    expert_cache_ = std::move(cache);
  }
  GpuExpertCache* expert_cache() const { return expert_cache_.get(); }

  // Measures the three rates of the streamed-prefill switch-over (plan::
  // ComputePrefillSwitch) on this machine: host -> device copies of layer
  // 0's experts from their real source, the GPU computing one expert for
  // `tokens` tokens, and the ExpertBackend computing a call of `tokens`
  // tokens; then sets stream_min_tokens to the threshold (0 when the GPU
  // never wins). The KV cache is not touched; the backend gets one call.
  absl::StatusOr<plan::PrefillSwitch> MeasurePrefillSwitch(int64_t tokens = 256);
  void set_stream_min_tokens(int64_t n) { options_.stream_min_tokens = n < 0 ? 0 : n; }
  int64_t stream_min_tokens() const { return options_.stream_min_tokens; }
  // The rates of the last MeasurePrefillSwitch (zeros before).
  const plan::PrefillRates& prefill_rates() const { return prefill_rates_; }

  // A KV cache of options.n_ctx positions on this forward's device.
  absl::StatusOr<std::unique_ptr<CudaKvCache>> CreateCache() const;

  // As model::Forward::Eval (errors checked before any work leave the cache
  // unchanged; n_past only advances on success).
  absl::Status Eval(absl::Span<const int32_t> tokens, CudaKvCache* cache,
                    model::LogitsMode mode, std::vector<float>* logits);
  // Several sequences in one step (continuous batching): their tokens share
  // the micro-batches, the products and one expert call per layer; each
  // attends its own cache. A token's logits are those Eval gives it alone,
  // bit for bit. Errors as Eval, checked for every entry before any work;
  // also InvalidArgument for no entries or a cache listed twice. n_past of
  // every cache advances only when the whole step succeeds.
  absl::Status EvalBatch(absl::Span<const CudaSequenceBatch> seqs);

  struct Weights;
  struct Workspace;

 private:
  CudaForward() = default;
  // A sequence's run of tokens inside a micro-batch: rows [first, first +
  // n) of the micro-batch, at positions pos0 .. of `cache`.
  struct Segment {
    CudaKvCache* cache = nullptr;
    int64_t first = 0, n = 0, pos0 = 0;
    size_t entry = 0;  // index into EvalBatch's entries
  };
  absl::Status EvalChunk(absl::Span<const int32_t> tokens, absl::Span<const Segment> segs);
  absl::Status Attention(int il, int64_t n, absl::Span<const Segment> segs);
  absl::Status DeltaNet(int il, int64_t n, absl::Span<const Segment> segs);
  // Multi-head latent attention (deepseek2), in the CPU reference's absorbed
  // form (common/model/forward.cc): the KV cache keeps the normed latent and
  // the roped key per position, each query head attends to it through
  // attn_k_b and its output leaves through attn_v_b (GroupedMatVec).
  absl::Status Mla(int il, int64_t n, absl::Span<const Segment> segs);
  absl::Status MoeFfn(int il, int64_t n);
  // A dense-FFN layer (deepseek2's leading layers): x += FFN(ffn_norm(x)).
  absl::Status DenseFfn(int il, int64_t n);
  // ws.o = down . SwiGLU(gate . ws.h, up . ws.h) for n rows (the shared
  // expert and the dense FFN).
  absl::Status SwiGluFfn(const internal::DeviceMatrixBuf& gate, const internal::DeviceMatrixBuf& up,
                         const internal::DeviceMatrixBuf& down, int64_t n);
  // Computes the entries of `call` whose expert is resident in the cache or
  // streamed on the GPU (x += w * E(h)), removes them from `call`, and
  // drives the cache's policy for layer il.
  // start_host (may be empty) is called once the call holds only the host's
  // share, before streamed copies are queued.
  absl::Status GpuExperts(int il, model::ExpertCall* call,
                          const std::function<void()>& start_host);
  // Queues x[rows] += w * E(h[rows]) for the `cnt` rows at ws.ex_idx + off.
  absl::Status ExpertOnGpu(const GpuExpertCache::Weights& w, int il, int expert, int64_t off,
                           int64_t cnt);
  absl::Status Head(int64_t first, int64_t rows, float* out);

  std::shared_ptr<const model::Model> model_;
  model::ExpertBackend* experts_ = nullptr;
  backend::Device* device_ = nullptr;
  CudaForwardOptions options_;
  plan::MemoryPlan plan_;
  std::unique_ptr<backend::Stream> stream_;
  std::unique_ptr<backend::Event> copied_;
  std::unique_ptr<Weights> w_;
  std::unique_ptr<Workspace> ws_;
  std::shared_ptr<GpuExpertCache> expert_cache_;
  std::unique_ptr<backend::Stream> stage_copy_;           // streamed prefill copies
  std::vector<std::unique_ptr<backend::Buffer>> staging_;
  std::vector<std::unique_ptr<backend::Event>> stage_ready_, stage_free_;
  int64_t next_stage_ = 0;
  bool experts_on_gpu_ = false;
  plan::PrefillRates prefill_rates_;  // every routed expert in a format the kernels decode
  std::unique_ptr<HostRegistration> pinned_source_;
  CudaForwardStats stats_;
  uint64_t next_call_id_ = 1;
  std::chrono::steady_clock::time_point layer_start_;
};

// The dense service's device side, allocated from one memory plan and
// nothing else: the forward (dense weights, workspace), one sequence state
// per plan.options.n_parallel, and the hot-expert cache with
// plan.expert_cache.slots (attached to the forward; none for 0 slots).
// Together they allocate plan.allocated_bytes(). Errors: Create's and the
// device's (ResourceExhausted); nothing stays allocated on failure.
struct GpuDense {
  std::unique_ptr<CudaForward> forward;
  std::vector<std::unique_ptr<CudaKvCache>> states;
  std::shared_ptr<GpuExpertCache> expert_cache;
};
absl::StatusOr<GpuDense> AllocateGpuDense(std::shared_ptr<const model::Model> model,
                                          model::ExpertBackend* experts, backend::Device* device,
                                          const plan::MemoryPlan& plan,
                                          const CudaForwardOptions& run);

}  // namespace moesplit::cuda
