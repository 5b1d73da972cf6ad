// The dense service's defaults, defined once. moesplit-dense's flags
// (services/cli/dense_flags.h), the engine's and runner's options, the HTTP
// front end's limits (services/dense/http_server.h), `moesplit plan` and
// `moesplit up` all start from these, so the plan `moesplit plan` prints
// is the one the service runs with the same flags.
//
// Thread-safe: constants only.
#pragma once

#include <cstdint>
#include <string_view>

namespace moesplit::defaults {

inline constexpr int64_t kContext = 4096;     // --ctx: positions per sequence
inline constexpr int64_t kParallel = 4;       // --parallel: sequences at once
inline constexpr int64_t kMaxQueue = 64;      // --max-queue: requests waiting for a slot
inline constexpr int64_t kStepTokens = 512;   // --step-tokens: tokens per forward step
// --responses-store / --responses-ttl: Responses API responses kept in memory
// (for previous_response_id and GET), and for how long (seconds).
inline constexpr int64_t kResponsesStored = 1000;
inline constexpr int64_t kResponsesTtlSeconds = 3600;
inline constexpr std::string_view kKvType = "f16";  // --kv-type: the GPU KV cache's elements

// The HTTP front end's limits.
inline constexpr int64_t kHttpHeaderTimeoutMs = 10000;
inline constexpr int64_t kHttpBodyTimeoutMs = 30000;
inline constexpr int64_t kHttpIdleTimeoutMs = 30000;
inline constexpr int64_t kHttpWriteTimeoutMs = 30000;
inline constexpr int64_t kHttpMaxRequestsPerConnection = 1000;
inline constexpr int64_t kHttpMaxConnections = 512;
inline constexpr uint64_t kHttpMaxBodyBytes = uint64_t{4} << 20;  // --max-body-bytes 4MiB
inline constexpr int64_t kHttpMaxHeaderBytes = 16384;
inline constexpr int64_t kHttpMaxUriBytes = 8192;
// --http-sse-heartbeat-ms: an SSE comment line (`: ping`) on a stream silent this
// long (queued, prefilling), so proxies and clients with idle timeouts keep it; 0: off.
inline constexpr int64_t kHttpSseHeartbeatMs = 10000;

}  // namespace moesplit::defaults
