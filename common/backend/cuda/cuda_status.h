// The one place CUDA errors become absl::Status: out of memory ->
// RESOURCE_EXHAUSTED, no device / driver -> UNAVAILABLE, anything else ->
// INTERNAL, the message naming the failing call. RETURN_IF_CUDA_ERROR adds
// the calling statement's file and line.
#pragma once

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/backend/cuda/internal/cuda_raw.h"

namespace moesplit::cuda {

inline absl::Status ToStatus(const raw::CallResult& r, const char* file = nullptr,
                             int line = 0) {
  if (r.code == 0) return absl::OkStatus();
  const std::string where = file != nullptr ? absl::StrCat(" (", file, ":", line, ")") : "";
  const std::string msg = absl::StrCat(r.call, ": ", raw::ErrorString(r.code), where);
  if (raw::IsOutOfMemory(r.code)) return absl::ResourceExhaustedError(msg);
  if (raw::IsNoDevice(r.code)) return absl::UnavailableError(msg);
  return absl::InternalError(msg);
}

}  // namespace moesplit::cuda

#define RETURN_IF_CUDA_ERROR(expr)                                                   \
  do {                                                                               \
    const ::moesplit::cuda::raw::CallResult ms_cuda_result_ = (expr);                \
    if (!ms_cuda_result_.ok()) return ::moesplit::cuda::ToStatus(ms_cuda_result_, __FILE__, __LINE__); \
  } while (0)
