// Tokenizer against llama.cpp's outputs: the vocab fixtures (.inp/.out, as
// llama.cpp's tests/test-tokenizer-0 reads them) and the tiny models' prompts.
#include "common/tokenizer/tokenizer.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/strings/numbers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "common/gguf/gguf.h"
#include "common/tokenizer/internal/utf8.h"

namespace moesplit {
namespace {

using ::testing::HasSubstr;

std::string FixturesDir() {
  const char* env = std::getenv("MOESPLIT_FIXTURES_DIR");
  return env != nullptr ? env : MOESPLIT_FIXTURES_DIR;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct VocabCase {
  std::string text;
  std::vector<int32_t> ids;
};

// As llama.cpp's test-tokenizer-0 read_tests: the .inp file is cut at each
// "\n__ggml_vocab_test__\n" (the file ends with one, so no case keeps a
// trailing newline of its own); .out has one line of space-separated ids per
// case.
std::vector<VocabCase> ReadVocabCases(const std::string& vocab_path) {
  const std::string raw = ReadFile(vocab_path + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  for (size_t pos = 0; pos < raw.size();) {
    const size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      inputs.push_back(raw.substr(pos));
      break;
    }
    inputs.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::ifstream out(vocab_path + ".out");
  std::vector<VocabCase> cases;
  std::string line;
  for (size_t i = 0; std::getline(out, line); ++i) {
    VocabCase c;
    if (i < inputs.size()) c.text = inputs[i];
    for (absl::string_view tok :
         absl::StrSplit(absl::StripAsciiWhitespace(line), ' ',
                        absl::SkipEmpty())) {
      int32_t id = 0;
      EXPECT_TRUE(absl::SimpleAtoi(tok, &id)) << tok;
      c.ids.push_back(id);
    }
    cases.push_back(std::move(c));
  }
  EXPECT_EQ(inputs.size(), cases.size()) << vocab_path;
  return cases;
}

std::string ParamName(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

// The vocabulary fixture of pre-tokenizer `name`: llama.cpp's real
// vocabularies (ggml-vocab-*), or the small ones trained so that the
// pre-tokenizer's splits change the ids (tiny-*, see the fixtures' README).
std::string VocabPath(const std::string& name) {
  const bool tiny = name == "gpt-4o" || name == "deepseek-v3" || name == "glm4";
  return FixturesDir() + "/vocab/" + (tiny ? "tiny-" : "ggml-vocab-") + name + ".gguf";
}

// Loading a 151k-token vocabulary takes a moment; share one per file.
const Tokenizer& LoadVocab(const std::string& name) {
  static auto* cache = new std::map<std::string, std::unique_ptr<Tokenizer>>;
  auto& slot = (*cache)[name];
  if (slot == nullptr) {
    auto gguf = GgufFile::Open(VocabPath(name));
    EXPECT_TRUE(gguf.ok()) << gguf.status();
    auto tok = Tokenizer::FromGguf(**gguf);
    EXPECT_TRUE(tok.ok()) << tok.status();
    slot = std::move(*tok);
  }
  return *slot;
}


class VocabFixtureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(VocabFixtureTest, EncodeMatchesLlamaCpp) {
  const Tokenizer& tok = LoadVocab(GetParam());
  // Gemma 4's vocabulary (model gemma4) has the pre type of its own name.
  EXPECT_EQ(tok.pre_type(), GetParam() == "gemma-4" ? "gemma4" : GetParam());
  const std::vector<VocabCase> cases = ReadVocabCases(VocabPath(GetParam()));
  ASSERT_GE(cases.size(), 40u);
  int matched = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    auto ids = tok.Encode(cases[i].text, /*parse_special=*/false,
                          /*add_special=*/false);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, cases[i].ids) << "case " << i << ": '" << cases[i].text << "'";
    matched += *ids == cases[i].ids;
  }
  std::cout << "[ vocab ] " << GetParam() << ": " << matched << "/"
            << cases.size() << " cases match llama.cpp\n";
}

TEST_P(VocabFixtureTest, DecodeRoundTrips) {
  const Tokenizer& tok = LoadVocab(GetParam());
  for (const VocabCase& c : ReadVocabCases(VocabPath(GetParam()))) {
    auto text = tok.Decode(c.ids);
    ASSERT_TRUE(text.ok()) << text.status();
    EXPECT_EQ(*text, c.text);
    auto ids = tok.Encode(c.text, false, false);
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(*tok.Decode(*ids), c.text);
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabs, VocabFixtureTest,
                         ::testing::Values("qwen2", "qwen35", "gpt-4o", "deepseek-v3"),
                         ParamName);
INSTANTIATE_TEST_SUITE_P(GlmVocabs, VocabFixtureTest, ::testing::Values("glm4"), ParamName);
INSTANTIATE_TEST_SUITE_P(GemmaVocabs, VocabFixtureTest, ::testing::Values("gemma-4"), ParamName);

// Gemma 4's vocabulary: BOS always added (the file's add_bos_token aside),
// spaces as U+2581 inside tokens, "<0xAB>" byte tokens for characters
// without a token, decoded back to the bytes.
TEST(Gemma4TokenizerTest, AddsBosEscapesSpacesAndFallsBackToByteTokens) {
  const Tokenizer& tok = LoadVocab("gemma-4");
  EXPECT_TRUE(tok.add_bos());
  EXPECT_EQ(tok.bos(), 2);
  EXPECT_EQ(tok.eos(), 1);
  auto ids = tok.Encode("Hello world", false, true);
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_GE(ids->size(), 2u);
  EXPECT_EQ((*ids)[0], 2);
  bool escaped = false;
  for (size_t i = 1; i < ids->size(); ++i) {
    escaped |= tok.TokenText((*ids)[i]).find("\xE2\x96\x81") != std::string::npos;
  }
  EXPECT_TRUE(escaped);
  EXPECT_EQ(*tok.Decode(absl::MakeConstSpan(*ids).subspan(1)), "Hello world");
  const int32_t byte = tok.FindToken("<0xF0>");
  ASSERT_GE(byte, 0);
  EXPECT_EQ(*tok.Decode({byte}), "\xF0");
}

// GLM's role tokens end generation: eot <|user|>, eom <|observation|> (the
// files' tokenizer.ggml.eot_token_id / eom_token_id), besides eos.
TEST(TokenizerTest, GlmRoleTokensEndGeneration) {
  const Tokenizer& tok = LoadVocab("glm4");
  for (const char* text : {"<|user|>", "<|observation|>"}) {
    auto ids = tok.Encode(text, /*parse_special=*/true, /*add_special=*/false);
    ASSERT_TRUE(ids.ok()) << ids.status();
    ASSERT_EQ(ids->size(), 1u) << text;
    EXPECT_TRUE(tok.IsEndOfGeneration((*ids)[0])) << text;
  }
  auto ids = tok.Encode("<|assistant|>", /*parse_special=*/true, /*add_special=*/false);
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_EQ(ids->size(), 1u);
  EXPECT_FALSE(tok.IsEndOfGeneration((*ids)[0]));
  // llama.cpp adds no BOS for glm4 (the file says add_bos_token false).
  auto plain = tok.Encode("hi", /*parse_special=*/false, /*add_special=*/true);
  ASSERT_TRUE(plain.ok());
  EXPECT_NE(plain->front(), tok.bos());
}

TEST(TokenizerTest, QwenMetadata) {
  const Tokenizer& tok = LoadVocab("qwen2");
  EXPECT_EQ(tok.n_vocab(), 151936);
  EXPECT_EQ(tok.bos(), 151643);
  EXPECT_EQ(tok.eos(), 151643);
  EXPECT_EQ(tok.pad(), 151643);
  EXPECT_EQ(tok.eot(), 151645);  // <|im_end|>, found by its text
  EXPECT_FALSE(tok.add_bos());
  EXPECT_EQ(tok.FindToken("<|im_start|>"), 151644);
  EXPECT_EQ(tok.FindToken("no such token"), -1);
  EXPECT_EQ(tok.type(151644), TokenType::kControl);
  EXPECT_EQ(tok.type(151646), TokenType::kUserDefined);
  EXPECT_EQ(tok.Piece(220), " ");          // "Ġ"
  EXPECT_EQ(tok.Piece(198), "\n");         // "Ċ"
  EXPECT_EQ(tok.Piece(151645), "<|im_end|>");
  // "</s>" (128247) is a normal token of this vocabulary, but llama.cpp's
  // end-of-generation text list names it, so it ends generation and counts
  // as a control token, exactly as in llama.cpp.
  EXPECT_THAT(tok.EndOfGenerationIds(),
              ::testing::ElementsAre(128247, 151643, 151645));
  EXPECT_EQ(tok.type(128247), TokenType::kNormal);
  EXPECT_TRUE(tok.IsControl(128247));
  EXPECT_FALSE(tok.IsControl(9707));
}

TEST(TokenizerTest, EndOfGeneration) {
  const Tokenizer& tok = LoadVocab("qwen2");
  const struct {
    int32_t id;
    bool eog;
  } kCases[] = {{151643, true}, {151645, true}, {151644, false}, {0, false},
                {151646, false}, {-1, false}, {151936, false}};
  for (const auto& c : kCases) {
    EXPECT_EQ(tok.IsEndOfGeneration(c.id), c.eog) << c.id;
  }
}

TEST(TokenizerTest, ChatMlSpecialParsing) {
  const Tokenizer& tok = LoadVocab("qwen2");
  const std::string chat =
      "<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n";
  auto with = tok.Encode(chat, /*parse_special=*/true);
  ASSERT_TRUE(with.ok());
  std::vector<int32_t> expected = {151644};
  for (const char* part : {"user\nHello there"}) {
    auto ids = tok.Encode(part, false);
    expected.insert(expected.end(), ids->begin(), ids->end());
  }
  expected.push_back(151645);
  expected.push_back(198);
  expected.push_back(151644);
  auto assistant = tok.Encode("assistant\n", false);
  expected.insert(expected.end(), assistant->begin(), assistant->end());
  EXPECT_EQ(*with, expected);
  EXPECT_EQ(*tok.Decode(*with), chat);
  EXPECT_EQ(*tok.Decode(*with, /*render_special=*/false),
            "user\nHello there\nassistant\n");

  // Without special parsing the markers are plain text.
  auto without = tok.Encode(chat, /*parse_special=*/false);
  ASSERT_TRUE(without.ok());
  for (int32_t id : *without) EXPECT_LT(id, 151643) << id;
  EXPECT_GT(without->size(), with->size());
  EXPECT_EQ(*tok.Decode(*without), chat);
}

TEST(TokenizerTest, UserDefinedTokensSplitEvenWithoutSpecialParsing) {
  const Tokenizer& tok = LoadVocab("qwen2");
  for (bool parse_special : {false, true}) {
    auto ids = tok.Encode("a[PAD151650]b", parse_special);
    ASSERT_TRUE(ids.ok());
    EXPECT_THAT(*ids, ::testing::ElementsAre(64, 151650, 65)) << parse_special;
  }
}

TEST(TokenizerTest, InvalidUtf8BecomesReplacementCharacters) {
  const Tokenizer& tok = LoadVocab("qwen2");
  auto broken = tok.Encode("a\xFF\xE2\x82 b", false);
  auto replaced = tok.Encode("a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD b", false);
  ASSERT_TRUE(broken.ok() && replaced.ok());
  EXPECT_EQ(*broken, *replaced);
}

TEST(TokenizerTest, RepeatedTextEncodesTheSameEachTime) {
  // Encode caches words within a call; repeats must come out identical.
  const Tokenizer& tok = LoadVocab("qwen2");
  const std::string once(TestVocabText());  // ends in ".\n", starts "The"
  auto one = tok.Encode(once, false);
  auto two = tok.Encode(once + once, false);
  ASSERT_TRUE(one.ok() && two.ok());
  std::vector<int32_t> expected = *one;
  expected.insert(expected.end(), one->begin(), one->end());
  EXPECT_EQ(*two, expected);
}

TEST(TokenizerTest, EncodeStopsPastTheLimitWithAPrefix) {
  const Tokenizer& tok = LoadVocab("qwen2");
  std::string text;
  for (int i = 0; i < 20; ++i) text += std::string(TestVocabText()) + "<|im_end|>";
  const std::vector<int32_t> full = *tok.Encode(text, true);
  ASSERT_GT(full.size(), 200u);
  for (size_t limit : {size_t{0}, size_t{1}, size_t{10}, size_t{150}, full.size() - 1}) {
    auto cut = tok.Encode(text, true, true, limit);
    ASSERT_TRUE(cut.ok()) << limit;
    EXPECT_GT(cut->size(), limit) << limit;
    EXPECT_LT(cut->size(), limit + 64) << limit;
    EXPECT_TRUE(std::equal(cut->begin(), cut->end(), full.begin())) << limit;
  }
  EXPECT_EQ(*tok.Encode(text, true, true, full.size()), full);
}

TEST(TokenizerTest, ConcurrentEncodesAgree) {
  const Tokenizer& tok = LoadVocab("qwen2");
  const std::string text = std::string(TestVocabText()) + "<|im_end|>";
  const std::vector<int32_t> expected = *tok.Encode(text, true);
  std::vector<std::vector<int32_t>> results(4);
  std::vector<std::thread> threads;
  for (auto& result : results) {
    threads.emplace_back([&tok, &text, &result] {
      for (int i = 0; i < 20; ++i) result = *tok.Encode(text, true);
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& result : results) EXPECT_EQ(result, expected);
}

TEST(TokenizerTest, DecodeRejectsOutOfRangeIds) {
  const Tokenizer& tok = LoadVocab("qwen2");
  for (int32_t bad : {-1, 151936, 1 << 30}) {
    const std::vector<int32_t> ids = {9707, bad};
    auto text = tok.Decode(ids);
    EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(text.status().message(), HasSubstr(std::to_string(bad)));
    EXPECT_THAT(text.status().message(), HasSubstr("151936"));
  }
}

TEST(StreamDecoderTest, HoldsBackSplitCharacters) {
  const Tokenizer& tok = LoadVocab("qwen2");
  const std::string text = "llama \xF0\x9F\xA6\x99, caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E!";
  auto ids = tok.Encode(text, false);
  ASSERT_TRUE(ids.ok());
  StreamDecoder stream(&tok);
  std::string joined;
  int held = 0;
  for (int32_t id : *ids) {
    auto piece = stream.Push(id);
    ASSERT_TRUE(piece.ok()) << piece.status();
    EXPECT_TRUE(tokenizer_internal::IsValidUtf8(*piece)) << id;
    held += stream.pending_bytes() > 0;
    joined += *piece;
  }
  joined += stream.Flush();
  EXPECT_EQ(joined, text);
  EXPECT_GT(held, 0) << "no token split a character; the test checks nothing";
}

TEST(StreamDecoderTest, FlushReplacesAnIncompleteCharacter) {
  const Tokenizer& tok = LoadVocab("qwen2");
  // The first of these characters that the vocabulary splits across tokens.
  std::vector<int32_t> split;
  for (const char* c : {"\xF0\x9F\xA6\x99", "\xF0\x93\x80\x80",
                        "\xEA\x99\xAE", "\xF0\x9D\x94\x98"}) {
    auto ids = tok.Encode(c, false);
    ASSERT_TRUE(ids.ok());
    if (ids->size() >= 2) {
      split = *ids;
      break;
    }
  }
  ASSERT_FALSE(split.empty()) << "every candidate is a single token";
  const std::vector<int32_t>* ids = &split;
  StreamDecoder stream(&tok);
  EXPECT_EQ(*stream.Push((*ids)[0]), "");
  EXPECT_GT(stream.pending_bytes(), 0u);
  EXPECT_EQ(stream.Flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(stream.pending_bytes(), 0u);
  EXPECT_EQ(stream.Push(151936).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(StreamDecoderTest, SpecialTokensFollowRenderFlag) {
  const Tokenizer& tok = LoadVocab("qwen2");
  StreamDecoder shown(&tok, /*render_special=*/true);
  StreamDecoder hidden(&tok, /*render_special=*/false);
  EXPECT_EQ(*shown.Push(151645), "<|im_end|>");
  EXPECT_EQ(*hidden.Push(151645), "");
}

// The tiny models' prompts, tokenized by llama.cpp with special parsing.
class ModelPromptTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelPromptTest, EncodeMatchesLlamaCpp) {
  const std::string base = FixturesDir() + "/models/" + GetParam();
  auto gguf = GgufFile::Open(base + ".gguf");
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  auto tok = Tokenizer::FromGguf(**gguf);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const nlohmann::json expected = nlohmann::json::parse(ReadFile(base + ".json"));
  EXPECT_EQ((*tok)->n_vocab(), expected["n_vocab"].get<int32_t>());
  int matched = 0;
  for (const auto& c : expected["cases"]) {
    const std::string text = c["text"].get<std::string>();
    auto ids = (*tok)->Encode(text, /*parse_special=*/true);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, c["tokens"].get<std::vector<int32_t>>()) << text;
    matched += *ids == c["tokens"].get<std::vector<int32_t>>();
    // The text comes back, after the BOS the vocabulary adds (Gemma's).
    absl::Span<const int32_t> body(*ids);
    if ((*tok)->add_bos() && !body.empty() && body[0] == (*tok)->bos()) body.remove_prefix(1);
    EXPECT_EQ(*(*tok)->Decode(body), text);
  }
  std::cout << "[ model ] " << GetParam() << ": " << matched << "/"
            << expected["cases"].size() << " prompts match llama.cpp\n";
}

INSTANTIATE_TEST_SUITE_P(Models, ModelPromptTest,
                         ::testing::Values("qwen3moe-tiny-f16",
                                           "qwen2moe-tiny-q8_0",
                                           "qwen35moe-tiny-f16",
                                           "gptoss-tiny-f16",
                                           "deepseek2-tiny-f16",
                                           "minimaxm2-tiny-f16",
                                           "qwen3next-tiny-f16",
                                           "gemma4-tiny-f16"),
                         ParamName);

// MiniMax-M2's role tokens (]~!b[ begins a message, ]~b] a role, [e~[ ends
// one): control tokens, and [e~[ ends generation by its text, as in llama.cpp.
TEST(TokenizerTest, MiniMaxM2ControlAndEndOfGenerationTokens) {
  auto gguf = GgufFile::Open(FixturesDir() + "/models/minimaxm2-tiny-f16.gguf");
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  auto tok = Tokenizer::FromGguf(**gguf);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const int32_t begin = (*tok)->FindToken("]~!b["), role = (*tok)->FindToken("]~b]");
  const int32_t end = (*tok)->FindToken("[e~[");
  ASSERT_GE(begin, 0);
  ASSERT_GE(role, 0);
  ASSERT_GE(end, 0);
  for (int32_t id : {begin, role, end}) EXPECT_TRUE((*tok)->IsControl(id)) << id;
  EXPECT_TRUE((*tok)->IsEndOfGeneration(end));
  EXPECT_FALSE((*tok)->IsEndOfGeneration(begin));
  EXPECT_FALSE((*tok)->IsEndOfGeneration(role));
  auto ids = (*tok)->Encode("]~!b[]~b]user\nHi[e~[", /*parse_special=*/true);
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_GE(ids->size(), 4u);
  EXPECT_EQ((*ids)[0], begin);
  EXPECT_EQ((*ids)[1], role);
  EXPECT_EQ(ids->back(), end);
}

// ignore_merges (pixtral): a word that is itself a token is that token,
// although the merges would split it ("abc": "b c" merges first, and no
// merge joins "a" to "bc").
TEST(TokenizerTest, IgnoreMergesTakesAWholeWordToken) {
  VocabSpec spec;
  spec.tokens = {"a", "b", "c", "bc", "abc"};
  spec.merges = {"b c"};
  for (const std::string pre : {"qwen2", "pixtral"}) {
    spec.pre = pre;
    auto tok = Tokenizer::FromSpec(spec);
    ASSERT_TRUE(tok.ok()) << tok.status();
    auto ids = (*tok)->Encode("abc", /*parse_special=*/false);
    ASSERT_TRUE(ids.ok()) << ids.status();
    const std::vector<int32_t> want =
        pre == "pixtral" ? std::vector<int32_t>{4} : std::vector<int32_t>{0, 3};
    EXPECT_EQ(*ids, want) << pre;
  }
}

TEST(TokenizerTest, RejectsUnknownAndMissingPreTypes) {
  auto spec = MakeTestVocab(300);
  ASSERT_TRUE(spec.ok());
  spec->pre = "llama-bpe";
  auto tok = Tokenizer::FromSpec(*spec);
  EXPECT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(tok.status().message(), HasSubstr("'llama-bpe'"));
  spec->pre = "";
  tok = Tokenizer::FromSpec(*spec);
  EXPECT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(tok.status().message(), HasSubstr("tokenizer.ggml.pre"));
}

// gpt-oss's vocabulary (o200k_harmony): <|return|> and <|call|> end
// generation, <|end|> then does not (it closes the analysis message before
// the final one), and the harmony framing tokens always render.
TEST(TokenizerTest, HarmonyTokensFollowLlamaCpp) {
  for (bool with_return : {true, false}) {
    auto spec = MakeTestVocab(300);
    ASSERT_TRUE(spec.ok());
    std::vector<std::string> extra = {"<|start|>", "<|channel|>", "<|message|>", "<|end|>",
                                      "<|call|>"};
    if (with_return) extra.push_back("<|return|>");
    const int32_t base = static_cast<int32_t>(spec->tokens.size());
    for (const std::string& t : extra) {
      spec->tokens.push_back(t);
      if (!spec->types.empty()) spec->types.push_back(TokenType::kControl);
    }
    if (spec->types.empty()) {
      spec->types.assign(spec->tokens.size(), TokenType::kNormal);
      for (size_t i = base; i < spec->tokens.size(); ++i) spec->types[i] = TokenType::kControl;
    }
    auto tok = Tokenizer::FromSpec(*spec);
    ASSERT_TRUE(tok.ok()) << tok.status();
    const int32_t start = base, channel = base + 1, end = base + 3, call = base + 4;
    EXPECT_TRUE((*tok)->IsEndOfGeneration(call));
    EXPECT_EQ((*tok)->IsEndOfGeneration(end), !with_return) << with_return;
    if (with_return) {
      EXPECT_TRUE((*tok)->IsEndOfGeneration(base + 5));
    }
    // Rendered without render_special: user-defined now.
    EXPECT_EQ(*(*tok)->Decode(std::vector<int32_t>{start, channel}, false),
              "<|start|><|channel|>");
    EXPECT_EQ(*(*tok)->Decode(std::vector<int32_t>{end}, false), with_return ? "<|end|>" : "");
  }
}

TEST(TokenizerTest, AddsBosAndEosAsTheMetadataAsks) {
  auto spec = MakeTestVocab(300);
  ASSERT_TRUE(spec.ok());
  spec->add_bos = spec->add_eos = true;
  auto tok = Tokenizer::FromSpec(*spec);
  ASSERT_TRUE(tok.ok());
  auto with = (*tok)->Encode("hi", false, /*add_special=*/true);
  auto without = (*tok)->Encode("hi", false, /*add_special=*/false);
  ASSERT_EQ(with->size(), without->size() + 2);
  EXPECT_EQ(with->front(), spec->bos);
  EXPECT_EQ(with->back(), spec->eos);
  spec->bos = -1;
  EXPECT_EQ(Tokenizer::FromSpec(*spec).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TokenizerTest, LongestSpecialTokenWins) {
  auto spec = MakeTestVocab(300);
  ASSERT_TRUE(spec.ok());
  spec->tokens.push_back("<t>");
  spec->types.push_back(TokenType::kUserDefined);
  spec->tokens.push_back("<t><u>");
  spec->types.push_back(TokenType::kUserDefined);
  auto tok = Tokenizer::FromSpec(*spec);
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto ids = (*tok)->Encode("<t><u><t>", false);
  EXPECT_THAT(*ids, ::testing::ElementsAre(301, 300));
}

}  // namespace
}  // namespace moesplit
