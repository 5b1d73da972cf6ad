#include "services/cli/worker_flags.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/base/build_info.h"
#include "common/base/status.h"
#include "common/plan/byte_size.h"
#include "common/transport/shm_transport.h"
#include "services/expert_worker/numa_arena.h"
#include "services/expert_worker/shard_spec.h"

namespace moesplit::cli {
namespace {

absl::Status CheckShard(absl::string_view value) {
  return worker::ParseShardSpec(std::string(value)).status();
}

absl::Status CheckNuma(absl::string_view value) {
  return worker::ParseNumaPolicy(std::string(value)).status();
}

absl::Status CheckAutoOrByteSize(absl::string_view value) {
  return ParseExpertRam(std::string(value)).status();
}

absl::Status CheckShmName(absl::string_view value) {
  if (!transport::ValidShmName(std::string(value))) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", value, "': use 1-64 characters of [A-Za-z0-9_.-]"));
  }
  return absl::OkStatus();
}

absl::Status CheckReadable(absl::string_view path) {
  if (access(std::string(path).c_str(), R_OK) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read '", path, "': ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<uint64_t> ParseExpertRam(const std::string& value) {
  if (value == "auto") return 0;
  ASSIGN_OR_RETURN(const uint64_t bytes, plan::ParseByteSize(value));
  if (bytes == 0) return absl::InvalidArgumentError("must be auto or more than 0 bytes");
  return bytes;
}

void AddExpertWorkerFlags(FlagParser& p, ExpertWorkerFlags* f, const FlagNames& except) {
  auto want = [&](const char* name) { return !except.contains(name); };
  if (want("model")) {
    p.AddString("model", &f->model, "GGUF model file (the first part of a split model)")
        .Required()
        .Meta("PATH");
  }
  if (want("shard")) {
    p.AddString("shard", &f->shard,
                "the routed experts this worker owns: layers=A-B and/or experts=C-D")
        .Check(CheckShard)
        .Meta("SPEC")
        .DefaultText("every layer and expert");
  }
  if (want("listen-shm")) {
    p.AddString("listen-shm", &f->listen_shm,
                "serve dense services on this host over shared memory under this name")
        .Check(CheckShmName)
        .Meta("NAME")
        .DefaultText("off");
  }
  if (want("listen-grpc")) {
    p.AddString("listen-grpc", &f->listen_grpc, "serve the ExpertWorker gRPC API at this address")
        .HostPort()
        .DefaultText("off");
  }
  if (want("threads")) {
    p.AddInt("threads", &f->threads,
             "compute threads; 0: every CPU the process may use (affinity mask, cgroup quota)")
        .Range(0, 1024);
  }
  if (want("numa")) {
    p.AddString("numa", &f->numa, "NUMA placement: auto (every node), off, or one node number")
        .Check(CheckNuma)
        .Meta("auto|off|NODE");
  }
  if (want("expert-memory")) {
    p.AddString("expert-memory", &f->expert_memory,
                "with --listen-shm, experts in shared segments the dense service can map, or in "
                "private memory; auto picks shared only when the kernel gives shared memory huge "
                "pages")
        .OneOf({"auto", "shared", "private"});
  }
  if (want("expert-ram")) {
    p.AddString("expert-ram", &f->expert_ram,
                "RAM for the routed experts; a shard larger than this keeps the hottest experts "
                "in RAM and reads the rest from the model file with direct I/O (auto: the "
                "memory cgroup's headroom or MemAvailable, less an eighth)")
        .Check(CheckAutoOrByteSize)
        .Meta("auto|SIZE");
  }
  if (want("io-threads")) {
    p.AddInt("io-threads", &f->io_threads,
             "concurrent expert reads when the shard does not fit in --expert-ram")
        .Range(1, 256);
  }
  if (want("metrics")) {
    p.AddString("metrics", &f->metrics, "serve Prometheus /metrics at this address")
        .HostPort()
        .DefaultText("off");
  }
  if (want("max-tokens")) {
    p.AddInt("max-tokens", &f->max_tokens, "largest expert call accepted, in tokens")
        .Range(1, 65536);
  }
  if (want("worker-id")) {
    p.AddString("worker-id", &f->worker_id, "name reported by Describe")
        .Meta("NAME")
        .DefaultText("the shm name, else the gRPC address");
  }
  if (want("idle-timeout")) {
    p.AddInt("idle-timeout", &f->idle_timeout_s, "seconds before an idle shm connection closes")
        .Range(1, 31536000)
        .Meta("S");
  }
  if (want("tls-cert")) {
    p.AddString("tls-cert", &f->tls_cert,
                "serve --listen-grpc over TLS with this certificate chain (PEM; with --tls-key)")
        .Check(CheckReadable)
        .Meta("FILE")
        .DefaultText("off: plain text");
  }
  if (want("tls-key")) {
    p.AddString("tls-key", &f->tls_key, "the private key of --tls-cert (PEM)")
        .Check(CheckReadable)
        .Meta("FILE")
        .DefaultText("off");
  }
  if (want("tls-ca")) {
    p.AddString("tls-ca", &f->tls_ca,
                "mutual TLS: only clients with a certificate signed by this CA (PEM) may call; "
                "needs --tls-cert")
        .Check(CheckReadable)
        .Meta("FILE")
        .DefaultText("off: any client");
  }
}

absl::StatusOr<ParsedCommandLine> ParseExpertWorkerFlags(const std::vector<std::string>& args,
                                                         ExpertWorkerFlags* f) {
  FlagParser p;
  AddExpertWorkerFlags(p, f);
  p.SetVersionLine(VersionLine("moesplit-expert-worker"));
  ASSIGN_OR_RETURN(const ParsedCommandLine r, ParseCommandLine(p, args, kWorkerSynopsis));
  if (r != ParsedCommandLine::kRun) return r;
  if (!p.positional().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected argument '", p.positional()[0], "' (flags start with --)"));
  }
  if (f->listen_shm.empty() && f->listen_grpc.empty()) {
    return absl::InvalidArgumentError("give --listen-shm NAME and/or --listen-grpc HOST:PORT");
  }
  if (f->tls_cert.empty() != f->tls_key.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together: give both or neither");
  }
  if (!f->tls_ca.empty() && f->tls_cert.empty()) {
    return absl::InvalidArgumentError(
        "--tls-ca (verify clients' certificates) needs --tls-cert and --tls-key");
  }
  if (!f->tls_cert.empty() && f->listen_grpc.empty()) {
    return absl::InvalidArgumentError(
        "--tls-cert secures --listen-grpc, which is not given (shared memory needs no TLS)");
  }
  return r;
}

}  // namespace moesplit::cli
