// CudaKvCache (cuda_forward.h): one sequence's KV pages and DeltaNet states on the
// device, and their commit-on-success rule.
#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/backend/cuda/cuda_forward.h"
#include "common/backend/cuda/cuda_status.h"
#include "common/backend/cuda/internal/cuda_raw.h"
#include "common/base/status.h"
#include "common/model/sequence_state.h"
#include "common/plan/memory_plan.h"

namespace moesplit::cuda {

using model::HyperParams;

namespace {

// Values per position of an attention layer's K and V rows. An MLA layer
// keeps K only (the latent and the rope key; its V is the latent inside
// K): V 0, as model::SequenceState keeps it.
int64_t KValues(const HyperParams& hp) { return hp.n_head_kv * hp.head_dim_k; }
int64_t VValues(const HyperParams& hp) {
  for (int l = 0; l < static_cast<int>(hp.layers.size()); ++l) {
    if (model::IsAttention(hp.layers[l].mixer)) {
      return model::SequenceState::KvValuesPerPosition(hp, l) - KValues(hp);
    }
  }
  return 0;
}

}  // namespace

absl::StatusOr<uint64_t> CudaKvCache::KvBytes(const HyperParams& hp, int64_t n_ctx,
                                              GgmlType type, int page_size, int64_t max_step) {
  if (n_ctx < 1 || page_size < 1 || max_step < 1) {
    return absl::InvalidArgumentError(absl::StrCat("KV cache: n_ctx = ", n_ctx, ", page size = ",
                                                   page_size, ", max step = ", max_step));
  }
  if (!raw::KvTypeSupported(type)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV cache type ", std::string(GgmlTypeName(type)), " (supported: F16, Q8_0, Q4_0)"));
  }
  const int64_t n_attn = hp.n_attention_layers();
  if (n_attn == 0) return 0;
  const auto kr = RowBytes(type, KValues(hp));
  const auto vr = RowBytes(type, VValues(hp));
  if (!kr || !vr) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV rows of ", KValues(hp), " elements do not fit ",
                     std::string(GgmlTypeName(type)), " blocks"));
  }
  const int64_t pages = (n_ctx + page_size - 1) / page_size;
  const long double total = static_cast<long double>(pages) * page_size * (*kr + *vr) * n_attn;
  if (total > static_cast<long double>(uint64_t{1} << 50)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("KV cache of ", n_ctx, " positions is too large"));
  }
  return plan::GpuKvLayoutOf(hp, n_ctx, max_step, page_size).Bytes(*kr + *vr);
}

uint64_t CudaKvCache::RecurrentBytes(const HyperParams& hp) {
  return model::SequenceState::kRecurrentBuffers * model::SequenceState::RecurrentBytes(hp);
}

absl::StatusOr<uint64_t> CudaKvCache::Bytes(const HyperParams& hp, int64_t n_ctx, GgmlType type,
                                            int page_size, int64_t max_step) {
  ASSIGN_OR_RETURN(const uint64_t kv, KvBytes(hp, n_ctx, type, page_size, max_step));
  return kv + RecurrentBytes(hp);
}

absl::StatusOr<std::unique_ptr<CudaKvCache>> CudaKvCache::Create(backend::Device* device,
                                                                 const HyperParams& hp,
                                                                 int64_t n_ctx, GgmlType type,
                                                                 int page_size, int64_t max_step) {
  ASSIGN_OR_RETURN(const uint64_t bytes, Bytes(hp, n_ctx, type, page_size, max_step));
  const plan::GpuKvLayout layout = plan::GpuKvLayoutOf(hp, n_ctx, max_step, page_size);
  std::unique_ptr<CudaKvCache> c(new CudaKvCache());
  c->device_ = device;
  c->n_ctx_ = n_ctx;
  c->page_size_ = page_size;
  c->type_ = type;
  c->n_pages_ = (n_ctx + page_size - 1) / page_size;
  c->bytes_ = bytes;
  c->conv_floats_ = hp.ssm_conv_state_floats();
  c->ssm_floats_ = hp.ssm_recurrent_state_floats();
  const bool attention = hp.n_attention_layers() > 0;
  if (attention) {
    c->k_row_bytes_ = *RowBytes(type, KValues(hp));
    c->v_row_bytes_ = *RowBytes(type, VValues(hp));
  }
  c->layer_pages_ = layout.layer_pages;
  const uint64_t rec_bytes = static_cast<uint64_t>(c->conv_floats_ + c->ssm_floats_) * 4;
  c->k_.resize(hp.n_layer);
  c->v_.resize(hp.n_layer);
  for (auto& r : c->rec_) r.resize(hp.n_layer);
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    c->kinds_.push_back(hp.layers[l].mixer);
    if (model::IsAttention(hp.layers[l].mixer)) {
      const uint64_t slots = static_cast<uint64_t>(layout.layer_pages[l]) * page_size;
      ASSIGN_OR_RETURN(c->k_[l], device->Allocate(slots * c->k_row_bytes_));
      if (c->v_row_bytes_ > 0) {
        ASSIGN_OR_RETURN(c->v_[l], device->Allocate(slots * c->v_row_bytes_));
      }
    } else {
      // Left uninitialised: a fresh cache reads zeros instead (see the header).
      for (auto& r : c->rec_) {
        ASSIGN_OR_RETURN(r[l], device->Allocate(rec_bytes));
      }
    }
  }
  if (attention) {
    ASSIGN_OR_RETURN(c->table_, device->Allocate(c->n_pages_ * sizeof(int32_t)));
    std::vector<int32_t> identity(c->n_pages_);
    for (int64_t i = 0; i < c->n_pages_; ++i) identity[i] = static_cast<int32_t>(i);
    RETURN_IF_ERROR(c->SetBlockTable(identity));
  }
  // Sliding-window rings: page i of the sequence is ring page i % R.
  c->ring_of_layer_.assign(hp.n_layer, -1);
  for (const int64_t ring : layout.ring_sizes) {
    ASSIGN_OR_RETURN(auto table, device->Allocate(c->n_pages_ * sizeof(int32_t)));
    std::vector<int32_t> wrap(c->n_pages_);
    for (int64_t i = 0; i < c->n_pages_; ++i) wrap[i] = static_cast<int32_t>(i % ring);
    RETURN_IF_CUDA_ERROR(raw::MemcpyAsync(table->data(), wrap.data(),
                                          wrap.size() * sizeof(int32_t), 0, nullptr));
    RETURN_IF_CUDA_ERROR(raw::StreamSynchronize(nullptr));
    c->ring_tables_.push_back({ring, std::move(table)});
  }
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    const int64_t pages = layout.layer_pages[l];
    if (pages == 0 || pages == c->n_pages_) continue;
    for (size_t r = 0; r < c->ring_tables_.size(); ++r) {
      if (c->ring_tables_[r].first == pages) c->ring_of_layer_[l] = static_cast<int>(r);
    }
    const int64_t keep = pages * page_size - hp.layers[l].sliding_window;
    c->ring_keep_ = c->ring_keep_ < 0 ? keep : std::min(c->ring_keep_, keep);
  }
  return c;
}

bool CudaKvCache::Matches(const HyperParams& hp) const {
  if (static_cast<int64_t>(kinds_.size()) != hp.n_layer) return false;
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    if (kinds_[l] != hp.layers[l].mixer) return false;
  }
  if (conv_floats_ != hp.ssm_conv_state_floats() || ssm_floats_ != hp.ssm_recurrent_state_floats()) return false;
  if (hp.n_attention_layers() == 0) return true;
  const auto kr = RowBytes(type_, KValues(hp));
  const auto vr = RowBytes(type_, VValues(hp));
  return kr && vr && *kr == k_row_bytes_ && *vr == v_row_bytes_;
}

bool CudaKvCache::recurrent() const {
  return std::any_of(kinds_.begin(), kinds_.end(),
                     [](model::MixerKind k) { return !model::IsAttention(k); });
}

absl::Status CudaKvCache::Truncate(int64_t n) {
  if (n < 0 || n > n_past_) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot truncate the KV cache to ", n, " positions; it holds ", n_past_));
  }
  if (n == n_past_) return absl::OkStatus();
  if (n == 0) {
    Clear();
    return absl::OkStatus();
  }
  if (recurrent()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot rewind the recurrent state from ", n_past_, " to ", n,
        " positions: the GPU sequence state keeps no checkpoints (only 0 or ", n_past_, ")"));
  }
  RETURN_IF_ERROR(model::RingRewind(n_past_, written_end_, n, ring_keep_));
  n_past_ = n;
  return absl::OkStatus();
}

absl::Status CudaKvCache::CheckRoom(int64_t n_new) const {
  if (n_new < 0 || n_new > n_ctx_ - n_past_) {
    return absl::OutOfRangeError(absl::StrCat("KV cache full: ", n_past_, " positions used + ",
                                              n_new, " new > capacity n_ctx ", n_ctx_));
  }
  return absl::OkStatus();
}

absl::Status CudaKvCache::WindowIntact() const {
  return model::RingWindowIntact(n_past_, written_end_, ring_keep_);
}

void CudaKvCache::Commit(int64_t n_new) {
  n_past_ += n_new;
  written_end_ = std::max(written_end_, n_past_);
  cur_ = 1 - cur_;
  fresh_ = false;
}

absl::Status CudaKvCache::SetBlockTable(absl::Span<const int32_t> pages) {
  if (static_cast<int64_t>(pages.size()) != n_pages_) {
    return absl::InvalidArgumentError(absl::StrCat("block table of ", pages.size(),
                                                   " pages; the cache needs ", n_pages_));
  }
  std::vector<bool> seen(n_pages_, false);
  for (size_t i = 0; i < pages.size(); ++i) {
    if (pages[i] < 0 || pages[i] >= n_pages_ || seen[pages[i]]) {
      return absl::InvalidArgumentError(absl::StrCat("block table entry ", i, " = ", pages[i],
                                                     " is out of range or repeated"));
    }
    seen[pages[i]] = true;
  }
  host_table_.assign(pages.begin(), pages.end());
  if (table_ == nullptr) return absl::OkStatus();  // no attention layer reads it
  RETURN_IF_CUDA_ERROR(raw::MemcpyAsync(table_->data(), pages.data(),
                                        pages.size() * sizeof(int32_t), 0, nullptr));
  RETURN_IF_CUDA_ERROR(raw::StreamSynchronize(nullptr));
  return absl::OkStatus();
}

uint64_t CudaKvCache::kv_bytes_per_position() const {
  int64_t n_attn = 0;
  for (model::MixerKind k : kinds_) n_attn += model::IsAttention(k) ? 1 : 0;
  return static_cast<uint64_t>(n_attn) * (k_row_bytes_ + v_row_bytes_);
}

uint64_t CudaKvCache::recurrent_bytes() const {
  int64_t n_rec = 0;
  for (model::MixerKind k : kinds_) n_rec += model::IsAttention(k) ? 0 : 1;
  return static_cast<uint64_t>(n_rec) * (conv_floats_ + ssm_floats_) * sizeof(float);
}

absl::Status CudaKvCache::CopyRows(int64_t pos, int64_t n, uint8_t* other, bool out,
                                   bool other_on_device) const {
  const int kind = other_on_device ? 2 : out ? 1 : 0;
  for (size_t l = 0; l < kinds_.size(); ++l) {
    if (!model::IsAttention(kinds_[l])) continue;
    // A sliding-window ring holds only its last layer_positions() rows:
    // page i of the sequence is ring page i % R.
    const int64_t ring = ring_of_layer_[l] < 0 ? 0 : layer_pages_[l];
    if (ring > 0 && out && pos < written_end_ - ring * page_size_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "positions from ", pos, " are no longer in layer ", l, "'s sliding-window ring (it holds ",
          ring * page_size_, " positions up to ", written_end_, ")"));
    }
    for (int part = 0; part < (v_row_bytes_ > 0 ? 2 : 1); ++part) {
      uint8_t* base = static_cast<uint8_t*>((part == 0 ? k_ : v_)[l]->data());
      const uint64_t row = part == 0 ? k_row_bytes_ : v_row_bytes_;
      // Runs of positions within one page are contiguous.
      for (int64_t p = pos; p < pos + n;) {
        const int64_t in_page = p % page_size_;
        const int64_t run = std::min<int64_t>(page_size_ - in_page, pos + n - p);
        const int64_t page = ring > 0 ? (p / page_size_) % ring : host_table_[p / page_size_];
        uint8_t* dev = base + (static_cast<uint64_t>(page) * page_size_ + in_page) * row;
        RETURN_IF_CUDA_ERROR(out ? raw::MemcpyAsync(other, dev, run * row, kind, nullptr)
                                 : raw::MemcpyAsync(dev, other, run * row, kind, nullptr));
        other += run * row;
        p += run;
      }
    }
  }
  RETURN_IF_CUDA_ERROR(raw::StreamSynchronize(nullptr));
  return absl::OkStatus();
}

absl::Status CudaKvCache::ExportKv(int64_t begin, int64_t end, uint8_t* out) const {
  RETURN_IF_ERROR(CheckExport(begin, end));
  return CopyRows(begin, end - begin, out, /*out=*/true, /*other_on_device=*/false);
}

absl::Status CudaKvCache::ExportKvToDevice(int64_t begin, int64_t end, uint8_t* out) const {
  RETURN_IF_ERROR(CheckExport(begin, end));
  return CopyRows(begin, end - begin, out, /*out=*/true, /*other_on_device=*/true);
}

absl::Status CudaKvCache::ImportKv(int64_t pos, const uint8_t* in, uint64_t bytes) {
  ASSIGN_OR_RETURN(const int64_t n, model::KvImportRows(pos, bytes, kv_bytes_per_position(), n_ctx_, "cache"));
  return CopyRows(pos, n, const_cast<uint8_t*>(in), /*out=*/false, /*other_on_device=*/false);
}

absl::Status CudaKvCache::ImportKvFromDevice(int64_t pos, const uint8_t* in, uint64_t bytes) {
  ASSIGN_OR_RETURN(const int64_t n, model::KvImportRows(pos, bytes, kv_bytes_per_position(), n_ctx_, "cache"));
  return CopyRows(pos, n, const_cast<uint8_t*>(in), /*out=*/false, /*other_on_device=*/true);
}

absl::Status CudaKvCache::CheckExport(int64_t begin, int64_t end) const {
  if (begin < 0 || begin > end || end > n_past_) {
    return absl::InvalidArgumentError(absl::StrCat("cannot export positions [", begin, ", ", end,
                                                   ") of a sequence of ", n_past_));
  }
  return absl::OkStatus();
}

absl::Status CudaKvCache::ExportRecurrent(uint8_t* out) const {
  const uint64_t bytes = static_cast<uint64_t>(conv_floats_ + ssm_floats_) * sizeof(float);
  for (size_t l = 0; l < kinds_.size(); ++l) {
    if (model::IsAttention(kinds_[l])) continue;
    if (fresh_) {
      std::fill(out, out + bytes, uint8_t{0});
    } else {
      RETURN_IF_CUDA_ERROR(raw::MemcpyAsync(out, rec_[cur_][l]->data(), bytes, 1, nullptr));
    }
    out += bytes;
  }
  RETURN_IF_CUDA_ERROR(raw::StreamSynchronize(nullptr));
  return absl::OkStatus();
}

absl::Status CudaKvCache::Resume(int64_t n, const uint8_t* recurrent, uint64_t bytes) {
  if (n < 0 || n > n_ctx_ || bytes != recurrent_bytes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resume at ", n, " positions (the cache holds ", n_ctx_, ") with ",
                     bytes, " bytes of recurrent state (", recurrent_bytes(), " expected)"));
  }
  const uint64_t layer_bytes = static_cast<uint64_t>(conv_floats_ + ssm_floats_) * sizeof(float);
  for (size_t l = 0; l < kinds_.size(); ++l) {
    if (model::IsAttention(kinds_[l])) continue;
    RETURN_IF_CUDA_ERROR(raw::MemcpyAsync(rec_[cur_][l]->data(), recurrent, layer_bytes, 0, nullptr));
    recurrent += layer_bytes;
  }
  RETURN_IF_CUDA_ERROR(raw::StreamSynchronize(nullptr));
  n_past_ = n;
  written_end_ = n;  // the rings hold the imported rows before n
  fresh_ = false;  // the state written is current
  return absl::OkStatus();
}

uint8_t* CudaKvCache::k(int layer) const { return static_cast<uint8_t*>(k_[layer]->data()); }
uint8_t* CudaKvCache::v(int layer) const {
  return v_[layer] != nullptr ? static_cast<uint8_t*>(v_[layer]->data()) : k(layer);
}
const int32_t* CudaKvCache::block_table(int layer) const {
  const int r = ring_of_layer_[layer];
  return static_cast<const int32_t*>(r < 0 ? table_->data() : ring_tables_[r].second->data());
}
int64_t CudaKvCache::layer_positions(int layer) const {
  return layer_pages_[layer] * page_size_;
}

const float* CudaKvCache::conv_in(int layer) const {
  return fresh_ ? nullptr : static_cast<const float*>(rec_[cur_][layer]->data());
}
const float* CudaKvCache::recurrent_in(int layer) const {
  return fresh_ ? nullptr : static_cast<const float*>(rec_[cur_][layer]->data()) + conv_floats_;
}
float* CudaKvCache::conv_out(int layer) const {
  return static_cast<float*>(rec_[1 - cur_][layer]->data());
}
float* CudaKvCache::recurrent_out(int layer) const {
  return static_cast<float*>(rec_[1 - cur_][layer]->data()) + conv_floats_;
}

}  // namespace moesplit::cuda
