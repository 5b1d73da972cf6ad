#include "services/cli/local_workers.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status.h"
#include "common/transport/shm_segments.h"
#include "services/expert_worker/shard_spec.h"

namespace moesplit::cli {

absl::StatusOr<std::unique_ptr<LocalWorkers>> LocalWorkers::Start(const LocalWorkerOptions& o) {
  if (o.n_workers < 1 || o.n_workers > 64 || o.n_workers > o.n_layer) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the number of workers must be in 1..", std::min(64, o.n_layer), ", got ", o.n_workers));
  }
  if (o.replicas < 1 || o.replicas > 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("the number of replicas per shard must be in 1..16, got ", o.replicas));
  }
  if (o.transport != "shm" && o.transport != "grpc") {
    return absl::InvalidArgumentError(
        absl::StrCat("local workers serve shm or grpc, not '", o.transport, "'"));
  }
  std::unique_ptr<LocalWorkers> w(new LocalWorkers());
  w->replicas_ = o.replicas;
  const std::string prefix =
      o.name_prefix.empty() ? absl::StrCat("moesplit-", getpid()) : o.name_prefix;
  auto name_of = [&](int k) {
    const int shard = k / o.replicas, replica = k % o.replicas;
    return replica == 0 ? absl::StrCat(prefix, "-w", shard)
                        : absl::StrCat(prefix, "-w", shard, "r", replica);
  };
  const int n_processes = o.n_workers * o.replicas;
  const std::string binary = SelfDirectory() + "/moesplit-expert-worker";
  if (o.transport == "shm") {
    // Segments a killed worker of one of these names left go first; a name a
    // live worker serves is an error here rather than in the new worker.
    for (int k = 0; k < n_processes; ++k) {
      const std::string name = name_of(k);
      ASSIGN_OR_RETURN(std::unique_ptr<transport::ShmOwnerLock> lock,
                       transport::ShmOwnerLock::Acquire(name));
      const transport::RemovedSegments removed = transport::RemoveStaleSegments(*lock);
      if (removed.count > 0) {
        std::fprintf(stderr, "moesplit: %s\n", transport::DescribeRemoved(name, removed).c_str());
      }
    }
  }
  for (int k = 0; k < n_processes; ++k) {
    const int i = k / o.replicas;
    std::vector<std::string> args = {"--model", o.model, "--shard",
                                     worker::LayerShardText(i, o.n_workers, o.n_layer)};
    const std::string name = name_of(k);
    if (o.transport == "shm") {
      args.insert(args.end(), {"--listen-shm", name});
    } else {
      args.insert(args.end(), {"--listen-grpc", "127.0.0.1:0", "--worker-id", name});
    }
    if (o.threads > 0) args.insert(args.end(), {"--threads", std::to_string(o.threads)});
    if (!o.metrics_host.empty()) {
      args.insert(args.end(), {"--metrics", absl::StrCat(o.metrics_host, ":", o.metrics_port + k)});
    }
    args.insert(args.end(), o.extra_args.begin(), o.extra_args.end());
    if (o.echo_stderr) {
      std::fprintf(stderr, "moesplit: starting moesplit-expert-worker %s\n",
                   absl::StrJoin(args, " ").c_str());
    }
    w->processes_.push_back(std::make_unique<Subprocess>(binary, args, o.echo_stderr));
  }
  for (auto& p : w->processes_) {
    RETURN_IF_ERROR(p->WaitFor("ready on ", o.ready_timeout));
    // "ready on <address> <address>...: ..." — take the first address.
    const std::string& err = p->stderr_text();
    const size_t at = err.find("ready on ") + 9;
    std::string addr = err.substr(at, err.find_first_of(" \n", at) - at);
    if (!addr.empty() && addr.back() == ':') addr.pop_back();
    w->addresses_.push_back(addr);
  }
  return w;
}

std::vector<std::string> LocalWorkers::ShardAddresses() const {
  std::vector<std::string> out;
  for (size_t k = 0; k < addresses_.size(); ++k) {
    if (k % replicas_ == 0) {
      out.push_back(addresses_[k]);
    } else {
      absl::StrAppend(&out.back(), "|", addresses_[k]);
    }
  }
  return out;
}

void LocalWorkers::Stop() {
  for (auto& p : processes_) p->Signal(SIGTERM);
  for (auto& p : processes_) {
    if (p->Wait(std::chrono::seconds(10)) < 0) p->Kill(SIGKILL);
  }
  processes_.clear();
}

LocalWorkers::~LocalWorkers() { Stop(); }

}  // namespace moesplit::cli
