// Streaming delivery: (a) the time from a token's sampling on the engine
// thread to its bytes reaching a client over loopback, gRPC Generate and
// HTTP SSE /v1/completions, one stream at a time (median, p90, p99);
// (b) the server process's thread count (/proc/PID/status Threads:) idle
// and at its peak while 256 streaming clients (gRPC, then HTTP SSE) run at
// once. Prints numbers; asserts nothing.
//
// The server is this binary in --serve mode, a child process (so the
// clients' threads are not counted): the dense engine (in-process experts)
// on a generated test model with gRPC and HTTP front ends, recording every
// sampling time (EngineOptions::on_sampled, CLOCK_MONOTONIC, which both
// processes share). SIGUSR1 makes it write the times recorded so far to
// TSFILE.K (K = 1, 2, ...) and forget them. The generated model samples a
// token every ~50 µs, faster than a stream is written, which would measure
// a backlog rather than a delivery: for (a) the hook first sleeps
// --pace-us (default 2000, a realistic decode step) and the time recorded
// is taken after it, just before the delta is handed over; SIGUSR2 turns
// the pacing off for (b).
//
// Usage: stream_bench [--model M] [--requests R] [--tokens T]
//                     [--clients C] [--client-tokens N] [--threads T]
//                     [--pace-us US]
//   (the test model is made with `moesplit make-test-model`, found in
//   MOESPLIT_BIN_DIR, unless --model names one)
#include <arpa/inet.h>
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/subprocess.h"
#include "common/chat/chat_template.h"
#include "moesplit/v1/inference.grpc.pb.h"
#include "services/dense/chat_prompt.h"
#include "services/dense/dense_engine.h"
#include "services/dense/http_server.h"
#include "services/dense/inference_service.h"

namespace {

using namespace std::chrono_literals;
namespace v1 = moesplit::v1;
namespace dense = moesplit::dense;
using moesplit::ThreadsOf;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// ------------------------------------------------------------------ server

int Serve(const std::string& model, const std::string& ts_file, int threads, int pace_us) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  sigaddset(&set, SIGUSR2);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // before any thread starts

  std::mutex mu;
  std::vector<int64_t> sampled;
  sampled.reserve(1 << 20);
  dense::EngineOptions o;
  o.model_path = model;
  o.threads = threads;
  o.n_ctx = 512;
  o.max_sequences = 16;
  o.max_queue = 1024;
  o.step_tokens = 64;
  std::atomic<bool> paced{pace_us > 0};
  o.on_sampled = [&](std::chrono::steady_clock::time_point) {
    if (paced.load()) std::this_thread::sleep_for(std::chrono::microseconds(pace_us));
    const int64_t ns = NowNs();
    std::lock_guard<std::mutex> l(mu);
    sampled.push_back(ns);
  };
  auto engine = dense::DenseEngine::Create(o);
  if (!engine.ok()) {
    std::fprintf(stderr, "stream_bench --serve: %s\n", std::string(engine.status().message()).c_str());
    return 1;
  }
  auto chat = dense::ChatPrompt::ForModel((*engine)->model().file(), (*engine)->tokenizer());
  if (!chat.ok()) {
    chat = dense::ChatPrompt::ForModel((*engine)->model().file(), (*engine)->tokenizer(),
                                       moesplit::chat::ChatMLFallbackTemplate());
  }
  if (!chat.ok()) return 1;
  dense::ServedModel served;
  served.engine = engine->get();
  served.chat = &*chat;
  served.name = "stream-bench";
  auto http = dense::HttpServer::Start("127.0.0.1:0", served);
  if (!http.ok()) return 1;
  auto service = std::make_unique<dense::InferenceService>(served);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(service.get());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) return 1;
  std::fprintf(stderr, "stream_bench server ready grpc %d http %d\n", port, (*http)->port());
  std::fflush(stderr);
  // Request log lines from here on go to a file: a full stderr pipe would
  // stall the thread writing them.
  const int log_fd = open((ts_file + ".log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (log_fd >= 0) dup2(log_fd, 2);
  for (int k = 1;; ++k) {
    int sig = 0;
    sigwait(&set, &sig);
    if (sig == SIGUSR2) {
      paced = false;
      --k;
      continue;
    }
    if (sig != SIGUSR1) break;
    std::vector<int64_t> out;
    {
      std::lock_guard<std::mutex> l(mu);
      out.swap(sampled);
      sampled.reserve(1 << 20);
    }
    const std::string path = absl::StrCat(ts_file, ".", k);
    {
      std::ofstream f(path + ".tmp");
      for (int64_t t : out) f << t << "\n";
    }
    std::filesystem::rename(path + ".tmp", path);
  }
  http->reset();
  server->Shutdown(std::chrono::system_clock::now() + 2s);
  server.reset();
  service.reset();
  return 0;
}

// ------------------------------------------------------------------ clients

// Receive times of each token of one stream (ns, CLOCK_MONOTONIC).
struct Received {
  std::vector<int64_t> at;
  bool ok = true;
  std::string error;
};

Received GrpcStream(v1::Inference::Stub* stub, int tokens) {
  grpc::ClientContext ctx;
  ctx.set_wait_for_ready(true);  // a channel still connecting is waited for
  v1::GenerateRequest req;
  req.set_prompt("The quick brown fox");
  req.set_max_tokens(tokens);
  req.mutable_sampling()->set_temperature(0);
  req.mutable_sampling()->set_ignore_eos(true);
  auto reader = stub->Generate(&ctx, req);
  v1::GenerateResponse r;
  Received out;
  while (reader->Read(&r)) {
    const int64_t t = NowNs();
    for (int i = 0; i < r.token_ids_size(); ++i) out.at.push_back(t);
  }
  grpc::Status s = reader->Finish();
  out.ok = s.ok();
  out.error = s.error_message();
  return out;
}

// POST /v1/completions with "stream": true over a raw socket: a token's
// receive time is when the recv holding the end of its event returned.
Received HttpStream(int port, int tokens) {
  Received out;
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return {{}, false, "connect failed"};
  }
  const std::string body = absl::StrCat(
      R"({"prompt":"The quick brown fox","max_tokens":)", tokens,
      R"(,"temperature":0,"ignore_eos":true,"stream":true})");
  const std::string req = absl::StrCat(
      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
      "Content-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
  if (send(fd, req.data(), req.size(), 0) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return {{}, false, "send failed"};
  }
  std::string buf;
  size_t scanned = 0;
  char chunk[16384];
  for (;;) {
    const ssize_t n = recv(fd, chunk, sizeof(chunk), 0);
    if (n <= 0) break;
    const int64_t t = NowNs();
    buf.append(chunk, static_cast<size_t>(n));
    // Token events: `data: {...}` whose choice has "finish_reason":null.
    for (;;) {
      const size_t start = buf.find("data: ", scanned);
      if (start == std::string::npos) break;
      const size_t end = buf.find("\n\n", start);
      if (end == std::string::npos) break;
      if (buf.compare(start, 7, "data: {") == 0 &&
          buf.find("\"finish_reason\":null", start) < end) {
        out.at.push_back(t);
      }
      scanned = end + 2;
    }
    if (buf.find("data: [DONE]") != std::string::npos) break;
  }
  close(fd);
  if (buf.rfind("HTTP/1.1 200", 0) != 0) {
    out.ok = false;
    out.error = buf.substr(0, 200);
  }
  return out;
}

// -------------------------------------------------------------------- parent

std::vector<int64_t> Dump(moesplit::Subprocess& server, const std::string& ts_file, int k) {
  server.Signal(SIGUSR1);
  const std::string path = absl::StrCat(ts_file, ".", k);
  for (int i = 0; i < 2000 && !std::filesystem::exists(path); ++i) std::this_thread::sleep_for(5ms);
  std::vector<int64_t> out;
  std::ifstream f(path);
  for (int64_t t; f >> t;) out.push_back(t);
  std::filesystem::remove(path);
  return out;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5));
  return v[i];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 4 && std::string(argv[1]) == "--serve") {
    return Serve(argv[2], argv[3], argc >= 5 ? std::atoi(argv[4]) : 2,
                 argc >= 6 ? std::atoi(argv[5]) : 0);
  }
  std::string model;
  int requests = 20, tokens = 64, clients = 256, client_tokens = 32, threads = 2,
      pace_us = 2000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--model") model = argv[i + 1];
    if (a == "--requests") requests = std::atoi(argv[i + 1]);
    if (a == "--tokens") tokens = std::atoi(argv[i + 1]);
    if (a == "--clients") clients = std::atoi(argv[i + 1]);
    if (a == "--client-tokens") client_tokens = std::atoi(argv[i + 1]);
    if (a == "--threads") threads = std::atoi(argv[i + 1]);
    if (a == "--pace-us") pace_us = std::atoi(argv[i + 1]);
  }
  const std::string dir = std::filesystem::temp_directory_path().string();
  const std::string tag = absl::StrCat(dir, "/stream_bench_", getpid());
  bool made = false;
  if (model.empty()) {
    model = tag + ".gguf";
    moesplit::Subprocess gen(std::string(MOESPLIT_BIN_DIR) + "/moesplit",
                             {"make-test-model", "--out", model, "--name", "stream-bench",
                              "--threads", "2"});
    if (gen.Wait(300s) != 0) {
      std::fprintf(stderr, "stream_bench: make-test-model failed\n%s\n", gen.stderr_text().c_str());
      return 1;
    }
    made = true;
  }
  const std::string ts_file = tag + ".sampled";
  moesplit::Subprocess server("/proc/self/exe",
                              {"--serve", model, ts_file, std::to_string(threads),
                               std::to_string(pace_us)});
  if (absl::Status s = server.WaitFor("server ready", 300s); !s.ok()) {
    std::fprintf(stderr, "stream_bench: the server did not start: %s\n%s\n",
                 std::string(s.message()).c_str(), server.stderr_text().c_str());
    return 1;
  }
  const std::string& log = server.stderr_text();
  const int grpc_port = std::atoi(log.c_str() + log.find("grpc ") + 5);
  const int http_port = std::atoi(log.c_str() + log.find("http ") + 5);
  int dumps = 0;

  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<v1::Inference::Stub>> stubs;
  for (int i = 0; i < 8; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("stream_bench.channel", i);  // distinct channels, distinct connections
    channels.push_back(grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", grpc_port),
                                                 grpc::InsecureChannelCredentials(), args));
    stubs.push_back(v1::Inference::NewStub(channels.back()));
    // Connected before any phase (a lazy connect under 256 new streams can
    // fail on the client's side).
    channels.back()->WaitForConnected(std::chrono::system_clock::now() + 30s);
  }
  GrpcStream(stubs[0].get(), 4);
  HttpStream(http_port, 4);

  std::printf("stream_bench: token sampled (engine thread) -> received by the client, loopback, "
              "%d streams x %d tokens one at a time, a token every %d us\n",
              requests, tokens, pace_us);
  std::printf("%6s %8s %10s %10s %10s %10s\n", "api", "tokens", "median_us", "p90_us", "p99_us",
              "max_us");
  for (const char* api : {"grpc", "http"}) {
    Dump(server, ts_file, ++dumps);  // forget the warm-up
    std::vector<int64_t> received;
    bool ok = true;
    for (int r = 0; r < requests; ++r) {
      Received got = std::string(api) == "grpc" ? GrpcStream(stubs[0].get(), tokens)
                                                : HttpStream(http_port, tokens);
      if (!got.ok) {
        std::fprintf(stderr, "%s stream failed: %s\n", api, got.error.c_str());
        ok = false;
      }
      received.insert(received.end(), got.at.begin(), got.at.end());
    }
    const std::vector<int64_t> sampled = Dump(server, ts_file, ++dumps);
    if (!ok || sampled.size() != received.size()) {
      std::printf("%6s: %zu tokens sampled, %zu received: not paired\n", api, sampled.size(),
                  received.size());
      continue;
    }
    std::vector<double> us;
    for (size_t i = 0; i < sampled.size(); ++i) us.push_back((received[i] - sampled[i]) / 1e3);
    std::printf("%6s %8zu %10.1f %10.1f %10.1f %10.1f\n", api, us.size(), Percentile(us, 0.5),
                Percentile(us, 0.9), Percentile(us, 0.99), Percentile(us, 1.0));
  }

  server.Signal(SIGUSR2);  // unpaced from here
  std::this_thread::sleep_for(100ms);
  std::printf("\nstream_bench: server threads (/proc/PID/status) with %d concurrent streaming "
              "clients x %d tokens\n",
              clients, client_tokens);
  std::printf("%6s %8s %8s %8s %10s %8s\n", "api", "idle", "peak", "after", "seconds", "failed");
  for (const char* api : {"grpc", "http"}) {
    const int idle = ThreadsOf(server.pid());
    std::atomic<int> failed{0}, finished{0};
    std::vector<std::thread> ts;
    const auto t0 = std::chrono::steady_clock::now();
    for (int c = 0; c < clients; ++c) {
      ts.emplace_back([&, c] {
        Received got = std::string(api) == "grpc"
                           ? GrpcStream(stubs[c % stubs.size()].get(), client_tokens)
                           : HttpStream(http_port, client_tokens);
        if (!got.ok || static_cast<int>(got.at.size()) != client_tokens) {
          if (failed.fetch_add(1) == 0) {
            std::fprintf(stderr, "stream_bench: %s client %d: %zu of %d tokens, %s\n", api, c,
                         got.at.size(), client_tokens, got.error.c_str());
          }
        }
        ++finished;
      });
    }
    int peak = idle;
    while (finished.load() < clients) {
      peak = std::max(peak, ThreadsOf(server.pid()));
      std::this_thread::sleep_for(2ms);
    }
    for (auto& t : ts) t.join();
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::this_thread::sleep_for(200ms);
    std::printf("%6s %8d %8d %8d %10.2f %8d\n", api, idle, peak, ThreadsOf(server.pid()), secs,
                failed.load());
    Dump(server, ts_file, ++dumps);
  }
  server.Signal(SIGTERM);
  server.Wait(30s);
  std::filesystem::remove(ts_file + ".log");
  if (made) std::filesystem::remove(model);
  return 0;
}
