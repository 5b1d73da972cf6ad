// Readiness reports, served-name matching and request-log fields: the pure
// parts of the dense service's operations surface (the processes are
// tested in tests/reliability/ops_test.py).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/transport/shm_transport.h"

#include "prometheus/text_serializer.h"
#include "services/dense/inference_service.h"
#include "services/dense/serving_metrics.h"
#include "services/dense/readiness.h"
#include "services/dense/request_log.h"

namespace moesplit::dense {
namespace {

TEST(ReadinessTest, InProcessExpertsAreReadyUntilDraining) {
  Readiness r(nullptr);
  EXPECT_TRUE(r.Check().ready);
  EXPECT_EQ(r.Check().Json(), "{\"status\":\"ok\"}");
  r.BeginDrain();
  const ReadinessReport report = r.Check();
  EXPECT_FALSE(report.ready);
  EXPECT_TRUE(report.draining);
  const auto j = nlohmann::json::parse(report.Json());
  EXPECT_EQ(j["status"], "unavailable");
  EXPECT_EQ(j["draining"], true);
  EXPECT_EQ(j["missing_workers"].size(), 0u);
}

TEST(ReadinessTest, ReportNamesMissingWorkersAndLayers) {
  ReadinessReport r;
  r.ready = false;
  r.down_workers = {{"shm://w1", false, "expert worker shm://w1 stopped"}};
  r.layers_without_worker = {24, 25, 26};
  EXPECT_EQ(r.Summary(),
            "no live expert worker for layers 24-26: shm://w1 (expert worker shm://w1 stopped)");
  const auto j = nlohmann::json::parse(r.Json());
  EXPECT_EQ(j["layers_without_worker"], "24-26");
  EXPECT_EQ(j["missing_workers"][0]["address"], "shm://w1");
  EXPECT_EQ(j["draining"], false);
}

// Experts that answer zeros: readiness needs workers, not their math.
class ZeroExperts : public model::ExpertBackend {
 public:
  absl::Status ComputeInto(const model::ExpertCallView& call, float* partial,
                           uint64_t*) override {
    std::fill(partial, partial + static_cast<size_t>(call.n_tokens) * call.d, 0.0f);
    return absl::OkStatus();
  }
};

transport::WorkerDescription ShardOf(int layer_begin, int layer_end) {
  transport::WorkerDescription d;
  d.model_identity = "model-r";
  d.n_layer = 4;
  d.n_expert = 4;
  d.d = 8;
  d.n_ff = 8;
  d.layer_begin = layer_begin;
  d.layer_end = layer_end;
  d.expert_end = 4;
  d.max_tokens = 8;
  return d;
}

// Polls until `want` holds or a minute passes (far above a probe interval
// on a busy machine); the last value.
template <typename Pred>
bool Eventually(Pred want) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!want()) {
    if (std::chrono::steady_clock::now() > give_up) return want();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// Two layer shards of two replicas each: ready while every shard has a live
// replica (one replica of each down included), not ready, naming the layers,
// when a shard's last replica goes, ready again when one comes back.
TEST(ReadinessTest, ReadyWhileEveryShardHasALiveReplica) {
  ZeroExperts backend;
  const std::string prefix = absl::StrCat("moesplit-test-ready-", getpid());
  std::vector<std::unique_ptr<transport::ShmExpertServer>> servers(4);
  auto start = [&](int i) {
    auto s = transport::ShmExpertServer::Start({absl::StrCat(prefix, "-", i)},
                                               ShardOf(i < 2 ? 0 : 2, i < 2 ? 2 : 4), &backend);
    ASSERT_TRUE(s.ok()) << s.status();
    servers[i] = std::move(*s);
  };
  for (int i = 0; i < 4; ++i) ASSERT_NO_FATAL_FAILURE(start(i));
  transport::ClientOptions o;
  o.model_identity = "model-r";
  std::vector<std::unique_ptr<transport::ExpertClient>> clients;
  for (auto& s : servers) clients.push_back(*transport::OpenExpertClient(s->address(), o));
  auto remote = transport::RemoteExperts::Connect(std::move(clients), 4, 4);
  ASSERT_TRUE(remote.ok()) << remote.status();
  Readiness r(remote->get(), std::chrono::milliseconds(50));
  auto stop = [&](int i) {
    servers[i]->Shutdown();
    servers[i].reset();
  };
  EXPECT_TRUE(r.Check().ready);
  stop(0);
  stop(3);
  ASSERT_TRUE(Eventually([&] { return r.Check().down_workers.size() == 2; }));
  ReadinessReport report = r.Check();
  EXPECT_TRUE(report.ready) << report.Summary();
  EXPECT_TRUE(report.layers_without_worker.empty());
  stop(1);  // shard 0's last replica
  ASSERT_TRUE(Eventually([&] { return !r.Check().ready; }));
  report = r.Check();
  EXPECT_EQ(report.layers_without_worker, (std::vector<int>{0, 1}));
  EXPECT_NE(report.Summary().find("no live expert worker for layers 0-1"), std::string::npos)
      << report.Summary();
  ASSERT_NO_FATAL_FAILURE(start(1));
  EXPECT_TRUE(Eventually([&] { return r.Check().ready; })) << r.Check().Summary();
}

// The inference gateway's endpoint picker reads the queue, the running
// requests and the KV cache fraction under vLLM's names.
TEST(GatewayMetricsTest, EndpointPickerNamesFollowTheServingGauges) {
  prometheus::Registry registry;
  ServingMetrics m(registry);
  m.queue_depth.Set(3);
  m.running_sequences.Set(2);
  m.kv_used_bytes.Set(256);
  m.kv_capacity_bytes.Set(1024);
  m.PublishGatewayGauges();
  const std::string text = prometheus::TextSerializer().Serialize(registry.Collect());
  EXPECT_NE(text.find("\nvllm:num_requests_waiting 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nvllm:num_requests_running 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nvllm:kv_cache_usage_perc 0.25\n"), std::string::npos) << text;
  m.kv_capacity_bytes.Set(0);  // no KV cache: 0, never a division by zero
  m.PublishGatewayGauges();
  const std::string none = prometheus::TextSerializer().Serialize(registry.Collect());
  EXPECT_NE(none.find("\nvllm:kv_cache_usage_perc 0\n"), std::string::npos) << none;
}

TEST(ServedNamesTest, AliasesAndTheDefaultNameAreAccepted) {
  struct Case {
    std::string flag;
    std::vector<std::string> listed;
    std::string id;
  };
  for (const Case& c : std::vector<Case>{{"", {"qwen"}, "qwen"},
                                         {"a", {"a"}, "a"},
                                         {"a,b,a", {"a", "b"}, "a"}}) {
    ServedModel m;
    SetServedNames("qwen", c.flag, &m);
    EXPECT_EQ(m.ListedNames(), c.listed) << c.flag;
    EXPECT_EQ(m.name, c.id) << c.flag;
    for (const std::string& ok : {std::string(), std::string("qwen")}) {
      EXPECT_TRUE(m.CheckName(ok).ok()) << c.flag << " " << ok;
    }
    for (const std::string& n : c.listed) EXPECT_TRUE(m.CheckName(n).ok()) << c.flag << " " << n;
    const absl::Status other = m.CheckName("gpt-4");
    EXPECT_EQ(other.code(), absl::StatusCode::kNotFound) << c.flag;
    EXPECT_NE(std::string(other.message()).find("'" + c.id + "'"), std::string::npos) << other;
  }
}

TEST(RequestLogTest, OutcomesAndFields) {
  EXPECT_EQ(RequestOutcome(absl::OkStatus()), "ok");
  EXPECT_EQ(RequestOutcome(absl::CancelledError("x")), "cancelled");
  EXPECT_EQ(RequestOutcome(absl::InvalidArgumentError("x")), "invalid_argument");
  EXPECT_EQ(RequestOutcome(absl::ResourceExhaustedError("x")), "resource_exhausted");
  EXPECT_EQ(RequestOutcome(ShuttingDownError("x")), "shutting_down");
  RequestRecord r{"cmpl-1", "http", "completions", "m", {}, "ok", "length"};
  r.timings.prompt_tokens = 5;
  r.timings.cached_tokens = 3;
  r.timings.generated_tokens = 11;
  r.timings.ttft_s = 0.25;
  r.timings.decode_s = 2.0;
  r.timings.duration_s = 2.25;
  const std::string line = FormatLogLine(LogFormat::kText, {}, LogLevel::kInfo, "moesplit-dense",
                                         "request", RequestLogFields(r));
  EXPECT_NE(line.find("request id=cmpl-1 api=http endpoint=completions model=m prompt_tokens=5 "
                      "cached_tokens=3 generated_tokens=11 ttft_ms=250 tokens_per_s=5 "
                      "duration_ms=2250 outcome=ok finish_reason=length"),
            std::string::npos)
      << line;
  const auto t = LlamaTimings(r.timings);
  EXPECT_EQ(t["prompt_n"], 5);
  EXPECT_EQ(t["cache_n"], 3);
  EXPECT_DOUBLE_EQ(t["prompt_ms"].get<double>(), 250.0);
  EXPECT_DOUBLE_EQ(t["prompt_per_second"].get<double>(), 20.0);
  EXPECT_EQ(t["predicted_n"], 11);
  EXPECT_DOUBLE_EQ(t["predicted_ms"].get<double>(), 2000.0);
  EXPECT_DOUBLE_EQ(t["predicted_per_second"].get<double>(), 5.0);
}

}  // namespace
}  // namespace moesplit::dense
