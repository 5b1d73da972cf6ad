#include "common/model/model.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status.h"
#include "common/model/internal/str.h"
#include "common/quant/quant.h"

namespace moesplit::model {
namespace {

std::string ShapeString(const std::array<int64_t, 4>& ne, int n_dims) {
  std::vector<int64_t> v(ne.begin(), ne.begin() + std::max(n_dims, 1));
  return absl::StrCat("[", absl::StrJoin(v, ", "), "]");
}

// Checks presence, shape and type of one tensor. Sets *out (nullptr when an
// optional tensor is absent).
absl::Status CheckTensor(const GgufFile& file, const HyperParams& hp,
                         const TensorSpec& spec, int layer, const GgufTensor** out) {
  const std::string name = TensorName(spec, layer);
  const GgufTensor* t = file.FindTensor(name);
  *out = t;
  if (t == nullptr) {
    if (!spec.required) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(file.path(), ": missing tensor '", name, "' required by ", hp.arch));
  }
  std::array<int64_t, 4> want = {1, 1, 1, 1};
  const int own = layer < static_cast<int>(hp.layers.size()) ? layer : -1;  // NextN: global
  for (int i = 0; i < spec.n_dims; ++i) want[i] = ResolveDim(hp, spec.shape[i], own);
  if (want != t->ne) {
    return absl::InvalidArgumentError(absl::StrCat(
        file.path(), ": tensor '", name, "' has shape ", ShapeString(t->ne, t->n_dims),
        ", expected ", ShapeString(want, spec.n_dims)));
  }
  absl::Status st = quant::CheckSupported(t->type);
  if (!st.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.path(), ": tensor '", name, "': ", st.message()));
  }
  if (!RowBytes(t->type, t->ne[0]).has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        file.path(), ": tensor '", name, "': row of ", t->ne[0],
        " elements is not a multiple of the ", internal::Sv(GgmlTypeName(t->type)), " block size"));
  }
  return absl::OkStatus();
}

quant::WeightView Matrix(const GgufTensor* t) {
  if (t == nullptr) return {};
  return {t->type, t->data, t->ne[1] * t->ne[2] * t->ne[3], t->ne[0],
          *RowBytes(t->type, t->ne[0])};
}

ExpertTensorView Experts(const GgufTensor* t) {
  ExpertTensorView v;
  v.type = t->type;
  v.data = t->data;
  v.n_in = t->ne[0];
  v.n_out = t->ne[1];
  v.n_expert = t->ne[2];
  v.row_bytes = *RowBytes(t->type, t->ne[0]);
  v.expert_bytes = v.row_bytes * static_cast<uint64_t>(v.n_out);
  return v;
}

absl::StatusOr<std::vector<float>> Vector(const GgufFile& file, const GgufTensor* t) {
  if (t == nullptr) return std::vector<float>();
  std::vector<float> v(t->n_elements());
  absl::Status st = quant::DequantizeRow(t->type, t->data, v.data(), t->n_elements());
  if (!st.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.path(), ": tensor '", t->name, "': ", st.message()));
  }
  return v;
}

// Optional tensors that only make sense together.
absl::Status CheckGroup(const GgufFile& file, int layer,
                        std::initializer_list<std::pair<const GgufTensor*, const char*>> g) {
  int present = 0;
  for (const auto& [t, name] : g) present += t != nullptr;
  if (present == 0 || present == static_cast<int>(g.size())) return absl::OkStatus();
  for (const auto& [t, name] : g) {
    if (t == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          file.path(), ": tensor 'blk.", layer, ".", name,
          "' is missing while the rest of its group is present"));
    }
  }
  return absl::OkStatus();
}

// A matrix of `rows` rows of src (src's row rows[i] as row i), in a buffer
// of its own (64-byte aligned, as the mapping's tensors are at least 32).
quant::WeightView GatherRows(const quant::WeightView& src, const std::vector<int64_t>& rows,
                             std::vector<std::shared_ptr<uint8_t[]>>* owned) {
  const uint64_t bytes = src.row_bytes * rows.size();
  std::shared_ptr<uint8_t[]> buf(
      static_cast<uint8_t*>(::operator new[](std::max<uint64_t>(bytes, 64), std::align_val_t{64})),
      [](uint8_t* p) { ::operator delete[](p, std::align_val_t{64}); });
  for (size_t i = 0; i < rows.size(); ++i) {
    std::memcpy(buf.get() + i * src.row_bytes, src.data + rows[i] * src.row_bytes, src.row_bytes);
  }
  quant::WeightView w = src;
  w.data = buf.get();
  w.n_rows = static_cast<int64_t>(rows.size());
  owned->push_back(std::move(buf));
  return w;
}

std::string_view SummaryRole(TensorRole role) {
  switch (role) {
    case TensorRole::kEmbeddings: return "embeddings";
    case TensorRole::kOutput: return "output";
    case TensorRole::kRoutedExpert: return "routed_experts";
    case TensorRole::kSharedExpert: return "shared_experts";
    default: return "dense";
  }
}

}  // namespace

absl::StatusOr<std::shared_ptr<const Model>> Model::Open(const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(path));
  return Load(std::shared_ptr<const GgufFile>(std::move(file)));
}

absl::StatusOr<std::shared_ptr<const Model>> Model::Load(
    std::shared_ptr<const GgufFile> file) {
  if (file == nullptr) return absl::InvalidArgumentError("Model::Load: null file");
  std::shared_ptr<Model> m(new Model());
  m->file_ = std::move(file);
  const GgufFile& f = *m->file_;
  auto arch_name = f.GetString("general.architecture");
  if (!arch_name.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": no usable general.architecture: ", arch_name.status().message()));
  }
  m->arch_ = FindArch(*arch_name);
  if (m->arch_ == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": unsupported architecture '", *arch_name,
        "' (supported: ", SupportedArchNames(), ")"));
  }
  ASSIGN_OR_RETURN(m->hparams_, ParseHyperParams(f, *m->arch_));
  RETURN_IF_ERROR(m->BindTensors());
  return std::shared_ptr<const Model>(std::move(m));
}

absl::Status Model::BindTensors() {
  const GgufFile& f = *file_;
  const GgufTensor* embd = f.FindTensor("token_embd.weight");
  if (embd == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.path(), ": missing tensor 'token_embd.weight'"));
  }
  hparams_.n_vocab = embd->ne[1];
  if (hparams_.n_vocab <= 0 || hparams_.n_vocab > (int64_t{1} << 31) - 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.path(), ": bad vocabulary size ", hparams_.n_vocab));
  }
  global_.assign(kTensorIdCount, nullptr);
  const int n_trunk = static_cast<int>(hparams_.n_layer);
  const int n_blocks = n_trunk + static_cast<int>(hparams_.n_nextn());
  per_layer_.assign(n_blocks, {});
  auto block_spec = [&](int il) -> const LayerSpec& {
    return il < n_trunk ? hparams_.layers[il] : hparams_.nextn_layers[il - n_trunk];
  };
  for (const TensorSpec& spec : arch_->tensors) {
    const int id = static_cast<int>(spec.id);
    if (!IsLayerTensor(spec.id)) {
      RETURN_IF_ERROR(CheckTensor(f, hparams_, spec, -1, &global_[id]));
      continue;
    }
    for (int il = 0; il < n_blocks; ++il) {
      if (!LayerSelected(spec.layers, block_spec(il))) continue;
      RETURN_IF_ERROR(CheckTensor(f, hparams_, spec, il, &per_layer_[il][id]));
    }
  }
  for (const TensorSpec& spec : NextNTensors()) {
    for (int il = n_trunk; il < n_blocks; ++il) {
      RETURN_IF_ERROR(
          CheckTensor(f, hparams_, spec, il, &per_layer_[il][static_cast<int>(spec.id)]));
    }
  }
  token_embd_ = Matrix(global_[static_cast<int>(TensorId::kTokenEmbd)]);
  const GgufTensor* out = global_[static_cast<int>(TensorId::kOutput)];
  tied_output_ = out == nullptr;
  output_ = tied_output_ ? token_embd_ : Matrix(out);
  ASSIGN_OR_RETURN(output_norm_,
                   Vector(f, global_[static_cast<int>(TensorId::kOutputNorm)]));
  ASSIGN_OR_RETURN(hparams_.rope.freq_factors,
                   Vector(f, global_[static_cast<int>(TensorId::kRopeFreqs)]));
  layers_.resize(n_trunk);
  nextn_layers_.resize(n_blocks - n_trunk);
  for (int il = 0; il < n_blocks; ++il) {
    RETURN_IF_ERROR(BindLayer(il, block_spec(il),
                              il < n_trunk ? &layers_[il] : &nextn_layers_[il - n_trunk]));
  }
  return absl::OkStatus();
}

absl::Status Model::BindLayer(int il, const LayerSpec& spec, LayerWeights* w) {
  const GgufFile& f = *file_;
  const auto& t = per_layer_[il];
  auto at = [&](TensorId id) { return t[static_cast<int>(id)]; };
  RETURN_IF_ERROR(CheckGroup(f, il, {{at(TensorId::kAttnQNorm), "attn_q_norm.weight"},
                                     {at(TensorId::kAttnKNorm), "attn_k_norm.weight"}}));
  if (IsGated(hparams_.expert_ffn.activation)) {
    RETURN_IF_ERROR(CheckGroup(f, il, {{at(TensorId::kShexpGate), "ffn_gate_shexp.weight"},
                                       {at(TensorId::kShexpUp), "ffn_up_shexp.weight"},
                                       {at(TensorId::kShexpDown), "ffn_down_shexp.weight"}}));
  } else {
    // A non-gated activation: the shared expert is up + down.
    RETURN_IF_ERROR(CheckGroup(f, il, {{at(TensorId::kShexpUp), "ffn_up_shexp.weight"},
                                       {at(TensorId::kShexpDown), "ffn_down_shexp.weight"}}));
  }
  // LatentMoE: both projections, exactly when moe_latent_size is set.
  if (spec.ffn == FfnKind::kMoe &&
      ((at(TensorId::kFfnLatentDown) != nullptr) != (hparams_.moe_latent > 0) ||
       (at(TensorId::kFfnLatentUp) != nullptr) != (hparams_.moe_latent > 0))) {
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": layer ", il, " needs ffn_latent_down and ffn_latent_up exactly when ",
        hparams_.arch, ".moe_latent_size is set (it is ", hparams_.moe_latent, ")"));
  }
  if (at(TensorId::kShexpGateInp) != nullptr && at(TensorId::kShexpDown) == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": tensor 'blk.", il,
        ".ffn_gate_inp_shexp.weight' is present without a shared expert"));
  }
  if (spec.mixer == MixerKind::kMla) {
    RETURN_IF_ERROR(CheckGroup(f, il, {{at(TensorId::kAttnQA), "attn_q_a.weight"},
                                       {at(TensorId::kAttnQANorm), "attn_q_a_norm.weight"},
                                       {at(TensorId::kAttnQB), "attn_q_b.weight"}}));
    const bool lora = hparams_.q_lora_rank > 0;
    const GgufTensor* need = lora ? at(TensorId::kAttnQA) : at(TensorId::kAttnQ);
    if (need == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          f.path(), ": missing tensor 'blk.", il, lora ? ".attn_q_a.weight" : ".attn_q.weight",
          "' required by ", hparams_.arch, " with attention.q_lora_rank ",
          hparams_.q_lora_rank));
    }
  }
  if (spec.mixer == MixerKind::kGatedDeltaNet) {
    // The DeltaNet input: attn_qkv + attn_gate, or (qwen3next before 2026)
    // the fused ssm_in, which BindLayer splits into them.
    RETURN_IF_ERROR(CheckGroup(f, il, {{at(TensorId::kSsmQkv), "attn_qkv.weight"},
                                       {at(TensorId::kSsmZ), "attn_gate.weight"}}));
    const bool split = at(TensorId::kSsmQkv) != nullptr;
    const bool fused = at(TensorId::kSsmIn) != nullptr;
    if (split == fused) {
      return absl::InvalidArgumentError(absl::StrCat(
          f.path(), ": layer ", il, " needs either attn_qkv + attn_gate or ssm_in (",
          split ? "both are" : "neither is", " present)"));
    }
  }
  if (IsAttention(spec.mixer) && spec.mixer != MixerKind::kMla && at(TensorId::kAttnV) == nullptr &&
      il < static_cast<int>(hparams_.layers.size()) &&
      ResolveDim(hparams_, Dim::kK, il) != ResolveDim(hparams_, Dim::kV, il)) {
    // Without attn_v, V is the K projection: the sizes must agree.
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": layer ", il, " has no attn_v.weight, so V is K, but its K has ",
        ResolveDim(hparams_, Dim::kK, il), " values and its V ", ResolveDim(hparams_, Dim::kV, il)));
  }
  if (spec.ffn == FfnKind::kMoe && at(TensorId::kExpDown) != nullptr &&
      IsGated(hparams_.expert_ffn.activation)) {
    // The routed experts' gate and up: separate, or fused (ffn_gate_up_exps).
    // (A non-gated activation reads ffn_up_exps alone, required by its table.)
    const bool fused = at(TensorId::kExpGateUp) != nullptr;
    const bool split = at(TensorId::kExpGate) != nullptr && at(TensorId::kExpUp) != nullptr;
    if (fused == split) {
      return absl::InvalidArgumentError(absl::StrCat(
          f.path(), ": layer ", il,
          " needs either ffn_gate_exps + ffn_up_exps or ffn_gate_up_exps (",
          fused ? "both are" : "neither is", " present)"));
    }
  }
  // Every row of the tensor table, bound by its form.
  absl::Status st;
  ForEachLayerTensor(
      [&](auto row, auto& field) {
        const GgufTensor* t = at(row.id);
        if (!st.ok() || t == nullptr) return;
        if constexpr (row.form == TensorForm::kMatrix) {
          field = Matrix(t);
        } else if constexpr (row.form == TensorForm::kVector) {
          auto v = Vector(f, t);
          if (v.ok()) field = *std::move(v);
          st = v.status();
        } else {
          field = Experts(t);
        }
      },
      *w);
  RETURN_IF_ERROR(st);
  if (spec.mixer == MixerKind::kGatedDeltaNet) SplitFusedDeltaNet(w);
  if (w->gate_up_exps.data != nullptr) {
    // Per expert the gate rows, then the up rows: views of the two halves.
    const ExpertTensorView fused = w->gate_up_exps;
    const int64_t ff = fused.n_out / 2;
    w->gate_exps = fused;
    w->gate_exps.n_out = ff;
    w->up_exps = w->gate_exps;
    w->up_exps.data = fused.data + ff * fused.row_bytes;
    w->gate_up_exps = {};
  }
  // A non-gated expert activation (relu^2) has no gate tensor: the routed
  // experts' gate views up, so that every holder of expert tensors (stores,
  // shards, caches) keeps its three-tensor shape; the kernels read up alone.
  if (!IsGated(hparams_.expert_ffn.activation) && w->gate_exps.data == nullptr) {
    w->gate_exps = w->up_exps;
  }
  return absl::OkStatus();
}

void Model::SplitFusedDeltaNet(LayerWeights* w) {
  LayerWeights& L = *w;
  const HyperParams& hp = hparams_;
  const int64_t n_k = hp.ssm_n_k_heads, r = hp.ssm_n_v_heads / std::max<int64_t>(n_k, 1);
  const int64_t hk = hp.ssm_head_k, hv = hp.ssm_head_v;
  if (L.ssm_ba.data != nullptr) {
    // Per key head g: the beta rows of its r value heads, then their alpha
    // rows; value head g * r + j is row g * 2r + j (beta), + r (alpha).
    std::vector<int64_t> beta, alpha;
    for (int64_t g = 0; g < n_k; ++g) {
      for (int64_t j = 0; j < r; ++j) {
        beta.push_back(g * 2 * r + j);
        alpha.push_back(g * 2 * r + r + j);
      }
    }
    L.ssm_beta = GatherRows(L.ssm_ba, beta, &owned_);
    L.ssm_alpha = GatherRows(L.ssm_ba, alpha, &owned_);
    L.ssm_ba = {};
  }
  if (L.ssm_in.data != nullptr) {
    // Per key head g: q_g (hk rows), k_g (hk), the v rows of its r value
    // heads (r x hv), then their z rows (r x hv); attn_qkv is every q, every
    // k, then every v, and attn_gate every z, in head order.
    const int64_t block = 2 * hk + 2 * r * hv;
    std::vector<int64_t> qkv, z;
    for (int64_t g = 0; g < n_k; ++g) {
      for (int64_t i = 0; i < hk; ++i) qkv.push_back(g * block + i);
    }
    for (int64_t g = 0; g < n_k; ++g) {
      for (int64_t i = 0; i < hk; ++i) qkv.push_back(g * block + hk + i);
    }
    for (int64_t g = 0; g < n_k; ++g) {
      for (int64_t i = 0; i < r * hv; ++i) {
        qkv.push_back(g * block + 2 * hk + i);
        z.push_back(g * block + 2 * hk + r * hv + i);
      }
    }
    L.ssm_qkv = GatherRows(L.ssm_in, qkv, &owned_);
    L.ssm_z = GatherRows(L.ssm_in, z, &owned_);
    L.ssm_in = {};
  }
}

const GgufTensor* Model::tensor(TensorId id, int il) const {
  const int i = static_cast<int>(id);
  if (i < 0 || i >= kTensorIdCount) return nullptr;
  if (!IsLayerTensor(id)) return global_[i];
  if (il < 0 || il >= static_cast<int>(per_layer_.size())) return nullptr;
  return per_layer_[il][i];
}

ModelSummary Model::Summary() const {
  ModelSummary s;
  s.architecture = std::string(arch_->name);
  s.name = file_->GetStringOr("general.name", "").value_or("");
  s.hparams = hparams_;
  s.n_tensors = static_cast<int64_t>(file_->tensors().size());
  s.file_bytes = file_->file_bytes();
  for (const GgufTensor& t : file_->tensors()) {
    ++s.tensors_by_type[std::string(GgmlTypeName(t.type))];
  }
  for (const char* role :
       {"dense", "routed_experts", "shared_experts", "embeddings", "output"}) {
    s.bytes_by_role[role] = 0;
  }
  if (!nextn_layers_.empty()) s.bytes_by_role["nextn"] = 0;
  const size_t n_trunk = layers_.size();
  auto add = [&](const GgufTensor* t, std::string_view role) {
    if (t == nullptr) return;
    s.bytes_by_role[std::string(role)] += t->n_bytes;
    s.n_params += t->n_elements();
  };
  for (const TensorSpec& spec : arch_->tensors) {
    const int id = static_cast<int>(spec.id);
    if (!IsLayerTensor(spec.id)) {
      add(global_[id], SummaryRole(spec.role));
      continue;
    }
    for (size_t il = 0; il < per_layer_.size(); ++il) {
      add(per_layer_[il][id], il < n_trunk ? SummaryRole(spec.role) : "nextn");
    }
  }
  for (const TensorSpec& spec : NextNTensors()) {
    for (size_t il = n_trunk; il < per_layer_.size(); ++il) {
      add(per_layer_[il][static_cast<int>(spec.id)], "nextn");
    }
  }
  return s;
}

}  // namespace moesplit::model
