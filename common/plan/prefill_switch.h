// The switch-over point for streamed GPU prefill: how many tokens an expert
// must have in one step before copying its weights to the GPU and computing
// there beats computing it on the CPU expert-worker.
//
// Model, per expert with n tokens in a step:
//   CPU:  t_cpu(n) = n / cpu_tokens_per_s
//   GPU:  t_gpu(n) = max(copy, n * flops_per_token / gpu_flops_per_s)
//                    + n * activation_bytes_per_token / h2d_bytes_per_s
//         copy     = expert_bytes / h2d_bytes_per_s
// The max() is the overlap the prefill pipeline gives (the copy of expert
// i+1 runs while expert i computes); activations go up and partial sums
// come back without overlap. With c = 1/cpu_tokens_per_s, g = flops_per_token
// / gpu_flops_per_s and a = activation_bytes_per_token / h2d_bytes_per_s,
//   t_gpu(n) < t_cpu(n)  <=>  n > copy / (c - a)  and  g + a < c,
// so the threshold is floor(copy / (c - a)) + 1 tokens, or never when the
// GPU's per-token cost g + a is not below the CPU's c.
//
// The CUDA side feeds measured rates (worker tok/s for one expert, GEMM
// FLOP/s, host->device bytes/s); ExpertFlopsPerToken gives the FLOPs.
//
// Thread-safe: pure functions.
#pragma once

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"

namespace moesplit::plan {

struct PrefillRates {
  double cpu_tokens_per_s = 0;           // one expert, on the worker (> 0)
  double gpu_flops_per_s = 0;            // GEMM rate (> 0)
  double h2d_bytes_per_s = 0;            // host -> device copy rate (> 0)
  uint64_t expert_bytes = 0;             // gate + up + down of one expert
  double flops_per_token = 0;            // ExpertFlopsPerToken (> 0)
  uint64_t activation_bytes_per_token = 0;  // hidden row up + partial down
};

struct PrefillSwitch {
  // Smallest token count per expert at which the GPU is faster; nullopt
  // when it never is.
  std::optional<int64_t> threshold_tokens;
  double copy_seconds = 0;       // one expert's weights up
  double cpu_seconds_per_token = 0;
  double gpu_seconds_per_token = 0;  // compute + activations, excluding the copy
};

// 2 * 3 * n_embd * n_ff_exp: the gate, up and down products of one token.
double ExpertFlopsPerToken(int64_t n_embd, int64_t n_ff_exp);

// PrefillRates with the model's fields filled for one expert: expert_bytes,
// flops_per_token = ExpertFlopsPerToken, activation_bytes_per_token = an f32
// hidden row up and an f32 partial sum down (8 n_embd). The three measured
// rates are left 0 for the caller.
PrefillRates ModelPrefillRates(int64_t n_embd, int64_t n_ff_exp, uint64_t expert_bytes);

// InvalidArgument naming the field for a rate or size that is not positive
// and finite.
absl::StatusOr<PrefillSwitch> ComputePrefillSwitch(const PrefillRates& rates);

}  // namespace moesplit::plan
