// ChatPrompt: message validation, UTF-8 checking, the model's template and
// the ChatML fallback.
#include "services/dense/chat_prompt.h"

#include <fstream>
#include <sstream>

#include "common/chat/testing/template_fixtures.h"
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
      {R"([{"role":"user","content":[{"type":"image"}]}])",
       "messages[0].content[0] has type 'image'"},
      {R"([{"role":"user","content":[{"text":"untyped"}]}])", ""},
      {R"([{"role":"user","content":[{"type":"text"}]}])", "messages[0].content[0] must be"},
      {R"([{"role":"user","content":"a"},{"role":"user","content":[{"type":"text","text":"x"},
          {"type":"image_url","image_url":{"url":"http://127.0.0.1/x.png"}}]}])",
       "messages[1].content[1] has type 'image_url'"},
      {R"([{"role":"user","content":[{"type":"input_audio","text":"has text","input_audio":{}}]}])",
       "messages[0].content[0] has type 'input_audio'"},
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

// Content-part arrays are flattened before the template sees them: with
// Qwen3's template (which concatenates message.content as a string) the
// parts' text reaches the prompt for every role, joined by '\n' like
// llama.cpp's server, exactly as the same text sent as strings.
TEST(ChatPromptTest, ContentPartArraysRenderLikeTheirJoinedText) {
  const std::string fixtures = MOESPLIT_FIXTURES_DIR;
  auto file = GgufFile::Open(fixtures + "/models/qwen3moe-tiny-q4_k_m.gguf");
  ASSERT_TRUE(file.ok()) << file.status();
  auto tok = Tokenizer::FromGguf(**file);
  ASSERT_TRUE(tok.ok()) << tok.status();
  std::ifstream in(fixtures + "/templates/Qwen-Qwen3-0.6B.jinja");
  ASSERT_TRUE(in) << "Qwen3 template fixture";
  std::stringstream source;
  source << in.rdbuf();
  auto chat = ChatPrompt::ForModel(**file, **tok, source.str());
  ASSERT_TRUE(chat.ok()) << chat.status();
  const Json parts = Json::parse(R"([
      {"role":"system","content":[{"type":"text","text":"Be brief."}]},
      {"role":"user","content":[{"type":"text","text":"Hello there"},{"type":"text","text":"second part"}]},
      {"role":"assistant","content":[{"type":"text","text":"Hi."}]},
      {"role":"user","content":[{"type":"text","text":"And again"}]}])");
  const Json strings = Json::parse(R"([
      {"role":"system","content":"Be brief."},
      {"role":"user","content":"Hello there\nsecond part"},
      {"role":"assistant","content":"Hi."},
      {"role":"user","content":"And again"}])");
  ChatPromptOptions o;
  o.date_override = "2026-01-01";
  auto from_parts = chat->Render(parts, o);
  auto from_strings = chat->Render(strings, o);
  ASSERT_TRUE(from_parts.ok()) << from_parts.status();
  ASSERT_TRUE(from_strings.ok()) << from_strings.status();
  EXPECT_EQ(*from_parts, *from_strings);
  for (const char* text : {"Be brief.", "Hello there\nsecond part", "Hi.", "And again"}) {
    EXPECT_THAT(*from_parts, HasSubstr(text)) << *from_parts;
  }
  auto image = chat->Render(Json::parse(R"([{"role":"user","content":[
      {"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"x"}}]}])"), o);
  EXPECT_EQ(image.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(image.status().message()),
              HasSubstr("messages[0].content[1] has type 'image_url'"));
}

// A ChatPrompt with a fixture template and the tiny qwen3moe model's tokens.
// The template's source: the oracle's, or one this repository keeps.
std::string TemplateSource(const std::string& template_name) {
  for (const chat::fixtures::TemplateFixture& f : chat::fixtures::TemplateFixtures()) {
    if (f.name == template_name) return chat::fixtures::ReadTextFile(f.template_path);
  }
  ADD_FAILURE() << "no template " << template_name;
  return "";
}

absl::StatusOr<ChatPrompt> PromptWith(const std::string& template_name) {
  const std::string fixtures = MOESPLIT_FIXTURES_DIR;
  auto file = GgufFile::Open(fixtures + "/models/qwen3moe-tiny-q4_k_m.gguf");
  if (!file.ok()) return file.status();
  auto tok = Tokenizer::FromGguf(**file);
  if (!tok.ok()) return tok.status();
  return ChatPrompt::ForModel(**file, **tok, TemplateSource(template_name));
}

// The last message the assistant's: a prefill the model continues (the turn
// is left open, as llama.cpp's server does with prefill_assistant), per family.
TEST(ChatPromptTest, TrailingAssistantMessageIsContinued) {
  constexpr char kReasoned[] =
      R"([{"role":"user","content":"Hi"},{"role":"assistant","content":"Hel","reasoning_content":"Greet."}])";
  constexpr char kReasoningOnly[] =
      R"([{"role":"user","content":"Hi"},{"role":"assistant","content":"","reasoning_content":"Gre"}])";
  constexpr char kContentOnly[] = R"([{"role":"user","content":"Hi"},{"role":"assistant","content":"Hel"}])";
  struct Case {
    const char* tmpl;
    const char* messages;
    std::string prompt_ends;
  };
  const std::vector<Case> cases = {
      {"Qwen-Qwen2.5-7B-Instruct",
       R"([{"role":"user","content":"Hi"},{"role":"assistant","content":"Hel"}])",
       "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHel"},
      {"Qwen3.5-4B", R"([{"role":"user","content":"Hi"},{"role":"assistant","content":"Hel"}])",
       "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHel"},
      {"Qwen3.5-4B",
       R"([{"role":"user","content":"Hi"},{"role":"assistant","content":"","reasoning_content":"Hm"}])",
       "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\nHm"},
      // The reasoning block as Qwen3's template writes a past one.
      {"Qwen-Qwen3-0.6B", R"([{"role":"user","content":"Hi"},{"role":"assistant","content":"Hel"}])",
       "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHel"},
      {"Qwen-Qwen3-0.6B", kReasoned,
       "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\nGreet.\n</think>\n\nHel"},
      {"Qwen-Qwen3-0.6B", kReasoningOnly, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\nGre"},
      // The new families, as llama-server's /apply-template continues them.
      {"GLM-4.6", kReasoned, "<|user|>\nHi<|assistant|><think>Greet.</think>\nHel"},
      {"GLM-4.6", kReasoningOnly, "<|user|>\nHi<|assistant|><think>Gre"},
      {"GLM-4.6", kContentOnly, "<|user|>\nHi<|assistant|><think></think>\nHel"},
      {"GLM-4.7-Flash", kReasoned, "<|user|>Hi<|assistant|><think>Greet.</think>Hel"},
      {"GLM-4.7-Flash", kReasoningOnly, "<|user|>Hi<|assistant|><think>Gre"},
      {"GLM-4.7-Flash", kContentOnly, "<|user|>Hi<|assistant|><think></think>Hel"},
      {"MiniMax-M2", kReasoned, "]~b]user\nHi[e~[\n]~b]ai\n<think>\nGreet.\n</think>\n\nHel"},
      {"MiniMax-M2", kReasoningOnly, "]~b]user\nHi[e~[\n]~b]ai\n<think>\nGre"},
      {"MiniMax-M2", kContentOnly, "]~b]user\nHi[e~[\n]~b]ai\n<think>\n\n</think>\n\nHel"},
      {"Qwen3-Coder", kReasoned, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHel"},
      {"Qwen3-Coder", kReasoningOnly, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"},
      {"google-gemma-4-31B-it", kReasoned, "<|turn>user\nHi<turn|>\n<|turn>model\n<|channel>thought\nGreet.<channel|>Hel"},
      {"google-gemma-4-31B-it", kReasoningOnly, "<|turn>user\nHi<turn|>\n<|turn>model\n<|channel>thought\nGre"},
      {"google-gemma-4-31B-it", kContentOnly, "<|turn>user\nHi<turn|>\n<|turn>model\n<|channel>thought\n<channel|>Hel"},
      {"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", kReasoned,
       "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\nGreet.\n</think>\n\nHel"},
      {"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", kReasoningOnly,
       "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\nGre"},
      {"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", kContentOnly,
       "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHel"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<ChatPrompt> chat = PromptWith(c.tmpl);
    ASSERT_TRUE(chat.ok()) << chat.status();
    ChatPromptOptions o;
    absl::StatusOr<std::string> p = chat->Render(Json::parse(c.messages), o);
    ASSERT_TRUE(p.ok()) << c.tmpl << ": " << p.status();
    ASSERT_GE(p->size(), c.prompt_ends.size()) << *p;
    EXPECT_EQ(p->substr(p->size() - c.prompt_ends.size()), c.prompt_ends) << c.tmpl << ": " << *p;
    // add_generation_prompt false continues it too (llama-server's
    // prefill_assistant), and so does continue_final_message true.
    o.add_generation_prompt = false;
    absl::StatusOr<std::string> no_gen = chat->Render(Json::parse(c.messages), o);
    ASSERT_TRUE(no_gen.ok()) << no_gen.status();
    EXPECT_EQ(*no_gen, *p) << c.tmpl;
    o.continue_final_message = ContinueFinalMessage::kAuto;
    absl::StatusOr<std::string> explicit_auto = chat->Render(Json::parse(c.messages), o);
    ASSERT_TRUE(explicit_auto.ok()) << explicit_auto.status();
    EXPECT_EQ(*explicit_auto, *p) << c.tmpl;
  }
  absl::StatusOr<ChatPrompt> chat = PromptWith("Qwen-Qwen3-0.6B");
  ASSERT_TRUE(chat.ok()) << chat.status();
  for (const auto& [messages, error] : std::vector<std::pair<const char*, const char*>>{
           {R"([{"role":"user","content":"Hi"},{"role":"assistant","content":"","tool_calls":[
               {"type":"function","function":{"name":"f","arguments":"{}"}}]}])",
            "cannot continue an assistant message that contains tool calls"},
           {R"([{"role":"user","content":"Hi"},{"role":"assistant","content":"a"},
               {"role":"assistant","content":"b"}])",
            "cannot have 2 or more assistant messages at the end"}}) {
    absl::StatusOr<std::string> p = chat->Render(Json::parse(messages), ChatPromptOptions{});
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << messages;
    EXPECT_THAT(std::string(p.status().message()), HasSubstr(error));
  }
  // continue_final_message: together with add_generation_prompt, and after
  // a message that is not the assistant's, a 400.
  ChatPromptOptions both;
  both.continue_final_message = ContinueFinalMessage::kAuto;
  absl::StatusOr<std::string> p = chat->Render(Json::parse(kContentOnly), both);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(p.status().message()),
              HasSubstr("cannot set both add_generation_prompt and continue_final_message"));
  both.add_generation_prompt = false;
  p = chat->Render(Json::parse(R"([{"role":"user","content":"Hi"}])"), both);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("the last message must be the assistant's"));
  // Without it and without a generation prompt, a user turn stays closed.
  ChatPromptOptions closed;
  closed.add_generation_prompt = false;
  p = chat->Render(Json::parse(R"([{"role":"user","content":"Hi"}])"), closed);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, "<|im_start|>user\nHi<|im_end|>\n");
}

// continue_final_message "content" / "reasoning_content" as llama-server's
// /apply-template renders them (its output for these templates, taken from
// the peer binary).
TEST(ChatPromptTest, ContinueFinalMessageModes) {
  constexpr char kReasoned[] =
      R"([{"role":"user","content":"Hi"},{"role":"assistant","content":"Hel","reasoning_content":"Greet."}])";
  constexpr char kReasoningOnly[] =
      R"([{"role":"user","content":"Hi"},{"role":"assistant","content":"","reasoning_content":"Gre"}])";
  constexpr char kContentOnly[] = R"([{"role":"user","content":"Hi"},{"role":"assistant","content":"Hel"}])";
  struct Case {
    const char* tmpl;
    const char* messages;
    ContinueFinalMessage mode;
    std::string prompt_ends;
  };
  using M = ContinueFinalMessage;
  const std::vector<Case> cases = {
      {"Qwen-Qwen3-0.6B", kReasoned, M::kReasoning, "<|im_start|>assistant\n<think>\nGreet."},
      {"Qwen-Qwen3-0.6B", kReasoningOnly, M::kContent, "<|im_start|>assistant\n<think>\nGre\n</think>\n\n"},
      {"Qwen-Qwen3-0.6B", kContentOnly, M::kReasoning, "<|im_start|>assistant\n<think>\n"},
      {"Qwen3.5-4B", kReasoningOnly, M::kContent, "<|im_start|>assistant\n<think>\nGre\n</think>\n\n"},
      {"Qwen-Qwen2.5-7B-Instruct", kReasoned, M::kReasoning, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"},
      {"GLM-4.6", kReasoningOnly, M::kContent, "<|assistant|><think>Gre</think>\n"},
      {"GLM-4.6", kContentOnly, M::kReasoning, "<|user|>\nHi<|assistant|><think>"},
      {"GLM-4.7-Flash", kReasoningOnly, M::kContent, "<|assistant|><think>Gre</think>"},
      {"MiniMax-M2", kReasoned, M::kReasoning, "]~b]ai\n<think>\nGreet."},
      {"MiniMax-M2", kReasoningOnly, M::kContent, "]~b]ai\n<think>\nGre\n</think>\n\n"},
      {"Qwen3-Coder", kReasoned, M::kReasoning, "<|im_end|>\n<|im_start|>assistant\n"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<ChatPrompt> chat = PromptWith(c.tmpl);
    ASSERT_TRUE(chat.ok()) << chat.status();
    ChatPromptOptions o;
    o.add_generation_prompt = false;
    o.continue_final_message = c.mode;
    absl::StatusOr<std::string> p = chat->Render(Json::parse(c.messages), o);
    ASSERT_TRUE(p.ok()) << c.tmpl << ": " << p.status();
    ASSERT_GE(p->size(), c.prompt_ends.size()) << *p;
    EXPECT_EQ(p->substr(p->size() - c.prompt_ends.size()), c.prompt_ends) << c.tmpl << ": " << *p;
  }
}

// Extra template variables (chat_template_kwargs, reasoning_effort) reach
// the template: gpt-oss's system message names the reasoning effort.
TEST(ChatPromptTest, ExtraContextReachesTheTemplate) {
  auto chat = PromptWith("openai-gpt-oss-120b");
  ASSERT_TRUE(chat.ok()) << chat.status();
  const Json messages = Json::parse(R"([{"role":"user","content":"Hi"}])");
  ChatPromptOptions o;
  o.date_override = "2026-01-01";
  auto plain = chat->Render(messages, o);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_THAT(*plain, HasSubstr("Reasoning: medium"));
  o.extra_context = Json::parse(R"({"reasoning_effort":"high"})");
  auto high = chat->Render(messages, o);
  ASSERT_TRUE(high.ok()) << high.status();
  EXPECT_THAT(*high, HasSubstr("Reasoning: high"));
  o.extra_context = Json::parse(R"([1])");
  EXPECT_EQ(chat->Render(messages, o).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace moesplit::dense
