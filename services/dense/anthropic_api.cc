#include "services/dense/anthropic_api.h"

#include <initializer_list>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/base/status.h"

namespace moesplit::dense {
namespace {

using Json = nlohmann::ordered_json;

absl::Status Bad(const std::string& path, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", message));
}

// Refuses keys of `obj` not in `known`, as Anthropic does.
absl::Status OnlyKnown(const Json& obj, const std::string& path,
                       std::initializer_list<std::string_view> known) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool ok = false;
    for (std::string_view k : known) ok = ok || it.key() == k;
    if (!ok) {
      return Bad(path.empty() ? it.key() : absl::StrCat(path, ".", it.key()),
                 "Extra inputs are not permitted");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> String(const Json& obj, const char* key, const std::string& path,
                                   bool required) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    if (required) return Bad(absl::StrCat(path, path.empty() ? "" : ".", key), "Field required");
    return std::string();
  }
  if (!it->is_string()) {
    return Bad(absl::StrCat(path, path.empty() ? "" : ".", key), "Input should be a valid string");
  }
  return it->get<std::string>();
}

// A block's `type`, required.
absl::StatusOr<std::string> BlockType(const Json& block, const std::string& path) {
  if (!block.is_object()) return Bad(path, "Input should be an object");
  return String(block, "type", path, true);
}

// A text block's text (system, user, assistant, tool result), its fields checked.
absl::StatusOr<std::string> TextBlock(const Json& b, const std::string& p) {
  RETURN_IF_ERROR(OnlyKnown(b, p, {"type", "text", "cache_control", "citations"}));
  return String(b, "text", p, true);
}

// Text of a string, or of an array of text blocks (joined by '\n'), as in
// `system` and tool_result content.
absl::StatusOr<std::string> TextOf(const Json& v, const std::string& path) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) return Bad(path, "Input should be a string or a list of text blocks");
  std::string text;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string p = absl::StrCat(path, ".", i);
    ASSIGN_OR_RETURN(std::string type, BlockType(v[i], p));
    if (type != "text") {
      return Bad(absl::StrCat(p, ".type"),
                 absl::StrCat("'", type, "' blocks are not supported here (the model reads text only)"));
    }
    ASSIGN_OR_RETURN(std::string t, TextBlock(v[i], p));
    if (i > 0) text += '\n';
    text += t;
  }
  return text;
}

// System: kept as text parts (the chat path joins them by '\n') so that a
// volatile part can be left out on its own.
absl::StatusOr<Json> SystemMessage(const Json& system) {
  if (system.is_string()) return Json{{"role", "system"}, {"content", system}};
  if (!system.is_array()) return Bad("system", "Input should be a string or a list of text blocks");
  Json parts = Json::array();
  for (size_t i = 0; i < system.size(); ++i) {
    const std::string p = absl::StrCat("system.", i);
    ASSIGN_OR_RETURN(std::string type, BlockType(system[i], p));
    if (type != "text") return Bad(p + ".type", "system blocks must be text blocks");
    ASSIGN_OR_RETURN(std::string t, TextBlock(system[i], p));
    parts.push_back({{"type", "text"}, {"text", t}});
  }
  return Json{{"role", "system"}, {"content", std::move(parts)}};
}

absl::Status UnsupportedBlock(const std::string& type, const std::string& path) {
  if (type == "image" || type == "document") {
    return Bad(path + ".type", absl::StrCat("'", type,
                                            "' blocks are not supported (the model reads text only)"));
  }
  return Bad(path + ".type", absl::StrCat("'", type, "' is not a block this server accepts here"));
}

// One user message: its tool results become OpenAI tool messages (first:
// Anthropic wants them before any text), its text one user message.
absl::Status UserMessage(const Json& content, const std::string& path, Json* out) {
  if (content.is_string()) {
    out->push_back({{"role", "user"}, {"content", content}});
    return absl::OkStatus();
  }
  Json text = Json::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string p = absl::StrCat(path, ".", i);
    const Json& b = content[i];
    ASSIGN_OR_RETURN(std::string type, BlockType(b, p));
    if (type == "text") {
      ASSIGN_OR_RETURN(std::string t, TextBlock(b, p));
      text.push_back({{"type", "text"}, {"text", t}});
    } else if (type == "tool_result") {
      RETURN_IF_ERROR(OnlyKnown(b, p, {"type", "tool_use_id", "content", "is_error", "cache_control"}));
      ASSIGN_OR_RETURN(std::string id, String(b, "tool_use_id", p, true));
      std::string result;
      if (auto c = b.find("content"); c != b.end()) {
        ASSIGN_OR_RETURN(result, TextOf(*c, p + ".content"));
      }
      if (auto e = b.find("is_error"); e != b.end()) {
        if (!e->is_boolean()) return Bad(p + ".is_error", "Input should be a valid boolean");
        if (e->get<bool>()) result = "Error: " + result;
      }
      out->push_back({{"role", "tool"}, {"tool_call_id", id}, {"content", result}});
    } else {
      return UnsupportedBlock(type, p);
    }
  }
  if (!text.empty() || content.empty()) {
    out->push_back({{"role", "user"}, {"content", text.empty() ? Json("") : std::move(text)}});
  }
  return absl::OkStatus();
}

absl::Status AssistantMessage(const Json& content, const std::string& path, Json* out) {
  if (content.is_string()) {
    out->push_back({{"role", "assistant"}, {"content", content}});
    return absl::OkStatus();
  }
  std::string text, reasoning;
  Json calls = Json::array();
  bool has_text = false;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string p = absl::StrCat(path, ".", i);
    const Json& b = content[i];
    ASSIGN_OR_RETURN(std::string type, BlockType(b, p));
    if (type == "text") {
      ASSIGN_OR_RETURN(std::string t, TextBlock(b, p));
      if (has_text) text += '\n';
      text += t;
      has_text = true;
    } else if (type == "thinking") {
      RETURN_IF_ERROR(OnlyKnown(b, p, {"type", "thinking", "signature", "cache_control"}));
      ASSIGN_OR_RETURN(std::string t, String(b, "thinking", p, true));
      RETURN_IF_ERROR(String(b, "signature", p, false).status());
      reasoning += t;
    } else if (type == "redacted_thinking") {
      RETURN_IF_ERROR(OnlyKnown(b, p, {"type", "data", "cache_control"}));
    } else if (type == "tool_use") {
      RETURN_IF_ERROR(OnlyKnown(b, p, {"type", "id", "name", "input", "cache_control"}));
      ASSIGN_OR_RETURN(std::string id, String(b, "id", p, true));
      ASSIGN_OR_RETURN(std::string name, String(b, "name", p, true));
      auto input = b.find("input");
      if (input == b.end()) return Bad(p + ".input", "Field required");
      if (!input->is_object()) return Bad(p + ".input", "Input should be an object");
      calls.push_back({{"id", id},
                       {"type", "function"},
                       {"function", {{"name", name}, {"arguments", input->dump()}}}});
    } else {
      return UnsupportedBlock(type, p);
    }
  }
  Json m = {{"role", "assistant"}};
  m["content"] = has_text || calls.empty() ? Json(text) : Json(nullptr);
  if (!reasoning.empty()) m["reasoning_content"] = reasoning;
  if (!calls.empty()) m["tool_calls"] = std::move(calls);
  out->push_back(std::move(m));
  return absl::OkStatus();
}

absl::StatusOr<Json> Messages(const Json& messages) {
  if (!messages.is_array()) return Bad("messages", "Input should be a valid list");
  Json out = Json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string p = absl::StrCat("messages.", i);
    const Json& m = messages[i];
    if (!m.is_object()) return Bad(p, "Input should be an object");
    RETURN_IF_ERROR(OnlyKnown(m, p, {"role", "content"}));
    ASSIGN_OR_RETURN(std::string role, String(m, "role", p, true));
    auto content = m.find("content");
    if (content == m.end()) return Bad(p + ".content", "Field required");
    if (!content->is_string() && !content->is_array()) {
      return Bad(p + ".content", "Input should be a string or a list of content blocks");
    }
    if (role == "user") {
      RETURN_IF_ERROR(UserMessage(*content, p + ".content", &out));
    } else if (role == "assistant") {
      RETURN_IF_ERROR(AssistantMessage(*content, p + ".content", &out));
    } else {
      return Bad(p + ".role", absl::StrCat("Input should be 'user' or 'assistant', got '", role, "'"));
    }
  }
  return out;
}

absl::StatusOr<Json> Tools(const Json& tools) {
  if (!tools.is_array()) return Bad("tools", "Input should be a valid list");
  Json out = Json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string p = absl::StrCat("tools.", i);
    const Json& t = tools[i];
    if (!t.is_object()) return Bad(p, "Input should be an object");
    ASSIGN_OR_RETURN(std::string type, String(t, "type", p, false));
    if (!type.empty() && type != "custom") {
      return Bad(p + ".type", absl::StrCat("'", type,
                                           "' is a server tool, which this server does not run; "
                                           "only custom tools (name, description, input_schema)"));
    }
    RETURN_IF_ERROR(OnlyKnown(t, p, {"type", "name", "description", "input_schema", "cache_control",
                                     "strict", "eager_input_streaming", "defer_loading"}));
    // Hints about delivery that change nothing here: calls stream whole,
    // and every tool is rendered (no tool search defers one).
    for (const char* hint : {"eager_input_streaming", "defer_loading"}) {
      if (auto h = t.find(hint); h != t.end() && !h->is_boolean()) {
        return Bad(absl::StrCat(p, ".", hint), "Input should be a valid boolean");
      }
    }
    ASSIGN_OR_RETURN(std::string name, String(t, "name", p, true));
    auto schema = t.find("input_schema");
    if (schema == t.end()) return Bad(p + ".input_schema", "Field required");
    if (!schema->is_object()) return Bad(p + ".input_schema", "Input should be an object");
    Json f = {{"name", name}};
    if (t.contains("description")) {
      ASSIGN_OR_RETURN(std::string d, String(t, "description", p, false));
      f["description"] = d;
    }
    f["parameters"] = *schema;
    if (auto strict = t.find("strict"); strict != t.end()) {
      if (!strict->is_boolean()) return Bad(p + ".strict", "Input should be a valid boolean");
      f["strict"] = *strict;
    }
    out.push_back({{"type", "function"}, {"function", std::move(f)}});
  }
  return out;
}

// tool_choice -> OpenAI's tool_choice and parallel_tool_calls.
absl::Status ToolChoiceOf(const Json& tc, Json* out) {
  if (!tc.is_object()) return Bad("tool_choice", "Input should be an object");
  ASSIGN_OR_RETURN(std::string type, String(tc, "type", "tool_choice", true));
  if (type == "tool") {
    RETURN_IF_ERROR(OnlyKnown(tc, "tool_choice", {"type", "name", "disable_parallel_tool_use"}));
    ASSIGN_OR_RETURN(std::string name, String(tc, "name", "tool_choice", true));
    (*out)["tool_choice"] = {{"type", "function"}, {"function", {{"name", name}}}};
  } else if (type == "auto" || type == "any") {
    RETURN_IF_ERROR(OnlyKnown(tc, "tool_choice", {"type", "disable_parallel_tool_use"}));
    (*out)["tool_choice"] = type == "any" ? "required" : "auto";
  } else if (type == "none") {
    RETURN_IF_ERROR(OnlyKnown(tc, "tool_choice", {"type"}));
    (*out)["tool_choice"] = "none";
  } else {
    return Bad("tool_choice.type",
               absl::StrCat("Input should be 'auto', 'any', 'tool' or 'none', got '", type, "'"));
  }
  if (auto d = tc.find("disable_parallel_tool_use"); d != tc.end()) {
    if (!d->is_boolean()) {
      return Bad("tool_choice.disable_parallel_tool_use", "Input should be a valid boolean");
    }
    (*out)["parallel_tool_calls"] = !d->get<bool>();
  }
  return absl::OkStatus();
}

absl::Status Thinking(const Json& th, int64_t max_tokens, bool count_tokens, Json* out) {
  if (!th.is_object()) return Bad("thinking", "Input should be an object");
  ASSIGN_OR_RETURN(std::string type, String(th, "type", "thinking", true));
  bool enable = true;
  if (type == "enabled") {
    RETURN_IF_ERROR(OnlyKnown(th, "thinking", {"type", "budget_tokens"}));
    auto b = th.find("budget_tokens");
    if (b == th.end()) return Bad("thinking.budget_tokens", "Field required");
    if (!b->is_number_integer()) return Bad("thinking.budget_tokens", "Input should be a valid integer");
    const int64_t budget = b->get<int64_t>();
    if (budget < 1024) return Bad("thinking.budget_tokens", "Input should be greater than or equal to 1024");
    if (!count_tokens && budget >= max_tokens) {
      return Bad("max_tokens", absl::StrCat("max_tokens must be greater than thinking.budget_tokens (",
                                            budget, ")"));
    }
  } else if (type == "adaptive") {
    RETURN_IF_ERROR(OnlyKnown(th, "thinking", {"type"}));
  } else if (type == "disabled") {
    RETURN_IF_ERROR(OnlyKnown(th, "thinking", {"type"}));
    enable = false;
  } else {
    return Bad("thinking.type",
               absl::StrCat("Input should be 'enabled', 'adaptive' or 'disabled', got '", type, "'"));
  }
  (*out)["chat_template_kwargs"] = {{"enable_thinking", enable}};
  return absl::OkStatus();
}

// output_config: format {type: json_schema, schema} -> response_format
// json_schema (the answer is one text block, JSON valid under the schema).
// effort is refused: the chat templates here take no effort level.
absl::Status OutputConfig(const Json& oc, Json* out) {
  if (!oc.is_object()) return Bad("output_config", "Input should be an object");
  RETURN_IF_ERROR(OnlyKnown(oc, "output_config", {"format", "effort"}));
  if (oc.contains("effort")) {
    return Bad("output_config.effort",
               "effort is not supported by this server (use thinking to turn reasoning on or off)");
  }
  if (auto f = oc.find("format"); f != oc.end() && !f->is_null()) {
    if (!f->is_object()) return Bad("output_config.format", "Input should be an object");
    RETURN_IF_ERROR(OnlyKnown(*f, "output_config.format", {"type", "schema"}));
    ASSIGN_OR_RETURN(std::string type, String(*f, "type", "output_config.format", true));
    if (type != "json_schema") {
      return Bad("output_config.format.type", "Input should be 'json_schema'");
    }
    auto schema = f->find("schema");
    if (schema == f->end()) return Bad("output_config.format.schema", "Field required");
    (*out)["response_format"] = {{"type", "json_schema"},
                                 {"json_schema", {{"name", "output"}, {"schema", *schema}}}};
  }
  return absl::OkStatus();
}

// context_management (server-side context editing: clearing old tool
// results or thinking past a threshold) is checked for its shape and not
// applied: the whole conversation is rendered, and one that outgrows the
// context is refused as any other.
absl::Status ContextManagement(const Json& cm) {
  if (!cm.is_object()) return Bad("context_management", "Input should be an object");
  RETURN_IF_ERROR(OnlyKnown(cm, "context_management", {"edits"}));
  if (auto e = cm.find("edits"); e != cm.end()) {
    if (!e->is_array()) return Bad("context_management.edits", "Input should be a valid list");
    for (size_t i = 0; i < e->size(); ++i) {
      const std::string p = absl::StrCat("context_management.edits.", i);
      RETURN_IF_ERROR(BlockType((*e)[i], p).status());
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<double> Unit(const Json& body, const char* key) {
  const Json& v = body[key];
  if (!v.is_number()) return Bad(key, "Input should be a valid number");
  const double x = v.get<double>();
  if (x < 0 || x > 1) return Bad(key, "Input should be between 0 and 1");
  return x;
}

Json MakeBlock(const char* type, std::initializer_list<std::pair<const char*, Json>> fields) {
  Json b = {{"type", type}};
  for (const auto& [k, v] : fields) b[k] = v;
  return b;
}

bool AllSpace(std::string_view s) {
  for (char c : s) {
    if (!absl::ascii_isspace(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

Json ToolUse(const chat::ToolCall& call) {
  Json input = Json::parse(call.arguments, nullptr, /*allow_exceptions=*/false);
  if (!input.is_object()) input = Json::object();
  return {{"type", "tool_use"}, {"id", call.id}, {"name", call.name}, {"input", std::move(input)}};
}

}  // namespace

absl::StatusOr<Json> AnthropicToChat(const Json& body, bool count_tokens) {
  if (count_tokens) {
    RETURN_IF_ERROR(OnlyKnown(body, "", {"model", "messages", "system", "tools", "tool_choice",
                                         "thinking", "output_config", "context_management"}));
  } else {
    RETURN_IF_ERROR(OnlyKnown(body, "", {"model", "messages", "max_tokens", "system", "metadata",
                                         "stop_sequences", "stream", "temperature", "top_p",
                                         "top_k", "tools", "tool_choice", "thinking",
                                         "service_tier", "output_config", "context_management"}));
  }
  Json out = Json::object();
  ASSIGN_OR_RETURN(std::string model, String(body, "model", "", true));
  out["model"] = model;
  int64_t max_tokens = 0;
  if (!count_tokens) {
    auto m = body.find("max_tokens");
    if (m == body.end()) return Bad("max_tokens", "Field required");
    if (!m->is_number_integer()) return Bad("max_tokens", "Input should be a valid integer");
    max_tokens = m->get<int64_t>();
    if (max_tokens < 1) return Bad("max_tokens", "Input should be greater than or equal to 1");
    out["max_tokens"] = max_tokens;
  }
  Json messages = Json::array();
  if (auto s = body.find("system"); s != body.end()) {
    ASSIGN_OR_RETURN(Json sys, SystemMessage(*s));
    messages.push_back(std::move(sys));
  }
  auto m = body.find("messages");
  if (m == body.end()) return Bad("messages", "Field required");
  ASSIGN_OR_RETURN(Json rest, Messages(*m));
  for (Json& x : rest) messages.push_back(std::move(x));
  out["messages"] = std::move(messages);
  if (auto t = body.find("tools"); t != body.end()) {
    ASSIGN_OR_RETURN(out["tools"], Tools(*t));
  }
  if (auto tc = body.find("tool_choice"); tc != body.end()) RETURN_IF_ERROR(ToolChoiceOf(*tc, &out));
  if (auto th = body.find("thinking"); th != body.end()) {
    RETURN_IF_ERROR(Thinking(*th, max_tokens, count_tokens, &out));
  }
  if (auto cm = body.find("context_management"); cm != body.end()) {
    RETURN_IF_ERROR(ContextManagement(*cm));
  }
  if (auto oc = body.find("output_config"); oc != body.end()) {
    Json format;
    RETURN_IF_ERROR(OutputConfig(*oc, &format));
    if (!count_tokens && format.contains("response_format")) {
      out["response_format"] = format["response_format"];
    }
  }
  if (count_tokens) return out;
  if (auto s = body.find("stop_sequences"); s != body.end()) {
    if (!s->is_array()) return Bad("stop_sequences", "Input should be a valid list");
    for (size_t i = 0; i < s->size(); ++i) {
      if (!(*s)[i].is_string()) {
        return Bad(absl::StrCat("stop_sequences.", i), "Input should be a valid string");
      }
    }
    out["stop"] = *s;
  }
  if (auto s = body.find("stream"); s != body.end()) {
    if (!s->is_boolean()) return Bad("stream", "Input should be a valid boolean");
    out["stream"] = *s;
  }
  if (body.contains("temperature")) {
    ASSIGN_OR_RETURN(out["temperature"], Unit(body, "temperature"));
  }
  if (body.contains("top_p")) {
    ASSIGN_OR_RETURN(out["top_p"], Unit(body, "top_p"));
  }
  if (auto k = body.find("top_k"); k != body.end()) {
    if (!k->is_number_integer() || k->get<int64_t>() < 0) {
      return Bad("top_k", "Input should be an integer >= 0");
    }
    out["top_k"] = *k;
  }
  if (auto md = body.find("metadata"); md != body.end()) {
    if (!md->is_object()) return Bad("metadata", "Input should be an object");
    RETURN_IF_ERROR(OnlyKnown(*md, "metadata", {"user_id"}));
    if (auto u = md->find("user_id"); u != md->end() && !u->is_null() && !u->is_string()) {
      return Bad("metadata.user_id", "Input should be a valid string");
    }
  }
  if (auto st = body.find("service_tier"); st != body.end()) {
    if (!st->is_string() || (*st != "auto" && *st != "standard_only")) {
      return Bad("service_tier", "Input should be 'auto' or 'standard_only'");
    }
  }
  return out;
}

AnthropicStop AnthropicStopOf(const GenerateOutcome& o, bool has_calls) {
  if (o.finish_reason == "length") return {"max_tokens", nullptr};
  if (has_calls) return {"tool_use", nullptr};
  if (!o.stop_string.empty()) return {"stop_sequence", o.stop_string};
  return {"end_turn", nullptr};
}

Json AnthropicUsage(const GenerateOutcome& o) {
  return {{"input_tokens", o.prompt_tokens - o.cached_tokens},
          {"cache_creation_input_tokens", 0},
          {"cache_read_input_tokens", o.cached_tokens},
          {"output_tokens", o.completion_tokens}};
}

Json AnthropicContent(const ChatDelta& a) {
  Json content = Json::array();
  if (!a.reasoning_content.empty()) {
    content.push_back(MakeBlock("thinking", {{"thinking", a.reasoning_content}, {"signature", ""}}));
  }
  if (!AllSpace(a.content)) content.push_back(MakeBlock("text", {{"text", a.content}}));
  for (const chat::ToolCall& c : a.tool_calls) content.push_back(ToolUse(c));
  return content;
}

Json AnthropicMessage(const std::string& id, const std::string& model, const ChatDelta& answer,
                      const AnthropicStop& stop, const Json& usage) {
  return {{"id", id},
          {"type", "message"},
          {"role", "assistant"},
          {"model", model},
          {"content", AnthropicContent(answer)},
          {"stop_reason", stop.reason},
          {"stop_sequence", stop.sequence},
          {"usage", usage}};
}

const char* AnthropicErrorType(int s) {
  switch (s) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503:
    case 529: return "overloaded_error";
    default: return s < 500 ? "invalid_request_error" : "api_error";
  }
}

namespace {
Json ErrorJson(int http_status, const std::string& message) {
  return {{"type", "error"},
          {"error", {{"type", AnthropicErrorType(http_status)}, {"message", message}}}};
}
std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }
}  // namespace

HttpReply AnthropicErrorReply(int http_status, const std::string& message) {
  HttpReply r;
  r.status = http_status;
  r.body = Dump(ErrorJson(http_status, message));
  return r;
}

std::string AnthropicEvent(const Json& data) {
  return absl::StrCat("event: ", data["type"].get<std::string>(), "\ndata: ", Dump(data), "\n\n");
}

std::string AnthropicStream::Start(const Json& usage) {
  started_ = true;
  Json u = usage;
  u["output_tokens"] = 0;
  Json message = {{"id", id_},
                  {"type", "message"},
                  {"role", "assistant"},
                  {"model", model_},
                  {"content", Json::array()},
                  {"stop_reason", nullptr},
                  {"stop_sequence", nullptr},
                  {"usage", std::move(u)}};
  return AnthropicEvent({{"type", "message_start"}, {"message", std::move(message)}}) +
         AnthropicEvent({{"type", "ping"}});
}

void AnthropicStream::Open(Block kind, std::string* out) {
  Close(out);
  open_ = kind;
  Json block = kind == Block::kThinking ? MakeBlock("thinking", {{"thinking", ""}})
                                        : MakeBlock("text", {{"text", ""}});
  *out += AnthropicEvent(
      {{"type", "content_block_start"}, {"index", index_}, {"content_block", std::move(block)}});
}

void AnthropicStream::Close(std::string* out) {
  if (open_ == Block::kNone) return;
  if (open_ == Block::kThinking) {
    *out += AnthropicEvent({{"type", "content_block_delta"},
                            {"index", index_},
                            {"delta", {{"type", "signature_delta"}, {"signature", ""}}}});
  }
  *out += AnthropicEvent({{"type", "content_block_stop"}, {"index", index_}});
  open_ = Block::kNone;
  ++index_;
}

std::string AnthropicStream::Push(const ChatDelta& piece) {
  std::string out;
  auto delta = [&](Json d) {
    out += AnthropicEvent({{"type", "content_block_delta"}, {"index", index_}, {"delta", std::move(d)}});
  };
  if (!piece.reasoning_content.empty()) {
    if (open_ != Block::kThinking) Open(Block::kThinking, &out);
    delta({{"type", "thinking_delta"}, {"thinking", piece.reasoning_content}});
  }
  if (!piece.content.empty()) {
    if (open_ == Block::kText) {
      delta({{"type", "text_delta"}, {"text", piece.content}});
    } else {
      held_ += piece.content;
      if (!AllSpace(held_)) {
        Open(Block::kText, &out);
        delta({{"type", "text_delta"}, {"text", held_}});
        held_.clear();
      }
    }
  }
  for (const chat::ToolCall& c : piece.tool_calls) {
    Close(&out);
    held_.clear();
    Json block = ToolUse(c);
    const std::string args = block["input"].dump();
    block["input"] = Json::object();
    out += AnthropicEvent(
        {{"type", "content_block_start"}, {"index", index_}, {"content_block", std::move(block)}});
    delta({{"type", "input_json_delta"}, {"partial_json", args}});
    out += AnthropicEvent({{"type", "content_block_stop"}, {"index", index_}});
    ++index_;
  }
  return out;
}

std::string AnthropicStream::Finish(const ChatDelta& rest, const AnthropicStop& stop,
                                    const Json& usage) {
  std::string out = Push(rest);
  Close(&out);
  out += AnthropicEvent({{"type", "message_delta"},
                         {"delta", {{"stop_reason", stop.reason}, {"stop_sequence", stop.sequence}}},
                         {"usage", usage}});
  out += AnthropicEvent({{"type", "message_stop"}});
  return out;
}

std::string AnthropicStream::Error(int http_status, const std::string& message) {
  return AnthropicEvent(ErrorJson(http_status, message));
}

}  // namespace moesplit::dense
