// The two services' flag tables (dense_flags.h, worker_flags.h): defaults,
// and every bad value rejected while parsing, with the message a user sees.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/plan/byte_size.h"
#include "common/plan/memory_plan.h"
#include "common/plan/serving_defaults.h"
#include "services/cli/dense_flags.h"
#include "services/cli/worker_flags.h"

namespace moesplit::cli {
namespace {

using ::testing::HasSubstr;

TEST(DenseServiceFlagsTest, DefaultsStayWhenAbsent) {
  DenseServiceFlags f;
  auto r = ParseDenseServiceFlags({"--model", "m.gguf"}, &f);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, ParsedCommandLine::kRun);
  const DenseServiceFlags d;
  EXPECT_EQ(f.ctx, 4096);
  EXPECT_EQ(f.parallel, 4);
  EXPECT_EQ(f.ctx, d.ctx);
  EXPECT_EQ(f.parallel, d.parallel);
  EXPECT_EQ(f.kv_type, "f16");
  EXPECT_EQ(f.grpc, "127.0.0.1:50051");
  EXPECT_TRUE(f.http.empty());
  EXPECT_EQ(f.prefix_cache, "on");
  EXPECT_TRUE(f.cache_memory.empty());
  EXPECT_EQ(f.cache_ram, "0");
  EXPECT_EQ(f.cache_device, "0");
}

// The defaults are the one set the services, `moesplit plan` and `up` read.
TEST(DenseServiceFlagsTest, DefaultsAreTheServingDefaults) {
  const DenseServiceFlags f;
  EXPECT_EQ(f.ctx, defaults::kContext);
  EXPECT_EQ(f.parallel, defaults::kParallel);
  EXPECT_EQ(f.step_tokens, defaults::kStepTokens);
  EXPECT_EQ(f.max_queue, defaults::kMaxQueue);
  EXPECT_EQ(f.kv_type, defaults::kKvType);
  EXPECT_EQ(f.http_max_connections, defaults::kHttpMaxConnections);
  EXPECT_EQ(f.responses_store, defaults::kResponsesStored);
  EXPECT_EQ(f.responses_ttl, defaults::kResponsesTtlSeconds);
  EXPECT_EQ(f.http_sse_heartbeat_ms, defaults::kHttpSseHeartbeatMs);
  absl::StatusOr<uint64_t> body = plan::ParseByteSize(f.max_body_bytes);
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(*body, defaults::kHttpMaxBodyBytes);
  const plan::PlanOptions po;
  EXPECT_EQ(po.n_ubatch, defaults::kStepTokens);
}

TEST(DenseServiceFlagsTest, ParsesEveryFlag) {
  DenseServiceFlags f;
  auto r = ParseDenseServiceFlags({"--model=m.gguf",
                                   "--experts",
                                   "shm://w0",
                                   "--experts=grpc://10.0.0.2:50061",
                                   "--grpc",
                                   "0.0.0.0:1",
                                   "--http",
                                   "[::1]:8080",
                                   "--metrics",
                                   "127.0.0.1:0",
                                   "--parallel",
                                   "8",
                                   "--max-queue",
                                   "0",
                                   "--step-tokens",
                                   "64",
                                   "--threads",
                                   "3",
                                   "--ctx",
                                   "8192",
                                   "--expert-timeout",
                                   "5",
                                   "--connect-timeout",
                                   "0",
                                   "--backend",
                                   "cuda",
                                   "--gpu-memory",
                                   "7.5G",
                                   "--kv-type",
                                   "q8_0",
                                   "--expert-cache",
                                   "off",
                                   "--prefill-stream",
                                   "32",
                                   "--pin-experts",
                                   "--prefix-cache",
                                   "off",
                                   "--cache-memory",
                                   "2GiB",
                                   "--cache-ram=16G",
                                   "--cache-device",
                                   "512MiB",
                                   "--responses-store",
                                   "0",
                                   "--responses-ttl=60",
                                   "--http-sse-heartbeat-ms",
                                   "0"},
                                  &f);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(f.http_sse_heartbeat_ms, 0);  // off
  EXPECT_EQ(f.responses_store, 0);
  EXPECT_EQ(f.responses_ttl, 60);
  EXPECT_EQ(f.experts, "shm://w0,grpc://10.0.0.2:50061");
  EXPECT_EQ(f.http, "[::1]:8080");
  EXPECT_EQ(f.parallel, 8);
  EXPECT_EQ(f.ctx, 8192);
  EXPECT_EQ(f.backend, "cuda");
  EXPECT_EQ(f.gpu_memory, "7.5G");
  EXPECT_EQ(f.kv_type, "q8_0");
  EXPECT_EQ(*ParseAutoOffOrCount(f.expert_cache), 0);
  EXPECT_EQ(*ParseAutoOffOrCount(f.prefill_stream), 32);
  EXPECT_EQ(*ParseAutoOffOrCount("auto"), -1);
  EXPECT_TRUE(f.pin_experts);
  EXPECT_EQ(f.prefix_cache, "off");
  EXPECT_EQ(f.cache_memory, "2GiB");
  EXPECT_EQ(f.cache_ram, "16G");
  EXPECT_EQ(f.cache_device, "512MiB");
}

struct BadCase {
  std::vector<std::string> args;
  std::string message;  // a substring of the error
};

TEST(DenseServiceFlagsTest, BadValuesFailWhileParsing) {
  const std::vector<BadCase> cases = {
      {{}, "--model is required"},
      {{"--model", "m", "extra"}, "unexpected argument 'extra'"},
      {{"--model", "m", "--http", "localhost"},
       "flag --http: expected HOST:PORT, got 'localhost' (no ':PORT')"},
      {{"--model", "m", "--http", "127.0.0.1:99999"}, "not a number in 0..65535"},
      {{"--model", "m", "--grpc", ":50051"}, "flag --grpc: expected HOST:PORT"},
      {{"--model", "m", "--metrics", "x"}, "flag --metrics: expected HOST:PORT"},
      {{"--model", "m", "--parallel", "0"}, "flag --parallel must be in 1..1024, got 0"},
      {{"--model", "m", "--prefix-cache", "maybe"}, "--prefix-cache"},
      {{"--model", "m", "--cache-memory", "0"}, "more than 0 bytes"},
      {{"--model", "m", "--cache-ram", "12 parsecs"}, "unknown unit"},
      {{"--model", "m", "--cache-device", "lots"}, "--cache-device"},
      {{"--model", "m", "--max-queue", "-1"}, "flag --max-queue must be in 0..100000"},
      {{"--model", "m", "--step-tokens", "0"}, "flag --step-tokens must be in 1.."},
      {{"--model", "m", "--ctx", "8"}, "flag --ctx must be in 16..16777216, got 8"},
      {{"--model", "m", "--threads", "-2"}, "flag --threads must be in 0..1024"},
      {{"--model", "m", "--expert-timeout", "0"}, "flag --expert-timeout must be in 1.."},
      {{"--model", "m", "--http-sse-heartbeat-ms", "-1"},
       "flag --http-sse-heartbeat-ms must be in 0..86400000, got -1"},
      {{"--model", "m", "--backend", "gpu"},
       "flag --backend must be one of auto, cpu, cuda; got 'gpu'"},
      {{"--model", "m", "--kv-type", "q5_1"}, "flag --kv-type must be one of f16, q8_0, q4_0"},
      {{"--model", "m", "--gpu-memory", "8XB"}, "flag --gpu-memory: bad size '8XB'"},
      {{"--model", "m", "--gpu-memory", "0"}, "flag --gpu-memory: must be more than 0 bytes"},
      {{"--model", "m", "--expert-cache", "-1"},
       "flag --expert-cache: must be auto, off or a positive number, got '-1'"},
      {{"--model", "m", "--prefill-stream", "many"}, "flag --prefill-stream: must be auto, off"},
      {{"--model", "m", "--experts", "tcp://x:1"},
       "'tcp://x:1' is not shm://NAME or grpc://HOST:PORT"},
      {{"--model", "m", "--experts", "grpc://host"}, "flag --experts: expected HOST:PORT"},
      {{"--model", "m", "--experts", "shm://a b"}, "shm name 'a b'"},
      {{"--model", "m", "--chat-template-file", "/nonexistent/t.jinja"},
       "flag --chat-template-file: cannot read '/nonexistent/t.jinja'"},
      {{"--model", "m", "--gpu-memroy", "8GiB"},
       "unknown flag --gpu-memroy (did you mean --gpu-memory?)"},
      {{"--model", "m", "--kvtype", "q8_0"}, "(did you mean --kv-type?)"},
      {{"--model", "m", "--parallel"}, "flag --parallel needs a value"},
  };
  for (const BadCase& c : cases) {
    DenseServiceFlags f;
    auto r = ParseDenseServiceFlags(c.args, &f);
    ASSERT_FALSE(r.ok()) << testing::PrintToString(c.args);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(c.message))
        << testing::PrintToString(c.args);
  }
}

TEST(DenseServiceFlagsTest, HelpAndVersionExit) {
  for (const char* a : {"--help", "-h", "--version"}) {
    DenseServiceFlags f;
    auto r = ParseDenseServiceFlags({"--parallel", "0", a}, &f);
    ASSERT_TRUE(r.ok()) << a << ": " << r.status();
    EXPECT_EQ(*r, ParsedCommandLine::kExit) << a;
  }
}

TEST(DenseServiceFlagsTest, ExceptLeavesTheNamesToTheCaller) {
  DenseServiceFlags f;
  FlagParser p;
  AddDenseServiceFlags(p, &f, {"model", "threads"});
  EXPECT_FALSE(p.Has("model"));
  EXPECT_FALSE(p.Has("threads"));
  EXPECT_TRUE(p.Has("gpu-memory"));
  EXPECT_TRUE(p.Parse({"--ctx", "256"}).ok());  // no --model needed now
}

TEST(ExpertWorkerFlagsTest, DefaultsAndEveryFlag) {
  ExpertWorkerFlags f;
  auto r = ParseExpertWorkerFlags({"--model",         "m",
                                   "--listen-shm",    "w0",
                                   "--listen-grpc",   "0.0.0.0:50061",
                                   "--shard",         "layers=0-3,experts=0-63",
                                   "--threads",       "2",
                                   "--numa",          "off",
                                   "--expert-memory", "private",
                                   "--expert-ram",    "6GiB",
                                   "--io-threads",    "32",
                                   "--metrics",       "0.0.0.0:9401",
                                   "--max-tokens",    "64",
                                   "--worker-id",     "a",
                                   "--idle-timeout",  "5"},
                                  &f);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(f.shard, "layers=0-3,experts=0-63");
  EXPECT_EQ(f.numa, "off");
  EXPECT_EQ(f.max_tokens, 64);
  EXPECT_EQ(*ParseExpertRam(f.expert_ram), 6ull << 30);
  EXPECT_EQ(f.io_threads, 32);
  const ExpertWorkerFlags d;
  EXPECT_EQ(*ParseExpertRam(d.expert_ram), 0u);  // auto
  EXPECT_EQ(d.io_threads, 16);
  EXPECT_EQ(d.max_tokens, 512);
  EXPECT_EQ(d.numa, "auto");
  EXPECT_EQ(d.threads, 0);
}

TEST(ExpertWorkerFlagsTest, BadValuesFailWhileParsing) {
  const std::vector<BadCase> cases = {
      {{"--listen-shm", "w"}, "--model is required"},
      {{"--model", "m"}, "give --listen-shm NAME and/or --listen-grpc HOST:PORT"},
      {{"--model", "m", "--listen-shm", "a/b"}, "flag --listen-shm: 'a/b': use 1-64 characters"},
      {{"--model", "m", "--listen-grpc", "50061"}, "flag --listen-grpc: expected HOST:PORT"},
      {{"--model", "m", "--listen-shm", "w", "--shard", "layers=x"},
       "--shard layers=x: expected A-B with 0 <= A <= B"},
      {{"--model", "m", "--listen-shm", "w", "--shard", "rows=1"}, "unknown key 'rows'"},
      {{"--model", "m", "--listen-shm", "w", "--numa", "all"},
       "--numa must be auto, off or a node number, got 'all'"},
      {{"--model", "m", "--listen-shm", "w", "--expert-memory", "huge"},
       "flag --expert-memory must be one of auto, shared, private; got 'huge'"},
      {{"--model", "m", "--listen-shm", "w", "--expert-ram", "lots"}, "flag --expert-ram"},
      {{"--model", "m", "--listen-shm", "w", "--expert-ram", "0"},
       "must be auto or more than 0 bytes"},
      {{"--model", "m", "--listen-shm", "w", "--max-tokens", "0"},
       "flag --max-tokens must be in 1..65536, got 0"},
      {{"--model", "m", "--listen-shm", "w", "--threads", "x"},
       "flag --threads expects an integer, got 'x'"},
      {{"--model", "m", "--listen-shm", "w", "--listen-shmm", "x"}, "(did you mean --listen-shm?)"},
  };
  for (const BadCase& c : cases) {
    ExpertWorkerFlags f;
    auto r = ParseExpertWorkerFlags(c.args, &f);
    ASSERT_FALSE(r.ok()) << testing::PrintToString(c.args);
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(c.message))
        << testing::PrintToString(c.args);
  }
}

}  // namespace
}  // namespace moesplit::cli
