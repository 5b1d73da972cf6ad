// ChatTemplate against the oracle: every <name>.jinja under
// $MOESPLIT_FIXTURES_DIR/templates must render each case of
// <name>.expected.json (beside it, or this repository's rendering by
// llama.cpp under common/chat/testdata/templates: testing/template_fixtures.h)
// byte-identically to llama.cpp's prompt. The fixtures were rendered on
// 2026-11-29, so strftime_now gets that date as an override.
#include "common/chat/chat_template.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/chat/testing/template_fixtures.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moesplit::chat {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr char kFixtureDate[] = "2026-11-29";

struct Fixture {
  std::string name;
  std::string source;
  std::string tools_expected_path;  // "" when none
  std::string date;                 // the renderings' date (strftime_now, date_string)
  nlohmann::ordered_json cases;
};

// The templates that come with llama.cpp's renderings (<name>.expected.json);
// a template without them (one of a family not served yet) is left out.
std::vector<Fixture> LoadFixtures() {
  std::vector<Fixture> out;
  for (const fixtures::TemplateFixture& t : fixtures::TemplateFixtures()) {
    if (t.expected_path.empty()) continue;
    Fixture f;
    f.name = t.name;
    f.source = fixtures::ReadTextFile(t.template_path);
    f.tools_expected_path = t.tools_expected_path;
    const nlohmann::ordered_json file = nlohmann::ordered_json::parse(fixtures::ReadTextFile(t.expected_path));
    f.cases = file["cases"];
    f.date = file.value("date", std::string(kFixtureDate));
    out.push_back(std::move(f));
  }
  return out;
}

// The variables llama.cpp rendered the fixtures with (fixtures/README.md).
ChatTemplateOptions FixtureOptions(const nlohmann::ordered_json& request) {
  ChatTemplateOptions o;
  o.bos_token = "<|endoftext|>";
  o.eos_token = "<|im_end|>";
  o.enable_thinking = true;
  o.date_override = kFixtureDate;
  if (request.contains("add_generation_prompt")) {
    o.add_generation_prompt = request["add_generation_prompt"].get<bool>();
  }
  // As llama.cpp's server: chat_template_kwargs.enable_thinking overrides.
  if (request.contains("chat_template_kwargs")) {
    o.enable_thinking = request["chat_template_kwargs"].value("enable_thinking", true);
  }
  return o;
}

// A case llama.cpp refused (its "error": the template's raise_exception)
// must fail here too; otherwise the prompt must be llama.cpp's. Counts a
// match into *ok.
void ExpectRendering(const ChatTemplate& t, const nlohmann::ordered_json& c, const ChatTemplateOptions& o,
                     size_t i, size_t* ok) {
  absl::StatusOr<std::string> prompt = t.Render(c["request"]["messages"], o);
  if (c.contains("error")) {
    EXPECT_FALSE(prompt.ok()) << "case " << i << " rendered although llama.cpp refused it: "
                              << c["error"].get<std::string>();
    *ok += !prompt.ok();
    return;
  }
  ASSERT_TRUE(prompt.ok()) << "case " << i << ": " << prompt.status();
  const std::string expected = c["prompt"].get<std::string>();
  EXPECT_EQ(*prompt, expected) << "case " << i;
  *ok += *prompt == expected;
}

TEST(ChatTemplateFixtureTest, EveryTemplateMatchesLlamaCpp) {
  const std::vector<Fixture> loaded = LoadFixtures();
  // The oracle's five, and GLM-4.6, GLM-4.7-Flash, MiniMax-M2,
  // Qwen3-Coder, Gemma 4, Nemotron 3 Nano, Llama 3.1 and 3.3 with this
  // repository's renderings.
  ASSERT_GE(loaded.size(), 13u) << "templates with renderings under " << fixtures::FixtureTemplatesDir()
                               << " and " << fixtures::RepoRenderingsDir();
  size_t total = 0, passed = 0;
  for (const Fixture& f : loaded) {
    SCOPED_TRACE(f.name);
    absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(f.source);
    ASSERT_TRUE(t.ok()) << t.status();
    size_t ok = 0;
    for (size_t i = 0; i < f.cases.size(); ++i) {
      ChatTemplateOptions o = FixtureOptions(f.cases[i]["request"]);
      o.date_override = f.date;
      ExpectRendering(*t, f.cases[i], o, i, &ok);
    }
    std::printf("%-40s %zu/%zu cases match\n", f.name.c_str(), ok, f.cases.size());
    total += f.cases.size();
    passed += ok;
  }
  EXPECT_EQ(passed, total);
  EXPECT_GE(total, 20u);
}

// With tools: every case of <name>.tools.expected.json (tool definitions,
// assistant tool_calls whose arguments are JSON strings, role "tool"
// results), rendered on the fixture's own date.
TEST(ChatTemplateFixtureTest, EveryTemplateWithToolsMatchesLlamaCpp) {
  size_t total = 0, passed = 0;
  for (const Fixture& f : LoadFixtures()) {
    SCOPED_TRACE(f.name);
    if (f.tools_expected_path.empty()) continue;
    const nlohmann::ordered_json fixture =
        nlohmann::ordered_json::parse(fixtures::ReadTextFile(f.tools_expected_path));
    absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(f.source);
    ASSERT_TRUE(t.ok()) << t.status();
    for (size_t i = 0; i < fixture["cases"].size(); ++i) {
      const auto& c = fixture["cases"][i];
      ChatTemplateOptions o = FixtureOptions(c["request"]);
      o.date_override = fixture["date"].get<std::string>();
      o.tools = c["request"]["tools"];
      ExpectRendering(*t, c, o, i, &passed);
      ++total;
    }
  }
  std::printf("tools fixtures: %zu/%zu cases match\n", passed, total);
  EXPECT_GE(total, 26u);
  EXPECT_EQ(passed, total);
}

// add_generation_prompt absent from the request is undefined, which these
// templates treat like false (DeepSeek even checks `is defined`).
TEST(ChatTemplateFixtureTest, AbsentGenerationPromptRendersLikeFalse) {
  for (const Fixture& f : LoadFixtures()) {
    SCOPED_TRACE(f.name);
    absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(f.source);
    ASSERT_TRUE(t.ok()) << t.status();
    for (const auto& c : f.cases) {
      if (c["request"].value("add_generation_prompt", true)) continue;
      ChatTemplateOptions o = FixtureOptions(c["request"]);
      o.date_override = f.date;
      o.add_generation_prompt.reset();
      absl::StatusOr<std::string> prompt = t->Render(c["request"]["messages"], o);
      ASSERT_TRUE(prompt.ok()) << prompt.status();
      EXPECT_EQ(*prompt, c["prompt"].get<std::string>());
    }
  }
}

absl::StatusOr<std::string> RenderWith(std::string_view source, const nlohmann::ordered_json& messages,
                                       const ChatTemplateOptions& options) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(std::string(source));
  if (!t.ok()) return t.status();
  return t->Render(messages, options);
}

TEST(ChatTemplateTest, VariablesAreDefinedAsLlamaCppDoes) {
  const auto messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
  const char* src =
      "{{ add_generation_prompt is defined }}|{{ add_generation_prompt }}|{{ bos_token }}|{{ eos_token }}|"
      "{{ enable_thinking }}|{{ tools is defined }}|{{ extra }}|{{ strftime_now('%d %b %Y %A') }}";
  ChatTemplateOptions o;
  o.bos_token = "<s>";
  o.eos_token = "</s>";
  o.date_override = "2026-11-29";
  o.extra_context = nlohmann::ordered_json::parse(R"({"extra": "X"})");
  EXPECT_EQ(*RenderWith(src, messages, o), "False||<s>|</s>|True|False|X|29 Nov 2026 Sunday");
  o.add_generation_prompt = false;
  o.enable_thinking = false;
  o.tools = nlohmann::ordered_json::parse(R"([{"type": "function"}])");
  EXPECT_EQ(*RenderWith(src, messages, o), "True|False|<s>|</s>|False|True|X|29 Nov 2026 Sunday");
  o.extra_context = nlohmann::ordered_json::parse(R"({"enable_thinking": "overridden"})");
  EXPECT_THAT(*RenderWith("{{ enable_thinking }}", messages, o), "overridden");
  // Reasoning preserved (llama.cpp's server default), under each name.
  const char* preserve =
      "{{ preserve_reasoning }}|{{ preserve_thinking }}|{{ clear_thinking }}|"
      "{{ truncate_history_thinking }}|{{ drop_thinking }}";
  EXPECT_EQ(*RenderWith(preserve, messages, {}), "True|True|False|False|False");
  ChatTemplateOptions dropped;
  dropped.preserve_reasoning = false;
  EXPECT_EQ(*RenderWith(preserve, messages, dropped), "False|False|True|True|True");
}

TEST(ChatTemplateTest, ToolsKeepTheirKeyOrderInTojson) {
  ChatTemplateOptions o;
  o.tools = nlohmann::ordered_json::parse(
      R"([{"type": "function", "function": {"name": "f", "parameters": {"z": 1, "a": "é"}}}])");
  absl::StatusOr<std::string> out =
      RenderWith("{% for t in tools %}{{ t | tojson }}{% endfor %}", nlohmann::ordered_json::array(), o);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, R"({"type": "function", "function": {"name": "f", "parameters": {"z": 1, "a": "é"}}})");
}

TEST(ChatTemplateTest, RealClockWithoutOverride) {
  absl::StatusOr<std::string> year = RenderWith("{{ strftime_now('%Y') }}", nlohmann::ordered_json::array(), {});
  ASSERT_TRUE(year.ok()) << year.status();
  EXPECT_EQ(year->size(), 4u);
  EXPECT_GE(std::atoi(year->c_str()), 2025);
}

TEST(ChatTemplateTest, ErrorsAreInvalidArgument) {
  const auto messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
  ChatTemplateOptions o;
  absl::StatusOr<std::string> raised = RenderWith("{{ raise_exception('No messages provided.') }}", messages, o);
  EXPECT_EQ(raised.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(raised.status().message()), "template error at line 1, column 4: No messages provided.");
  EXPECT_EQ(RenderWith("x", nlohmann::ordered_json::object(), o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.date_override = "29/11/2026";
  EXPECT_THAT(std::string(RenderWith("x", messages, o).status().message()), HasSubstr("date_override"));
  EXPECT_THAT(std::string(ChatTemplate::Parse("{% if %}").status().message()),
              HasSubstr("template syntax error at line 1, column 7"));
}

// Qwen3.5 raises when there is no user query; the message must come through.
TEST(ChatTemplateTest, FixtureTemplateRaiseExceptionPropagates) {
  for (const Fixture& f : LoadFixtures()) {
    if (f.name != "Qwen3.5-4B") continue;
    absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(f.source);
    ASSERT_TRUE(t.ok());
    absl::StatusOr<std::string> out = t->Render(
        nlohmann::ordered_json::parse(R"([{"role": "system", "content": "s"}])"), FixtureOptions({}));
    EXPECT_THAT(std::string(out.status().message()), HasSubstr("No user query found in messages."));
    return;
  }
  GTEST_SKIP() << "Qwen3.5-4B fixture missing";
}

TEST(ChatTemplateTest, ChatMLFallback) {
  const auto messages = nlohmann::ordered_json::parse(R"([
      {"role": "system", "content": "sys"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": null}])");
  ChatTemplateOptions o;
  o.add_generation_prompt = true;
  absl::StatusOr<std::string> out = RenderWith(ChatMLFallbackTemplate(), messages, o);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out,
            "<|im_start|>system\nsys<|im_end|>\n<|im_start|>user\nab<|im_end|>\n"
            "<|im_start|>assistant\n<|im_end|>\n<|im_start|>assistant\n");
  o.add_generation_prompt.reset();
  EXPECT_EQ(*RenderWith(ChatMLFallbackTemplate(), nlohmann::ordered_json::parse(R"([{"role":"user","content":"x"}])"), o),
            "<|im_start|>user\nx<|im_end|>\n");
}

// Random byte mutations of the real templates never crash the engine: each
// either fails with a Status or renders within the limits. 200 mutations per
// template by default; MOESPLIT_CHAT_FUZZ_ITERATIONS / _SEED run more.
TEST(ChatTemplateFuzzTest, MutatedFixtureTemplatesNeverCrash) {
  const std::vector<Fixture> fixtures = LoadFixtures();
  ASSERT_FALSE(fixtures.empty());
  const char* iters_env = std::getenv("MOESPLIT_CHAT_FUZZ_ITERATIONS");
  const char* seed_env = std::getenv("MOESPLIT_CHAT_FUZZ_SEED");
  const int iterations = iters_env != nullptr ? std::max(1, std::atoi(iters_env)) : 200;
  std::mt19937 rng(seed_env != nullptr ? static_cast<uint32_t>(std::atoi(seed_env)) : 20261129u);
  const std::string interesting = "{}%#-+()[]'\"|.,:=~*/ \n\\0aZ_";
  ChatTemplateOptions o = FixtureOptions(nlohmann::ordered_json::parse(R"({"add_generation_prompt": true})"));
  o.limits.max_steps = 2'000'000;
  o.limits.max_output_bytes = 1 << 20;
  const auto messages = fixtures[0].cases[2]["request"]["messages"];
  int mutations = 0, parsed = 0, rendered = 0;
  for (const Fixture& f : fixtures) {
    for (int i = 0; i < iterations; ++i) {
      std::string src = f.source;
      const int edits = 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < edits && !src.empty(); ++e) {
        const size_t pos = rng() % src.size();
        switch (rng() % 4) {
          case 0: src[pos] = interesting[rng() % interesting.size()]; break;
          case 1: src[pos] = static_cast<char>(rng() & 0xFF); break;
          case 2: src.erase(pos, 1 + rng() % 8); break;
          default: src.insert(pos, src.substr(rng() % src.size(), 1 + rng() % 16)); break;
        }
      }
      ++mutations;
      absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(src);
      if (!t.ok()) {
        EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << t.status();
        continue;
      }
      ++parsed;
      absl::StatusOr<std::string> out = t->Render(messages, o);
      if (out.ok()) {
        ++rendered;
      } else {
        EXPECT_THAT(out.status().code(), testing::AnyOf(absl::StatusCode::kInvalidArgument,
                                                        absl::StatusCode::kResourceExhausted))
            << out.status();
      }
    }
  }
  std::printf("mutations: %d, parsed: %d, rendered: %d\n", mutations, parsed, rendered);
  EXPECT_EQ(mutations, iterations * static_cast<int>(fixtures.size()));
}

TEST(ChatTemplateTest, ToolCallArgumentsReachTheTemplateParsed) {
  const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(R"([
    {"role": "assistant", "tool_calls": [{"type": "function",
      "function": {"name": "f", "arguments": "{\"a\": [1, 2]}"}}]},
    {"role": "assistant", "content": null, "tool_calls": []}])");
  absl::StatusOr<std::string> out = RenderWith(
      "{% for m in messages %}[{{ m.content }}]{% for c in m.tool_calls %}"
      "{{ c.function.arguments.a[1] }}{% endfor %}{% endfor %}",
      messages, {});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "[]2[]");
}

TEST(ChatTemplateTest, ToolCallArgumentsThatAreNotJsonFailTheRender) {
  const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(R"([
    {"role": "user", "content": "x"},
    {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}]}])");
  absl::StatusOr<std::string> out = RenderWith("x", messages, {});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(out.status().message()),
              HasSubstr("messages[1].tool_calls[0].function.arguments is not valid JSON"));
}

TEST(ChatTemplateTest, DateStringFollowsTheDateOverride) {
  ChatTemplateOptions o;
  o.date_override = "2026-11-29";
  absl::StatusOr<std::string> out =
      RenderWith("{{ date_string }}|{{ datetime }}", nlohmann::ordered_json::array(), o);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "29 Nov 2026|Nov 29 2026");
}

}  // namespace
}  // namespace moesplit::chat
