#include "common/telemetry/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "common/base/build_info.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moesplit::telemetry {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// GET /metrics from 127.0.0.1:port; the body.
std::string Scrape(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return "";
  }
  const std::string req = "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n";
  (void)!write(fd, req.data(), req.size());
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, n);
  close(fd);
  return out;
}

model::ExpertCall Call(int layer, std::vector<int32_t> experts) {
  model::ExpertCall c;
  c.layer = layer;
  c.n_tokens = 1;
  c.d = 4;
  c.hidden.assign(4, 1.0f);
  c.token_offsets = {0, static_cast<uint32_t>(experts.size())};
  c.weights.assign(experts.size(), 0.5f);
  c.expert_ids = std::move(experts);
  return c;
}

TEST(MetricsTest, WorkerMetricsAreServed) {
  auto server = MetricsServer::Start("127.0.0.1:0");
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  WorkerMetrics m((*server)->registry(), 2, 4);
  (*server)->Register(m.heat_map());
  m.SetResidentBytes(0, 12345);
  m.SetThreads(2);
  m.OnCall("shm", Call(1, {3, 0}), 100, 40, 2e-5, absl::OkStatus());
  m.OnCall("shm", Call(1, {3}), 100, 40, 3e-5, absl::OkStatus());
  m.OnCall("grpc", Call(0, {2}), 10, 0, 1e-3, absl::InvalidArgumentError("bad"));
  const std::string body = Scrape((*server)->port());
  EXPECT_THAT(body, HasSubstr("moesplit_expert_calls_total{code=\"OK\",transport=\"shm\"} 2"));
  EXPECT_THAT(body, HasSubstr("code=\"INVALID_ARGUMENT\",transport=\"grpc\"} 1"));
  EXPECT_THAT(body, HasSubstr("moesplit_expert_activations_total{expert=\"3\",layer=\"1\"} 2"));
  EXPECT_THAT(body, HasSubstr("moesplit_expert_activations_total{expert=\"0\",layer=\"1\"} 1"));
  // A failed call activates nothing.
  EXPECT_THAT(body, Not(HasSubstr("expert=\"2\",layer=\"0\"")));
  EXPECT_THAT(body, HasSubstr("moesplit_worker_resident_bytes{node=\"0\"} 12345"));
  EXPECT_THAT(body, HasSubstr("moesplit_transport_received_bytes_total{transport=\"shm\"} 200"));
  EXPECT_THAT(body, HasSubstr("moesplit_expert_call_duration_seconds_bucket"));
  EXPECT_EQ(m.heat_map()->count(1, 3), 2u);
}

TEST(MetricsTest, ExpertTierMetricsAreReadAtScrape) {
  auto server = MetricsServer::Start("127.0.0.1:0");
  ASSERT_TRUE(server.ok()) << server.status();
  ExpertTierSnapshot snap;
  snap.slots = 40;
  snap.resident = 12;
  snap.hits = 7;
  snap.misses = 3;
  snap.bytes_read = 4096;
  snap.reads = 3;
  snap.read_seconds = 0.006;
  snap.read_bounds = {1e-3, 1e-2};
  snap.read_buckets = {1, 2, 0};
  snap.prefetches = 5;
  snap.prefetch_used = 4;
  auto tier = std::make_shared<ExpertTierMetrics>([&] { return snap; });
  (*server)->Register(tier);
  std::string body = Scrape((*server)->port());
  EXPECT_THAT(body, HasSubstr("moesplit_worker_tier_slots 40"));
  EXPECT_THAT(body, HasSubstr("moesplit_worker_tier_resident_experts 12"));
  EXPECT_THAT(body, HasSubstr("moesplit_worker_tier_hits_total 7"));
  EXPECT_THAT(body, HasSubstr("moesplit_worker_tier_misses_total 3"));
  EXPECT_THAT(body, HasSubstr("moesplit_worker_tier_read_bytes_total 4096"));
  EXPECT_THAT(body, HasSubstr("moesplit_worker_tier_read_duration_seconds_bucket{le=\"0.01\"} 3"));
  EXPECT_THAT(body, HasSubstr("moesplit_worker_tier_read_duration_seconds_count 3"));
  EXPECT_THAT(body, HasSubstr("moesplit_worker_tier_prefetches_total 5"));
  EXPECT_THAT(body, HasSubstr("moesplit_worker_tier_prefetch_used_total 4"));
  snap.hits = 9;  // the next scrape sees the tier's counters as they are then
  body = Scrape((*server)->port());
  EXPECT_THAT(body, HasSubstr("moesplit_worker_tier_hits_total 9"));
}

TEST(MetricsTest, BuildInfoIsOne) {
  auto server = MetricsServer::Start("127.0.0.1:0");
  ASSERT_TRUE(server.ok()) << server.status();
  ExportBuildInfo((*server)->registry(), "moesplit-expert-worker");
  const std::string body = Scrape((*server)->port());
  const BuildInfo& b = GetBuildInfo();
  EXPECT_FALSE(b.version.empty());
  EXPECT_THAT(body, HasSubstr("moesplit_build_info{"));
  EXPECT_THAT(body, HasSubstr("service=\"moesplit-expert-worker\""));
  EXPECT_THAT(body, HasSubstr(absl::StrCat("version=\"", b.version, "\"")));
  EXPECT_THAT(body, HasSubstr(absl::StrCat("revision=\"", b.revision, "\"")));
  EXPECT_THAT(body, testing::ContainsRegex("moesplit_build_info\\{[^}]*\\} 1\n"));
}

TEST(MetricsTest, BadAddressIsUnavailable) {
  auto server = MetricsServer::Start("256.1.1.1:notaport");
  EXPECT_FALSE(server.ok());
}

}  // namespace
}  // namespace moesplit::telemetry
