// Round-trip latency of one-token expert calls (d = 2048, 8 experts) over the
// shared-memory and gRPC transports on loopback, compute excluded (the
// worker's backend only sizes the result). Prints p50/p99/mean per transport.
// With --compute-us N the backend busy-waits N us per call, as a decode
// call's compute does (~600 us on 2 threads): the client has given up
// spinning and sleeps on the futex by then, so the rows show what waking it
// adds (round trip minus N).
//
// usage: transport_bench [--calls N] [--compute-us N]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/transport/expert_transport.h"
#include "common/transport/grpc_transport.h"
#include "common/transport/shm_transport.h"

namespace moesplit::transport {
namespace {

constexpr int kD = 2048;
constexpr int kExperts = 8;

class NoCompute : public model::ExpertBackend {
 public:
  explicit NoCompute(int compute_us = 0) : compute_us_(compute_us) {}
  absl::Status ComputeInto(const model::ExpertCallView& call, float* partial,
                           uint64_t* worker_ns) override {
    if (compute_us_ > 0) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(compute_us_);
      while (std::chrono::steady_clock::now() < until) {
      }
    }
    return absl::OkStatus();
  }

 private:
  const int compute_us_;
};

model::ExpertCall OneTokenCall() {
  model::ExpertCall c;
  c.n_tokens = 1;
  c.d = kD;
  c.hidden.assign(kD, 0.5f);
  c.token_offsets = {0, kExperts};
  for (int k = 0; k < kExperts; ++k) {
    c.expert_ids.push_back(k * 13 % 128);
    c.weights.push_back(1.0f / kExperts);
  }
  return c;
}

void Measure(const char* name, ExpertClient* client, int calls) {
  model::ExpertCall call = OneTokenCall();
  model::ExpertResult result;
  for (int i = 0; i < 200; ++i) {  // warm-up: connect, fault pages in
    if (!client->Compute(call, &result).ok()) {
      std::fprintf(stderr, "%s: warm-up failed\n", name);
      return;
    }
  }
  std::vector<double> us(calls);
  for (int i = 0; i < calls; ++i) {
    call.call_id = i;
    const auto t0 = std::chrono::steady_clock::now();
    absl::Status s = client->Compute(call, &result);
    const auto t1 = std::chrono::steady_clock::now();
    if (!s.ok()) {
      std::fprintf(stderr, "%s: %s\n", name, std::string(s.message()).c_str());
      return;
    }
    us[i] = std::chrono::duration<double, std::micro>(t1 - t0).count();
  }
  std::vector<double> sorted = us;
  std::sort(sorted.begin(), sorted.end());
  double mean = 0;
  for (double v : us) mean += v;
  mean /= calls;
  std::printf("%-6s %8d %10.1f %10.1f %10.1f\n", name, calls, sorted[calls / 2],
              sorted[static_cast<size_t>(calls * 0.99)], mean);
}

WorkerDescription Describe() {
  WorkerDescription d;
  d.model_identity = "bench";
  d.n_layer = 1;
  d.n_expert = 128;
  d.d = kD;
  d.layer_end = 1;
  d.expert_end = 128;
  d.max_tokens = 16;
  return d;
}

}  // namespace
}  // namespace moesplit::transport

int main(int argc, char** argv) {
  using namespace moesplit::transport;
  int calls = 20000, compute_us = 0;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--calls") calls = std::max(100, std::atoi(argv[i + 1]));
    if (std::string(argv[i]) == "--compute-us") compute_us = std::max(0, std::atoi(argv[i + 1]));
  }
  if (compute_us > 0) calls = std::min(calls, 2000000 / compute_us);
  NoCompute backend(compute_us);
  const std::string name = absl::StrCat("moesplit-bench-", getpid());
  auto shm = ShmExpertServer::Start({name}, Describe(), &backend);
  auto grpc = GrpcExpertServer::Start({"127.0.0.1:0"}, Describe(), &backend);
  if (!shm.ok() || !grpc.ok()) {
    std::fprintf(stderr, "cannot start servers\n");
    return 1;
  }
  ClientOptions options;
  options.model_identity = "bench";
  options.max_tokens = 16;
  auto shm_client = OpenExpertClient((*shm)->address(), options);
  auto grpc_client = OpenExpertClient((*grpc)->address(), options);
  std::printf("one-token expert call round trip, d=%d, %d experts, %s (us)\n", kD, kExperts,
              compute_us > 0 ? absl::StrCat(compute_us, " us of compute included").c_str()
                             : "compute excluded");
  std::printf("%-6s %8s %10s %10s %10s\n", "", "calls", "p50", "p99", "mean");
  Measure("shm", shm_client->get(), calls);
  Measure("grpc", grpc_client->get(), calls / 4);
  if (compute_us == 0) std::printf("targets: shm p50 <= 10 us, grpc p50 <= 100 us\n");
  return 0;
}
