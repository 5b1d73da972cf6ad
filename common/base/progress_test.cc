#include "common/base/progress.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_split.h"

namespace moesplit {
namespace {

std::string Contents(FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  return s;
}

TEST(LoadProgressTest, PlainLinesEveryTenthThenTheFinalLine) {
  FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    LoadProgress p("worker: loading", 1000, f, /*terminal=*/false);
    for (int i = 0; i < 100; ++i) p.Add(10);
    p.Finish();
    p.Finish();  // once
  }
  const std::string out = Contents(f);
  std::fclose(f);
  std::vector<std::string> lines = absl::StrSplit(out, '\n', absl::SkipEmpty());
  ASSERT_GE(lines.size(), 9u) << out;
  ASSERT_LE(lines.size(), 11u) << out;
  EXPECT_EQ(out.find('\r'), std::string::npos);
  EXPECT_EQ(lines[0].rfind("worker: loading:  10% 0.00 of 0.00 GB, ", 0), 0u) << lines[0];
  EXPECT_EQ(lines.back().rfind("worker: loading: 0.00 GB in ", 0), 0u) << lines.back();
  EXPECT_NE(lines.back().find("GB/s)"), std::string::npos);
}

TEST(LoadProgressTest, TerminalRewritesOneLine) {
  FILE* f = std::tmpfile();
  {
    LoadProgress p("w", 100, f, /*terminal=*/true);
    p.Add(100);
    p.Finish();
  }
  const std::string out = Contents(f);
  std::fclose(f);
  EXPECT_EQ(out.rfind("\rw: 100%", 0), 0u) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
}

TEST(LoadProgressTest, Texts) {
  EXPECT_EQ(LoadProgress::ProgressText(1'230'000'000, 2'900'000'000, 1.0),
            " 42% 1.23 of 2.90 GB, 1.23 GB/s");
  EXPECT_EQ(LoadProgress::FinalText(2'900'000'000, 6.0), "2.90 GB in 6.0 s (0.48 GB/s)");
}

}  // namespace
}  // namespace moesplit
