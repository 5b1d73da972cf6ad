// SequenceState: everything one sequence carries from one forward step to
// the next on the CPU, built from the model's layer specs (HyperParams::
// layers) so that the forward pass, the memory planner and the engine all
// count the same bytes:
//   - an attention layer keeps K and V of up to n_ctx positions as IEEE f16
//     (llama.cpp's default cache), position-major:
//       K of layer l, position p: kv_heads(l) * head_k(l) values at k(l, p);
//       V of layer l, position p: kv_heads(l) * head_v(l) values at v(l, p)
//       (HyperParams: the layer's own geometry where it has one);
//     an MLA layer (deepseek2) keeps K only, the normed latent and the
//     roped key part (head_dim_k = kv_lora_rank + n_rot values, 576 for
//     DeepSeek-V3), and its V is the latent inside it, as llama.cpp's cache:
//     v(l, p) == k(l, p), v_stride(l) == k_stride(l);
//   - a sliding-window attention layer (window W) keeps a ring of
//     R = W + max_step - 1 positions instead (when that is less than
//     n_ctx): position p lives in slot p % R, and slots [0, W - 1) are
//     mirrored after the ring (slots R .. R + W - 2), so that the W rows a
//     token attends to are contiguous from k(l, first) like anywhere else.
//     The forward writes one sequence's rows into such a layer at most
//     max_step() positions at a time before they attend (then MirrorRows),
//     so a step never overwrites rows its own tokens still read;
//   - a recurrent layer (IsRecurrent: gated DeltaNet, Mamba-2) keeps,
//     whatever the context, its conv state (the last ssm_conv_kernel - 1
//     conv inputs, channel-major: channel c's taps at conv(l) + c * (kernel
//     - 1), oldest first) and its recurrent state (per value head a head_v x
//     head_k matrix, row j = value dimension j, as llama.cpp's
//     ggml_gated_delta_net stores it; Mamba-2: per head head_dim x d_state,
//     as ggml_ssm_scan's), f32;
//   - a layer without a mixer (MixerKind::kNone) keeps nothing.
//
// A step must not change a sequence when it fails, but a recurrent state
// cannot be recomputed from less than the whole history: every recurrent
// layer has two buffers, the forward pass reads current and writes next,
// and Commit() (the step's success) makes next current. A failed step
// leaves n_past and the current buffers as they were.
//
// Rewinding ("truncate"): K/V positions can simply be forgotten; a
// recurrent state cannot be un-applied. The rule: Truncate(n) succeeds when
//   - n == n_past (nothing to undo), or n == 0 (back to the zero state), or
//   - the model has no recurrent layers, or
//   - a checkpoint taken at exactly n exists (Checkpoint() copies the
//     recurrent and conv states at the current n_past). The recurrent
//     state is restored from it and checkpoints past n are dropped.
// Otherwise FailedPrecondition naming the nearest checkpoint, state
// unchanged. With sliding-window rings a position n can be resumed from
// only while the rings still hold the window before it: E - n <= keep, E
// the furthest position written (a failed step's writes count; NoteWrite),
// keep = R - W = max_step - 1. Truncate(n) refuses otherwise
// (FailedPrecondition), and a step on a state whose failed step overwrote
// the window before n_past is refused (WindowIntact) rather than computed
// from overwritten rows; Clear() restores it. (CudaKvCache has the same
// rule for its rings.)
// The prefix cache (services/dense/prefix_cache.h) copies K/V rows and the
// recurrent state out at block boundaries (ExportKv / ExportRecurrent) and
// back into a fresh state (ImportKv + Resume).
//
// Thread-safety: not thread-safe; one step at a time per state.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/base/aligned_allocator.h"
#include "common/model/arch.h"

namespace moesplit::model {

// The sliding-window ring rules of the file comment, for SequenceState and
// cuda::CudaKvCache alike (keep: how far past the window the rings reach,
// -1 without rings; written_end: the furthest position written).
// Rewinding from n_past to n: FailedPrecondition when the rings lost the
// window before n.
absl::Status RingRewind(int64_t n_past, int64_t written_end, int64_t n, int64_t keep);
// FailedPrecondition when a failed step overwrote the window before n_past.
absl::Status RingWindowIntact(int64_t n_past, int64_t written_end, int64_t keep);
// The rows an ImportKv of `bytes` at `pos` writes (rows of `row` bytes into
// a holder of n_ctx positions, `what` naming it in the error);
// InvalidArgument unless they are whole rows that fit.
absl::StatusOr<int64_t> KvImportRows(int64_t pos, uint64_t bytes, uint64_t row, int64_t n_ctx,
                                     const char* what);

class SequenceState {
 public:
  // InvalidArgument for n_ctx < 1; ResourceExhausted when the allocation
  // fails or is absurdly large.
  // max_step: the most positions of this sequence the forward writes into a
  // sliding-window layer before they attend (sizes the rings; the forward
  // splits longer steps). InvalidArgument for max_step < 1.
  static absl::StatusOr<std::unique_ptr<SequenceState>> Create(const HyperParams& hp,
                                                               int64_t n_ctx,
                                                               int64_t max_step = kDefaultMaxStep);
  static constexpr int64_t kDefaultMaxStep = 512;

  // f16 K + V bytes of one position over the attention layers (K only on
  // MLA layers): the prefix cache's row (sliding-window layers included).
  static uint64_t KvBytesPerPosition(const HyperParams& hp);
  // Positions attention layer `layer` keeps for n_ctx (the ring's slots,
  // mirror included, for a sliding-window layer; n_ctx otherwise).
  static int64_t LayerPositions(const HyperParams& hp, int layer, int64_t n_ctx, int64_t max_step);
  // f16 values attention layer `layer` keeps per position (0 for others).
  static int64_t KvValuesPerPosition(const HyperParams& hp, int layer);
  // Conv + recurrent state bytes of the DeltaNet layers (one buffer each).
  static uint64_t RecurrentBytes(const HyperParams& hp);
  // Buffers per recurrent layer (current and next; see the file comment).
  static constexpr int kRecurrentBuffers = 2;
  // What Create(hp, n_ctx, max_step)->bytes() is (double-buffered
  // recurrent layers, rings for sliding-window layers).
  static uint64_t BytesFor(const HyperParams& hp, int64_t n_ctx, int64_t max_step = kDefaultMaxStep);

  int64_t n_ctx() const { return n_ctx_; }
  int64_t n_past() const { return n_past_; }
  int64_t max_step() const { return max_step_; }
  // Whether attention layer `layer` keeps a ring (see the file comment).
  bool has_ring(int layer) const { return layers_[layer].ring > 0; }
  int n_layer() const { return static_cast<int>(layers_.size()); }
  // Everything allocated, checkpoints included.
  uint64_t bytes() const;
  // Whether the layout fits a model with these hyper-parameters.
  bool Matches(const HyperParams& hp) const;

  // Forgets every position and zeroes the recurrent states; drops checkpoints.
  void Clear();
  // See the file comment. InvalidArgument when n < 0 or n > n_past().
  absl::Status Truncate(int64_t n);
  // OkStatus when n_new more positions fit; OutOfRange naming n_past, n_new
  // and n_ctx otherwise.
  absl::Status CheckRoom(int64_t n_new) const;
  // The forward is about to write positions up to `end` - 1.
  void NoteWrite(int64_t end) { written_end_ = std::max(written_end_, end); }
  // OK when the rings still hold the window before n_past (always without
  // rings); FailedPrecondition otherwise (see the file comment).
  absl::Status WindowIntact() const;

  // Copies the recurrent layers' state at n_past() (replacing one taken at
  // the same position). A no-op without recurrent layers.
  void Checkpoint();
  // Positions with a checkpoint, ascending.
  std::vector<int64_t> checkpoints() const;

  // Prefix-cache copies (services/dense/prefix_cache.h), in this layout:
  // for each attention layer in order, its K rows of positions [begin, end)
  // then its V rows (kv_bytes_per_position() * (end - begin) bytes); the
  // recurrent state: for each DeltaNet layer in order, its committed conv
  // state then its recurrent state (recurrent_bytes() bytes).
  uint64_t kv_bytes_per_position() const;
  uint64_t recurrent_bytes() const {
    return static_cast<uint64_t>(n_recurrent_) * (conv_floats_ + ssm_floats_) * sizeof(float);
  }
  // InvalidArgument unless 0 <= begin <= end <= n_past (the rows written);
  // FailedPrecondition when a ring no longer holds position begin.
  absl::Status ExportKv(int64_t begin, int64_t end, uint8_t* out) const;
  // Writes rows in that layout at positions [pos, pos + n), leaving n_past
  // alone. InvalidArgument unless 0 <= pos, pos + n <= n_ctx and the size
  // is n * kv_bytes_per_position().
  absl::Status ImportKv(int64_t pos, const uint8_t* in, uint64_t bytes);
  void ExportRecurrent(uint8_t* out) const;
  // Makes the sequence n positions long (their rows imported before) with
  // this committed recurrent state (empty without DeltaNet layers); drops
  // checkpoints. InvalidArgument for n outside [0, n_ctx] or a state of
  // the wrong size (nothing changed).
  absl::Status Resume(int64_t n, const uint8_t* recurrent, uint64_t bytes);

  // Attention layers: raw K/V storage (the forward pass writes positions >=
  // n_past, then Commit); rows of consecutive positions follow each other
  // (up to the window, on a ring). REQUIRES: layer is an attention layer.
  uint16_t* k(int layer, int64_t pos) {
    return layers_[layer].k.get() + Slot(layer, pos) * layers_[layer].k_row;
  }
  const uint16_t* k(int layer, int64_t pos) const {
    return layers_[layer].k.get() + Slot(layer, pos) * layers_[layer].k_row;
  }
  uint16_t* v(int layer, int64_t pos) {
    return layers_[layer].v_base + Slot(layer, pos) * layers_[layer].v_stride;
  }
  const uint16_t* v(int layer, int64_t pos) const {
    return layers_[layer].v_base + Slot(layer, pos) * layers_[layer].v_stride;
  }
  // After rows [pos, pos + n) of a ring layer were written through k()/v():
  // copies those in the mirrored slots. A no-op on other layers.
  void MirrorRows(int layer, int64_t pos, int64_t n);
  // Elements from one position's K (V) to the next.
  int64_t k_stride(int layer) const { return layers_[layer].k_row; }
  int64_t v_stride(int layer) const { return layers_[layer].v_stride; }

  // DeltaNet layers: the committed conv / recurrent state, and the buffers
  // the running step writes. REQUIRES: layer is a DeltaNet layer.
  const float* conv(int layer) const { return Cur(layer).conv.data(); }
  const float* recurrent(int layer) const { return Cur(layer).ssm.data(); }
  float* next_conv(int layer) { return Next(layer).conv.data(); }
  float* next_recurrent(int layer) { return Next(layer).ssm.data(); }

  // Makes n_new more positions part of the sequence and the next recurrent
  // buffers current. REQUIRES: CheckRoom(n_new).ok().
  void Commit(int64_t n_new);

 private:
  struct Recurrent {
    // Cache-line aligned: the SIMD delta rule writes a decode step's new
    // state with non-temporal stores, which need it (internal/delta_net.cc).
    CacheAlignedVector<float> conv, ssm;
  };
  struct Layer {
    // Attention: left uninitialised (a large allocation's pages are only
    // touched as positions are written, so a sequence that reserves the
    // whole context costs memory for what it uses).
    std::unique_ptr<uint16_t[]> k, v;
    uint16_t* v_base = nullptr;  // v.get(), or k.get() on MLA layers
    int64_t k_row = 0;     // kv_heads * head_k
    int64_t v_stride = 0;  // kv_heads * head_v (k_row on MLA layers)
    int64_t ring = 0;    // ring positions R (0: every position has its row)
    int64_t window = 0;  // the sliding window W of a ring layer
    // DeltaNet: buf[cur] is committed.
    Recurrent buf[2];
    int cur = 0;
  };
  SequenceState() = default;
  int64_t Slot(int layer, int64_t pos) const {
    const int64_t r = layers_[layer].ring;
    return r > 0 ? pos % r : pos;
  }
  const Recurrent& Cur(int layer) const { return layers_[layer].buf[layers_[layer].cur]; }
  Recurrent& Next(int layer) { return layers_[layer].buf[1 - layers_[layer].cur]; }

  int64_t n_ctx_ = 0;
  int64_t n_past_ = 0;
  int64_t max_step_ = kDefaultMaxStep;
  int64_t ring_keep_ = -1;  // how far back past the window the rings reach (-1: no rings)
  int64_t written_end_ = 0;
  int64_t conv_floats_ = 0;
  int64_t ssm_floats_ = 0;
  int n_recurrent_ = 0;
  std::vector<MixerKind> kinds_;
  std::vector<Layer> layers_;
  // Position -> the recurrent layers' states there (in layer order).
  std::map<int64_t, std::vector<Recurrent>> checkpoints_;
};

}  // namespace moesplit::model
