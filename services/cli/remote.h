// Clients of running moesplit services, shared by `moesplit up`, `health`
// and `complete`.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "services/cli/commands.h"

namespace moesplit::cli {

// grpc.health.v1.Health/Check against HOST:PORT; "SERVING" or an error
// (UNAVAILABLE when the server answers another status; the gRPC code when the
// call fails, e.g. DEADLINE_EXCEEDED).
absl::StatusOr<std::string> CheckHealth(const std::string& addr, const std::string& service,
                                        int64_t timeout_ms);

struct CompletionRequest {
  std::string addr, prompt;
  int64_t max_tokens = 16, seed = 42, timeout_ms = 0;
  double temperature = 0;
};

struct CompletionStats {
  int tokens = 0;
  double ttft_seconds = 0, after_first_seconds = 0;
  std::string finish_reason;
};

// Streams one Generate call; the text goes to io.out as it arrives.
absl::StatusOr<CompletionStats> StreamCompletion(const CompletionRequest& r, const CommandIo& io);

}  // namespace moesplit::cli
