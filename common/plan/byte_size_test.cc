#include "common/plan/byte_size.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moesplit::plan {
namespace {

using ::testing::HasSubstr;

TEST(ByteSizeTest, ParsesUnits) {
  struct Case {
    const char* text;
    uint64_t bytes;
  };
  const Case cases[] = {
      {"8GiB", 8589934592ull},       {"8gib", 8589934592ull},
      {"7.5G", 8053063680ull},       {"8000MiB", 8388608000ull},
      {"123456", 123456},            {"0", 0},
      {"512B", 512},                 {"1K", 1024},
      {"1ki", 1024},                 {"1KB", 1000},
      {"2 GB", 2000000000ull},       {" 3 MiB ", 3145728},
      {"1.1K", 1126},                {"0.5TiB", 549755813888ull},
      {"1T", 1099511627776ull},      {".5M", 524288},
      {"18446744073709551615", UINT64_MAX},
  };
  for (const Case& c : cases) {
    absl::StatusOr<uint64_t> v = ParseByteSize(c.text);
    ASSERT_TRUE(v.ok()) << c.text << ": " << v.status();
    EXPECT_EQ(*v, c.bytes) << c.text;
  }
}

TEST(ByteSizeTest, RejectsWithPreciseErrors) {
  struct Case {
    const char* text;
    const char* error;
  };
  const Case cases[] = {
      {"", "empty"},
      {"   ", "empty"},
      {"-1G", "no sign"},
      {"+8G", "no sign"},
      {"GiB", "no number"},
      {".G", "no number"},
      {"1.2.3G", "more than one '.'"},
      {"8XB", "unknown unit 'XB'"},
      {"8GiB2", "unknown unit 'GiB2'"},
      {"1e9", "unknown unit 'e9'"},
      {"18446744073709551616", "more than 2^64 - 1 bytes"},
      {"17179869184GiB", "more than 2^64 - 1 bytes"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<uint64_t> v = ParseByteSize(c.text);
    ASSERT_FALSE(v.ok()) << c.text << " parsed as " << *v;
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(v.status().message(), HasSubstr(c.error)) << c.text;
    EXPECT_THAT(v.status().message(), HasSubstr(std::string("'") + c.text + "'")) << c.text;
  }
}

TEST(ByteSizeTest, Formats) {
  EXPECT_EQ(FormatBytes(17), "17 B");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(16777216), "16.00 MiB");
  EXPECT_EQ(FormatBytes(8589934592ull), "8.00 GiB");
  EXPECT_EQ(FormatBytes(3422552064ull), "3.19 GiB");
}

}  // namespace
}  // namespace moesplit::plan
