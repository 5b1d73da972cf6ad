#include "services/cli/flags.h"

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
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
  ASSERT_TRUE(p.Parse({"pos1", "--model", "a.gguf", "-n", "12", "--temp=0.25", "--special", "pos2",
                       "--", "--not-a-flag"})
                  .ok());
  EXPECT_EQ(b.model, "a.gguf");
  EXPECT_EQ(b.n, 12);
  EXPECT_DOUBLE_EQ(b.temp, 0.25);
  EXPECT_TRUE(b.special);
  EXPECT_THAT(p.positional(), testing::ElementsAre("pos1", "pos2", "--not-a-flag"));
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
      {{"-temp", "3"}, "unknown flag -temp (did you mean --temp?)"},  // long needs two dashes
      {{"--modle", "a"}, "unknown flag --modle (did you mean --model?)"},
      {{"--temperature=1"}, "unknown flag --temperature (did you mean --temp?)"},
      {{"--n-predicts", "1"}, "unknown flag --n-predicts (did you mean --n-predict?)"},
      {{"--specail"}, "unknown flag --specail (did you mean --special?)"},
      {{"--hepl"}, "unknown flag --hepl (did you mean --help?)"},
      {{"--frobnicate"}, "unknown flag --frobnicate"},
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

TEST(FlagParserTest, UsageListsEveryNameWithItsDefault) {
  FlagParser p;
  Bound b;
  Register(p, b);
  const std::string usage = p.Usage();
  EXPECT_THAT(usage, testing::HasSubstr("--model, -m VALUE"));
  EXPECT_THAT(usage, testing::HasSubstr("-n, --n-predict N"));
  EXPECT_THAT(usage, testing::HasSubstr("--temp X"));
  EXPECT_THAT(usage, testing::HasSubstr("--special "));
  EXPECT_THAT(usage, testing::Not(testing::HasSubstr("--special VALUE")));
  // The defaults are the bound variables' values at registration.
  EXPECT_THAT(usage, testing::HasSubstr("model path (default: default)"));
  EXPECT_THAT(usage, testing::HasSubstr("tokens (default: 7)"));
  EXPECT_THAT(usage, testing::HasSubstr("temperature (default: 0.5)"));
  EXPECT_THAT(usage, testing::HasSubstr("parse special tokens\n"));  // false: no default shown
  EXPECT_THAT(usage, testing::HasSubstr("-h, --help"));
  EXPECT_THAT(usage, testing::Not(testing::HasSubstr("--version")));
}

TEST(FlagParserTest, UsageShowsDefaultTextMetaRequiredAndSections) {
  std::string addr, where = "x";
  int64_t threads = 0;
  bool on = true;
  FlagParser p;
  p.AddString("addr", &addr, "listen here").HostPort().Required();
  p.AddInt("threads", &threads, "threads").DefaultText("all CPUs");
  p.Section("passed on");
  p.AddString("where", &where, "where").OneOf({"x", "y"});
  p.AddBool("on", &on, "switch");
  p.SetVersionLine("prog 1.0");
  const std::string usage = p.Usage();
  EXPECT_THAT(usage, testing::HasSubstr("--addr HOST:PORT"));
  EXPECT_THAT(usage, testing::HasSubstr("listen here (required)"));
  EXPECT_THAT(usage, testing::HasSubstr("threads (default: all CPUs)"));
  EXPECT_THAT(usage, testing::HasSubstr("\npassed on:\n  --where x|y"));
  EXPECT_THAT(usage, testing::HasSubstr("where (default: x)"));
  EXPECT_THAT(usage, testing::HasSubstr("switch (default: true)"));
  EXPECT_THAT(usage, testing::HasSubstr("--version"));
  EXPECT_THAT(p.Help("prog [flags]"), testing::StartsWith("usage: prog [flags]\n\nflags:\n"));
}

TEST(FlagParserTest, HelpAndVersionWinOverBadFlags) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"--bogus", "--help"}, {"-n", "x", "-h"}}) {
    FlagParser p;
    Bound b;
    Register(p, b);
    ASSERT_TRUE(p.Parse(args).ok()) << args[0];
    EXPECT_TRUE(p.help_requested());
  }
  FlagParser p;
  Bound b;
  Register(p, b);
  // --version is a flag only when the program has a version line.
  EXPECT_EQ(p.Parse({"--version"}).message(), "unknown flag --version");
  FlagParser q;
  Register(q, b);
  q.SetVersionLine("prog 1.0");
  ASSERT_TRUE(q.Parse({"--model", "m", "--version"}).ok());
  EXPECT_TRUE(q.version_requested());
  FlagParser r;
  Register(r, b);
  // After "--" they are positional.
  ASSERT_TRUE(r.Parse({"--", "--help"}).ok());
  EXPECT_FALSE(r.help_requested());
}

TEST(FlagParserTest, ChecksRunWhileParsing) {
  struct Case {
    std::vector<std::string> args;
    std::string message;  // "" = accepted
  };
  const std::vector<Case> cases = {
      {{"--parallel", "4"}, ""},
      {{"--parallel", "0"}, "flag --parallel must be in 1..1024, got 0"},
      {{"--parallel=2000"}, "flag --parallel must be in 1..1024, got 2000"},
      {{"--ratio", "1.5"}, "flag --ratio must be in 0..1, got 1.5"},
      {{"--kind", "b"}, ""},
      {{"--kind", "c"}, "flag --kind must be one of a, b; got 'c'"},
      {{"--http", "127.0.0.1:8080"}, ""},
      {{"--http", "localhost"}, "flag --http: expected HOST:PORT, got 'localhost' (no ':PORT')"},
      {{"--even", "3"}, "flag --even: odd"},
      {{"--even", "--shown-as-is"}, "--even is odd"},
  };
  for (const Case& c : cases) {
    int64_t parallel = 1;
    double ratio = 0;
    std::string kind = "a", http;
    FlagParser p;
    p.AddInt("parallel", &parallel, "").Range(1, 1024);
    p.AddDouble("ratio", &ratio, "").Range(0, 1);
    p.AddString("kind", &kind, "").OneOf({"a", "b"});
    p.AddString("http", &http, "").HostPort();
    std::string even_text;
    p.AddString("even", &even_text, "").Check([](absl::string_view v) {
      if (v == "--shown-as-is") return absl::InvalidArgumentError("--even is odd");
      int64_t n = 0;
      return absl::SimpleAtoi(v, &n) && n % 2 == 0 ? absl::OkStatus()
                                                   : absl::InvalidArgumentError("odd");
    });
    const absl::Status s = p.Parse(c.args);
    EXPECT_EQ(s.message(), c.message) << c.args[0] << " " << c.args.back();
  }
}

TEST(FlagParserTest, RequiredFlagsAreCheckedAtTheEnd) {
  std::string model;
  FlagParser p;
  p.AddString("model", &model, "").Required();
  EXPECT_EQ(p.Parse({}).message(), "--model is required");
  FlagParser q;
  q.AddString("model", &model, "").Required();
  EXPECT_TRUE(q.Parse({"--model=x"}).ok());
}

TEST(FlagParserTest, RepeatableJoinsAndGivenArgsPassOn) {
  std::string experts, kv = "f16", own;
  int64_t ctx = 4096;
  bool pin = false;
  FlagParser p;
  p.AddString("own", &own, "");
  p.Section("service");
  p.AddString("experts", &experts, "").Repeatable();
  p.AddString("kv-type", &kv, "");
  p.AddInt("ctx|c", &ctx, "");
  p.AddBool("pin", &pin, "");
  ASSERT_TRUE(
      p.Parse({"--experts", "shm://a", "--own", "x", "--experts=grpc://h:1", "-c", "256", "--pin"})
          .ok());
  EXPECT_EQ(experts, "shm://a,grpc://h:1");
  EXPECT_THAT(p.GivenArgs("service"),
              testing::ElementsAre("--experts=shm://a,grpc://h:1", "--ctx=256", "--pin=true"));
  EXPECT_THAT(p.GivenArgs(""), testing::ElementsAre("--own=x"));
  // What GivenArgs gives parses back to the same values.
  std::string experts2, kv2 = "f16";
  int64_t ctx2 = 0;
  bool pin2 = false;
  FlagParser q;
  q.AddString("experts", &experts2, "").Repeatable();
  q.AddString("kv-type", &kv2, "");
  q.AddInt("ctx|c", &ctx2, "");
  q.AddBool("pin", &pin2, "");
  ASSERT_TRUE(q.Parse(p.GivenArgs("service")).ok());
  EXPECT_EQ(experts2, experts);
  EXPECT_EQ(ctx2, 256);
  EXPECT_TRUE(pin2);
  EXPECT_EQ(kv2, "f16");
}

TEST(HostPortTest, Table) {
  const struct {
    const char* value;
    const char* error;  // substring; "" = valid
  } cases[] = {
      {"127.0.0.1:50051", ""},
      {"0.0.0.0:0", ""},
      {"localhost:65535", ""},
      {"moesplit-worker-0.moesplit-worker:50061", ""},
      {"[::1]:8080", ""},
      {"[::]:80", ""},
      {"localhost", "no ':PORT'"},
      {":8080", "no host"},
      {"host:", "port '' is not a number"},
      {"host:65536", "port '65536' is not a number in 0..65535"},
      {"host:-1", "port '-1'"},
      {"host:80x", "port '80x'"},
      {"::1:8080", "an IPv6 address needs brackets"},
      {"[zz]:1", "bad IPv6 address"},
      {"ho st:1", "bad host name"},
  };
  for (const auto& c : cases) {
    const absl::Status s = CheckHostPort(c.value);
    if (*c.error == '\0') {
      EXPECT_TRUE(s.ok()) << c.value << ": " << s;
    } else {
      EXPECT_THAT(std::string(s.message()), testing::HasSubstr(c.error)) << c.value;
    }
  }
}

TEST(ClosestNameTest, Table) {
  const std::vector<std::string> names = {"model",    "gpu-memory",     "kv-type", "ctx",
                                          "parallel", "prefill-stream", "n",       "m"};
  const struct {
    const char* typed;
    const char* best;
  } cases[] = {
      {"modle", "model"},
      {"gpu-memroy", "gpu-memory"},
      {"gpu-mem", "gpu-memory"},
      {"kvtype", "kv-type"},
      {"kv_type", "kv-type"},
      {"cxt", "ctx"},
      {"paralel", "parallel"},
      {"prefil-stream", "prefill-stream"},
      {"x", ""},
      {"zzzzzz", ""},
      {"p", ""},
  };
  for (const auto& c : cases) EXPECT_EQ(ClosestName(c.typed, names), c.best) << c.typed;
  EXPECT_EQ(EditDistance("", "abc"), 3);
  EXPECT_EQ(EditDistance("abc", "acb"), 1);
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3);
}

}  // namespace
}  // namespace moesplit::cli
