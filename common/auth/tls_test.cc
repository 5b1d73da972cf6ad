#include "common/auth/tls.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace moesplit::auth {
namespace {

class TlsFilesTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = ::testing::TempDir() + "/tls-" + std::to_string(getpid()) + "-" + name;
    std::ofstream(path, std::ios::binary) << text;
    paths_.push_back(path);
    return path;
  }
  void TearDown() override {
    for (const std::string& p : paths_) std::remove(p.c_str());
  }
  std::vector<std::string> paths_;
};

constexpr char kPem[] = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

TEST_F(TlsFilesTest, CertAndKeyGoTogether) {
  const std::string cert = Write("cert.pem", kPem), key = Write("key.pem", kPem);
  for (const auto& [c, k] : {std::pair{cert, std::string()}, std::pair{std::string(), key}}) {
    auto t = ReadTlsFiles(c, k, "");
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << t.status();
  }
  auto t = ReadTlsFiles(cert, key, "");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->cert, kPem);
  EXPECT_TRUE(t->server_tls());
  EXPECT_FALSE(t->client_tls());
  EXPECT_STREQ(ServerTlsMode(*t), "on");
}

TEST_F(TlsFilesTest, ModesFollowTheFilesGiven) {
  const std::string pem = Write("a.pem", kPem);
  auto none = ReadTlsFiles("", "", "");
  ASSERT_TRUE(none.ok());
  EXPECT_STREQ(ServerTlsMode(*none), "off");
  auto mutual = ReadTlsFiles(pem, pem, pem);
  ASSERT_TRUE(mutual.ok());
  EXPECT_STREQ(ServerTlsMode(*mutual), "mutual");
  auto client = ReadTlsFiles("", "", pem);
  ASSERT_TRUE(client.ok());
  EXPECT_TRUE(client->client_tls());
  EXPECT_STREQ(ServerTlsMode(*client), "off");
}

TEST_F(TlsFilesTest, UnreadableOrNonPemFilesNameTheFlag) {
  const std::string junk = Write("junk.pem", "not a certificate\n");
  auto t = ReadTlsFiles("", "", junk);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << t.status();
  EXPECT_NE(t.status().message().find("--tls-ca"), std::string::npos) << t.status();
  t = ReadTlsFiles(junk + ".missing", junk, "");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound) << t.status();
  EXPECT_NE(t.status().message().find("--tls-cert"), std::string::npos) << t.status();
}

}  // namespace
}  // namespace moesplit::auth
