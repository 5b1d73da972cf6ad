// LocalWorkers: expert-workers started by a moesplit command on this host
// (`moesplit up`, `logits/generate --experts shm|grpc`), `replicas` per layer
// shard (started shard by shard: shard 0's replicas, then shard 1's, ...),
// and stopped (SIGTERM, then waited for, so their segments are removed) when
// the object goes away.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/base/subprocess.h"

namespace moesplit::cli {

struct LocalWorkerOptions {
  std::string model;
  int n_workers = 1;              // layer shards
  int replicas = 1;              // workers per shard (1..16)
  int n_layer = 0;               // the model's, for the layer shards
  std::string transport = "shm";  // "shm" or "grpc" (on 127.0.0.1, a free port)
  std::string name_prefix;       // shm names: <prefix>-w<i>, replicas r > 0 <prefix>-w<i>r<r>
  int threads = 0;               // per worker; 0 = all CPUs
  // Non-empty: worker k (shard-major: shard i's replica r is k = i x replicas
  // + r) serves /metrics on port metrics_port+k.
  std::string metrics_host;
  int metrics_port = 0;
  // Passed to every worker after the flags above ("--numa=off", ...).
  std::vector<std::string> extra_args;
  // The workers' stderr is copied to ours, after a line with each one's
  // command line ("moesplit: starting moesplit-expert-worker ...").
  bool echo_stderr = false;
  std::chrono::seconds ready_timeout{600};
};

class LocalWorkers {
 public:
  // Starts the workers and waits until each is ready. Over shm, first removes
  // the segments killed workers of the same names left (shm_segments.h; one
  // "moesplit: removed N stale segments ..." line on stderr per name).
  // Errors: InvalidArgument for bad options, AlreadyExists when a live worker
  // serves one of the names, Unavailable with the worker's own message when
  // one exits.
  static absl::StatusOr<std::unique_ptr<LocalWorkers>> Start(const LocalWorkerOptions& options);
  ~LocalWorkers();

  // shm://NAME or grpc://127.0.0.1:PORT, one per worker (shard-major).
  const std::vector<std::string>& addresses() const { return addresses_; }
  // One entry per shard, its replicas' addresses joined by '|' (what
  // moesplit-dense --experts takes).
  std::vector<std::string> ShardAddresses() const;
  std::vector<std::unique_ptr<Subprocess>>& processes() { return processes_; }
  // SIGTERM to every worker and wait for them (idempotent).
  void Stop();

 private:
  LocalWorkers() = default;
  std::vector<std::unique_ptr<Subprocess>> processes_;
  std::vector<std::string> addresses_;
  int replicas_ = 1;
};

}  // namespace moesplit::cli
