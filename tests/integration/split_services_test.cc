// The two services as real processes on loopback: an expert-worker (or two)
// and the dense service, checked against the in-process reference.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "common/model/forward.h"
#include "common/model/model.h"
#include "common/transport/remote_experts.h"
#include "services/expert_worker/expert_tier.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "moesplit/v1/inference.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "common/base/subprocess.h"

namespace moesplit {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ChildProcess = ::moesplit::Subprocess;
using namespace std::chrono_literals;

const std::string kFixtures = MOESPLIT_FIXTURES_DIR;
const std::string kWorker = MOESPLIT_WORKER_BIN;
const std::string kDense = MOESPLIT_DENSE_BIN;
const std::string kCli = MOESPLIT_CLI_BIN;

std::string Model(const std::string& name) { return kFixtures + "/models/" + name + ".gguf"; }

std::string Name(const std::string& tag) { return absl::StrCat("mst-", tag, "-", getpid()); }

// A port no socket on this host is bound to now: the next of this
// process's sequence that binds (one that an outgoing connection's
// ephemeral port or another test's listener holds is skipped).
int FreePort() {
  static int next = 20000 + (getpid() % 2000) * 10;
  for (;;) {
    const int port = next++;
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return port;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool free = bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0;
    close(fd);
    if (free) return port;
  }
}

std::unique_ptr<ChildProcess> StartWorker(const std::vector<std::string>& args) {
  auto p = std::make_unique<ChildProcess>(kWorker, args);
  absl::Status s = p->WaitFor("ready", 30s);
  EXPECT_TRUE(s.ok()) << s;
  return p;
}

std::vector<std::vector<int32_t>> FixturePrompts(const std::string& model) {
  std::ifstream in(kFixtures + "/models/" + model + ".json");
  nlohmann::json j = nlohmann::json::parse(in);
  std::vector<std::vector<int32_t>> out;
  for (const auto& c : j["cases"]) out.push_back(c["tokens"].get<std::vector<int32_t>>());
  return out;
}

// All-position logits of every fixture prompt through `experts`.
std::vector<std::vector<float>> AllLogits(const std::string& model_name,
                                          model::ExpertBackend* experts,
                                          std::shared_ptr<const model::Model> m, ThreadPool* pool) {
  model::Forward forward(m, experts, pool);
  std::vector<std::vector<float>> out;
  for (const auto& prompt : FixturePrompts(model_name)) {
    auto cache = model::SequenceState::Create(m->hparams(), 256);
    EXPECT_TRUE(cache.ok());
    std::vector<float> logits;
    absl::Status s = forward.Eval(prompt, cache->get(), model::LogitsMode::kAll, &logits);
    EXPECT_TRUE(s.ok()) << s;
    out.push_back(std::move(logits));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<transport::RemoteExperts>> Connect(
    const std::vector<std::string>& addrs, const model::Model& m) {
  std::vector<std::unique_ptr<transport::ExpertClient>> clients;
  transport::ClientOptions o;
  o.model_identity = m.file().Identity();
  o.expert_ffn = model::ExpertFfnName(m.hparams().expert_ffn);
  for (const auto& a : addrs) clients.push_back(*transport::OpenExpertClient(a, o));
  return transport::RemoteExperts::Connect(std::move(clients), m.n_layer(),
                                           static_cast<int>(m.hparams().n_expert));
}

bool SameBits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size() ||
        std::memcmp(a[i].data(), b[i].data(), 4 * a[i].size()) != 0) {
      return false;
    }
  }
  return true;
}

class FixtureLogitsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FixtureLogitsTest, IdenticalAcrossLocalShmGrpcAndTwoWorkers) {
  const std::string name = GetParam();
  auto m = model::Model::Open(Model(name));
  ASSERT_TRUE(m.ok()) << m.status();
  ThreadPool pool(2);
  model::InProcessExperts local(model::ExpertStore(*m), &pool);
  const auto want = AllLogits(name, &local, *m, &pool);

  const std::string shm = Name("one-" + name);
  const int port = FreePort();
  auto w = StartWorker({"--model", Model(name), "--listen-shm", shm, "--listen-grpc",
                        absl::StrCat("127.0.0.1:", port), "--threads", "2"});
  for (const std::string& addr : {"shm://" + shm, absl::StrCat("grpc://127.0.0.1:", port)}) {
    auto remote = Connect({addr}, **m);
    ASSERT_TRUE(remote.ok()) << remote.status();
    EXPECT_TRUE(SameBits(want, AllLogits(name, remote->get(), *m, &pool))) << addr;
  }
  // Two workers, split by layers: each layer's experts live on one worker.
  const int n_layer = (*m)->n_layer();
  const std::string a = Name("half-a-" + name), b = Name("half-b-" + name);
  auto wa = StartWorker({"--model", Model(name), "--listen-shm", a, "--shard",
                         absl::StrCat("layers=0-", n_layer / 2 - 1), "--threads", "1"});
  auto wb = StartWorker({"--model", Model(name), "--listen-shm", b, "--shard",
                         absl::StrCat("layers=", n_layer / 2, "-", n_layer - 1), "--threads", "1"});
  auto split = Connect({"shm://" + a, "shm://" + b}, **m);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_TRUE(SameBits(want, AllLogits(name, split->get(), *m, &pool)));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FixtureLogitsTest,
                         ::testing::Values("qwen3moe-tiny-q4_k_m", "qwen2moe-tiny-q8_0",
                                           "qwen35moe-tiny-f16", "qwen35moe-tiny-q8_0",
                                           "gptoss-tiny-f16", "gptoss-tiny-mxfp4_moe",
                                           "deepseek2-tiny-f16", "deepseek2-tiny-q8_0",
                                           "minimaxm2-tiny-f16", "minimaxm2-tiny-q8_0",
                                           "qwen3next-tiny-f16", "qwen3next-tiny-q8_0",
                                           "qwen3next-ssmin-tiny-f16",
                                           "gemma4-tiny-f16", "gemma4-tiny-q8_0",
                                           "qwen3moe-tiny-iq1_s", "qwen3moe-tiny-iq2_xxs",
                                           "qwen3moe-tiny-iq3_s",

                                           // NextN / MTP blocks kept aside (issue #41):
                                           "qwen35moe-mtp-tiny-f16", "qwen35moe-mtp-tiny-q8_0",
                                           "glm4moe-tiny-f16", "glm4moe-tiny-q8_0",
                                           "glm47flash-tiny-f16", "glm47flash-tiny-q8_0",
                                           "qwen3next-mtp-tiny-f16",

                                           // nemotron_h_moe: relu^2 experts, MoE-only layers:
                                           "nemotronh-tiny-f16", "nemotronh-tiny-q8_0"));

// LatentMoE (nemotron_h_moe, Super's shape in small): expert calls carry
// the latent rows, whose width the worker describes; shm and gRPC give the
// in-process bits.
TEST(LatentMoeTest, IdenticalAcrossLocalShmAndGrpc) {
  const std::string path = ::testing::TempDir() + "/split_services_latent.gguf";
  ChildProcess make(kCli, {"make-test-model", "--arch", "nemotron_h_moe", "--layers", "5",
                           "--layer-kinds", "ME*ME", "--d", "128", "--heads", "4", "--kv-heads",
                           "2", "--head-dim", "32", "--experts", "16", "--top-k", "4",
                           "--expert-ffn", "64", "--ffn", "64", "--shared-ffn", "128",
                           "--ssm-k-heads", "2", "--ssm-v-heads", "4", "--ssm-head", "32",
                           "--ssm-state", "16", "--moe-latent", "64", "--vocab", "512", "--type",
                           "Q8_0", "--out", path, "-t", "2"});
  ASSERT_EQ(make.Wait(60s), 0) << make.stderr_text();
  auto m = model::Model::Open(path);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ((*m)->hparams().moe_latent, 64);
  ThreadPool pool(2);
  auto logits = [&](model::ExpertBackend* experts) {
    model::Forward forward(*m, experts, &pool);
    auto cache = model::SequenceState::Create((*m)->hparams(), 64);
    EXPECT_TRUE(cache.ok());
    std::vector<float> out;
    EXPECT_TRUE(forward.Eval({1, 2, 3, 4, 5, 6, 7, 8}, cache->get(), model::LogitsMode::kAll, &out)
                    .ok());
    return out;
  };
  model::InProcessExperts local(model::ExpertStore(*m), &pool);
  const std::vector<float> want = logits(&local);
  const std::string shm = Name("latent");
  const int port = FreePort();
  auto w = StartWorker({"--model", path, "--listen-shm", shm, "--listen-grpc",
                        absl::StrCat("127.0.0.1:", port), "--threads", "2"});
  for (const std::string& addr : {"shm://" + shm, absl::StrCat("grpc://127.0.0.1:", port)}) {
    auto remote = Connect({addr}, **m);
    ASSERT_TRUE(remote.ok()) << remote.status();
    EXPECT_EQ(logits(remote->get()), want) << addr;
  }
  std::remove(path.c_str());
}

// Workers splitting the experts by id (each one's partial sums added by the
// dense side: the same values up to the order of the additions). gpt-oss's
// shards carry their experts' biases.
class ExpertIdSplitTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ExpertIdSplitTest, AgreesClosely) {
  const std::string name = GetParam();
  auto m = model::Model::Open(Model(name));
  ASSERT_TRUE(m.ok());
  ThreadPool pool(2);
  model::InProcessExperts local(model::ExpertStore(*m), &pool);
  const auto want = AllLogits(name, &local, *m, &pool);
  const std::string a = Name("ids-a-" + name), b = Name("ids-b-" + name);
  auto wa = StartWorker({"--model", Model(name), "--listen-shm", a, "--shard", "experts=0-3"});
  auto wb = StartWorker({"--model", Model(name), "--listen-shm", b, "--shard", "experts=4-7"});
  auto split = Connect({"shm://" + a, "shm://" + b}, **m);
  ASSERT_TRUE(split.ok()) << split.status();
  const auto got = AllLogits(name, split->get(), *m, &pool);
  ASSERT_EQ(got.size(), want.size());
  for (size_t c = 0; c < want.size(); ++c) {
    double num = 0, den = 0;
    for (size_t i = 0; i < want[c].size(); ++i) {
      num += (got[c][i] - want[c][i]) * (got[c][i] - want[c][i]);
      den += want[c][i] * want[c][i];
    }
    EXPECT_LT(num / den, 1e-8) << "case " << c;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ExpertIdSplitTest,
                         ::testing::Values("qwen3moe-tiny-q8_0", "gptoss-tiny-mxfp4_moe"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return n;
                         });

// deepseek2 over four gRPC workers: an 8-layer DeepSeek-V3-shaped test model
// (MLA, 3 dense layers, sigmoid router with groups) split by layers, a
// quarter each, is bit-identical to one worker; with the last layers'
// experts split by id over two of them, the partial sums reassociate
// (remote_experts.h), so it agrees closely.
TEST(SplitServicesTest, DeepSeek2OverFourGrpcWorkers) {
  const std::string path = absl::StrCat(testing::TempDir(), "/ds2-split-", getpid(), ".gguf");
  const std::string make = absl::StrCat(
      kCli, " make-test-model --preset deepseek-v3 --layers 8 --d 128 --heads 4 --q-lora 64 ",
      "--kv-lora 64 --head-dim 48 --rope-dims 16 --head-dim-v 32 --experts 16 --expert-ffn 64 ",
      "--ffn 256 --vocab 512 --ctx 4096 --type Q8_0 --threads 1 --out ", path, " 2>/dev/null");
  ASSERT_EQ(std::system(make.c_str()), 0) << make;
  auto m = model::Model::Open(path);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ((*m)->hparams().n_dense_lead, 3);
  ThreadPool pool(2);
  const std::string prompts = "deepseek2-tiny-f16";  // token ids < 499
  auto grpc_workers = [&](const std::vector<std::string>& shards,
                          std::vector<std::unique_ptr<ChildProcess>>* procs) {
    std::vector<std::string> addrs;
    for (const std::string& shard : shards) {
      const int port = FreePort();
      procs->push_back(StartWorker({"--model", path, "--listen-grpc",
                                    absl::StrCat("127.0.0.1:", port), "--shard", shard,
                                    "--threads", "1"}));
      addrs.push_back(absl::StrCat("grpc://127.0.0.1:", port));
    }
    return addrs;
  };
  std::vector<std::unique_ptr<ChildProcess>> one, four, ids;
  auto single = Connect(grpc_workers({"layers=0-7"}, &one), **m);
  ASSERT_TRUE(single.ok()) << single.status();
  const auto want = AllLogits(prompts, single->get(), *m, &pool);
  model::InProcessExperts local(model::ExpertStore(*m), &pool);
  EXPECT_TRUE(SameBits(want, AllLogits(prompts, &local, *m, &pool)));
  auto quarters = Connect(
      grpc_workers({"layers=0-1", "layers=2-3", "layers=4-5", "layers=6-7"}, &four), **m);
  ASSERT_TRUE(quarters.ok()) << quarters.status();
  EXPECT_TRUE(SameBits(want, AllLogits(prompts, quarters->get(), *m, &pool)));
  auto by_ids = Connect(grpc_workers({"layers=0-3", "layers=4-6", "layers=7,experts=0-7",
                                      "layers=7,experts=8-15"},
                                     &ids),
                        **m);
  ASSERT_TRUE(by_ids.ok()) << by_ids.status();
  const auto got = AllLogits(prompts, by_ids->get(), *m, &pool);
  ASSERT_EQ(got.size(), want.size());
  for (size_t c = 0; c < want.size(); ++c) {
    double num = 0, den = 0;
    for (size_t i = 0; i < want[c].size(); ++i) {
      num += (got[c][i] - want[c][i]) * (got[c][i] - want[c][i]);
      den += want[c][i] * want[c][i];
    }
    EXPECT_LT(num / den, 1e-8) << "case " << c;
  }
  std::filesystem::remove(path);
}

TEST(SplitServicesTest, OverlappingAndMissingShardsAreRefused) {
  const std::string model = Model("qwen3moe-tiny-q8_0");
  const std::string a = Name("ov-a"), b = Name("ov-b");
  auto wa = StartWorker({"--model", model, "--listen-shm", a, "--shard", "layers=0-2"});
  auto wb = StartWorker({"--model", model, "--listen-shm", b, "--shard", "layers=2-3"});
  ChildProcess overlap(kDense, {"--model", model, "--experts", "shm://" + a, "--experts",
                                "shm://" + b, "--grpc", absl::StrCat("127.0.0.1:", FreePort())});
  EXPECT_EQ(overlap.Wait(30s), 1);
  EXPECT_THAT(overlap.stderr_text(), HasSubstr("expert shards overlap: expert 0 of layer 2"));
  ChildProcess missing(kDense, {"--model", model, "--experts", "shm://" + a, "--grpc",
                                absl::StrCat("127.0.0.1:", FreePort())});
  EXPECT_EQ(missing.Wait(30s), 1);
  EXPECT_THAT(missing.stderr_text(), HasSubstr("no expert worker owns experts 0-7 of layer 3"));
}

TEST(SplitServicesTest, MismatchedModelIsRefusedOnBothSides) {
  const std::string w = Name("mismatch");
  auto worker = StartWorker({"--model", Model("qwen3moe-tiny-q8_0"), "--listen-shm", w});
  ChildProcess dense(kDense, {"--model", Model("qwen3moe-tiny-q4_0"), "--experts", "shm://" + w,
                              "--grpc", absl::StrCat("127.0.0.1:", FreePort())});
  EXPECT_EQ(dense.Wait(30s), 1);
  EXPECT_THAT(dense.stderr_text(), HasSubstr("serves model"));
  EXPECT_THAT(dense.stderr_text(), HasSubstr("but this dense service runs model"));
  // The worker refuses a connection that skips the Describe check, too.
  auto m = model::Model::Open(Model("qwen3moe-tiny-q4_0"));
  transport::ClientOptions o;
  o.model_identity = (*m)->file().Identity();
  auto client = transport::OpenExpertClient("shm://" + w, o);
  model::ExpertResult r;
  model::ExpertCall call;
  call.d = 256;
  call.token_offsets = {0};
  EXPECT_EQ((*client)->Compute(call, &r).code(), absl::StatusCode::kFailedPrecondition);
}

// A Generate stream to the dense service at 127.0.0.1:port.
struct GenerateResult {
  grpc::Status status;
  std::string text;
  int tokens = 0;
  std::chrono::milliseconds after_first{0};
};

GenerateResult Generate(int port, const std::string& prompt, int max_tokens,
                        const std::function<void()>& after_first_delta = nullptr) {
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                     grpc::InsecureChannelCredentials());
  auto stub = moesplit::v1::Inference::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 60s);
  moesplit::v1::GenerateRequest req;
  req.set_prompt(prompt);
  req.set_max_tokens(max_tokens);
  auto reader = stub->Generate(&ctx, req);
  GenerateResult out;
  moesplit::v1::GenerateResponse resp;
  std::chrono::steady_clock::time_point first;
  while (reader->Read(&resp)) {
    out.text += resp.text();
    out.tokens += resp.token_ids_size();
    if (out.tokens == 1 && after_first_delta) {
      after_first_delta();
      first = std::chrono::steady_clock::now();
    }
  }
  out.status = reader->Finish();
  if (after_first_delta) {
    out.after_first = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - first);
  }
  return out;
}

// Generate, retried every 200 ms for up to 10 s while the service recovers
// (a worker restarted or continued); the last result.
GenerateResult GenerateOnceServing(int port, const std::string& prompt, int max_tokens) {
  GenerateResult r;
  for (int i = 0; i < 50; ++i) {
    r = Generate(port, prompt, max_tokens);
    if (r.status.ok()) break;
    std::this_thread::sleep_for(200ms);
  }
  return r;
}

TEST(SplitServicesTest, KilledWorkerFailsRequestsThenServiceRecovers) {
  const std::string model = Model("qwen3moe-tiny-q8_0");
  const std::string w = Name("kill");
  auto worker = StartWorker({"--model", model, "--listen-shm", w});
  const int port = FreePort();
  ChildProcess dense(kDense, {"--model", model, "--experts", "shm://" + w, "--grpc",
                              absl::StrCat("127.0.0.1:", port), "--expert-timeout", "2000"});
  absl::Status ready = dense.WaitFor("ready", 60s);
  ASSERT_TRUE(ready.ok()) << ready;
  const GenerateResult ok = Generate(port, "The quick brown fox", 8);
  ASSERT_TRUE(ok.status.ok()) << ok.status.error_message();
  EXPECT_EQ(ok.tokens, 8);
  // Kill the worker after the first token of a long generation.
  const GenerateResult broken =
      Generate(port, "The quick brown fox", 10000, [&] { worker->Kill(SIGKILL); });
  EXPECT_EQ(broken.status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << broken.status.error_message();
  EXPECT_THAT(broken.status.error_message(), HasSubstr("shm://" + w));
  // It ended on the failure, not by running out its 10000 tokens (no
  // wall-clock bound: a busy machine must not fail it).
  EXPECT_LT(broken.tokens, 10000);
  std::printf("killed worker: UNAVAILABLE %lld ms after the first token\n",
              static_cast<long long>(broken.after_first.count()));
  // Restart it: the dense service reconnects and serves again.
  worker = StartWorker({"--model", model, "--listen-shm", w});
  const GenerateResult again = GenerateOnceServing(port, "The quick brown fox", 8);
  EXPECT_TRUE(again.status.ok()) << again.status.error_message();
  EXPECT_EQ(again.text, ok.text);
  dense.Signal(SIGTERM);
  EXPECT_EQ(dense.Wait(10s), 0) << dense.stderr_text();
}


// A worker stalled (SIGSTOP) past --expert-timeout fails the requests that
// need it within the timeout, the service stays up, and once the
// worker continues (SIGCONT) the next request is served as before.
TEST(SplitServicesTest, StalledWorkerFailsRequestsWithinTheTimeoutThenRecovers) {
  const std::string model = Model("qwen3moe-tiny-q8_0");
  const std::string w = Name("stall");
  auto worker = StartWorker({"--model", model, "--listen-shm", w});
  const int port = FreePort();
  ChildProcess dense(kDense, {"--model", model, "--experts", "shm://" + w, "--grpc",
                              absl::StrCat("127.0.0.1:", port), "--expert-timeout", "1500"});
  absl::Status ready = dense.WaitFor("ready", 60s);
  ASSERT_TRUE(ready.ok()) << ready;
  const GenerateResult ok = Generate(port, "The quick brown fox", 8);
  ASSERT_TRUE(ok.status.ok()) << ok.status.error_message();
  const GenerateResult stalled =
      Generate(port, "The quick brown fox", 10000, [&] { worker->Signal(SIGSTOP); });
  EXPECT_EQ(stalled.status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << stalled.status.error_message();
  // On the timeout (or sooner: the readiness probe sees the stalled
  // worker's heartbeat stop), never hanging: the request ended on the
  // failure, not by running out its tokens.
  EXPECT_LT(stalled.tokens, 10000);
  std::printf("stalled worker: UNAVAILABLE %lld ms after the first token\n",
              static_cast<long long>(stalled.after_first.count()));
  worker->Signal(SIGCONT);
  const GenerateResult again = GenerateOnceServing(port, "The quick brown fox", 8);
  EXPECT_TRUE(again.status.ok()) << again.status.error_message();
  EXPECT_EQ(again.text, ok.text);
  dense.Signal(SIGTERM);
  EXPECT_EQ(dense.Wait(40s), 0) << dense.stderr_text();
}

// The dense service killed (SIGKILL) while its workers run: the workers
// stay up, and a new dense service connects to the same workers and gives
// the same text.
TEST(SplitServicesTest, KilledDenseServiceLeavesWorkersServingTheNextOne) {
  const std::string model = Model("qwen3moe-tiny-q8_0");
  const std::string shm = Name("dense-kill");
  const int worker_port = FreePort();
  auto worker = StartWorker({"--model", model, "--listen-shm", shm, "--listen-grpc",
                             absl::StrCat("127.0.0.1:", worker_port)});
  std::string first_text;
  for (const std::string& experts :
       {"shm://" + shm, absl::StrCat("grpc://127.0.0.1:", worker_port)}) {
    for (int round = 0; round < 2; ++round) {
      const int port = FreePort();
      ChildProcess dense(kDense, {"--model", model, "--experts", experts, "--grpc",
                                  absl::StrCat("127.0.0.1:", port)});
      absl::Status ready = dense.WaitFor("ready", 60s);
      ASSERT_TRUE(ready.ok()) << experts << " round " << round << ": " << ready;
      // Killed in the middle of a generation the first time, idle the second.
      const GenerateResult r = Generate(port, "The quick brown fox", round == 0 ? 10000 : 8,
                                        round == 0 ? std::function<void()>([&] {
                                          dense.Kill(SIGKILL);
                                        })
                                                   : nullptr);
      if (round == 1) {
        ASSERT_TRUE(r.status.ok()) << experts << ": " << r.status.error_message();
        if (first_text.empty()) first_text = r.text;
        EXPECT_EQ(r.text, first_text) << experts;
        dense.Kill(SIGKILL);
      }
      int status = 0;
      EXPECT_EQ(waitpid(worker->pid(), &status, WNOHANG), 0)
          << "the worker exited: " << experts << " round " << round << "\n"
          << worker->stderr_text();
    }
  }
}


// GET /metrics from 127.0.0.1:port.
std::string Scrape(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const std::string req = "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n";
    (void)!write(fd, req.data(), req.size());
    char buf[8192];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, n);
  }
  close(fd);
  const size_t body = out.find("\r\n\r\n");
  return body == std::string::npos ? out : out.substr(body + 4);
}

// The port after "metrics on port " in a service's ready line.
int MetricsPort(Subprocess& p) {
  const std::string& err = p.stderr_text();
  const size_t at = err.find("metrics on port ");
  return at == std::string::npos ? 0 : std::atoi(err.c_str() + at + 16);
}

// Runs `promtool check metrics` on `text`; its output, and whether it passed.
std::pair<bool, std::string> Promtool(const std::string& text) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/metrics-", getpid(), ".txt");
  std::ofstream(path) << text;
  std::string out;
  FILE* f = popen(absl::StrCat("promtool check metrics < ", path, " 2>&1").c_str(), "r");
  if (f == nullptr) return {false, "cannot run promtool"};
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  const int rc = pclose(f);
  std::remove(path.c_str());
  return {rc == 0, out};
}

TEST(SplitServicesTest, BothServicesExportMetricsThatPromtoolAccepts) {
  const std::string model = Model("qwen3moe-tiny-q8_0");
  const std::string w = Name("metrics");
  auto worker = StartWorker({"--model", model, "--listen-shm", w, "--metrics", "127.0.0.1:0"});
  const int port = FreePort();
  ChildProcess dense(kDense, {"--model", model, "--experts", "shm://" + w, "--grpc",
                              absl::StrCat("127.0.0.1:", port), "--metrics", "127.0.0.1:0"});
  absl::Status ready = dense.WaitFor("ready", 60s);
  ASSERT_TRUE(ready.ok()) << ready;
  ASSERT_TRUE(Generate(port, "The quick brown fox", 4).status.ok());
  std::this_thread::sleep_for(500ms);  // the dense side refreshes client metrics every 200 ms
  const std::string wm = Scrape(MetricsPort(*worker));
  const std::string dm = Scrape(MetricsPort(dense));
  for (const char* name : {"moesplit_expert_calls_total{code=\"OK\",transport=\"shm\"}",
                           "moesplit_expert_call_tokens_bucket", "moesplit_transport_sent_bytes_total",
                           "moesplit_transport_received_bytes_total",
                           "moesplit_expert_call_duration_seconds_bucket",
                           "moesplit_expert_activations_total{expert=",
                           "moesplit_worker_resident_bytes{node="}) {
    EXPECT_THAT(wm, HasSubstr(name)) << "worker metrics lack " << name;
  }
  for (const char* name : {"moesplit_worker_up{worker=\"shm://", "moesplit_expert_client_calls_total",
                           "moesplit_transport_sent_bytes_total{transport=\"shm\"",
                           "moesplit_transport_received_bytes_total"}) {
    EXPECT_THAT(dm, HasSubstr(name)) << "dense metrics lack " << name;
  }
  // The Gateway API Inference Extension's endpoint picker reads vLLM's names
  // by default, colon included; promtool lints colons (kept for recording
  // rules), so those three series are checked here and left out of its run.
  std::string dm_lint_text;
  for (absl::string_view line : absl::StrSplit(dm, '\n')) {
    if (absl::StrContains(line, "vllm:")) continue;
    absl::StrAppend(&dm_lint_text, line, "\n");
  }
  for (const char* name : {"\nvllm:num_requests_waiting ", "\nvllm:num_requests_running ",
                           "\nvllm:kv_cache_usage_perc "}) {
    EXPECT_THAT(dm, HasSubstr(name)) << "dense metrics lack " << name;
  }
  const std::string& dm_lint = dm_lint_text;
  for (const std::string* text : {&wm, &dm_lint}) {
    auto [ok, out] = Promtool(*text);
    EXPECT_TRUE(ok) << out << "\n" << *text;
  }
}

// A worker whose --expert-ram holds two tokens' worth of experts (the rest
// read from the file on demand, evicting as it goes) gives the all-in-RAM
// bits over shm and gRPC, and its tier metrics count the misses.
class TieredWorkerTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TieredWorkerTest, SameBitsOverShmAndGrpcWithMisses) {
  const std::string name = GetParam();
  auto m = model::Model::Open(Model(name));
  ASSERT_TRUE(m.ok()) << m.status();
  ThreadPool pool(2);
  model::InProcessExperts local(model::ExpertStore(*m), &pool);
  const auto want = AllLogits(name, &local, *m, &pool);
  const uint64_t budget = worker::ExpertTier::SlotBytes(**m, 0, (*m)->n_layer()) *
                          (2 * (*m)->hparams().n_expert_used);
  const std::string shm = Name("tier-" + name);
  const int port = FreePort();
  auto w = StartWorker({"--model", Model(name), "--listen-shm", shm, "--listen-grpc",
                        absl::StrCat("127.0.0.1:", port), "--threads", "2", "--expert-ram",
                        absl::StrCat(budget), "--io-threads", "4", "--metrics", "127.0.0.1:0"});
  for (const std::string& addr : {"shm://" + shm, absl::StrCat("grpc://127.0.0.1:", port)}) {
    auto remote = Connect({addr}, **m);
    ASSERT_TRUE(remote.ok()) << remote.status();
    EXPECT_TRUE(SameBits(want, AllLogits(name, remote->get(), *m, &pool))) << addr;
  }
  const std::string wm = Scrape(MetricsPort(*w));
  EXPECT_THAT(wm, HasSubstr(absl::StrCat("moesplit_worker_tier_slots ",
                                         2 * (*m)->hparams().n_expert_used)));
  EXPECT_THAT(wm, HasSubstr("moesplit_worker_tier_read_duration_seconds_bucket"));
  EXPECT_THAT(wm, Not(HasSubstr("moesplit_worker_tier_misses_total 0\n")));
  EXPECT_THAT(wm, HasSubstr("moesplit_worker_tier_read_errors_total 0\n"));
  auto [ok, out] = Promtool(wm);
  EXPECT_TRUE(ok) << out << "\n" << wm;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TieredWorkerTest,
                         ::testing::Values("qwen3moe-tiny-q4_k_m", "gptoss-tiny-mxfp4_moe",
                                           "deepseek2-tiny-q8_0", "qwen35moe-tiny-q8_0"));

}  // namespace
}  // namespace moesplit
