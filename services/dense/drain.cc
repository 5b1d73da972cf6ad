#include "services/dense/drain.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/log.h"

namespace moesplit::dense {
namespace {

constexpr char kSource[] = "moesplit-dense";

// Requests the engine runs or queues, and HTTP answers still being written.
int InFlight(const DenseEngine& engine, const HttpServer* http) {
  return std::max(engine.running() + engine.queued(), http ? http->active_requests() : 0);
}

}  // namespace

bool StopRequested(const sigset_t& set) {
  timespec zero{0, 0};
  return sigtimedwait(&set, nullptr, &zero) > 0;
}

ServingStatusPublisher::ServingStatusPublisher(grpc::HealthCheckServiceInterface* health,
                                               ServingMetrics* metrics,
                                               const Readiness* readiness)
    : health_(health), metrics_(metrics), readiness_(readiness) {
  if (health_ != nullptr) health_->SetServingStatus("liveness", true);
  Publish();
}

void ServingStatusPublisher::Publish() {
  const ReadinessReport r = readiness_->Check();
  metrics_->draining.Set(r.draining ? 1 : 0);
  if (!first_ && r.ready == ready_) return;
  metrics_->ready.Set(r.ready ? 1 : 0);
  if (health_ != nullptr) {
    health_->SetServingStatus("", r.ready);
    health_->SetServingStatus("moesplit.v1.Inference", r.ready);
  }
  if (!first_ && !r.draining) {
    Log(r.ready ? LogLevel::kInfo : LogLevel::kWarning, kSource,
        r.ready ? "serving again: every layer has a live expert worker"
                : absl::StrCat("not serving: ", r.Summary()));
  }
  first_ = false;
  ready_ = r.ready;
}

void Drain(const DrainOptions& options, DenseEngine& engine, Readiness& readiness,
           ServingStatusPublisher& publisher, const HttpServer* http) {
  readiness.BeginDrain();
  engine.BeginDrain();
  publisher.Publish();
  const int n = InFlight(engine, http);
  Log(LogLevel::kInfo, kSource,
      absl::StrFormat("draining %d requests (up to %g s)", n, options.timeout.count() / 1000.0));
  const auto deadline = std::chrono::steady_clock::now() + options.timeout;
  bool skipped = false;
  while (InFlight(engine, http) > 0 && std::chrono::steady_clock::now() < deadline) {
    if (options.stop_signals != nullptr && StopRequested(*options.stop_signals)) {
      skipped = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (InFlight(engine, http) == 0) {
    Log(LogLevel::kInfo, kSource, "drained");
    return;
  }
  const int cancelled = engine.AbortAll(ShuttingDownError(
      skipped ? "the server is shutting down (second signal): request cancelled"
              : absl::StrCat("the server is shutting down: request cancelled after the ",
                             options.timeout.count(), " ms drain timeout (--drain-timeout)")));
  Log(LogLevel::kWarning, kSource,
      absl::StrCat("cancelled ", cancelled, " requests", skipped ? " (second signal)" : "",
                   " after draining ",
                   std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::steady_clock::now() - (deadline - options.timeout))
                       .count(),
                   " ms"));
  // Their clients get the error: give the front ends a moment to write it.
  const auto grace = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (InFlight(engine, http) > 0 && std::chrono::steady_clock::now() < grace) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace moesplit::dense
