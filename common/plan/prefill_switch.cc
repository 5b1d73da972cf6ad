#include "common/plan/prefill_switch.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace moesplit::plan {
namespace {

absl::Status Positive(double v, const char* name) {
  if (!(v > 0) || !std::isfinite(v)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " must be positive and finite, got ", v));
  }
  return absl::OkStatus();
}

}  // namespace

double ExpertFlopsPerToken(int64_t n_embd, int64_t n_ff_exp) {
  return 6.0 * static_cast<double>(n_embd) * static_cast<double>(n_ff_exp);
}

PrefillRates ModelPrefillRates(int64_t n_embd, int64_t n_ff_exp, uint64_t expert_bytes) {
  PrefillRates r;
  r.expert_bytes = expert_bytes;
  r.flops_per_token = ExpertFlopsPerToken(n_embd, n_ff_exp);
  r.activation_bytes_per_token = static_cast<uint64_t>(8 * n_embd);
  return r;
}

absl::StatusOr<PrefillSwitch> ComputePrefillSwitch(const PrefillRates& r) {
  for (absl::Status s : {Positive(r.cpu_tokens_per_s, "cpu_tokens_per_s"),
                         Positive(r.gpu_flops_per_s, "gpu_flops_per_s"),
                         Positive(r.h2d_bytes_per_s, "h2d_bytes_per_s"),
                         Positive(static_cast<double>(r.expert_bytes), "expert_bytes"),
                         Positive(r.flops_per_token, "flops_per_token")}) {
    if (!s.ok()) return s;
  }
  PrefillSwitch out;
  out.copy_seconds = static_cast<double>(r.expert_bytes) / r.h2d_bytes_per_s;
  out.cpu_seconds_per_token = 1.0 / r.cpu_tokens_per_s;
  const double a = static_cast<double>(r.activation_bytes_per_token) / r.h2d_bytes_per_s;
  const double g = r.flops_per_token / r.gpu_flops_per_s;
  out.gpu_seconds_per_token = g + a;
  const double c = out.cpu_seconds_per_token;
  if (g + a >= c) return out;  // never
  const double n = std::floor(out.copy_seconds / (c - a)) + 1;
  if (n >= 9.2e18) return out;
  out.threshold_tokens = static_cast<int64_t>(n);
  return out;
}

}  // namespace moesplit::plan
