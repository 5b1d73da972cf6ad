// moesplit-dense: the dense service. Runs embeddings, attention, routers,
// shared experts, sampling and the public gRPC API; routed experts are
// computed by the expert-workers named with --experts (repeatable).
// --http HOST:PORT also serves the OpenAI-compatible HTTP API (http_server.h);
// --parallel, --max-queue and --step-tokens configure continuous batching.
//
// Prints "moesplit-dense: ready ..." on stderr once it serves; SIGINT/SIGTERM
// stop it. Bad flags or a model/worker problem at start: one line on stderr,
// exit status 2 (bad input) or 1.
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/base/status.h"
#include "common/plan/byte_size.h"
#include "common/plan/memory_plan.h"
#include "common/telemetry/gpu_metrics.h"
#include "common/telemetry/metrics.h"
#include "services/cli/flags.h"
#include "services/dense/chat_prompt.h"
#include "services/dense/dense_engine.h"
#include "services/dense/http_server.h"
#include "services/dense/inference_service.h"

namespace moesplit::dense {
namespace {

// SIGINT/SIGTERM are blocked in every thread and polled by the main loop.
bool StopRequested(const sigset_t& set) {
  timespec zero{0, 0};
  return sigtimedwait(&set, nullptr, &zero) > 0;
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "moesplit-dense: %s\n", std::string(s.message()).c_str());
  return s.code() == absl::StatusCode::kInvalidArgument ||
                 s.code() == absl::StatusCode::kNotFound
             ? 2
             : 1;
}

int Run(int argc, char** argv) {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  EngineOptions opt;
  std::string grpc_addr = "127.0.0.1:50051", metrics_addr, experts_csv, http_addr;
  std::string template_file;
  int64_t threads = 0, ctx = 4096, timeout_ms = 10000, connect_ms = 60000;
  int64_t parallel = 4, max_queue = 64, step_tokens = 512;
  cli::FlagParser p;
  p.AddString("model", &opt.model_path, "GGUF model file");
  p.AddString("experts", &experts_csv,
              "expert workers: shm://NAME or grpc://HOST:PORT, comma-separated (or repeat); "
              "empty: in-process");
  p.AddString("grpc", &grpc_addr, "serve the Inference API on HOST:PORT");
  p.AddString("metrics", &metrics_addr, "serve Prometheus /metrics on HOST:PORT");
  p.AddString("http", &http_addr, "also serve the OpenAI-compatible HTTP API on HOST:PORT");
  p.AddString("chat-template-file", &template_file,
              "Jinja chat template to use instead of the model's");
  p.AddInt("parallel", &parallel, "sequences generated at once (continuous batching)");
  p.AddInt("max-queue", &max_queue, "requests that may wait for a slot; more get 429/RESOURCE_EXHAUSTED");
  p.AddInt("step-tokens", &step_tokens, "tokens per forward step (decodes + prompt chunks)");
  p.AddInt("threads", &threads, "CPU threads (default: all)");
  p.AddInt("ctx", &ctx, "context length");
  p.AddInt("expert-timeout", &timeout_ms, "ms before an unanswered expert call fails");
  p.AddInt("connect-timeout", &connect_ms, "ms to wait for the workers at start");
  std::string gpu_memory;
  p.AddString("backend", &opt.backend, "dense forward on: auto (GPU when present), cpu, cuda");
  p.AddString("gpu-memory", &gpu_memory, "GPU memory budget, e.g. 8GiB (default: free memory)");
  p.AddString("kv-type", &opt.kv_type, "GPU KV cache type: f16, q8_0, q4_0");
  std::string expert_cache = "auto", prefill_stream = "auto";
  p.AddString("expert-cache", &expert_cache,
              "GPU hot-expert cache slots: auto (what the budget leaves), off, or a number");
  p.AddString("prefill-stream", &prefill_stream,
              "tokens an expert needs in a step to be streamed to the GPU for prefill: auto "
              "(measured at start-up), off, or a number");
  p.AddBool("pin-experts", &opt.pin_experts,
            "page-lock the model's expert tensors for faster host-to-GPU copies");
  // The HTTP front end's limits (http_server.h).
  HttpServerOptions http_opt;
  int64_t http_header_ms = http_opt.header_timeout.count(),
          http_body_ms = http_opt.body_timeout.count(),
          http_idle_ms = http_opt.idle_timeout.count(),
          http_write_ms = http_opt.write_timeout.count(),
          http_max_requests = http_opt.max_requests_per_connection,
          http_max_connections = http_opt.max_connections,
          http_max_header = http_opt.max_header_bytes, http_max_uri = http_opt.max_uri_bytes;
  std::string max_body = std::to_string(http_opt.max_body_bytes);
  p.AddInt("http-header-timeout", &http_header_ms,
           "ms a client may take to send a request's line and headers");
  p.AddInt("http-body-timeout", &http_body_ms, "ms a client may take to send a request's body");
  p.AddInt("http-idle-timeout", &http_idle_ms, "ms a kept-alive connection may wait between requests");
  p.AddInt("http-write-timeout", &http_write_ms,
           "ms one response write may take (a client that stops reading is dropped)");
  p.AddInt("http-max-requests-per-connection", &http_max_requests,
           "requests served on one kept-alive connection");
  p.AddInt("http-max-connections", &http_max_connections,
           "open HTTP connections; more are answered 503 and closed");
  p.AddString("max-body-bytes", &max_body, "largest HTTP request body, e.g. 4MiB (more: 413)");
  p.AddInt("http-max-header-bytes", &http_max_header,
           "largest request line + headers (more: 431)");
  p.AddInt("http-max-uri-bytes", &http_max_uri, "longest request target (more: 414)");
  std::vector<std::string> args(argv + 1, argv + argc);
  // --experts may repeat: join the values.
  std::vector<std::string> rest;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--experts" && i + 1 < args.size()) {
      experts_csv += (experts_csv.empty() ? "" : ",") + args[++i];
    } else if (args[i].rfind("--experts=", 0) == 0) {
      experts_csv += (experts_csv.empty() ? "" : ",") + args[i].substr(10);
    } else {
      rest.push_back(args[i]);
    }
  }
  if (absl::Status s = p.Parse(rest); !s.ok()) return Fail(s);
  if (opt.model_path.empty()) return Fail(absl::InvalidArgumentError("--model is required"));
  if (ctx < 16 || timeout_ms < 1 || connect_ms < 0) {
    return Fail(absl::InvalidArgumentError("--ctx >= 16, --expert-timeout >= 1 required"));
  }
  for (absl::string_view a : absl::StrSplit(experts_csv, ',', absl::SkipEmpty())) {
    opt.experts.emplace_back(a);
  }
  if (!gpu_memory.empty()) {
    auto bytes = plan::ParseByteSize(gpu_memory);
    if (!bytes.ok()) return Fail(bytes.status());
    opt.gpu_memory = *bytes;
  }
  auto auto_off_or_count = [](const std::string& flag, const std::string& v,
                              int64_t* out) -> absl::Status {
    if (v == "auto") {
      *out = -1;
    } else if (v == "off") {
      *out = 0;
    } else if (!absl::SimpleAtoi(v, out) || *out < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, " must be auto, off or a positive number, got '", v, "'"));
    }
    return absl::OkStatus();
  };
  if (absl::Status s = auto_off_or_count("expert-cache", expert_cache, &opt.expert_cache_slots);
      !s.ok()) {
    return Fail(s);
  }
  if (absl::Status s = auto_off_or_count("prefill-stream", prefill_stream,
                                         &opt.prefill_stream_min_tokens);
      !s.ok()) {
    return Fail(s);
  }
  opt.threads = static_cast<int>(threads);
  opt.n_ctx = static_cast<int>(ctx);
  opt.expert_timeout = std::chrono::milliseconds(timeout_ms);
  opt.connect_timeout = std::chrono::milliseconds(connect_ms);
  if (parallel < 1 || parallel > 1024 || max_queue < 0 || max_queue > 100000 || step_tokens < 1 ||
      step_tokens > 1 << 20) {
    return Fail(absl::InvalidArgumentError(
        "--parallel in 1..1024, --max-queue in 0..100000, --step-tokens >= 1 required"));
  }
  {
    auto body_bytes = plan::ParseByteSize(max_body);
    if (!body_bytes.ok()) {
      return Fail(absl::InvalidArgumentError(
          absl::StrCat("--max-body-bytes: ", body_bytes.status().message())));
    }
    auto in_int = [](int64_t v) { return static_cast<int>(std::clamp<int64_t>(v, -1, INT32_MAX)); };
    http_opt.header_timeout = std::chrono::milliseconds(http_header_ms);
    http_opt.body_timeout = std::chrono::milliseconds(http_body_ms);
    http_opt.idle_timeout = std::chrono::milliseconds(http_idle_ms);
    http_opt.write_timeout = std::chrono::milliseconds(http_write_ms);
    http_opt.max_requests_per_connection = in_int(http_max_requests);
    http_opt.max_connections = in_int(http_max_connections);
    http_opt.max_body_bytes = *body_bytes;
    auto in_u32 = [](int64_t v) { return static_cast<uint32_t>(std::clamp<int64_t>(v, 0, 1 << 24)); };
    http_opt.max_header_bytes = in_u32(http_max_header);
    http_opt.max_uri_bytes = in_u32(http_max_uri);
    if (absl::Status s = ValidateHttpOptions(http_opt); !s.ok()) return Fail(s);
  }
  opt.max_sequences = static_cast<int>(parallel);
  opt.max_queue = static_cast<int>(max_queue);
  opt.step_tokens = static_cast<int>(step_tokens);
  // One registry for the --metrics exposer and HTTP GET /metrics.
  auto registry = std::make_shared<prometheus::Registry>();
  opt.registry = registry;
  auto engine = DenseEngine::Create(opt);
  if (!engine.ok()) return Fail(engine.status());
  std::fprintf(stderr, "moesplit-dense: dense forward on %s\n", (*engine)->backend_name().c_str());
  std::string template_source;
  if (!template_file.empty()) {
    std::ifstream in(template_file, std::ios::binary);
    if (!in) return Fail(absl::NotFoundError(absl::StrCat("cannot read ", template_file)));
    template_source.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto chat =
      ChatPrompt::ForModel((*engine)->model().file(), (*engine)->tokenizer(), template_source);
  if (!chat.ok() && !template_source.empty()) return Fail(chat.status());
  if (!chat.ok()) {
    std::fprintf(stderr, "moesplit-dense: warning: the model's chat template does not parse (%s); "
                         "using ChatML\n", std::string(chat.status().message()).c_str());
    chat = ChatPrompt::ForModel((*engine)->model().file(), (*engine)->tokenizer(),
                                chat::ChatMLFallbackTemplate());
    if (!chat.ok()) return Fail(chat.status());
  } else if (!chat->warning().empty()) {
    std::fprintf(stderr, "moesplit-dense: warning: %s\n", chat->warning().c_str());
  }
  ServedModel served{engine->get(), ServedModelName((*engine)->model(), opt.model_path), &*chat};

  std::unique_ptr<telemetry::MetricsServer> metrics;
  std::shared_ptr<telemetry::DenseExpertMetrics> expert_metrics;
  if (!metrics_addr.empty()) {
    auto m = telemetry::MetricsServer::Start(metrics_addr);
    if (!m.ok()) return Fail(m.status());
    metrics = std::move(*m);
    metrics->Register(registry);
  }
  expert_metrics = std::make_shared<telemetry::DenseExpertMetrics>(*registry);
  if ((*engine)->remote() != nullptr) {
    // Per expert call: tokens, round trip, the workers' own time. The
    // observer keeps the metrics (and their registry) alive as long as the
    // engine may call it.
    (*engine)->remote()->SetCallObserver(
        [m = expert_metrics, registry](const model::ExpertCall& call, double round_trip_s,
                                       uint64_t worker_ns) {
          m->ObserveCall(call, round_trip_s, worker_ns);
        });
  }
  // GPU memory: the plan (the same arithmetic as `moesplit plan`) and the
  // device's use, refreshed every 5 s; zeros when the dense part is on the CPU.
  telemetry::GpuMetrics gpu_metrics(*registry, (*engine)->model().n_layer());
  std::atomic<bool> stop_gpu_poll{false};
  std::thread gpu_poll;
  if ((*engine)->backend_name() != "cpu") {
    plan::PlanOptions po;
    po.n_ctx = (*engine)->n_ctx();
    po.n_parallel = opt.max_sequences;  // one GPU KV cache per sequence
    po.budget_bytes = opt.gpu_memory > 0 ? opt.gpu_memory : QueryGpuMemory().free;
    auto kv = plan::ParseKvType(opt.kv_type);
    if (kv.ok()) po.kv_type = *kv;
    auto memory_plan = plan::PlanMemory(plan::ShapeOfModel((*engine)->model()), po);
    if (memory_plan.ok()) {
      gpu_metrics.SetPlan(*memory_plan);
    } else {
      std::fprintf(stderr, "moesplit-dense: warning: no GPU memory plan for the metrics: %s\n",
                   std::string(memory_plan.status().message()).c_str());
    }
    const GpuRunnerInfo info = (*engine)->gpu_info();
    gpu_metrics.SetPrefillStreamMinTokens(info.stream_min_tokens);
    std::fprintf(stderr, "moesplit-dense: GPU expert cache: %s\n",
                 info.expert_cache
                     ? absl::StrCat(info.cache_slots, " slots, ", info.cache_bytes, " bytes").c_str()
                     : "off");
    std::fprintf(stderr, "moesplit-dense: streamed prefill: %s (%s)\n",
                 info.stream_min_tokens > 0
                     ? absl::StrCat("experts with ", info.stream_min_tokens,
                                    " or more tokens in a step").c_str()
                     : "off",
                 info.stream_note.c_str());
    gpu_poll = std::thread([&] {
      while (!stop_gpu_poll.load()) {
        gpu_metrics.SetUsedBytes(QueryGpuMemory().used);
        const GpuRunnerInfo now = (*engine)->gpu_info();
        if (now.expert_cache) gpu_metrics.UpdateExpertCache(now.cache_stats, now.resident_per_layer);
        for (int i = 0; i < 50 && !stop_gpu_poll.load(); ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
      }
    });
  }
  struct JoinPoll {
    std::atomic<bool>* stop;
    std::thread* t;
    ~JoinPoll() {
      stop->store(true);
      if (t->joinable()) t->join();
    }
  } join_poll{&stop_gpu_poll, &gpu_poll};
  std::unique_ptr<HttpServer> http;
  if (!http_addr.empty()) {
    auto h = HttpServer::Start(http_addr, served, http_opt);
    if (!h.ok()) return Fail(h.status());
    http = std::move(*h);
  }
  InferenceService service(served);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(grpc_addr, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return Fail(absl::UnavailableError(absl::StrCat("cannot listen on ", grpc_addr)));
  }
  std::fprintf(stderr,
               "moesplit-dense: ready on grpc port %d%s: %s, %d layers, %d sequences, experts %s%s\n",
               port, http ? absl::StrCat(", http port ", http->port()).c_str() : "",
               (*engine)->model().hparams().arch.c_str(), (*engine)->model().n_layer(),
               static_cast<int>(parallel),
               opt.experts.empty() ? "in-process" : absl::StrJoin(opt.experts, " ").c_str(),
               metrics ? absl::StrCat(", metrics on port ", metrics->port()).c_str() : "");
  // Refresh the worker metrics (and notice outages) while serving.
  while (!StopRequested(stop_signals)) {
    if (expert_metrics && (*engine)->remote() != nullptr) {
      expert_metrics->Update((*engine)->remote()->clients());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  http.reset();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  std::fprintf(stderr, "moesplit-dense: stopped\n");
  return 0;
}

}  // namespace
}  // namespace moesplit::dense

int main(int argc, char** argv) { return moesplit::dense::Run(argc, argv); }
