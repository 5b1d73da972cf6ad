#include "common/auth/api_keys.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace moesplit::auth {
namespace {

using Keys = std::vector<std::string>;

struct ParseCase {
  const char* text;
  const char* separators;
  Keys want;
};

TEST(ParseApiKeysTest, TrimsSkipsCommentsAndBlankLinesAndDuplicates) {
  const ParseCase cases[] = {
      {"", "\n", {}},
      {"\n\n  \n", "\n", {}},
      {"k1", "\n", {"k1"}},
      {"  k1  \n\tk2\r\n", "\n", {"k1", "k2"}},
      {"# a comment\nk1\n  # indented comment\n\nk2\n", "\n", {"k1", "k2"}},
      {"k1\nk2\nk1\n", "\n", {"k1", "k2"}},
      {"k1,k2, k3\nk4", "\n,", {"k1", "k2", "k3", "k4"}},
      {"k1,k2", "\n", {"k1,k2"}},  // a key file's line is one key, commas and all
      {",,k1,,", "\n,", {"k1"}},
  };
  for (const ParseCase& c : cases) {
    auto keys = ParseApiKeys(c.text, c.separators);
    ASSERT_TRUE(keys.ok()) << c.text << ": " << keys.status();
    EXPECT_EQ(*keys, c.want) << "'" << c.text << "'";
  }
}

TEST(ParseApiKeysTest, RefusesKeysThatCannotTravelInAHeader) {
  for (const char* text : {"good\nba d\n", "k\x01", "caf\xc3\xa9"}) {
    auto keys = ParseApiKeys(text, "\n");
    EXPECT_EQ(keys.status().code(), absl::StatusCode::kInvalidArgument) << text;
  }
  auto keys = ParseApiKeys("good\nba d\n", "\n");
  EXPECT_NE(keys.status().message().find("line 2"), std::string::npos) << keys.status();
}

class KeyFileTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& text) {
    path_ = ::testing::TempDir() + "/keys-" + std::to_string(getpid()) + ".txt";
    std::ofstream(path_, std::ios::binary) << text;
    return path_;
  }
  void TearDown() override {
    if (!path_.empty()) std::remove(path_.c_str());
  }
  std::string path_;
};

TEST_F(KeyFileTest, FileAndEnvironmentGiveTheUnion) {
  const std::string file = Write("# service keys\nalpha\nbeta\n");
  auto keys = LoadApiKeys(file, "beta,gamma");
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(*keys, (Keys{"alpha", "beta", "gamma"}));
  keys = LoadApiKeys("", "delta\nepsilon");
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(*keys, (Keys{"delta", "epsilon"}));
  keys = LoadApiKeys("", "");
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_TRUE(keys->empty());
}

TEST_F(KeyFileTest, AFileWithoutKeysOrUnreadableIsAnError) {
  const std::string file = Write("# nothing but comments\n\n");
  auto keys = LoadApiKeys(file, "from-env");
  EXPECT_EQ(keys.status().code(), absl::StatusCode::kInvalidArgument) << keys.status();
  EXPECT_NE(keys.status().message().find(file), std::string::npos) << keys.status();
  keys = LoadApiKeys(file + ".missing", "");
  EXPECT_EQ(keys.status().code(), absl::StatusCode::kNotFound) << keys.status();
  EXPECT_EQ(LoadApiKeys("", "bad key").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(KeyFileTest, ClientKeyIsTheFilesFirstElseTheEnvironments) {
  const std::string file = Write("\n# mine\n first \nsecond\n");
  auto key = LoadClientApiKey(file, "ignored");
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_EQ(*key, "first");
  key = LoadClientApiKey("", "  from-env \n");
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_EQ(*key, "from-env");
  key = LoadClientApiKey("", "");
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_EQ(*key, "");
}

TEST(BearerTokenTest, ParsesTheSchemeCaseInsensitively) {
  const std::pair<const char*, const char*> cases[] = {
      {"Bearer abc", "abc"},
      {"bearer abc", "abc"},
      {"BEARER  abc ", "abc"},
      {" Bearer\tabc", "abc"},
      {"Bearer", ""},
      {"Bearer ", ""},
      {"Bearerabc", ""},
      {"Basic abc", ""},
      {"abc", ""},
      {"", ""},
  };
  for (const auto& [header, want] : cases) {
    EXPECT_EQ(BearerToken(header), want) << "'" << header << "'";
  }
}

TEST(ApiKeySetTest, MatchesOnlyItsKeysWhateverTheirLength) {
  const ApiKeySet set({"k-one", "a-much-longer-second-key-0123456789"});
  EXPECT_FALSE(set.empty());
  EXPECT_EQ(set.size(), 2u);
  EXPECT_TRUE(set.Matches("k-one"));
  EXPECT_TRUE(set.Matches("a-much-longer-second-key-0123456789"));
  for (const char* wrong : {"", "k-on", "k-one ", "K-ONE", "k-one\n", "a-much-longer-second-key",
                            "a-much-longer-second-key-01234567890"}) {
    EXPECT_FALSE(set.Matches(wrong)) << "'" << wrong << "'";
  }
  EXPECT_TRUE(set.MatchesAuthorization("Bearer k-one"));
  EXPECT_FALSE(set.MatchesAuthorization("k-one"));
  EXPECT_FALSE(set.MatchesAuthorization("Basic k-one"));
}

TEST(ApiKeySetTest, EmptySetMatchesNothing) {
  const ApiKeySet none;
  EXPECT_TRUE(none.empty());
  EXPECT_FALSE(none.Matches(""));
  EXPECT_FALSE(none.Matches("anything"));
  EXPECT_TRUE(ApiKeySet({""}).empty());
}

}  // namespace
}  // namespace moesplit::auth
