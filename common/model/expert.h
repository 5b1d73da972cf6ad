// The routed-expert interface: the forward pass hands each MoE layer's
// routed-expert work to an ExpertBackend as one call and gets its partial
// back. A call is plain data (ExpertCall owns it; ExpertCallView points at
// someone else's, e.g. a shared-memory slot) so that a backend can carry it
// across a process boundary unchanged, and compute from wherever it lies
// into wherever the caller wants the result (ComputeInto), without copies.
//
// ExpertCall (one layer, one batch):
//   1. call_id        caller-chosen id, echoed in the result
//   2. layer          0 <= layer < n_layer
//   3. n_tokens       >= 0
//   4. d              the model's n_embd
//   5. hidden         n_tokens x d f32, row-major: the FFN-normed hidden state
//   6. token_offsets  CSR, n_tokens + 1 entries, token_offsets[0] = 0,
//                     non-decreasing; token t uses entries
//                     [token_offsets[t], token_offsets[t+1]) of
//   7. expert_ids     0 <= id < n_expert, and
//   8. weights        finite f32 routing weights (same length as expert_ids)
// ExpertResult:
//   1. call_id        = the call's
//   2. partial        n_tokens x d f32:
//                     partial[t] = sum_k weights[k] * E_{expert_ids[k]}(hidden[t])
//                     over token t's entries k, where
//                     E(h) = W_down . act(W_gate . h + b_gate, W_up . h + b_up) + b_down,
//                     summed per token in its entries' order; act and the
//                     biases are the model's (arch.h ExpertFfnSpec: SiLU(g) * u
//                     without biases for the Qwen families, gpt-oss's clamped
//                     SwiGLU with biases).
//
// InProcessExperts computes the call from the Model's routed-expert tensors
// as one fused pass (see the class comment): activations are converted to
// the weights' vec_dot_type once per call (as llama.cpp does), gate/up
// rows of all routed experts are spread over the ThreadPool, then down rows.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/base/thread_pool.h"
#include "common/model/model.h"

namespace moesplit::model {

struct ExpertCall {
  uint64_t call_id = 0;
  int32_t layer = 0;
  int32_t n_tokens = 0;
  int32_t d = 0;
  std::vector<float> hidden;            // n_tokens x d (the ffn-normed hidden state)
  std::vector<uint32_t> token_offsets;  // CSR, n_tokens + 1
  std::vector<int32_t> expert_ids;
  std::vector<float> weights;
};

// An ExpertCall's fields over memory someone else owns: an ExpertCall (it
// converts implicitly), a shared-memory request slot, a decoded message.
// Backends compute from it without copying; the memory must stay valid and
// unchanged until the call's result is written.
struct ExpertCallView {
  uint64_t call_id = 0;
  int32_t layer = 0;
  int32_t n_tokens = 0;
  int32_t d = 0;
  absl::Span<const float> hidden;
  absl::Span<const uint32_t> token_offsets;
  absl::Span<const int32_t> expert_ids;
  absl::Span<const float> weights;

  ExpertCallView() = default;
  ExpertCallView(const ExpertCall& c)  // NOLINT: implicit, as a span from a vector
      : call_id(c.call_id), layer(c.layer), n_tokens(c.n_tokens), d(c.d), hidden(c.hidden),
        token_offsets(c.token_offsets), expert_ids(c.expert_ids), weights(c.weights) {}
};
// An owning copy of `view` (what a recorder keeps).
ExpertCall CopyCall(const ExpertCallView& view);

// The routing entries of tokens [t0, t1) of `call` whose expert keep(e)
// accepts, in order, as CSR: *offsets gets t1 - t0 + 1 entries starting at 0.
// Returns how many entries were kept. (How a call is split between workers,
// expert-id shards of one worker, and the GPU expert cache.)
template <typename Keep>
size_t FilterRouting(const ExpertCallView& call, int t0, int t1, Keep keep,
                     std::vector<uint32_t>* offsets, std::vector<int32_t>* ids,
                     std::vector<float>* weights) {
  offsets->assign(1, 0);
  ids->clear();
  weights->clear();
  for (int t = t0; t < t1; ++t) {
    for (uint32_t k = call.token_offsets[t]; k < call.token_offsets[t + 1]; ++k) {
      if (!keep(call.expert_ids[k])) continue;
      ids->push_back(call.expert_ids[k]);
      weights->push_back(call.weights[k]);
    }
    offsets->push_back(static_cast<uint32_t>(ids->size()));
  }
  return ids->size();
}

struct ExpertResult {
  uint64_t call_id = 0;
  std::vector<float> partial;  // n_tokens x d, sum_k w_k * expert_k(h)
  // Set by remote backends: nanoseconds the worker(s) spent on the call, from
  // taking the request to its result written back (for calls split over
  // workers or chunks: the slowest worker of each chunk, summed). The rest
  // of a round trip is queueing and hand-off. 0 where not measured.
  uint64_t worker_ns = 0;
};

class ExpertBackend {
 public:
  virtual ~ExpertBackend() = default;
  // Computes `call` into partial[0 .. n_tokens * d) (the caller's memory,
  // not overlapping the call's); *worker_ns as ExpertResult::worker_ns (0
  // where not measured). InvalidArgument for a call that breaks the contract
  // above; on any error the partial is unspecified.
  virtual absl::Status ComputeInto(const ExpertCallView& call, float* partial,
                                   uint64_t* worker_ns) = 0;
  // ComputeInto into *result (partial resized, call_id set).
  absl::Status Compute(const ExpertCallView& call, ExpertResult* result);

  // The same computation in two halves, so that the caller can work while
  // it runs (the dense side's shared expert while a worker computes the
  // routed ones): Start hands the call over, Finish waits for it and has
  // written the partial. The call's memory and `partial` must stay valid,
  // and the call unchanged, until Finish returns; one call at a time (Start
  // again only after Finish). The default computes in Start (ComputeInto)
  // and returns that status from Finish: backends that compute in the
  // caller's process and threads gain nothing from overlapping.
  virtual absl::Status Start(const ExpertCallView& call, float* partial, uint64_t* worker_ns);
  virtual absl::Status Finish();

 private:
  absl::Status started_;  // the default Start's status, for Finish
};

// The gate, up and down tensors of one layer's routed experts, and their
// biases when the model has them (empty otherwise): the store's experts
// only, its first expert's first (n_ff floats per expert for gate and up,
// n_embd for down).
struct LayerExperts {
  ExpertTensorView gate, up, down;
  std::vector<float> gate_b{}, up_b{}, down_b{};
};
// The biases of experts [eb, ee) of `lw` (LayerExperts' layout).
void SliceExpertBiases(const LayerWeights& lw, int eb, int ee, int64_t n_ff, int64_t d,
                       LayerExperts* le);

// Routed-expert tensors of a block of layers [layer_begin, layer_end) and
// experts [expert_begin, expert_end): the whole model (views into its
// mapping), or a shard copied into memory the caller owns (an expert-worker).
// Expert e of layer l is gate(l).Expert(e - expert_begin()), and so on.
// Thread-safe: immutable.
class ExpertStore {
 public:
  // Every layer and expert of `model`; shares ownership of it.
  explicit ExpertStore(std::shared_ptr<const Model> model);
  // A shard. `layers[i]` holds layer layer_begin + i with n_expert() ==
  // expert_end - expert_begin experts each; `owner` keeps their memory alive.
  ExpertStore(std::vector<LayerExperts> layers, int n_layer_total, int n_expert_total,
              int layer_begin, int expert_begin, int64_t d, int64_t n_ff,
              std::shared_ptr<const void> owner = nullptr, ExpertFfnSpec ffn = {});

  int n_layer() const { return n_layer_total_; }       // the model's
  int64_t n_expert() const { return n_expert_total_; }  // the model's
  int layer_begin() const { return layer_begin_; }
  int layer_end() const { return layer_begin_ + static_cast<int>(layers_.size()); }
  int expert_begin() const { return expert_begin_; }
  int expert_end() const { return expert_end_; }
  bool Owns(int layer, int expert) const {
    return layer >= layer_begin() && layer < layer_end() && expert >= expert_begin_ &&
           expert < expert_end_;
  }
  int64_t d() const { return d_; }
  int64_t n_ff() const { return n_ff_; }
  const ExpertFfnSpec& ffn() const { return ffn_; }
  // REQUIRES: layer_begin() <= layer < layer_end().
  const LayerExperts& Layer(int layer) const { return At(layer); }
  // For a store whose experts change in place (the expert-worker's RAM tier
  // refills slots and their biases between calls): the caller synchronises
  // writes with the calls that read them, and changes no shape or pointer.
  LayerExperts& MutableLayer(int layer) { return layers_[layer - layer_begin_]; }
  // REQUIRES: Owns(layer, expert).
  quant::WeightView Gate(int layer, int expert) const { return At(layer).gate.Expert(expert - expert_begin_); }
  quant::WeightView Up(int layer, int expert) const { return At(layer).up.Expert(expert - expert_begin_); }
  quant::WeightView Down(int layer, int expert) const { return At(layer).down.Expert(expert - expert_begin_); }

 private:
  const LayerExperts& At(int layer) const { return layers_[layer - layer_begin_]; }

  std::vector<LayerExperts> layers_;
  int n_layer_total_ = 0;
  int64_t n_expert_total_ = 0;
  int layer_begin_ = 0;
  int expert_begin_ = 0;
  int expert_end_ = 0;
  int64_t d_ = 0;
  int64_t n_ff_ = 0;
  ExpertFfnSpec ffn_;
  std::shared_ptr<const void> owner_;
};

// Reads the weight bytes of the distinct experts among `expert_ids` (ids
// relative to le's first expert): gate, up and down of each, with the DRAM
// measurement's loop (SumWords), whole experts claimed by the pool's threads
// in turn as the decode split does, computing nothing. Benchmarks use it as
// the roofline of decode's access pattern. Returns the words' sum (so that
// the reads happen).
uint64_t ReadExpertWeights(const LayerExperts& le, absl::Span<const int32_t> expert_ids,
                           ThreadPool* pool);

// Bytes of experts [eb, ee) of `src` as CopyExperts writes them: packed
// (quant/packed.h) when `pack` and the type has a packed layout that the
// shape fits, else the GGUF bytes.
uint64_t CopiedExpertBytes(const ExpertTensorView& src, int eb, int ee, bool pack);
// The view CopyExperts returns, without copying.
ExpertTensorView CopiedExpertView(const ExpertTensorView& src, int eb, int ee, bool pack, uint8_t* dst);
// Copies (packing as above) experts [eb, ee) of `src` to dst
// (CopiedExpertBytes bytes); returns the view over the copy.
ExpertTensorView CopyExperts(const ExpertTensorView& src, int eb, int ee, bool pack, uint8_t* dst);
// CopyExperts(*src, eb, ee, pack, dst) for each job, one expert at a time
// spread over the pool's threads (packing runs at ~0.7 GB/s per thread).
struct ExpertCopyJob {
  const ExpertTensorView* src;
  int eb, ee;
  bool pack;
  uint8_t* dst;
};
void RunExpertCopies(absl::Span<const ExpertCopyJob> jobs, ThreadPool* pool);
// Every layer and expert of `model` copied into memory the store owns,
// packed where quant::PackedPreferred(type) (the layout the CPU's kernels
// read fastest), with the pool's threads; ResourceExhausted when the copy
// does not fit in memory.
absl::StatusOr<ExpertStore> PackedExpertStore(std::shared_ptr<const Model> model, ThreadPool* pool);
// The store for computing `model`'s experts in this process: the packed
// copy when some expert tensor packs on this CPU and the copy fits in
// memory, else the GGUF mapping itself.
ExpertStore LocalExpertStore(std::shared_ptr<const Model> model, ThreadPool* pool);

// Checks `call` against the store's shapes (layer and expert id within the
// store's ranges, sizes, CSR offsets, finite weights). InvalidArgument naming
// the problem.
absl::Status ValidateExpertCall(const ExpertCallView& call, const ExpertStore& store);

class FusedExpertCall;

// Fused expert FFN. One ThreadPool::RunOnAll per call, in phases separated
// by a spinning barrier:
//   1. each token's hidden row is converted once per activation format the
//      gate/up weights need (not once per expert) -- by the caller for up to
//      4 tokens, else by all threads (+1 barrier); experts on the tiled path
//      get their tokens packed into tiles (+1 barrier);
//   2. work items (expert, block of n_ff rows; big blocks first, then small
//      ones to even out the finish) are claimed by all threads: gate and up
//      rows for all of that expert's tokens, then SiLU(gate) * up; the thread
//      finishing an expert's last block converts its intermediate rows (once
//      per expert) for the down weights;
//   3. after one barrier, work items (block of n_embd rows over all routed
//      experts) run the down rows and add the weighted results per token in
//      its entries' order.
// Decode split: a call of up to 4 tokens with at least 2 experts per thread
// instead makes its items whole experts (gate and up: all n_ff rows; down:
// all n_embd rows, into a per-slot buffer), the last n_threads experts in
// small blocks to even out the finish, and after a barrier sums the slots
// per token by row blocks, in the same order. Whole matrices are long
// contiguous streams for the hardware prefetchers: a decode step measured
// faster this way (tests/bench/README.md, "model/expert"). There
// is no barrier between gate/up and down: a down item waits only for its own
// expert's intermediate rows (once every gate/up item is claimed, those are
// in flight on other threads), prefetching its weights meanwhile.
// A decode call (one token, top-8) thus has one barrier in all.
// Packed experts (quant/packed.h) run quant::PackedGemm for any number of
// tokens. Otherwise an expert with few tokens runs one vec_dot per (row,
// token); one with kMinTiledTokens or more runs quant::TileGemm, which unpacks each weight
// row block once and multiplies it against 16-token tiles (AVX2 / AVX-512
// VNNI / AMX-INT8). Both paths give the same bits (gemm.h), so results do
// not depend on the batch, the routing of other tokens, or the thread count;
// at a given kernel level they equal the previous one-MatMul-per-expert
// implementation bit for bit.
//
// Thread-safety: concurrent Compute() calls are safe; they serialise on an
// internal mutex (the scratch buffers, sized on first use and kept, are
// per object). `pool` may be nullptr (single-threaded) and must outlive this
// object; the caller must not be running inside a ParallelFor of the same
// pool.
class InProcessExperts final : public ExpertBackend {
 public:
  // Experts with at least this many tokens in a call use the tiled GEMM.
  static constexpr int kMinTiledTokens = 5;

  InProcessExperts(ExpertStore store, ThreadPool* pool);
  ~InProcessExperts() override;

  absl::Status ComputeInto(const ExpertCallView& call, float* partial,
                           uint64_t* worker_ns) override;
  // ComputeInto over `store` instead of the store given at construction
  // (same d, n_ff and expert FFN; this object's pool and scratch): for a
  // store that changes between calls, as the expert-worker's RAM tier does.
  absl::Status ComputeWith(const ExpertStore& store, const ExpertCallView& call, float* partial);

 private:
  friend class FusedExpertCall;  // expert.cc: one call's execution
  struct Scratch;

  const ExpertStore store_;
  ThreadPool* const pool_;
  std::mutex mu_;
  std::unique_ptr<Scratch> scratch_;  // guarded by mu_
};

}  // namespace moesplit::model
