// Clients of running moesplit services, shared by `moesplit up`, `health`
// and `complete`.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/auth/tls.h"
#include "services/cli/commands.h"

namespace grpc {
class ClientContext;
}

namespace moesplit::cli {

// How a client reaches a service that wants an API key and/or TLS:
//   --api-key-file FILE   its first key (else $MOESPLIT_API_KEY), sent as
//                         `authorization: Bearer KEY`
//   --tls-ca FILE         TLS, the server's certificate verified against it
//   --tls-server-name N   the name checked in it instead of the address's host
//   --tls-cert/--tls-key  a client certificate (an expert-worker with
//                         --tls-ca wants one)
struct ClientSecurityFlags {
  std::string api_key_file, tls_ca, tls_cert, tls_key, tls_server_name;
  // Registers the flags bound to this; with_key false leaves out
  // --api-key-file (health checks need no key).
  void Register(FlagParser& p, bool with_key = true);
};

struct ClientSecurity {
  std::string api_key;  // "" = none
  auth::TlsPem tls;     // ca "" = plain text

  // Reads the files named by `f` and $MOESPLIT_API_KEY.
  static absl::StatusOr<ClientSecurity> Load(const ClientSecurityFlags& f);
  std::shared_ptr<grpc::Channel> Channel(const std::string& addr) const;
  // Adds the key's authorization metadata to a call (nothing without a key).
  void Authorize(grpc::ClientContext* ctx) const;
};

// grpc.health.v1.Health/Check against HOST:PORT; "SERVING" or an error
// (UNAVAILABLE when the server answers another status; the gRPC code when the
// call fails, e.g. DEADLINE_EXCEEDED).
absl::StatusOr<std::string> CheckHealth(const std::string& addr, const std::string& service,
                                        int64_t timeout_ms, const ClientSecurity& security = {});

struct CompletionRequest {
  std::string addr, prompt;
  int64_t max_tokens = 16, seed = 42, timeout_ms = 0;
  double temperature = 0;
  ClientSecurity security;
};

struct CompletionStats {
  int tokens = 0;
  double ttft_seconds = 0, after_first_seconds = 0;
  std::string finish_reason;
};

// Streams one Generate call; the text goes to io.out as it arrives.
absl::StatusOr<CompletionStats> StreamCompletion(const CompletionRequest& r, const CommandIo& io);

}  // namespace moesplit::cli
