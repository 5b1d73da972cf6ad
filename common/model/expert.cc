#include "common/model/expert.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/memory_bandwidth.h"
#include "common/base/scratch_buffer.h"
#include "common/base/status.h"
#include "common/model/internal/ops.h"
#include "common/quant/gemm.h"
#include "common/quant/packed.h"
#include "common/quant/quant.h"

namespace moesplit::model {

ExpertStore::ExpertStore(std::shared_ptr<const Model> model)
    : n_layer_total_(model->n_layer()),
      n_expert_total_(model->hparams().n_expert),
      expert_end_(static_cast<int>(model->hparams().n_expert)),
      d_(model->hparams().n_embd_experts()),
      n_ff_(model->hparams().n_ff_exp),
      ffn_(model->hparams().expert_ffn) {
  for (int l = 0; l < model->n_layer(); ++l) {
    const LayerWeights& lw = model->layer(l);
    LayerExperts le{lw.gate_exps, lw.up_exps, lw.down_exps};
    SliceExpertBiases(lw, 0, expert_end_, n_ff_, d_, &le);
    layers_.push_back(std::move(le));
  }
  owner_ = std::move(model);
}

void SliceExpertBiases(const LayerWeights& lw, int eb, int ee, int64_t n_ff, int64_t d,
                       LayerExperts* le) {
  auto slice = [&](const std::vector<float>& b, int64_t width, std::vector<float>* out) {
    if (b.empty()) return out->clear();
    out->assign(b.begin() + eb * width, b.begin() + ee * width);
  };
  slice(lw.gate_exps_b, n_ff, &le->gate_b);
  slice(lw.up_exps_b, n_ff, &le->up_b);
  slice(lw.down_exps_b, d, &le->down_b);
}

ExpertStore::ExpertStore(std::vector<LayerExperts> layers, int n_layer_total, int n_expert_total,
                         int layer_begin, int expert_begin, int64_t d, int64_t n_ff,
                         std::shared_ptr<const void> owner, ExpertFfnSpec ffn)
    : layers_(std::move(layers)),
      n_layer_total_(n_layer_total),
      n_expert_total_(n_expert_total),
      layer_begin_(layer_begin),
      expert_begin_(expert_begin),
      expert_end_(expert_begin),
      d_(d),
      n_ff_(n_ff),
      ffn_(ffn),
      owner_(std::move(owner)) {
  // Dense-FFN layers (deepseek2's leading ones) hold no experts.
  for (const LayerExperts& le : layers_) {
    if (le.gate.data != nullptr) {
      expert_end_ = expert_begin + static_cast<int>(le.gate.n_expert);
      break;
    }
  }
}

uint64_t CopiedExpertBytes(const ExpertTensorView& src, int eb, int ee, bool pack) {
  return CopiedExpertView(src, eb, ee, pack, nullptr).expert_bytes * static_cast<uint64_t>(ee - eb);
}

ExpertTensorView CopiedExpertView(const ExpertTensorView& src, int eb, int ee, bool pack, uint8_t* dst) {
  ExpertTensorView v = src;
  v.data = dst;
  v.n_expert = ee - eb;
  const uint64_t packed = pack && !src.packed ? quant::PackedMatrixBytes(src.type, src.n_out, src.n_in) : 0;
  // A view of half a fused gate/up tensor strides over the other half; its
  // copy does not.
  if (!src.packed) v.expert_bytes = src.row_bytes * static_cast<uint64_t>(src.n_out);
  if (packed > 0) {
    v.expert_bytes = packed;
    v.packed = true;
  }
  return v;
}

uint64_t ReadExpertWeights(const LayerExperts& le, absl::Span<const int32_t> expert_ids,
                           ThreadPool* pool) {
  std::vector<int32_t> experts(expert_ids.begin(), expert_ids.end());
  std::sort(experts.begin(), experts.end());
  experts.erase(std::unique(experts.begin(), experts.end()), experts.end());
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> total{0};
  pool->RunOnAll([&](int) {
    uint64_t sum = 0;
    for (size_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < experts.size();) {
      for (const ExpertTensorView* t : {&le.gate, &le.up, &le.down}) {
        if (t == &le.gate && le.gate.data == le.up.data) continue;  // relu^2: up alone
        sum += SumWords(t->data + experts[i] * t->expert_bytes, t->expert_bytes);
      }
    }
    total.fetch_add(sum, std::memory_order_relaxed);
  });
  return total.load();
}

ExpertTensorView CopyExperts(const ExpertTensorView& src, int eb, int ee, bool pack, uint8_t* dst) {
  const ExpertTensorView v = CopiedExpertView(src, eb, ee, pack, dst);
  if (v.packed == src.packed && v.expert_bytes == src.expert_bytes) {
    std::memcpy(dst, src.data + static_cast<uint64_t>(eb) * src.expert_bytes,
                src.expert_bytes * static_cast<uint64_t>(ee - eb));
    return v;
  }
  if (v.packed == src.packed) {  // a strided view: expert by expert
    for (int e = eb; e < ee; ++e) {
      std::memcpy(dst + static_cast<uint64_t>(e - eb) * v.expert_bytes,
                  src.data + static_cast<uint64_t>(e) * src.expert_bytes, v.expert_bytes);
    }
    return v;
  }
  for (int e = eb; e < ee; ++e) {
    quant::PackRows(src.type, src.data + static_cast<uint64_t>(e) * src.expert_bytes, src.row_bytes,
                    src.n_out, src.n_in, dst + static_cast<uint64_t>(e - eb) * v.expert_bytes);
  }
  return v;
}

absl::StatusOr<ExpertStore> PackedExpertStore(std::shared_ptr<const Model> model, ThreadPool* pool) {
  const int n_layer = model->n_layer();
  const int n_expert = static_cast<int>(model->hparams().n_expert);
  uint64_t total = 0;
  for (int l = 0; l < n_layer; ++l) {
    const LayerWeights& lw = model->layer(l);
    if (lw.gate_exps.data == nullptr) continue;  // a dense-FFN layer
    for (const ExpertTensorView* v : {&lw.gate_exps, &lw.up_exps, &lw.down_exps}) {
      if (v == &lw.gate_exps && lw.gate_exps.data == lw.up_exps.data) continue;  // relu^2: up
      total += (CopiedExpertBytes(*v, 0, n_expert, quant::PackedPreferred(v->type)) + 63) / 64 * 64;
    }
  }
  // On huge pages: decode reads scattered experts (see the worker's arena).
  std::shared_ptr<uint8_t[]> buf = AllocateHugePageBytes(total + 64);
  if (buf == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("no memory for a packed copy of the routed experts (", total, " bytes)"));
  }
  uint8_t* dst = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(buf.get()) + 63) & ~uintptr_t{63});
  std::vector<LayerExperts> layers;
  std::vector<ExpertCopyJob> jobs;
  for (int l = 0; l < n_layer; ++l) {
    const LayerWeights& lw = model->layer(l);
    LayerExperts le;
    if (lw.gate_exps.data == nullptr) {  // a dense-FFN layer: none
      layers.push_back(std::move(le));
      continue;
    }
    ExpertTensorView* out[3] = {&le.gate, &le.up, &le.down};
    const ExpertTensorView* in[3] = {&lw.gate_exps, &lw.up_exps, &lw.down_exps};
    // A non-gated activation's gate views up (Model::BindLayer): one copy.
    const bool gate_is_up = lw.gate_exps.data == lw.up_exps.data;
    for (int k = gate_is_up ? 1 : 0; k < 3; ++k) {
      const bool pack = quant::PackedPreferred(in[k]->type);
      *out[k] = CopiedExpertView(*in[k], 0, n_expert, pack, dst);
      jobs.push_back({in[k], 0, n_expert, pack, dst});
      dst += (CopiedExpertBytes(*in[k], 0, n_expert, pack) + 63) / 64 * 64;
    }
    if (gate_is_up) le.gate = le.up;
    SliceExpertBiases(lw, 0, n_expert, model->hparams().n_ff_exp, model->hparams().n_embd_experts(),
                      &le);
    layers.push_back(std::move(le));
  }
  RunExpertCopies(jobs, pool);
  return ExpertStore(std::move(layers), n_layer, n_expert, 0, 0, model->hparams().n_embd_experts(),
                     model->hparams().n_ff_exp, std::move(buf), model->hparams().expert_ffn);
}

ExpertStore LocalExpertStore(std::shared_ptr<const Model> model, ThreadPool* pool) {
  bool any = false;
  for (int l = 0; l < model->n_layer(); ++l) {
    const LayerWeights& lw = model->layer(l);
    if (lw.gate_exps.data == nullptr) continue;
    for (const ExpertTensorView* v : {&lw.gate_exps, &lw.up_exps, &lw.down_exps}) {
      any |= quant::PackedPreferred(v->type) && quant::PackedMatrixBytes(v->type, v->n_out, v->n_in) > 0;
    }
  }
  if (any) {
    absl::StatusOr<ExpertStore> packed = PackedExpertStore(model, pool);
    if (packed.ok()) return *std::move(packed);
  }
  return ExpertStore(std::move(model));
}

void RunExpertCopies(absl::Span<const ExpertCopyJob> jobs, ThreadPool* pool) {
  // One item per (job, expert): expert-sized copies spread over the threads.
  std::vector<std::pair<int32_t, int32_t>> items;
  for (size_t j = 0; j < jobs.size(); ++j) {
    for (int e = jobs[j].eb; e < jobs[j].ee; ++e) items.push_back({static_cast<int32_t>(j), e});
  }
  std::atomic<size_t> next{0};
  auto work = [&](int) {
    for (size_t i; (i = next.fetch_add(1)) < items.size();) {
      const ExpertCopyJob& job = jobs[items[i].first];
      const int e = items[i].second;
      const uint64_t per = CopiedExpertBytes(*job.src, 0, 1, job.pack);
      CopyExperts(*job.src, e, e + 1, job.pack, job.dst + static_cast<uint64_t>(e - job.eb) * per);
    }
  };
  if (pool == nullptr) {
    work(0);
  } else {
    pool->RunOnAll(work);
  }
}

absl::Status ValidateExpertCall(const ExpertCallView& call, const ExpertStore& store) {
  auto bad = [&](auto&&... parts) {
    return absl::InvalidArgumentError(
        absl::StrCat("expert call ", call.call_id, ": ", parts...));
  };
  if (call.layer < store.layer_begin() || call.layer >= store.layer_end()) {
    return bad("layer ", call.layer, " out of range [", store.layer_begin(), ", ",
               store.layer_end(), ")");
  }
  if (store.Layer(call.layer).gate.data == nullptr) {
    return bad("layer ", call.layer, " has no routed experts (a dense-FFN layer)");
  }
  if (call.d != store.d()) return bad("d = ", call.d, ", the model's is ", store.d());
  if (call.n_tokens < 0) return bad("negative n_tokens ", call.n_tokens);
  const uint64_t n_tokens = static_cast<uint64_t>(call.n_tokens);
  if (call.hidden.size() != n_tokens * static_cast<uint64_t>(call.d)) {
    return bad("hidden has ", call.hidden.size(), " values, expected n_tokens x d = ",
               n_tokens * call.d);
  }
  if (call.token_offsets.size() != n_tokens + 1) {
    return bad("token_offsets has ", call.token_offsets.size(), " entries, expected ",
               n_tokens + 1);
  }
  if (call.token_offsets[0] != 0) return bad("token_offsets[0] = ", call.token_offsets[0]);
  for (uint64_t t = 0; t < n_tokens; ++t) {
    if (call.token_offsets[t + 1] < call.token_offsets[t]) {
      return bad("token_offsets decrease at token ", t);
    }
  }
  const uint64_t n_entries = call.token_offsets[n_tokens];
  if (call.expert_ids.size() != n_entries || call.weights.size() != n_entries) {
    return bad("token_offsets end at ", n_entries, " but there are ",
               call.expert_ids.size(), " expert ids and ", call.weights.size(), " weights");
  }
  for (uint64_t k = 0; k < n_entries; ++k) {
    if (call.expert_ids[k] < store.expert_begin() || call.expert_ids[k] >= store.expert_end()) {
      return bad("expert id ", call.expert_ids[k], " out of range [", store.expert_begin(),
                 ", ", store.expert_end(),
                 ")");
    }
    if (!std::isfinite(call.weights[k])) return bad("weight ", k, " is not finite");
  }
  return absl::OkStatus();
}


// ---- fused expert FFN ---------------------------------------------------------

namespace {

constexpr int64_t kSmallBlock = 256;  // rows of the small work items (a multiple of 16)
constexpr int kCallerConverts = 4;  // calls up to this many tokens: the caller converts
// Calls of up to this many tokens with at least 2 experts per thread run
// the decode split (see PrepareItems).
constexpr int kDecodeSplitTokens = 4;
// Most of a down item a thread prefetches while its expert's gate/up rows
// are still being computed (within a 1 MiB L2).
constexpr uint64_t kWaitPrefetchBytes = 768 << 10;

// The bytes holding rows [r0, r0 + nr) of w (packed or GGUF rows).
std::pair<const uint8_t*, uint64_t> RowBytesOf(const quant::WeightView& w, int64_t r0, int64_t nr) {
  if (w.packed) {
    return {w.data + quant::PackedMatrixBytes(w.type, r0, w.n_cols),
            quant::PackedMatrixBytes(w.type, nr, w.n_cols)};
  }
  return {w.data + r0 * w.row_bytes, static_cast<uint64_t>(nr) * w.row_bytes};
}

// y[i] = vec_dot of rows r0 + i (i < nr) of w with activation row a.
inline void DotRows(quant::VecDotFn dot, quant::VecDotRowsFn rows, int64_t n, const quant::WeightView& w,
                    int64_t r0, int64_t nr, const uint8_t* a, float* y) {
  const uint8_t* base = w.data + r0 * w.row_bytes;
  if (rows != nullptr) {
    rows(n, base, w.row_bytes, nr, a, y);
    return;
  }
  for (int64_t i = 0; i < nr; ++i) y[i] = dot(n, base + i * w.row_bytes, a);
}

inline float* Floats(const ScratchBuffer& b) { return reinterpret_cast<float*>(b.data()); }

// dst[j] += src[j] * w for j < n, as a product rounded to float and then a
// sum (never fused), 16 or 8 lanes at a time where the CPU has them: every
// lane rounds exactly like the scalar loop, so both down schedules and all
// CPUs give the same bits.
#if defined(__x86_64__)
__attribute__((target("avx512f"))) int64_t AddWeighted16(float* dst, const float* src, float w,
                                                         int64_t n) {
  const __m512 vw = _mm512_set1_ps(w);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 p = _mm512_mul_ps(_mm512_loadu_ps(src + j), vw);
    _mm512_storeu_ps(dst + j, _mm512_add_ps(_mm512_loadu_ps(dst + j), p));
  }
  return j;
}
__attribute__((target("avx2"))) int64_t AddWeighted8(float* dst, const float* src, float w,
                                                     int64_t n) {
  const __m256 vw = _mm256_set1_ps(w);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 p = _mm256_mul_ps(_mm256_loadu_ps(src + j), vw);
    _mm256_storeu_ps(dst + j, _mm256_add_ps(_mm256_loadu_ps(dst + j), p));
  }
  return j;
}
#endif

void AddWeighted(float* dst, const float* src, float w, int64_t n) {
  int64_t j = 0;
#if defined(__x86_64__)
  static const int lanes = __builtin_cpu_supports("avx512f") ? 16
                           : __builtin_cpu_supports("avx2")  ? 8
                                                             : 1;
  if (lanes == 16) {
    j = AddWeighted16(dst, src, w, n);
  } else if (lanes == 8) {
    j = AddWeighted8(dst, src, w, n);
  }
#endif
  for (; j < n; ++j) {
    const float p = src[j] * w;  // ISO C++ build (-ffp-contract=off), no FMA target: never fused
    dst[j] += p;
  }
}

// Waits until done(): calls while_waiting() between checks until it returns
// false (nothing left to do), then spins briefly and then yields (the
// machine may be oversubscribed).
template <typename Done, typename Fn>
void SpinUntil(Done&& done, Fn&& while_waiting) {
  bool busy = true;
  while (busy && !done()) busy = while_waiting();
  for (int spins = 0; !done(); ++spins) {
    if (spins < 4000) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    } else {
      std::this_thread::yield();
    }
  }
}

// Barrier for the threads of one RunOnAll (SpinUntil).
class SpinBarrier {
 public:
  void Reset(int n) {
    n_ = n;
    count_.store(0, std::memory_order_relaxed);
  }
  void Wait() {
    if (n_ == 1) return;
    const uint32_t gen = gen_.load(std::memory_order_acquire);
    if (count_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_) {
      count_.store(0, std::memory_order_relaxed);
      gen_.fetch_add(1, std::memory_order_acq_rel);
      return;
    }
    SpinUntil([&] { return gen_.load(std::memory_order_acquire) != gen; }, [] { return false; });
  }

 private:
  std::atomic<int> count_{0};
  std::atomic<uint32_t> gen_{0};
  int n_ = 1;
};

// ---- SiLU(gate) * up, bit-identical to internal::SwiGlu ------------------------
// (ggml_vec_swiglu_f32 on AVX-512: ggml_v_expf on whole 16-lane blocks,
// expf on the last n_ff % 16 columns; internal::SiluVector).

// out[i] = SiLU(g[i]) * u[i] for columns col0 .. col0 + n of rows n_ff wide,
// exactly as internal::SwiGlu on the whole row. REQUIRES: col0 % 16 == 0.
void SwiGluSpan(const float* g, const float* u, int64_t col0, int64_t n, int64_t n_ff, float* out) {
  const int64_t vec_end = n_ff - n_ff % internal::kGgmlVectorWidth;
  const int64_t vec = std::max<int64_t>(0, std::min(n, vec_end - col0));
  internal::SiluVector(g, u, vec, out);
  for (int64_t i = vec; i < n; ++i) out[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

// gpt-oss's clamped SwiGLU (ggml_compute_forward_swiglu_oai_f32, scalar expf):
// out[i] = x / (1 + exp(alpha * -x)) * (y + 1), x = min(g[i], limit),
// y = clamp(u[i], -limit, limit).
void SwiGluOaiSpan(const float* g, const float* u, int64_t n, float alpha, float limit,
                   float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = std::min(g[i], limit);
    const float y = std::clamp(u[i], -limit, limit);
    const float glu = x / (1.0f + std::exp(alpha * (-x)));
    out[i] = glu * (y + 1.0f);
  }
}

// b[0..n) added to each of `rows` rows of n values (stride ld) at y.
void AddBiasRows(const float* b, int64_t n, int64_t rows, int64_t ld, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < n; ++c) y[r * ld + c] += b[c];
  }
}

// Rows [r0, r0 + nr) of a matrix; `owner`: the used expert (gate/up items).
struct RowBlock {
  int32_t owner, r0, nr;
};

// Guided split of [0, rows) for dynamically claimed work items: about 3/4 of
// the rows in blocks of `big` (long weight streams), the rest in blocks of
// kSmallBlock (to even out the threads' finishing times). Appends big blocks
// to *big_out and small ones to *small_out. Block edges are multiples of 16.
void GuidedSplit(int32_t owner, int64_t rows, int64_t big, std::vector<RowBlock>* big_out,
                 std::vector<RowBlock>* small_out) {
  big = std::max<int64_t>(16, big / 16 * 16);
  const int64_t big_rows = std::min(rows, (rows * 3 / 4) / big * big);
  for (int64_t r = 0; r < big_rows; r += big) big_out->push_back({owner, int32_t(r), int32_t(big)});
  for (int64_t r = big_rows; r < rows; r += kSmallBlock) {
    small_out->push_back({owner, int32_t(r), int32_t(std::min(kSmallBlock, rows - r))});
  }
}

// Decode split items: one block of all `rows` for each of the first n_whole
// used experts, then blocks of `small` rows for the others (so the big items
// are claimed first).
void ExpertItems(int64_t n_used, int64_t n_whole, int64_t rows, int64_t small,
                 std::vector<RowBlock>* out) {
  for (int64_t ui = 0; ui < n_used; ++ui) {
    const int64_t block = ui < n_whole ? rows : small;
    for (int64_t r = 0; r < rows; r += block) {
      out->push_back({int32_t(ui), int32_t(r), int32_t(std::min(block, rows - r))});
    }
  }
}

struct UsedExpert {
  int32_t expert = 0;
  int32_t slot_begin = 0, slot_end = 0;
  bool tiled_gu = false, tiled_down = false;
  uint64_t tiles_gu = 0, tiles_down = 0;  // byte offsets into the tile buffers
};

struct ThreadScratch {
  ScratchBuffer panel;  // quant::TileGemm scratch
  ScratchBuffer g, u;   // floats: tokens x gate/up block rows
  ScratchBuffer out;    // floats: slots x down row block
  std::vector<const uint8_t*> rows;
};

// Activation rows in one format: row i at base + i * row_bytes.
struct ActRows {
  GgmlType type = GgmlType::kF32;
  uint64_t row_bytes = 0;
  const uint8_t* base = nullptr;
  const uint8_t* Row(int64_t i) const { return base + i * row_bytes; }
};

}  // namespace

struct InProcessExperts::Scratch {
  // Plan: entries grouped by expert ("slots"), in entry order per expert.
  std::vector<int32_t> slot_token, entry_slot, count;
  std::vector<UsedExpert> used;
  ScratchBuffer xg, xu, hq;       // converted hidden (per token) and intermediate (per slot) rows
  ScratchBuffer tiles_g, tiles_u, tiles_d;
  ScratchBuffer h;                // floats: slots x n_ff, SiLU(gate) * up
  std::unique_ptr<std::atomic<int>[]> remaining;  // per used expert: gate/up blocks left
  std::unique_ptr<std::atomic<int>[]> ready;      // per used expert: 1 once FinishExpert ran
  size_t remaining_cap = 0;
  std::vector<ThreadScratch> threads;
  std::vector<RowBlock> gate_up_items, down_items, small_items, reduce_items;
  ScratchBuffer down_out;  // floats: slots x n_embd (decode split only)
  std::atomic<int64_t> next[5];
  SpinBarrier barrier;
};

namespace {

// Weight checks the kernels rely on (the model loader's tensors pass them).
absl::Status CheckExpertWeights(const char* what, const quant::WeightView& w, int64_t n_rows,
                                int64_t n_cols) {
  const quant::TypeTraits* t = quant::GetTypeTraits(w.type);
  if (t == nullptr || t->vec_dot == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": no dot kernel for ", std::string(GgmlTypeName(w.type))));
  }
  const std::optional<uint64_t> need = RowBytes(w.type, n_cols);
  if (w.n_rows != n_rows || w.n_cols != n_cols || !need.has_value() || w.row_bytes < *need ||
      w.data == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": expert tensor shape ", w.n_rows, "x",
                                                   w.n_cols, ", expected ", n_rows, "x", n_cols));
  }
  return absl::OkStatus();
}

}  // namespace

// One call's state; Run() executes it on the pool.
class FusedExpertCall {
 public:
  FusedExpertCall(const ExpertStore& store, const ExpertCallView& call, ThreadPool* pool,
                  InProcessExperts::Scratch* s, float* partial);
  void Run();

 private:
  void RunThread(int tid);
  void Plan();
  void Prepare();
  void PrepareTiles();
  void PrepareItems();
  void PrepareThreads();
  void ConvertTokens(int64_t t0, int64_t t1);
  void PackGateUpTiles(const UsedExpert& u, ThreadScratch* ts);
  void GateUp(int64_t item, ThreadScratch* ts);
  void FinishExpert(const UsedExpert& u, ThreadScratch* ts);
  void Down(int64_t item, ThreadScratch* ts);
  void DownExpert(int64_t item, ThreadScratch* ts);
  void AddDownBias(const UsedExpert& u, int64_t r0, int64_t nr, float* out, int64_t ld) const;
  void Reduce(const float* out, int64_t ld, int64_t r0, int64_t nr);
  template <typename Fn>
  void RunItems(int phase, int64_t n, Fn&& fn);

  const ExpertStore& store_;
  const ExpertCallView call_;
  ThreadPool* const pool_;
  InProcessExperts::Scratch& s_;
  float* const partial_;
  const int64_t d_, ff_;
  const int n_threads_;
  GgmlType tg_, tu_, td_;  // weight types
  quant::VecDotFn gdot_ = nullptr, udot_ = nullptr, ddot_ = nullptr;
  quant::VecDotRowsFn gdot_rows_ = nullptr, udot_rows_ = nullptr, ddot_rows_ = nullptr;
  quant::QuantRowFn qg_ = nullptr, qu_ = nullptr, qd_ = nullptr;  // nullptr: rows used as f32
  ActRows xg_, xu_, hq_;   // converted rows
  int64_t n_slots_ = 0, max_tokens_ = 1, max_gate_up_rows_ = 0, max_down_rows_ = 0;
  bool any_tiled_gu_ = false, any_tiled_down_ = false;
  bool packed_gu_ = false, packed_d_ = false;  // gate and up / down in the packed layout
  bool decode_split_ = false;  // down items per expert, then a reduction phase
};

FusedExpertCall::FusedExpertCall(const ExpertStore& store, const ExpertCallView& call, ThreadPool* pool,
                                 InProcessExperts::Scratch* s, float* partial)
    : store_(store),
      call_(call),
      pool_(pool),
      s_(*s),
      partial_(partial),
      d_(call.d),
      ff_(store.n_ff()),
      n_threads_(pool != nullptr ? pool->size() : 1) {
  const int e0 = store.expert_begin();
  tg_ = store.Gate(call.layer, e0).type;
  tu_ = store.Up(call.layer, e0).type;
  td_ = store.Down(call.layer, e0).type;
  packed_gu_ = store.Gate(call.layer, e0).packed && store.Up(call.layer, e0).packed;
  packed_d_ = store.Down(call.layer, e0).packed;
  Plan();
  Prepare();
}

// Entries grouped by expert into slots (entry order within an expert).
void FusedExpertCall::Plan() {
  const int eb = store_.expert_begin(), ee = store_.expert_end();
  const size_t n_entries = call_.expert_ids.size();
  s_.count.assign(ee - eb, 0);
  for (int32_t id : call_.expert_ids) ++s_.count[id - eb];
  s_.used.clear();
  const bool tile_gu = !packed_gu_ && quant::TileGemmAvailable(tg_) && quant::TileGemmAvailable(tu_);
  const bool tile_d = !packed_d_ && quant::TileGemmAvailable(td_);
  int32_t slot = 0;
  for (int e = eb; e < ee; ++e) {
    const int32_t n = s_.count[e - eb];
    if (n == 0) continue;
    UsedExpert u;
    u.expert = e;
    u.slot_begin = slot;
    u.slot_end = slot + n;
    u.tiled_gu = tile_gu && n >= InProcessExperts::kMinTiledTokens;
    u.tiled_down = tile_d && n >= InProcessExperts::kMinTiledTokens;
    any_tiled_gu_ |= u.tiled_gu;
    s_.count[e - eb] = slot;  // now the next free slot of e
    slot += n;
    s_.used.push_back(u);
  }
  n_slots_ = slot;
  s_.slot_token.resize(n_slots_);
  s_.entry_slot.resize(n_entries);
  for (int32_t t = 0; t < call_.n_tokens; ++t) {
    for (uint32_t k = call_.token_offsets[t]; k < call_.token_offsets[t + 1]; ++k) {
      const int32_t sl = s_.count[call_.expert_ids[k] - eb]++;
      s_.entry_slot[k] = sl;
      s_.slot_token[sl] = t;
    }
  }
}

void FusedExpertCall::Prepare() {
  const quant::TypeTraits* g = quant::GetTypeTraits(tg_);
  const quant::TypeTraits* u = quant::GetTypeTraits(tu_);
  const quant::TypeTraits* dn = quant::GetTypeTraits(td_);
  gdot_ = g->vec_dot;
  udot_ = u->vec_dot;
  ddot_ = dn->vec_dot;
  gdot_rows_ = g->vec_dot_rows;
  udot_rows_ = u->vec_dot_rows;
  ddot_rows_ = dn->vec_dot_rows;
  const int64_t n_tokens = call_.n_tokens;
  const auto* hidden = reinterpret_cast<const uint8_t*>(call_.hidden.data());
  // Hidden rows in the gate's and the up's vec_dot_type (shared when equal).
  auto setup = [&](const quant::TypeTraits* t, ScratchBuffer* buf, ActRows* rows, quant::QuantRowFn* q) {
    rows->type = t->vec_dot_type;
    if (rows->type == GgmlType::kF32) {
      *rows = {GgmlType::kF32, static_cast<uint64_t>(4 * d_), hidden};
      return;
    }
    rows->row_bytes = *RowBytes(rows->type, d_);
    rows->base = buf->Get(rows->row_bytes * std::max<int64_t>(1, n_tokens));
    *q = quant::GetTypeTraits(rows->type)->quantize;
  };
  setup(g, &s_.xg, &xg_, &qg_);
  if (u->vec_dot_type == g->vec_dot_type) {
    xu_ = xg_;
  } else {
    setup(u, &s_.xu, &xu_, &qu_);
  }
  s_.h.As<float>(std::max<int64_t>(1, n_slots_ * ff_));
  hq_.type = dn->vec_dot_type;
  if (hq_.type == GgmlType::kF32) {
    hq_ = {GgmlType::kF32, static_cast<uint64_t>(4 * ff_), s_.h.data()};
  } else {
    hq_.row_bytes = *RowBytes(hq_.type, ff_);
    hq_.base = s_.hq.Get(hq_.row_bytes * std::max<int64_t>(1, n_slots_));
    qd_ = quant::GetTypeTraits(hq_.type)->quantize;
  }
  PrepareTiles();
  PrepareItems();
  PrepareThreads();
}

// Tile buffers of the tiled experts.
void FusedExpertCall::PrepareTiles() {
  uint64_t gu_bytes = 0, d_bytes = 0;
  max_tokens_ = 1;
  for (UsedExpert& ue : s_.used) {
    const int64_t n = ue.slot_end - ue.slot_begin;
    max_tokens_ = std::max(max_tokens_, n);
    if (ue.tiled_gu) {
      ue.tiles_gu = gu_bytes;
      gu_bytes += quant::ActTileBytes(d_, n);
    }
    if (ue.tiled_down) {
      ue.tiles_down = d_bytes;
      d_bytes += quant::ActTileBytes(ff_, n);
    }
  }
  if (gu_bytes > 0) {
    s_.tiles_g.Get(gu_bytes);
    if (xu_.type != xg_.type) s_.tiles_u.Get(gu_bytes);
  }
  if (d_bytes > 0) s_.tiles_d.Get(d_bytes);
  any_tiled_down_ = d_bytes > 0;
}

// Work split: gate/up items (expert, row block), then down items (row block
// over all experts), each list big blocks first.
void FusedExpertCall::PrepareItems() {
  // DownExpert has no tiled path: decode-split calls must never tile.
  static_assert(kDecodeSplitTokens < InProcessExperts::kMinTiledTokens);
  s_.gate_up_items.clear();
  s_.small_items.clear();
  s_.down_items.clear();
  s_.reduce_items.clear();
  const int64_t n_used = static_cast<int64_t>(s_.used.size());
  decode_split_ = call_.n_tokens <= kDecodeSplitTokens && n_used >= 2 * n_threads_;
  if (decode_split_) {
    // Decode: each expert's gate, up and down matrices are read as whole
    // contiguous streams (0.9-1.7 MB for Qwen3-30B-A3B) rather than in
    // 256-row pieces, which keeps the hardware prefetchers streaming
    // (measured faster, see tests/bench/README.md). The last n_threads
    // experts are split into small blocks so that the threads finish
    // together. Down writes each slot's whole n_embd row; a last phase sums
    // them per token by row blocks.
    const int64_t n_whole = n_used - n_threads_;
    ExpertItems(n_used, n_whole, ff_, kSmallBlock, &s_.gate_up_items);
    ExpertItems(n_used, n_whole, d_, 2 * kSmallBlock, &s_.down_items);
    for (int64_t r = 0; r < d_; r += kSmallBlock) {
      s_.reduce_items.push_back({-1, int32_t(r), int32_t(std::min(kSmallBlock, d_ - r))});
    }
    s_.down_out.As<float>(std::max<int64_t>(1, n_slots_) * d_);
  } else {
    for (int64_t ui = 0; ui < n_used; ++ui) {
      GuidedSplit(static_cast<int32_t>(ui), ff_, ff_, &s_.gate_up_items, &s_.small_items);
    }
    s_.gate_up_items.insert(s_.gate_up_items.end(), s_.small_items.begin(), s_.small_items.end());
    s_.small_items.clear();
    GuidedSplit(-1, d_, d_ * 3 / 4 / n_threads_, &s_.down_items, &s_.small_items);
    s_.down_items.insert(s_.down_items.end(), s_.small_items.begin(), s_.small_items.end());
  }
  max_gate_up_rows_ = max_down_rows_ = 0;
  if (s_.remaining_cap < s_.used.size()) {
    s_.remaining.reset(new std::atomic<int>[s_.used.size()]);
    s_.ready.reset(new std::atomic<int>[s_.used.size()]);
    s_.remaining_cap = s_.used.size();
  }
  for (size_t i = 0; i < s_.used.size(); ++i) {
    s_.remaining[i].store(0, std::memory_order_relaxed);
    s_.ready[i].store(0, std::memory_order_relaxed);
  }
  for (const RowBlock& b : s_.gate_up_items) {
    max_gate_up_rows_ = std::max<int64_t>(max_gate_up_rows_, b.nr);
    s_.remaining[b.owner].fetch_add(1, std::memory_order_relaxed);
  }
  for (const RowBlock& b : s_.down_items) max_down_rows_ = std::max<int64_t>(max_down_rows_, b.nr);
}

void FusedExpertCall::PrepareThreads() {
  const int64_t max_n = max_tokens_;
  uint64_t panel = 1;
  if (any_tiled_gu_) {
    panel = std::max({panel, quant::TileGemmScratchBytes(tg_, d_), quant::TileGemmScratchBytes(tu_, d_)});
  }
  if (any_tiled_down_) panel = std::max(panel, quant::TileGemmScratchBytes(td_, ff_));
  if (s_.threads.size() < static_cast<size_t>(n_threads_)) s_.threads.resize(n_threads_);
  for (int t = 0; t < n_threads_; ++t) {
    ThreadScratch& ts = s_.threads[t];
    ts.panel.Get(panel);
    ts.g.As<float>(max_n * max_gate_up_rows_);
    ts.u.As<float>(max_n * max_gate_up_rows_);
    ts.out.As<float>(std::max<int64_t>(1, n_slots_) * max_down_rows_);
    if (ts.rows.size() < static_cast<size_t>(max_n)) ts.rows.resize(max_n);
  }
}

void FusedExpertCall::ConvertTokens(int64_t t0, int64_t t1) {
  for (int64_t t = t0; t < t1; ++t) {
    const float* x = call_.hidden.data() + t * d_;
    if (qg_ != nullptr) qg_(x, const_cast<uint8_t*>(xg_.Row(t)), d_);
    if (qu_ != nullptr) qu_(x, const_cast<uint8_t*>(xu_.Row(t)), d_);
  }
}

void FusedExpertCall::PackGateUpTiles(const UsedExpert& u, ThreadScratch* ts) {
  const int64_t n = u.slot_end - u.slot_begin;
  for (int64_t i = 0; i < n; ++i) ts->rows[i] = xg_.Row(s_.slot_token[u.slot_begin + i]);
  quant::PackActTiles(xg_.type, ts->rows.data(), n, d_, s_.tiles_g.data() + u.tiles_gu);
  if (xu_.type != xg_.type) {
    for (int64_t i = 0; i < n; ++i) ts->rows[i] = xu_.Row(s_.slot_token[u.slot_begin + i]);
    quant::PackActTiles(xu_.type, ts->rows.data(), n, d_, s_.tiles_u.data() + u.tiles_gu);
  }
}

void FusedExpertCall::GateUp(int64_t item, ThreadScratch* ts) {
  const RowBlock& block = s_.gate_up_items[item];
  const int64_t ui = block.owner;
  const UsedExpert& u = s_.used[ui];
  const int64_t r0 = block.r0, nr = block.nr;
  const int64_t n = u.slot_end - u.slot_begin;
  const quant::WeightView gate = store_.Gate(call_.layer, u.expert);
  const quant::WeightView up = store_.Up(call_.layer, u.expert);
  float* g = Floats(ts->g);
  float* uu = Floats(ts->u);
  // A non-gated activation reads up alone (the store's gate views it too).
  const bool gated = IsGated(store_.ffn().activation);
  if (packed_gu_) {
    const uint8_t** rows = ts->rows.data();
    for (int64_t i = 0; i < n; ++i) rows[i] = xg_.Row(s_.slot_token[u.slot_begin + i]);
    if (gated) {
      quant::PackedGemm({gate.type, gate.data, gate.n_rows, gate.n_cols}, r0, nr, rows, n, g, nr);
    }
    if (xu_.base != xg_.base) {
      for (int64_t i = 0; i < n; ++i) rows[i] = xu_.Row(s_.slot_token[u.slot_begin + i]);
    }
    quant::PackedGemm({up.type, up.data, up.n_rows, up.n_cols}, r0, nr, rows, n, uu, nr);
  } else if (u.tiled_gu) {
    const uint8_t* tu = (xu_.type != xg_.type ? s_.tiles_u.data() : s_.tiles_g.data()) + u.tiles_gu;
    if (gated) {
      quant::TileGemm(gate, r0, nr, s_.tiles_g.data() + u.tiles_gu, n, g, nr, ts->panel.data());
    }
    quant::TileGemm(up, r0, nr, tu, n, uu, nr, ts->panel.data());
  } else {
    for (int64_t i = 0; i < n; ++i) {
      const int32_t t = s_.slot_token[u.slot_begin + i];
      if (gated) DotRows(gdot_, gdot_rows_, d_, gate, r0, nr, xg_.Row(t), g + i * nr);
      DotRows(udot_, udot_rows_, d_, up, r0, nr, xu_.Row(t), uu + i * nr);
    }
  }
  const LayerExperts& le = store_.Layer(call_.layer);
  const int64_t e = u.expert - store_.expert_begin();
  if (!le.gate_b.empty()) AddBiasRows(le.gate_b.data() + e * ff_ + r0, nr, n, nr, g);
  if (!le.up_b.empty()) AddBiasRows(le.up_b.data() + e * ff_ + r0, nr, n, nr, uu);
  const ExpertFfnSpec& ffn = store_.ffn();
  for (int64_t i = 0; i < n; ++i) {
    float* h = Floats(s_.h) + (u.slot_begin + i) * ff_ + r0;
    if (ffn.activation == ExpertActivation::kSwiGluOai) {
      SwiGluOaiSpan(g + i * nr, uu + i * nr, nr, ffn.alpha, ffn.limit, h);
    } else if (ffn.activation == ExpertActivation::kReluSq) {
      internal::ReluSq(uu + i * nr, nr, h);
    } else if (ffn.activation == ExpertActivation::kGeGlu) {
      internal::GeGlu(g + i * nr, uu + i * nr, nr, h);
    } else {
      SwiGluSpan(g + i * nr, uu + i * nr, r0, nr, ff_, h);
    }
  }
  if (s_.remaining[ui].fetch_sub(1, std::memory_order_acq_rel) == 1) {
    FinishExpert(u, ts);
    s_.ready[ui].store(1, std::memory_order_release);
  }
}

// The expert's intermediate rows are complete: convert them for the down
// weights (and tile them for the tiled path).
void FusedExpertCall::FinishExpert(const UsedExpert& u, ThreadScratch* ts) {
  const int64_t n = u.slot_end - u.slot_begin;
  if (qd_ != nullptr) {
    for (int64_t sl = u.slot_begin; sl < u.slot_end; ++sl) {
      qd_(Floats(s_.h) + sl * ff_, const_cast<uint8_t*>(hq_.Row(sl)), ff_);
    }
  }
  if (u.tiled_down) {
    for (int64_t i = 0; i < n; ++i) ts->rows[i] = hq_.Row(u.slot_begin + i);
    quant::PackActTiles(hq_.type, ts->rows.data(), n, ff_, s_.tiles_d.data() + u.tiles_down);
  }
}

// Down rows [r0, r0 + nr) of every routed expert, then the weighted sums.
void FusedExpertCall::Down(int64_t item, ThreadScratch* ts) {
  const int64_t r0 = s_.down_items[item].r0, nr = s_.down_items[item].nr;
  float* out = Floats(ts->out);
  for (const UsedExpert& u : s_.used) {
    const quant::WeightView w = store_.Down(call_.layer, u.expert);
    const int64_t n = u.slot_end - u.slot_begin;
    if (packed_d_) {
      const uint8_t** rows = ts->rows.data();
      for (int64_t i = 0; i < n; ++i) rows[i] = hq_.Row(u.slot_begin + i);
      quant::PackedGemm({w.type, w.data, w.n_rows, w.n_cols}, r0, nr, rows, n, out + u.slot_begin * nr, nr);
    } else if (u.tiled_down) {
      quant::TileGemm(w, r0, nr, s_.tiles_d.data() + u.tiles_down, n, out + u.slot_begin * nr, nr,
                      ts->panel.data());
    } else {
      for (int64_t sl = u.slot_begin; sl < u.slot_end; ++sl) {
        DotRows(ddot_, ddot_rows_, ff_, w, r0, nr, hq_.Row(sl), out + sl * nr);
      }
    }
    AddDownBias(u, r0, nr, out + u.slot_begin * nr, nr);
  }
  Reduce(out, nr, r0, nr);
}

// Decode split: down rows [r0, r0 + nr) of one expert for its slots, into
// their rows of down_out.
void FusedExpertCall::DownExpert(int64_t item, ThreadScratch* ts) {
  const RowBlock& block = s_.down_items[item];
  const UsedExpert& u = s_.used[block.owner];
  const int64_t r0 = block.r0, nr = block.nr;
  const quant::WeightView w = store_.Down(call_.layer, u.expert);
  const int64_t n = u.slot_end - u.slot_begin;
  float* out = Floats(s_.down_out) + u.slot_begin * d_ + r0;
  if (packed_d_) {
    const uint8_t** rows = ts->rows.data();
    for (int64_t i = 0; i < n; ++i) rows[i] = hq_.Row(u.slot_begin + i);
    quant::PackedGemm({w.type, w.data, w.n_rows, w.n_cols}, r0, nr, rows, n, out, d_);
  } else {
    for (int64_t sl = u.slot_begin; sl < u.slot_end; ++sl) {
      DotRows(ddot_, ddot_rows_, ff_, w, r0, nr, hq_.Row(sl), out + (sl - u.slot_begin) * d_);
    }
  }
  AddDownBias(u, r0, nr, out, d_);
}

// The down bias of expert u, rows [r0, r0 + nr), added to its slots' rows
// (stride ld) at out.
void FusedExpertCall::AddDownBias(const UsedExpert& u, int64_t r0, int64_t nr, float* out,
                                  int64_t ld) const {
  const LayerExperts& le = store_.Layer(call_.layer);
  if (le.down_b.empty()) return;
  const int64_t e = u.expert - store_.expert_begin();
  AddBiasRows(le.down_b.data() + e * d_ + r0, nr, u.slot_end - u.slot_begin, ld, out);
}

// partial rows [r0, r0 + nr) of every token: the weighted sum of its
// entries' down rows in entry order; slot sl's values for these rows are at
// out + sl * ld.
void FusedExpertCall::Reduce(const float* out, int64_t ld, int64_t r0, int64_t nr) {
  for (int32_t t = 0; t < call_.n_tokens; ++t) {
    float* dst = partial_ + static_cast<int64_t>(t) * d_ + r0;
    std::fill_n(dst, nr, 0.0f);
    for (uint32_t k = call_.token_offsets[t]; k < call_.token_offsets[t + 1]; ++k) {
      AddWeighted(dst, out + static_cast<int64_t>(s_.entry_slot[k]) * ld, call_.weights[k], nr);
    }
  }
}

template <typename Fn>
void FusedExpertCall::RunItems(int phase, int64_t n, Fn&& fn) {
  for (int64_t i; (i = s_.next[phase].fetch_add(1, std::memory_order_relaxed)) < n;) fn(i);
}

// One thread's share of the phases (every pool thread runs this).
void FusedExpertCall::RunThread(int tid) {
  ThreadScratch* ts = &s_.threads[tid];
  const int64_t n_tokens = call_.n_tokens;
  if (n_tokens > kCallerConverts) {
    RunItems(0, (n_tokens + 7) / 8, [&](int64_t i) { ConvertTokens(8 * i, std::min(n_tokens, 8 * i + 8)); });
    s_.barrier.Wait();
  }
  if (any_tiled_gu_) {
    RunItems(1, static_cast<int64_t>(s_.used.size()), [&](int64_t i) {
      if (s_.used[i].tiled_gu) PackGateUpTiles(s_.used[i], ts);
    });
    s_.barrier.Wait();
  }
  RunItems(2, static_cast<int64_t>(s_.gate_up_items.size()), [&](int64_t i) { GateUp(i, ts); });
  if (!decode_split_) {
    s_.barrier.Wait();
    RunItems(3, static_cast<int64_t>(s_.down_items.size()), [&](int64_t i) { Down(i, ts); });
    return;
  }
  // No barrier before down: every gate/up item is claimed by now, and a down
  // item needs only its own expert's intermediate rows. Until the thread
  // finishing that expert has converted them, the waiting thread prefetches
  // the item's weights into its L2: the wait becomes memory traffic instead
  // of idle time.
  RunItems(3, static_cast<int64_t>(s_.down_items.size()), [&](int64_t i) {
    const RowBlock& b = s_.down_items[i];
    const std::atomic<int>& ready = s_.ready[b.owner];
    auto is_ready = [&] { return ready.load(std::memory_order_acquire) != 0; };
    if (!is_ready()) {
      const quant::WeightView w = store_.Down(call_.layer, s_.used[b.owner].expert);
      const auto [p, bytes] = RowBytesOf(w, b.r0, b.nr);
      const uint8_t* pf = p;
      const uint8_t* const pf_end = p + std::min<uint64_t>(bytes, kWaitPrefetchBytes);
      SpinUntil(is_ready, [&] {
        for (int k = 0; k < 64 && pf < pf_end; ++k, pf += 64) __builtin_prefetch(pf, 0, 2);  // L2
        return pf < pf_end;
      });
    }
    DownExpert(i, ts);
  });
  s_.barrier.Wait();
  RunItems(4, static_cast<int64_t>(s_.reduce_items.size()), [&](int64_t i) {
    const RowBlock& b = s_.reduce_items[i];
    Reduce(Floats(s_.down_out) + b.r0, d_, b.r0, b.nr);
  });
}

void FusedExpertCall::Run() {
  if (call_.n_tokens <= kCallerConverts) ConvertTokens(0, call_.n_tokens);
  for (auto& n : s_.next) n.store(0, std::memory_order_relaxed);
  s_.barrier.Reset(n_threads_);
  if (pool_ != nullptr && n_threads_ > 1) {
    // Captures only `this`: small enough for std::function's inline storage.
    pool_->RunOnAll([this](int tid) { RunThread(tid); });
  } else {
    RunThread(0);
  }
}

InProcessExperts::InProcessExperts(ExpertStore store, ThreadPool* pool)
    : store_(std::move(store)), pool_(pool), scratch_(std::make_unique<Scratch>()) {}

InProcessExperts::~InProcessExperts() = default;

absl::Status InProcessExperts::ComputeInto(const ExpertCallView& call, float* partial,
                                           uint64_t* worker_ns) {
  if (worker_ns != nullptr) *worker_ns = 0;
  return ComputeWith(store_, call, partial);
}

absl::Status InProcessExperts::ComputeWith(const ExpertStore& store, const ExpertCallView& call,
                                           float* partial) {
  RETURN_IF_ERROR(ValidateExpertCall(call, store));
  const int e0 = store.expert_begin();
  const int64_t d = call.d, ff = store.n_ff();
  RETURN_IF_ERROR(CheckExpertWeights("gate", store.Gate(call.layer, e0), ff, d));
  RETURN_IF_ERROR(CheckExpertWeights("up", store.Up(call.layer, e0), ff, d));
  RETURN_IF_ERROR(CheckExpertWeights("down", store.Down(call.layer, e0), d, ff));
  std::lock_guard<std::mutex> lock(mu_);
  if (call.n_tokens == 0) return absl::OkStatus();
  FusedExpertCall fused(store, call, pool_, scratch_.get(), partial);
  fused.Run();
  return absl::OkStatus();
}

ExpertCall CopyCall(const ExpertCallView& v) {
  ExpertCall c;
  c.call_id = v.call_id;
  c.layer = v.layer;
  c.n_tokens = v.n_tokens;
  c.d = v.d;
  c.hidden.assign(v.hidden.begin(), v.hidden.end());
  c.token_offsets.assign(v.token_offsets.begin(), v.token_offsets.end());
  c.expert_ids.assign(v.expert_ids.begin(), v.expert_ids.end());
  c.weights.assign(v.weights.begin(), v.weights.end());
  return c;
}

absl::Status ExpertBackend::Compute(const ExpertCallView& call, ExpertResult* result) {
  result->call_id = call.call_id;
  result->worker_ns = 0;
  result->partial.resize(static_cast<size_t>(std::max(call.n_tokens, 0)) *
                         static_cast<size_t>(std::max(call.d, 0)));
  return ComputeInto(call, result->partial.data(), &result->worker_ns);
}

absl::Status ExpertBackend::Start(const ExpertCallView& call, float* partial,
                                  uint64_t* worker_ns) {
  started_ = ComputeInto(call, partial, worker_ns);
  return absl::OkStatus();
}

absl::Status ExpertBackend::Finish() {
  absl::Status s = std::move(started_);
  started_ = absl::OkStatus();
  return s;
}

}  // namespace moesplit::model
