#include "services/dense/api_auth.h"

#include "prometheus/family.h"

namespace moesplit::dense {
namespace {

prometheus::Family<prometheus::Counter>& Failures(prometheus::Registry& r) {
  return prometheus::BuildCounter()
      .Name("moesplit_auth_failures_total")
      .Help("requests refused for a missing or wrong API key, by API")
      .Register(r);
}

}  // namespace

ApiAuth::ApiAuth(auth::ApiKeySet keys, prometheus::Registry& registry)
    : keys_(std::move(keys)),
      http_failures_(Failures(registry).Add({{"api", "http"}})),
      grpc_failures_(Failures(registry).Add({{"api", "grpc"}})) {}

bool ApiAuth::Check(absl::string_view authorization, Api api) const {
  if (keys_.MatchesAuthorization(authorization)) return true;
  (api == kHttp ? http_failures_ : grpc_failures_).Increment();
  return false;
}

}  // namespace moesplit::dense
