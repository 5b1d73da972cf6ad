// The tokenizer's internals: UTF-8 helpers, the GPT-2 byte map, the
// pre-tokenizer (regex rewrite and splitting) and BPE merging.
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/tokenizer/internal/bpe.h"
#include "common/tokenizer/internal/byte_level.h"
#include "common/tokenizer/internal/pre_tokenizer.h"
#include "common/tokenizer/internal/utf8.h"

namespace moesplit::tokenizer_internal {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

const std::string kWs(kLlamaWhitespace);
constexpr char kFffd[] = "\xEF\xBF\xBD";

TEST(Utf8Test, Sanitize) {
  const struct {
    std::string in, out;
  } kCases[] = {
      {"plain", "plain"},
      {"caf\xC3\xA9", "caf\xC3\xA9"},
      {"a\xE2\x82" "b", absl::StrCat("a", kFffd, kFffd, "b")},  // truncated
      {"\xFF", kFffd},
      {"\xC0\x80", absl::StrCat(kFffd, kFffd)},                 // overlong
      {"\xED\xA0\x80", absl::StrCat(kFffd, kFffd, kFffd)},      // surrogate
      {"\xF0\x9F\xA6\x99", "\xF0\x9F\xA6\x99"},
  };
  for (const auto& c : kCases) {
    EXPECT_EQ(SanitizeUtf8(c.in), c.out) << c.in;
    EXPECT_EQ(IsValidUtf8(c.in), c.in == c.out) << c.in;
  }
}

TEST(Utf8Test, IncompleteSuffixAndReplacement) {
  const struct {
    std::string in;
    size_t incomplete;
    std::string replaced;
  } kCases[] = {
      {"", 0, ""},
      {"ab", 0, "ab"},
      {"a\xF0", 1, absl::StrCat("a", kFffd)},
      {"a\xF0\x9F", 2, absl::StrCat("a", kFffd)},
      {"a\xF0\x9F\xA6", 3, absl::StrCat("a", kFffd)},
      {"\xF0\x9F\xA6\x99", 0, "\xF0\x9F\xA6\x99"},
      {"a\xE2\x82", 2, absl::StrCat("a", kFffd)},
      {"\x82", 0, kFffd},               // a lone continuation never completes
      {"\xED\xA0", 0, absl::StrCat(kFffd, kFffd)},  // surrogate start
      {"\xE2\x82" "b", 0, absl::StrCat(kFffd, "b")},
  };
  for (const auto& c : kCases) {
    EXPECT_EQ(IncompleteUtf8Suffix(c.in), c.incomplete) << c.in;
    EXPECT_EQ(ReplaceInvalidUtf8(c.in), c.replaced) << c.in;
  }
}

TEST(ByteLevelTest, KnownMappings) {
  EXPECT_EQ(ByteToUnicode(' '), "\xC4\xA0");   // Ġ U+0120
  EXPECT_EQ(ByteToUnicode('\n'), "\xC4\x8A");  // Ċ U+010A
  EXPECT_EQ(ByteToUnicode(0), "\xC4\x80");     // Ā U+0100
  EXPECT_EQ(ByteToUnicode('a'), "a");
  EXPECT_EQ(ByteToUnicode(0xAD), "\xC5\x83");  // Ń U+0143, the last one
  EXPECT_EQ(ByteToUnicode(0xE9), "\xC3\xA9");  // é maps to itself
  EXPECT_EQ(UnicodeToByte(0x120), ' ');
  EXPECT_EQ(UnicodeToByte(0x144), -1);
  EXPECT_EQ(UnicodeToByte(0x20), -1);          // a raw space is not in the map
}

TEST(ByteLevelTest, EveryByteRoundTrips) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  std::string encoded;
  ByteEncode(all, &encoded);
  EXPECT_TRUE(IsValidUtf8(encoded));
  EXPECT_EQ(ByteDecode(encoded), all);
  EXPECT_EQ(ByteDecode("x\xE2\x82\xAC"),  // € is outside the map
            "x[UNK_BYTE_0xe282acx\xE2\x82\xAC]");
}

TEST(TranslateLlamaRegexTest, RewritesWhitespaceClasses) {
  const struct {
    std::string in, out;
  } kCases[] = {
      {"\\s+", absl::StrCat("[", kWs, "]+")},
      {"\\s+(?!\\S)", absl::StrCat("[", kWs, "]+(?![^", kWs, "])")},
      {"[^\\s\\p{L}]", absl::StrCat("[^", kWs, "\\p{L}]")},
      {"[]\\s]", absl::StrCat("[]", kWs, "]")},
      {"\\\\s", "\\\\s"},  // an escaped backslash followed by 's'
      {"[\\r\\n]+", "[\\r\\n]+"},
  };
  for (const auto& c : kCases) {
    auto out = TranslateLlamaRegex(c.in);
    ASSERT_TRUE(out.ok()) << c.in << ": " << out.status();
    EXPECT_EQ(*out, c.out) << c.in;
  }
  for (const char* bad : {"[\\S]", "abc\\", "[[:alpha:]]"}) {
    EXPECT_EQ(TranslateLlamaRegex(bad).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

struct SplitCase {
  std::string pre, text;
  std::vector<std::string> words;
};

void PrintTo(const SplitCase& c, std::ostream* os) {
  *os << c.pre << " '" << absl::CHexEscape(AbslView(c.text)) << "'";
}

class PreTokenizerSplitTest : public ::testing::TestWithParam<SplitCase> {};

TEST_P(PreTokenizerSplitTest, Splits) {
  const SplitCase& c = GetParam();
  auto pre = PreTokenizer::Create(c.pre);
  ASSERT_TRUE(pre.ok()) << pre.status();
  std::vector<std::string_view> words;
  ASSERT_TRUE((*pre)->Split(c.text, &words).ok());
  EXPECT_THAT(std::vector<std::string>(words.begin(), words.end()),
              ElementsAreArray(c.words))
      << c.pre << " '" << c.text << "'";
}

INSTANTIATE_TEST_SUITE_P(
    PreTypes, PreTokenizerSplitTest,
    ::testing::Values(
        SplitCase{"qwen2", "Hello world", {"Hello", " world"}},
        SplitCase{"qwen2", "  Hello", {" ", " Hello"}},
        SplitCase{"qwen2", "I've 3333", {"I", "'ve", " ", "3", "3", "3", "3"}},
        SplitCase{"qwen2", "WE'LL go", {"WE", "'LL", " go"}},
        SplitCase{"qwen2", "a\n\nb", {"a", "\n\n", "b"}},
        SplitCase{"qwen2", "hi!!\n  x", {"hi", "!!\n", " ", " x"}},
        SplitCase{"qwen2", "x  \n", {"x", "  \n"}},
        SplitCase{"qwen2", "", {}},
        // U+180E is not whitespace for llama.cpp (PCRE2's \s says it is).
        SplitCase{"qwen2", "\xE1\xA0\x8E\xE1\xA0\x8E" "1",
                  {"\xE1\xA0\x8E\xE1\xA0\x8E", "1"}},
        // U+3000 (ideographic space) is whitespace.
        SplitCase{"qwen2", "a\xE3\x80\x80\xE3\x80\x80" "b",
                  {"a", "\xE3\x80\x80", "\xE3\x80\x80" "b"}},
        // A combining mark: separate for qwen2, joined to the letter by qwen35.
        SplitCase{"qwen2", "e\xCC\x81t", {"e", "\xCC\x81t"}},
        SplitCase{"qwen35", "e\xCC\x81t", {"e\xCC\x81t"}},
        SplitCase{"qwen35", "Hello world", {"Hello", " world"}},
        // gpt-4o: case changes split words, numbers go in threes, a slash
        // or newline after punctuation joins it.
        SplitCase{"gpt-4o", "HelloWorld CASE", {"Hello", "World", " CASE"}},
        SplitCase{"gpt-4o", "12345", {"123", "45"}},
        SplitCase{"gpt-4o", "don't", {"don't"}},
        SplitCase{"gpt-4o", "a//\nb", {"a", "//\n", "b"}},
        // minimax-m2: GPT-4o's split.
        SplitCase{"minimax-m2", "HelloWorld CASE", {"Hello", "World", " CASE"}},
        SplitCase{"minimax-m2", "12345", {"123", "45"}},
        SplitCase{"minimax-m2", "a//\nb", {"a", "//\n", "b"}},
        // deepseek-v3: digits, then CJK/kana runs, then words.
        SplitCase{"deepseek-v3", "12345", {"123", "45"}},
        SplitCase{"deepseek-v3", "\xE4\xBD\xA0\xE5\xA5\xBDworld",
                  {"\xE4\xBD\xA0\xE5\xA5\xBD", "world"}},
        SplitCase{"deepseek-v3", ".Net x", {".Net", " x"}}),
    [](const ::testing::TestParamInfo<SplitCase>& info) {
      std::string name = info.param.pre + "_" + std::to_string(info.index);
      for (char& c : name) {
        if (!absl::ascii_isalnum(static_cast<unsigned char>(c))) c = '_';
      }
      return name;
    });

// glm4 (and its older name chatglm-bpe): qwen2's split with numbers in
// threes; case changes do not split words.
INSTANTIATE_TEST_SUITE_P(
    Glm4, PreTokenizerSplitTest,
    ::testing::Values(SplitCase{"glm4", "12345 I've", {"123", "45", " I", "'ve"}},
                      SplitCase{"glm4", "HelloWorld x1", {"HelloWorld", " x", "1"}},
                      SplitCase{"chatglm-bpe", "1234", {"123", "4"}}),
    [](const ::testing::TestParamInfo<SplitCase>& info) {
      std::string name = info.param.pre + "_" + std::to_string(info.index);
      for (char& c : name) {
        if (!absl::ascii_isalnum(static_cast<unsigned char>(c))) c = '_';
      }
      return name;
    });

// pixtral (Nemotron-3's files; llama.cpp's LLAMA_VOCAB_PRE_TYPE_LLAMA3):
// numbers in threes, contractions apart, and ignore_merges.
INSTANTIATE_TEST_SUITE_P(
    Pixtral, PreTokenizerSplitTest,
    ::testing::Values(SplitCase{"pixtral", "12345 I've", {"123", "45", " I", "'ve"}},
                      SplitCase{"pixtral", "Hello  world!\n\n", {"Hello", " ", " world", "!\n\n"}}),
    [](const ::testing::TestParamInfo<SplitCase>& info) {
      return "pixtral_" + std::to_string(info.index);
    });

TEST(PreTokenizerTest, PixtralIgnoresMerges) {
  auto pre = PreTokenizer::Create("pixtral");
  ASSERT_TRUE(pre.ok()) << pre.status();
  EXPECT_TRUE((*pre)->spec().ignore_merges);
  auto qwen = PreTokenizer::Create("qwen2");
  ASSERT_TRUE(qwen.ok()) << qwen.status();
  EXPECT_FALSE((*qwen)->spec().ignore_merges);
}

TEST(PreTokenizerTest, UnknownTypeIsInvalidArgument) {
  auto pre = PreTokenizer::Create("llama-bpe");
  EXPECT_EQ(pre.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(pre.status().message(), HasSubstr("'llama-bpe'"));
  EXPECT_THAT(pre.status().message(), HasSubstr("qwen2"));
}

TEST(PreTokenizerTest, ExpressionsRefineEachOtherInOrder) {
  PreTokenizerSpec spec{"test", {"[0-9]+", "[a-z]"}};
  auto pre = PreTokenizer::FromSpec(spec);
  ASSERT_TRUE(pre.ok()) << pre.status();
  std::vector<std::string_view> words;
  ASSERT_TRUE((*pre)->Split("ab12-c", &words).ok());
  // "[0-9]+" gives ab | 12 | -c; "[a-z]" then splits ab and -c.
  EXPECT_THAT(words, ElementsAreArray({"a", "b", "12", "-", "c"}));
  EXPECT_EQ(PreTokenizer::FromSpec({"bad", {"(unclosed"}}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PreTokenizerTest, LongInputsSplitInLinearTime) {
  auto pre = PreTokenizer::Create("qwen2");
  ASSERT_TRUE(pre.ok());
  std::string text;
  for (int i = 0; i < 50000; ++i) text += "word ";
  std::vector<std::string_view> words;
  ASSERT_TRUE((*pre)->Split(text, &words).ok());
  EXPECT_EQ(words.size(), 50001u);  // "word", then " word" x 49999, then " "
}

TEST(BpeModelTest, MergesByRankThenLeftmost) {
  auto bpe = BpeModel::Build({"a", "b", "c", "ab", "bc", "abc", "aa"},
                             {"b c", "a b", "ab c", "a bc", "a a"});
  ASSERT_TRUE(bpe.ok()) << bpe.status();
  const struct {
    std::string word;
    std::vector<int32_t> ids;
  } kCases[] = {
      {"abc", {5}},        // "b c" (rank 0) first, then "a bc" (rank 3)
      {"aaa", {6, 0}},     // equal ranks: the leftmost pair merges first
      {"cab", {2, 3}},
      {"d", {}},           // not a token, no byte token: dropped
  };
  for (const auto& c : kCases) {
    std::vector<int32_t> ids;
    bpe->EncodeWord(c.word, &ids);
    EXPECT_THAT(ids, ElementsAreArray(c.ids)) << c.word;
  }
  EXPECT_EQ(BpeModel::Build({"a", "a"}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace moesplit::tokenizer_internal
