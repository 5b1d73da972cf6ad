#include "common/model/sequence_state.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"

namespace moesplit::model {
int64_t SequenceState::KvValuesPerPosition(const HyperParams& hp, int layer) {
  const MixerKind kind = hp.layers[layer].mixer;
  if (!IsAttention(kind)) return 0;
  if (kind == MixerKind::kMla) return hp.n_head_kv * hp.head_dim_k;
  return hp.kv_heads(layer) * (hp.head_k(layer) + hp.head_v(layer));
}

uint64_t SequenceState::KvBytesPerPosition(const HyperParams& hp) {
  uint64_t values = 0;
  for (int l = 0; l < static_cast<int>(hp.layers.size()); ++l) values += KvValuesPerPosition(hp, l);
  return values * sizeof(uint16_t);
}

uint64_t SequenceState::RecurrentBytes(const HyperParams& hp) {
  return static_cast<uint64_t>(hp.n_recurrent_layers()) *
         static_cast<uint64_t>(hp.ssm_conv_state_floats() + hp.ssm_recurrent_state_floats()) * sizeof(float);
}

namespace {

// Ring positions of layer l (0: none; see the header).
int64_t RingPositions(const HyperParams& hp, int l, int64_t n_ctx, int64_t max_step) {
  const LayerSpec& spec = hp.layers[l];
  const int64_t w = spec.sliding_window;
  if (!IsAttention(spec.mixer) || spec.mixer == MixerKind::kMla || w <= 0) return 0;
  const int64_t ring = w + max_step - 1;
  return ring + w - 1 < n_ctx ? ring : 0;
}

}  // namespace

int64_t SequenceState::LayerPositions(const HyperParams& hp, int layer, int64_t n_ctx, int64_t max_step) {
  const int64_t ring = RingPositions(hp, layer, n_ctx, max_step);
  return ring > 0 ? ring + hp.layers[layer].sliding_window - 1 : n_ctx;
}

uint64_t SequenceState::BytesFor(const HyperParams& hp, int64_t n_ctx, int64_t max_step) {
  uint64_t kv = 0;
  for (int l = 0; l < static_cast<int>(hp.layers.size()); ++l) {
    kv += static_cast<uint64_t>(KvValuesPerPosition(hp, l)) * sizeof(uint16_t) *
          static_cast<uint64_t>(LayerPositions(hp, l, n_ctx, max_step));
  }
  return kv + kRecurrentBuffers * RecurrentBytes(hp);
}

absl::StatusOr<std::unique_ptr<SequenceState>> SequenceState::Create(const HyperParams& hp,
                                                                     int64_t n_ctx, int64_t max_step) {
  if (n_ctx < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence state size n_ctx = ", n_ctx, " < 1"));
  }
  if (max_step < 1) {
    return absl::InvalidArgumentError(absl::StrCat("sequence state max_step = ", max_step, " < 1"));
  }
  std::unique_ptr<SequenceState> s(new SequenceState());
  s->n_ctx_ = n_ctx;
  s->max_step_ = max_step;
  s->conv_floats_ = hp.ssm_conv_state_floats();
  s->ssm_floats_ = hp.ssm_recurrent_state_floats();
  s->n_recurrent_ = hp.n_recurrent_layers();
  constexpr int64_t kMaxElements = int64_t{1} << 40;  // 2 TiB of f16 per layer
  for (int l = 0; l < static_cast<int>(hp.n_layer); ++l) {
    const int64_t row = KvValuesPerPosition(hp, l);
    if (IsAttention(hp.layers[l].mixer) && (row <= 0 || n_ctx > kMaxElements / row)) {
      return absl::ResourceExhaustedError(
          absl::StrCat("KV cache of ", n_ctx, " positions is too large for this model"));
    }
  }
  try {
    s->layers_.resize(hp.n_layer);
    for (int64_t l = 0; l < hp.n_layer; ++l) {
      s->kinds_.push_back(hp.layers[l].mixer);
      Layer& L = s->layers_[l];
      const int64_t rows = LayerPositions(hp, static_cast<int>(l), n_ctx, max_step);
      const int il = static_cast<int>(l);
      if (hp.layers[l].mixer == MixerKind::kMla) {
        L.k_row = hp.n_head_kv * hp.head_dim_k;
        L.k.reset(new uint16_t[static_cast<size_t>(rows * L.k_row)]);
        L.v_base = L.k.get();
        L.v_stride = L.k_row;
      } else if (IsAttention(hp.layers[l].mixer)) {
        L.ring = RingPositions(hp, static_cast<int>(l), n_ctx, max_step);
        if (L.ring > 0) {
          L.window = hp.layers[l].sliding_window;
          const int64_t keep = L.ring - L.window;
          s->ring_keep_ = s->ring_keep_ < 0 ? keep : std::min(s->ring_keep_, keep);
        }
        L.k_row = hp.kv_heads(il) * hp.head_k(il);
        L.v_stride = hp.kv_heads(il) * hp.head_v(il);
        L.k.reset(new uint16_t[static_cast<size_t>(rows * L.k_row)]);
        L.v.reset(new uint16_t[static_cast<size_t>(rows * L.v_stride)]);
        L.v_base = L.v.get();
      } else if (IsRecurrent(hp.layers[l].mixer)) {
        for (Recurrent& r : L.buf) {
          r.conv.assign(s->conv_floats_, 0.0f);
          r.ssm.assign(s->ssm_floats_, 0.0f);
        }
      }
    }
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "sequence state of ", n_ctx, " positions x ", hp.n_layer,
        " layers does not fit in memory"));
  }
  return s;
}

uint64_t SequenceState::bytes() const {
  uint64_t b = 0;
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    const uint64_t rows = static_cast<uint64_t>(L.ring > 0 ? L.ring + L.window - 1 : n_ctx_);
    if (kinds_[l] == MixerKind::kMla) {
      b += rows * L.k_row * sizeof(uint16_t);
    } else if (IsAttention(kinds_[l])) {
      b += rows * (L.k_row + L.v_stride) * sizeof(uint16_t);
    } else if (IsRecurrent(kinds_[l])) {
      b += kRecurrentBuffers * static_cast<uint64_t>(conv_floats_ + ssm_floats_) * sizeof(float);
    }
  }
  b += static_cast<uint64_t>(checkpoints_.size()) * n_recurrent_ *
       (conv_floats_ + ssm_floats_) * sizeof(float);
  return b;
}

bool SequenceState::Matches(const HyperParams& hp) const {
  if (static_cast<int64_t>(layers_.size()) != hp.n_layer) return false;
  for (size_t l = 0; l < layers_.size(); ++l) {
    if (kinds_[l] != hp.layers[l].mixer) return false;
    const Layer& L = layers_[l];
    if (IsAttention(kinds_[l]) &&
        L.k_row + (kinds_[l] == MixerKind::kMla ? 0 : L.v_stride) !=
            KvValuesPerPosition(hp, static_cast<int>(l))) {
      return false;
    }
  }
  return conv_floats_ == hp.ssm_conv_state_floats() && ssm_floats_ == hp.ssm_recurrent_state_floats();
}

void SequenceState::Clear() {
  n_past_ = 0;
  written_end_ = 0;
  checkpoints_.clear();
  for (size_t l = 0; l < layers_.size(); ++l) {
    if (!IsRecurrent(kinds_[l])) continue;
    Recurrent& r = layers_[l].buf[layers_[l].cur];
    std::fill(r.conv.begin(), r.conv.end(), 0.0f);
    std::fill(r.ssm.begin(), r.ssm.end(), 0.0f);
  }
}

absl::Status SequenceState::Truncate(int64_t n) {
  if (n < 0 || n > n_past_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot truncate the sequence state to ", n, " positions; it holds ", n_past_));
  }
  if (n == n_past_) return absl::OkStatus();
  if (n == 0) {
    Clear();
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(RingRewind(n_past_, written_end_, n, ring_keep_));
  if (n_recurrent_ > 0) {
    auto it = checkpoints_.find(n);
    if (it == checkpoints_.end()) {
      auto below = checkpoints_.upper_bound(n);
      const int64_t nearest = below == checkpoints_.begin() ? 0 : std::prev(below)->first;
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot rewind the recurrent state from ", n_past_, " to ", n,
          " positions: no checkpoint there (the nearest below is at ", nearest, ")"));
    }
    size_t r = 0;
    for (size_t l = 0; l < layers_.size(); ++l) {
      if (!IsRecurrent(kinds_[l])) continue;
      layers_[l].buf[layers_[l].cur] = it->second[r++];
    }
  }
  checkpoints_.erase(checkpoints_.upper_bound(n), checkpoints_.end());
  n_past_ = n;
  return absl::OkStatus();
}

absl::Status SequenceState::CheckRoom(int64_t n_new) const {
  if (n_new < 0 || n_new > n_ctx_ - n_past_) {
    return absl::OutOfRangeError(absl::StrCat(
        "KV cache full: ", n_past_, " positions used + ", n_new, " new > capacity n_ctx ",
        n_ctx_));
  }
  return absl::OkStatus();
}

absl::Status RingRewind(int64_t n_past, int64_t written_end, int64_t n, int64_t keep) {
  const int64_t written = std::max(n_past, written_end);
  if (keep < 0 || written - n <= keep) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "cannot rewind from ", n_past, " to ", n, " positions: the sliding-window layers keep only "
      "their window and ", keep, " positions more (written up to ", written, ")"));
}

absl::StatusOr<int64_t> KvImportRows(int64_t pos, uint64_t bytes, uint64_t row, int64_t n_ctx,
                                     const char* what) {
  const int64_t n = row == 0 ? 0 : static_cast<int64_t>(bytes / row);
  if (pos < 0 || (row == 0 ? bytes != 0 : bytes % row != 0) || n > n_ctx - pos) {
    return absl::InvalidArgumentError(absl::StrCat("cannot import ", bytes, " bytes of K/V rows (", row,
                                                   " per position) at position ", pos, " of a ", what,
                                                   " of ", n_ctx));
  }
  return n;
}

absl::Status RingWindowIntact(int64_t n_past, int64_t written_end, int64_t keep) {
  if (keep < 0 || written_end - n_past <= keep) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "the sliding-window KV of this sequence was overwritten by a failed step (written up to ",
      written_end, ", ", n_past, " committed, the rings keep ", keep,
      " positions past the window): clear it and start again"));
}

absl::Status SequenceState::WindowIntact() const { return RingWindowIntact(n_past_, written_end_, ring_keep_); }

void SequenceState::MirrorRows(int layer, int64_t pos, int64_t n) {
  const Layer& L = layers_[layer];
  if (L.ring == 0) return;
  for (int64_t p = pos; p < pos + n; ++p) {
    const int64_t slot = p % L.ring;
    if (slot >= L.window - 1) continue;
    const int64_t to = slot + L.ring;
    std::memcpy(L.k.get() + to * L.k_row, L.k.get() + slot * L.k_row, L.k_row * sizeof(uint16_t));
    std::memcpy(L.v_base + to * L.v_stride, L.v_base + slot * L.v_stride,
                L.v_stride * sizeof(uint16_t));
  }
}

void SequenceState::Checkpoint() {
  if (n_recurrent_ == 0) return;
  std::vector<Recurrent>& cp = checkpoints_[n_past_];
  cp.clear();
  for (size_t l = 0; l < layers_.size(); ++l) {
    if (IsRecurrent(kinds_[l])) cp.push_back(Cur(static_cast<int>(l)));
  }
}

std::vector<int64_t> SequenceState::checkpoints() const {
  std::vector<int64_t> out;
  for (const auto& [pos, unused] : checkpoints_) out.push_back(pos);
  return out;
}

uint64_t SequenceState::kv_bytes_per_position() const {
  uint64_t values = 0;
  for (size_t l = 0; l < kinds_.size(); ++l) {
    // An MLA layer keeps one row (the latent and the rope key): no V rows.
    if (kinds_[l] == MixerKind::kMla) values += layers_[l].k_row;
    else if (IsAttention(kinds_[l])) values += layers_[l].k_row + layers_[l].v_stride;
  }
  return values * sizeof(uint16_t);
}

absl::Status SequenceState::ExportKv(int64_t begin, int64_t end, uint8_t* out) const {
  if (begin < 0 || begin > end || end > n_past_) {
    return absl::InvalidArgumentError(absl::StrCat("cannot export positions [", begin, ", ", end,
                                                   ") of a sequence of ", n_past_));
  }
  const int64_t n = end - begin;
  const int64_t written = std::max(n_past_, written_end_);
  for (size_t l = 0; l < layers_.size(); ++l) {
    const int64_t ring = layers_[l].ring;
    if (ring > 0 && begin < written - ring) {
      return absl::FailedPreconditionError(absl::StrCat(
          "positions from ", begin, " are no longer in layer ", l, "'s sliding-window ring (it holds ",
          ring, " positions up to ", written, ")"));
    }
  }
  for (size_t l = 0; l < layers_.size(); ++l) {
    if (!IsAttention(kinds_[l])) continue;
    const int il = static_cast<int>(l);
    const size_t kr = layers_[l].k_row * sizeof(uint16_t);
    const size_t vr = kinds_[l] == MixerKind::kMla ? 0 : layers_[l].v_stride * sizeof(uint16_t);
    // Rows one at a time on a ring (it wraps), in one run elsewhere.
    const int64_t run = layers_[l].ring > 0 ? 1 : n;
    for (int64_t p = begin; p < end; p += run) {
      std::memcpy(out + (p - begin) * kr, k(il, p), run * kr);
      if (vr > 0) std::memcpy(out + n * kr + (p - begin) * vr, v(il, p), run * vr);
    }
    out += n * (kr + vr);
  }
  return absl::OkStatus();
}

absl::Status SequenceState::ImportKv(int64_t pos, const uint8_t* in, uint64_t bytes) {
  ASSIGN_OR_RETURN(const int64_t n, KvImportRows(pos, bytes, kv_bytes_per_position(), n_ctx_, "state"));
  for (size_t l = 0; l < layers_.size(); ++l) {
    if (!IsAttention(kinds_[l])) continue;
    const int il = static_cast<int>(l);
    const size_t kr = layers_[l].k_row * sizeof(uint16_t);
    const size_t vr = kinds_[l] == MixerKind::kMla ? 0 : layers_[l].v_stride * sizeof(uint16_t);
    const int64_t ring = layers_[l].ring;
    // A ring keeps the last of the rows (the earlier ones are overwritten).
    const int64_t from = ring > 0 ? std::max(pos, pos + n - ring) : pos;
    const int64_t run = ring > 0 ? 1 : n;
    for (int64_t p = from; p < pos + n; p += run) {
      std::memcpy(k(il, p), in + (p - pos) * kr, run * kr);
      if (vr > 0) std::memcpy(v(il, p), in + n * kr + (p - pos) * vr, run * vr);
    }
    MirrorRows(il, from, pos + n - from);
    in += n * (kr + vr);
  }
  return absl::OkStatus();
}

void SequenceState::ExportRecurrent(uint8_t* out) const {
  for (size_t l = 0; l < layers_.size(); ++l) {
    if (!IsRecurrent(kinds_[l])) continue;
    const Recurrent& r = Cur(static_cast<int>(l));
    std::memcpy(out, r.conv.data(), r.conv.size() * sizeof(float));
    out += r.conv.size() * sizeof(float);
    std::memcpy(out, r.ssm.data(), r.ssm.size() * sizeof(float));
    out += r.ssm.size() * sizeof(float);
  }
}

absl::Status SequenceState::Resume(int64_t n, const uint8_t* recurrent, uint64_t bytes) {
  if (n < 0 || n > n_ctx_ || bytes != recurrent_bytes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resume at ", n, " positions (the state holds ", n_ctx_, ") with ",
                     bytes, " bytes of recurrent state (", recurrent_bytes(), " expected)"));
  }
  checkpoints_.clear();
  written_end_ = n;  // the rings hold the imported rows before n
  for (size_t l = 0; l < layers_.size(); ++l) {
    if (!IsRecurrent(kinds_[l])) continue;
    Recurrent& r = layers_[l].buf[layers_[l].cur];
    std::memcpy(r.conv.data(), recurrent, r.conv.size() * sizeof(float));
    recurrent += r.conv.size() * sizeof(float);
    std::memcpy(r.ssm.data(), recurrent, r.ssm.size() * sizeof(float));
    recurrent += r.ssm.size() * sizeof(float);
  }
  n_past_ = n;
  return absl::OkStatus();
}

void SequenceState::Commit(int64_t n_new) {
  n_past_ += n_new;
  written_end_ = std::max(written_end_, n_past_);
  for (size_t l = 0; l < layers_.size(); ++l) {
    if (IsRecurrent(kinds_[l])) layers_[l].cur = 1 - layers_[l].cur;
  }
}

}  // namespace moesplit::model
