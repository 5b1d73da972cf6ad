// VolatileSystemFilter: the default pattern takes Claude Code's billing
// header (alone in its block, or before other text on its line, with or
// without cch) out of system and developer messages, and nothing else.
#include "services/dense/volatile_system.h"

#include "gtest/gtest.h"

namespace moesplit::dense {
namespace {

using Json = nlohmann::ordered_json;

TEST(VolatileSystemFilterTest, TheDefaultTakesOutTheBillingHeaderOnly) {
  auto f = VolatileSystemFilter::Create(kDefaultVolatileSystemPattern);
  ASSERT_TRUE(f.ok()) << f.status();
  const VolatileSystemFilter& v = **f;
  EXPECT_EQ(v.Strip("x-anthropic-billing-header: cc_version=2.1.101.e51; cc_entrypoint=cli; cch=a5145;"), "");
  EXPECT_EQ(v.Strip("x-anthropic-billing-header: cc_version=2.1.101.e51; cc_entrypoint=cli; "
                    "cch=a5145;You are Claude Code."),
            "You are Claude Code.");
  EXPECT_EQ(v.Strip("x-anthropic-billing-header: cc_version=2.1.181.73f; cc_entrypoint=sdk-cli;\n"
                    "You are Claude Code.\nMore."),
            "You are Claude Code.\nMore.");
  EXPECT_EQ(v.Strip("Intro.\nx-anthropic-billing-header: cch=00000;\nRest"), "Intro.\nRest");
  EXPECT_EQ(v.Strip("You are Claude Code; cch=1;"), "You are Claude Code; cch=1;");
  EXPECT_EQ(v.Strip("caf\xc3\xa9"), "caf\xc3\xa9");
  EXPECT_EQ(v.Strip("bad \xff utf-8 x-anthropic-billing-header: cch=1;"),
            "bad \xff utf-8 x-anthropic-billing-header: cch=1;");  // left to rendering to refuse
}

TEST(VolatileSystemFilterTest, StripsSystemAndDeveloperTextAndDropsEmptiedParts) {
  auto f = VolatileSystemFilter::Create("cch=[0-9a-f]+;|^stamp \\d+$\\n?");
  ASSERT_TRUE(f.ok()) << f.status();
  const Json in = Json::parse(R"([
    {"role": "system", "content": [{"type": "text", "text": "cch=ab12;"}, {"type": "text", "text": "Be kind. cch=ff;"}]},
    {"role": "developer", "content": "stamp 12\nRules"},
    {"role": "system", "content": [{"type": "text", "text": "cch=1;"}]},
    {"role": "user", "content": "cch=ab12;"},
    {"role": "assistant", "content": null}])");
  const Json want = Json::parse(R"([
    {"role": "system", "content": [{"type": "text", "text": "Be kind. "}]},
    {"role": "developer", "content": "Rules"},
    {"role": "system", "content": ""},
    {"role": "user", "content": "cch=ab12;"},
    {"role": "assistant", "content": null}])");
  EXPECT_EQ((*f)->StripMessages(in), want);
}

TEST(VolatileSystemFilterTest, ABadPatternIsRefusedNamingTheFlag) {
  auto f = VolatileSystemFilter::Create("x(");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(f.status().message().find("--volatile-system-pattern: at offset 2"), std::string::npos)
      << f.status();
}

}  // namespace
}  // namespace moesplit::dense
