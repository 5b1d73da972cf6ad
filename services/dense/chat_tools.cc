#include "services/dense/chat_tools.h"

#include <algorithm>
#include <map>
#include <set>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/base/status.h"
#include "common/base/utf8.h"
#include "common/sampling/json_schema.h"

namespace moesplit::dense {
namespace {

using Json = nlohmann::ordered_json;

bool ValidName(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

absl::Status CheckTool(const Json& t, size_t i, std::set<std::string>* names) {
  const std::string where = absl::StrCat("tools[", i, "]");
  if (!t.is_object()) return absl::InvalidArgumentError(where + " must be an object");
  auto type = t.find("type");
  if (type == t.end() || *type != "function") {
    return absl::InvalidArgumentError(where + ".type must be \"function\"");
  }
  auto f = t.find("function");
  if (f == t.end() || !f->is_object()) {
    return absl::InvalidArgumentError(where + ".function must be an object");
  }
  auto name = f->find("name");
  if (name == f->end() || !name->is_string() || !ValidName(name->get<std::string>())) {
    return absl::InvalidArgumentError(
        where + ".function.name must be 1 to 64 letters, digits, '_' or '-'");
  }
  if (!names->insert(name->get<std::string>()).second) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".function.name '", name->get<std::string>(), "' is given twice"));
  }
  if (auto d = f->find("description"); d != f->end() && !d->is_null()) {
    if (!d->is_string() || !IsValidUtf8(d->get_ref<const std::string&>())) {
      return absl::InvalidArgumentError(where + ".function.description must be a UTF-8 string");
    }
  }
  if (auto p = f->find("parameters"); p != f->end() && !p->is_null() && !p->is_object()) {
    return absl::InvalidArgumentError(where + ".function.parameters must be a JSON Schema object");
  }
  if (auto s = f->find("strict"); s != f->end() && !s->is_null() && !s->is_boolean()) {
    return absl::InvalidArgumentError(where + ".function.strict must be true or false");
  }
  return absl::OkStatus();
}

absl::Status ParseChoice(const Json& c, const std::set<std::string>& names, ToolRequest* r) {
  if (c.is_null()) return absl::OkStatus();
  if (c.is_string()) {
    const std::string s = c.get<std::string>();
    if (s == "auto") r->choice = ToolChoice::kAuto;
    else if (s == "none") r->choice = ToolChoice::kNone;
    else if (s == "required") r->choice = ToolChoice::kRequired;
    else {
      return absl::InvalidArgumentError(
          "tool_choice must be \"auto\", \"none\", \"required\" or "
          "{\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
  } else if (c.is_object()) {
    auto f = c.find("function");
    auto n = f != c.end() && f->is_object() ? f->find("name") : c.end();
    if (c.value("type", Json()) != "function" || f == c.end() || !f->is_object() ||
        n == f->end() || !n->is_string()) {
      return absl::InvalidArgumentError(
          "tool_choice must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
    const std::string name = n->get<std::string>();
    if (!names.count(name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tool_choice names the function '", IsValidUtf8(name) ? name : "?",
          "', which is not one of the tools"));
    }
    r->choice = ToolChoice::kNamed;
    r->named = name;
  } else {
    return absl::InvalidArgumentError("tool_choice must be a string or an object");
  }
  if (r->tools.empty() && (r->choice == ToolChoice::kRequired || r->choice == ToolChoice::kNamed)) {
    return absl::InvalidArgumentError("tool_choice \"required\" or a function needs tools");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ToolRequest> ParseToolRequest(const Json& tools, const Json& tool_choice,
                                             const Json& parallel_tool_calls) {
  ToolRequest r;
  std::set<std::string> names;
  if (!tools.is_null()) {
    if (!tools.is_array()) return absl::InvalidArgumentError("tools must be an array");
    if (tools.size() > kMaxTools) {
      return absl::InvalidArgumentError(
          absl::StrCat("tools holds ", tools.size(), " functions, at most ", kMaxTools));
    }
    for (size_t i = 0; i < tools.size(); ++i) {
      if (absl::Status s = CheckTool(tools[i], i, &names); !s.ok()) return s;
    }
    r.tools = tools;
  }
  if (absl::Status s = ParseChoice(tool_choice, names, &r); !s.ok()) return s;
  if (!parallel_tool_calls.is_null()) {
    if (!parallel_tool_calls.is_boolean()) {
      return absl::InvalidArgumentError("parallel_tool_calls must be true or false");
    }
    r.parallel = parallel_tool_calls.get<bool>();
  }
  return r;
}

namespace {

chat::ToolCallConfig ConfigFor(chat::ToolCallFamily family, const ToolRequest& tools) {
  chat::ToolCallConfig c;
  c.family = tools.offered() ? family : chat::ToolCallFamily::kNone;
  c.tools = tools.tools;
  c.parallel = tools.parallel;
  if (tools.choice == ToolChoice::kNamed) c.only_name = tools.named;
  return c;
}

}  // namespace

ChatOutputStream::ChatOutputStream(chat::OutputFormat format, bool starts_in_reasoning,
                                   chat::ToolCallFamily family, const ToolRequest& tools)
    : split_(format, starts_in_reasoning),
      parse_(tools.offered() && family != chat::ToolCallFamily::kNone),
      harmony_(format == chat::OutputFormat::kHarmony),
      config_(ConfigFor(family, tools)),
      // Harmony calls come from the channel splitter, not from the text.
      calls_(ConfigFor(harmony_ ? chat::ToolCallFamily::kNone : family, tools)) {}

ChatDelta ChatOutputStream::FromSplit(chat::ReasoningSplit split, bool final) {
  ChatDelta d;
  d.reasoning_content = std::move(split.reasoning_content);
  if (!parse_ || harmony_) {
    d.content = std::move(split.content);
  } else {
    chat::ToolCallOutput o = calls_.Push(split.content);
    if (final) {
      chat::ToolCallOutput rest = calls_.Finish();
      o.content += rest.content;
      for (auto& c : rest.calls) o.calls.push_back(std::move(c));
    }
    d.content = std::move(o.content);
    d.tool_calls = std::move(o.calls);
  }
  if (final && parse_ && harmony_) {
    chat::ToolCallOutput o = chat::ToolCallsFromHarmony(chat::HarmonyCalls(text_), config_);
    d.content += o.content;
    d.tool_calls = std::move(o.calls);
  }
  return d;
}

ChatDelta ChatOutputStream::Push(std::string_view text) {
  if (harmony_ && parse_) text_.append(text);
  return FromSplit(split_.Push(text), false);
}

ChatDelta ChatOutputStream::Finish() { return FromSplit(split_.Finish(), true); }

ChatDelta SplitChatOutput(std::string_view text, chat::OutputFormat format,
                          bool starts_in_reasoning, chat::ToolCallFamily family,
                          const ToolRequest& tools) {
  ChatOutputStream s(format, starts_in_reasoning, family, tools);
  ChatDelta out = s.Push(text);
  ChatDelta rest = s.Finish();
  out.reasoning_content += rest.reasoning_content;
  out.content += rest.content;
  for (auto& c : rest.tool_calls) out.tool_calls.push_back(std::move(c));
  return out;
}

Json ToolCallsJson(const std::vector<chat::ToolCall>& calls) {
  Json out = Json::array();
  for (const chat::ToolCall& c : calls) {
    out.push_back({{"id", c.id},
                   {"type", "function"},
                   {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  }
  return out;
}

std::vector<Json> ToolCallDeltasJson(const std::vector<chat::ToolCall>& calls, int first_index) {
  std::vector<Json> out;
  for (size_t i = 0; i < calls.size(); ++i) {
    const int index = first_index + static_cast<int>(i);
    out.push_back(Json::array({{{"index", index},
                                {"id", calls[i].id},
                                {"type", "function"},
                                {"function", {{"name", calls[i].name}, {"arguments", ""}}}}}));
    out.push_back(Json::array(
        {{{"index", index}, {"function", {{"arguments", calls[i].arguments}}}}}));
  }
  return out;
}

Json ChatMessageJson(const ChatDelta& answer) {
  const bool calls = !answer.tool_calls.empty();
  Json msg = {{"role", "assistant"}, {"content", answer.content}};
  if (calls && answer.content.empty()) msg["content"] = nullptr;
  if (!answer.reasoning_content.empty()) msg["reasoning_content"] = answer.reasoning_content;
  if (calls) msg["tool_calls"] = ToolCallsJson(answer.tool_calls);
  return msg;
}

std::vector<Json> ChatDeltasJson(const ChatDelta& piece, bool skip_empty_text, int* calls_sent) {
  std::vector<Json> out;
  const bool empty = piece.content.empty() && piece.reasoning_content.empty();
  if (!empty || !skip_empty_text) {
    Json delta = Json::object();
    if (!piece.reasoning_content.empty()) delta["reasoning_content"] = piece.reasoning_content;
    if (!piece.content.empty() || piece.reasoning_content.empty()) delta["content"] = piece.content;
    out.push_back(std::move(delta));
  }
  for (Json& d : ToolCallDeltasJson(piece.tool_calls, *calls_sent)) {
    out.push_back({{"tool_calls", std::move(d)}});
  }
  *calls_sent += static_cast<int>(piece.tool_calls.size());
  return out;
}

std::string ToolFinishReason(const std::string& finish_reason, bool has_calls) {
  return has_calls && finish_reason == "stop" ? "tool_calls" : finish_reason;
}

namespace {

using grammar::ByteSet;
using grammar::GrammarBuilder;
using grammar::Item;
using grammar::Sequence;

// A rule matching any UTF-8 text (tabs and newlines, no other control
// bytes) that does not contain `stop` (ASCII): one rule per state of stop's
// Knuth-Morris-Pratt automaton, none for the state that completes it.
uint32_t TextWithout(GrammarBuilder& b, const std::string& stop) {
  const int m = static_cast<int>(stop.size());
  std::vector<int> fail(m, 0);
  for (int i = 1, k = 0; i < m; ++i) {
    while (k > 0 && stop[i] != stop[k]) k = fail[k - 1];
    if (stop[i] == stop[k]) ++k;
    fail[i] = k;
  }
  auto next = [&](int state, char c) {
    while (state > 0 && stop[state] != c) state = fail[state - 1];
    return stop[state] == c ? state + 1 : state;
  };
  const ByteSet cont = ByteSet::Range(0x80, 0xBF);
  const uint32_t multi = b.Rule(
      "utf8-multibyte",
      {{Item::Bytes(ByteSet::Range(0xC2, 0xDF)), Item::Bytes(cont)},
       {Item::Bytes(ByteSet::Range(0xE0, 0xEF)), Item::Bytes(cont), Item::Bytes(cont)},
       {Item::Bytes(ByteSet::Range(0xF0, 0xF4)), Item::Bytes(cont), Item::Bytes(cont), Item::Bytes(cont)}});
  std::vector<uint32_t> q(m);
  for (int i = 0; i < m; ++i) q[i] = b.Reserve(absl::StrCat("text-", i));
  for (int i = 0; i < m; ++i) {
    std::map<int, ByteSet> to;
    for (int c = 0; c < 0x7F; ++c) {
      if (c < 0x20 && c != '\n' && c != '\t') continue;
      const int j = next(i, static_cast<char>(c));
      if (j < m) to[j].Add(static_cast<uint8_t>(c));
    }
    std::vector<Sequence> alts = {{}};
    for (const auto& [j, set] : to) alts.push_back({Item::Bytes(set), Item::Ref(q[j])});
    alts.push_back({Item::Ref(multi), Item::Ref(q[0])});
    b.Define(q[i], std::move(alts));
  }
  return q[0];
}

// What a template writes between two calls of one answer, for the families
// whose forced output may hold several calls (parallel_tool_calls): one
// block per call. Null for the others: DeepSeek-V3.1's and MiniMax-M2's
// frames open and close the block of all calls, gpt-oss's call ends
// generation, Llama 3.x's template renders one call per message.
const char* ParallelCallSeparator(chat::ToolCallFamily family) {
  switch (family) {
    case chat::ToolCallFamily::kHermes:
    case chat::ToolCallFamily::kQwen3Coder:
    case chat::ToolCallFamily::kGlm45: return "\n";
    case chat::ToolCallFamily::kGlm47:
    case chat::ToolCallFamily::kGemma4: return "";
    default: return nullptr;
  }
}

// Appends the forced calls to `root`: one of `calls`, then, when the
// request allows parallel calls and the family has a separator, any number
// more, each after the separator.
void AppendCalls(GrammarBuilder& b, Sequence& root, std::vector<Sequence> calls, const ToolRequest& tools,
                 chat::ToolCallFamily family, const std::vector<std::string_view>& tags) {
  const uint32_t call = b.Rule("call", std::move(calls));
  root.push_back(Item::Ref(call));
  const char* separator = ParallelCallSeparator(family);
  if (!tools.parallel || separator == nullptr) return;
  Sequence more = b.TextWithTags(separator, tags);
  more.push_back(Item::Ref(call));
  root.push_back(Item::Ref(b.Repeat("more-calls", more, 0, -1)));
}

// A call of one function by a family whose arguments are tags (Qwen3-Coder,
// GLM, MiniMax-M2; chat::ArgumentTagsFor): the frame's prefix, then per
// property of its parameters (in the order written; the required ones
// always, the others optional) key_prefix KEY key_suffix VALUE value_suffix,
// VALUE the raw text for a {"type": "string"} property (one of the values
// for an enum or const; never containing value_end) and JSON valid under
// the property's schema otherwise, as chat::ParseToolCalls reads them back;
// then the frame's suffix.
absl::StatusOr<Sequence> TaggedCall(GrammarBuilder& b, chat::ToolCallFamily family,
                                    const std::string& name, const Json& params,
                                    const std::vector<std::string_view>& tags, uint32_t* text) {
  const chat::ArgumentTags& syntax = *chat::ArgumentTagsFor(family);
  const std::string& end = syntax.value_end;
  const chat::ToolCallFrameText frame = chat::ToolCallFrameFor(family, name);
  Sequence call = b.TextWithTags(frame.prefix, tags);
  const Json props = params.is_object() ? params.value("properties", Json::object()) : Json::object();
  if (!props.is_object()) return absl::InvalidArgumentError("properties must be an object");
  std::set<std::string> required;
  if (params.is_object() && params.contains("required") && params["required"].is_array()) {
    for (const Json& r : params["required"]) {
      if (r.is_string()) required.insert(r.get<std::string>());
    }
  }
  // A name holding these would end its tag early.
  const std::string forbidden = std::string("<>\n") + syntax.key_suffix.front();
  JsonSchemaRules json(&b, params);
  for (const auto& [key, sub] : props.items()) {
    if (key.empty() || key.find_first_of(forbidden) != std::string::npos || key.front() == ' ' ||
        key.back() == ' ') {
      return absl::InvalidArgumentError(
          absl::StrCat("the property name '", key, "' cannot be written as a ", syntax.key_prefix, "...",
                       absl::StrReplaceAll(syntax.key_suffix, {{"\n", ""}}), " tag"));
    }
    const std::string where = "#/properties/" + key;
    uint32_t value = 0;
    if (sub.is_object() && sub.value("type", Json()) == "string") {
      for (const char* k : {"minLength", "maxLength", "pattern", "format"}) {
        if (sub.contains(k)) {
          return absl::InvalidArgumentError(absl::StrCat(
              where, ": ", k, " cannot be enforced on ", chat::ToolCallFamilyName(family),
              "'s raw-text arguments"));
        }
      }
      std::vector<std::string> options;
      if (sub.contains("enum") || sub.contains("const")) {
        const Json list = sub.contains("enum") ? sub["enum"] : Json::array({sub["const"]});
        if (!list.is_array() || list.empty()) return absl::InvalidArgumentError(where + ": enum must be a non-empty array");
        for (const Json& v : list) {
          if (!v.is_string() || v.get<std::string>().find(end) != std::string::npos) {
            return absl::InvalidArgumentError(where + ": enum values of a string must be strings");
          }
          options.push_back(v.get<std::string>());
        }
        std::vector<Sequence> alts;
        for (const std::string& o : options) alts.push_back(GrammarBuilder::Literal(o));
        value = b.Rule("enum-" + key, std::move(alts));
      } else {
        if (*text == UINT32_MAX) *text = TextWithout(b, end);
        value = *text;
      }
    } else {
      ASSIGN_OR_RETURN(value, json.Value(sub, where));
    }
    Sequence tag = b.TextWithTags(syntax.key_prefix + key + syntax.key_suffix, tags);
    tag.push_back(Item::Ref(value));
    GrammarBuilder::Append(tag, b.TextWithTags(syntax.value_suffix, tags));
    if (required.count(key)) {
      GrammarBuilder::Append(call, tag);
    } else {
      call.push_back(Item::Ref(b.Rule("optional-" + key, {{}, tag})));
    }
  }
  GrammarBuilder::Append(call, b.TextWithTags(frame.suffix, tags));
  return call;
}

absl::StatusOr<std::shared_ptr<const grammar::Grammar>> BuildToolGrammar(GrammarBuilder& b,
                                                                         const Sequence& root) {
  absl::StatusOr<std::shared_ptr<const grammar::Grammar>> g = b.Build(b.Rule("root", {root}));
  if (!g.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("tools: cannot enforce tool_choice: ", g.status().message()));
  }
  return g;
}

absl::StatusOr<std::shared_ptr<const grammar::Grammar>> TaggedCallConstraint(
    const ToolRequest& tools, chat::ToolCallFamily family, const std::string& before,
    grammar::TokenTest has_token) {
  GrammarBuilder b(std::move(has_token));
  const std::vector<std::string_view> tags = chat::FrameTags(family);
  uint32_t text = UINT32_MAX;  // the raw-text rule, made once
  std::vector<Sequence> calls;
  for (const auto& t : tools.tools) {
    const std::string name = t["function"]["name"].get<std::string>();
    if (tools.choice == ToolChoice::kNamed && name != tools.named) continue;
    const Json params = t["function"].value("parameters", Json());
    absl::StatusOr<Sequence> call = TaggedCall(b, family, name, params, tags, &text);
    if (!call.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("tools: the parameters of '", name,
                                                     "' cannot be enforced for tool_choice: ",
                                                     call.status().message()));
    }
    calls.push_back(*std::move(call));
  }
  Sequence root = b.TextWithTags(before, tags);
  AppendCalls(b, root, std::move(calls), tools, family, tags);
  return BuildToolGrammar(b, root);
}

// The families whose arguments are one JSON value (Hermes, DeepSeek-V3.1,
// harmony): per function, its frame's prefix, the arguments valid under
// its parameters (none: an empty object, OpenAI's rule), the frame's
// suffix. Harmony's suffix <|call|> ends generation, so it is left to the
// end-of-generation tokens a complete grammar allows; before its call the
// model may write one analysis message (its reasoning), as gpt-oss does.
absl::StatusOr<std::shared_ptr<const grammar::Grammar>> JsonCallConstraint(
    const ToolRequest& tools, chat::ToolCallFamily family, const std::string& before,
    grammar::TokenTest has_token) {
  GrammarBuilder b(std::move(has_token));
  const std::vector<std::string_view> tags = chat::FrameTags(family);
  const bool harmony = family == chat::ToolCallFamily::kHarmony;
  std::vector<Sequence> calls;
  for (const auto& t : tools.tools) {
    const std::string name = t["function"]["name"].get<std::string>();
    if (tools.choice == ToolChoice::kNamed && name != tools.named) continue;
    Json params = t["function"].value("parameters", Json());
    if (params.is_null()) params = {{"type", "object"}};
    JsonSchemaRules json(&b, params);
    absl::StatusOr<uint32_t> args = json.Value(params, "#");
    if (!args.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("tools: the parameters of '", name,
                                                     "' cannot be enforced for tool_choice: ",
                                                     args.status().message()));
    }
    const chat::ToolCallFrameText frame = chat::ToolCallFrameFor(family, name);
    Sequence call = b.TextWithTags(frame.prefix, tags);
    call.push_back(Item::Ref(*args));
    if (!harmony) GrammarBuilder::Append(call, b.TextWithTags(frame.suffix, tags));
    calls.push_back(std::move(call));
  }
  Sequence root = b.TextWithTags(before, tags);
  if (harmony) {
    Sequence analysis = b.TextWithTags("<|channel|>analysis<|message|>", tags);
    analysis.push_back(Item::Ref(TextWithout(b, "<|end|>")));
    GrammarBuilder::Append(analysis, b.TextWithTags("<|end|><|start|>assistant", tags));
    root.push_back(Item::Ref(b.Rule("analysis", {{}, std::move(analysis)})));
  }
  AppendCalls(b, root, std::move(calls), tools, family, tags);
  return BuildToolGrammar(b, root);
}

// Gemma's dictionary syntax (chat/tool_calls.h kGemma4) for the values a
// JSON Schema allows, where the schema says it simply: type (or a list of
// types), properties (in the order written, the required ones always),
// enum / const of strings, numbers, booleans and null, a string's
// maxLength (its text then holds no '<'), an array's items, minItems and
// maxItems. Anything else (anyOf, $ref, pattern, ...) is any Gemma value
// there, as llama.cpp's gemma4 grammar allows everywhere. No whitespace.
class GemmaRules {
 public:
  GemmaRules(GrammarBuilder* b, std::vector<std::string_view> tags) : b_(*b), tags_(std::move(tags)) {}

  absl::StatusOr<uint32_t> Value(const Json& schema, const std::string& where, int depth = 0) {
    if (!schema.is_object() || depth > 16) return Any();
    if (schema.contains("enum") || schema.contains("const")) {
      const Json list = schema.contains("enum") ? schema["enum"] : Json::array({schema["const"]});
      if (!list.is_array() || list.empty())
        return absl::InvalidArgumentError(where + ": enum must be a non-empty array");
      std::vector<Sequence> alts;
      for (const Json& v : list) {
        if (v.is_string())
          alts.push_back(Quoted(GrammarBuilder::Literal(v.get<std::string>())));
        else if (v.is_primitive())
          alts.push_back(GrammarBuilder::Literal(v.dump()));
        else
          return Any();
      }
      return b_.Rule("gemma-enum", std::move(alts));
    }
    std::vector<std::string> types;
    if (schema.contains("type") && schema["type"].is_string())
      types.push_back(schema["type"].get<std::string>());
    if (schema.contains("type") && schema["type"].is_array()) {
      for (const Json& t : schema["type"]) {
        if (t.is_string()) types.push_back(t.get<std::string>());
      }
    }
    if (types.empty() && schema.contains("properties")) types.push_back("object");
    if (types.empty() && schema.contains("items")) types.push_back("array");
    if (schema.contains("nullable") && schema["nullable"] == true) types.push_back("null");
    if (types.empty() || schema.contains("anyOf") || schema.contains("oneOf") || schema.contains("$ref")) {
      return Any();
    }
    std::vector<Sequence> alts;
    for (const std::string& t : types) {
      ASSIGN_OR_RETURN(uint32_t r, Typed(t, schema, where, depth));
      alts.push_back({Item::Ref(r)});
    }
    return alts.size() == 1 ? alts[0][0].rule : b_.Rule("gemma-types", std::move(alts));
  }

  // Any Gemma value / dictionary.
  uint32_t Any() {
    Define();
    return any_;
  }
  uint32_t AnyDict() {
    Define();
    return any_dict_;
  }

 private:
  Sequence Quoted(const Sequence& inner) {
    Sequence s = b_.TextWithTags(kQuote, tags_);
    GrammarBuilder::Append(s, inner);
    GrammarBuilder::Append(s, b_.TextWithTags(kQuote, tags_));
    return s;
  }
  static Item Byte(char c) { return Item::Bytes(ByteSet::Of(static_cast<uint8_t>(c))); }

  uint32_t Integer() {
    if (integer_ == UINT32_MAX) {
      integer_ =
          b_.Rule("gemma-integer",
                  {{Item::Ref(b_.Rule("gemma-sign", {{}, GrammarBuilder::Literal("-")})),
                    Item::Ref(b_.Repeat("gemma-digits", {Item::Bytes(ByteSet::Range('0', '9'))}, 1, 16))}});
    }
    return integer_;
  }
  uint32_t Number() {
    if (number_ == UINT32_MAX) {
      const Item digit = Item::Bytes(ByteSet::Range('0', '9'));
      Sequence frac = {Byte('.'), Item::Ref(b_.Repeat("gemma-frac-digits", {digit}, 1, 16))};
      Sequence exp = {Item::Bytes(ByteSet::Of('e').Add('E')),
                      Item::Ref(b_.Rule("gemma-exp-sign", {{}, {Byte('-')}, {Byte('+')}})),
                      Item::Ref(b_.Repeat("gemma-exp-digits", {digit}, 1, 2))};
      number_ = b_.Rule("gemma-number", {{Item::Ref(Integer()), Item::Ref(b_.Rule("gemma-frac", {{}, frac})),
                                          Item::Ref(b_.Rule("gemma-exp", {{}, exp}))}});
    }
    return number_;
  }
  uint32_t Text() {
    if (text_ == UINT32_MAX)
      text_ = b_.Rule("gemma-string", {Quoted({Item::Ref(TextWithout(b_, std::string(kQuote)))})});
    return text_;
  }

  // Any Gemma value, and any dictionary (mutually recursive rules).
  void Define() {
    if (any_ != UINT32_MAX) return;
    any_ = b_.Reserve("gemma-value");
    any_dict_ = b_.Reserve("gemma-dict");
    const ByteSet key_byte = ByteSet::Range('a', 'z').Add('A', 'Z').Add('0', '9').Add('_').Add('-').Add('.');
    const Sequence kv = {Item::Ref(b_.Repeat("gemma-key", {Item::Bytes(key_byte)}, 1, 64)), Byte(':'),
                         Item::Ref(any_)};
    b_.Define(any_dict_, {{Byte('{'), Item::Ref(List("gemma-members", kv, '}'))}});
    const uint32_t array =
        b_.Rule("gemma-array", {{Byte('['), Item::Ref(List("gemma-items", {Item::Ref(any_)}, ']'))}});
    b_.Define(any_, {{Item::Ref(Text())},
                     {Item::Ref(any_dict_)},
                     {Item::Ref(array)},
                     {Item::Ref(Number())},
                     GrammarBuilder::Literal("true"),
                     GrammarBuilder::Literal("false"),
                     GrammarBuilder::Literal("null")});
  }

  // close | item ("," item)* close.
  uint32_t List(const std::string& name, const Sequence& item, char close) {
    Sequence more = {Byte(',')};
    GrammarBuilder::Append(more, item);
    Sequence some = item;
    some.push_back(Item::Ref(b_.Repeat(name + "-more", more, 0, -1)));
    some.push_back(Byte(close));
    return b_.Rule(name, {{Byte(close)}, some});
  }

  absl::StatusOr<uint32_t> Typed(const std::string& type, const Json& schema, const std::string& where,
                                 int depth) {
    if (type == "string") {
      if (!schema.contains("maxLength")) return Text();
      const Json max = schema["maxLength"], min = schema.value("minLength", Json(0u));
      if (!max.is_number_unsigned() || !min.is_number_unsigned() || max.get<int>() > kMaxRepeat ||
          min.get<int>() > max.get<int>()) {
        return absl::InvalidArgumentError(where + ": minLength / maxLength must be integers 0.." +
                                          std::to_string(kMaxRepeat) + ", min <= max");
      }
      ByteSet ascii = ByteSet::Range(0x20, 0x7E);
      ascii.Remove('<');
      const ByteSet cont = ByteSet::Range(0x80, 0xBF);
      const uint32_t ch = b_.Rule(
          "gemma-char", {{Item::Bytes(ascii)},
                         {Item::Bytes(ByteSet::Range(0xC2, 0xDF)), Item::Bytes(cont)},
                         {Item::Bytes(ByteSet::Range(0xE0, 0xEF)), Item::Bytes(cont), Item::Bytes(cont)},
                         {Item::Bytes(ByteSet::Range(0xF0, 0xF4)), Item::Bytes(cont), Item::Bytes(cont),
                          Item::Bytes(cont)}});
      return b_.Rule(
          "gemma-bounded-string",
          {Quoted({Item::Ref(b_.Repeat("gemma-chars", {Item::Ref(ch)}, min.get<int>(), max.get<int>()))})});
    }
    if (type == "integer") return Integer();
    if (type == "number") return Number();
    if (type == "boolean")
      return b_.Rule("gemma-boolean", {GrammarBuilder::Literal("true"), GrammarBuilder::Literal("false")});
    if (type == "null") return b_.Rule("gemma-null", {GrammarBuilder::Literal("null")});
    if (type == "array") return Array(schema, where, depth);
    if (type == "object") return Object(schema, where, depth);
    return Any();
  }

  absl::StatusOr<uint32_t> Array(const Json& schema, const std::string& where, int depth) {
    uint32_t item = 0;
    if (schema.contains("items")) {
      ASSIGN_OR_RETURN(item, Value(schema["items"], where + "/items", depth + 1));
    } else {
      item = Any();
    }
    const Json min_j = schema.value("minItems", Json(0)), max_j = schema.value("maxItems", Json(-1));
    if (!min_j.is_number_integer() || !max_j.is_number_integer()) {
      return absl::InvalidArgumentError(where + ": minItems / maxItems must be integers");
    }
    const int64_t min = min_j.get<int64_t>(), max = max_j.get<int64_t>();
    if (min < 0 || min > kMaxRepeat || max > kMaxRepeat || (max >= 0 && min > max)) {
      return absl::InvalidArgumentError(where + ": minItems / maxItems out of range");
    }
    if (max == 0) return b_.Rule("gemma-empty-array", {GrammarBuilder::Literal("[]")});
    Sequence some = {Byte('['), Item::Ref(item),
                     Item::Ref(b_.Repeat("gemma-array-more", {Byte(','), Item::Ref(item)},
                                         static_cast<int>(std::max<int64_t>(min - 1, 0)),
                                         max < 0 ? -1 : static_cast<int>(max - 1))),
                     Byte(']')};
    std::vector<Sequence> alts = {some};
    if (min == 0) alts.push_back(GrammarBuilder::Literal("[]"));
    return b_.Rule("gemma-typed-array", std::move(alts));
  }

  // {k1:v1,...}: the properties in the order written, the required ones
  // always, commas only between those written (S_i: none written before
  // property i, T_i: some were).
  absl::StatusOr<uint32_t> Object(const Json& schema, const std::string& where, int depth) {
    if (!schema.contains("properties") || !schema["properties"].is_object()) {
      // OpenAI's rule, as the JSON families: no other keys unless allowed.
      const Json more = schema.value("additionalProperties", Json(false));
      if (more == Json(true) || more.is_object()) return AnyDict();
      return b_.Rule("gemma-empty-dict", {GrammarBuilder::Literal("{}")});
    }
    const Json& props = schema["properties"];
    std::set<std::string> required;
    if (schema.contains("required") && schema["required"].is_array()) {
      for (const Json& r : schema["required"]) {
        if (r.is_string()) required.insert(r.get<std::string>());
      }
    }
    std::vector<std::pair<std::string, uint32_t>> members;
    for (const auto& [key, sub] : props.items()) {
      if (key.empty() || key.find_first_of(":{}[],<>\n\" ") != std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": the property name '", key, "' cannot be written as a bare Gemma key"));
      }
      ASSIGN_OR_RETURN(uint32_t v, Value(sub, where + "/properties/" + key, depth + 1));
      members.push_back({key, v});
    }
    uint32_t none_before = b_.Rule("gemma-end", {{}}), some_before = none_before;
    for (size_t i = members.size(); i-- > 0;) {
      Sequence member = GrammarBuilder::Literal(members[i].first + ":");
      member.push_back(Item::Ref(members[i].second));
      Sequence first = member;
      first.push_back(Item::Ref(some_before));
      Sequence later = {Byte(',')};
      GrammarBuilder::Append(later, member);
      later.push_back(Item::Ref(some_before));
      std::vector<Sequence> s_alts = {first}, t_alts = {later};
      if (!required.count(members[i].first)) {
        s_alts.push_back({Item::Ref(none_before)});
        t_alts.push_back({Item::Ref(some_before)});
      }
      none_before = b_.Rule("gemma-members-" + members[i].first, std::move(s_alts));
      some_before = b_.Rule("gemma-more-" + members[i].first, std::move(t_alts));
    }
    return b_.Rule("gemma-object", {{Byte('{'), Item::Ref(none_before), Byte('}')}});
  }

  static constexpr std::string_view kQuote = "<|\"|>";
  GrammarBuilder& b_;
  const std::vector<std::string_view> tags_;
  uint32_t any_ = UINT32_MAX, any_dict_ = UINT32_MAX, integer_ = UINT32_MAX, number_ = UINT32_MAX,
           text_ = UINT32_MAX;
};

// Gemma 4: per function "<|tool_call>call:N" + its arguments as a Gemma
// dictionary (GemmaRules; no parameters: "{}") + "<tool_call|>".
absl::StatusOr<std::shared_ptr<const grammar::Grammar>> GemmaCallConstraint(const ToolRequest& tools,
                                                                            chat::ToolCallFamily family,
                                                                            const std::string& before,
                                                                            grammar::TokenTest has_token) {
  GrammarBuilder b(std::move(has_token));
  const std::vector<std::string_view> tags = chat::FrameTags(family);
  GemmaRules gemma(&b, tags);
  std::vector<Sequence> calls;
  for (const auto& t : tools.tools) {
    const std::string name = t["function"]["name"].get<std::string>();
    if (tools.choice == ToolChoice::kNamed && name != tools.named) continue;
    Json params = t["function"].value("parameters", Json());
    if (params.is_null()) params = {{"type", "object"}};
    absl::StatusOr<uint32_t> args = gemma.Value(params, "#");
    if (!args.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tools: the parameters of '", name,
                       "' cannot be enforced for tool_choice: ", args.status().message()));
    }
    const chat::ToolCallFrameText frame = chat::ToolCallFrameFor(family, name);
    Sequence call = b.TextWithTags(frame.prefix, tags);
    call.push_back(Item::Ref(*args));
    GrammarBuilder::Append(call, b.TextWithTags(frame.suffix, tags));
    calls.push_back(std::move(call));
  }
  Sequence root = b.TextWithTags(before, tags);
  AppendCalls(b, root, std::move(calls), tools, family, tags);
  return BuildToolGrammar(b, root);
}

}  // namespace

absl::StatusOr<std::shared_ptr<const grammar::Grammar>> ToolChoiceConstraint(
    const ToolRequest& tools, chat::ToolCallFamily family, bool reasoning_open,
    grammar::TokenTest has_token) {
  if (!tools.offered() || (tools.choice != ToolChoice::kRequired && tools.choice != ToolChoice::kNamed)) {
    return nullptr;
  }
  if (family == chat::ToolCallFamily::kNone) {
    return absl::InvalidArgumentError(
        "tool_choice \"required\" or a named function needs a chat template whose tool-call format is "
        "known, and this model's template has none (use tool_choice \"auto\" or \"none\", or a template "
        "of a known family: docs/api.md, Tool calls)");
  }
  // DeepSeek's and GLM-4.7's templates write the call right after </think>,
  // Gemma 4's right after its thought channel's <channel|>.
  std::string before;
  if (reasoning_open && family == chat::ToolCallFamily::kGemma4) {
    before = chat::ReasoningTagsFor(chat::OutputFormat::kThoughtChannel).close;
  } else if (reasoning_open) {
    before = chat::ReasoningTags().close;
    if (family != chat::ToolCallFamily::kDeepSeekV31 && family != chat::ToolCallFamily::kGlm47) {
      before += "\n\n";
    }
  }
  if (family == chat::ToolCallFamily::kGemma4) {
    return GemmaCallConstraint(tools, family, before, std::move(has_token));
  }
  if (chat::ArgumentTagsFor(family) != nullptr) {
    return TaggedCallConstraint(tools, family, before, std::move(has_token));
  }
  return JsonCallConstraint(tools, family, before, std::move(has_token));
}

}  // namespace moesplit::dense
