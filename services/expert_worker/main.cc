// moesplit-expert-worker: holds a shard of a model's routed experts in pinned
// RAM and computes expert calls for dense services, over shared memory
// (--listen-shm NAME) and/or gRPC (--listen-grpc HOST:PORT).
//
// Prints "moesplit-expert-worker: ready ..." on stderr once it serves;
// SIGINT/SIGTERM stop it cleanly (segments removed). Bad flags: one line on
// stderr, exit status 2. --tls-cert/--tls-key serve the gRPC listener over TLS,
// --tls-ca also requires clients' certificates (mutual TLS); "TLS: off|on|mutual"
// is logged at start.
//
// With --listen-shm NAME it first takes NAME's owner lock (shm_segments.h):
// held by a live worker, it exits (status 1) before touching anything;
// otherwise it removes the segments a killed worker of that name left
// ("removed N stale segments (X GB) of shm://NAME" on stderr).
#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/auth/tls.h"
#include "common/base/status.h"
#include "common/telemetry/metrics.h"
#include "common/transport/grpc_transport.h"
#include "common/transport/shm_segments.h"
#include "common/transport/shm_transport.h"
#include "services/cli/worker_flags.h"
#include "services/expert_worker/expert_shard.h"

namespace moesplit::worker {
namespace {

int Run(int argc, char** argv) {
  // SIGINT/SIGTERM are taken by sigwait() below: block them before any thread
  // starts, so every thread inherits the mask and none runs a handler.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  // Every flag is checked here, before the shard is loaded (worker_flags.h).
  cli::ExpertWorkerFlags f;
  ShardOptions opt;
  auto parsed = cli::ParseExpertWorkerFlags(std::vector<std::string>(argv + 1, argv + argc), &f);
  if (parsed.ok() && *parsed == cli::ParsedCommandLine::kExit) return 0;
  absl::Status s = parsed.status();
  absl::StatusOr<ShardSpec> spec = s.ok() ? ParseShardSpec(f.shard) : absl::StatusOr<ShardSpec>(s);
  absl::StatusOr<NumaPolicy> numa = ParseNumaPolicy(f.numa);
  absl::StatusOr<ExpertMemory> memory = ParseExpertMemory(f.expert_memory);
  if (!spec.ok() || !numa.ok() || !memory.ok()) {
    const absl::Status& bad = !spec.ok() ? spec.status() : !numa.ok() ? numa.status() : memory.status();
    std::fprintf(stderr, "moesplit-expert-worker: %s\n", std::string(bad.message()).c_str());
    return 2;
  }
  absl::StatusOr<auth::TlsPem> tls = auth::ReadTlsFiles(f.tls_cert, f.tls_key, f.tls_ca);
  if (!tls.ok()) {
    std::fprintf(stderr, "moesplit-expert-worker: %s\n",
                 std::string(tls.status().message()).c_str());
    return 2;
  }
  opt.model_path = f.model;
  opt.shard = *spec;
  opt.threads = static_cast<int>(f.threads);
  opt.numa = *numa;
  opt.shm_prefix = f.listen_shm;
  opt.expert_memory = *memory;
  opt.max_tokens = static_cast<int>(f.max_tokens);
  opt.expert_ram = *cli::ParseExpertRam(f.expert_ram);  // checked while parsing
  opt.io_threads = static_cast<int>(f.io_threads);
  opt.worker_id = f.worker_id.empty() ? (f.listen_shm.empty() ? f.listen_grpc : f.listen_shm)
                                      : f.worker_id;
  // Before the shard is loaded: the arena's segments carry NAME too.
  std::unique_ptr<transport::ShmOwnerLock> owner;
  if (!f.listen_shm.empty()) {
    auto lock = transport::ShmOwnerLock::Acquire(f.listen_shm);
    if (!lock.ok()) {
      std::fprintf(stderr, "moesplit-expert-worker: %s\n",
                   std::string(lock.status().message()).c_str());
      return 1;
    }
    owner = std::move(*lock);
    const transport::RemovedSegments removed = transport::RemoveStaleSegments(*owner);
    if (removed.count > 0) {
      std::fprintf(stderr, "moesplit-expert-worker: %s\n",
                   transport::DescribeRemoved(f.listen_shm, removed).c_str());
    }
  }
  auto shard = ExpertShard::Load(opt);
  if (!shard.ok()) {
    std::fprintf(stderr, "moesplit-expert-worker: %s\n",
                 std::string(shard.status().message()).c_str());
    return shard.status().code() == absl::StatusCode::kInvalidArgument ||
                   shard.status().code() == absl::StatusCode::kNotFound
               ? 2
               : 1;
  }
  const transport::WorkerDescription& d = (*shard)->description();
  if (!(*shard)->lock_warning().empty()) {
    std::fprintf(stderr, "moesplit-expert-worker: warning: %s\n",
                 (*shard)->lock_warning().c_str());
  }
  std::unique_ptr<telemetry::MetricsServer> metrics;
  std::unique_ptr<telemetry::WorkerMetrics> worker_metrics;
  std::shared_ptr<telemetry::ExpertTierMetrics> tier_metrics;
  if (!f.metrics.empty()) {
    auto m = telemetry::MetricsServer::Start(f.metrics);
    if (!m.ok()) {
      std::fprintf(stderr, "moesplit-expert-worker: %s\n", std::string(m.status().message()).c_str());
      return 1;
    }
    metrics = std::move(*m);
    telemetry::ExportBuildInfo(metrics->registry(), "moesplit-expert-worker");
    worker_metrics = std::make_unique<telemetry::WorkerMetrics>(metrics->registry(), d.n_layer,
                                                                d.n_expert);
    metrics->Register(worker_metrics->heat_map());
    for (const auto& n : d.numa_nodes) worker_metrics->SetResidentBytes(n.node, n.resident_bytes);
    {  // zeros (no slots) for a shard that fits: the dashboards' series exist on every worker
      const ExpertShard* sh = shard->get();
      tier_metrics = std::make_shared<telemetry::ExpertTierMetrics>([sh] {
        const TierStats t = sh->tier_stats();
        telemetry::ExpertTierSnapshot s;
        s.slots = t.n_slots;
        s.resident = t.resident;
        s.hits = t.hits;
        s.misses = t.misses;
        s.bytes_read = t.bytes_read;
        s.read_errors = t.read_errors;
        s.reads = t.reads;
        s.read_seconds = t.read_seconds;
        s.prefetches = t.prefetches;
        s.prefetch_used = t.prefetch_used;
        s.prefetch_unused = t.prefetch_unused;
        s.read_bounds.assign(kTierReadBuckets.begin(), kTierReadBuckets.end());
        s.read_buckets.assign(t.read_buckets.begin(), t.read_buckets.end());
        return s;
      });
      metrics->Register(tier_metrics);  // a weak reference: tier_metrics keeps it
    }
    worker_metrics->SetThreads(d.threads);
  }
  std::vector<std::unique_ptr<transport::ExpertServer>> servers;
  if (!f.listen_shm.empty()) {
    transport::ShmServerOptions so;
    so.name = f.listen_shm;
    so.idle_timeout = std::chrono::seconds(f.idle_timeout_s);
    so.observer = worker_metrics.get();
    auto srv = transport::ShmExpertServer::Start(so, d, shard->get());
    if (!srv.ok()) {
      std::fprintf(stderr, "moesplit-expert-worker: %s\n", std::string(srv.status().message()).c_str());
      return 1;
    }
    servers.push_back(std::move(*srv));
  }
  if (!f.listen_grpc.empty()) {
    transport::GrpcServerOptions go;
    go.listen = f.listen_grpc;
    go.observer = worker_metrics.get();
    go.tls = *tls;
    auto srv = transport::GrpcExpertServer::Start(go, d, shard->get());
    if (!srv.ok()) {
      std::fprintf(stderr, "moesplit-expert-worker: %s\n", std::string(srv.status().message()).c_str());
      return 1;
    }
    servers.push_back(std::move(*srv));
  }
  std::fprintf(stderr, "moesplit-expert-worker: TLS: %s%s\n", auth::ServerTlsMode(*tls),
               tls->ca.empty() ? ""
                               : absl::StrCat(" (clients need a certificate signed by ", f.tls_ca,
                                              ")").c_str());
  std::vector<std::string> addrs;
  for (const auto& srv : servers) addrs.push_back(srv->address());
  if ((*shard)->tiered()) {
    const TierStats t = (*shard)->tier_stats();
    std::fprintf(stderr,
                 "moesplit-expert-worker: ready on %s: %s, layers %d-%d, experts %d-%d, %.2f GB "
                 "of experts, %.2f GB in RAM (%d slots of %.1f MB), the rest read from the file "
                 "(%d I/O threads), %d threads, loaded in %.1f s%s\n",
                 absl::StrJoin(addrs, " ").c_str(), d.model_name.c_str(), d.layer_begin,
                 d.layer_end - 1, d.expert_begin, d.expert_end - 1,
                 (*shard)->shard_bytes() / 1e9, d.resident_bytes / 1e9, t.n_slots,
                 t.slot_bytes / 1e6, opt.io_threads, d.threads, (*shard)->load_seconds(),
                 metrics ? absl::StrCat(", metrics on port ", metrics->port()).c_str() : "");
  } else {
    std::fprintf(stderr,
                 "moesplit-expert-worker: ready on %s: %s, layers %d-%d, experts %d-%d, %.2f GB in %zu "
                 "NUMA region(s) of %s memory (%.2f GB on huge pages), %d threads, loaded in %.1f s%s\n",
                 absl::StrJoin(addrs, " ").c_str(), d.model_name.c_str(), d.layer_begin,
                 d.layer_end - 1, d.expert_begin, d.expert_end - 1, d.resident_bytes / 1e9,
                 d.numa_nodes.size(),
                 (*shard)->arena().regions()[0].shm_name.empty() ? "private" : "shared",
                 (*shard)->arena().HugePageBytes() / 1e9, d.threads, (*shard)->load_seconds(),
                 metrics ? absl::StrCat(", metrics on port ", metrics->port()).c_str() : "");
  }
  int sig = 0;
  sigwait(&stop_signals, &sig);
  for (auto& srv : servers) srv->Shutdown();
  std::fprintf(stderr, "moesplit-expert-worker: stopped\n");
  return 0;
}

}  // namespace
}  // namespace moesplit::worker

int main(int argc, char** argv) { return moesplit::worker::Run(argc, argv); }
