#include "common/chat/tool_calls.h"

#include <algorithm>
#include <mutex>
#include <optional>
#include <random>

namespace moesplit::chat {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kDsCallsBegin = "<｜tool▁calls▁begin｜>";
constexpr std::string_view kDsCallsEnd = "<｜tool▁calls▁end｜>";
constexpr std::string_view kDsCallBegin = "<｜tool▁call▁begin｜>";
constexpr std::string_view kDsCallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kDsSep = "<｜tool▁sep｜>";
constexpr std::string_view kMiniMaxOpen = "<minimax:tool_call>";
constexpr std::string_view kMiniMaxClose = "</minimax:tool_call>";
constexpr std::string_view kGemmaOpen = "<|tool_call>";
constexpr std::string_view kGemmaClose = "<tool_call|>";
constexpr std::string_view kGemmaQuote = "<|\"|>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kLlama3Instruction = "Respond in the format {\"name\": function name, \"parameters\":";

bool Contains(std::string_view s, std::string_view x) { return s.find(x) != std::string_view::npos; }

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

bool AllSpace(std::string_view s) { return Trim(s).empty(); }

// The length of the longest proper prefix of `tag` that ends `s`.
size_t PartialTagSuffix(std::string_view s, std::string_view tag) {
  for (size_t k = std::min(s.size(), tag.size() - 1); k > 0; --k) {
    if (s.substr(s.size() - k) == tag.substr(0, k)) return k;
  }
  return 0;
}

// A JSON value parsed from the whole of `text`, or nullopt.
std::optional<Json> ParseJson(std::string_view text) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

// The function named `name` among the request's tools, or null.
const Json* FindTool(const Json& tools, std::string_view name) {
  for (const Json& t : tools) {
    auto f = t.find("function");
    if (f == t.end() || !f->is_object()) continue;
    auto n = f->find("name");
    if (n != f->end() && n->is_string() && n->get_ref<const std::string&>() == name) return &*f;
  }
  return nullptr;
}

// Whether a call of `name` with these arguments may be returned.
bool Accepts(const ToolCallConfig& config, std::string_view name) {
  if (name.empty() || FindTool(config.tools, name) == nullptr) return false;
  return config.only_name.empty() || config.only_name == name;
}

// Arguments text -> compact JSON object text; nullopt when not an object.
std::optional<std::string> ArgumentsText(const Json& args) {
  if (args.is_string()) {
    std::optional<Json> inner = ParseJson(args.get_ref<const std::string&>());
    if (!inner || !inner->is_object()) return std::nullopt;
    return inner->dump();
  }
  if (!args.is_object()) return std::nullopt;
  return args.dump();
}

std::optional<ToolCall> HermesCall(std::string_view body, const ToolCallConfig& config) {
  std::optional<Json> j = ParseJson(Trim(body));
  if (!j || !j->is_object()) return std::nullopt;
  auto name = j->find("name");
  if (name == j->end() || !name->is_string()) return std::nullopt;
  auto args = j->find("arguments");
  if (args == j->end()) args = j->find("parameters");
  std::optional<std::string> text = args == j->end() ? std::optional<std::string>("{}")
                                                     : ArgumentsText(*args);
  if (!text || !Accepts(config, name->get_ref<const std::string&>())) return std::nullopt;
  return ToolCall{NewToolCallId(), name->get<std::string>(), std::move(*text)};
}

bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// One argument's value: the text between the tags (Qwen3-Coder's less one
// newline on each side, which its template adds); JSON unless the schema
// says string (or it is not JSON).
Json ParameterValue(std::string_view raw, const Json* function, const std::string& key,
                    bool strip_newlines) {
  if (strip_newlines && !raw.empty() && raw.front() == '\n') raw.remove_prefix(1);
  if (strip_newlines && !raw.empty() && raw.back() == '\n') raw.remove_suffix(1);
  if (function != nullptr) {
    const Json params = function->value("parameters", Json::object());
    const Json props = params.is_object() ? params.value("properties", Json::object()) : Json();
    if (props.is_object() && props.contains(key) && props[key].is_object() &&
        props[key].value("type", Json()) == "string") {
      return std::string(raw);
    }
  }
  if (std::optional<Json> j = ParseJson(raw)) return *j;
  return std::string(raw);
}

std::optional<ToolCall> Qwen3CoderCall(std::string_view body, const ToolCallConfig& config) {
  body = Trim(body);
  constexpr std::string_view kFn = "<function=", kFnEnd = "</function>";
  constexpr std::string_view kParam = "<parameter=", kParamEnd = "</parameter>";
  if (body.substr(0, kFn.size()) != kFn || body.size() < kFnEnd.size() ||
      body.substr(body.size() - kFnEnd.size()) != kFnEnd) {
    return std::nullopt;
  }
  body.remove_prefix(kFn.size());
  body.remove_suffix(kFnEnd.size());
  const size_t gt = body.find('>');
  if (gt == std::string_view::npos) return std::nullopt;
  const std::string name(Trim(body.substr(0, gt)));
  if (!Accepts(config, name)) return std::nullopt;
  const Json* function = FindTool(config.tools, name);
  body.remove_prefix(gt + 1);
  Json args = Json::object();
  for (body = Trim(body); !body.empty(); body = Trim(body)) {
    if (body.substr(0, kParam.size()) != kParam) return std::nullopt;
    body.remove_prefix(kParam.size());
    const size_t k = body.find('>');
    const size_t end = body.find(kParamEnd);
    if (k == std::string_view::npos || end == std::string_view::npos || end < k) return std::nullopt;
    const std::string key(Trim(body.substr(0, k)));
    if (key.empty()) return std::nullopt;
    args[key] = ParameterValue(body.substr(k + 1, end - k - 1), function, key, true);
    body.remove_prefix(end + kParamEnd.size());
  }
  return ToolCall{NewToolCallId(), name, args.dump()};
}

// GLM's block body: "NAME" then per argument
// "<arg_key>K</arg_key><arg_value>V</arg_value>", whitespace allowed around
// the tags (GLM-4.5 writes newlines there, GLM-4.7 none).
std::optional<ToolCall> GlmCall(std::string_view body, const ToolCallConfig& config) {
  constexpr std::string_view kKey = "<arg_key>", kKeyEnd = "</arg_key>";
  constexpr std::string_view kValue = "<arg_value>", kValueEnd = "</arg_value>";
  const size_t first = body.find(kKey);
  const std::string name(Trim(body.substr(0, first)));
  if (name.find_first_of("<>\n") != std::string::npos || !Accepts(config, name)) return std::nullopt;
  const Json* function = FindTool(config.tools, name);
  Json args = Json::object();
  for (body = Trim(body.substr(std::min(first, body.size()))); !body.empty(); body = Trim(body)) {
    if (!StartsWith(body, kKey)) return std::nullopt;
    body.remove_prefix(kKey.size());
    const size_t key_end = body.find(kKeyEnd);
    if (key_end == std::string_view::npos) return std::nullopt;
    const std::string key(Trim(body.substr(0, key_end)));
    body = Trim(body.substr(key_end + kKeyEnd.size()));
    if (key.empty() || !StartsWith(body, kValue)) return std::nullopt;
    body.remove_prefix(kValue.size());
    const size_t value_end = body.find(kValueEnd);
    if (value_end == std::string_view::npos) return std::nullopt;
    args[key] = ParameterValue(body.substr(0, value_end), function, key, false);
    body.remove_prefix(value_end + kValueEnd.size());
  }
  return ToolCall{NewToolCallId(), name, args.dump()};
}

// MiniMax-M2's block body: one or more
// <invoke name="F"><parameter name="K">V</parameter>...</invoke>, whitespace
// allowed between the tags.
bool MiniMaxCalls(std::string_view body, const ToolCallConfig& config,
                  std::vector<ToolCall>* calls) {
  constexpr std::string_view kInvoke = "<invoke name=\"", kInvokeEnd = "</invoke>";
  constexpr std::string_view kParam = "<parameter name=\"", kParamEnd = "</parameter>";
  constexpr std::string_view kNameEnd = "\">";
  std::vector<ToolCall> out;
  for (body = Trim(body); !body.empty(); body = Trim(body)) {
    if (!StartsWith(body, kInvoke)) return false;
    body.remove_prefix(kInvoke.size());
    const size_t name_end = body.find(kNameEnd);
    if (name_end == std::string_view::npos) return false;
    const std::string name(body.substr(0, name_end));
    if (!Accepts(config, name)) return false;
    const Json* function = FindTool(config.tools, name);
    body.remove_prefix(name_end + kNameEnd.size());
    Json args = Json::object();
    for (body = Trim(body); !StartsWith(body, kInvokeEnd); body = Trim(body)) {
      if (!StartsWith(body, kParam)) return false;
      body.remove_prefix(kParam.size());
      const size_t key_end = body.find(kNameEnd);
      const size_t end = body.find(kParamEnd);
      if (key_end == std::string_view::npos || end == std::string_view::npos || end < key_end) {
        return false;
      }
      const std::string key(body.substr(0, key_end));
      if (key.empty()) return false;
      args[key] = ParameterValue(body.substr(key_end + kNameEnd.size(), end - key_end - kNameEnd.size()),
                                 function, key, false);
      body.remove_prefix(end + kParamEnd.size());
    }
    body.remove_prefix(kInvokeEnd.size());
    out.push_back({NewToolCallId(), name, args.dump()});
  }
  if (out.empty()) return false;
  for (ToolCall& c : out) calls->push_back(std::move(c));
  return true;
}

// Gemma's dictionary syntax (llama.cpp's gemma4 rules): a value is a
// <|"|>-quoted string (raw text), {key:value,...} with bare keys (a quoted
// key is read too), [value,...], or a JSON number, true, false or null;
// whitespace allowed after '{', '[', ',' and ':' and before '}' / ']'.
class GemmaValueReader {
 public:
  explicit GemmaValueReader(std::string_view text) : s_(text) {}

  // One value from the current position; nullopt when malformed.
  std::optional<Json> Value(int depth = 0) {
    if (depth > 64 || s_.empty()) return std::nullopt;
    if (StartsWith(s_, kGemmaQuote)) return String();
    if (s_.front() == '{') return Dict(depth);
    if (s_.front() == '[') return Array(depth);
    size_t n = 0;
    while (n < s_.size() && std::string_view(",}] \t\n\r").find(s_[n]) == std::string_view::npos) ++n;
    std::optional<Json> j = ParseJson(s_.substr(0, n));
    if (!j || j->is_string() || j->is_object() || j->is_array()) return std::nullopt;
    s_.remove_prefix(n);
    return j;
  }
  std::string_view rest() const { return s_; }

 private:
  void SkipSpace() {
    while (!s_.empty() && IsSpace(s_.front())) s_.remove_prefix(1);
  }
  bool Eat(char c) {
    if (s_.empty() || s_.front() != c) return false;
    s_.remove_prefix(1);
    SkipSpace();
    return true;
  }
  std::optional<Json> String() {
    s_.remove_prefix(kGemmaQuote.size());
    const size_t end = s_.find(kGemmaQuote);
    if (end == std::string_view::npos) return std::nullopt;
    Json j = std::string(s_.substr(0, end));
    s_.remove_prefix(end + kGemmaQuote.size());
    return j;
  }
  std::optional<Json> Dict(int depth) {
    Eat('{');
    Json out = Json::object();
    if (Eat('}')) return out;
    for (;;) {
      const size_t colon = s_.find(':');
      if (colon == std::string_view::npos) return std::nullopt;
      std::string_view key = s_.substr(0, colon);
      if (StartsWith(key, kGemmaQuote) && key.size() >= 2 * kGemmaQuote.size() &&
          key.substr(key.size() - kGemmaQuote.size()) == kGemmaQuote) {
        key = key.substr(kGemmaQuote.size(), key.size() - 2 * kGemmaQuote.size());
      }
      if (key.empty() || key.find_first_of("{}[],\n") != std::string_view::npos) return std::nullopt;
      s_.remove_prefix(colon + 1);
      SkipSpace();
      std::optional<Json> v = Value(depth + 1);
      if (!v) return std::nullopt;
      out[std::string(key)] = std::move(*v);
      SkipSpace();
      if (Eat('}')) return out;
      if (!Eat(',')) return std::nullopt;
    }
  }
  std::optional<Json> Array(int depth) {
    Eat('[');
    Json out = Json::array();
    if (Eat(']')) return out;
    for (;;) {
      std::optional<Json> v = Value(depth + 1);
      if (!v) return std::nullopt;
      out.push_back(std::move(*v));
      SkipSpace();
      if (Eat(']')) return out;
      if (!Eat(',')) return std::nullopt;
    }
  }

  std::string_view s_;
};

// Gemma 4's block body: "call:NAME{...}".
std::optional<ToolCall> Gemma4Call(std::string_view body, const ToolCallConfig& config) {
  constexpr std::string_view kCall = "call:";
  body = Trim(body);
  if (!StartsWith(body, kCall)) return std::nullopt;
  body.remove_prefix(kCall.size());
  const size_t brace = body.find('{');
  if (brace == std::string_view::npos) return std::nullopt;
  const std::string name(Trim(body.substr(0, brace)));
  if (!Accepts(config, name)) return std::nullopt;
  GemmaValueReader reader(body.substr(brace));
  std::optional<Json> args = reader.Value();
  if (!args || !args->is_object() || !AllSpace(reader.rest())) return std::nullopt;
  return ToolCall{NewToolCallId(), name, args->dump()};
}

// The length of the JSON object that starts at s[0] ('{'), through its
// closing brace; npos when it does not close within s.
size_t JsonObjectLength(std::string_view s) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if ((c == '}' || c == ']') && --depth == 0) {
      return i + 1;
    }
  }
  return std::string_view::npos;
}

// Llama 3.x: [<|python_tag|>]{"name": "f", "parameters": {...}}.
std::optional<ToolCall> Llama3Call(std::string_view body, const ToolCallConfig& config) {
  body = Trim(body);
  if (StartsWith(body, kPythonTag)) body.remove_prefix(kPythonTag.size());
  return HermesCall(body, config);
}

bool DeepSeekCalls(std::string_view body, const ToolCallConfig& config,
                   std::vector<ToolCall>* calls) {
  std::vector<ToolCall> out;
  for (body = Trim(body); !body.empty(); body = Trim(body)) {
    if (body.substr(0, kDsCallBegin.size()) != kDsCallBegin) return false;
    body.remove_prefix(kDsCallBegin.size());
    const size_t sep = body.find(kDsSep);
    const size_t end = body.find(kDsCallEnd);
    if (sep == std::string_view::npos || end == std::string_view::npos || end < sep) return false;
    const std::string name(Trim(body.substr(0, sep)));
    std::string_view args = Trim(body.substr(sep + kDsSep.size(), end - sep - kDsSep.size()));
    // DeepSeek-V3 (before 3.1) fenced the arguments: ```json\n{...}\n```.
    if (args.substr(0, 7) == "```json" && args.size() >= 10 && args.substr(args.size() - 3) == "```") {
      args = Trim(args.substr(7, args.size() - 10));
    }
    std::optional<Json> j = ParseJson(args);
    if (!j || !j->is_object() || !Accepts(config, name)) return false;
    out.push_back({NewToolCallId(), name, j->dump()});
    body.remove_prefix(end + kDsCallEnd.size());
  }
  if (out.empty()) return false;
  for (ToolCall& c : out) calls->push_back(std::move(c));
  return true;
}

}  // namespace

ToolCallFamily DetectToolCallFamily(std::string_view src) {
  if (Contains(src, "<|channel|>")) return ToolCallFamily::kHarmony;
  if (Contains(src, "'<|tool_call>call:'")) return ToolCallFamily::kGemma4;
  if (Contains(src, kLlama3Instruction)) return ToolCallFamily::kLlama3Json;
  if (Contains(src, kDsCallsBegin)) return ToolCallFamily::kDeepSeekV31;
  if (Contains(src, kMiniMaxOpen) && Contains(src, "<invoke name=")) return ToolCallFamily::kMiniMaxM2;
  if (Contains(src, kHermesOpen) && Contains(src, "<arg_key>") && Contains(src, "<arg_value>")) {
    return Contains(src, "</arg_key><arg_value>") ? ToolCallFamily::kGlm47 : ToolCallFamily::kGlm45;
  }
  if (Contains(src, kHermesOpen) && Contains(src, "<function=") && Contains(src, "<parameter=")) {
    return ToolCallFamily::kQwen3Coder;
  }
  if (Contains(src, kHermesOpen)) return ToolCallFamily::kHermes;
  return ToolCallFamily::kNone;
}

const char* ToolCallFamilyName(ToolCallFamily family) {
  switch (family) {
    case ToolCallFamily::kHermes: return "hermes";
    case ToolCallFamily::kQwen3Coder: return "qwen3-coder";
    case ToolCallFamily::kDeepSeekV31: return "deepseek-v3.1";
    case ToolCallFamily::kHarmony: return "harmony";
    case ToolCallFamily::kGlm45: return "glm-4.5";
    case ToolCallFamily::kGlm47: return "glm-4.7";
    case ToolCallFamily::kMiniMaxM2: return "minimax-m2";
    case ToolCallFamily::kGemma4: return "gemma4";
    case ToolCallFamily::kLlama3Json: return "llama3-json";
    case ToolCallFamily::kNone: break;
  }
  return "none";
}

ToolCallFrameText ToolCallFrameFor(ToolCallFamily family, std::string_view name) {
  const std::string n(name);
  switch (family) {
    case ToolCallFamily::kHermes:
      return {"<tool_call>\n{\"name\": \"" + n + "\", \"arguments\": ", "}\n</tool_call>"};
    case ToolCallFamily::kQwen3Coder:
      return {"<tool_call>\n<function=" + n + ">\n", "</function>\n</tool_call>"};
    case ToolCallFamily::kDeepSeekV31:
      return {std::string(kDsCallsBegin) + std::string(kDsCallBegin) + n + std::string(kDsSep),
              std::string(kDsCallEnd) + std::string(kDsCallsEnd)};
    case ToolCallFamily::kHarmony:
      // After the generation prompt "<|start|>assistant", as gpt-oss writes
      // a call (the template renders past ones recipient first).
      return {"<|channel|>commentary to=functions." + n + " <|constrain|>json<|message|>", "<|call|>"};
    case ToolCallFamily::kGlm45: return {"<tool_call>" + n + "\n", "</tool_call>"};
    case ToolCallFamily::kGlm47: return {"<tool_call>" + n, "</tool_call>"};
    case ToolCallFamily::kMiniMaxM2:
      return {std::string(kMiniMaxOpen) + "\n<invoke name=\"" + n + "\">\n",
              "</invoke>\n" + std::string(kMiniMaxClose)};
    case ToolCallFamily::kGemma4: return {std::string(kGemmaOpen) + "call:" + n, std::string(kGemmaClose)};
    case ToolCallFamily::kLlama3Json: return {"{\"name\": \"" + n + "\", \"parameters\": ", "}"};
    case ToolCallFamily::kNone: break;
  }
  return {};
}

const ArgumentTags* ArgumentTagsFor(ToolCallFamily family) {
  static const ArgumentTags kQwen3Coder{"<parameter=", ">\n", "\n</parameter>\n", "</parameter>"};
  static const ArgumentTags kGlm45{"<arg_key>", "</arg_key>\n<arg_value>", "</arg_value>\n",
                                   "</arg_value>"};
  static const ArgumentTags kGlm47{"<arg_key>", "</arg_key><arg_value>", "</arg_value>",
                                   "</arg_value>"};
  static const ArgumentTags kMiniMax{"<parameter name=\"", "\">", "</parameter>\n", "</parameter>"};
  switch (family) {
    case ToolCallFamily::kQwen3Coder: return &kQwen3Coder;
    case ToolCallFamily::kGlm45: return &kGlm45;
    case ToolCallFamily::kGlm47: return &kGlm47;
    case ToolCallFamily::kMiniMaxM2: return &kMiniMax;
    default: return nullptr;
  }
}

std::vector<std::string_view> FrameTags(ToolCallFamily family) {
  std::vector<std::string_view> tags = {"<think>", "</think>"};
  switch (family) {
    case ToolCallFamily::kHermes:
    case ToolCallFamily::kQwen3Coder:
      tags.insert(tags.end(), {kHermesOpen, kHermesClose});
      break;
    case ToolCallFamily::kGlm45:
    case ToolCallFamily::kGlm47:
      tags.insert(tags.end(), {kHermesOpen, kHermesClose, "<arg_key>", "</arg_key>", "<arg_value>",
                               "</arg_value>"});
      break;
    case ToolCallFamily::kMiniMaxM2:
      tags.insert(tags.end(), {kMiniMaxOpen, kMiniMaxClose});
      break;
    case ToolCallFamily::kGemma4:
      tags.insert(tags.end(), {"<|channel>", "<channel|>", kGemmaOpen, kGemmaClose, kGemmaQuote});
      break;
    case ToolCallFamily::kLlama3Json: break;
    case ToolCallFamily::kDeepSeekV31:
      tags.insert(tags.end(), {kDsCallsBegin, kDsCallsEnd, kDsCallBegin, kDsCallEnd, kDsSep});
      break;
    case ToolCallFamily::kHarmony:
      tags.insert(tags.end(), {"<|start|>", "<|channel|>", "<|constrain|>", "<|message|>",
                               "<|end|>", "<|call|>"});
      break;
    case ToolCallFamily::kNone: break;
  }
  return tags;
}

std::string NewToolCallId() {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::string id = "call_";
  std::lock_guard<std::mutex> l(mu);
  for (int i = 0; i < 24; ++i) id += kAlphabet[rng() % (sizeof(kAlphabet) - 1)];
  return id;
}

ToolCallStream::ToolCallStream(ToolCallConfig config) : config_(std::move(config)) {
  switch (config_.family) {
    case ToolCallFamily::kHermes:
    case ToolCallFamily::kQwen3Coder:
    case ToolCallFamily::kGlm45:
    case ToolCallFamily::kGlm47:
      open_ = kHermesOpen;
      close_ = kHermesClose;
      break;
    case ToolCallFamily::kMiniMaxM2:
      open_ = kMiniMaxOpen;
      close_ = kMiniMaxClose;
      break;
    case ToolCallFamily::kGemma4:
      open_ = kGemmaOpen;
      close_ = kGemmaClose;
      break;
    case ToolCallFamily::kLlama3Json: break;  // ProcessBareJson
    case ToolCallFamily::kDeepSeekV31:
      open_ = kDsCallsBegin;
      close_ = kDsCallsEnd;
      break;
    case ToolCallFamily::kHarmony:  // the harmony splitter finds those calls
    case ToolCallFamily::kNone:
      state_ = State::kPlain;
      break;
  }
}

ToolCallOutput ToolCallStream::Push(std::string_view delta) {
  pending_.append(delta);
  ToolCallOutput out;
  Process(false, &out);
  return out;
}

ToolCallOutput ToolCallStream::Finish() {
  ToolCallOutput out;
  Process(true, &out);
  pending_.clear();
  return out;
}

bool ToolCallStream::ParseBlock(std::string_view body, std::vector<ToolCall>* calls) const {
  switch (config_.family) {
    case ToolCallFamily::kHermes:
      if (auto c = HermesCall(body, config_)) return calls->push_back(std::move(*c)), true;
      return false;
    case ToolCallFamily::kQwen3Coder:
      if (auto c = Qwen3CoderCall(body, config_)) return calls->push_back(std::move(*c)), true;
      return false;
    case ToolCallFamily::kGlm45:
    case ToolCallFamily::kGlm47:
      if (auto c = GlmCall(body, config_)) return calls->push_back(std::move(*c)), true;
      return false;
    case ToolCallFamily::kDeepSeekV31: return DeepSeekCalls(body, config_, calls);
    case ToolCallFamily::kMiniMaxM2: return MiniMaxCalls(body, config_, calls);
    case ToolCallFamily::kGemma4:
      if (auto c = Gemma4Call(body, config_)) return calls->push_back(std::move(*c)), true;
      return false;
    case ToolCallFamily::kLlama3Json:
      if (auto c = Llama3Call(body, config_)) return calls->push_back(std::move(*c)), true;
      return false;
    default: return false;
  }
}

void ToolCallStream::TakeCalls(std::vector<ToolCall>* calls, ToolCallOutput* out) {
  for (ToolCall& c : *calls) {
    if (!config_.parallel && calls_made_ > 0) break;
    out->calls.push_back(std::move(c));
    ++calls_made_;
  }
  text_since_call_ = false;
}

void ToolCallStream::ProcessBareJson(bool final, ToolCallOutput* out) {
  for (;;) {
    const std::string_view p = pending_;
    switch (state_) {
      case State::kPlain:
        out->content.append(p);
        pending_.clear();
        return;
      case State::kText: {
        // Before the first call whitespace waits (content if no call
        // follows); between calls whitespace and ';' are dropped.
        const bool first = calls_made_ == 0;
        size_t i = 0;
        while (i < p.size() && (IsSpace(p[i]) || (!first && p[i] == ';'))) ++i;
        std::string_view rest = p.substr(i);
        size_t tag = first && StartsWith(rest, kPythonTag) ? kPythonTag.size() : 0;
        const bool undecided = rest.size() == tag || (first && tag == 0 && rest.size() < kPythonTag.size() &&
                                                      StartsWith(kPythonTag, rest));
        if (undecided && !final) return;
        if (undecided || rest[tag] != '{') {
          if (!first && rest.empty()) {
            pending_.clear();
            return;
          }
          state_ = State::kPlain;
          continue;
        }
        if (first) out->content.append(p.substr(0, i));  // whitespace before the first call
        pending_.erase(0, i);
        state_ = State::kCall;
        continue;
      }
      case State::kCall: {
        const size_t brace = p.find('{');
        const size_t n = JsonObjectLength(p.substr(brace));
        if (n == std::string_view::npos && !final) return;
        const size_t end = n == std::string_view::npos ? p.size() : brace + n;
        std::vector<ToolCall> calls;
        if (!ParseBlock(p.substr(0, end), &calls)) {
          state_ = State::kPlain;  // malformed: this and the rest are content
          continue;
        }
        TakeCalls(&calls, out);
        pending_.erase(0, end);
        state_ = State::kText;
        continue;
      }
    }
  }
}

void ToolCallStream::Process(bool final, ToolCallOutput* out) {
  if (config_.family == ToolCallFamily::kLlama3Json) return ProcessBareJson(final, out);
  for (;;) {
    const std::string_view p = pending_;
    switch (state_) {
      case State::kPlain:
        out->content.append(p);
        pending_.clear();
        return;
      case State::kText: {
        // Only whitespace since the last call: it is dropped if another
        // call or the end follows.
        const auto between_calls = [&](std::string_view text) {
          return calls_made_ > 0 && !text_since_call_ && AllSpace(text);
        };
        const auto emit = [&](std::string_view text) {
          out->content.append(text);
          if (!text.empty()) text_since_call_ = true;
        };
        const size_t open = p.find(open_);
        if (open != std::string_view::npos) {
          const std::string_view before = p.substr(0, open);
          if (!between_calls(before)) emit(before);
          pending_.erase(0, open + open_.size());
          state_ = State::kCall;
          continue;
        }
        if (final) {
          if (!between_calls(p)) emit(p);
          pending_.clear();
          return;
        }
        const size_t keep = PartialTagSuffix(p, open_);
        const std::string_view ready = p.substr(0, p.size() - keep);
        // After a call, whitespace waits until it is known not to be trailing.
        if (between_calls(ready)) return;
        emit(ready);
        pending_.erase(0, ready.size());
        return;
      }
      case State::kCall: {
        const size_t close = p.find(close_);
        if (close == std::string_view::npos && !final) return;
        std::vector<ToolCall> calls;
        const std::string_view body = p.substr(0, std::min(close, p.size()));
        if (!ParseBlock(body, &calls)) {
          // Malformed: this block and the rest are text as written.
          out->content.append(open_);
          state_ = State::kPlain;
          continue;
        }
        TakeCalls(&calls, out);
        pending_.erase(0, close == std::string_view::npos ? p.size() : close + close_.size());
        state_ = State::kText;
        continue;
      }
    }
  }
}

ToolCallOutput ParseToolCalls(std::string_view content, const ToolCallConfig& config) {
  ToolCallStream stream(config);
  ToolCallOutput out = stream.Push(content);
  ToolCallOutput rest = stream.Finish();
  out.content += rest.content;
  for (ToolCall& c : rest.calls) out.calls.push_back(std::move(c));
  return out;
}

ToolCallOutput ToolCallsFromHarmony(const std::vector<HarmonyCall>& messages,
                                    const ToolCallConfig& config) {
  ToolCallOutput out;
  constexpr std::string_view kPrefix = "functions.";
  for (const HarmonyCall& m : messages) {
    std::string_view r = m.recipient;
    std::optional<Json> args = ParseJson(Trim(m.body));
    const bool is_call = r.substr(0, kPrefix.size()) == kPrefix && args && args->is_object() &&
                         Accepts(config, r.substr(kPrefix.size()));
    if (!is_call) {
      out.content += m.body;
      continue;
    }
    if (!config.parallel && !out.calls.empty()) continue;
    out.calls.push_back({NewToolCallId(), std::string(r.substr(kPrefix.size())), args->dump()});
  }
  return out;
}

}  // namespace moesplit::chat
