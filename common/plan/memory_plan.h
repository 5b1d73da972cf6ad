// GPU memory planner of the dense service: where every byte of a model goes
// for a given GPU budget, context, parallel sequences and KV element type.
// Pure arithmetic over hyper-parameters and tensor types, so it runs without
// a GPU (`moesplit plan`) and the dense service uses the same numbers at
// start-up (then exports them, common/telemetry/plan_metrics.h).
//
// Placement (in this order, each from the budget):
//   1. dense weights on the GPU: attention projections and biases, every
//      RMSNorm weight, the routers, the shared experts (and their gate), the
//      output norm and the output head, and the routed experts' biases where
//      the model has them (gpt-oss; small). The token embedding stays on the
//      host (as llama.cpp keeps it: only n_tokens rows are gathered per
//      step and copied up), unless the output head is tied to it, in which
//      case the matrix lives on the GPU once and serves both.
//      Routed experts stay on the host (expert-workers) except the copies in
//      the hot-expert cache (5).
//   2. per-sequence state (model::SequenceState's layout): the KV cache of
//      the attention layers, n_attention_layers x n_ctx x n_parallel x
//      per-position bytes, where one
//      layer's position holds n_head_kv x (head_dim_k + head_dim_v) elements
//      (an MLA layer: head_dim_k only, the latent and the rope key) of the
//      KV type: f16 2 bytes; q8_0 34 bytes per 32; q4_0 18 bytes per
//      32 (ggml's block sizes; the head dims must then be multiples of 32).
//   2'. the KV cache is paged: n_ctx rounds up to whole pages of
//      kGpuKvPage positions, plus a 4-byte block-table entry per page; a
//      sliding-window layer keeps a ring of its window plus a micro-batch
//      (GpuKvLayout).
//   2''. the DeltaNet layers' conv and recurrent states, f32, independent of
//      n_ctx, two buffers each (a step writes the next state and commits it
//      only when it succeeds), x n_parallel.
//   3. compute workspace: exactly the buffers cuda::CudaForward allocates
//      for micro-batches of B = n_ubatch tokens (GpuWorkspace):
//      - activations, 4 bytes each: 6 B d [residual, normed input,
//        attention / shared-expert output, worker partials, GPU-expert
//        gather and result] + B n_head hd_k [q] + B n_head_kv (hd_k + hd_v)
//        [k, v] + B n_head hd_v [attention output] + 2 B n_expert [router
//        logits, next-layer prediction] + 6 B top_k [weights, ids, GPU-expert
//        rows and weights, predicted ids and weights] + 2 B n_ff_exp
//        [GPU-expert gate/up] + 2 B ff + B [shared expert or dense FFN, if
//        any: ff the larger of ff_shexp and, with dense-FFN layers, n_ff] +
//        B n_rot [RoPE angles] + B [token ids]; one buffer of the larger of
//        2 B n_head hd_k [gated attention: the doubled q projection, queries
//        and gates] and B conv_channels [gated DeltaNet: qkv, then the conv
//        output] (no layer needs both); with gated-DeltaNet layers also
//        2 B ssm_inner [z, the heads' output] + 2 B ssm_v_heads [beta,
//        decay]; with MLA layers also B n_head max(hd_k_mla, hd_v_mla) [the
//        queries, later attn_v_b's outputs] + B q_lora [q LoRA rows] + B
//        n_head (hd_k_mla - n_rot) [the heads' nope parts gathered; the KV
//        row and the absorbed queries are k and q above: hd_k = kv_lora +
//        n_rot, hd_v = kv_lora];
//      - logits: min(B, 32) rows x n_vocab x 4 bytes (the head runs in
//        groups of 32 rows);
//      - attention scratch: split-K chunk partials for 8 tokens at the full
//        context: 8 x n_head x ceil(n_ctx / 256) x (hd_v + 2) x 4 bytes;
//      - rounding scratch: B x the widest matrix input x 4 bytes (activations
//        rounded to the weight's vec_dot_type);
//      - streamed-prefill staging: stream_buffers x the largest routed
//        expert.
//   4. a margin (PlanOptions::margin_bytes) for allocator rounding and small
//      buffers.
//   5. the hot-expert cache: everything left, in slots of the largest
//      routed expert (gate + up + down of one expert of one layer, from the
//      tensor types), reported in total and per MoE layer.
// A file's NextN / MTP blocks (ModelShape::nextn_tensors) are placed
// nowhere: none of the above counts them, and host_nextn reports their bytes.
// A configuration whose items 1-4 exceed the budget is refused with
// ResourceExhausted saying by how much, and what would fit (a smaller
// --ctx, a smaller --kv-type, fewer --parallel).
//
// Thread-safe: pure functions.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/gguf/types.h"
#include "common/model/arch.h"
#include "common/model/expert_cache.h"
#include "common/model/model.h"
#include "common/plan/serving_defaults.h"

namespace moesplit::plan {

enum class KvType { kF16, kQ8_0, kQ4_0 };
std::string_view KvTypeName(KvType t);  // "f16", "q8_0", "q4_0"
// Case-insensitive "f16" | "q8_0" | "q4_0"; InvalidArgument listing them.
absl::StatusOr<KvType> ParseKvType(absl::string_view name);
// Bytes of `n` elements of `t`. REQUIRES: n a multiple of 32 for q8_0/q4_0.
uint64_t KvElementBytes(KvType t, int64_t n);

// One tensor of a model as far as the planner cares.
struct ShapeTensor {
  std::string name;
  model::TensorRole role = model::TensorRole::kDense;
  int layer = -1;  // -1 for a global tensor
  GgmlType type = GgmlType::kF32;
  std::vector<int64_t> ne;  // ggml order
  uint64_t n_bytes = 0;
};

// Hyper-parameters and tensor table: from a loaded Model, or built from
// hyper-parameters and tensor types alone (no file needed).
struct ModelShape {
  model::HyperParams hp;
  bool tied_output = false;
  std::vector<ShapeTensor> tensors;  // the trunk's and the global tensors
  // Every tensor of the NextN / MTP blocks (hp.nextn_layers): kept on the
  // host apart from the trunk, never placed on the GPU, cached or sharded.
  std::vector<ShapeTensor> nextn_tensors;
};

// The shape of a loaded model.
ModelShape ShapeOfModel(const model::Model& m);

// A shape from hyper-parameters (hp.n_vocab set) and a type per tensor:
// every tensor of hp.arch's description (and of its NextN blocks, with
// NextNTensors(), into nextn_tensors), shapes resolved from `hp`, the type
// `type_of(spec, layer)` returns (layer -1 for globals; a NextN block's
// layer is n_layer + i); optional tensors are
// left out when `include_optional(spec)` is false. Without an output tensor
// the shape is tied. InvalidArgument for an unknown architecture, zero
// sizes, or a row that is not whole blocks of its type.
absl::StatusOr<ModelShape> ShapeFromTypes(
    const model::HyperParams& hp,
    GgmlType (*type_of)(const model::TensorSpec& spec, int layer, const model::HyperParams& hp),
    bool (*include_optional)(const model::TensorSpec& spec));

// Computes n_bytes of `t` from its type and shape (InvalidArgument when a
// row is not whole blocks).
absl::Status SetTensorBytes(ShapeTensor* t);

// The CUDA forward's fixed geometry (cuda_forward.cc checks it against the
// kernels' constants).
inline constexpr int64_t kGpuKvPage = 256;         // positions per KV page
inline constexpr int64_t kGpuAttentionChunk = 256; // positions per split-K chunk
inline constexpr int64_t kGpuDecodeTokens = 8;     // tokens per attention launch at n_ctx
inline constexpr int64_t kGpuHeadRows = 32;        // output-head rows per group
inline constexpr int64_t kGpuMaxMicroBatch = 4096; // the most tokens of one micro-batch

struct PlanOptions {
  uint64_t budget_bytes = 0;   // GPU memory to plan for (> 0)
  int64_t n_ctx = 0;           // positions per sequence (> 0)
  int64_t n_parallel = 1;      // sequences
  KvType kv_type = KvType::kF16;
  int64_t n_ubatch = defaults::kStepTokens;  // largest micro-batch (the service's step)
  int64_t kv_page_size = kGpuKvPage;  // positions per KV page
  uint64_t margin_bytes = uint64_t{256} << 20;
  int stream_buffers = 2;      // streamed-prefill staging buffers
  // The prefix cache's device tier (--cache-device): held before the cache.
  uint64_t prefix_cache_device_bytes = 0;
  // Hot-expert cache slots (--expert-cache): -1 what the budget leaves;
  // otherwise exactly this many (ResourceExhausted when they do not fit).
  int64_t expert_cache_slots = -1;
};

struct DenseWeightBytes {
  uint64_t attention = 0;       // q, k, v, o (+ biases)
  uint64_t norms = 0;           // every RMSNorm weight incl. output_norm
  uint64_t routers = 0;
  uint64_t shared_experts = 0;  // incl. their sigmoid gate
  uint64_t output_head = 0;     // output.weight, or the tied embedding
  // The routed experts' biases (gpt-oss), every expert's: the experts the
  // GPU computes (hot-expert cache, streamed prefill) read them there. They
  // stay in the host's routed experts too (the workers use them).
  uint64_t expert_biases = 0;
  uint64_t total() const {
    return attention + norms + routers + shared_experts + output_head + expert_biases;
  }
};

struct WorkspaceBytes {
  uint64_t activations = 0;
  uint64_t logits = 0;
  uint64_t attention = 0;
  uint64_t rounding = 0;
  uint64_t staging = 0;
  uint64_t total() const { return activations + logits + attention + rounding + staging; }
};

// Element counts of the CUDA forward's workspace buffers for micro-batches
// of B tokens (see item 3 of the file comment for what each holds).
struct GpuWorkspaceElems {
  int64_t x = 0, q = 0, k = 0, v = 0, attn = 0, router = 0, topk = 0, sh = 0, ex_ff = 0,
          rope = 0, head_rows = 0, logits = 0, scratch = 0, split = 0, tokens = 0;
  int64_t qg = 0;                                 // gated attention
  int64_t dn_qkv = 0, dn_inner = 0, dn_heads = 0;  // gated DeltaNet
  // MLA: the queries per head (nope + rope; later the heads' attn_v_b
  // outputs), the q LoRA's rank-space rows, the heads' nope parts gathered.
  int64_t mla_q = 0, mla_qa = 0, mla_in = 0;
  // The one buffer that holds qg in a gated-attention layer and dn_qkv in a
  // DeltaNet layer.
  int64_t mixer() const { return qg > dn_qkv ? qg : dn_qkv; }
  uint64_t slot_bytes = 0;  // one staging buffer: the largest routed expert
  int stream_buffers = 0;
  WorkspaceBytes Bytes() const;
};
GpuWorkspaceElems GpuWorkspace(const ModelShape& shape, int64_t ubatch, int64_t n_ctx,
                               int stream_buffers);
// The GPU KV cache of one sequence, as cuda::CudaKvCache allocates it: per
// attention layer, pages of page_size positions —
//   - a full-attention layer: n_ctx rounded up to whole pages;
//   - a sliding-window layer of W positions (gpt-oss): a ring of
//     ceil((W + max_step - 1) / page_size) pages, at most the full layer's
//     (a step writes its up to max_step tokens before they attend, so the
//     ring holds the window of its first token and every token it writes);
//     position p lives in ring page (p / page_size) % ring pages, so at
//     128K context a 128-token window costs 768 positions, not 131072;
// plus block tables of n_pages int32 entries: one for the full layers and
// one per distinct ring size.
struct GpuKvLayout {
  int64_t page_size = 0;
  int64_t n_pages = 0;               // ceil(n_ctx / page_size)
  std::vector<int64_t> layer_pages;  // per layer; 0 for a layer without KV
  std::vector<int64_t> ring_sizes;   // distinct ring page counts, ascending
  // K + V values of one position per layer (0 without KV;
  // model::SequenceState::KvValuesPerPosition): they differ between layers
  // where the model's attention geometry does (gemma4).
  std::vector<int64_t> layer_values;
  int64_t pages_total() const;
  // Positions the layers hold together (sum of layer_pages x page_size).
  int64_t positions_total() const { return pages_total() * page_size; }
  // Everything: positions_total() x row_bytes (K + V of one position of one
  // layer) + the block tables.
  uint64_t Bytes(uint64_t row_bytes) const;
  // The same with each layer's own rows: row_bytes(layer_values[l]).
  uint64_t Bytes(const std::function<uint64_t(int64_t)>& row_bytes) const;
};
// REQUIRES: n_ctx, max_step, page_size >= 1.
GpuKvLayout GpuKvLayoutOf(const model::HyperParams& hp, int64_t n_ctx, int64_t max_step,
                          int64_t page_size = kGpuKvPage);

struct ExpertCachePlan {
  uint64_t bytes = 0;          // all that is left of the budget
  uint64_t slot_bytes = 0;     // the largest routed expert (gate + up + down)
  int64_t slots = 0;           // bytes / slot_bytes
  int64_t moe_layers = 0;      // layers with routed experts
  int64_t experts_per_layer = 0;
  int64_t slots_per_layer = 0;  // slots / moe_layers (an even split)
};

struct MemoryPlan {
  PlanOptions options;
  model::HyperParams hp;
  // GPU
  DenseWeightBytes dense;
  uint64_t kv_cache = 0;
  uint64_t kv_bytes_per_position = 0;  // the attention layers, one sequence
  // K + V bytes of one position of one attention layer, and the layout of
  // one sequence's cache (sliding-window layers keep a ring; GpuKvLayout).
  uint64_t kv_row_bytes = 0;
  GpuKvLayout kv_layout;
  // DeltaNet conv + recurrent states (double-buffered: model::SequenceState).
  uint64_t recurrent_state = 0;
  uint64_t recurrent_bytes_per_sequence = 0;
  WorkspaceBytes workspace;
  GpuWorkspaceElems workspace_elems;  // the buffers behind `workspace`
  uint64_t margin = 0;
  uint64_t prefix_cache_device = 0;  // the prefix cache's device tier
  ExpertCachePlan expert_cache;
  // Host
  uint64_t host_token_embd = 0;       // 0 when tied (then on the GPU)
  uint64_t host_routed_experts = 0;   // all routed experts, on the workers
  uint64_t host_nextn = 0;            // NextN / MTP blocks, kept aside (not run)

  // dense + kv + recurrent + workspace + margin + the prefix cache's device
  // tier (what must fit before the expert cache).
  uint64_t fixed_bytes() const {
    return dense.total() + kv_cache + recurrent_state + workspace.total() + margin +
           prefix_cache_device;
  }
  uint64_t gpu_total() const { return fixed_bytes() + expert_cache.bytes; }
  // What the CUDA forward, its sequence states and the hot-expert cache
  // allocate from this plan: fixed_bytes() less the margin and the prefix
  // cache's device tier (filled as it is used), plus the cache's whole
  // slots (the tail of its share smaller than a slot stays free).
  uint64_t allocated_bytes() const {
    return dense.total() + kv_cache + recurrent_state + workspace.total() +
           static_cast<uint64_t>(expert_cache.slots) * expert_cache.slot_bytes;
  }
};

// The plan, or InvalidArgument for bad options (zero budget, ctx, parallel
// or ubatch; head dims not multiples of 32 with a quantised KV type; a shape
// without routed experts) or ResourceExhausted when items 1-4 do not fit:
//   "needs 9.30 GiB (dense weights 0.76 GiB + KV cache 6.00 GiB + workspace
//    0.55 GiB + margin 0.25 GiB), budget 8.00 GiB: 1.30 GiB short; try --ctx
//    32768 or --kv-type q4_0"
absl::StatusOr<MemoryPlan> PlanMemory(const ModelShape& shape, const PlanOptions& options);

// Bytes of one routed expert (gate + up + down matrices; their biases, where
// the model has them, are dense weights on the GPU) of each layer (0 for a
// layer without routed experts), from the tensor types: a hot-expert cache
// slot and a streamed-prefill staging buffer hold the largest.
std::vector<uint64_t> ExpertBytesPerLayer(const ModelShape& shape);

// Expert-workers of `worker_bytes` of routed experts each (`moesplit plan
// --worker-memory`): the fewest that hold every MoE layer's experts, each a
// range of consecutive layers (dense-FFN layers hold none and go with the
// range they fall in), balanced so that the largest share is as small as it
// can be. ResourceExhausted naming the layer when one layer's experts alone
// exceed worker_bytes; InvalidArgument for worker_bytes 0.
struct WorkerShare {
  int layer_begin = 0, layer_end = 0;  // [begin, end)
  uint64_t bytes = 0;                  // the range's routed experts
};
absl::StatusOr<std::vector<WorkerShare>> PlanWorkers(const ModelShape& shape,
                                                     uint64_t worker_bytes);
// "workers: N x SIZE ..." then one line per worker with its --shard.
std::string FormatWorkers(const std::vector<WorkerShare>& workers, uint64_t worker_bytes);

// The routed experts on a host of `host_bytes` of RAM for them (`moesplit
// plan --host-memory`; a worker's --expert-ram): when they do not all fit,
// the workers keep `ram_bytes` of them in RAM slots and read the rest from
// the model file on demand (the expert-worker's tier). With uniform routing
// a decode token needs n_expert_used experts of each MoE layer, of which the
// share not resident comes from disk: disk_bytes_per_token. (Routing is
// skewed in practice and the tier keeps the hottest experts, so this is an
// upper bound; the GPU hot-expert cache lowers it further.) `worker_bytes`
// > 0 plans each of PlanWorkers' ranges apart (its share of RAM resident).
struct HostTierShare {
  int layer_begin = 0, layer_end = 0;  // [begin, end)
  uint64_t expert_bytes = 0;           // the range's routed experts
  uint64_t ram_bytes = 0;              // of which in RAM
  double resident_share = 0;           // ram / expert bytes (1: all)
  uint64_t disk_bytes_per_token = 0;   // expected, uniform routing
};
struct HostTierPlan {
  uint64_t host_bytes = 0;
  std::vector<HostTierShare> shares;  // one per host (worker), in layer order
  uint64_t disk_bytes_per_token = 0;  // the sum over shares
};
// InvalidArgument for host_bytes 0 or a shape without routed experts.
absl::StatusOr<HostTierPlan> PlanHostTier(const ModelShape& shape, uint64_t host_bytes,
                                          const std::vector<WorkerShare>& workers = {});
// One line per share ("layers A-B: X of Y in RAM (Z%), W read per token"),
// and with `disk_bytes_per_second` > 0 the decode rate the disk alone allows.
std::string FormatHostTier(const HostTierPlan& plan, uint64_t disk_bytes_per_second);

// The hot-expert cache for a plan: the plan's slots, the shape's layers,
// experts and per-layer expert bytes (the other options keep their defaults).
model::ExpertCacheOptions ExpertCacheOptionsFor(const ModelShape& shape, const MemoryPlan& plan);

// The plan as a table: one line per use with bytes and GiB, then the host
// side (for `moesplit plan`).
std::string FormatPlanTable(const MemoryPlan& plan);
// The plan as a JSON object (bytes as integers; keys as in the table).
std::string FormatPlanJson(const MemoryPlan& plan);

}  // namespace moesplit::plan
