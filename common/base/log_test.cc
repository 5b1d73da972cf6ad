#include "common/base/log.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace moesplit {
namespace {

using std::chrono::milliseconds;
using std::chrono::system_clock;

// 2026-12-01T22:35:41.123Z
const system_clock::time_point kWhen{milliseconds(1796164541123)};

TEST(LogTest, Rfc3339WithMillisecondsInUtc) {
  EXPECT_EQ(Rfc3339Millis(kWhen), "2026-12-01T22:35:41.123Z");
  EXPECT_EQ(Rfc3339Millis(system_clock::time_point{milliseconds(5)}), "1970-01-01T00:00:00.005Z");
}

TEST(LogTest, TextLineHasTimestampLevelSourceMessageAndFields) {
  const std::string line = FormatLogLine(
      LogFormat::kText, kWhen, LogLevel::kInfo, "moesplit-dense", "request",
      {{"id", "chatcmpl-1"}, {"prompt_tokens", 12}, {"ttft_ms", 41.5}, {"note", "two words"}});
  EXPECT_EQ(line,
            "2026-12-01T22:35:41.123Z INFO moesplit-dense: request id=chatcmpl-1 "
            "prompt_tokens=12 ttft_ms=41.5 note=\"two words\"");
}

TEST(LogTest, TextLevels) {
  for (const auto& [level, name] : {std::pair{LogLevel::kInfo, " INFO "},
                                    std::pair{LogLevel::kWarning, " WARN "},
                                    std::pair{LogLevel::kError, " ERROR "}}) {
    const std::string line = FormatLogLine(LogFormat::kText, kWhen, level, "s", "m", {});
    EXPECT_NE(line.find(name), std::string::npos) << line;
  }
}

TEST(LogTest, JsonLineParsesWithTypedFieldsInOrder) {
  const std::string line = FormatLogLine(
      LogFormat::kJson, kWhen, LogLevel::kWarning, "moesplit-dense", "say \"hi\"\n",
      {{"generated_tokens", int64_t{7}}, {"tokens_per_s", 12.25}, {"outcome", "ok"},
       {"nan", std::nan("")}});
  const auto j = nlohmann::ordered_json::parse(line);
  EXPECT_EQ(j["ts"], "2026-12-01T22:35:41.123Z");
  EXPECT_EQ(j["level"], "warning");
  EXPECT_EQ(j["source"], "moesplit-dense");
  EXPECT_EQ(j["msg"], "say \"hi\"\n");
  EXPECT_EQ(j["generated_tokens"], 7);
  EXPECT_DOUBLE_EQ(j["tokens_per_s"].get<double>(), 12.25);
  EXPECT_EQ(j["outcome"], "ok");
  EXPECT_TRUE(j["nan"].is_null());
  std::vector<std::string> keys;
  for (const auto& [k, v] : j.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"ts", "level", "source", "msg", "generated_tokens",
                                            "tokens_per_s", "outcome", "nan"}));
}

TEST(LogTest, JsonEscapesControlCharacters) {
  const std::string line =
      FormatLogLine(LogFormat::kJson, kWhen, LogLevel::kInfo, "s", std::string("a\x01z"), {});
  EXPECT_NE(line.find("a\\u0001z"), std::string::npos) << line;
  EXPECT_EQ(nlohmann::json::parse(line)["msg"], std::string("a\x01z"));
}

TEST(LogTest, ParseLogFormat) {
  EXPECT_EQ(*ParseLogFormat("text"), LogFormat::kText);
  EXPECT_EQ(*ParseLogFormat("json"), LogFormat::kJson);
  EXPECT_EQ(ParseLogFormat("yaml").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace moesplit
