// The CUDA forward's device-side buffers (cuda_forward.cc allocates and
// fills them; cuda_forward.cc and cuda_mixers.cc read them): the uploaded
// dense weights per layer and the workspace of one micro-batch, whose
// element counts are the memory planner's (plan::GpuWorkspaceElems).
// Internal to the CUDA forward; not thread-safe (one Eval at a time).
#pragma once

#include <memory>
#include <vector>

#include "common/backend/backend.h"
#include "common/backend/cuda/cuda_backend.h"
#include "common/backend/cuda/cuda_forward.h"
#include "common/backend/cuda/internal/cuda_raw.h"
#include "common/model/tensor_table.h"
#include "common/plan/memory_plan.h"

namespace moesplit::cuda {
namespace internal {

struct DeviceMatrixBuf {
  std::unique_ptr<backend::Buffer> buf;
  raw::DeviceMatrix m;
  bool present() const { return m.data != nullptr; }
};
struct DeviceVec {
  std::unique_ptr<backend::Buffer> buf;
  const float* p = nullptr;
};
// Every head's matrix of an MLA per-head tensor: m has one head's shape,
// head_bytes is the distance between heads.
struct DeviceHeads : DeviceMatrixBuf {
  uint64_t head_bytes = 0;
};
// One layer's device copies: a field per row of the tensor table (named
// there); the routed experts stay on the host (the expert cache and streamed
// prefill copy them up on their own).
using LayerW = model::LayerTensors<DeviceMatrixBuf, DeviceVec, DeviceHeads, model::NoTensor>;

}  // namespace internal

using WorkspaceSizes = plan::GpuWorkspaceElems;

struct CudaForward::Weights {
  internal::DeviceMatrixBuf embd, output;
  internal::DeviceVec output_norm;
  std::vector<internal::LayerW> layers;
};

struct CudaForward::Workspace {
  WorkspaceSizes sizes;
  std::vector<std::unique_ptr<backend::Buffer>> bufs;
  float *x = nullptr, *h = nullptr, *o = nullptr, *part = nullptr, *q = nullptr, *k = nullptr,
        *v = nullptr, *attn = nullptr, *router = nullptr, *wts = nullptr, *sh_g = nullptr,
        *sh_u = nullptr, *sh_s = nullptr, *rope = nullptr, *logits = nullptr,
        *scratch = nullptr, *split = nullptr, *ex_in = nullptr, *ex_out = nullptr,
        *ex_g = nullptr, *ex_u = nullptr, *ex_w = nullptr, *pred_logits = nullptr,
        *pred_wts = nullptr;
  // Gated attention: the doubled q projection. Gated DeltaNet: qkv (then
  // the conv output, in place; the same buffer as qg), z, the per-head
  // gates, the heads' output.
  float *qg = nullptr, *dn_qkv = nullptr, *dn_z = nullptr, *dn_beta = nullptr, *dn_g = nullptr,
        *dn_out = nullptr;
  // MLA: the heads' queries (then attn_v_b's outputs), the q LoRA rows, the
  // gathered nope parts (plan::GpuWorkspaceElems).
  float *mla_q = nullptr, *mla_qa = nullptr, *mla_in = nullptr;
  int32_t *tokens = nullptr, *ids = nullptr, *ex_idx = nullptr, *pred_ids = nullptr;
  std::unique_ptr<PinnedHostBuffer> pin_h, pin_x, pin_ids, pin_wts, pin_part, pin_ex_idx, pin_ex_w,
      pin_pred_ids;
  std::vector<float> rope_host;
};

}  // namespace moesplit::cuda
