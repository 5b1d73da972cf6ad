// The dense service's per-request log: one line on stderr for every
// completion request that ends (HTTP /v1/completions and
// /v1/chat/completions, gRPC Generate and Chat), through the process's
// logger (common/base/log.h: text or --log-format json), with
//   id, api (http|grpc), endpoint, model, prompt_tokens, cached_tokens (of
//   them, reused from the prefix cache), generated_tokens, ttft_ms (arrival to the first
//   token; -1 without one), tokens_per_s (decode: tokens after the first
//   over the time since it), duration_ms, outcome, finish_reason.
// outcome is "ok", "cancelled" (the client went away or cancelled), or the
// error: "shutting_down", else the status code in lower case
// ("invalid_argument", "resource_exhausted", "unavailable", ...).
//
// Thread-safe.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "common/base/log.h"
#include "services/dense/dense_engine.h"

namespace moesplit::dense {

struct RequestRecord {
  std::string id;
  std::string api;       // "http" | "grpc"
  std::string endpoint;  // "chat_completions", "completions", "generate", "chat"
  std::string model;
  RequestTimings timings;
  std::string outcome;
  std::string finish_reason;  // "" when the request failed
};

// "ok", "cancelled", "shutting_down" or the lower-case status code name.
std::string RequestOutcome(const absl::Status& status);

// The line's fields in order (LogRequest writes them).
std::vector<LogField> RequestLogFields(const RequestRecord& r);
void LogRequest(const RequestRecord& r);

// llama-server's `timings` object: cache_n (prompt tokens reused from the
// prefix cache), prompt_n, prompt_ms (arrival to the first
// token), prompt_per_second, predicted_n, predicted_ms (first to last
// token), predicted_per_second (tokens after the first over predicted_ms).
nlohmann::ordered_json LlamaTimings(const RequestTimings& t);

}  // namespace moesplit::dense
