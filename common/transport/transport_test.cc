#include <sys/stat.h>
#include <unistd.h>

#include <boost/interprocess/shared_memory_object.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/transport/expert_transport.h"
#include "common/transport/grpc_transport.h"
#include "common/transport/remote_experts.h"
#include "common/transport/shm_transport.h"
#include "common/transport/worker_liveness.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moesplit::transport {
namespace {

using ::testing::HasSubstr;

constexpr int kD = 64;

// A deterministic stand-in for an expert store: expert e maps h to
// h * (e + 1) + layer, weighted and summed over the token's experts.
class FakeExperts : public model::ExpertBackend {
 public:
  absl::Status ComputeInto(const model::ExpertCallView& call, float* partial,
                           uint64_t* worker_ns) override {
    calls.fetch_add(1);
    if (call.layer < 0 || call.layer >= 4) {
      return absl::InvalidArgumentError(absl::StrCat("layer ", call.layer, " out of range"));
    }
    std::fill(partial, partial + static_cast<size_t>(call.n_tokens) * call.d, 0.0f);
    for (int t = 0; t < call.n_tokens; ++t) {
      for (uint32_t k = call.token_offsets[t]; k < call.token_offsets[t + 1]; ++k) {
        for (int i = 0; i < call.d; ++i) {
          partial[t * call.d + i] +=
              call.weights[k] * (call.hidden[t * call.d + i] * (call.expert_ids[k] + 1) + call.layer);
        }
      }
    }
    if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    while (hold.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    finished.fetch_add(1);
    return absl::OkStatus();
  }
  int delay_ms = 0;
  std::atomic<bool> hold{false};  // calls wait while set
  std::atomic<int> calls{0};  // Compute calls, also refused ones
  std::atomic<int> finished{0};  // calls computed
};

// Polls `done` until it holds or a minute has passed (a bound no passing run
// comes near, however busy the machine); its last value.
template <typename Pred>
bool Eventually(Pred done) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!done()) {
    if (std::chrono::steady_clock::now() > give_up) return done();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

WorkerDescription Description(std::string identity = "model-a") {
  WorkerDescription d;
  d.model_identity = std::move(identity);
  d.model_name = "fake";
  d.architecture = "qwen3moe";
  d.n_layer = 4;
  d.n_expert = 8;
  d.d = kD;
  d.n_ff = 16;
  d.layer_end = 4;
  d.expert_end = 8;
  d.max_tokens = 32;
  d.worker_id = "w0";
  return d;
}

model::ExpertCall MakeCall(int n_tokens, int layer, uint64_t id) {
  model::ExpertCall c;
  c.call_id = id;
  c.layer = layer;
  c.n_tokens = n_tokens;
  c.d = kD;
  for (int i = 0; i < n_tokens * kD; ++i) c.hidden.push_back(std::sin(0.37f * i + id));
  c.token_offsets.push_back(0);
  for (int t = 0; t < n_tokens; ++t) {
    for (int k = 0; k < 2; ++k) {
      c.expert_ids.push_back((t + 3 * k) % 8);
      c.weights.push_back(0.25f + 0.5f * k + 0.01f * t);
    }
    c.token_offsets.push_back(c.expert_ids.size());
  }
  return c;
}

std::string UniqueName(const char* what) {
  return absl::StrCat("moesplit-test-", what, "-", getpid());
}

// The timeout is far above a call's time on a busy machine: only
// StalledWorkerTimesOut, which sets its own, is about it.
ClientOptions Options(std::string identity = "model-a") {
  ClientOptions o;
  o.model_identity = std::move(identity);
  o.timeout = std::chrono::milliseconds(30000);
  o.backoff_min = std::chrono::milliseconds(10);
  o.backoff_max = std::chrono::milliseconds(50);
  return o;
}

TEST(TransportTest, AllTransportsAreBitIdentical) {
  FakeExperts backend;
  auto shm = ShmExpertServer::Start({UniqueName("same")}, Description(), &backend);
  ASSERT_TRUE(shm.ok()) << shm.status();
  auto grpc = GrpcExpertServer::Start({"127.0.0.1:0"}, Description(), &backend);
  ASSERT_TRUE(grpc.ok()) << grpc.status();
  auto shm_client = OpenExpertClient((*shm)->address(), Options());
  auto grpc_client = OpenExpertClient((*grpc)->address(), Options());
  ASSERT_TRUE(shm_client.ok() && grpc_client.ok());
  for (int n : {1, 7, 32}) {
    for (int layer : {0, 3}) {
      const model::ExpertCall call = MakeCall(n, layer, 100 + n);
      model::ExpertResult local, via_shm, via_grpc;
      ASSERT_TRUE(backend.Compute(call, &local).ok());
      ASSERT_TRUE((*shm_client)->Compute(call, &via_shm).ok());
      auto s = (*grpc_client)->Compute(call, &via_grpc);
      ASSERT_TRUE(s.ok()) << s;
      ASSERT_EQ(local.partial.size(), via_shm.partial.size());
      EXPECT_EQ(0, std::memcmp(local.partial.data(), via_shm.partial.data(), 4 * local.partial.size()))
          << "shm n=" << n;
      ASSERT_EQ(local.partial.size(), via_grpc.partial.size());
      EXPECT_EQ(0, std::memcmp(local.partial.data(), via_grpc.partial.data(), 4 * local.partial.size()))
          << "grpc n=" << n;
      EXPECT_EQ(via_shm.call_id, call.call_id);
      EXPECT_EQ(via_grpc.call_id, call.call_id);
    }
  }
  auto desc = (*shm_client)->Describe();
  ASSERT_TRUE(desc.ok());
  EXPECT_EQ(desc->worker_id, "w0");
  EXPECT_EQ(desc->n_expert, 8);
  EXPECT_EQ((*shm_client)->counters().calls, 6u);
  EXPECT_GT((*grpc_client)->counters().bytes_received, 0u);
}

// Both transports report the worker's own time on a call: at least the
// backend's 30 ms, at most the round trip the caller saw.
TEST(TransportTest, ResultsCarryTheWorkersOwnTime) {
  FakeExperts backend;
  backend.delay_ms = 30;
  auto shm = ShmExpertServer::Start({UniqueName("busy")}, Description(), &backend);
  ASSERT_TRUE(shm.ok()) << shm.status();
  auto grpc = GrpcExpertServer::Start({"127.0.0.1:0"}, Description(), &backend);
  ASSERT_TRUE(grpc.ok()) << grpc.status();
  for (const std::string& address : {(*shm)->address(), (*grpc)->address()}) {
    auto client = OpenExpertClient(address, Options());
    ASSERT_TRUE(client.ok()) << client.status();
    model::ExpertResult r;
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE((*client)->Compute(MakeCall(3, 1, 5), &r).ok());
    const uint64_t round_trip_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                       std::chrono::steady_clock::now() - t0)
                                       .count();
    EXPECT_GE(r.worker_ns, 30'000'000u) << address;
    EXPECT_LE(r.worker_ns, round_trip_ns) << address;
  }
}

TEST(TransportTest, PipelinedCallsComeBackInOrder) {
  FakeExperts backend;
  auto shm = ShmExpertServer::Start({UniqueName("pipe")}, Description(), &backend);
  ASSERT_TRUE(shm.ok());
  auto grpc = GrpcExpertServer::Start({"127.0.0.1:0"}, Description(), &backend);
  ASSERT_TRUE(grpc.ok());
  for (const std::string& addr : {(*shm)->address(), (*grpc)->address()}) {
    auto client = OpenExpertClient(addr, Options());
    ASSERT_TRUE(client.ok());
    std::vector<uint64_t> tickets;
    for (int i = 0; i < ExpertClient::kMaxInFlight; ++i) {
      auto t = (*client)->Submit(MakeCall(2, i % 4, i));
      ASSERT_TRUE(t.ok()) << addr << " " << t.status();
      tickets.push_back(*t);
    }
    EXPECT_FALSE((*client)->Submit(MakeCall(1, 0, 99)).ok()) << addr << ": ring overflow accepted";
    // Results in call order: call i's own (its layer is in every value).
    for (int i = 0; i < ExpertClient::kMaxInFlight; ++i) {
      model::ExpertResult want;
      ASSERT_TRUE(backend.Compute(MakeCall(2, i % 4, i), &want).ok());
      std::vector<float> got(want.partial.size());
      ASSERT_TRUE((*client)->Wait(tickets[i], got.data(), got.size(), nullptr).ok()) << addr;
      EXPECT_EQ(got, want.partial) << addr << " call " << i;
      // A size that is not the call's is refused.
      if (i == 0) {
        auto t = (*client)->Submit(MakeCall(2, 0, 50));
        ASSERT_TRUE(t.ok());
        tickets.push_back(*t);
      }
    }
    std::vector<float> wrong(3);
    EXPECT_EQ((*client)->Wait(tickets.back(), wrong.data(), wrong.size(), nullptr).code(),
              absl::StatusCode::kInternal)
        << addr;
  }
}

TEST(TransportTest, WorkerErrorsReachTheCaller) {
  FakeExperts backend;
  auto shm = ShmExpertServer::Start({UniqueName("err")}, Description(), &backend);
  auto grpc = GrpcExpertServer::Start({"127.0.0.1:0"}, Description(), &backend);
  ASSERT_TRUE(shm.ok() && grpc.ok());
  for (const std::string& addr : {(*shm)->address(), (*grpc)->address()}) {
    auto client = OpenExpertClient(addr, Options());
    model::ExpertResult r;
    absl::Status s = (*client)->Compute(MakeCall(1, 9, 1), &r);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << addr << " " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("layer 9 out of range")) << addr;
    // The connection stays usable.
    EXPECT_TRUE((*client)->Compute(MakeCall(1, 1, 2), &r).ok()) << addr;
  }
}

TEST(TransportTest, OversizedCallIsRefusedBeforeSending) {
  FakeExperts backend;
  auto shm = ShmExpertServer::Start({UniqueName("big")}, Description(), &backend);
  ASSERT_TRUE(shm.ok());
  auto client = OpenExpertClient((*shm)->address(), Options());
  model::ExpertResult r;
  absl::Status s = (*client)->Compute(MakeCall(33, 0, 1), &r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("n_tokens 33 (max 32)"));
}

// A worker advertising max_tokens 32 refuses a 33-token call on every
// transport, before computing anything, and the connection stays usable.
// The shm client refuses it before sending (the connection's geometry is
// the advertised maximum); over gRPC the server has to.
TEST(TransportTest, CallOverTheAdvertisedMaxTokensIsRefusedOnEveryTransport) {
  FakeExperts backend;
  auto shm = ShmExpertServer::Start({UniqueName("over")}, Description(), &backend);
  auto grpc = GrpcExpertServer::Start({"127.0.0.1:0"}, Description(), &backend);
  ASSERT_TRUE(shm.ok() && grpc.ok());
  for (const std::string& addr : {(*shm)->address(), (*grpc)->address()}) {
    ClientOptions o = Options();
    o.max_tokens = 64;  // a client that would send more than the worker takes
    auto client = OpenExpertClient(addr, o);
    ASSERT_TRUE(client.ok()) << client.status();
    auto desc = (*client)->Describe();
    ASSERT_TRUE(desc.ok()) << desc.status();
    EXPECT_EQ(desc->max_tokens, 32) << addr;
    const int calls_before = backend.calls.load();
    model::ExpertResult r;
    absl::Status s = (*client)->Compute(MakeCall(33, 0, 7), &r);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << addr << " " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("33")) << addr << " " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("32")) << addr << " " << s;
    EXPECT_EQ(backend.calls.load(), calls_before) << addr << ": the backend computed it";
    // The connection stays usable, and 32 tokens still pass.
    s = (*client)->Compute(MakeCall(32, 0, 8), &r);
    EXPECT_TRUE(s.ok()) << addr << " " << s;
    EXPECT_EQ(r.partial.size(), static_cast<size_t>(32 * kD)) << addr;
  }
}

TEST(TransportTest, MismatchedModelIsRefusedOnBothTransports) {
  FakeExperts backend;
  auto shm = ShmExpertServer::Start({UniqueName("ident")}, Description("model-a"), &backend);
  auto grpc = GrpcExpertServer::Start({"127.0.0.1:0"}, Description("model-a"), &backend);
  ASSERT_TRUE(shm.ok() && grpc.ok());
  for (const std::string& addr : {(*shm)->address(), (*grpc)->address()}) {
    auto client = OpenExpertClient(addr, Options("model-b"));
    model::ExpertResult r;
    absl::Status s = (*client)->Compute(MakeCall(1, 0, 1), &r);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << addr << " " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("model-a")) << addr;
    EXPECT_THAT(std::string(s.message()), HasSubstr("model-b")) << addr;
  }
}

// A worker whose expert math is not the model's (say an older binary that
// computes SiLU experts for a gpt-oss model) is refused at Describe time on
// both transports; the description carries the math across them.
TEST(TransportTest, MismatchedExpertFfnIsRefusedOnBothTransports) {
  FakeExperts backend;
  WorkerDescription d = Description();
  d.expert_ffn = "swiglu";
  auto shm = ShmExpertServer::Start({UniqueName("ffn")}, d, &backend);
  auto grpc = GrpcExpertServer::Start({"127.0.0.1:0"}, d, &backend);
  ASSERT_TRUE(shm.ok() && grpc.ok());
  for (const std::string& addr : {(*shm)->address(), (*grpc)->address()}) {
    ClientOptions o = Options();
    o.expert_ffn = "swiglu_oai(alpha=1.702,limit=7)";
    auto client = OpenExpertClient(addr, o);
    model::ExpertResult r;
    absl::Status s = (*client)->Compute(MakeCall(1, 0, 1), &r);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << addr << " " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("swiglu_oai")) << addr;
    o.expert_ffn = "swiglu";
    auto same = OpenExpertClient(addr, o);
    EXPECT_TRUE((*same)->Compute(MakeCall(1, 0, 1), &r).ok()) << addr;
    auto described = (*same)->Describe();
    ASSERT_TRUE(described.ok());
    EXPECT_EQ(described->expert_ffn, "swiglu");
  }
}

TEST(TransportTest, DeadWorkerGivesUnavailableThenRecovers) {
  const std::string name = UniqueName("dead");
  FakeExperts backend;
  auto server = ShmExpertServer::Start({name}, Description(), &backend);
  ASSERT_TRUE(server.ok());
  auto client = OpenExpertClient("shm://" + name, Options());
  model::ExpertResult r;
  ASSERT_TRUE((*client)->Compute(MakeCall(1, 0, 1), &r).ok());
  (*server)->Shutdown();
  server->reset();
  absl::Status s = (*client)->Compute(MakeCall(1, 0, 2), &r);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("shm://" + name));
  EXPECT_FALSE((*client)->healthy());
  auto again = ShmExpertServer::Start({name}, Description(), &backend);
  ASSERT_TRUE(again.ok()) << again.status();
  absl::Status last;
  EXPECT_TRUE(Eventually([&] {
    last = (*client)->Compute(MakeCall(1, 0, 3), &r);
    return last.ok();
  })) << last;
  EXPECT_TRUE((*client)->healthy());
}

// A segment of the worker's name that another user owns, or that others may
// read, is refused before it is mapped (the worker checks the dense side's
// connection segments the same way).
TEST(TransportTest, RefusesASegmentOfAnotherUserOrWithOpenMode) {
  namespace bip = boost::interprocess;
  for (const bool foreign : {false, true}) {
    const std::string name = UniqueName(foreign ? "foreign" : "open-mode");
    bip::permissions perm;
    perm.set_permissions(foreign ? 0600 : 0644);
    {
      bip::shared_memory_object seg(bip::create_only, name.c_str(), bip::read_write, perm);
      seg.truncate(4096);
      fchmod(seg.get_mapping_handle().handle, foreign ? 0600 : 0644);  // past the umask
      if (foreign && (geteuid() != 0 || fchown(seg.get_mapping_handle().handle, 65534, 65534) != 0)) {
        bip::shared_memory_object::remove(name.c_str());
        continue;  // only root can give a segment away
      }
    }
    auto client = OpenExpertClient("shm://" + name, Options());
    ASSERT_TRUE(client.ok()) << client.status();
    const auto desc = (*client)->Describe();
    bip::shared_memory_object::remove(name.c_str());
    ASSERT_FALSE(desc.ok());
    EXPECT_THAT(std::string(desc.status().message()),
                HasSubstr(foreign ? "belongs to uid 65534" : "has mode 0644")) << desc.status();
  }
}

// A worker that takes a call and does not answer: the caller gets
// UNAVAILABLE once its 200 ms are up, while the worker still holds the call
// (it is released only afterwards; a client that waited for it would get the
// answer, after a minute, and fail here).
TEST(TransportTest, StalledWorkerTimesOut) {
  FakeExperts backend;
  auto shm = ShmExpertServer::Start({UniqueName("slow")}, Description(), &backend);
  auto grpc = GrpcExpertServer::Start({"127.0.0.1:0"}, Description(), &backend);
  ASSERT_TRUE(shm.ok() && grpc.ok());
  for (const std::string& addr : {(*shm)->address(), (*grpc)->address()}) {
    ClientOptions o = Options();
    o.timeout = std::chrono::milliseconds(200);
    auto client = OpenExpertClient(addr, o);
    ASSERT_TRUE((*client)->Describe().ok());
    const int finished = backend.finished.load();
    backend.hold = true;
    std::atomic<bool> returned{false};
    std::thread release([&] {
      Eventually([&] { return returned.load(); });
      backend.hold = false;
    });
    model::ExpertResult r;
    const auto start = std::chrono::steady_clock::now();
    absl::Status s = (*client)->Compute(MakeCall(1, 0, 1), &r);
    const auto elapsed = std::chrono::steady_clock::now() - start;
    const bool worker_answered = backend.finished.load() != finished;
    returned = true;
    release.join();
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << addr << " " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("did not answer within 200 ms")) << addr;
    EXPECT_FALSE(worker_answered) << addr << ": the call waited for the stalled worker";
    EXPECT_GE(elapsed, std::chrono::milliseconds(200)) << addr << ": gave up before its timeout";
  }
}

TEST(TransportTest, SecondWorkerOnTheSameNameIsRefused) {
  FakeExperts backend;
  const std::string name = UniqueName("twice");
  auto first = ShmExpertServer::Start({name}, Description(), &backend);
  ASSERT_TRUE(first.ok());
  auto second = ShmExpertServer::Start({name}, Description(), &backend);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kAlreadyExists);
}

TEST(TransportTest, BadAddressesAreRejected) {
  for (const char* bad : {"tcp://x", "shm://", "shm://a/b", "grpc://", "experts"}) {
    auto c = OpenExpertClient(bad, Options());
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  auto missing = OpenExpertClient("shm://" + UniqueName("nobody"), Options());
  ASSERT_TRUE(missing.ok());
  model::ExpertResult r;
  absl::Status s = (*missing)->Compute(MakeCall(1, 0, 1), &r);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.message()), HasSubstr("is not running"));
}


WorkerDescription Shard(int lb, int le, int eb, int ee, std::string id) {
  WorkerDescription d = Description();
  d.layer_begin = lb;
  d.layer_end = le;
  d.expert_begin = eb;
  d.expert_end = ee;
  d.worker_id = std::move(id);
  return d;
}

// Passes everything to another client and keeps the worker time of each
// result it collects, in order (what RemoteExperts adds up).
class RecordingClient : public ExpertClient {
 public:
  RecordingClient(std::unique_ptr<ExpertClient> inner, std::vector<uint64_t>* worker_ns)
      : inner_(std::move(inner)), worker_ns_(worker_ns) {}
  absl::StatusOr<uint64_t> Submit(const model::ExpertCallView& call) override {
    return inner_->Submit(call);
  }
  absl::Status Wait(uint64_t ticket, float* partial, size_t n, uint64_t* worker_ns) override {
    uint64_t ns = 0;
    absl::Status s = inner_->Wait(ticket, partial, n, &ns);
    if (s.ok()) worker_ns_->push_back(ns);
    if (worker_ns != nullptr) *worker_ns = ns;
    return s;
  }
  absl::StatusOr<WorkerDescription> Describe() override { return inner_->Describe(); }
  const std::string& address() const override { return inner_->address(); }
  bool healthy() const override { return inner_->healthy(); }
  TransportCounters counters() const override { return inner_->counters(); }
  absl::Status Probe() override { return inner_->Probe(); }

 private:
  std::unique_ptr<ExpertClient> inner_;
  std::vector<uint64_t>* worker_ns_;
};

struct ShardedWorkers {
  FakeExperts backend;
  std::vector<std::unique_ptr<ShmExpertServer>> servers;
  std::vector<std::unique_ptr<ExpertClient>> Clients() {
    std::vector<std::unique_ptr<ExpertClient>> clients;
    for (auto& s : servers) clients.push_back(*OpenExpertClient(s->address(), Options()));
    return clients;
  }
};

void StartShards(ShardedWorkers& w, const std::vector<WorkerDescription>& shards,
                 const char* tag) {
  for (size_t i = 0; i < shards.size(); ++i) {
    auto s = ShmExpertServer::Start({UniqueName(tag) + std::to_string(i)}, shards[i], &w.backend);
    ASSERT_TRUE(s.ok()) << s.status();
    w.servers.push_back(std::move(*s));
  }
}

TEST(RemoteExpertsTest, LayerShardsAreBitIdenticalToOneWorker) {
  ShardedWorkers w;
  StartShards(w, {Shard(0, 2, 0, 8, "a"), Shard(2, 4, 0, 8, "b")}, "layers");
  auto remote = RemoteExperts::Connect(w.Clients(), 4, 8);
  ASSERT_TRUE(remote.ok()) << remote.status();
  for (int layer = 0; layer < 4; ++layer) {
    const auto call = MakeCall(5, layer, 7);
    model::ExpertResult local, split;
    ASSERT_TRUE(w.backend.Compute(call, &local).ok());
    ASSERT_TRUE((*remote)->Compute(call, &split).ok());
    ASSERT_EQ(local.partial.size(), split.partial.size());
    EXPECT_EQ(0, std::memcmp(local.partial.data(), split.partial.data(), 4 * local.partial.size()))
        << "layer " << layer;
  }
}

TEST(RemoteExpertsTest, ExpertShardsSumToTheSameResult) {
  ShardedWorkers w;
  StartShards(w, {Shard(0, 4, 0, 4, "a"), Shard(0, 4, 4, 8, "b")}, "experts");
  auto remote = RemoteExperts::Connect(w.Clients(), 4, 8);
  ASSERT_TRUE(remote.ok()) << remote.status();
  const auto call = MakeCall(9, 1, 3);
  model::ExpertResult local, split;
  ASSERT_TRUE(w.backend.Compute(call, &local).ok());
  ASSERT_TRUE((*remote)->Compute(call, &split).ok());
  for (size_t i = 0; i < local.partial.size(); ++i) {
    EXPECT_NEAR(local.partial[i], split.partial[i], 1e-5f * (1 + std::fabs(local.partial[i])));
  }
  EXPECT_GT((*remote)->clients()[0]->counters().calls, 0u);
  EXPECT_GT((*remote)->clients()[1]->counters().calls, 0u);
}

// A call split over two expert shards (in parallel) and over token chunks
// (one after the other) reports the slowest shard of each chunk, summed:
// exactly, against the times the two shards reported.
TEST(RemoteExpertsTest, WorkerTimeIsTheSlowestShardPerChunk) {
  ShardedWorkers w;
  w.backend.delay_ms = 25;
  StartShards(w, {Shard(0, 4, 0, 4, "a"), Shard(0, 4, 4, 8, "b")}, "busy");
  std::vector<uint64_t> a, b;  // each shard's reported times, in order
  auto clients = w.Clients();
  clients[0] = std::make_unique<RecordingClient>(std::move(clients[0]), &a);
  clients[1] = std::make_unique<RecordingClient>(std::move(clients[1]), &b);
  auto remote = RemoteExperts::Connect(std::move(clients), 4, 8);
  ASSERT_TRUE(remote.ok()) << remote.status();
  a.clear();
  b.clear();
  model::ExpertResult one, two;
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE((*remote)->Compute(MakeCall(9, 1, 3), &one).ok());
  const auto t1 = std::chrono::steady_clock::now();
  ASSERT_EQ(a.size(), 1u);  // both shards own some of the call's experts
  ASSERT_EQ(b.size(), 1u);
  EXPECT_GE(std::min(a[0], b[0]), 25'000'000u);  // each slept its 25 ms
  EXPECT_EQ(one.worker_ns, std::max(a[0], b[0]));  // not the two shards' sum
  EXPECT_LE(one.worker_ns, uint64_t(std::chrono::nanoseconds(t1 - t0).count()));
  // 40 tokens: two chunks of max_tokens 32, one after the other.
  ASSERT_TRUE((*remote)->Compute(MakeCall(40, 2, 4), &two).ok());
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(two.worker_ns, std::max(a[1], b[1]) + std::max(a[2], b[2]));
  EXPECT_GE(two.worker_ns, 50'000'000u);
}

TEST(RemoteExpertsTest, GapsAndOverlapsAreRefused) {
  {
    ShardedWorkers w;
    StartShards(w, {Shard(0, 4, 0, 4, "a"), Shard(0, 3, 4, 8, "b")}, "gap");
    auto remote = RemoteExperts::Connect(w.Clients(), 4, 8);
    EXPECT_EQ(remote.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(remote.status().message()),
                HasSubstr("no expert worker owns experts 4-7 of layer 3"));
  }
  {
    ShardedWorkers w;
    StartShards(w, {Shard(0, 4, 0, 5, "a"), Shard(0, 4, 4, 8, "b")}, "overlap");
    auto remote = RemoteExperts::Connect(w.Clients(), 4, 8);
    EXPECT_EQ(remote.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(remote.status().message()),
                HasSubstr("expert shards overlap: expert 4 of layer 0"));
  }
  {
    ShardedWorkers w;
    StartShards(w, {Shard(0, 4, 0, 8, "a")}, "shape");
    auto remote = RemoteExperts::Connect(w.Clients(), 5, 8);
    EXPECT_EQ(remote.status().code(), absl::StatusCode::kFailedPrecondition);
  }
}

TEST(RemoteExpertsTest, DeadShardFailsOnlyTheCallsThatNeedIt) {
  ShardedWorkers w;
  StartShards(w, {Shard(0, 2, 0, 8, "a"), Shard(2, 4, 0, 8, "b")}, "partial");
  auto remote = RemoteExperts::Connect(w.Clients(), 4, 8);
  ASSERT_TRUE(remote.ok());
  const std::string dead = w.servers[1]->address();
  w.servers[1]->Shutdown();
  model::ExpertResult r;
  EXPECT_TRUE((*remote)->Compute(MakeCall(2, 0, 1), &r).ok());
  absl::Status s = (*remote)->Compute(MakeCall(2, 3, 2), &r);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(dead));
  EXPECT_TRUE((*remote)->Compute(MakeCall(2, 1, 3), &r).ok());
}


// Start hands a call to the workers and returns while they compute (the
// dense side works meanwhile); Finish collects it into the caller's buffer:
// the same bits as ComputeInto, for one worker (the call as it is), two
// expert shards and a call of several chunks (which runs whole in Start).
// Misuse is refused, and a failing call leaves the backend ready for the
// next one.
TEST(RemoteExpertsTest, StartAndFinishOverlapTheCallerWithTheWorkers) {
  for (bool sharded : {false, true}) {
    ShardedWorkers w;
    if (sharded) {
      StartShards(w, {Shard(0, 4, 0, 4, "a"), Shard(0, 4, 4, 8, "b")}, "overlap2");
    } else {
      StartShards(w, {Shard(0, 4, 0, 8, "a")}, "overlap1");
    }
    auto remote = RemoteExperts::Connect(w.Clients(), 4, 8);
    ASSERT_TRUE(remote.ok()) << remote.status();
    model::ExpertBackend& b = **remote;
    for (int n : {5, 40}) {  // 40: two chunks of max_tokens 32
      const model::ExpertCall call = MakeCall(n, 2, 11);
      std::vector<float> direct(n * kD), overlapped(n * kD, -1.0f);
      ASSERT_TRUE(b.ComputeInto(call, direct.data(), nullptr).ok());
      // The workers are held: a one-chunk Start returns all the same (had
      // it waited, the client's timeout would have failed it).
      w.backend.hold = n <= 32;
      uint64_t worker_ns = 0;
      ASSERT_TRUE(b.Start(call, overlapped.data(), &worker_ns).ok());
      EXPECT_EQ(b.Start(call, overlapped.data(), nullptr).code(),
                absl::StatusCode::kFailedPrecondition);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      w.backend.hold = false;
      ASSERT_TRUE(b.Finish().ok());
      EXPECT_GT(worker_ns, 0u);  // the workers' own time, reported through Finish
      EXPECT_EQ(overlapped, direct) << "sharded " << sharded << " n " << n;
    }
    EXPECT_EQ(b.Finish().code(), absl::StatusCode::kFailedPrecondition);
    // A bad call (layer 9) is refused by Start, nothing in flight; a worker
    // that is gone fails the call in Finish; then calls go on.
    std::vector<float> out(2 * kD);
    EXPECT_EQ(b.Start(MakeCall(2, 9, 1), out.data(), nullptr).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(b.Finish().code(), absl::StatusCode::kFailedPrecondition);
    w.servers.back()->Shutdown();
    const model::ExpertCall later = MakeCall(2, 1, 3);  // alive until Finish
    ASSERT_TRUE(b.Start(later, out.data(), nullptr).ok());
    EXPECT_EQ(b.Finish().code(), absl::StatusCode::kUnavailable);
    if (sharded) {
      // The other shard still answers for its own experts: a call that
      // routes only to experts 0-3 goes on.
      model::ExpertCall first = MakeCall(1, 1, 4);
      first.expert_ids = {0, 1};
      std::vector<float> one(kD);
      ASSERT_TRUE(b.Start(first, one.data(), nullptr).ok());
      EXPECT_TRUE(b.Finish().ok());
    }
  }
}

// Replicas: workers describing the same shard. One layer shard of two
// replicas and one of three, over both transports, each replica its own
// backend (so one can be stalled while the others answer).
struct ReplicatedWorkers {
  // [shard][replica]
  std::vector<std::vector<std::unique_ptr<FakeExperts>>> backends;
  std::vector<std::vector<std::unique_ptr<ExpertServer>>> servers;
  FakeExperts reference;

  // shard 0: layers 0-1, shard 1: layers 2-3; replica r of a shard serves
  // over gRPC when r is odd, shared memory otherwise.
  void Start(const std::vector<int>& replicas, const char* tag) {
    for (size_t s = 0; s < replicas.size(); ++s) {
      const int lb = static_cast<int>(s) * 4 / static_cast<int>(replicas.size());
      const int le = static_cast<int>(s + 1) * 4 / static_cast<int>(replicas.size());
      backends.emplace_back();
      servers.emplace_back();
      for (int r = 0; r < replicas[s]; ++r) {
        backends[s].push_back(std::make_unique<FakeExperts>());
        const WorkerDescription d = Shard(lb, le, 0, 8, absl::StrCat("s", s, "r", r));
        if (r % 2 == 0) {
          auto server = ShmExpertServer::Start({absl::StrCat(UniqueName(tag), "-s", s, "r", r)},
                                               d, backends[s].back().get());
          ASSERT_TRUE(server.ok()) << server.status();
          servers[s].push_back(std::move(*server));
        } else {
          auto server = GrpcExpertServer::Start({"127.0.0.1:0"}, d, backends[s].back().get());
          ASSERT_TRUE(server.ok()) << server.status();
          servers[s].push_back(std::move(*server));
        }
      }
    }
  }
  std::vector<std::unique_ptr<ExpertClient>> Clients(ClientOptions o = Options()) {
    std::vector<std::unique_ptr<ExpertClient>> clients;
    for (auto& shard : servers) {
      for (auto& s : shard) clients.push_back(*OpenExpertClient(s->address(), o));
    }
    return clients;
  }
  void Release() {
    for (auto& shard : backends) {
      for (auto& b : shard) b->hold = false;
    }
  }
};

void ExpectSameAsOneWorker(RemoteExperts& remote, FakeExperts& reference, int layer,
                           uint64_t id) {
  const model::ExpertCall call = MakeCall(5, layer, id);
  model::ExpertResult local, split;
  ASSERT_TRUE(reference.Compute(call, &local).ok());
  const absl::Status s = remote.Compute(call, &split);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(local.partial.size(), split.partial.size());
  EXPECT_EQ(0, std::memcmp(local.partial.data(), split.partial.data(), 4 * local.partial.size()))
      << "layer " << layer << " call " << id;
}

// Calls spread over a shard's replicas in turn, every one giving the bits one
// worker gives; the shards and their replicas are reported for metrics.
TEST(RemoteReplicasTest, CallsSpreadOverReplicasWithTheSameBits) {
  ReplicatedWorkers w;
  ASSERT_NO_FATAL_FAILURE(w.Start({2, 3}, "spread"));
  auto remote = RemoteExperts::Connect(w.Clients(), 4, 8);
  ASSERT_TRUE(remote.ok()) << remote.status();
  ASSERT_EQ((*remote)->shards().size(), 2u);
  EXPECT_EQ((*remote)->shards()[0].replicas, (std::vector<int>{0, 1}));
  EXPECT_EQ((*remote)->shards()[1].replicas, (std::vector<int>{2, 3, 4}));
  for (int i = 0; i < 6; ++i) {
    for (int layer = 0; layer < 4; ++layer) {
      ExpectSameAsOneWorker(**remote, w.reference, layer, 10 + i);
    }
  }
  const std::vector<ReplicaStats> stats = (*remote)->ReplicaStatsSnapshot();
  ASSERT_EQ(stats.size(), 5u);
  // 12 calls per shard (6 rounds x 2 layers): 6 + 6 and 4 + 4 + 4.
  const std::vector<uint64_t> want = {6, 6, 4, 4, 4};
  for (size_t i = 0; i < stats.size(); ++i) {
    EXPECT_EQ(stats[i].calls, want[i]) << stats[i].address;
    EXPECT_EQ(stats[i].failovers, 0u) << stats[i].address;
    EXPECT_GT(stats[i].seconds, 0.0) << stats[i].address;
    EXPECT_EQ(stats[i].shard, i < 2 ? "experts 0-7 of layers 0-1" : "experts 0-7 of layers 2-3");
  }
}

// A replica that stalls mid-call (it never answers; the client's timeout
// ends the wait) or dies: the call is re-sent to another replica of the
// shard and completes with the same bits. Then the failed replica is left
// out until a probe that started after its failure saw it up.
TEST(RemoteReplicasTest, StalledOrDeadReplicaFailsOverWithTheSameBits) {
  for (bool grpc_first : {false, true}) {
    ReplicatedWorkers w;
    ASSERT_NO_FATAL_FAILURE(w.Start({1, 2}, grpc_first ? "stallg" : "stall"));
    ClientOptions o = Options();
    o.timeout = std::chrono::milliseconds(300);
    auto clients = w.Clients(o);
    if (grpc_first) std::swap(clients[1], clients[2]);  // shard 1's first replica over gRPC
    auto remote = RemoteExperts::Connect(std::move(clients), 4, 8);
    ASSERT_TRUE(remote.ok()) << remote.status();
    const int first = grpc_first ? 1 : 0;  // backend index of the client tried first
    w.backends[1][first]->hold = true;
    const model::ExpertCall call = MakeCall(5, 3, 77);
    model::ExpertResult local;
    ASSERT_TRUE(w.reference.Compute(call, &local).ok());
    std::vector<float> out(5 * kD, -1.0f);
    ASSERT_TRUE((*remote)->Start(call, out.data(), nullptr).ok());
    const absl::Status s = (*remote)->Finish();
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(0, std::memcmp(local.partial.data(), out.data(), 4 * out.size()));
    EXPECT_EQ(w.backends[1][first]->finished.load(), 0);  // still stalled
    EXPECT_EQ(w.backends[1][1 - first]->finished.load(), 1);
    std::vector<ReplicaStats> stats = (*remote)->ReplicaStatsSnapshot();
    EXPECT_EQ(stats[1].failovers, 1u) << stats[1].address;
    EXPECT_FALSE(stats[1].eligible);
    EXPECT_EQ(stats[2].calls, 1u) << stats[2].address;
    w.Release();
    // Left out: the next calls go to the replica that answered.
    for (int i = 0; i < 3; ++i) ExpectSameAsOneWorker(**remote, w.reference, 2, 80 + i);
    EXPECT_EQ((*remote)->ReplicaStatsSnapshot()[1].calls, 0u);
    // A probe that started before the failure does not bring it back; one
    // after does, and calls alternate again.
    (*remote)->ReportProbe(1, true, std::chrono::steady_clock::now() - std::chrono::hours(1));
    EXPECT_FALSE((*remote)->ReplicaStatsSnapshot()[1].eligible);
    const auto started = std::chrono::steady_clock::now();
    const absl::Status probe = (*remote)->clients()[1]->Probe();  // what WorkerLiveness runs
    ASSERT_TRUE(probe.ok()) << probe;
    (*remote)->ReportProbe(1, true, started);
    EXPECT_TRUE((*remote)->ReplicaStatsSnapshot()[1].eligible);
    for (int i = 0; i < 4; ++i) ExpectSameAsOneWorker(**remote, w.reference, 2, 90 + i);
    stats = (*remote)->ReplicaStatsSnapshot();
    EXPECT_GE(stats[1].calls, 1u);
    // Dead: the replica's server goes away; calls fail over to the other.
    const int dead_backend = stats[1].calls > 0 ? first : 1 - first;
    w.servers[1][dead_backend]->Shutdown();
    for (int i = 0; i < 4; ++i) ExpectSameAsOneWorker(**remote, w.reference, 3, 100 + i);
    // Both replicas of shard 1 gone: only calls for shard 0 go on, the
    // others fail with UNAVAILABLE naming both replicas.
    w.servers[1][1 - dead_backend]->Shutdown();
    model::ExpertResult r;
    const absl::Status gone = (*remote)->Compute(MakeCall(2, 3, 5), &r);
    EXPECT_EQ(gone.code(), absl::StatusCode::kUnavailable) << gone;
    EXPECT_THAT(std::string(gone.message()),
                HasSubstr("no replica of experts 0-7 of layers 2-3 answered"));
    EXPECT_THAT(std::string(gone.message()), HasSubstr(w.servers[1][0]->address()));
    EXPECT_THAT(std::string(gone.message()), HasSubstr(w.servers[1][1]->address()));
    ExpectSameAsOneWorker(**remote, w.reference, 0, 6);
  }
}

// A named replica that is not up at start joins its shard as failed (the
// calls go to the one that is up) and takes calls once a probe sees it up; a
// shard with no replica up is still refused.
TEST(RemoteReplicasTest, NamedReplicaDownAtStartJoinsWhenUp) {
  ReplicatedWorkers w;
  ASSERT_NO_FATAL_FAILURE(w.Start({1, 1}, "late"));
  const std::string late = UniqueName("late-replica");
  std::vector<std::unique_ptr<ExpertClient>> clients = w.Clients();
  clients.push_back(*OpenExpertClient("shm://" + late, Options()));  // not started yet
  auto remote = RemoteExperts::Connect(std::move(clients), 4, 8, {0, 1, 1});
  ASSERT_TRUE(remote.ok()) << remote.status();
  EXPECT_EQ((*remote)->shards()[1].replicas, (std::vector<int>{1, 2}));
  EXPECT_FALSE((*remote)->ReplicaStatsSnapshot()[2].eligible);
  for (int i = 0; i < 4; ++i) ExpectSameAsOneWorker(**remote, w.reference, 3, 200 + i);
  EXPECT_EQ((*remote)->ReplicaStatsSnapshot()[2].calls, 0u);
  FakeExperts backend;
  auto server = ShmExpertServer::Start({late}, Shard(2, 4, 0, 8, "late"), &backend);
  ASSERT_TRUE(server.ok()) << server.status();
  const auto started = std::chrono::steady_clock::now();
  ASSERT_TRUE((*remote)->clients()[2]->Probe().ok());
  (*remote)->ReportProbe(2, true, started);
  for (int i = 0; i < 4; ++i) ExpectSameAsOneWorker(**remote, w.reference, 3, 210 + i);
  EXPECT_EQ((*remote)->ReplicaStatsSnapshot()[2].calls, 2u);
  // No replica of shard 1 up: refused, naming the worker.
  std::vector<std::unique_ptr<ExpertClient>> none;
  none.push_back(std::move(w.Clients()[0]));
  none.push_back(*OpenExpertClient("shm://" + UniqueName("nobody"), Options()));
  auto refused = RemoteExperts::Connect(std::move(none), 4, 8, {0, 1});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
}

// Workers named replicas of one shard (--experts A|B) must serve one; a
// replica overlapping another shard partially is refused as before.
TEST(RemoteReplicasTest, NamedReplicasMustServeOneShard) {
  ReplicatedWorkers w;
  ASSERT_NO_FATAL_FAILURE(w.Start({1, 1}, "named"));
  auto remote = RemoteExperts::Connect(w.Clients(), 4, 8, {0, 0});
  EXPECT_EQ(remote.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(remote.status().message()),
              HasSubstr("are named replicas of one shard but serve experts 0-7 of layers 0-1 "
                        "and experts 0-7 of layers 2-3"));
  EXPECT_TRUE(RemoteExperts::Connect(w.Clients(), 4, 8, {0, 1}).ok());
  EXPECT_EQ(RemoteExperts::Connect(w.Clients(), 4, 8, {0}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Probe: the readiness check, apart from the call path. A live worker of
// this model is OK; a stopped one UNAVAILABLE naming it (shm: no segment
// or a stale heartbeat; gRPC: unreachable); another model's is refused.
TEST(TransportTest, ProbeSeesLiveStoppedAndForeignWorkers) {
  FakeExperts backend;
  auto shm = ShmExpertServer::Start({UniqueName("probe")}, Description(), &backend);
  ASSERT_TRUE(shm.ok()) << shm.status();
  auto grpc = GrpcExpertServer::Start({"127.0.0.1:0"}, Description(), &backend);
  ASSERT_TRUE(grpc.ok()) << grpc.status();
  const std::vector<std::string> addrs = {(*shm)->address(), (*grpc)->address()};
  for (const std::string& addr : addrs) {
    auto client = OpenExpertClient(addr, Options());
    EXPECT_TRUE((*client)->Probe().ok()) << addr << " " << (*client)->Probe();
    auto foreign = OpenExpertClient(addr, Options("model-b"));
    EXPECT_EQ((*foreign)->Probe().code(), absl::StatusCode::kFailedPrecondition) << addr;
  }
  auto shm_client = OpenExpertClient(addrs[0], Options());
  auto grpc_client = OpenExpertClient(addrs[1], Options());
  (*shm)->Shutdown();
  (*grpc)->Shutdown();
  for (ExpertClient* c : {shm_client->get(), grpc_client->get()}) {
    const absl::Status s = c->Probe();
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << c->address() << " " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c->address()));
  }
}

// WorkerLiveness notices a worker going away and coming back without any
// call, and a successful probe lets the next call reconnect at once even
// with a long backoff pending.
TEST(TransportTest, LivenessFollowsAWorkerThatStopsAndReturns) {
  const std::string name = UniqueName("liveness");
  FakeExperts backend;
  auto server = ShmExpertServer::Start({name}, Description(), &backend);
  ASSERT_TRUE(server.ok());
  ClientOptions o = Options();
  o.backoff_min = o.backoff_max = std::chrono::milliseconds(60000);
  auto client = OpenExpertClient("shm://" + name, o);
  model::ExpertResult r;
  ASSERT_TRUE((*client)->Compute(MakeCall(1, 0, 1), &r).ok());
  WorkerLiveness liveness({client->get()}, std::chrono::milliseconds(50));
  auto live = [&] { return liveness.Snapshot()[0].live; };
  auto wait_until = [&](bool want) { return Eventually([&] { return live() == want; }); };
  EXPECT_TRUE(live());
  (*server)->Shutdown();
  server->reset();
  ASSERT_TRUE(wait_until(false));
  EXPECT_THAT(liveness.Snapshot()[0].error, HasSubstr("shm://" + name));
  // A call now fails and arms the 60 s backoff.
  EXPECT_EQ((*client)->Compute(MakeCall(1, 0, 2), &r).code(), absl::StatusCode::kUnavailable);
  auto again = ShmExpertServer::Start({name}, Description(), &backend);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_TRUE(wait_until(true));
  EXPECT_EQ(liveness.Snapshot()[0].error, "");
  const absl::Status first = (*client)->Compute(MakeCall(1, 0, 3), &r);
  EXPECT_TRUE(first.ok()) << first;
}

TEST(TransportTest, LayersWithoutLiveOwner) {
  auto shard = [](int b, int e, int eb = 0, int ee = 8) {
    WorkerDescription d = Description();
    d.layer_begin = b;
    d.layer_end = e;
    d.expert_begin = eb;
    d.expert_end = ee;
    return d;
  };
  struct Case {
    std::vector<WorkerDescription> workers;
    std::vector<bool> live;
    std::vector<int> missing;
    std::string text;
  };
  const std::vector<Case> cases = {
      {{shard(0, 4)}, {true}, {}, ""},
      {{shard(0, 4)}, {false}, {0, 1, 2, 3}, "0-3"},
      {{shard(0, 2), shard(2, 4)}, {true, false}, {2, 3}, "2-3"},
      {{shard(0, 1), shard(1, 3), shard(3, 4)}, {false, true, false}, {0, 3}, "0,3"},
      // Experts of one layer split over two workers: either one down
      // leaves the layer without a complete owner.
      {{shard(0, 4, 0, 4), shard(0, 4, 4, 8)}, {true, false}, {0, 1, 2, 3}, "0-3"},
      // Replicas: a shard is live while one of its replicas is.
      {{shard(0, 2), shard(0, 2), shard(2, 4), shard(2, 4)}, {false, true, true, false}, {}, ""},
      {{shard(0, 2), shard(0, 2), shard(2, 4), shard(2, 4)}, {true, true, false, false}, {2, 3},
       "2-3"},
      {{shard(0, 4, 0, 4), shard(0, 4, 0, 4), shard(0, 4, 4, 8)}, {false, true, true}, {}, ""},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::vector<int> got = LayersWithoutLiveOwner(cases[i].workers, cases[i].live, 4);
    EXPECT_EQ(got, cases[i].missing) << "case " << i;
    EXPECT_EQ(FormatLayerRanges(got), cases[i].text) << "case " << i;
  }
  EXPECT_EQ(FormatLayerRanges({1, 2, 3, 7, 9, 10}), "1-3,7,9-10");
}

}  // namespace
}  // namespace moesplit::transport
