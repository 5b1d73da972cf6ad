// VocabSpec validation, GGUF round trips and the generated test vocabulary.
#include "common/tokenizer/vocab_spec.h"

#include <functional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/gguf/gguf.h"
#include "common/gguf/gguf_writer.h"
#include "common/tokenizer/tokenizer.h"

namespace moesplit {
namespace {

using ::testing::HasSubstr;

// Writes `spec` into an in-memory GGUF and loads it back.
struct Loaded {
  std::vector<uint8_t> bytes;
  std::unique_ptr<GgufFile> gguf;
};
absl::StatusOr<Loaded> RoundTrip(const VocabSpec& spec) {
  GgufWriter writer;
  writer.SetString("general.architecture", "qwen3moe");
  absl::Status s = WriteVocabSpec(spec, &writer);
  if (!s.ok()) return s;
  Loaded loaded;
  auto bytes = writer.Serialize();
  if (!bytes.ok()) return bytes.status();
  loaded.bytes = std::move(*bytes);
  auto gguf = GgufFile::FromBuffer(loaded.bytes.data(), loaded.bytes.size());
  if (!gguf.ok()) return gguf.status();
  loaded.gguf = std::move(*gguf);
  return loaded;
}

TEST(MakeTestVocabTest, LayoutAndDeterminism) {
  auto spec = MakeTestVocab(499);
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->tokens.size(), 499u);
  ASSERT_EQ(spec->types.size(), 499u);
  EXPECT_EQ(spec->tokens[' '], "\xC4\xA0");
  EXPECT_EQ(spec->tokens['a'], "a");
  EXPECT_EQ(spec->tokens[496], "<|endoftext|>");
  EXPECT_EQ(spec->tokens[497], "<|im_start|>");
  EXPECT_EQ(spec->tokens[498], "<|im_end|>");
  EXPECT_EQ(spec->types[497], TokenType::kControl);
  EXPECT_EQ(spec->bos, 496);
  EXPECT_EQ(spec->pad, 496);
  EXPECT_EQ(spec->eos, 498);
  EXPECT_FALSE(spec->add_bos);
  EXPECT_GE(spec->merges.size(), 240u);  // 240 new tokens, maybe more merges
  for (int i = 256; i < 496; ++i) EXPECT_EQ(spec->types[i], TokenType::kNormal);
  EXPECT_TRUE(ValidateVocabSpec(*spec).ok());
  auto again = MakeTestVocab(499);
  EXPECT_EQ(again->tokens, spec->tokens);
  EXPECT_EQ(again->merges, spec->merges);
}

TEST(MakeTestVocabTest, SizesBeyondTheTextArePadded) {
  for (int32_t bad : {258, 0, -5, (1 << 24) + 1}) {
    EXPECT_EQ(MakeTestVocab(bad).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
  auto smallest = MakeTestVocab(259);
  ASSERT_TRUE(smallest.ok());
  EXPECT_TRUE(smallest->merges.empty());
  auto big = MakeTestVocab(4096);
  ASSERT_TRUE(big.ok()) << big.status();
  ASSERT_EQ(big->tokens.size(), 4096u);
  EXPECT_EQ(big->types[4092], TokenType::kUnused);
  EXPECT_EQ(big->tokens[4095], "<|im_end|>");
  auto tok = Tokenizer::FromSpec(*big);
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ(*(*tok)->Decode({4092}), "");  // unused tokens render as nothing
}

TEST(MakeTestVocabTest, GeneratedModelTokenizesAnyText) {
  auto spec = MakeTestVocab(499);
  ASSERT_TRUE(spec.ok());
  auto loaded = RoundTrip(*spec);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto tok = Tokenizer::FromGguf(*loaded->gguf);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const std::string kTexts[] = {
      "",
      std::string(TestVocabText()),
      "The quick brown fox jumps over the lazy dog.",
      "\xC3\x9Cn\xC3\xAF" "c\xC3\xB6" "d\xC3\xA9 \xE2\x9C\x93 "
      "\xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\xA6\x99",
      std::string("\0\x01\x7F\xFF tabs\t\tand\r\nlines", 22),
      "<|im_start|>user\nhi<|im_end|>\n",
  };
  for (const std::string& text : kTexts) {
    for (bool parse_special : {false, true}) {
      auto ids = (*tok)->Encode(text, parse_special);
      ASSERT_TRUE(ids.ok());
      // Invalid UTF-8 is encoded as U+FFFD, so compare sanitized text.
      std::string expected = text;
      if (text.find('\xFF') != std::string::npos) {
        expected.replace(text.find('\xFF'), 1, "\xEF\xBF\xBD");
      }
      EXPECT_EQ(*(*tok)->Decode(*ids), expected) << text;
    }
  }
  auto chat = (*tok)->Encode("<|im_start|>user\nhi<|im_end|>\n", true);
  EXPECT_EQ(chat->front(), 497);
  EXPECT_TRUE((*tok)->IsEndOfGeneration(498));
  EXPECT_TRUE((*tok)->IsEndOfGeneration(496));
  // The merges were learnt from this text, so they compress it well.
  auto ids = (*tok)->Encode(TestVocabText(), false);
  EXPECT_LT(ids->size() * 2, TestVocabText().size());
}

TEST(VocabSpecTest, GgufRoundTripKeepsEveryField) {
  auto spec = MakeTestVocab(300);
  ASSERT_TRUE(spec.ok());
  spec->pre = "qwen35";
  spec->eot = 299;
  spec->add_eos = true;
  auto loaded = RoundTrip(*spec);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto read = ReadVocabSpec(*loaded->gguf);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->model, "gpt2");
  EXPECT_EQ(read->pre, "qwen35");
  EXPECT_EQ(read->tokens, spec->tokens);
  EXPECT_EQ(read->types, spec->types);
  EXPECT_EQ(read->merges, spec->merges);
  EXPECT_EQ(read->bos, spec->bos);
  EXPECT_EQ(read->eos, spec->eos);
  EXPECT_EQ(read->pad, spec->pad);
  EXPECT_EQ(read->eot, 299);
  EXPECT_EQ(read->eom, -1);
  EXPECT_FALSE(read->add_bos);
  EXPECT_TRUE(read->add_eos);
  EXPECT_TRUE(loaded->gguf->GetBool("tokenizer.ggml.add_bos_token").ok());
}

TEST(VocabSpecTest, ValidationNamesTheProblem) {
  const struct {
    const char* what;
    std::function<void(VocabSpec*)> breakit;
    const char* message;
  } kCases[] = {
      {"model", [](VocabSpec* s) { s->model = "llama"; }, "'llama'"},
      {"pre", [](VocabSpec* s) { s->pre = "falcon"; }, "'falcon'"},
      {"duplicate", [](VocabSpec* s) { s->tokens[300] = s->tokens[5]; },
       "duplicate"},
      {"empty", [](VocabSpec* s) { s->tokens[7].clear(); }, "empty"},
      {"types", [](VocabSpec* s) { s->types.pop_back(); }, "token types"},
      {"type value", [](VocabSpec* s) { s->types[3] = TokenType{9}; },
       "unknown type 9"},
      {"merge form", [](VocabSpec* s) { s->merges.push_back("ab"); },
       "'ab'"},
      {"merge part", [](VocabSpec* s) { s->merges.push_back("zz q"); },
       "'zz' is not a token"},
      {"bos", [](VocabSpec* s) { s->bos = 100000; }, "bos_token_id"},
      {"add_bos", [](VocabSpec* s) { s->add_bos = true; s->bos = -1; },
       "add_bos_token"},
  };
  for (const auto& c : kCases) {
    auto spec = MakeTestVocab(400);
    ASSERT_TRUE(spec.ok());
    c.breakit(&*spec);
    const absl::Status s = ValidateVocabSpec(*spec);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_THAT(s.message(), HasSubstr(c.message)) << c.what;
    GgufWriter writer;
    EXPECT_FALSE(WriteVocabSpec(*spec, &writer).ok()) << c.what;
  }
}

TEST(VocabSpecTest, ReadRejectsOtherModelsAndMissingKeys) {
  GgufWriter writer;
  writer.SetString("tokenizer.ggml.model", "llama");
  auto bytes = writer.Serialize();
  ASSERT_TRUE(bytes.ok());
  auto gguf = GgufFile::FromBuffer(bytes->data(), bytes->size());
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  auto spec = ReadVocabSpec(**gguf);
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(), HasSubstr("'llama'"));

  GgufWriter no_tokens;
  no_tokens.SetString("tokenizer.ggml.model", "gpt2");
  bytes = no_tokens.Serialize();
  gguf = GgufFile::FromBuffer(bytes->data(), bytes->size());
  ASSERT_TRUE(gguf.ok());
  spec = ReadVocabSpec(**gguf);
  EXPECT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("tokenizer.ggml.tokens"));
}

}  // namespace
}  // namespace moesplit
