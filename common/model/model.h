// Model: a validated MoE transformer loaded from a GgufFile.
//
// Load() finds the ArchDescription of `general.architecture`, parses the
// hyper-parameters and checks every tensor the description lists: presence
// of the required ones, the shape of each against the hyper-parameters, and
// that common/quant supports its type. Failures are InvalidArgument naming
// the architecture, key or tensor. Norm weights and biases (small vectors) are
// dequantised to f32 at load; matrices stay in the file's mapping and are
// exposed as quant::WeightView (2-D) or ExpertTensorView (3-D experts),
// except qwen3next's fused ssm_ba / ssm_in, split by rows into copies
// (LayerWeights' ssm_beta / ssm_alpha, ssm_qkv / ssm_z) at load.
//
// Ownership: a Model shares ownership of its GgufFile, so every view stays
// valid while the Model lives. Thread-safe: immutable after Load.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/gguf/gguf.h"
#include "common/model/arch.h"
#include "common/model/tensor_table.h"
#include "common/quant/matmul.h"

namespace moesplit::model {

// A 3-D routed-expert tensor, ggml ne = [n_in, n_out, n_expert]: expert e is
// an n_out x n_in matrix (rows of n_in elements) at data + e * expert_bytes.
struct ExpertTensorView {
  GgmlType type = GgmlType::kF32;
  const uint8_t* data = nullptr;
  int64_t n_in = 0;
  int64_t n_out = 0;
  int64_t n_expert = 0;
  uint64_t row_bytes = 0;
  uint64_t expert_bytes = 0;
  // Each expert's matrix is in quant/packed.h's strip layout (a copy made by
  // an expert store, never the GGUF mapping); row_bytes stays the GGUF one.
  bool packed = false;

  // REQUIRES: 0 <= e < n_expert.
  quant::WeightView Expert(int64_t e) const {
    return {type, data + e * expert_bytes, n_out, n_in, row_bytes, packed};
  }
};

// Weights of one block: a field per row of the tensor table
// (tensor_table.h), named there, with what each holds. Matrices stay in the
// file's mapping (quant::WeightView; gated attention's wq has 2 x head_dim_k
// rows per head, the query then the gate), except those split from
// qwen3next's fused ssm_ba / ssm_in (Model::SplitFusedDeltaNet; the fused
// fields stay empty); vectors are dequantised to f32
// (ssm_conv: tap k of channel c at c * kernel + k; routed-expert biases:
// expert e's at e * n_ff_exp (gate, up) or e * n_embd (down)); MLA's
// per-head matrices and the routed experts are ExpertTensorViews (wk_b's
// head h is kv_lora x nope, wv_b's head_dim_v_mla x kv_lora). Optional
// tensors, and those of another layer kind (HyperParams::layers): a
// WeightView with data == nullptr, an empty vector.
struct LayerWeights
    : LayerTensors<quant::WeightView, std::vector<float>, ExpertTensorView, ExpertTensorView> {
  bool has_shared_expert() const { return shexp_down.data != nullptr; }
};

// What `moesplit inspect` prints.
struct ModelSummary {
  std::string architecture;
  std::string name;            // general.name, may be empty
  HyperParams hparams;
  int64_t n_tensors = 0;       // in the file
  int64_t n_params = 0;        // elements of the tensors the model uses
  std::map<std::string, int64_t> tensors_by_type;  // "Q4_K" -> count
  // Bytes by role: dense (attention, norms, router), routed_experts,
  // shared_experts, embeddings, output (0 when tied to the embeddings), and
  // nextn (only in a file that has NextN / MTP blocks): every tensor of
  // those blocks (kept aside, not run).
  std::map<std::string, uint64_t> bytes_by_role;
  uint64_t file_bytes = 0;
};

class Model {
 public:
  // Validates and wraps `file`. See the file comment for the errors.
  static absl::StatusOr<std::shared_ptr<const Model>> Load(
      std::shared_ptr<const GgufFile> file);
  // Convenience: GgufFile::Open + Load.
  static absl::StatusOr<std::shared_ptr<const Model>> Open(const std::string& path);

  const ArchDescription& arch() const { return *arch_; }
  const HyperParams& hparams() const { return hparams_; }
  const GgufFile& file() const { return *file_; }

  // Token embeddings: n_vocab rows of n_embd elements in the file's type.
  const quant::WeightView& token_embd() const { return token_embd_; }
  const std::vector<float>& output_norm() const { return output_norm_; }
  // The output head (the embeddings when tied).
  const quant::WeightView& output() const { return output_; }
  bool tied_output() const { return tied_output_; }
  // The trunk's layers. REQUIRES: 0 <= il < n_layer().
  const LayerWeights& layer(int il) const { return layers_[il]; }
  int n_layer() const { return static_cast<int>(layers_.size()); }
  // The NextN / MTP blocks (HyperParams::nextn_layers), block n_layer() + i
  // of the file: checked and bound like a layer (their mixer and FFN
  // weights plus the nextn_* fields), kept apart from the trunk; nothing
  // runs them yet. REQUIRES: 0 <= i < n_nextn().
  const LayerWeights& nextn_layer(int i) const { return nextn_layers_[i]; }
  int n_nextn() const { return static_cast<int>(nextn_layers_.size()); }
  // The file tensor behind `id` (of block `il` for a per-layer id: a trunk
  // layer, or n_layer() + i for NextN block i), or nullptr when an optional
  // tensor is absent or il is out of range.
  const GgufTensor* tensor(TensorId id, int il = -1) const;

  ModelSummary Summary() const;

 private:
  Model() = default;
  absl::Status BindTensors();
  // Binds block `il` (trunk layer or NextN block) of kind `spec` into `w`.
  absl::Status BindLayer(int il, const LayerSpec& spec, LayerWeights* w);
  // qwen3next's fused file layouts (ssm_ba; the legacy ssm_in) split by rows
  // into ssm_beta / ssm_alpha and ssm_qkv / ssm_z, copies of their own (the
  // fused fields are left empty): the forward passes read one layout.
  void SplitFusedDeltaNet(LayerWeights* w);

  std::shared_ptr<const GgufFile> file_;
  const ArchDescription* arch_ = nullptr;
  HyperParams hparams_;
  // Resolved file tensors by TensorId: global ones, then one table per
  // block (the trunk's layers, then the NextN blocks).
  std::vector<const GgufTensor*> global_;  // kTensorIdCount entries
  std::vector<std::array<const GgufTensor*, kTensorIdCount>> per_layer_;
  quant::WeightView token_embd_;
  quant::WeightView output_;
  bool tied_output_ = false;
  std::vector<float> output_norm_;
  std::vector<LayerWeights> layers_;
  std::vector<LayerWeights> nextn_layers_;
  // The matrices SplitFusedDeltaNet made (the rest live in the mapping).
  std::vector<std::shared_ptr<uint8_t[]>> owned_;
};

}  // namespace moesplit::model
