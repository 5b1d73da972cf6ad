#include "services/cli/flags.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moesplit::cli {
namespace {

struct Bound {
  std::string model = "default";
  int64_t n = 7;
  double temp = 0.5;
  bool special = false;
};

void Register(FlagParser& p, Bound& b) {
  p.AddString("model|m", &b.model, "model path");
  p.AddInt("n|n-predict", &b.n, "tokens");
  p.AddDouble("temp", &b.temp, "temperature");
  p.AddBool("special", &b.special, "parse special tokens");
}

TEST(FlagParserTest, ParsesEveryForm) {
  FlagParser p;
  Bound b;
  Register(p, b);
  ASSERT_TRUE(p.Parse({"pos1", "--model", "a.gguf", "-n", "12", "--temp=0.25",
                       "--special", "pos2", "--", "--not-a-flag"})
                  .ok());
  EXPECT_EQ(b.model, "a.gguf");
  EXPECT_EQ(b.n, 12);
  EXPECT_DOUBLE_EQ(b.temp, 0.25);
  EXPECT_TRUE(b.special);
  EXPECT_THAT(p.positional(),
              testing::ElementsAre("pos1", "pos2", "--not-a-flag"));
  EXPECT_TRUE(p.WasSet("model"));
  EXPECT_TRUE(p.WasSet("m"));
  EXPECT_TRUE(p.WasSet("n-predict"));
}

TEST(FlagParserTest, DefaultsStayWhenAbsent) {
  FlagParser p;
  Bound b;
  Register(p, b);
  ASSERT_TRUE(p.Parse({"-m", "x", "--n-predict=-3", "--special=false"}).ok());
  EXPECT_EQ(b.model, "x");
  EXPECT_EQ(b.n, -3);
  EXPECT_DOUBLE_EQ(b.temp, 0.5);
  EXPECT_FALSE(b.special);
  EXPECT_FALSE(p.WasSet("temp"));
}

TEST(FlagParserTest, OneLetterNamesTakeOneOrTwoDashes) {
  FlagParser p;
  Bound b;
  Register(p, b);
  ASSERT_TRUE(p.Parse({"--n", "3", "--m=x"}).ok());
  EXPECT_EQ(b.n, 3);
  EXPECT_EQ(b.model, "x");
}

TEST(FlagParserTest, NegativeNumberIsAValue) {
  FlagParser p;
  Bound b;
  Register(p, b);
  ASSERT_TRUE(p.Parse({"--temp", "-1.5"}).ok());
  EXPECT_DOUBLE_EQ(b.temp, -1.5);
}

struct BadCase {
  std::vector<std::string> args;
  std::string message;
};

TEST(FlagParserTest, RejectsBadInput) {
  const std::vector<BadCase> cases = {
      {{"--bogus"}, "unknown flag --bogus"},
      {{"--bogus=3"}, "unknown flag --bogus"},
      {{"-x"}, "unknown flag -x"},
      {{"-temp", "3"}, "unknown flag -temp"},    // long needs two dashes
      {{"--model"}, "flag --model needs a value"},
      {{"-n", "abc"}, "flag -n expects an integer, got 'abc'"},
      {{"-n", "1.5"}, "flag -n expects an integer, got '1.5'"},
      {{"--temp", "hot"}, "flag --temp expects a number, got 'hot'"},
      {{"--temp", "nan"}, "flag --temp expects a number, got 'nan'"},
      {{"--special=maybe"}, "flag --special expects true or false, got 'maybe'"},
  };
  for (const BadCase& c : cases) {
    FlagParser p;
    Bound b;
    Register(p, b);
    absl::Status s = p.Parse(c.args);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.args[0];
    EXPECT_EQ(s.message(), c.message) << c.args[0];
  }
}

TEST(FlagParserTest, UsageListsEveryName) {
  FlagParser p;
  Bound b;
  Register(p, b);
  const std::string usage = p.Usage();
  EXPECT_THAT(usage, testing::HasSubstr("--model, -m VALUE"));
  EXPECT_THAT(usage, testing::HasSubstr("-n, --n-predict VALUE"));
  EXPECT_THAT(usage, testing::HasSubstr("--special "));
  EXPECT_THAT(usage, testing::Not(testing::HasSubstr("--special VALUE")));
}

}  // namespace
}  // namespace moesplit::cli
