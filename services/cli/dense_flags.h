// moesplit-dense's flag table: names, defaults, help and checks, defined once.
// The service parses its command line with it; `moesplit up` registers the
// same table (less the flags it sets itself) to accept every dense-service
// flag and pass on those given (FlagParser::GivenArgs); `moesplit plan`
// takes its defaults from DenseServiceFlags, so the plan it prints is the one
// the service runs with the same flags.
//
// The struct holds the values as parsed (strings for sizes and "auto|off|N"
// values); the service turns them into its options after parsing. Every check
// that needs no model runs while parsing, so a bad value is reported before
// anything is loaded.
//
// Thread-safe: plain functions and data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/plan/serving_defaults.h"
#include "services/cli/flags.h"
#include "services/dense/volatile_system.h"

namespace moesplit::cli {

// The member initialisers are the service's defaults.
struct DenseServiceFlags {
  std::string model;
  std::string experts;  // comma-separated; --experts may repeat; "" = in-process
  std::string grpc = "127.0.0.1:50051";
  std::string metrics, http;       // "" = off
  std::string chat_template_file;  // "" = the model's template
  int64_t parallel = defaults::kParallel;  // sequences at once (one KV cache each)
  int64_t max_queue = defaults::kMaxQueue;
  int64_t responses_store = defaults::kResponsesStored;
  int64_t responses_ttl = defaults::kResponsesTtlSeconds;
  int64_t step_tokens = defaults::kStepTokens;
  int64_t threads = 0;  // 0 = AvailableCpuCount()
  int64_t ctx = defaults::kContext;  // capped at the model's training context
  int64_t expert_timeout_ms = 10000;
  int64_t connect_timeout_ms = 60000;
  std::string backend = "auto";         // auto | cpu | cuda
  std::string gpu_memory;               // "" = the device's free memory
  std::string kv_type{defaults::kKvType};  // f16 | q8_0 | q4_0
  std::string expert_cache = "auto";    // auto | off | N slots
  std::string prefill_stream = "auto";  // auto | off | N tokens
  bool pin_experts = false;
  // Automatic prefix caching (docs/prefix-cache.md): on | off, the
  // primary tier's budget ("" = what the sequence slots hold at the full
  // context) and the host-RAM tier's ("0" = none).
  std::string prefix_cache = "on";
  std::string cache_device = "0";
  std::string cache_memory;
  std::string cache_ram = "0";
  // The HTTP front end's limits (services/dense/http_server.h).
  int64_t http_header_timeout_ms = defaults::kHttpHeaderTimeoutMs;
  int64_t http_body_timeout_ms = defaults::kHttpBodyTimeoutMs;
  int64_t http_idle_timeout_ms = defaults::kHttpIdleTimeoutMs;
  int64_t http_write_timeout_ms = defaults::kHttpWriteTimeoutMs;
  int64_t http_sse_heartbeat_ms = defaults::kHttpSseHeartbeatMs;  // 0: off
  int64_t http_max_requests_per_connection = defaults::kHttpMaxRequestsPerConnection;
  int64_t http_max_connections = defaults::kHttpMaxConnections;
  std::string max_body_bytes = "4MiB";  // defaults::kHttpMaxBodyBytes (service_flags_test)
  int64_t http_max_header_bytes = defaults::kHttpMaxHeaderBytes;
  int64_t http_max_uri_bytes = defaults::kHttpMaxUriBytes;
  // Security (README "Security"; everything off by default). API keys come
  // from this file and/or $MOESPLIT_API_KEYS (common/auth/api_keys.h).
  std::string api_key_file;
  // cert + key: the HTTP and gRPC APIs serve TLS, and the certificate is the
  // client certificate towards grpc:// workers. ca: grpc:// workers are
  // reached over TLS, their certificates verified against it; server_name
  // overrides the name checked in them.
  std::string tls_cert, tls_key, tls_ca, tls_server_name;
  // Operations (docs/operations.md).
  int64_t drain_timeout_ms = 30000;  // SIGTERM: in-flight requests may finish this long
  std::string log_format = "text";   // text | json
  std::string served_model_name;     // comma-separated aliases; "" = the model's name
  std::string cors_origin;           // comma-separated origins or "*"; "" = no CORS
  // Left out of system prompts (services/dense/volatile_system.h); "" = nothing.
  std::string volatile_system_pattern = dense::kDefaultVolatileSystemPattern;
};

// Registers the flags, bound to `f`, on `p` (all but those in `except`).
void AddDenseServiceFlags(FlagParser& p, DenseServiceFlags* f, const FlagNames& except = {});

inline constexpr absl::string_view kDenseSynopsis =
    "moesplit-dense --model M [--experts shm://NAME|grpc://HOST:PORT[,...]] "
    "[--grpc HOST:PORT] [--http HOST:PORT] [flags]";

// The service's command line (argv without the program name): see
// ParseCommandLine (flags.h); --version prints VersionLine("moesplit-dense").
// Also checks the combinations CheckDenseServiceFlags checks.
absl::StatusOr<ParsedCommandLine> ParseDenseServiceFlags(const std::vector<std::string>& args,
                                                         DenseServiceFlags* f);

// The checks across flags (--tls-cert and --tls-key together;
// --tls-server-name needs --tls-ca): InvalidArgument naming them. `moesplit
// up` runs them too.
absl::Status CheckDenseServiceFlags(const DenseServiceFlags& f);

// "auto" -> -1, "off" -> 0, a positive number -> itself; InvalidArgument
// otherwise (--expert-cache, --prefill-stream).
absl::StatusOr<int64_t> ParseAutoOffOrCount(absl::string_view value);

}  // namespace moesplit::cli
