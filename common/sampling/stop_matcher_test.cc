#include "common/sampling/stop_matcher.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"

namespace moesplit {
namespace {

StopMatcher Make(std::vector<std::string> stops) {
  absl::StatusOr<StopMatcher> m = StopMatcher::Create(std::move(stops));
  EXPECT_TRUE(m.ok()) << m.status();
  return *std::move(m);
}

// Whole-text answer: the occurrence ending first, then the longest.
struct Expected {
  std::string text;
  int stop_index = -1;
};
Expected Oracle(std::string_view text, const std::vector<std::string>& stops) {
  size_t best_end = std::string::npos, best_start = 0;
  int best = -1;
  for (size_t i = 0; i < stops.size(); ++i) {
    const size_t pos = text.find(stops[i]);
    if (pos == std::string::npos) continue;
    const size_t end = pos + stops[i].size();
    if (best < 0 || end < best_end || (end == best_end && pos < best_start)) {
      best_end = end;
      best_start = pos;
      best = static_cast<int>(i);
    }
  }
  if (best < 0) return {std::string(text), -1};
  return {std::string(text.substr(0, best_start)), best};
}

bool ValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3
                                     : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += len;
  }
  return true;
}

struct RunResult {
  std::string text;
  int stop_index = -1;
  bool chunks_valid_utf8 = true;
};

// Feeds `text` cut before every byte whose bit is set in `cuts` (bit i-1 =
// cut before byte i), then flushes.
RunResult RunSplit(std::string_view text, const std::vector<std::string>& stops,
                   uint64_t cuts) {
  StopMatcher m = Make(stops);
  RunResult r;
  size_t start = 0;
  auto emit = [&](const std::string& chunk) {
    r.text += chunk;
    r.chunks_valid_utf8 = r.chunks_valid_utf8 && ValidUtf8(chunk);
  };
  for (size_t i = 1; i <= text.size(); ++i) {
    if (i == text.size() || ((cuts >> (i - 1)) & 1)) {
      StopMatcher::Result res = m.Feed(text.substr(start, i - start));
      emit(res.text);
      if (res.stopped) r.stop_index = res.stop_index;
      start = i;
    }
  }
  emit(m.Flush());
  EXPECT_EQ(m.stop_index(), r.stop_index);
  return r;
}

uint64_t SplitMix(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Every cut (up to 2^18 of them) or, for longer texts, 4096 random ones.
void CheckAllSplits(std::string_view text, const std::vector<std::string>& stops,
                    const Expected& want, const char* name) {
  const size_t n_cuts = text.empty() ? 0 : text.size() - 1;
  const bool exhaustive = n_cuts <= 18;
  const uint64_t runs = exhaustive ? (uint64_t{1} << n_cuts) : 4096;
  uint64_t rng = 99;
  for (uint64_t k = 0; k < runs; ++k) {
    const uint64_t cuts = exhaustive ? k : SplitMix(rng);
    const RunResult r = RunSplit(text, stops, cuts);
    ASSERT_EQ(r.text, want.text) << name << " cuts=" << cuts;
    ASSERT_EQ(r.stop_index, want.stop_index) << name << " cuts=" << cuts;
    if (ValidUtf8(text)) {
      ASSERT_TRUE(r.chunks_valid_utf8) << name << " cuts=" << cuts;
    }
  }
}

TEST(StopMatcherTest, EveryCutOfHelloStopWorld) {
  CheckAllSplits("Hello STOP world", {"STOP"}, {"Hello ", 0}, "hello");
}

TEST(StopMatcherTest, Table) {
  struct Case {
    const char* name;
    std::string text;
    std::vector<std::string> stops;
    Expected want;
  };
  const Case cases[] = {
      {"no match", "Hello world", {"STOP"}, {"Hello world", -1}},
      {"no stops", "Hello world", {}, {"Hello world", -1}},
      {"partial prefix at end is flushed", "Hello ST", {"STOP"},
       {"Hello ST", -1}},
      {"match at start", "STOPxyz", {"STOP"}, {"", 0}},
      {"match at end", "abc STOP", {"STOP"}, {"abc ", 0}},
      {"second stop first in text", "one two three", {"three", "two"},
       {"one ", 1}},
      {"self-overlapping stop", "xaaab", {"aab"}, {"xa", 0}},
      {"repeated false starts", "ababac", {"abac"}, {"ab", 0}},
      {"earliest end wins over earliest start", "xabcd", {"abcd", "bc"},
       {"xa", 1}},
      {"same end: longest wins", "xa b", {"b", "a b"}, {"x", 1}},
      {"stop is prefix of another", "zabc", {"abc", "ab"}, {"z", 1}},
      {"newline stop", "line1\nline2", {"\n"}, {"line1", 0}},
      {"utf8 stop", "Grüße 日本語です", {"日本"}, {"Grüße ", 0}},
      {"utf8 arrow", "a→b→c", {"→c"}, {"a→b", 0}},
      {"utf8 text no match", "naïve café", {"cafè"}, {"naïve café", -1}},
      {"utf8 shared lead bytes", "日曜日本", {"日本", "曜日x"}, {"日曜", 0}},
      {"emoji stop", "ok 👍 done", {"👍"}, {"ok ", 0}},
  };
  for (const Case& c : cases) {
    ASSERT_EQ(Oracle(c.text, c.stops).text, c.want.text) << c.name;
    CheckAllSplits(c.text, c.stops, c.want, c.name);
  }
}

TEST(StopMatcherTest, RandomTextsAgreeWithWholeTextOracle) {
  const std::vector<std::vector<std::string>> stop_sets = {
      {"ab"}, {"aab", "ba"}, {"abab", "bb"}, {"a", "bab"}, {"bba", "abb", "b"},
      {"aaaa"}};
  uint64_t rng = 5;
  for (int iter = 0; iter < 3000; ++iter) {
    const auto& stops = stop_sets[iter % stop_sets.size()];
    std::string text(SplitMix(rng) % 14, 'a');
    for (char& ch : text) ch = (SplitMix(rng) & 1) ? 'b' : 'a';
    const Expected want = Oracle(text, stops);
    for (int k = 0; k < 8; ++k) {
      const RunResult r = RunSplit(text, stops, SplitMix(rng));
      ASSERT_EQ(r.text, want.text) << "text=" << text << " iter=" << iter;
      ASSERT_EQ(r.stop_index, want.stop_index) << "text=" << text;
    }
  }
}

TEST(StopMatcherTest, HoldsBackOnlyPossibleStopPrefixes) {
  StopMatcher m = Make({"STOP", "END"});
  struct Step {
    const char* delta;
    const char* emitted;
    size_t pending;
  };
  const Step steps[] = {
      {"Hello ST", "Hello ", 2},  // "ST" may start STOP
      {"X", "STX", 0},            // no longer
      {"E", "", 1},
      {"N", "", 2},
      {"S", "EN", 1},             // "S" may start STOP
      {"TO", "", 3},
  };
  for (const Step& s : steps) {
    const StopMatcher::Result r = m.Feed(s.delta);
    EXPECT_EQ(r.text, s.emitted) << "after " << s.delta;
    EXPECT_FALSE(r.stopped);
    EXPECT_EQ(m.pending_size(), s.pending) << "after " << s.delta;
  }
  const StopMatcher::Result r = m.Feed("P and more");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.stop_index, 0);
  EXPECT_EQ(r.text, "");
  // Finished: nothing more comes out.
  EXPECT_EQ(m.Feed("x").text, "");
  EXPECT_TRUE(m.Feed("y").stopped);
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopMatcherTest, HoldsBackIncompleteUtf8) {
  StopMatcher m = Make({});
  const std::string e_acute = "\xC3\xA9";  // é
  const std::string han = "\xE6\x97\xA5";  // 日
  EXPECT_EQ(m.Feed("h" + e_acute.substr(0, 1)).text, "h");
  EXPECT_EQ(m.Feed(e_acute.substr(1)).text, e_acute);
  EXPECT_EQ(m.Feed(han.substr(0, 2)).text, "");
  EXPECT_EQ(m.Feed(han.substr(2) + "!").text, han + "!");
  EXPECT_EQ(m.Feed(han.substr(0, 1)).text, "");
  // End of stream: whatever is held comes out, even if incomplete.
  EXPECT_EQ(m.Flush(), han.substr(0, 1));
  EXPECT_EQ(m.Feed("more").text, "");
}

TEST(StopMatcherTest, RejectsEmptyStopString) {
  absl::StatusOr<StopMatcher> m = StopMatcher::Create({"ok", ""});
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.status().message(), "stop string 1 is empty");
}

}  // namespace
}  // namespace moesplit
