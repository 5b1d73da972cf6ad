// Shared-memory transport (one host): see internal/shm_layout.h for the wire
// layout. The worker publishes a control segment NAME; each client creates
// a connection segment with request/response rings, hands its name to the
// worker through a control slot, and unlinks it once mapped. Calls move by
// memcpy into preallocated ring slots: no allocation per call. Waiting
// spins briefly, then sleeps on a shared futex.
//
// Liveness: the worker stamps a heartbeat (CLOCK_MONOTONIC) every 100 ms; a
// client waiting for a result fails with UNAVAILABLE when the heartbeat goes
// stale for 1 s or its call timeout passes, and reconnects on a later call.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/transport/expert_transport.h"

namespace moesplit::transport {

struct ShmServerOptions {
  std::string name;  // [A-Za-z0-9_.-]{1,64}
  // A connection whose client has not called for this long is closed (the
  // client reconnects transparently).
  std::chrono::seconds idle_timeout{600};
  CallObserver* observer = nullptr;  // optional, not owned
};

// Thread-safe. Owns the control segment (removed on Shutdown) and one thread
// per connection plus an accept/heartbeat thread.
class ShmExpertServer final : public ExpertServer {
 public:
  // InvalidArgument for a bad name; Internal if the segment cannot be made.
  // A stale segment of the same name (a dead worker's) is replaced.
  static absl::StatusOr<std::unique_ptr<ShmExpertServer>> Start(
      ShmServerOptions options, const WorkerDescription& description,
      model::ExpertBackend* backend);
  ~ShmExpertServer() override;

  const std::string& address() const override { return address_; }
  void Shutdown() override;
  int connections() const { return live_connections_.load(); }

 private:
  struct Connection;
  ShmExpertServer() = default;
  void AcceptLoop();
  void AcceptSlot(int slot);
  void Serve(Connection* conn);

  std::string name_;
  std::string address_;
  ShmServerOptions options_;
  model::ExpertBackend* backend_ = nullptr;
  std::string identity_;
  int max_tokens_ = 0;
  struct Mapping;
  std::unique_ptr<Mapping> control_;
  std::thread accept_thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int> live_connections_{0};
  absl::Mutex mu_;
  std::vector<std::unique_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
};

std::unique_ptr<ExpertClient> NewShmExpertClient(const std::string& name,
                                                 const ClientOptions& options);

// True for a valid shm transport name.
bool ValidShmName(const std::string& name);

}  // namespace moesplit::transport
