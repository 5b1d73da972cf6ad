// The dense service's readiness publishing and its SIGTERM drain.
//
// ServingStatusPublisher turns Readiness (readiness.h) into what probes
// see: the gRPC health services "" and "moesplit.v1.Inference" (SERVING
// only while ready), "liveness" (SERVING while the process runs, draining
// included), the moesplit_ready / moesplit_draining gauges, and one log
// line at each change ("not serving: ..." / "serving again").
//
// Drain, on the first SIGTERM/SIGINT:
//   1. readiness off at once (health NOT_SERVING, /health 503), new
//      requests refused (HTTP 503 "shutting_down", gRPC UNAVAILABLE);
//      logs "draining N requests (up to T s)";
//   2. waits until no request runs, queues or is being answered over
//      HTTP, at most `timeout`; a second signal ends the wait at once;
//   3. what is still running is cancelled (its client gets UNAVAILABLE /
//      an OpenAI error with code "shutting_down"), logs "cancelled N
//      requests", else "drained".
// The caller then stops the front ends and exits 0.
//
// Thread-compatible: the main thread runs both.
#pragma once

#include <csignal>
#include <chrono>

#include <grpcpp/health_check_service_interface.h>

#include "services/dense/dense_engine.h"
#include "services/dense/http_server.h"
#include "services/dense/readiness.h"

namespace moesplit::dense {

// Whether one of the blocked signals in `set` is pending (consumes it).
bool StopRequested(const sigset_t& set);

class ServingStatusPublisher {
 public:
  // `health` may be null (no gRPC health service); the others must outlive this.
  ServingStatusPublisher(grpc::HealthCheckServiceInterface* health, ServingMetrics* metrics,
                         const Readiness* readiness);
  // Reads readiness and publishes it where it changed.
  void Publish();

 private:
  grpc::HealthCheckServiceInterface* const health_;
  ServingMetrics* const metrics_;
  const Readiness* const readiness_;
  bool first_ = true;
  bool ready_ = false;
};

struct DrainOptions {
  std::chrono::milliseconds timeout{30000};  // --drain-timeout
  const sigset_t* stop_signals = nullptr;    // a second one skips the wait
};

void Drain(const DrainOptions& options, DenseEngine& engine, Readiness& readiness,
           ServingStatusPublisher& publisher, const HttpServer* http);

}  // namespace moesplit::dense
