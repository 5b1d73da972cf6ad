#include "common/model/forward.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <functional>
#include <mutex>
#include <new>

#include "absl/strings/str_cat.h"
#include "common/base/scratch_buffer.h"
#include "common/base/status.h"
#include "common/model/internal/attention.h"
#include "common/model/internal/delta_net.h"
#include "common/model/internal/ops.h"
#include "common/quant/packed.h"
#include "common/quant/quant.h"

namespace moesplit::model {

// ------------------------------------------------------------------ Forward

namespace {

// A growable buffer of uninitialised floats (every user overwrites what it
// reads back); large ones on huge pages (ScratchBuffer).
class FloatBuffer {
 public:
  float* Get(int64_t n) { return buf_.As<float>(static_cast<uint64_t>(std::max<int64_t>(n, 1))); }
  uint64_t bytes() const { return buf_.capacity(); }

 private:
  ScratchBuffer buf_;
};

// The recurrent mixers' segments: a step lays its tokens out sequence by
// sequence, one segment each (state[t]: token t's sequence).
struct Segment {
  int64_t t0, n;
  SequenceState* state;
};
std::vector<Segment> Segments(SequenceState* const* state, int64_t n) {
  std::vector<Segment> segs;
  for (int64_t t = 0; t < n;) {
    int64_t e = t + 1;
    while (e < n && state[e] == state[t]) ++e;
    segs.push_back({t, e - t, state[t]});
    t = e;
  }
  return segs;
}

// fn(begin, end) over [0, n), split over the pool in chunks of at least
// min_chunk items (inline without a pool).
void For(ThreadPool* pool, int64_t n, int64_t min_chunk,
         const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (pool == nullptr) {
    fn(0, n);
  } else {
    pool->ParallelFor(n, fn, min_chunk);
  }
}

// Rows of about `work` elements or more per chunk.
int64_t MinRows(int64_t row_elements, int64_t work = 16384) {
  return std::max<int64_t>(1, work / std::max<int64_t>(1, row_elements));
}

// x[i] += y[i] over n rows of d (a mixer's or FFN's output added to the
// residual stream), split over the pool.
void AddRows(ThreadPool* pool, const float* y, int64_t n, int64_t d, float* x) {
  For(pool, n, MinRows(d), [&](int64_t t0, int64_t t1) {
    for (int64_t i = t0 * d; i < t1 * d; ++i) x[i] += y[i];
  });
}

}  // namespace

// Activation buffers of one step, reused across layers and calls.
struct Forward::Workspace {
  FloatBuffer x, h, q, k, v, attn, o, router, gate, up, shared, shexp_g, head_h, logits;
  FloatBuffer q_gate, qkv, conv, z, beta, alpha;  // gated attention, DeltaNet
  FloatBuffer qa, head_in, head_out;              // MLA
  FloatBuffer partial;                            // the routed experts' result
  FloatBuffer mlp, router_in;                     // a dense MLP beside the experts; router input
  ExpertCall call;

  uint64_t bytes() const {
    uint64_t b = 0;
    for (const FloatBuffer* f : {&x, &h, &q, &k, &v, &attn, &o, &router, &gate, &up, &shared,
                                 &shexp_g, &head_h, &logits, &q_gate, &qkv, &conv, &z, &beta,
                                 &alpha, &qa, &head_in, &head_out, &partial, &mlp, &router_in}) {
      b += f->bytes();
    }
    return b + call.hidden.capacity() * sizeof(float);
  }
};

struct Forward::Batch {
  int64_t n = 0;                           // tokens of every sequence, concatenated
  float* x = nullptr;                      // n x n_embd residual stream
  std::vector<internal::RopeAngles> rope;  // per token
  std::vector<internal::RopeAngles> rope_swa;  // per token, HyperParams::rope_swa (when it has one)
  const std::vector<internal::RopeAngles>& RopeOf(const HyperParams& hp, int il) const {
    return hp.has_rope_swa && hp.layers[il].sliding_window > 0 ? rope_swa : rope;
  }
  std::vector<SequenceState*> state;       // per token: its sequence's state
  std::vector<int64_t> pos;                // per token: its position there
  Workspace* ws = nullptr;
};

Forward::Forward(std::shared_ptr<const Model> model, ExpertBackend* experts,
                 ThreadPool* pool, bool pack_dense)
    : model_(std::move(model)), experts_(experts), pool_(pool) {
  const bool p = pack_dense;
  // Every matrix of the tensor table into dense_ (packed copies where the
  // table says so), the copies in one arena: sized by a first walk.
  auto walk = [&](auto&& matrix) {
    for (int il = 0; il < model_->n_layer(); ++il) {
      DenseWeights D;
      ForEachLayerTensor(
          [&](auto row, const auto& w, auto& out) {
            if constexpr (row.form == TensorForm::kMatrix) {
              out = matrix(w, p && row.cpu_packed);
            } else if constexpr (row.form == TensorForm::kHeads) {
              out = matrix(Stacked(w), p && row.cpu_packed && HeadsPack(w));
            }
          },
          model_->layer(il), D);
      dense_.push_back(std::move(D));
    }
  };
  uint64_t total = PackedCopyBytes(model_->output(), p);
  walk([&](const quant::WeightView& w, bool pack) {
    total += PackedCopyBytes(w, pack);
    return w;
  });
  dense_.clear();
  if (total > 0) packed_arena_ = AllocateHugePageBytes(total);
  uint8_t* arena = packed_arena_.get();
  walk([&](const quant::WeightView& w, bool pack) { return MaybePacked(w, pack, &arena); });
  output_ = MaybePacked(model_->output(), p, &arena);
}

quant::WeightView Forward::Stacked(const ExpertTensorView& t) {
  if (t.data == nullptr || t.packed || t.expert_bytes != static_cast<uint64_t>(t.n_out) * t.row_bytes) {
    return {};
  }
  return {t.type, t.data, t.n_expert * t.n_out, t.n_in, t.row_bytes, false};
}

bool Forward::HeadsPack(const ExpertTensorView& t) { return t.n_out % quant::kPackedStripRows == 0; }

uint64_t Forward::PackedCopyBytes(const quant::WeightView& w, bool pack) {
  if (!pack || w.data == nullptr || w.packed || !quant::PackedPreferred(w.type)) return 0;
  return (quant::PackedMatrixBytes(w.type, w.n_rows, w.n_cols) + 63) / 64 * 64;
}

quant::WeightView Forward::MaybePacked(const quant::WeightView& w, bool pack, uint8_t** arena) {
  const uint64_t copy_bytes = PackedCopyBytes(w, pack);
  if (copy_bytes == 0) return w;
  const uint64_t bytes = quant::PackedMatrixBytes(w.type, w.n_rows, w.n_cols);
  uint8_t* dst = nullptr;
  if (*arena != nullptr) {
    dst = *arena;
    *arena += copy_bytes;
  } else {
    std::unique_ptr<uint8_t[]> buf(new (std::nothrow) uint8_t[bytes]);
    if (buf == nullptr) return w;  // the GGUF rows work as well, slower
    dst = buf.get();
    packed_.push_back(std::move(buf));
  }
  const uint64_t strip_bytes = bytes / static_cast<uint64_t>(w.n_rows / quant::kPackedStripRows);
  For(pool_, w.n_rows / quant::kPackedStripRows, 8, [&](int64_t s0, int64_t s1) {
    quant::PackRows(w.type, w.data + s0 * quant::kPackedStripRows * w.row_bytes, w.row_bytes,
                    (s1 - s0) * quant::kPackedStripRows, w.n_cols, dst + s0 * strip_bytes);
  });
  quant::WeightView p = w;
  p.data = dst;
  p.packed = true;
  return p;
}

Forward::~Forward() = default;

Forward::PartTimes Forward::part_times() const {
  return {attention_ns_.load() * 1e-9, deltanet_ns_.load() * 1e-9, mamba2_ns_.load() * 1e-9,
          moe_ns_.load() * 1e-9, head_ns_.load() * 1e-9};
}

std::unique_ptr<Forward::Workspace> Forward::AcquireWorkspace() const {
  {
    std::lock_guard<std::mutex> lock(ws_mu_);
    if (!ws_free_.empty()) {
      std::unique_ptr<Workspace> ws = std::move(ws_free_.back());
      ws_free_.pop_back();
      return ws;
    }
  }
  return std::make_unique<Workspace>();
}

void Forward::ReleaseWorkspace(std::unique_ptr<Workspace> ws) const {
  constexpr uint64_t kMaxKeptBytes = uint64_t{1} << 30;
  if (ws->bytes() > kMaxKeptBytes) return;  // a rare huge step: give the memory back
  std::lock_guard<std::mutex> lock(ws_mu_);
  ws_free_.push_back(std::move(ws));
}

absl::Status Forward::Eval(absl::Span<const int32_t> tokens, SequenceState* state,
                           LogitsMode mode, std::vector<float>* logits) const {
  if (tokens.empty()) return absl::InvalidArgumentError("Eval: empty batch");
  const SequenceBatch one[1] = {{state, tokens, mode, logits}};
  return EvalBatch(one);
}

absl::Status Forward::CheckEntry(const SequenceBatch& s) const {
  const HyperParams& hp = model_->hparams();
  if (s.tokens.empty()) return absl::InvalidArgumentError("Eval: empty batch");
  if (s.state == nullptr || !s.state->Matches(hp)) {
    return absl::InvalidArgumentError("Eval: sequence state missing or made for another model");
  }
  if (s.mode != LogitsMode::kNone && s.logits == nullptr) {
    return absl::InvalidArgumentError("Eval: logits requested without an output vector");
  }
  for (size_t i = 0; i < s.tokens.size(); ++i) {
    if (s.tokens[i] < 0 || s.tokens[i] >= hp.n_vocab) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Eval: token ", i, " has id ", s.tokens[i], ", outside [0, ", hp.n_vocab, ")"));
    }
  }
  RETURN_IF_ERROR(s.state->WindowIntact());
  return s.state->CheckRoom(static_cast<int64_t>(s.tokens.size()));
}

absl::Status Forward::EvalBatch(absl::Span<const SequenceBatch> seqs) const {
  const HyperParams& hp = model_->hparams();
  if (seqs.empty()) return absl::InvalidArgumentError("EvalBatch: no sequences");
  size_t total = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    RETURN_IF_ERROR(CheckEntry(seqs[i]));
    for (size_t j = 0; j < i; ++j) {
      if (seqs[j].state == seqs[i].state) {
        return absl::InvalidArgumentError(
            absl::StrCat("EvalBatch: sequences ", j, " and ", i, " share a sequence state"));
      }
    }
    total += seqs[i].tokens.size();
  }
  // ExpertCall counts tokens in int32 and entries in uint32.
  if (total > static_cast<size_t>(INT32_MAX / hp.n_expert_used)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Eval: batch of ", total, " tokens is too large"));
  }

  for (const SequenceBatch& s : seqs) {
    s.state->NoteWrite(s.state->n_past() + static_cast<int64_t>(s.tokens.size()));
  }
  std::unique_ptr<Workspace> ws = AcquireWorkspace();
  Batch b;
  b.n = static_cast<int64_t>(total);
  b.ws = ws.get();
  absl::Status st;
  try {
    st = Step(seqs, b);
  } catch (const std::bad_alloc&) {
    st = absl::ResourceExhaustedError(
        absl::StrCat("Eval: activations of ", total, " tokens do not fit in memory"));
  }
  ReleaseWorkspace(std::move(ws));
  RETURN_IF_ERROR(st);
  for (const SequenceBatch& s : seqs) s.state->Commit(static_cast<int64_t>(s.tokens.size()));
  return absl::OkStatus();
}

absl::Status Forward::Step(absl::Span<const SequenceBatch> seqs, Batch& b) const {
  const HyperParams& hp = model_->hparams();
  b.rope.resize(b.n);
  b.state.resize(b.n);
  b.pos.resize(b.n);
  std::vector<int32_t> tokens;
  tokens.reserve(b.n);
  int64_t t = 0;
  for (const SequenceBatch& s : seqs) {
    for (size_t i = 0; i < s.tokens.size(); ++i, ++t) {
      b.state[t] = s.state;
      b.pos[t] = s.state->n_past() + static_cast<int64_t>(i);
      tokens.push_back(s.tokens[i]);
    }
  }
  if (hp.has_rope_swa) b.rope_swa.resize(b.n);
  For(pool_, b.n, 16, [&](int64_t t0, int64_t t1) {
    for (int64_t i = t0; i < t1; ++i) {
      internal::ComputeRopeAngles(hp.rope, b.pos[i], &b.rope[i]);
      if (hp.has_rope_swa) internal::ComputeRopeAngles(hp.rope_swa, b.pos[i], &b.rope_swa[i]);
    }
  });
  b.x = b.ws->x.Get(b.n * hp.n_embd);
  RETURN_IF_ERROR(Embed(tokens, b.x));
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t) {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t).count());
  };
  for (int il = 0; il < model_->n_layer(); ++il) {
    const LayerSpec& spec = hp.layers[il];
    Clock::time_point t = Clock::now();
    if (spec.mixer == MixerKind::kMla) {
      RETURN_IF_ERROR(Mla(il, b));
      attention_ns_.fetch_add(since(t), std::memory_order_relaxed);
    } else if (IsAttention(spec.mixer)) {
      RETURN_IF_ERROR(Attention(il, b));
      attention_ns_.fetch_add(since(t), std::memory_order_relaxed);
    } else if (spec.mixer == MixerKind::kGatedDeltaNet) {
      RETURN_IF_ERROR(DeltaNet(il, b));
      deltanet_ns_.fetch_add(since(t), std::memory_order_relaxed);
    } else if (spec.mixer == MixerKind::kMamba2) {
      RETURN_IF_ERROR(Mamba2(il, b));
      mamba2_ns_.fetch_add(since(t), std::memory_order_relaxed);
    }
    t = Clock::now();
    switch (spec.ffn) {
      case FfnKind::kMoe: RETURN_IF_ERROR(MoeFfn(il, b)); break;
      case FfnKind::kDense: RETURN_IF_ERROR(DenseFfn(il, b)); break;
      case FfnKind::kNone: break;
    }
    const std::vector<float>& out_scale = model_->layer(il).out_scale;
    if (!out_scale.empty()) {
      const float f = out_scale[0];
      For(pool_, b.n, MinRows(hp.n_embd), [&](int64_t t0, int64_t t1) {
        for (int64_t i = t0 * hp.n_embd; i < t1 * hp.n_embd; ++i) b.x[i] *= f;
      });
    }
    moe_ns_.fetch_add(since(t), std::memory_order_relaxed);
  }
  const Clock::time_point t_head = Clock::now();
  const absl::Status head = Head(b, seqs);
  head_ns_.fetch_add(since(t_head), std::memory_order_relaxed);
  return head;
}

absl::Status Forward::Embed(absl::Span<const int32_t> tokens, float* x) const {
  const quant::WeightView& e = model_->token_embd();
  const int64_t d = model_->hparams().n_embd;
  const int64_t n = static_cast<int64_t>(tokens.size());
  const float scale =
      model_->hparams().embed_scale_sqrt_d ? std::sqrt(static_cast<float>(d)) : 1.0f;
  std::mutex mu;
  absl::Status first_error;
  For(pool_, n, MinRows(d), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      absl::Status st =
          quant::DequantizeRow(e.type, e.data + tokens[t] * e.row_bytes, x + t * d, d);
      if (!st.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (first_error.ok()) first_error = std::move(st);
        return;
      }
      if (scale != 1.0f) {
        for (int64_t i = 0; i < d; ++i) x[t * d + i] *= scale;
      }
    }
  });
  return first_error;
}

namespace {

void AddBias(const std::vector<float>& bias, int64_t t0, int64_t t1, float* y) {
  if (bias.empty()) return;
  const int64_t m = static_cast<int64_t>(bias.size());
  for (int64_t t = t0; t < t1; ++t) {
    for (int64_t i = 0; i < m; ++i) y[t * m + i] += bias[i];
  }
}

// RMSNorm of every row (n rows of d) of x into y, rows split over the pool.
void NormRows(ThreadPool* pool, const float* x, const std::vector<float>& w, int64_t n,
              int64_t d, float eps, float* y) {
  For(pool, n, MinRows(d), [&](int64_t t0, int64_t t1) {
    internal::RmsNormRows(x + t0 * d, d, w.data(), t1 - t0, d, eps, y + t0 * d, d);
  });
}

// RoPE of one head vector's first n_rot values, NEOX or NORM style.
void Rope(const internal::RopeAngles& a, int64_t n_rot, bool norm_style, float* x) {
  if (norm_style) {
    internal::ApplyRopeNorm(a, n_rot, x);
  } else {
    internal::ApplyRopeNeox(a, n_rot, x);
  }
}

// Per-head QK-norm and RoPE of rows [t0, t1) of n_heads heads.
void NormAndRope(float* x, int64_t t0, int64_t t1, int64_t n_heads, int64_t head_dim,
                 const std::vector<float>& norm, float eps, int64_t n_rot, bool norm_style,
                 const std::vector<internal::RopeAngles>& rope) {
  float* rows = x + t0 * n_heads * head_dim;
  if (!norm.empty()) {
    internal::RmsNormRows(rows, head_dim, norm.data(), (t1 - t0) * n_heads, head_dim, eps, rows,
                          head_dim);
  }
  for (int64_t t = t0; t < t1; ++t) {
    for (int64_t h = 0; h < n_heads; ++h) {
      Rope(rope[t], n_rot, norm_style, x + (t * n_heads + h) * head_dim);
    }
  }
}

}  // namespace

absl::Status Forward::Attention(int il, Batch& b) const {
  const HyperParams& hp = model_->hparams();
  const LayerWeights& L = model_->layer(il);
  Workspace& ws = *b.ws;
  const int64_t n = b.n, d = hp.n_embd;
  const int64_t hk = hp.head_k(il), hv = hp.head_v(il), kvh = hp.kv_heads(il);
  const int64_t qd = hp.n_head * hk, kd = kvh * hk;
  const int64_t vd = kvh * hv;
  const RopeParams& rope = hp.rope_of(il);
  const std::vector<internal::RopeAngles>& angles = b.RopeOf(hp, il);
  float* h = ws.h.Get(n * d);
  NormRows(pool_, b.x, L.attn_norm, n, d, hp.rms_eps, h);
  float* q = ws.q.Get(n * qd);
  float* k = ws.k.Get(n * kd);
  float* v = ws.v.Get(n * vd);
  const DenseWeights& W = dense_[il];
  const bool gated = hp.layers[il].mixer == MixerKind::kGatedAttention;
  float* gate = nullptr;
  if (gated) {
    // Wq gives per head [query, gate]: split them (llama.cpp's views of Qcur_full).
    float* qg = ws.q_gate.Get(n * 2 * qd);
    gate = ws.gate.Get(n * qd);
    const quant::Product qkv[] = {{W.wq, qg}, {W.wk, k}, {W.wv, v}};
    RETURN_IF_ERROR(quant::MatMuls(qkv, h, n, pool_));
    const int64_t hd = hk;
    For(pool_, n, MinRows(2 * qd), [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        for (int64_t head = 0; head < hp.n_head; ++head) {
          const float* src = qg + t * 2 * qd + head * 2 * hd;
          std::copy(src, src + hd, q + t * qd + head * hd);
          std::copy(src + hd, src + 2 * hd, gate + t * qd + head * hd);
        }
      }
    });
  } else if (W.wv.data == nullptr) {
    // No attn_v: V is the raw K projection (Model::Load checked the shapes).
    const quant::Product qk[] = {{W.wq, q}, {W.wk, k}};
    RETURN_IF_ERROR(quant::MatMuls(qk, h, n, pool_));
    std::copy(k, k + n * kd, v);
  } else {
    const quant::Product qkv[] = {{W.wq, q}, {W.wk, k}, {W.wv, v}};
    RETURN_IF_ERROR(quant::MatMuls(qkv, h, n, pool_));
  }
  // QK-norm per head, or (HyperParams::qk_norm_whole) over each whole
  // projection before the split into heads.
  static const std::vector<float> kNoNorm;
  const bool whole = hp.qk_norm_whole;
  For(pool_, n, MinRows(qd + kd, 8192), [&](int64_t t0, int64_t t1) {
    AddBias(L.bq, t0, t1, q);
    AddBias(L.bk, t0, t1, k);
    AddBias(L.bv, t0, t1, v);
    if (hp.v_rms_norm) {
      internal::RmsNormRows(v + t0 * vd, hv, nullptr, (t1 - t0) * kvh, hv, hp.rms_eps,
                            v + t0 * vd, hv);
    }
    if (whole && !L.q_norm.empty()) {
      internal::RmsNormRows(q + t0 * qd, qd, L.q_norm.data(), t1 - t0, qd, hp.rms_eps,
                            q + t0 * qd, qd);
      internal::RmsNormRows(k + t0 * kd, kd, L.k_norm.data(), t1 - t0, kd, hp.rms_eps,
                            k + t0 * kd, kd);
    }
    NormAndRope(q, t0, t1, hp.n_head, hk, whole ? kNoNorm : L.q_norm, hp.rms_eps, rope.n_rot,
                rope.norm_style, angles);
    NormAndRope(k, t0, t1, kvh, hk, whole ? kNoNorm : L.k_norm, hp.rms_eps, rope.n_rot,
                rope.norm_style, angles);
  });
  auto write_rows = [&](int64_t t0, int64_t t1) {
    For(pool_, t1 - t0, 16, [&](int64_t i0, int64_t i1) {
      for (int64_t t = t0 + i0; t < t0 + i1; ++t) {
        internal::ToF16(kd, k + t * kd, b.state[t]->k(il, b.pos[t]));
        internal::ToF16(vd, v + t * vd, b.state[t]->v(il, b.pos[t]));
      }
    });
  };
  const int64_t ad = hp.n_head * hv;
  float* attn = ws.attn.Get(n * ad);
  // Sliding-window rings (SequenceState): at most max_step tokens of a
  // sequence are written before they attend. Each token's attention is
  // computed alone on these layers, so the split changes no result.
  int64_t chunk = n;
  for (int64_t t = 0; t < n; ++t) {
    if (b.state[t]->has_ring(il)) chunk = std::min(chunk, b.state[t]->max_step());
  }
  for (int64_t t0 = 0; t0 < n; t0 += chunk) {
    const int64_t t1 = std::min(n, t0 + chunk);
    write_rows(t0, t1);
    for (int64_t t = t0; t < t1;) {  // each sequence's run of positions
      int64_t e = t + 1;
      while (e < t1 && b.state[e] == b.state[t]) ++e;
      b.state[t]->MirrorRows(il, b.pos[t], e - t);
      t = e;
    }
    AttendHeads(il, b, t0, t1, q, attn);
  }
  if (gated) {
    For(pool_, n, MinRows(ad), [&](int64_t t0, int64_t t1) {
      for (int64_t i = t0 * ad; i < t1 * ad; ++i) attn[i] *= internal::Sigmoid(gate[i]);
    });
  }
  float* o = ws.o.Get(n * d);
  RETURN_IF_ERROR(quant::MatMul(W.wo, attn, n, o, pool_));
  For(pool_, n, MinRows(d), [&](int64_t t0, int64_t t1) {
    AddBias(L.bo, t0, t1, o);
    if (!L.attn_post_norm.empty()) {
      internal::RmsNormRows(o + t0 * d, d, L.attn_post_norm.data(), t1 - t0, d, hp.rms_eps,
                            o + t0 * d, d);
    }
    for (int64_t i = t0 * d; i < t1 * d; ++i) b.x[i] += o[i];
  });
  return absl::OkStatus();
}

absl::Status Forward::Mla(int il, Batch& b) const {
  const HyperParams& hp = model_->hparams();
  const LayerWeights& L = model_->layer(il);
  const DenseWeights& W = dense_[il];
  Workspace& ws = *b.ws;
  const int64_t n = b.n, d = hp.n_embd, heads = hp.n_head;
  const int64_t rot = hp.rope.n_rot, lora = hp.kv_lora_rank, dq = hp.head_dim_k_mla;
  const int64_t nope = dq - rot, dv = hp.head_dim_v_mla;
  const int64_t kd = hp.head_dim_k;  // lora + rot: the cache row and the absorbed query
  const bool norm_style = hp.rope.norm_style;
  float* h = ws.h.Get(n * d);
  NormRows(pool_, b.x, L.attn_norm, n, d, hp.rms_eps, h);
  float* q = ws.q_gate.Get(n * heads * dq);
  // The latent (normed below) and the shared rope key, straight into the cache.
  float* kv = ws.k.Get(n * kd);
  if (W.wq_a.data != nullptr) {
    const int64_t ql = hp.q_lora_rank;
    float* qa = ws.qa.Get(n * ql);
    const quant::Product down[] = {{W.wq_a, qa}, {W.wkv_a, kv}};
    RETURN_IF_ERROR(quant::MatMuls(down, h, n, pool_));
    NormRows(pool_, qa, L.q_a_norm, n, ql, hp.rms_eps, qa);
    RETURN_IF_ERROR(quant::MatMul(W.wq_b, qa, n, q, pool_));
  } else {
    const quant::Product qkv[] = {{W.wq, q}, {W.wkv_a, kv}};
    RETURN_IF_ERROR(quant::MatMuls(qkv, h, n, pool_));
  }
  For(pool_, n, MinRows(kd + heads * dq, 4096), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* row = kv + t * kd;
      internal::RmsNormRows(row, kd, L.kv_a_norm.data(), 1, lora, hp.rms_eps, row, kd);
      Rope(b.rope[t], rot, norm_style, row + lora);
      internal::ToF16(kd, row, b.state[t]->k(il, b.pos[t]));
      for (int64_t head = 0; head < heads; ++head) {
        Rope(b.rope[t], rot, norm_style, q + (t * heads + head) * dq + nope);
      }
    }
  });
  // Per head: Q = [Wk_b[h] q_nope, q_pe] (kd values per head).
  float* qq = ws.q.Get(n * heads * kd);
  For(pool_, n, MinRows(heads * rot, 4096), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t head = 0; head < heads; ++head) {
        const float* src = q + (t * heads + head) * dq + nope;
        std::copy(src, src + rot, qq + (t * heads + head) * kd + lora);
      }
    }
  });
  RETURN_IF_ERROR(HeadProducts(W.wk_b, L.wk_b, n, q, dq, qq, kd, ws));
  float* lat = ws.attn.Get(n * heads * lora);
  AttendHeads(il, b, 0, b.n, qq, lat);
  // Per head: o_h = Wv_b[h] a_h, then Wo.
  float* attn = ws.v.Get(n * heads * dv);
  RETURN_IF_ERROR(HeadProducts(W.wv_b, L.wv_b, n, lat, lora, attn, dv, ws));
  float* o = ws.o.Get(n * d);
  RETURN_IF_ERROR(quant::MatMul(W.wo, attn, n, o, pool_));
  AddRows(pool_, o, n, d, b.x);
  return absl::OkStatus();
}

absl::Status Forward::HeadProducts(const quant::WeightView& stacked, const ExpertTensorView& t,
                                  int64_t n, const float* x, int64_t x_head, float* y,
                                  int64_t y_head, Workspace& ws) const {
  const int64_t heads = t.n_expert, cols = t.n_in, rows = t.n_out;
  if (stacked.data == nullptr) {  // GGUF tensors always stack
    return absl::InternalError("MLA head matrices are not one contiguous tensor");
  }
  // One GroupedMatMul over the stacked heads: inputs gathered head after
  // head, outputs scattered back.
  float* in = ws.head_in.Get(heads * n * cols);
  float* out = ws.head_out.Get(heads * n * rows);
  For(pool_, heads, MinRows(n * cols), [&](int64_t h0, int64_t h1) {
    for (int64_t head = h0; head < h1; ++head) {
      for (int64_t i = 0; i < n; ++i) {
        const float* src = x + (i * heads + head) * x_head;
        std::copy(src, src + cols, in + (head * n + i) * cols);
      }
    }
  });
  RETURN_IF_ERROR(quant::GroupedMatMul(stacked, heads, in, n, out, pool_));
  For(pool_, heads, MinRows(n * rows), [&](int64_t h0, int64_t h1) {
    for (int64_t head = h0; head < h1; ++head) {
      for (int64_t i = 0; i < n; ++i) {
        const float* src = out + (head * n + i) * rows;
        std::copy(src, src + rows, y + (i * heads + head) * y_head);
      }
    }
  });
  return absl::OkStatus();
}

absl::Status Forward::DenseFfn(int il, Batch& b) const {
  const HyperParams& hp = model_->hparams();
  const LayerWeights& L = model_->layer(il);
  const DenseWeights& W = dense_[il];
  Workspace& ws = *b.ws;
  const int64_t n = b.n, d = hp.n_embd;
  float* h = ws.h.Get(n * d);
  NormRows(pool_, b.x, L.ffn_norm, n, d, hp.rms_eps, h);
  float* out = ws.shared.Get(n * d);
  RETURN_IF_ERROR(
      GatedFfn(hp.dense_activation, W.ffn_gate, W.ffn_up, W.ffn_down, h, n, ws, out));
  if (!L.ffn_post_norm.empty()) NormRows(pool_, out, L.ffn_post_norm, n, d, hp.rms_eps, out);
  AddRows(pool_, out, n, d, b.x);
  return absl::OkStatus();
}

absl::Status Forward::DeltaNet(int il, Batch& b) const {
  const HyperParams& hp = model_->hparams();
  const LayerWeights& L = model_->layer(il);
  const DenseWeights& W = dense_[il];
  Workspace& ws = *b.ws;
  const int64_t n = b.n, d = hp.n_embd;
  const int64_t channels = hp.ssm_conv_channels(), inner = hp.ssm_inner();
  const int64_t n_v = hp.ssm_n_v_heads, n_k = hp.ssm_n_k_heads, dim = hp.ssm_head_k;
  const int64_t taps = hp.ssm_conv_kernel - 1;
  float* h = ws.h.Get(n * d);
  NormRows(pool_, b.x, L.attn_norm, n, d, hp.rms_eps, h);
  float* qkv = ws.qkv.Get(n * channels);
  float* z = ws.z.Get(n * inner);
  float* beta = ws.beta.Get(n * n_v);
  float* g = ws.alpha.Get(n * n_v);
  const quant::Product in[] = {{W.ssm_qkv, qkv}, {W.ssm_z, z}, {L.ssm_beta, beta}, {L.ssm_alpha, g}};
  RETURN_IF_ERROR(quant::MatMuls(in, h, n, pool_));
  for (int64_t i = 0; i < n * n_v; ++i) {
    const int64_t head = i % n_v;
    beta[i] = internal::Sigmoid(beta[i]);
    g[i] = internal::Softplus(g[i] + L.ssm_dt_bias[head]) * L.ssm_a[head];
  }
  const std::vector<Segment> segs = Segments(b.state.data(), n);
  const int64_t n_segs = static_cast<int64_t>(segs.size());
  // Conv + SiLU, then L2-normalised q and k heads: per (segment, block of
  // channels) for the conv, per token for the norms.
  float* conv = ws.conv.Get(n * channels);
  const int64_t kBlock = 256;
  const int64_t blocks = (channels + kBlock - 1) / kBlock;
  For(pool_, n_segs * blocks, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const Segment& sg = segs[i / blocks];
      const int64_t c0 = (i % blocks) * kBlock, nc = std::min(kBlock, channels - c0);
      internal::ConvSilu(qkv + sg.t0 * channels + c0, channels, sg.n, nc,
                         L.ssm_conv.data() + c0 * hp.ssm_conv_kernel, hp.ssm_conv_kernel,
                         sg.state->conv(il) + c0 * taps, sg.state->next_conv(il) + c0 * taps,
                         conv + sg.t0 * channels + c0, channels);
    }
  });
  For(pool_, n, 16, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      internal::L2NormRows(conv + t * channels, 2 * n_k, dim, dim, hp.rms_eps);
    }
  });
  // The delta rule per (segment, value head), tokens in order.
  float* out = ws.attn.Get(n * inner);
  const float* q_all = conv;
  const float* k_all = conv + n_k * dim;
  const float* v_all = conv + 2 * n_k * dim;
  For(pool_, n_segs * n_v, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const Segment& sg = segs[i / n_v];
      const int64_t head = i % n_v, kh = hp.ssm_key_head(head);
      internal::DeltaRuleHead dh;
      dh.q = q_all + sg.t0 * channels + kh * dim;
      dh.k = k_all + sg.t0 * channels + kh * dim;
      dh.v = v_all + sg.t0 * channels + head * dim;
      dh.q_stride = dh.k_stride = dh.v_stride = channels;
      dh.g = g + sg.t0 * n_v + head;
      dh.beta = beta + sg.t0 * n_v + head;
      dh.g_stride = n_v;
      dh.out = out + sg.t0 * inner + head * dim;
      dh.out_stride = inner;
      internal::DeltaRule(dh, sg.n, dim, sg.state->recurrent(il) + head * dim * dim,
                          sg.state->next_recurrent(il) + head * dim * dim);
    }
  });
  // RMSNorm(o) * ssm_norm * SiLU(z) per value head, then W_out.
  For(pool_, n, MinRows(inner), [&](int64_t t0, int64_t t1) {
    internal::RmsNormRows(out + t0 * inner, dim, L.ssm_norm.data(), (t1 - t0) * n_v, dim,
                          hp.rms_eps, out + t0 * inner, dim);
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t head = 0; head < n_v; ++head) {
        float* zh = z + t * inner + head * dim;
        internal::SiluRow(zh, dim, zh);
      }
      for (int64_t i = t * inner; i < (t + 1) * inner; ++i) out[i] *= z[i];
    }
  });
  float* o = ws.o.Get(n * d);
  RETURN_IF_ERROR(quant::MatMul(W.ssm_out, out, n, o, pool_));
  AddRows(pool_, o, n, d, b.x);
  return absl::OkStatus();
}

absl::Status Forward::Mamba2(int il, Batch& b) const {
  const HyperParams& hp = model_->hparams();
  const LayerWeights& L = model_->layer(il);
  const DenseWeights& W = dense_[il];
  Workspace& ws = *b.ws;
  const int64_t n = b.n, d = hp.n_embd;
  const int64_t channels = hp.ssm_conv_channels(), inner = hp.ssm_inner();
  const int64_t heads = hp.ssm_n_v_heads, groups = hp.ssm_n_k_heads;
  const int64_t head_dim = hp.ssm_head_v, d_state = hp.ssm_head_k;
  const int64_t taps = hp.ssm_conv_kernel - 1;
  const int64_t proj = inner + channels + heads;  // [z | xBC | dt]
  float* h = ws.h.Get(n * d);
  NormRows(pool_, b.x, L.attn_norm, n, d, hp.rms_eps, h);
  float* zxbcdt = ws.qkv.Get(n * proj);
  RETURN_IF_ERROR(quant::MatMul(W.ssm_in, h, n, zxbcdt, pool_));
  float* z = ws.z.Get(n * inner);
  float* dt = ws.beta.Get(n * heads);
  For(pool_, n, MinRows(proj), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* row = zxbcdt + t * proj;
      std::copy(row, row + inner, z + t * inner);
      for (int64_t head = 0; head < heads; ++head) {
        dt[t * heads + head] =
            internal::Softplus(row[inner + channels + head] + L.ssm_dt_bias[head]);
      }
    }
  });
  const std::vector<Segment> segs = Segments(b.state.data(), n);
  const int64_t n_segs = static_cast<int64_t>(segs.size());
  // Conv (+ bias) + SiLU over xBC per (segment, block of channels).
  float* conv = ws.conv.Get(n * channels);
  const float* conv_b = L.ssm_conv_b.empty() ? nullptr : L.ssm_conv_b.data();
  const int64_t kBlock = 256;
  const int64_t blocks = (channels + kBlock - 1) / kBlock;
  For(pool_, n_segs * blocks, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const Segment& sg = segs[i / blocks];
      const int64_t c0 = (i % blocks) * kBlock, nc = std::min(kBlock, channels - c0);
      internal::ConvSilu(zxbcdt + sg.t0 * proj + inner + c0, proj, sg.n, nc,
                         L.ssm_conv.data() + c0 * hp.ssm_conv_kernel, hp.ssm_conv_kernel,
                         sg.state->conv(il) + c0 * taps, sg.state->next_conv(il) + c0 * taps,
                         conv + sg.t0 * channels + c0, channels,
                         conv_b == nullptr ? nullptr : conv_b + c0);
    }
  });
  // The scan per (segment, head), tokens in order; then y += D x.
  float* y = ws.attn.Get(n * inner);
  For(pool_, n_segs * heads, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const Segment& sg = segs[i / heads];
      const int64_t head = i % heads, g = hp.ssm_key_head(head);
      internal::SsmScanHead sh;
      sh.x = conv + sg.t0 * channels + head * head_dim;
      sh.b = conv + sg.t0 * channels + inner + g * d_state;
      sh.c = conv + sg.t0 * channels + inner + (groups + g) * d_state;
      sh.x_stride = sh.bc_stride = channels;
      sh.dt = dt + sg.t0 * heads + head;
      sh.dt_stride = heads;
      sh.a = L.ssm_a[head];
      sh.y = y + sg.t0 * inner + head * head_dim;
      sh.y_stride = inner;
      const int64_t state = head * head_dim * d_state;
      internal::SsmScan(sh, sg.n, head_dim, d_state, sg.state->recurrent(il) + state,
                        sg.state->next_recurrent(il) + state);
      for (int64_t t = 0; t < sg.n; ++t) {
        float* yr = sh.y + t * inner;
        const float* xr = sh.x + t * channels;
        for (int64_t c = 0; c < head_dim; ++c) yr[c] += xr[c] * L.ssm_d[head];
      }
    }
  });
  // y * SiLU(z), then RMSNorm per group of inner / groups channels, W_out.
  const int64_t gs = inner / groups;
  For(pool_, n, MinRows(inner), [&](int64_t t0, int64_t t1) {
    internal::SwiGlu(z + t0 * inner, y + t0 * inner, t1 - t0, inner, y + t0 * inner);
    for (int64_t g = 0; g < groups; ++g) {
      float* rows = y + t0 * inner + g * gs;
      internal::RmsNormRows(rows, inner, L.ssm_norm.data() + g * gs, t1 - t0, gs, hp.rms_eps,
                            rows, inner);
    }
  });
  float* o = ws.o.Get(n * d);
  RETURN_IF_ERROR(quant::MatMul(W.ssm_out, y, n, o, pool_));
  AddRows(pool_, o, n, d, b.x);
  return absl::OkStatus();
}

void Forward::AttendHeads(int il, const Batch& b, int64_t t_begin, int64_t t_end, const float* q,
                          float* out) const {
  const HyperParams& hp = model_->hparams();
  const int64_t hk = hp.head_k(il), hv = hp.head_v(il);
  const int64_t n_kv_heads = hp.kv_heads(il), group = hp.n_head / n_kv_heads;
  const std::vector<float>& sinks = model_->layer(il).sinks;
  // Sliding-window layers: token t attends to positions [first(t), pos(t)].
  const int64_t window = hp.layers[il].sliding_window;
  auto first = [&](int64_t t) { return window > 0 ? std::max<int64_t>(0, b.pos[t] - window + 1) : 0; };
  // Work items: (block of up to kBlockTokens consecutive tokens of one
  // sequence, KV head); each runs the group's query heads of its tokens in
  // one AttendGroup, so every key and value row is converted once for them.
  // (One token per block on sliding-window layers: the block's queries then
  // share their first position, where the group's K and V start.)
  const int64_t kBlockTokens = window > 0 ? 1 : 4;
  struct Block {
    int64_t t0, n, cost;
  };
  std::vector<Block> blocks;
  for (int64_t t = t_begin; t < t_end;) {
    int64_t e = t + 1;
    while (e < t_end && e - t < kBlockTokens && b.state[e] == b.state[t]) ++e;
    blocks.push_back({t, e - t, (e - t) * (b.pos[e - 1] + 1 - first(e - 1))});
    t = e;
  }
  // The costliest first (causal rows grow with the position), handed out
  // one at a time so that the threads finish together.
  std::stable_sort(blocks.begin(), blocks.end(),
                   [](const Block& x, const Block& y) { return x.cost > y.cost; });
  // Fewer items than threads (a decode step of one sequence with few KV
  // heads; MLA has one): each group's query heads are split into `parts`
  // items too. AttendGroup gives every query AttendHead's bits, whatever its
  // group; each part converts the K/V rows again, but on its own thread.
  // With enough items (a prompt), a group too wide for the core's cache
  // (MLA: 128 query heads of 576 + 512 values share one KV head) is split
  // likewise, so that an item's queries, accumulators and scores stay
  // within kGroupBytes (before, an MLA prompt's item held 512 queries:
  // 2.2 MB of queries and accumulators per thread).
  const int64_t threads = pool_ == nullptr ? 1 : pool_->size();
  const int64_t per_head = static_cast<int64_t>(blocks.size()) * n_kv_heads;
  constexpr int64_t kGroupBytes = 256 << 10;
  const int64_t fit_heads = std::max<int64_t>(
      1, kGroupBytes / (kBlockTokens * internal::GroupQueryBytes(hk, hv)));
  const int64_t want =
      std::min(group, per_head < threads ? (threads + per_head - 1) / per_head
                                         : (group + fit_heads - 1) / fit_heads);
  const int64_t part_heads = (group + want - 1) / want;
  const int64_t parts = (group + part_heads - 1) / part_heads;  // none empty
  const int64_t items = per_head * parts;
  std::atomic<int64_t> next{0};
  auto work = [&](int) {
    std::vector<const float*> qp(kBlockTokens * group);
    std::vector<float*> op(kBlockTokens * group);
    std::vector<int64_t> n_kv(kBlockTokens * group);
    std::vector<float> sink(kBlockTokens * group);
    internal::GroupAttention g;
    g.k_stride = n_kv_heads * hk;
    g.dk = hk;
    g.dv = hv;
    g.scale = hp.attn_scale();
    g.q = qp.data();
    g.out = op.data();
    g.n_kv = n_kv.data();
    g.sinks = sinks.empty() ? nullptr : sink.data();
    for (int64_t idx; (idx = next.fetch_add(1, std::memory_order_relaxed)) < items;) {
      const Block& blk = blocks[idx / (n_kv_heads * parts)];
      const int64_t kvh = idx / parts % n_kv_heads, part = idx % parts;
      const int64_t h0 = kvh * group + part * part_heads;
      const int64_t h1 = std::min((kvh + 1) * group, h0 + part_heads);
      const SequenceState& cache = *b.state[blk.t0];
      const int64_t p0 = first(blk.t0);
      g.k = cache.k(il, p0) + kvh * hk;
      g.v = cache.v(il, p0) + kvh * hv;
      g.v_stride = cache.v_stride(il);  // n_kv_heads * hv; MLA: V lives inside K
      g.n_q = 0;
      for (int64_t t = blk.t0; t < blk.t0 + blk.n; ++t) {
        for (int64_t head = h0; head < h1; ++head) {
          qp[g.n_q] = q + (t * hp.n_head + head) * hk;
          op[g.n_q] = out + (t * hp.n_head + head) * hv;
          // Causal: positions p0 .. pos of its own sequence.
          n_kv[g.n_q] = b.pos[t] + 1 - p0;
          if (!sinks.empty()) sink[g.n_q] = sinks[head];
          ++g.n_q;
        }
      }
      internal::AttendGroup(g);
    }
  };
  if (pool_ == nullptr) {
    work(0);
  } else {
    pool_->RunOnAll(work);
  }
}

absl::Status Forward::MoeFfn(int il, Batch& b) const {
  const HyperParams& hp = model_->hparams();
  const LayerWeights& L = model_->layer(il);
  Workspace& ws = *b.ws;
  const int64_t n = b.n, d = hp.n_embd, k = hp.n_expert_used;
  const int64_t de = hp.n_embd_experts();
  const bool latent = hp.moe_latent > 0;
  ExpertCall& call = ws.call;
  call.hidden.resize(n * de);
  // A dense MLP beside the experts (ffn_gate/up/down on an MoE layer) reads
  // ffn_norm(x); the experts then read ffn_pre_norm_2(x).
  const bool mlp = L.ffn_down.data != nullptr;
  // The normed input: the experts' own unless LatentMoE projects it down
  // for them (the router and the shared expert read it whole).
  float* hn = latent ? ws.h.Get(n * d) : call.hidden.data();
  NormRows(pool_, b.x, L.ffn_pre_norm_2.empty() ? L.ffn_norm : L.ffn_pre_norm_2, n, d,
           hp.rms_eps, hn);
  if (latent) RETURN_IF_ERROR(quant::MatMul(dense_[il].ffn_latent_down, hn, n, call.hidden.data(), pool_));
  const bool shared = L.has_shared_expert();

  // The router reads the normed input (before any LatentMoE projection), or
  // RMSNorm(x) / sqrt(d) * router_scale (as llama.cpp's gemma4 graph: norm,
  // then the two products).
  const float* router_in = hn;
  if (!L.router_scale.empty()) {
    float* ri = ws.router_in.Get(n * d);
    const float inv = 1.0f / std::sqrt(static_cast<float>(d));
    For(pool_, n, MinRows(d), [&](int64_t t0, int64_t t1) {
      internal::RmsNormRows(b.x + t0 * d, d, nullptr, t1 - t0, d, hp.rms_eps, ri + t0 * d, d);
      for (int64_t i = t0 * d; i < t1 * d; ++i) ri[i] = ri[i] * inv * L.router_scale[i % d];
    });
    router_in = ri;
  }
  float* router = ws.router.Get(n * hp.n_expert);
  RETURN_IF_ERROR(quant::MatMul(L.router, router_in, n, router, pool_));
  if (!L.router_b.empty()) {
    For(pool_, n, MinRows(hp.n_expert), [&](int64_t t0, int64_t t1) {
      AddBias(L.router_b, t0, t1, router);
    });
  }
  call.call_id = next_call_id_.fetch_add(1);
  call.layer = il;
  call.n_tokens = static_cast<int32_t>(n);
  call.d = static_cast<int32_t>(de);
  call.token_offsets.resize(n + 1);
  call.expert_ids.resize(n * k);
  call.weights.resize(n * k);
  // deepseek2's router (sigmoid, selection bias, groups, scale) or any
  // combination the two fixed forms below do not cover.
  const bool general = internal::UsesGeneralRouter(hp, !L.router_sel_b.empty());
  internal::RouterChoice rc;
  rc.scoring = hp.router_scoring;
  rc.n_expert = static_cast<int>(hp.n_expert);
  rc.k = static_cast<int>(k);
  rc.normalize = hp.norm_topk;
  rc.scale = hp.expert_weights_scale;
  rc.bias = L.router_sel_b.empty() ? nullptr : L.router_sel_b.data();
  rc.n_groups = static_cast<int>(hp.n_expert_groups);
  rc.n_group_used = static_cast<int>(hp.n_group_used);
  For(pool_, n, MinRows(hp.n_expert * 16), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      call.token_offsets[t] = static_cast<uint32_t>(t * k);
      if (general) {
        internal::SelectExpertsGeneral(rc, router + t * hp.n_expert,
                                       call.expert_ids.data() + t * k,
                                       call.weights.data() + t * k);
      } else if (hp.router_scoring == RouterSpec::Scoring::kSoftmaxSelected) {
        internal::SelectExpertsSoftmaxOfTopK(router + t * hp.n_expert,
                                             static_cast<int>(hp.n_expert), static_cast<int>(k),
                                             call.expert_ids.data() + t * k,
                                             call.weights.data() + t * k);
      } else {
        internal::SelectExperts(router + t * hp.n_expert, static_cast<int>(hp.n_expert),
                                static_cast<int>(k), hp.norm_topk, call.expert_ids.data() + t * k,
                                call.weights.data() + t * k);
      }
    }
  });
  call.token_offsets[n] = static_cast<uint32_t>(n * k);
  if (!L.down_exps_scale.empty()) {
    // A factor per expert on its output: part of its routing weight (so
    // that every expert backend honours it; expert.h).
    for (int64_t i = 0; i < n * k; ++i) call.weights[i] *= L.down_exps_scale[call.expert_ids[i]];
  }
  // The routed experts, and the shared expert while they are computed: a
  // worker computes them in its own threads between Start and Finish (an
  // in-process backend already has, in Start). Finish runs whatever the
  // shared expert's outcome, so that the backend is ready for the next call.
  float* partial = ws.partial.Get(n * de);
  RETURN_IF_ERROR(experts_->Start(call, partial, nullptr));
  absl::Status shared_status = shared ? SharedExpert(il, hn, n, ws) : absl::OkStatus();
  float* m = nullptr;
  if (mlp && shared_status.ok()) {
    m = ws.mlp.Get(n * d);
    float* hm = ws.h.Get(n * d);
    NormRows(pool_, b.x, L.ffn_norm, n, d, hp.rms_eps, hm);
    const DenseWeights& W = dense_[il];
    shared_status = GatedFfn(hp.dense_activation, W.ffn_gate, W.ffn_up, W.ffn_down, hm, n, ws, m);
  }
  const absl::Status routed_status = experts_->Finish();
  RETURN_IF_ERROR(routed_status);
  RETURN_IF_ERROR(shared_status);
  if (latent) {
    float* up = ws.up.Get(n * d);
    RETURN_IF_ERROR(quant::MatMul(dense_[il].ffn_latent_up, partial, n, up, pool_));
    partial = up;
  }
  const float* sh = shared ? ws.shared.Get(n * d) : nullptr;
  if (m != nullptr) {
    // Gemma's norms: post_ffw_norm_1(mlp) + post_ffw_norm_2(experts), then
    // post_ffw_norm of the sum.
    For(pool_, n, MinRows(d), [&](int64_t t0, int64_t t1) {
      const int64_t rows = t1 - t0;
      float* mr = m + t0 * d;
      float* pr = partial + t0 * d;
      if (!L.ffn_post_norm_1.empty()) {
        internal::RmsNormRows(mr, d, L.ffn_post_norm_1.data(), rows, d, hp.rms_eps, mr, d);
      }
      if (!L.ffn_post_norm_2.empty()) {
        internal::RmsNormRows(pr, d, L.ffn_post_norm_2.data(), rows, d, hp.rms_eps, pr, d);
      }
      for (int64_t i = 0; i < rows * d; ++i) pr[i] = mr[i] + pr[i];
      if (!L.ffn_post_norm.empty()) {
        internal::RmsNormRows(pr, d, L.ffn_post_norm.data(), rows, d, hp.rms_eps, pr, d);
      }
    });
  }
  For(pool_, n, MinRows(d), [&](int64_t t0, int64_t t1) {
    for (int64_t i = t0 * d; i < t1 * d; ++i) {
      const float y = sh == nullptr ? partial[i] : partial[i] + sh[i];
      b.x[i] += y;
    }
  });
  return absl::OkStatus();
}

absl::Status Forward::GatedFfn(ExpertActivation act, const quant::WeightView& gate_w,
                               const quant::WeightView& up_w, const quant::WeightView& down_w,
                               const float* h, int64_t n, Workspace& ws, float* out) const {
  const int64_t ff = up_w.n_rows;
  float* gate = ws.gate.Get(n * ff);
  if (!IsGated(act)) {
    // relu(up . h)^2: no gate projection.
    RETURN_IF_ERROR(quant::MatMul(up_w, h, n, gate, pool_));
    For(pool_, n, MinRows(ff, 4096), [&](int64_t t0, int64_t t1) {
      internal::ReluSq(gate + t0 * ff, (t1 - t0) * ff, gate + t0 * ff);
    });
    return quant::MatMul(down_w, gate, n, out, pool_);
  }
  float* up = ws.up.Get(n * ff);
  const quant::Product gate_up[] = {{gate_w, gate}, {up_w, up}};
  RETURN_IF_ERROR(quant::MatMuls(gate_up, h, n, pool_));
  For(pool_, n, MinRows(ff, 4096), [&](int64_t t0, int64_t t1) {
    if (act == ExpertActivation::kGeGlu) {
      internal::GeGlu(gate + t0 * ff, up + t0 * ff, (t1 - t0) * ff, gate + t0 * ff);
    } else {
      internal::SwiGlu(gate + t0 * ff, up + t0 * ff, t1 - t0, ff, gate + t0 * ff);
    }
  });
  return quant::MatMul(down_w, gate, n, out, pool_);
}

absl::Status Forward::SharedExpert(int il, const float* h, int64_t n, Workspace& ws) const {
  const LayerWeights& L = model_->layer(il);
  const int64_t d = model_->hparams().n_embd;
  float* out = ws.shared.Get(n * d);
  // SwiGLU, or relu^2 (ungated) beside relu^2 experts (nemotron_h_moe).
  const ExpertActivation act = IsGated(model_->hparams().expert_ffn.activation)
                                   ? ExpertActivation::kSwiGlu
                                   : ExpertActivation::kReluSq;
  RETURN_IF_ERROR(GatedFfn(act, dense_[il].shexp_gate, dense_[il].shexp_up, dense_[il].shexp_down,
                           h, n, ws, out));
  if (L.shexp_gate_inp.data != nullptr) {
    float* g = ws.shexp_g.Get(n);
    RETURN_IF_ERROR(quant::MatMul(L.shexp_gate_inp, h, n, g, pool_));
    For(pool_, n, MinRows(d), [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const float s = internal::Sigmoid(g[t]);
        for (int64_t i = 0; i < d; ++i) out[t * d + i] *= s;
      }
    });
  }
  return absl::OkStatus();
}

absl::Status Forward::Head(const Batch& b, absl::Span<const SequenceBatch> seqs) const {
  const HyperParams& hp = model_->hparams();
  const int64_t d = hp.n_embd;
  // The rows whose logits are wanted, for every sequence, in one product.
  std::vector<int64_t> rows;
  int64_t t0 = 0;
  for (const SequenceBatch& s : seqs) {
    const int64_t n = static_cast<int64_t>(s.tokens.size());
    if (s.mode == LogitsMode::kAll) {
      for (int64_t i = 0; i < n; ++i) rows.push_back(t0 + i);
    } else if (s.mode == LogitsMode::kLast) {
      rows.push_back(t0 + n - 1);
    }
    t0 += n;
  }
  if (rows.empty()) return absl::OkStatus();
  const int64_t n_rows = static_cast<int64_t>(rows.size());
  float* h = b.ws->head_h.Get(n_rows * d);
  float* out = b.ws->logits.Get(n_rows * hp.n_vocab);
  For(pool_, n_rows, MinRows(d), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      internal::RmsNorm(b.x + rows[r] * d, model_->output_norm().data(), d, hp.rms_eps,
                        h + r * d);
    }
  });
  RETURN_IF_ERROR(quant::MatMul(output_, h, n_rows, out, pool_));
  if (hp.final_logit_softcap != 0.0f) {
    // llama.cpp: scale by 1 / c, tanh, scale by c.
    const float c = hp.final_logit_softcap, inv = 1.0f / c;
    For(pool_, n_rows, MinRows(hp.n_vocab), [&](int64_t r0, int64_t r1) {
      for (int64_t i = r0 * hp.n_vocab; i < r1 * hp.n_vocab; ++i) {
        out[i] = std::tanh(out[i] * inv) * c;
      }
    });
  }
  int64_t r = 0;
  for (const SequenceBatch& s : seqs) {
    const int64_t k = s.mode == LogitsMode::kAll    ? static_cast<int64_t>(s.tokens.size())
                      : s.mode == LogitsMode::kLast ? 1
                                                    : 0;
    if (k == 0) continue;
    s.logits->assign(out + r * hp.n_vocab, out + (r + k) * hp.n_vocab);
    r += k;
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------- decoding

absl::StatusOr<std::vector<int32_t>> GreedyGenerate(
    const Forward& forward, SequenceState* cache, absl::Span<const int32_t> prompt, int n_predict,
    absl::Span<const int32_t> stop_ids, const std::function<bool(int32_t)>& on_token) {
  std::vector<int32_t> out;
  if (n_predict <= 0) {
    if (!prompt.empty()) RETURN_IF_ERROR(forward.Eval(prompt, cache, LogitsMode::kNone, nullptr));
    return out;
  }
  std::vector<float> logits;
  if (prompt.empty()) {
    return absl::InvalidArgumentError("GreedyGenerate: empty prompt");
  }
  RETURN_IF_ERROR(forward.Eval(prompt, cache, LogitsMode::kLast, &logits));
  const int64_t n_vocab = forward.model().hparams().n_vocab;
  for (int i = 0; i < n_predict; ++i) {
    const int32_t next = static_cast<int32_t>(internal::Argmax(logits.data(), n_vocab));
    out.push_back(next);
    if (on_token && !on_token(next)) break;
    if (std::find(stop_ids.begin(), stop_ids.end(), next) != stop_ids.end()) break;
    if (i + 1 == n_predict) break;
    const int32_t one[1] = {next};
    RETURN_IF_ERROR(forward.Eval(one, cache, LogitsMode::kLast, &logits));
  }
  return out;
}

}  // namespace moesplit::model
