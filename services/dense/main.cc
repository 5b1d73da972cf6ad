// moesplit-dense: the dense service. Runs embeddings, attention, routers,
// shared experts, sampling and the public gRPC API; routed experts are
// computed by the expert-workers named with --experts (repeatable).
// --http HOST:PORT also serves the OpenAI-compatible HTTP API (http_server.h);
// --parallel, --max-queue and --step-tokens configure continuous batching.
// --api-key-file / $MOESPLIT_API_KEYS, --tls-cert/--tls-key and --tls-ca
// secure the APIs and the connections to grpc:// workers (api_auth.h,
// common/auth/); "API keys: off|N; TLS: ..." is logged at start.
//
// Prints "moesplit-dense: ready ..." on stderr once it serves (every line
// through common/base/log.h, --log-format text|json). SIGINT/SIGTERM drain
// it (drain.h): readiness off at once, new requests refused, in-flight ones
// finish within --drain-timeout, then are cancelled; exit 0. Bad flags or a
// model/worker problem at start: one line on stderr, exit status 2 (bad
// input) or 1.
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <pthread.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <optional>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/auth/api_keys.h"
#include "common/auth/tls.h"
#include "common/base/cpu_count.h"
#include "common/base/status.h"
#include "common/plan/byte_size.h"
#include "common/plan/memory_plan.h"
#include "common/telemetry/gpu_metrics.h"
#include "common/telemetry/metrics.h"
#include "services/cli/dense_flags.h"
#include "services/dense/api_auth.h"
#include "services/dense/chat_prompt.h"
#include "common/base/log.h"
#include "services/dense/dense_engine.h"
#include "services/dense/drain.h"
#include "services/dense/http_server.h"
#include "services/dense/inference_service.h"
#include "services/dense/readiness.h"
#include "services/dense/volatile_system.h"

namespace moesplit::dense {
namespace {

constexpr char kSource[] = "moesplit-dense";

void Info(const std::string& message) { Log(LogLevel::kInfo, kSource, message); }
void Warn(const std::string& message) { Log(LogLevel::kWarning, kSource, message); }

int Fail(const absl::Status& s) {
  Log(LogLevel::kError, kSource, s.message());
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
  // Every flag is checked here, before anything is loaded (dense_flags.h).
  cli::DenseServiceFlags f;
  auto parsed = cli::ParseDenseServiceFlags(std::vector<std::string>(argv + 1, argv + argc), &f);
  if (!parsed.ok()) return Fail(parsed.status());
  if (*parsed == cli::ParsedCommandLine::kExit) return 0;
  if (auto format = ParseLogFormat(f.log_format); format.ok()) SetLogFormat(*format);
  std::unique_ptr<VolatileSystemFilter> volatile_system;
  if (!f.volatile_system_pattern.empty()) {
    auto filter = VolatileSystemFilter::Create(f.volatile_system_pattern);
    if (!filter.ok()) return Fail(filter.status());
    volatile_system = *std::move(filter);
  }
  const std::string &grpc_addr = f.grpc, &metrics_addr = f.metrics, &http_addr = f.http;
  const std::string& template_file = f.chat_template_file;
  const int64_t parallel = f.parallel;
  EngineOptions opt;
  opt.model_path = f.model;
  for (absl::string_view a : absl::StrSplit(f.experts, ',', absl::SkipEmpty())) {
    opt.experts.emplace_back(a);
  }
  if (!f.gpu_memory.empty()) {
    auto bytes = plan::ParseByteSize(f.gpu_memory);
    if (!bytes.ok()) return Fail(bytes.status());
    opt.gpu_memory = *bytes;
  }
  auto cache_slots = cli::ParseAutoOffOrCount(f.expert_cache);
  auto stream_min = cli::ParseAutoOffOrCount(f.prefill_stream);
  if (!cache_slots.ok()) return Fail(cache_slots.status());
  if (!stream_min.ok()) return Fail(stream_min.status());
  opt.expert_cache_slots = *cache_slots;
  opt.prefill_stream_min_tokens = *stream_min;
  opt.backend = f.backend;
  opt.kv_type = f.kv_type;
  opt.pin_experts = f.pin_experts;
  opt.prefix_cache = f.prefix_cache == "on";
  if (!f.cache_memory.empty()) {
    auto bytes = plan::ParseByteSize(f.cache_memory);
    if (!bytes.ok()) return Fail(bytes.status());
    opt.cache_memory = *bytes;
  }
  if (auto bytes = plan::ParseByteSize(f.cache_ram); bytes.ok()) {
    opt.cache_ram = *bytes;
  } else {
    return Fail(bytes.status());
  }
  if (auto bytes = plan::ParseByteSize(f.cache_device); bytes.ok()) {
    opt.cache_device = *bytes;
  } else {
    return Fail(bytes.status());
  }
  opt.threads = f.threads > 0 ? static_cast<int>(f.threads) : AvailableCpuCount();
  opt.n_ctx = static_cast<int>(f.ctx);
  opt.expert_timeout = std::chrono::milliseconds(f.expert_timeout_ms);
  opt.connect_timeout = std::chrono::milliseconds(f.connect_timeout_ms);
  opt.max_sequences = static_cast<int>(f.parallel);
  opt.max_queue = static_cast<int>(f.max_queue);
  opt.step_tokens = static_cast<int>(f.step_tokens);
  // The HTTP front end's limits (http_server.h); dense_flags.cc checked their ranges.
  HttpServerOptions http_opt;
  http_opt.header_timeout = std::chrono::milliseconds(f.http_header_timeout_ms);
  http_opt.body_timeout = std::chrono::milliseconds(f.http_body_timeout_ms);
  http_opt.idle_timeout = std::chrono::milliseconds(f.http_idle_timeout_ms);
  http_opt.write_timeout = std::chrono::milliseconds(f.http_write_timeout_ms);
  http_opt.sse_heartbeat = std::chrono::milliseconds(f.http_sse_heartbeat_ms);
  http_opt.max_requests_per_connection = static_cast<int>(f.http_max_requests_per_connection);
  http_opt.max_connections = static_cast<int>(f.http_max_connections);
  if (auto body_bytes = plan::ParseByteSize(f.max_body_bytes); body_bytes.ok()) {
    http_opt.max_body_bytes = *body_bytes;
  } else {
    return Fail(body_bytes.status());
  }
  http_opt.max_header_bytes = static_cast<uint32_t>(f.http_max_header_bytes);
  http_opt.max_uri_bytes = static_cast<uint32_t>(f.http_max_uri_bytes);
  for (absl::string_view o : absl::StrSplit(f.cors_origin, ',', absl::SkipEmpty())) {
    http_opt.cors_origins.emplace_back(o);
  }
  if (absl::Status s = ValidateHttpOptions(http_opt); !s.ok()) return Fail(s);
  // Security (docs/operations.md "Security"): API keys, TLS of both APIs, TLS to workers.
  const char* env_keys = std::getenv(auth::kApiKeysEnv);
  auto keys = auth::LoadApiKeys(f.api_key_file, env_keys ? env_keys : "");
  if (!keys.ok()) return Fail(keys.status());
  auto tls = auth::ReadTlsFiles(f.tls_cert, f.tls_key, f.tls_ca);
  if (!tls.ok()) return Fail(tls.status());
  tls->server_name = f.tls_server_name;
  auth::TlsPem api_tls = *tls;  // the APIs' server side: no client certificates asked
  api_tls.ca.clear();
  http_opt.tls = api_tls;
  opt.worker_tls = *tls;
  // One registry for the --metrics exposer and HTTP GET /metrics.
  auto registry = std::make_shared<prometheus::Registry>();
  telemetry::ExportBuildInfo(*registry, "moesplit-dense");
  opt.registry = registry;
  std::unique_ptr<ApiAuth> api_auth;
  if (!keys->empty()) api_auth = std::make_unique<ApiAuth>(auth::ApiKeySet(*keys), *registry);
  auto engine = DenseEngine::Create(opt);
  if (!engine.ok()) return Fail(engine.status());
  Info(absl::StrCat("API keys: ", keys->empty() ? "off" : std::to_string(keys->size()),
                    "; TLS: ", auth::ServerTlsMode(api_tls), "; TLS to workers: ",
                    tls->client_tls() ? (tls->server_tls() ? "mutual" : "on (no client certificate)")
                                      : "off"));
  Info(absl::StrCat("dense forward on ", (*engine)->backend_name(), ", ", opt.threads,
                    " threads, context ", (*engine)->n_ctx(), " positions x ", opt.max_sequences,
                    " sequences"));
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
    Warn(absl::StrCat("warning: the model's chat template does not parse (",
                      chat.status().message(), "); using ChatML"));
    chat = ChatPrompt::ForModel((*engine)->model().file(), (*engine)->tokenizer(),
                                chat::ChatMLFallbackTemplate());
    if (!chat.ok()) return Fail(chat.status());
  } else if (!chat->warning().empty()) {
    Warn(absl::StrCat("warning: ", chat->warning()));
  }
  // Readiness: the workers probed every second from now on (readiness.h).
  Readiness readiness((*engine)->remote());
  ServedModel served;
  served.engine = engine->get();
  served.chat = &*chat;
  served.readiness = &readiness;
  SetServedNames(ServedModelName((*engine)->model(), opt.model_path), f.served_model_name,
                 &served);
  served.auth = api_auth.get();
  served.volatile_system = volatile_system.get();
  served.responses_stored = f.responses_store;
  served.responses_ttl_s = f.responses_ttl;

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
    (*engine)->remote()->SetRoundTripObserver(
        [m = expert_metrics, registry](const model::ExpertCallView& call, double round_trip_s,
                                       uint64_t worker_ns) {
          m->ObserveCall(call, round_trip_s, worker_ns);
        });
  }
  // GPU memory: the plan (the same arithmetic as `moesplit plan`) and the
  // device's use, refreshed every 5 s; absent when the dense part is on the
  // CPU (no GPU series at all rather than zeros).
  std::optional<telemetry::GpuMetrics> gpu_metrics_storage;
  std::atomic<bool> stop_gpu_poll{false};
  std::thread gpu_poll;
  if ((*engine)->backend_name() != "cpu") {
    telemetry::GpuMetrics& gpu_metrics =
        gpu_metrics_storage.emplace(*registry, (*engine)->model().n_layer());
    if (const plan::MemoryPlan* memory_plan = (*engine)->memory_plan(); memory_plan != nullptr) {
      gpu_metrics.SetPlan(*memory_plan);
      // The plan every device allocation followed (what `moesplit plan` prints for the same flags).
      for (absl::string_view line : absl::StrSplit(plan::FormatPlanTable(*memory_plan), '\n')) {
        if (!line.empty()) Info(absl::StrCat("plan: ", line));
      }
    }
    const GpuRunnerInfo info = (*engine)->gpu_info();
    gpu_metrics.SetPrefillStreamMinTokens(info.stream_min_tokens);
    Info(absl::StrCat("GPU expert cache: ",
                      info.expert_cache
                          ? absl::StrCat(info.cache_slots, " slots, ", info.cache_bytes, " bytes")
                          : "off"));
    Info(absl::StrCat("streamed prefill: ",
                      info.stream_min_tokens > 0
                          ? absl::StrCat("experts with ", info.stream_min_tokens,
                                         " or more tokens in a step")
                          : "off",
                      " (", info.stream_note, ")"));
    gpu_poll = std::thread([&] {
      while (!stop_gpu_poll.load()) {
        gpu_metrics_storage->SetUsedBytes(QueryGpuMemory().used);
        const GpuRunnerInfo now = (*engine)->gpu_info();
        if (now.expert_cache) gpu_metrics_storage->UpdateExpertCache(now.cache_stats, now.resident_per_layer);
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
  builder.AddListeningPort(grpc_addr, auth::GrpcServerCredentials(api_tls), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return Fail(absl::UnavailableError(absl::StrCat("cannot listen on ", grpc_addr)));
  }
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  ServingStatusPublisher publisher(health, &(*engine)->metrics(), &readiness);
  Info(absl::StrCat("ready on grpc port ", port,
                    http ? absl::StrCat(", http port ", http->port()) : "", ": ",
                    (*engine)->model().hparams().arch, ", ", (*engine)->model().n_layer(),
                    " layers, ", parallel, " sequences, experts ",
                    opt.experts.empty() ? "in-process" : absl::StrJoin(opt.experts, " "),
                    metrics ? absl::StrCat(", metrics on port ", metrics->port()) : "",
                    ", model ", absl::StrJoin(served.ListedNames(), ",")));
  // Refresh the worker metrics and readiness (and notice outages) while serving.
  while (!StopRequested(stop_signals)) {
    if (expert_metrics && (*engine)->remote() != nullptr) {
      expert_metrics->Update((*engine)->remote()->clients());
      expert_metrics->UpdateReplicas((*engine)->remote()->ReplicaStatsSnapshot());
    }
    publisher.Publish();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  DrainOptions drain;
  drain.timeout = std::chrono::milliseconds(f.drain_timeout_ms);
  drain.stop_signals = &stop_signals;
  Drain(drain, **engine, readiness, publisher, http.get());
  http.reset();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  Info("stopped");
  return 0;
}

}  // namespace
}  // namespace moesplit::dense

int main(int argc, char** argv) { return moesplit::dense::Run(argc, argv); }
