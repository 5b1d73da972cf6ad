#include "services/dense/responses_api.h"

#include <initializer_list>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "services/dense/openai_api.h"

namespace moesplit::dense {
namespace {

using Json = nlohmann::ordered_json;

absl::Status Bad(const std::string& param, const std::string& message,
                 const char* code = nullptr) {
  absl::Status s = absl::InvalidArgumentError(message);
  s.SetPayload(kParamPayload, absl::Cord(param));
  if (code != nullptr) s.SetPayload(kErrorCodePayload, absl::Cord(code));
  return s;
}

absl::StatusOr<std::string> String(const Json& obj, const char* key, const std::string& path,
                                   bool required) {
  const std::string p = path.empty() ? key : absl::StrCat(path, ".", key);
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) {
    if (required) return Bad(p, absl::StrCat("Missing required parameter: '", p, "'."));
    return std::string();
  }
  if (!it->is_string()) return Bad(p, absl::StrCat("Invalid type for '", p, "': expected a string."));
  return it->get<std::string>();
}

absl::Status OneOf(const std::string& value, const std::string& path,
                   std::initializer_list<std::string_view> allowed) {
  std::string list;
  for (std::string_view a : allowed) {
    if (value == a) return absl::OkStatus();
    absl::StrAppend(&list, list.empty() ? "" : ", ", "'", std::string(a), "'");
  }
  return Bad(path, absl::StrCat("Invalid value for '", path, "': '", value,
                                "'. Supported values are: ", list, "."));
}

absl::Status Unknown(const Json& obj, const std::string& path,
                     std::initializer_list<std::string_view> known) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool ok = false;
    for (std::string_view k : known) ok = ok || it.key() == k;
    if (!ok) {
      const std::string p = path.empty() ? it.key() : absl::StrCat(path, ".", it.key());
      return Bad(p, absl::StrCat("Unknown parameter: '", p, "'."), "unknown_parameter");
    }
  }
  return absl::OkStatus();
}

// Text of a string, or of text parts of the given types (joined by '\n').
absl::StatusOr<std::string> PartsText(const Json& v, const std::string& path,
                                      std::initializer_list<std::string_view> types) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) {
    return Bad(path, absl::StrCat("Invalid type for '", path, "': expected a string or an array."));
  }
  std::string text;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string p = absl::StrCat(path, "[", i, "]");
    if (!v[i].is_object()) return Bad(p, absl::StrCat("Invalid type for '", p, "': expected an object."));
    ASSIGN_OR_RETURN(std::string type, String(v[i], "type", p, true));
    bool ok = false;
    for (std::string_view t : types) ok = ok || type == t;
    if (!ok) {
      return Bad(p + ".type",
                 absl::StrCat("Content of type '", type,
                              "' is not supported here (this server reads text only)."));
    }
    const char* key = type == "refusal" ? "refusal" : "text";
    ASSIGN_OR_RETURN(std::string t, String(v[i], key, p, true));
    if (i > 0) text += '\n';
    text += t;
  }
  return text;
}

// Input items -> chat messages (appended to `out`). Consecutive
// function_call items (and an assistant message before them) are one
// assistant message; a reasoning item is the reasoning of the assistant
// message that follows it.
// An output item of a stored response, by its id ("rs_X_I", "msg_X_I",
// "fc_X_I": item I of response resp_X).
absl::StatusOr<Json> StoredItem(const std::string& id, ResponseStore* store,
                                const std::string& path) {
  const size_t a = id.find('_'), b = id.rfind('_');
  if (store != nullptr && a != std::string::npos && b > a + 1 && b + 1 < id.size()) {
    size_t index = 0;
    bool digits = true;
    for (size_t k = b + 1; k < id.size(); ++k) {
      digits = digits && absl::ascii_isdigit(static_cast<unsigned char>(id[k]));
      if (digits) index = index * 10 + static_cast<size_t>(id[k] - '0');
    }
    std::optional<ResponseStore::Entry> e =
        digits ? store->Get(absl::StrCat("resp_", id.substr(a + 1, b - a - 1))) : std::nullopt;
    if (e.has_value()) {
      const Json& output = e->response["output"];
      if (output.is_array() && index < output.size() && output[index]["id"] == id) {
        return output[index];
      }
    }
  }
  absl::Status s = absl::NotFoundError(absl::StrCat(
      "Item with id '", id, "' not found (its response was never stored, stored with store: "
      "false, deleted or expired)."));
  s.SetPayload(kParamPayload, absl::Cord(path));
  s.SetPayload(kErrorCodePayload, absl::Cord("item_not_found"));
  return s;
}

absl::Status InputItems(const Json& input, ResponseStore* store, Json* out) {
  if (input.is_string()) {
    out->push_back({{"role", "user"}, {"content", input}});
    return absl::OkStatus();
  }
  if (!input.is_array()) {
    return Bad("input", "Invalid type for 'input': expected a string or an array of items.");
  }
  std::string reasoning;  // waiting for its assistant message
  // The last message is an assistant message that function calls may join.
  bool joinable = false;
  auto assistant = [&]() -> Json& {
    if (!joinable) {
      out->push_back({{"role", "assistant"}, {"content", ""}});
      joinable = true;
    }
    Json& m = out->back();
    if (!reasoning.empty()) {
      std::string r = m.value("reasoning_content", "");
      m["reasoning_content"] = r + reasoning;
      reasoning.clear();
    }
    return m;
  };
  for (size_t i = 0; i < input.size(); ++i) {
    const std::string p = absl::StrCat("input[", i, "]");
    if (!input[i].is_object()) return Bad(p, absl::StrCat("Invalid type for '", p, "': expected an object."));
    ASSIGN_OR_RETURN(std::string type, String(input[i], "type", p, false));
    // item_reference: an item of a stored response (the Vercel AI SDK
    // sends them while store is true), read as if sent.
    Json referenced;
    if (type == "item_reference") {
      RETURN_IF_ERROR(Unknown(input[i], p, {"type", "id"}));
      ASSIGN_OR_RETURN(std::string id, String(input[i], "id", p, true));
      ASSIGN_OR_RETURN(referenced, StoredItem(id, store, p + ".id"));
      ASSIGN_OR_RETURN(type, String(referenced, "type", p, false));
    }
    const Json& item = referenced.is_null() ? input[i] : referenced;
    if (type.empty() || type == "message") {
      RETURN_IF_ERROR(Unknown(item, p, {"type", "role", "content", "id", "status"}));
      ASSIGN_OR_RETURN(std::string role, String(item, "role", p, true));
      RETURN_IF_ERROR(OneOf(role, p + ".role", {"user", "system", "developer", "assistant"}));
      auto content = item.find("content");
      if (content == item.end()) return Bad(p + ".content", absl::StrCat("Missing required parameter: '", p, ".content'."));
      if (role == "assistant") {
        ASSIGN_OR_RETURN(std::string text,
                         PartsText(*content, p + ".content", {"output_text", "input_text", "refusal"}));
        joinable = false;
        Json& m = assistant();
        m["content"] = text;
      } else {
        ASSIGN_OR_RETURN(std::string text, PartsText(*content, p + ".content", {"input_text"}));
        out->push_back({{"role", role}, {"content", text}});
        joinable = false;
      }
    } else if (type == "function_call") {
      RETURN_IF_ERROR(Unknown(item, p, {"type", "call_id", "name", "arguments", "id", "status"}));
      ASSIGN_OR_RETURN(std::string call_id, String(item, "call_id", p, true));
      ASSIGN_OR_RETURN(std::string name, String(item, "name", p, true));
      ASSIGN_OR_RETURN(std::string args, String(item, "arguments", p, true));
      Json& m = assistant();
      if (!m.contains("tool_calls")) m["tool_calls"] = Json::array();
      if (m["content"] == "") m["content"] = nullptr;
      m["tool_calls"].push_back(
          {{"id", call_id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", args}}}});
    } else if (type == "function_call_output") {
      RETURN_IF_ERROR(Unknown(item, p, {"type", "call_id", "output", "id", "status"}));
      ASSIGN_OR_RETURN(std::string call_id, String(item, "call_id", p, true));
      auto o = item.find("output");
      if (o == item.end()) return Bad(p + ".output", absl::StrCat("Missing required parameter: '", p, ".output'."));
      ASSIGN_OR_RETURN(std::string text, PartsText(*o, p + ".output", {"input_text", "output_text"}));
      out->push_back({{"role", "tool"}, {"tool_call_id", call_id}, {"content", text}});
      joinable = false;
    } else if (type == "reasoning") {
      RETURN_IF_ERROR(Unknown(item, p, {"type", "id", "summary", "content", "encrypted_content", "status"}));
      std::string text;
      for (const char* key : {"content", "summary"}) {
        auto parts = item.find(key);
        if (parts == item.end() || parts->is_null()) continue;
        const std::string pp = absl::StrCat(p, ".", key);
        if (!parts->is_array()) return Bad(pp, absl::StrCat("Invalid type for '", pp, "': expected an array."));
        ASSIGN_OR_RETURN(std::string t,
                         PartsText(*parts, pp, {std::string_view(key) == "content" ? "reasoning_text" : "summary_text"}));
        if (text.empty()) text = t;  // content first: it is the whole reasoning
      }
      reasoning += text;
      joinable = false;
    } else {
      return Bad(p + ".type",
                 absl::StrCat("Input items of type '", type,
                              "' are not supported by this server (messages, function_call, "
                              "function_call_output, reasoning and item_reference are)."));
    }
  }
  return absl::OkStatus();
}

// tools -> the chat tools; web_search is dropped (see the header).
absl::StatusOr<Json> Tools(const Json& tools) {
  if (!tools.is_array()) return Bad("tools", "Invalid type for 'tools': expected an array.");
  Json out = Json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string p = absl::StrCat("tools[", i, "]");
    const Json& t = tools[i];
    if (!t.is_object()) return Bad(p, absl::StrCat("Invalid type for '", p, "': expected an object."));
    ASSIGN_OR_RETURN(std::string type, String(t, "type", p, true));
    if (type == "web_search" || type == "web_search_preview") continue;
    if (type != "function") {
      return Bad(p + ".type",
                 absl::StrCat("Tools of type '", type,
                              "' are not supported by this server: it runs no server-side tool; "
                              "only function tools are."));
    }
    RETURN_IF_ERROR(Unknown(t, p, {"type", "name", "description", "parameters", "strict"}));
    ASSIGN_OR_RETURN(std::string name, String(t, "name", p, true));
    Json f = {{"name", name}};
    if (t.contains("description") && !t["description"].is_null()) {
      ASSIGN_OR_RETURN(f["description"], String(t, "description", p, false));
    }
    if (auto params = t.find("parameters"); params != t.end() && !params->is_null()) {
      if (!params->is_object()) return Bad(p + ".parameters", "Invalid type for '" + p + ".parameters': expected an object.");
      f["parameters"] = *params;
    }
    if (auto s = t.find("strict"); s != t.end() && !s->is_null()) {
      if (!s->is_boolean()) return Bad(p + ".strict", "Invalid type for '" + p + ".strict': expected a boolean.");
      f["strict"] = *s;
    }
    out.push_back({{"type", "function"}, {"function", std::move(f)}});
  }
  return out;
}

absl::StatusOr<Json> ToolChoiceOf(const Json& tc) {
  if (tc.is_string()) {
    RETURN_IF_ERROR(OneOf(tc.get<std::string>(), "tool_choice", {"auto", "none", "required"}));
    return tc;
  }
  if (!tc.is_object()) return Bad("tool_choice", "Invalid type for 'tool_choice': expected a string or an object.");
  ASSIGN_OR_RETURN(std::string type, String(tc, "type", "tool_choice", true));
  if (type != "function") {
    return Bad("tool_choice.type",
               absl::StrCat("tool_choice of type '", type,
                            "' is not supported by this server ('auto', 'none', 'required' or "
                            "{\"type\": \"function\", \"name\": ...} are)."));
  }
  RETURN_IF_ERROR(Unknown(tc, "tool_choice", {"type", "name"}));
  ASSIGN_OR_RETURN(std::string name, String(tc, "name", "tool_choice", true));
  return Json{{"type", "function"}, {"function", {{"name", name}}}};
}

// text: {format, verbosity} -> response_format.
absl::Status Text(const Json& text, Json* chat) {
  if (!text.is_object()) return Bad("text", "Invalid type for 'text': expected an object.");
  RETURN_IF_ERROR(Unknown(text, "text", {"format", "verbosity"}));
  if (auto v = text.find("verbosity"); v != text.end() && !v->is_null()) {
    ASSIGN_OR_RETURN(std::string verbosity, String(text, "verbosity", "text", false));
    if (verbosity != "medium") {
      return Bad("text.verbosity",
                 "text.verbosity other than 'medium' is not supported by this server (its "
                 "templates take no verbosity).");
    }
  }
  auto f = text.find("format");
  if (f == text.end() || f->is_null()) return absl::OkStatus();
  if (!f->is_object()) return Bad("text.format", "Invalid type for 'text.format': expected an object.");
  ASSIGN_OR_RETURN(std::string type, String(*f, "type", "text.format", true));
  if (type == "text") {
    RETURN_IF_ERROR(Unknown(*f, "text.format", {"type"}));
  } else if (type == "json_object") {
    RETURN_IF_ERROR(Unknown(*f, "text.format", {"type"}));
    (*chat)["response_format"] = {{"type", "json_object"}};
  } else if (type == "json_schema") {
    RETURN_IF_ERROR(Unknown(*f, "text.format", {"type", "name", "schema", "strict", "description"}));
    ASSIGN_OR_RETURN(std::string name, String(*f, "name", "text.format", true));
    auto schema = f->find("schema");
    if (schema == f->end()) return Bad("text.format.schema", "Missing required parameter: 'text.format.schema'.");
    Json js = {{"name", name}, {"schema", *schema}};
    if (f->contains("strict")) js["strict"] = (*f)["strict"];
    (*chat)["response_format"] = {{"type", "json_schema"}, {"json_schema", std::move(js)}};
  } else {
    return OneOf(type, "text.format.type", {"text", "json_object", "json_schema"});
  }
  return absl::OkStatus();
}

absl::Status Reasoning(const Json& r, Json* chat, bool* summary) {
  if (!r.is_object()) return Bad("reasoning", "Invalid type for 'reasoning': expected an object.");
  RETURN_IF_ERROR(Unknown(r, "reasoning", {"effort", "summary", "generate_summary"}));
  ASSIGN_OR_RETURN(std::string effort, String(r, "effort", "reasoning", false));
  if (!effort.empty()) {
    RETURN_IF_ERROR(OneOf(effort, "reasoning.effort", {"none", "minimal", "low", "medium", "high", "xhigh"}));
    (*chat)["chat_template_kwargs"] = {{"enable_thinking", effort != "none"}};
    // The levels a template can take (gpt-oss's reasoning_effort).
    if (effort == "minimal" || effort == "low" || effort == "medium" || effort == "high") {
      (*chat)["reasoning_effort"] = effort;
    }
  }
  for (const char* key : {"summary", "generate_summary"}) {
    ASSIGN_OR_RETURN(std::string s, String(r, key, "reasoning", false));
    if (s.empty()) continue;
    RETURN_IF_ERROR(OneOf(s, absl::StrCat("reasoning.", key), {"auto", "concise", "detailed"}));
    *summary = true;
  }
  return absl::OkStatus();
}

absl::StatusOr<double> Number(const Json& body, const char* key) {
  const Json& v = body[key];
  if (!v.is_number()) return Bad(key, absl::StrCat("Invalid type for '", key, "': expected a number."));
  return v.get<double>();
}

bool AllSpace(std::string_view s) {
  for (char c : s) {
    if (!absl::ascii_isspace(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

std::string Id(const char* prefix, const std::string& base, size_t index) {
  return absl::StrCat(prefix, "_", base, "_", index);
}

Json TextPart(const std::string& text) {
  return {{"type", "output_text"}, {"text", text}, {"annotations", Json::array()}, {"logprobs", Json::array()}};
}

Json MessageItem(const std::string& id, const std::string& text, const char* status) {
  Json content = Json::array();
  if (!text.empty() || std::string_view(status) == "completed") content.push_back(TextPart(text));
  return {{"id", id}, {"type", "message"}, {"status", status}, {"role", "assistant"}, {"content", std::move(content)}};
}

Json ReasoningItem(const std::string& id, const std::string& text, bool summary, bool done) {
  Json s = Json::array(), c = Json::array();
  if (done) {
    if (summary) s.push_back({{"type", "summary_text"}, {"text", text}});
    c.push_back({{"type", "reasoning_text"}, {"text", text}});
  }
  return {{"id", id}, {"type", "reasoning"}, {"summary", std::move(s)}, {"content", std::move(c)}};
}

Json CallItem(const std::string& id, const chat::ToolCall& call, const char* status,
              bool with_arguments) {
  return {{"id", id},
          {"type", "function_call"},
          {"status", status},
          {"arguments", with_arguments ? call.arguments : std::string()},
          {"call_id", call.id},
          {"name", call.name}};
}

// resp_X -> X (the item ids' base).
std::string Base(const std::string& id) {
  return id.rfind("resp_", 0) == 0 ? id.substr(5) : id;
}

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

}  // namespace

// --- the store

void ResponseStore::ExpireLocked() {
  const absl::Time now = now_();
  while (!order_.empty()) {
    auto it = slots_.find(order_.front());
    if (now - it->second.stored < options_.ttl) break;
    slots_.erase(it);
    order_.pop_front();
  }
}

void ResponseStore::Put(const std::string& id, Entry entry) {
  std::lock_guard<std::mutex> l(mu_);
  ExpireLocked();
  if (options_.max_responses == 0) return;
  if (auto it = slots_.find(id); it != slots_.end()) {
    order_.erase(it->second.order);
    slots_.erase(it);
  }
  while (slots_.size() >= options_.max_responses) {
    slots_.erase(order_.front());
    order_.pop_front();
  }
  order_.push_back(id);
  slots_.emplace(id, Slot{std::move(entry), now_(), std::prev(order_.end())});
}

std::optional<ResponseStore::Entry> ResponseStore::Get(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  ExpireLocked();
  auto it = slots_.find(id);
  if (it == slots_.end()) return std::nullopt;
  return it->second.entry;
}

bool ResponseStore::Delete(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  ExpireLocked();
  auto it = slots_.find(id);
  if (it == slots_.end()) return false;
  order_.erase(it->second.order);
  slots_.erase(it);
  return true;
}

size_t ResponseStore::size() {
  std::lock_guard<std::mutex> l(mu_);
  ExpireLocked();
  return slots_.size();
}

// --- the request

absl::StatusOr<ResponsesRequest> ResponsesToChat(const Json& body, ResponseStore* store) {
  RETURN_IF_ERROR(Unknown(body, "", {"model", "input", "instructions", "previous_response_id",
                                     "tools", "tool_choice", "parallel_tool_calls",
                                     "max_output_tokens", "temperature", "top_p", "text",
                                     "reasoning", "store", "stream", "include", "metadata",
                                     "user", "safety_identifier", "prompt_cache_key",
                                     "service_tier", "truncation", "stream_options"}));
  ResponsesRequest r;
  Json& chat = r.chat;
  chat = Json::object();
  Json& echo = r.echo;
  ASSIGN_OR_RETURN(std::string model, String(body, "model", "", false));
  if (!model.empty()) chat["model"] = model;
  Json messages = Json::array();
  ASSIGN_OR_RETURN(std::string instructions, String(body, "instructions", "", false));
  if (!instructions.empty()) messages.push_back({{"role", "system"}, {"content", instructions}});
  ASSIGN_OR_RETURN(std::string previous, String(body, "previous_response_id", "", false));
  Json history = Json::array();
  if (!previous.empty()) {
    std::optional<ResponseStore::Entry> e =
        store != nullptr ? store->Get(previous) : std::nullopt;
    if (!e.has_value()) {
      absl::Status s = absl::NotFoundError(absl::StrCat(
          "Previous response with id '", previous, "' not found (never stored, stored with "
          "store: false, deleted or expired)."));
      s.SetPayload(kParamPayload, absl::Cord("previous_response_id"));
      s.SetPayload(kErrorCodePayload, absl::Cord("previous_response_not_found"));
      return s;
    }
    history = std::move(e->messages);
  }
  auto input = body.find("input");
  if (input == body.end() || input->is_null()) {
    return Bad("input", "Missing required parameter: 'input'.");
  }
  RETURN_IF_ERROR(InputItems(*input, store, &history));
  for (const Json& m : history) messages.push_back(m);
  r.history = std::move(history);
  chat["messages"] = std::move(messages);
  echo["instructions"] = instructions.empty() ? Json(nullptr) : Json(instructions);
  echo["max_output_tokens"] = nullptr;
  if (auto m = body.find("max_output_tokens"); m != body.end() && !m->is_null()) {
    if (!m->is_number_integer() || m->get<int64_t>() < 1) {
      return Bad("max_output_tokens", "Invalid 'max_output_tokens': expected an integer >= 1.");
    }
    chat["max_tokens"] = *m;
    echo["max_output_tokens"] = *m;
  }
  echo["model"] = model;
  bool parallel = true;
  if (auto p = body.find("parallel_tool_calls"); p != body.end() && !p->is_null()) {
    if (!p->is_boolean()) return Bad("parallel_tool_calls", "Invalid type for 'parallel_tool_calls': expected a boolean.");
    parallel = p->get<bool>();
    chat["parallel_tool_calls"] = parallel;
  }
  echo["parallel_tool_calls"] = parallel;
  echo["previous_response_id"] = previous.empty() ? Json(nullptr) : Json(previous);
  Json reasoning = {{"effort", nullptr}, {"summary", nullptr}};
  if (auto re = body.find("reasoning"); re != body.end() && !re->is_null()) {
    RETURN_IF_ERROR(Reasoning(*re, &chat, &r.summary));
    for (const char* k : {"effort", "summary"}) {
      if (re->contains(k)) reasoning[k] = (*re)[k];
    }
  }
  echo["reasoning"] = std::move(reasoning);
  if (auto s = body.find("store"); s != body.end() && !s->is_null()) {
    if (!s->is_boolean()) return Bad("store", "Invalid type for 'store': expected a boolean.");
    r.store = s->get<bool>();
  }
  echo["store"] = r.store;
  if (auto s = body.find("stream"); s != body.end() && !s->is_null()) {
    if (!s->is_boolean()) return Bad("stream", "Invalid type for 'stream': expected a boolean.");
    chat["stream"] = *s;
  }
  for (const char* k : {"temperature", "top_p"}) {
    echo[k] = 1.0;
    if (auto v = body.find(k); v != body.end() && !v->is_null()) {
      ASSIGN_OR_RETURN(double x, Number(body, k));
      chat[k] = x;
      echo[k] = x;
    }
  }
  echo["text"] = {{"format", {{"type", "text"}}}};
  if (auto t = body.find("text"); t != body.end() && !t->is_null()) {
    RETURN_IF_ERROR(Text(*t, &chat));
    if (t->contains("format") && !(*t)["format"].is_null()) echo["text"]["format"] = (*t)["format"];
  }
  echo["tool_choice"] = "auto";
  echo["tools"] = Json::array();
  if (auto t = body.find("tools"); t != body.end() && !t->is_null()) {
    ASSIGN_OR_RETURN(Json tools, Tools(*t));
    if (!tools.empty()) chat["tools"] = tools;
    echo["tools"] = *t;
  }
  if (auto tc = body.find("tool_choice"); tc != body.end() && !tc->is_null()) {
    ASSIGN_OR_RETURN(chat["tool_choice"], ToolChoiceOf(*tc));
    echo["tool_choice"] = *tc;
  }
  echo["truncation"] = "disabled";
  if (auto t = body.find("truncation"); t != body.end() && !t->is_null()) {
    ASSIGN_OR_RETURN(std::string tr, String(body, "truncation", "", false));
    if (tr != "disabled") {
      return Bad("truncation", "truncation 'auto' is not supported by this server: a conversation "
                               "longer than the context is refused, not truncated.");
    }
  }
  if (auto inc = body.find("include"); inc != body.end() && !inc->is_null()) {
    if (!inc->is_array()) return Bad("include", "Invalid type for 'include': expected an array.");
    for (size_t i = 0; i < inc->size(); ++i) {
      const std::string p = absl::StrCat("include[", i, "]");
      if (!(*inc)[i].is_string()) return Bad(p, absl::StrCat("Invalid type for '", p, "': expected a string."));
      // Reasoning comes back as plain text, which clients send back as is.
      RETURN_IF_ERROR(OneOf((*inc)[i].get<std::string>(), p, {"reasoning.encrypted_content"}));
    }
  }
  if (auto md = body.find("metadata"); md != body.end() && !md->is_null()) {
    if (!md->is_object()) return Bad("metadata", "Invalid type for 'metadata': expected an object.");
    for (auto it = md->begin(); it != md->end(); ++it) {
      if (!it->is_string()) {
        return Bad("metadata." + it.key(), "Invalid type for 'metadata." + it.key() + "': expected a string.");
      }
    }
    echo["metadata"] = *md;
  } else {
    echo["metadata"] = Json::object();
  }
  for (const char* k : {"user", "safety_identifier", "prompt_cache_key", "service_tier"}) {
    RETURN_IF_ERROR(String(body, k, "", false).status());
  }
  if (auto so = body.find("stream_options"); so != body.end() && !so->is_null()) {
    if (!so->is_object()) return Bad("stream_options", "Invalid type for 'stream_options': expected an object.");
    RETURN_IF_ERROR(Unknown(*so, "stream_options", {"include_obfuscation"}));
  }
  return r;
}

// --- the answer

Json ResponsesOutput(const std::string& id, const ChatDelta& a, bool summary) {
  const std::string base = Base(id);
  Json out = Json::array();
  if (!a.reasoning_content.empty()) {
    out.push_back(ReasoningItem(Id("rs", base, out.size()), a.reasoning_content, summary, true));
  }
  if (!AllSpace(a.content)) {
    out.push_back(MessageItem(Id("msg", base, out.size()), a.content, "completed"));
  }
  for (const chat::ToolCall& c : a.tool_calls) {
    out.push_back(CallItem(Id("fc", base, out.size()), c, "completed", true));
  }
  return out;
}

Json ResponsesUsage(const GenerateOutcome& o, int64_t reasoning_tokens) {
  return {{"input_tokens", o.prompt_tokens},
          {"input_tokens_details", {{"cached_tokens", o.cached_tokens}}},
          {"output_tokens", o.completion_tokens},
          {"output_tokens_details", {{"reasoning_tokens", reasoning_tokens}}},
          {"total_tokens", o.prompt_tokens + o.completion_tokens}};
}

Json ResponseObject(const std::string& id, int64_t created_at, const Json& echo,
                    const char* status, Json output, Json usage, bool length) {
  Json r = {{"id", id},
            {"object", "response"},
            {"created_at", created_at},
            {"status", length ? "incomplete" : status},
            {"error", nullptr},
            {"incomplete_details", length ? Json{{"reason", "max_output_tokens"}} : Json(nullptr)}};
  for (auto it = echo.begin(); it != echo.end(); ++it) r[it.key()] = it.value();
  r["output"] = std::move(output);
  r["usage"] = std::move(usage);
  return r;
}

// --- the stream

std::string ResponsesStream::Event(Json data) {
  const std::string type = data["type"].get<std::string>();
  data["sequence_number"] = seq_++;
  return absl::StrCat("event: ", type, "\ndata: ", Dump(data), "\n\n");
}

std::string ResponsesStream::ItemId(const char* prefix) const {
  return Id(prefix, Base(id_), output_.size());
}

std::string ResponsesStream::Start() {
  started_ = true;
  Json r = ResponseObject(id_, created_, echo_, "in_progress", Json::array(), nullptr, false);
  std::string out = Event({{"type", "response.created"}, {"response", r}});
  return out + Event({{"type", "response.in_progress"}, {"response", r}});
}

void ResponsesStream::Open(Item kind, std::string* out) {
  Close(out);
  open_ = kind;
  open_text_.clear();
  const int64_t index = static_cast<int64_t>(output_.size());
  if (kind == Item::kReasoning) {
    const std::string id = ItemId("rs");
    *out += Event({{"type", "response.output_item.added"}, {"output_index", index},
                   {"item", ReasoningItem(id, "", summary_, false)}});
    if (summary_) {
      *out += Event({{"type", "response.reasoning_summary_part.added"}, {"item_id", id},
                     {"output_index", index}, {"summary_index", 0},
                     {"part", {{"type", "summary_text"}, {"text", ""}}}});
    }
    output_.push_back(ReasoningItem(id, "", summary_, false));
  } else {
    const std::string id = ItemId("msg");
    *out += Event({{"type", "response.output_item.added"}, {"output_index", index},
                   {"item", MessageItem(id, "", "in_progress")}});
    *out += Event({{"type", "response.content_part.added"}, {"item_id", id},
                   {"output_index", index}, {"content_index", 0}, {"part", TextPart("")}});
    output_.push_back(MessageItem(id, "", "in_progress"));
  }
}

void ResponsesStream::Close(std::string* out) {
  if (open_ == Item::kNone) return;
  const int64_t index = static_cast<int64_t>(output_.size()) - 1;
  const std::string id = output_.back()["id"];
  Json item;
  if (open_ == Item::kReasoning) {
    if (summary_) {
      *out += Event({{"type", "response.reasoning_summary_text.done"}, {"item_id", id},
                     {"output_index", index}, {"summary_index", 0}, {"text", open_text_}});
      *out += Event({{"type", "response.reasoning_summary_part.done"}, {"item_id", id},
                     {"output_index", index}, {"summary_index", 0},
                     {"part", {{"type", "summary_text"}, {"text", open_text_}}}});
    }
    *out += Event({{"type", "response.reasoning_text.done"}, {"item_id", id},
                   {"output_index", index}, {"content_index", 0}, {"text", open_text_}});
    item = ReasoningItem(id, open_text_, summary_, true);
  } else {
    *out += Event({{"type", "response.output_text.done"}, {"item_id", id},
                   {"output_index", index}, {"content_index", 0}, {"text", open_text_},
                   {"logprobs", Json::array()}});
    *out += Event({{"type", "response.content_part.done"}, {"item_id", id},
                   {"output_index", index}, {"content_index", 0}, {"part", TextPart(open_text_)}});
    item = MessageItem(id, open_text_, "completed");
  }
  *out += Event({{"type", "response.output_item.done"}, {"output_index", index}, {"item", item}});
  output_.back() = std::move(item);
  open_ = Item::kNone;
  open_text_.clear();
}

std::string ResponsesStream::Push(const ChatDelta& piece) {
  std::string out;
  all_.reasoning_content += piece.reasoning_content;
  all_.content += piece.content;
  for (const chat::ToolCall& c : piece.tool_calls) all_.tool_calls.push_back(c);
  auto index = [&] { return static_cast<int64_t>(output_.size()) - 1; };
  auto id = [&] { return output_.back()["id"].get<std::string>(); };
  if (!piece.reasoning_content.empty()) {
    if (open_ != Item::kReasoning) Open(Item::kReasoning, &out);
    open_text_ += piece.reasoning_content;
    out += Event({{"type", "response.reasoning_text.delta"}, {"item_id", id()},
                  {"output_index", index()}, {"content_index", 0},
                  {"delta", piece.reasoning_content}});
    if (summary_) {
      out += Event({{"type", "response.reasoning_summary_text.delta"}, {"item_id", id()},
                    {"output_index", index()}, {"summary_index", 0},
                    {"delta", piece.reasoning_content}});
    }
  }
  if (!piece.content.empty()) {
    std::string text;
    if (open_ == Item::kMessage) {
      text = piece.content;
    } else {
      held_ += piece.content;
      if (!AllSpace(held_)) {
        Open(Item::kMessage, &out);
        text = std::move(held_);
        held_.clear();
      }
    }
    if (!text.empty()) {
      open_text_ += text;
      out += Event({{"type", "response.output_text.delta"}, {"item_id", id()},
                    {"output_index", index()}, {"content_index", 0}, {"delta", text},
                    {"logprobs", Json::array()}});
    }
  }
  for (const chat::ToolCall& c : piece.tool_calls) {
    Close(&out);
    held_.clear();
    const std::string item_id = ItemId("fc");
    const int64_t i = static_cast<int64_t>(output_.size());
    out += Event({{"type", "response.output_item.added"}, {"output_index", i},
                  {"item", CallItem(item_id, c, "in_progress", false)}});
    out += Event({{"type", "response.function_call_arguments.delta"}, {"item_id", item_id},
                  {"output_index", i}, {"delta", c.arguments}});
    out += Event({{"type", "response.function_call_arguments.done"}, {"item_id", item_id},
                  {"output_index", i}, {"name", c.name}, {"arguments", c.arguments}});
    Json item = CallItem(item_id, c, "completed", true);
    out += Event({{"type", "response.output_item.done"}, {"output_index", i}, {"item", item}});
    output_.push_back(std::move(item));
  }
  return out;
}

std::string ResponsesStream::Finish(const ChatDelta& rest, Json usage, bool length,
                                    Json* response) {
  std::string out = Push(rest);
  Close(&out);
  *response = ResponseObject(id_, created_, echo_, "completed", output_, std::move(usage), length);
  out += Event({{"type", length ? "response.incomplete" : "response.completed"},
                {"response", *response}});
  return out;
}

std::string ResponsesStream::Error(const std::string& code, const std::string& message) {
  return Event({{"type", "error"}, {"code", code}, {"message", message}, {"param", nullptr}});
}

}  // namespace moesplit::dense
