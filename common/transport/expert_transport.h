// Transports between the dense service and expert-workers.
//
// The dense side holds one ExpertClient per worker connection. A client is an
// ExpertBackend (ComputeInto = Submit + Wait), so the forward pass cannot tell
// an in-process store from a worker in another process or on another host.
// All transports carry a call's fields and its partial unchanged (f32 hidden
// states pass through bit for bit), so results are bit-identical across
// them. Over shared memory the worker computes straight from the request
// slot into the response slot (the dense side's one copy each way is the
// slot's); over gRPC it computes from the received message into the one it
// sends.
//
// The worker side serves an ExpertBackend (its ExpertStore's compute) behind
// an ExpertServer: shared memory (ShmExpertServer) or gRPC (GrpcExpertServer).
//
// Errors: a worker that is gone, does not answer within the client's timeout,
// or serves another model gives UNAVAILABLE / FAILED_PRECONDITION naming the
// worker; a broken connection is re-established on a later call (with
// backoff), so the dense service serves again once the worker is back.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/auth/tls.h"
#include "common/model/expert.h"

namespace moesplit::transport {

struct NumaNodeUse {
  int node = 0;
  uint64_t resident_bytes = 0;
  int threads = 0;
};

// What a worker says about itself (ExpertWorker.Describe).
struct WorkerDescription {
  std::string model_identity;  // GgufFile::Identity()
  std::string model_name;
  std::string architecture;
  int n_layer = 0;
  int n_expert = 0;
  int d = 0;  // the hidden width of its expert calls (the model's n_embd; LatentMoE: the latent)
  int n_ff = 0;
  int layer_begin = 0, layer_end = 0;    // owned layers [begin, end)
  int expert_begin = 0, expert_end = 0;  // owned expert ids [begin, end)
  std::vector<std::string> formats;
  std::vector<NumaNodeUse> numa_nodes;
  int threads = 0;
  uint64_t resident_bytes = 0;
  std::string worker_id;
  int max_tokens = 0;  // largest n_tokens one call may carry
  // The expert FFN it computes (model::ExpertFfnName), e.g. "swiglu".
  std::string expert_ffn = "swiglu";

  bool Owns(int layer, int expert) const {
    return layer >= layer_begin && layer < layer_end && expert >= expert_begin &&
           expert < expert_end;
  }
};

struct ClientOptions {
  std::string model_identity;  // the dense side's model; refused on mismatch
  std::string expert_ffn;      // the expert math the model needs; "" accepts any
  std::chrono::milliseconds timeout{10000};  // per call (--expert-timeout)
  std::chrono::milliseconds backoff_min{100};
  std::chrono::milliseconds backoff_max{5000};
  int max_tokens = 512;  // largest call this client will send
  // grpc:// only (shm:// is local and checks owner and mode instead): with
  // tls.ca the channel is TLS, the worker's certificate verified against it,
  // and tls.cert/tls.key are presented as the client certificate (auth/tls.h).
  auth::TlsPem tls = {};
};

// Byte and call counters of one client, for metrics.
struct TransportCounters {
  uint64_t calls = 0;
  uint64_t failures = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
};

// Counters a client updates on its calling thread and metrics read from
// another: relaxed atomics.
struct AtomicTransportCounters {
  std::atomic<uint64_t> calls{0}, failures{0}, bytes_sent{0}, bytes_received{0};
  TransportCounters Snapshot() const {
    return {calls.load(std::memory_order_relaxed), failures.load(std::memory_order_relaxed),
            bytes_sent.load(std::memory_order_relaxed),
            bytes_received.load(std::memory_order_relaxed)};
  }
};

// Backoff between a client's connection attempts, and its health as metrics
// see it. Thread-compatible, but healthy() may be read from any thread.
class ReconnectBackoff {
 public:
  explicit ReconnectBackoff(const ClientOptions& options)
      : min_(options.backoff_min), max_(options.backoff_max), backoff_(min_) {}
  // OkStatus when a connection may be attempted now; otherwise the last
  // failure with the time left (UNAVAILABLE).
  absl::Status MayAttempt() const;
  void Succeeded();
  // Records a failure (unhealthy, next attempt after the doubled backoff);
  // returns it.
  absl::Status Failed(absl::Status status);
  bool healthy() const { return healthy_.load(); }
  // A probe (ExpertClient::Probe) found the worker up: the next attempt may
  // run at once, without waiting out the backoff. Thread-safe.
  void PeerSeen() { peer_seen_ = true; }

 private:
  const std::chrono::milliseconds min_, max_;
  std::chrono::milliseconds backoff_;
  std::chrono::steady_clock::time_point next_attempt_{};
  absl::Status last_error_;
  std::atomic<bool> healthy_{false};
  std::atomic<bool> peer_seen_{false};
};

// One dense->worker connection. Thread-compatible: one caller at a time
// (the dense service serialises per connection).
class ExpertClient : public model::ExpertBackend {
 public:
  // Sends a call (copied out before Submit returns); the result is collected
  // by Wait(ticket). At most `kMaxInFlight` calls may be outstanding.
  virtual absl::StatusOr<uint64_t> Submit(const model::ExpertCallView& call) = 0;
  // The partial of the ticket's call into partial[0 .. n) (n = its n_tokens
  // x d; a response of another size is an Internal error); *worker_ns as
  // ExpertResult's. Tickets are collected in submission order.
  virtual absl::Status Wait(uint64_t ticket, float* partial, size_t n, uint64_t* worker_ns) = 0;
  // The worker's description (connects if needed).
  virtual absl::StatusOr<WorkerDescription> Describe() = 0;
  // "shm://NAME" or "grpc://HOST:PORT".
  virtual const std::string& address() const = 0;
  // Whether the last call or connection attempt succeeded (safe to read from
  // any thread, as are the counters).
  virtual bool healthy() const = 0;
  virtual TransportCounters counters() const = 0;
  // Checks that the worker is up and serves this model, without touching
  // the connection calls use: thread-safe, may run concurrently with
  // Submit/Wait on another thread, blocks at most about a second. OK, or
  // UNAVAILABLE / FAILED_PRECONDITION naming the worker and the reason
  // (readiness: worker_liveness.h). Success lets the next call reconnect at
  // once instead of waiting out its backoff (ReconnectBackoff::PeerSeen).
  virtual absl::Status Probe() = 0;

  absl::Status ComputeInto(const model::ExpertCallView& call, float* partial,
                           uint64_t* worker_ns) override;

  static constexpr int kMaxInFlight = 4;
};

// A serving endpoint of an expert-worker.
class ExpertServer {
 public:
  virtual ~ExpertServer() = default;
  virtual const std::string& address() const = 0;
  // Stops accepting, ends connections, joins threads. Idempotent.
  virtual void Shutdown() = 0;
};

// OkStatus when `call` carries at most `max_tokens` tokens (the worker's
// advertised WorkerDescription::max_tokens; <= 0: no limit); otherwise
// InvalidArgument naming both numbers. Servers check every call with it
// before computing anything.
absl::Status CheckCallTokens(const model::ExpertCallView& call, int max_tokens);

// Opens a client for "shm://NAME" or "grpc://HOST:PORT". Connection happens
// lazily (first Describe/Submit). InvalidArgument for another scheme.
absl::StatusOr<std::unique_ptr<ExpertClient>> OpenExpertClient(
    const std::string& address, const ClientOptions& options);

}  // namespace moesplit::transport

namespace moesplit::transport {

// Told about every call a server answers (metrics). Must be thread-safe:
// connections call it concurrently.
class CallObserver {
 public:
  virtual ~CallObserver() = default;
  virtual void OnCall(const char* transport, const model::ExpertCallView& call,
                      uint64_t bytes_in, uint64_t bytes_out, double seconds,
                      const absl::Status& status) = 0;
};

}  // namespace moesplit::transport
