// Serving throughput: total generated tokens per second with 1, 4 and 16
// concurrent greedy streams against `moesplit up` (expert-worker over shared
// memory + dense service with continuous batching) on the default
// Qwen3-30B-A3B-shaped test model. Prints numbers; asserts nothing.
//
// Usage: serving_bench [--tokens N] [--threads T] [--model M]
// (binaries are found next to this one's bin/ sibling: MOESPLIT_BIN_DIR)
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <csignal>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/subprocess.h"
#include "moesplit/v1/inference.grpc.pb.h"

namespace {

using namespace std::chrono_literals;
namespace v1 = moesplit::v1;

struct Run {
  int tokens = 0;
  bool ok = true;
  std::string error;
};

Run Stream(v1::Inference::Stub* stub, const std::string& prompt, int n) {
  grpc::ClientContext ctx;
  v1::GenerateRequest req;
  req.set_prompt(prompt);
  req.set_max_tokens(n);
  req.mutable_sampling()->set_temperature(0);
  auto reader = stub->Generate(&ctx, req);
  v1::GenerateResponse r;
  Run out;
  while (reader->Read(&r)) out.tokens += r.token_ids_size();
  grpc::Status s = reader->Finish();
  out.ok = s.ok();
  out.error = s.error_message();
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int tokens = 32, threads = 0;
  std::string model;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--tokens") tokens = std::atoi(argv[i + 1]);
    if (a == "--threads") threads = std::atoi(argv[i + 1]);
    if (a == "--model") model = argv[i + 1];
  }
  const int port = 45000 + getpid() % 5000;
  const std::string addr = absl::StrCat("127.0.0.1:", port);
  std::vector<std::string> args = {"up", "--grpc", addr, "--parallel", "16", "--ctx", "1024"};
  if (threads > 0) args.insert(args.end(), {"--threads", std::to_string(threads)});
  if (!model.empty()) args.insert(args.end(), {"--model", model});
  moesplit::Subprocess up(std::string(MOESPLIT_BIN_DIR) + "/moesplit", args);
  if (absl::Status s = up.WaitFor("serving", 900s); !s.ok()) {
    std::fprintf(stderr, "serving_bench: moesplit up did not start: %s\n%s\n",
                 std::string(s.message()).c_str(), up.stderr_text().c_str());
    return 1;
  }
  auto stub = v1::Inference::NewStub(grpc::CreateChannel(addr, grpc::InsecureChannelCredentials()));
  Stream(stub.get(), "warm up", 4);
  std::printf("serving_bench: %d greedy tokens per stream, moesplit up (1 shm worker)\n", tokens);
  std::printf("%8s %10s %10s %12s %14s\n", "streams", "tokens", "seconds", "tok/s total",
              "tok/s/stream");
  for (int streams : {1, 4, 16}) {
    std::vector<Run> runs(streams);
    std::vector<std::thread> ts;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < streams; ++i) {
      ts.emplace_back([&, i] {
        runs[i] = Stream(stub.get(), absl::StrCat("Stream ", i, " tells a story about"), tokens);
      });
    }
    for (auto& t : ts) t.join();
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    int total = 0;
    for (const Run& r : runs) {
      if (!r.ok) std::fprintf(stderr, "serving_bench: stream failed: %s\n", r.error.c_str());
      total += r.tokens;
    }
    std::printf("%8d %10d %10.2f %12.1f %14.1f\n", streams, total, sec, total / sec,
                total / sec / streams);
    std::fflush(stdout);
  }
  up.Signal(SIGINT);
  if (up.Wait(30s) < 0) up.Kill(SIGKILL);
  return 0;
}
