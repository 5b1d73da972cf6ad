// `moesplit up`: the two services on this host. Starts N expert-workers (the
// model's layers split evenly), R replicas of each (--replicas; started shard
// by shard), over shared memory or gRPC on 127.0.0.1 (--transport), and the
// dense service with --experts naming each shard's replicas (A|B,C|D), waits until each says it is ready, then
// either serves until Ctrl-C (SIGINT/SIGTERM stop every child) or, with
// --prompt, streams one completion through the dense service's gRPC API and
// stops everything.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/auth/api_keys.h"
#include "common/auth/tls.h"
#include "common/base/status.h"
#include "common/base/subprocess.h"
#include "common/gguf/gguf.h"
#include "common/model/arch.h"
#include "common/transport/shm_transport.h"
#include "services/cli/commands.h"
#include "services/cli/dense_flags.h"
#include "services/cli/worker_flags.h"
#include "services/cli/model_cache.h"
#include "services/cli/local_workers.h"
#include "services/cli/remote.h"

namespace moesplit::cli {
namespace {

using namespace std::chrono_literals;

std::atomic<bool> g_stop{false};
void OnStopSignal(int) { g_stop = true; }

struct UpFlags {
  std::string model, grpc = DenseServiceFlags{}.grpc, metrics, prompt, name, transport = "shm";
  int64_t workers = 1, replicas = 1, threads = 0, dense_threads = 0, n = 64, seed = 42;
  double temp = 0;
};

// The Usage() sections whose flags are passed on as given.
constexpr absl::string_view kDenseSection = "moesplit-dense flags (passed on to the dense service)";
constexpr absl::string_view kWorkerSection =
    "moesplit-expert-worker flags (passed on to every worker)";

// Streams one completion from the dense service; prints text to io.out.
// With API keys it sends the first; over TLS it verifies the service's
// certificate against --tls-ca, else against --tls-cert itself.
absl::Status RunPrompt(const UpFlags& f, const DenseServiceFlags& dense, const CommandIo& io) {
  CompletionRequest r;
  const char* env = std::getenv(auth::kApiKeysEnv);
  ASSIGN_OR_RETURN(const std::vector<std::string> keys,
                   auth::LoadApiKeys(dense.api_key_file, env ? env : ""));
  if (!keys.empty()) r.security.api_key = keys.front();
  if (!dense.tls_cert.empty()) {
    const std::string& root = dense.tls_ca.empty() ? dense.tls_cert : dense.tls_ca;
    ASSIGN_OR_RETURN(r.security.tls, auth::ReadTlsFiles("", "", root));
  }
  r.addr = f.grpc;
  r.prompt = f.prompt;
  r.max_tokens = f.n;
  r.temperature = f.temp;
  r.seed = f.seed;
  ASSIGN_OR_RETURN(const CompletionStats st, StreamCompletion(r, io));
  std::fprintf(io.err,
               "moesplit up: %d tokens, time to first token %.3f s, %.2f tok/s after it "
               "(%s, %lld expert shard(s) x %lld replica(s) over %s)\n",
               st.tokens, st.ttft_seconds,
               st.tokens > 1 && st.after_first_seconds > 0
                   ? (st.tokens - 1) / st.after_first_seconds
                   : 0.0,
               st.finish_reason.c_str(), static_cast<long long>(f.workers),
               static_cast<long long>(f.replicas),
               f.transport == "shm" ? "shared memory" : "gRPC");
  return absl::OkStatus();
}

}  // namespace

absl::Status RunUp(const Args& args, const CommandIo& io) {
  UpFlags f;
  DenseServiceFlags dense_flags;
  ExpertWorkerFlags worker_flags;
  FlagParser p;
  p.AddString("model|m", &f.model, "GGUF model")
      .Meta("PATH")
      .DefaultText("a generated Qwen3-30B-A3B-shaped test model");
  p.AddInt("workers", &f.workers, "expert shards to start (layers split evenly)").Range(1, 64);
  p.AddInt("replicas", &f.replicas,
           "workers per shard: calls spread over them and fail over when one dies or stalls")
      .Range(1, 16);
  p.AddString("transport", &f.transport, "how the dense service reaches the workers")
      .OneOf({"shm", "grpc"})
      .DefaultText("shm: shared memory; grpc: gRPC on 127.0.0.1, free ports");
  p.AddString("grpc", &f.grpc, "the dense service's Inference gRPC API address").HostPort();
  p.AddString("metrics", &f.metrics,
              "the dense service's /metrics address; worker k (shard-major: shard i's replica "
              "r is i x replicas + r) serves PORT+1+k on the same host")
      .HostPort()
      .DefaultText("off");
  p.AddString("prompt|p", &f.prompt, "run this prompt through the services, print, and stop")
      .Meta("TEXT")
      .DefaultText("serve until Ctrl-C");
  p.AddInt("n", &f.n, "tokens to generate for --prompt").Range(0, 1 << 24);
  p.AddDouble("temp", &f.temp, "sampling temperature for --prompt (0 = greedy)").Range(0, 2);
  p.AddInt("seed", &f.seed, "sampling seed for --prompt");
  p.AddInt("threads", &f.threads,
           "compute threads per worker; 0: every CPU the process may use (affinity mask, "
           "cgroup quota)")
      .Range(0, 1024);
  p.AddInt("dense-threads", &f.dense_threads,
           "CPU threads of the dense service (its --threads); 0: every CPU the process may use")
      .Range(0, 1024);
  p.AddString("name", &f.name, "shared-memory name prefix")
      .Check([](absl::string_view v) {
        return transport::ValidShmName(absl::StrCat(v, "-w0"))
                   ? absl::OkStatus()
                   : absl::InvalidArgumentError("use up to 60 characters of [A-Za-z0-9_.-]");
      })
      .Meta("PREFIX")
      .DefaultText("moesplit-<pid>");
  // Everything else the two services take, checked here and passed on.
  p.Section(std::string(kDenseSection));
  AddDenseServiceFlags(p, &dense_flags, {"model", "experts", "grpc", "metrics", "threads"});
  p.Section(std::string(kWorkerSection));
  // The local workers are reached over shared memory: no TLS (the dense
  // service's --tls-* are its own).
  AddExpertWorkerFlags(p, &worker_flags,
                       {"model", "shard", "listen-shm", "listen-grpc", "metrics", "threads",
                        "worker-id", "tls-cert", "tls-key", "tls-ca"});
  ASSIGN_OR_RETURN(const bool go,
                   ParseFlags(p, args,
                              "up [--model M] [--grpc H:P] [--http H:P] [--workers N] "
                              "[--replicas R] [--transport shm|grpc] [--prompt S] "
                              "[any moesplit-dense or expert-worker flag]",
                              io));
  if (!go) return absl::OkStatus();
  if (!p.positional().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("up: unexpected argument '", p.positional()[0], "'"));
  }
  RETURN_IF_ERROR(CheckDenseServiceFlags(dense_flags));
  if (f.transport == "grpc" && !dense_flags.tls_ca.empty()) {
    return absl::InvalidArgumentError(
        "--transport grpc starts plain-text workers on 127.0.0.1: --tls-ca (TLS towards the "
        "workers) cannot apply; leave it out or use --transport shm");
  }
  if (p.WasSet("prompt") && f.prompt.empty()) {
    return absl::InvalidArgumentError("--prompt is empty");
  }
  if (f.model.empty()) {
    ASSIGN_OR_RETURN(f.model, EnsureDefaultTestModel(ThreadCount(f.threads), io.err));
  }
  // Validate the model here, so a bad path is one clear error, not N.
  ASSIGN_OR_RETURN(auto file, GgufFile::Open(f.model));
  ASSIGN_OR_RETURN(const std::string arch, file->GetString("general.architecture"));
  const model::ArchDescription* desc = model::FindArch(arch);
  if (desc == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(f.model, ": unsupported architecture '",
                                                   arch, "' (supported: ",
                                                   model::SupportedArchNames(), ")"));
  }
  // The trunk's layers (block_count less any NextN blocks) are what the
  // workers split.
  ASSIGN_OR_RETURN(const model::HyperParams hp, model::ParseHyperParams(*file, *desc));
  const int64_t n_layer = hp.n_layer;
  file.reset();
  const std::string dir = SelfDirectory();
  const std::string prefix = f.name.empty() ? absl::StrCat("moesplit-", getpid()) : f.name;
  std::string metrics_host;
  int metrics_port = 0;
  if (!f.metrics.empty()) {
    const size_t colon = f.metrics.rfind(':');
    metrics_host = f.metrics.substr(0, colon);
    metrics_port = colon == std::string::npos ? 0 : std::atoi(f.metrics.c_str() + colon + 1);
  }
  std::signal(SIGINT, OnStopSignal);
  std::signal(SIGTERM, OnStopSignal);
  LocalWorkerOptions wo;
  wo.model = f.model;
  wo.n_workers = static_cast<int>(f.workers);
  wo.replicas = static_cast<int>(f.replicas);
  wo.transport = f.transport;
  wo.n_layer = static_cast<int>(n_layer);
  wo.name_prefix = prefix;
  wo.threads = static_cast<int>(f.threads);
  wo.metrics_host = metrics_host;
  wo.metrics_port = metrics_port > 0 ? metrics_port + 1 : 0;
  if (metrics_port == 0) wo.metrics_host.clear();
  wo.echo_stderr = true;
  wo.extra_args = p.GivenArgs(kWorkerSection);
  ASSIGN_OR_RETURN(std::unique_ptr<LocalWorkers> workers, LocalWorkers::Start(wo));
  std::vector<std::string> dargs = {"--model", f.model, "--grpc", f.grpc, "--experts",
                                    absl::StrJoin(workers->ShardAddresses(), ",")};
  if (!f.metrics.empty()) dargs.insert(dargs.end(), {"--metrics", f.metrics});
  if (p.WasSet("dense-threads")) {
    dargs.insert(dargs.end(), {"--threads", std::to_string(f.dense_threads)});
  }
  for (std::string& a : p.GivenArgs(kDenseSection)) dargs.push_back(std::move(a));
  std::fprintf(io.err, "moesplit up: starting moesplit-dense %s\n",
               absl::StrJoin(dargs, " ").c_str());
  Subprocess dense(dir + "/moesplit-dense", dargs, /*echo_stderr=*/true);
  RETURN_IF_ERROR(dense.WaitFor("ready", 600s));
  absl::Status result;
  if (!f.prompt.empty()) {
    result = RunPrompt(f, dense_flags, io);
  } else {
    std::fprintf(io.err, "moesplit up: serving gRPC on %s%s (Ctrl-C stops)\n", f.grpc.c_str(),
                 dense_flags.http.empty()
                     ? ""
                     : absl::StrCat(", HTTP on ", dense_flags.http).c_str());
    while (!g_stop) {
      if (dense.Wait(200ms) >= 0) {
        result = absl::InternalError("the dense service exited");
        break;
      }
    }
  }
  dense.Signal(SIGTERM);
  dense.Wait(10s);
  workers->Stop();
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  return result;
}

}  // namespace moesplit::cli
