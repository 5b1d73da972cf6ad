// moesplit-expert-worker's flag table: names, defaults, help and checks,
// defined once. The worker parses its command line with it; `moesplit up`
// (and the commands that start workers) register the same table, less the
// flags they set themselves, and pass on those given (dense_flags.h has the
// dense service's).
//
// Every check that needs no model runs while parsing (the shard syntax, NUMA
// policy, shm name, addresses, ranges), so a bad value is reported before
// the shard is loaded.
//
// Thread-safe: plain functions and data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "services/cli/flags.h"

namespace moesplit::cli {

// The member initialisers are the worker's defaults.
struct ExpertWorkerFlags {
  std::string model;
  std::string shard;                    // "" = every layer and expert
  std::string listen_shm, listen_grpc;  // at least one
  std::string metrics;                  // "" = off
  std::string worker_id;                // "" = the shm name, else the gRPC address
  std::string numa = "auto";            // auto | off | NODE
  std::string expert_memory = "auto";   // auto | shared | private
  std::string expert_ram = "auto";      // auto | SIZE (plan/byte_size.h)
  int64_t io_threads = 16;              // the RAM tier's concurrent reads
  int64_t threads = 0;                  // 0 = AvailableCpuCount()
  int64_t max_tokens = 512;
  int64_t idle_timeout_s = 600;
  // The gRPC listener: cert + key serve TLS; + ca requires a client
  // certificate that chains to it (mutual TLS). "" = off.
  std::string tls_cert, tls_key, tls_ca;
};

// --expert-ram's value in bytes: 0 for "auto"; InvalidArgument otherwise.
absl::StatusOr<uint64_t> ParseExpertRam(const std::string& value);

// Registers the flags, bound to `f`, on `p` (all but those in `except`).
void AddExpertWorkerFlags(FlagParser& p, ExpertWorkerFlags* f, const FlagNames& except = {});

inline constexpr absl::string_view kWorkerSynopsis =
    "moesplit-expert-worker --model M (--listen-shm NAME | --listen-grpc HOST:PORT) "
    "[--shard layers=A-B,experts=C-D] [flags]";

// The worker's command line (argv without the program name): see
// ParseCommandLine (flags.h); also requires --listen-shm and/or
// --listen-grpc, and --tls-cert and --tls-key together (--tls-ca needs them;
// all three need --listen-grpc). --version prints VersionLine("moesplit-expert-worker").
absl::StatusOr<ParsedCommandLine> ParseExpertWorkerFlags(const std::vector<std::string>& args,
                                                         ExpertWorkerFlags* f);

}  // namespace moesplit::cli
