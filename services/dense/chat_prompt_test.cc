// ChatPrompt: message validation, UTF-8 checking, the model's template and
// the ChatML fallback.
#include "services/dense/chat_prompt.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moesplit::dense {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::ordered_json;

TEST(IsValidUtf8Test, AcceptsWellFormedRejectsTheRest) {
  struct Case {
    std::string s;
    bool valid;
  };
  const Case cases[] = {
      {"", true},
      {"plain ascii", true},
      {"h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80", true},
      {"\xff", false},
      {"\xc3", false},              // truncated
      {"\xc0\xaf", false},          // overlong '/'
      {"\xe0\x80\xaf", false},      // overlong
      {"\xed\xa0\x80", false},      // surrogate U+D800
      {"\xf4\x90\x80\x80", false},  // > U+10FFFF
      {"a\x80z", false},            // lone continuation
  };
  for (const Case& c : cases) EXPECT_EQ(IsValidUtf8(c.s), c.valid) << testing::PrintToString(c.s);
}

TEST(ValidateMessagesTest, NamesTheOffendingMessageAndField) {
  struct Case {
    std::string json;
    std::string error;  // empty: valid
  };
  const Case cases[] = {
      {R"([{"role":"user","content":"hi"}])", ""},
      {R"([{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"x"}]}])", ""},
      {R"([{"role":"assistant","content":null}])", ""},
      {R"([])", "messages must not be empty"},
      {R"({"role":"user"})", "messages must be an array"},
      {R"([{"content":"hi"}])", "messages[0].role is missing"},
      {R"([{"role":"user","content":"a"},{"role":"wizard","content":"b"}])",
       "messages[1].role 'wizard' is not one of"},
      {R"([{"role":"user"}])", "messages[0].content is missing"},
      {R"([{"role":"user","content":7}])", "messages[0].content must be a string"},
      {R"([{"role":"user","content":[{"type":"image"}]}])", "messages[0].content[0] must be"},
  };
  for (const Case& c : cases) {
    const absl::Status s = ValidateMessages(Json::parse(c.json));
    if (c.error.empty()) {
      EXPECT_TRUE(s.ok()) << c.json << ": " << s;
    } else {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.json;
      EXPECT_THAT(std::string(s.message()), HasSubstr(c.error)) << c.json;
    }
  }
  Json bad = Json::array({{{"role", "user"}, {"content", "a\xff"}}});
  EXPECT_THAT(std::string(ValidateMessages(bad).message()), HasSubstr("not valid UTF-8"));
}

}  // namespace
}  // namespace moesplit::dense
