// ApiAuth: the API keys of the dense service's two front ends (HTTP and
// gRPC Inference) and the refusals they count,
// moesplit_auth_failures_total{api="http"|"grpc"} on the service's registry.
// The keys and their constant-time matching are common/auth/api_keys.h's.
//
// Open without a key: HTTP GET /health, gRPC grpc.health.v1 and reflection;
// everything else (HTTP /metrics included) needs one. The separate
// --metrics port is not covered (put it on its own port or network).
//
// Thread-safe: immutable but for the counters (atomics).
#pragma once

#include "absl/strings/string_view.h"
#include "common/auth/api_keys.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"

namespace moesplit::dense {

class ApiAuth {
 public:
  enum Api { kHttp, kGrpc };

  // REQUIRES: !keys.empty() (no keys: no ApiAuth, the APIs are open).
  ApiAuth(auth::ApiKeySet keys, prometheus::Registry& registry);

  // Whether `authorization` (the HTTP header's or gRPC metadata's value,
  // "Bearer KEY") holds one of the keys; a refusal is counted under `api`.
  bool Check(absl::string_view authorization, Api api) const;

  size_t size() const { return keys_.size(); }

 private:
  const auth::ApiKeySet keys_;
  prometheus::Counter& http_failures_;
  prometheus::Counter& grpc_failures_;
};

}  // namespace moesplit::dense
