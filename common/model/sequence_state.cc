#include "common/model/sequence_state.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"

namespace moesplit::model {
int64_t SequenceState::KvValuesPerPosition(const HyperParams& hp, MixerKind kind) {
  if (!IsAttention(kind)) return 0;
  if (kind == MixerKind::kMla) return hp.n_head_kv * hp.head_dim_k;
  return hp.n_head_kv * (hp.head_dim_k + hp.head_dim_v);
}

uint64_t SequenceState::KvBytesPerPosition(const HyperParams& hp) {
  uint64_t values = 0;
  for (const LayerSpec& l : hp.layers) values += KvValuesPerPosition(hp, l.mixer);
  return values * sizeof(uint16_t);
}

uint64_t SequenceState::RecurrentBytes(const HyperParams& hp) {
  return static_cast<uint64_t>(hp.n_recurrent_layers()) *
         static_cast<uint64_t>(hp.ssm_conv_state_floats() + hp.ssm_recurrent_state_floats()) * sizeof(float);
}

uint64_t SequenceState::BytesFor(const HyperParams& hp, int64_t n_ctx) {
  return KvBytesPerPosition(hp) * static_cast<uint64_t>(n_ctx) +
         kRecurrentBuffers * RecurrentBytes(hp);
}

absl::StatusOr<std::unique_ptr<SequenceState>> SequenceState::Create(const HyperParams& hp,
                                                                     int64_t n_ctx) {
  if (n_ctx < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence state size n_ctx = ", n_ctx, " < 1"));
  }
  std::unique_ptr<SequenceState> s(new SequenceState());
  s->n_ctx_ = n_ctx;
  s->k_row_ = hp.n_head_kv * hp.head_dim_k;
  s->v_row_ = hp.n_head_kv * hp.head_dim_v;
  s->conv_floats_ = hp.ssm_conv_state_floats();
  s->ssm_floats_ = hp.ssm_recurrent_state_floats();
  s->n_recurrent_ = hp.n_recurrent_layers();
  constexpr int64_t kMaxElements = int64_t{1} << 40;  // 2 TiB of f16 per layer
  if (s->k_row_ <= 0 || s->v_row_ <= 0 || n_ctx > kMaxElements / (s->k_row_ + s->v_row_)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("KV cache of ", n_ctx, " positions is too large for this model"));
  }
  try {
    s->layers_.resize(hp.n_layer);
    for (int64_t l = 0; l < hp.n_layer; ++l) {
      s->kinds_.push_back(hp.layers[l].mixer);
      Layer& L = s->layers_[l];
      if (hp.layers[l].mixer == MixerKind::kMla) {
        L.k.reset(new uint16_t[static_cast<size_t>(n_ctx * s->k_row_)]);
        L.v_base = L.k.get();
        L.v_stride = s->k_row_;
      } else if (IsAttention(hp.layers[l].mixer)) {
        L.k.reset(new uint16_t[static_cast<size_t>(n_ctx * s->k_row_)]);
        L.v.reset(new uint16_t[static_cast<size_t>(n_ctx * s->v_row_)]);
        L.v_base = L.v.get();
        L.v_stride = s->v_row_;
      } else {
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
    if (kinds_[l] == MixerKind::kMla) {
      b += static_cast<uint64_t>(n_ctx_) * k_row_ * sizeof(uint16_t);
    } else if (IsAttention(kinds_[l])) {
      b += static_cast<uint64_t>(n_ctx_) * (k_row_ + v_row_) * sizeof(uint16_t);
    } else {
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
  }
  return k_row_ == hp.n_head_kv * hp.head_dim_k && v_row_ == hp.n_head_kv * hp.head_dim_v &&
         conv_floats_ == hp.ssm_conv_state_floats() && ssm_floats_ == hp.ssm_recurrent_state_floats();
}

void SequenceState::Clear() {
  n_past_ = 0;
  checkpoints_.clear();
  for (size_t l = 0; l < layers_.size(); ++l) {
    if (IsAttention(kinds_[l])) continue;
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
      if (IsAttention(kinds_[l])) continue;
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

void SequenceState::Checkpoint() {
  if (n_recurrent_ == 0) return;
  std::vector<Recurrent>& cp = checkpoints_[n_past_];
  cp.clear();
  for (size_t l = 0; l < layers_.size(); ++l) {
    if (!IsAttention(kinds_[l])) cp.push_back(Cur(static_cast<int>(l)));
  }
}

std::vector<int64_t> SequenceState::checkpoints() const {
  std::vector<int64_t> out;
  for (const auto& [pos, unused] : checkpoints_) out.push_back(pos);
  return out;
}

uint64_t SequenceState::kv_bytes_per_position() const {
  uint64_t values = 0;
  for (MixerKind k : kinds_) {
    // An MLA layer keeps one row (the latent and the rope key): no V rows.
    if (k == MixerKind::kMla) values += k_row_;
    else if (IsAttention(k)) values += k_row_ + v_row_;
  }
  return values * sizeof(uint16_t);
}

absl::Status SequenceState::ExportKv(int64_t begin, int64_t end, uint8_t* out) const {
  if (begin < 0 || begin > end || end > n_past_) {
    return absl::InvalidArgumentError(absl::StrCat("cannot export positions [", begin, ", ", end,
                                                   ") of a sequence of ", n_past_));
  }
  const int64_t n = end - begin;
  for (size_t l = 0; l < layers_.size(); ++l) {
    if (!IsAttention(kinds_[l])) continue;
    const size_t kb = n * k_row_ * sizeof(uint16_t);
    const size_t vb = kinds_[l] == MixerKind::kMla ? 0 : n * v_row_ * sizeof(uint16_t);
    std::memcpy(out, k(static_cast<int>(l), begin), kb);
    if (vb > 0) std::memcpy(out + kb, v(static_cast<int>(l), begin), vb);
    out += kb + vb;
  }
  return absl::OkStatus();
}

absl::Status SequenceState::ImportKv(int64_t pos, const uint8_t* in, uint64_t bytes) {
  const uint64_t row = kv_bytes_per_position();
  const int64_t n = row == 0 ? 0 : static_cast<int64_t>(bytes / row);
  if (pos < 0 || (row == 0 ? bytes != 0 : bytes % row != 0) || n > n_ctx_ - pos) {
    return absl::InvalidArgumentError(absl::StrCat("cannot import ", bytes, " bytes of K/V rows (",
                                                   row, " per position) at position ", pos,
                                                   " of a state of ", n_ctx_));
  }
  for (size_t l = 0; l < layers_.size(); ++l) {
    if (!IsAttention(kinds_[l])) continue;
    const size_t kb = n * k_row_ * sizeof(uint16_t);
    const size_t vb = kinds_[l] == MixerKind::kMla ? 0 : n * v_row_ * sizeof(uint16_t);
    std::memcpy(k(static_cast<int>(l), pos), in, kb);
    if (vb > 0) std::memcpy(v(static_cast<int>(l), pos), in + kb, vb);
    in += kb + vb;
  }
  return absl::OkStatus();
}

void SequenceState::ExportRecurrent(uint8_t* out) const {
  for (size_t l = 0; l < layers_.size(); ++l) {
    if (IsAttention(kinds_[l])) continue;
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
  for (size_t l = 0; l < layers_.size(); ++l) {
    if (IsAttention(kinds_[l])) continue;
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
  for (size_t l = 0; l < layers_.size(); ++l) {
    if (!IsAttention(kinds_[l])) layers_[l].cur = 1 - layers_[l].cur;
  }
}

}  // namespace moesplit::model
