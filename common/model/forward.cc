#include "common/model/forward.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <new>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "common/model/internal/attention.h"
#include "common/model/internal/ops.h"
#include "common/quant/quant.h"

namespace moesplit::model {

// ------------------------------------------------------------------ KvCache

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::Create(const HyperParams& hp,
                                                         int64_t n_ctx) {
  if (n_ctx < 1) {
    return absl::InvalidArgumentError(absl::StrCat("KV cache size n_ctx = ", n_ctx, " < 1"));
  }
  std::unique_ptr<KvCache> c(new KvCache());
  c->n_ctx_ = n_ctx;
  c->k_row_ = hp.n_head_kv * hp.head_dim_k;
  c->v_row_ = hp.n_head_kv * hp.head_dim_v;
  constexpr int64_t kMaxElements = int64_t{1} << 40;  // 2 TiB of f16 per layer
  if (c->k_row_ <= 0 || c->v_row_ <= 0 || n_ctx > kMaxElements / (c->k_row_ + c->v_row_)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("KV cache of ", n_ctx, " positions is too large for this model"));
  }
  try {
    c->k_.resize(hp.n_layer);
    c->v_.resize(hp.n_layer);
    for (int64_t l = 0; l < hp.n_layer; ++l) {
      c->k_[l].reset(new uint16_t[static_cast<size_t>(n_ctx * c->k_row_)]);
      c->v_[l].reset(new uint16_t[static_cast<size_t>(n_ctx * c->v_row_)]);
    }
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "KV cache of ", n_ctx, " positions x ", hp.n_layer, " layers does not fit in memory"));
  }
  return c;
}

uint64_t KvCache::bytes() const {
  return static_cast<uint64_t>(k_.size()) * n_ctx_ * (k_row_ + v_row_) * sizeof(uint16_t);
}

bool KvCache::Matches(const HyperParams& hp) const {
  return static_cast<int64_t>(k_.size()) == hp.n_layer &&
         k_row_ == hp.n_head_kv * hp.head_dim_k && v_row_ == hp.n_head_kv * hp.head_dim_v;
}

absl::Status KvCache::Truncate(int64_t n) {
  if (n < 0 || n > n_past_) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot truncate the KV cache to ", n, " positions; it holds ", n_past_));
  }
  n_past_ = n;
  return absl::OkStatus();
}

absl::Status KvCache::CheckRoom(int64_t n_new) const {
  if (n_new < 0 || n_new > n_ctx_ - n_past_) {
    return absl::OutOfRangeError(absl::StrCat(
        "KV cache full: ", n_past_, " positions used + ", n_new, " new > capacity n_ctx ",
        n_ctx_));
  }
  return absl::OkStatus();
}

// ------------------------------------------------------------------ Forward

struct Forward::Batch {
  int64_t n = 0;  // tokens of every sequence, concatenated
  std::vector<float> x;                    // n x n_embd residual stream
  std::vector<internal::RopeAngles> rope;  // per token
  std::vector<KvCache*> cache;             // per token: its sequence's cache
  std::vector<int64_t> pos;                // per token: its position there
};

Forward::Forward(std::shared_ptr<const Model> model, ExpertBackend* experts,
                 ThreadPool* pool)
    : model_(std::move(model)), experts_(experts), pool_(pool) {}

absl::Status Forward::Eval(absl::Span<const int32_t> tokens, KvCache* cache,
                           LogitsMode mode, std::vector<float>* logits) const {
  if (tokens.empty()) return absl::InvalidArgumentError("Eval: empty batch");
  const SequenceBatch one[1] = {{cache, tokens, mode, logits}};
  return EvalBatch(one);
}

absl::Status Forward::CheckEntry(const SequenceBatch& s) const {
  const HyperParams& hp = model_->hparams();
  if (s.tokens.empty()) return absl::InvalidArgumentError("Eval: empty batch");
  if (s.cache == nullptr || !s.cache->Matches(hp)) {
    return absl::InvalidArgumentError("Eval: KV cache missing or made for another model");
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
  return s.cache->CheckRoom(static_cast<int64_t>(s.tokens.size()));
}

absl::Status Forward::EvalBatch(absl::Span<const SequenceBatch> seqs) const {
  const HyperParams& hp = model_->hparams();
  if (seqs.empty()) return absl::InvalidArgumentError("EvalBatch: no sequences");
  size_t total = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    RETURN_IF_ERROR(CheckEntry(seqs[i]));
    for (size_t j = 0; j < i; ++j) {
      if (seqs[j].cache == seqs[i].cache) {
        return absl::InvalidArgumentError(
            absl::StrCat("EvalBatch: sequences ", j, " and ", i, " share a KV cache"));
      }
    }
    total += seqs[i].tokens.size();
  }
  // ExpertCall counts tokens in int32 and entries in uint32.
  if (total > static_cast<size_t>(INT32_MAX / hp.n_expert_used)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Eval: batch of ", total, " tokens is too large"));
  }

  Batch b;
  b.n = static_cast<int64_t>(total);
  b.rope.resize(b.n);
  b.cache.resize(b.n);
  b.pos.resize(b.n);
  std::vector<int32_t> tokens;
  tokens.reserve(total);
  int64_t t = 0;
  for (const SequenceBatch& s : seqs) {
    for (size_t i = 0; i < s.tokens.size(); ++i, ++t) {
      b.cache[t] = s.cache;
      b.pos[t] = s.cache->n_past() + static_cast<int64_t>(i);
      internal::ComputeRopeAngles(hp.rope, b.pos[t], &b.rope[t]);
      tokens.push_back(s.tokens[i]);
    }
  }
  RETURN_IF_ERROR(Embed(tokens, &b.x));
  for (int il = 0; il < model_->n_layer(); ++il) {
    RETURN_IF_ERROR(Attention(il, b));
    RETURN_IF_ERROR(MoeFfn(il, b));
  }
  RETURN_IF_ERROR(Head(b, seqs));
  for (const SequenceBatch& s : seqs) s.cache->Commit(static_cast<int64_t>(s.tokens.size()));
  return absl::OkStatus();
}

absl::Status Forward::Embed(absl::Span<const int32_t> tokens, std::vector<float>* x) const {
  const quant::WeightView& e = model_->token_embd();
  const int64_t d = model_->hparams().n_embd;
  x->resize(tokens.size() * d);
  for (size_t t = 0; t < tokens.size(); ++t) {
    RETURN_IF_ERROR(quant::DequantizeRow(e.type, e.data + tokens[t] * e.row_bytes,
                                         x->data() + t * d, d));
  }
  return absl::OkStatus();
}

namespace {

void AddBias(const std::vector<float>& bias, int64_t n, float* y) {
  if (bias.empty()) return;
  const int64_t m = static_cast<int64_t>(bias.size());
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t i = 0; i < m; ++i) y[t * m + i] += bias[i];
  }
}

// RMSNorm of every row (n rows of d) of x into y.
void NormRows(const std::vector<float>& x, const std::vector<float>& w, int64_t n, int64_t d,
              float eps, std::vector<float>* y) {
  y->resize(n * d);
  for (int64_t t = 0; t < n; ++t) {
    internal::RmsNorm(x.data() + t * d, w.data(), d, eps, y->data() + t * d);
  }
}

// Per-head QK-norm and NEOX RoPE of n rows of n_heads heads.
void NormAndRope(float* x, int64_t n, int64_t n_heads, int64_t head_dim,
                 const std::vector<float>& norm, float eps, int64_t n_rot,
                 const std::vector<internal::RopeAngles>& rope) {
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + (t * n_heads + h) * head_dim;
      if (!norm.empty()) internal::RmsNorm(v, norm.data(), head_dim, eps, v);
      internal::ApplyRopeNeox(rope[t], n_rot, v);
    }
  }
}

}  // namespace

absl::Status Forward::Attention(int il, Batch& b) const {
  const HyperParams& hp = model_->hparams();
  const LayerWeights& L = model_->layer(il);
  const int64_t n = b.n, d = hp.n_embd;
  const int64_t qd = hp.n_head * hp.head_dim_k, kd = hp.n_head_kv * hp.head_dim_k;
  const int64_t vd = hp.n_head_kv * hp.head_dim_v;
  std::vector<float> h;
  NormRows(b.x, L.attn_norm, n, d, hp.rms_eps, &h);
  std::vector<float> q(n * qd), k(n * kd), v(n * vd);
  RETURN_IF_ERROR(quant::MatMul(L.wq, h.data(), n, q.data(), pool_));
  RETURN_IF_ERROR(quant::MatMul(L.wk, h.data(), n, k.data(), pool_));
  RETURN_IF_ERROR(quant::MatMul(L.wv, h.data(), n, v.data(), pool_));
  AddBias(L.bq, n, q.data());
  AddBias(L.bk, n, k.data());
  AddBias(L.bv, n, v.data());
  NormAndRope(q.data(), n, hp.n_head, hp.head_dim_k, L.q_norm, hp.rms_eps, hp.rope.n_rot,
              b.rope);
  NormAndRope(k.data(), n, hp.n_head_kv, hp.head_dim_k, L.k_norm, hp.rms_eps, hp.rope.n_rot,
              b.rope);
  for (int64_t t = 0; t < n; ++t) {
    internal::ToF16(kd, k.data() + t * kd, b.cache[t]->k(il, b.pos[t]));
    internal::ToF16(vd, v.data() + t * vd, b.cache[t]->v(il, b.pos[t]));
  }
  const int64_t ad = hp.n_head * hp.head_dim_v;
  std::vector<float> attn(n * ad);
  AttendHeads(il, b, q.data(), attn.data());
  std::vector<float> o(n * d);
  RETURN_IF_ERROR(quant::MatMul(L.wo, attn.data(), n, o.data(), pool_));
  for (int64_t i = 0; i < n * d; ++i) b.x[i] += o[i];
  return absl::OkStatus();
}

void Forward::AttendHeads(int il, const Batch& b, const float* q, float* out) const {
  const HyperParams& hp = model_->hparams();
  const int64_t hk = hp.head_dim_k, hv = hp.head_dim_v;
  const int64_t group = hp.n_head / hp.n_head_kv;
  auto work = [&](int64_t begin, int64_t end) {
    std::vector<uint16_t> q16(hk), acc16(hv);
    internal::HeadAttention a;
    a.q16 = q16.data();
    a.k_stride = hp.n_head_kv * hk;
    a.v_stride = hp.n_head_kv * hv;
    a.dk = hk;
    a.dv = hv;
    a.scale = 1.0f / std::sqrt(static_cast<float>(hk));
    for (int64_t idx = begin; idx < end; ++idx) {
      const int64_t t = idx / hp.n_head, head = idx % hp.n_head, kvh = head / group;
      internal::ToF16(hk, q + (t * hp.n_head + head) * hk, q16.data());
      const KvCache& cache = *b.cache[t];
      a.k = cache.k(il, 0) + kvh * hk;
      a.v = cache.v(il, 0) + kvh * hv;
      a.n_kv = b.pos[t] + 1;  // causal: positions 0 .. pos of its own sequence
      internal::AttendHead(a, acc16.data(), out + (t * hp.n_head + head) * hv);
    }
  };
  const int64_t items = b.n * hp.n_head;
  if (pool_ == nullptr) {
    work(0, items);
  } else {
    pool_->ParallelFor(items, work);
  }
}

absl::Status Forward::MoeFfn(int il, Batch& b) const {
  const HyperParams& hp = model_->hparams();
  const LayerWeights& L = model_->layer(il);
  const int64_t n = b.n, d = hp.n_embd, k = hp.n_expert_used;
  ExpertCall call;
  NormRows(b.x, L.ffn_norm, n, d, hp.rms_eps, &call.hidden);
  std::vector<float> shared;
  if (L.has_shared_expert()) RETURN_IF_ERROR(SharedExpert(il, call.hidden, n, &shared));

  std::vector<float> router(n * hp.n_expert);
  RETURN_IF_ERROR(quant::MatMul(L.router, call.hidden.data(), n, router.data(), pool_));
  call.call_id = next_call_id_.fetch_add(1);
  call.layer = il;
  call.n_tokens = static_cast<int32_t>(n);
  call.d = static_cast<int32_t>(d);
  call.token_offsets.resize(n + 1);
  call.expert_ids.resize(n * k);
  call.weights.resize(n * k);
  for (int64_t t = 0; t < n; ++t) {
    call.token_offsets[t] = static_cast<uint32_t>(t * k);
    internal::SelectExperts(router.data() + t * hp.n_expert, static_cast<int>(hp.n_expert),
                            static_cast<int>(k), hp.norm_topk, call.expert_ids.data() + t * k,
                            call.weights.data() + t * k);
  }
  call.token_offsets[n] = static_cast<uint32_t>(n * k);
  ExpertResult res;
  RETURN_IF_ERROR(experts_->Compute(call, &res));
  if (res.call_id != call.call_id || res.partial.size() != static_cast<size_t>(n * d)) {
    return absl::InternalError(absl::StrCat("expert backend answered call ", call.call_id,
                                            " with call ", res.call_id, " of ",
                                            res.partial.size(), " values"));
  }
  for (int64_t i = 0; i < n * d; ++i) {
    const float y = shared.empty() ? res.partial[i] : res.partial[i] + shared[i];
    b.x[i] += y;
  }
  return absl::OkStatus();
}

absl::Status Forward::SharedExpert(int il, const std::vector<float>& h, int64_t n,
                                   std::vector<float>* out) const {
  const LayerWeights& L = model_->layer(il);
  const int64_t d = model_->hparams().n_embd, ff = L.shexp_up.n_rows;
  std::vector<float> gate(n * ff), up(n * ff);
  RETURN_IF_ERROR(quant::MatMul(L.shexp_gate, h.data(), n, gate.data(), pool_));
  RETURN_IF_ERROR(quant::MatMul(L.shexp_up, h.data(), n, up.data(), pool_));
  internal::SwiGlu(gate.data(), up.data(), n, ff, gate.data());
  out->resize(n * d);
  RETURN_IF_ERROR(quant::MatMul(L.shexp_down, gate.data(), n, out->data(), pool_));
  if (L.shexp_gate_inp.data != nullptr) {
    std::vector<float> g(n);
    RETURN_IF_ERROR(quant::MatMul(L.shexp_gate_inp, h.data(), n, g.data(), pool_));
    for (int64_t t = 0; t < n; ++t) {
      const float s = internal::Sigmoid(g[t]);
      for (int64_t i = 0; i < d; ++i) (*out)[t * d + i] *= s;
    }
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
  std::vector<float> h(n_rows * d), out(n_rows * hp.n_vocab);
  for (int64_t r = 0; r < n_rows; ++r) {
    internal::RmsNorm(b.x.data() + rows[r] * d, model_->output_norm().data(), d, hp.rms_eps,
                      h.data() + r * d);
  }
  RETURN_IF_ERROR(quant::MatMul(model_->output(), h.data(), n_rows, out.data(), pool_));
  int64_t r = 0;
  for (const SequenceBatch& s : seqs) {
    const int64_t k = s.mode == LogitsMode::kAll    ? static_cast<int64_t>(s.tokens.size())
                      : s.mode == LogitsMode::kLast ? 1
                                                    : 0;
    if (k == 0) continue;
    s.logits->assign(out.begin() + r * hp.n_vocab, out.begin() + (r + k) * hp.n_vocab);
    r += k;
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------- decoding

absl::StatusOr<std::vector<int32_t>> GreedyGenerate(
    const Forward& forward, KvCache* cache, absl::Span<const int32_t> prompt, int n_predict,
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
