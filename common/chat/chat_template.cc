#include "common/chat/chat_template.h"

#include <cstdio>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"

namespace moesplit::chat {
namespace {

// Parses "YYYY-MM-DD" or "YYYY-MM-DD HH:MM:SS" (also with 'T') into a
// normalised struct tm (weekday and day of year filled in).
absl::StatusOr<std::tm> ParseDate(const std::string& s) {
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, sec = 0;
  char sep = 0;
  int n = std::sscanf(s.c_str(), "%4d-%2d-%2d%c%2d:%2d:%2d", &y, &mo, &d, &sep, &h, &mi, &sec);
  const bool date_only = n == 3 && s.size() == 10;
  const bool full = n == 7 && (sep == ' ' || sep == 'T') && s.size() == 19;
  if ((!date_only && !full) || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60) {
    return absl::InvalidArgumentError(absl::StrCat(
        "date_override must be \"YYYY-MM-DD\" or \"YYYY-MM-DD HH:MM:SS\", got \"", s, "\""));
  }
  std::tm tm{};
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = sec;
  const time_t t = timegm(&tm);  // normalises and fills tm_wday / tm_yday
  std::tm out{};
  gmtime_r(&t, &out);
  return out;
}

// The fixed date, else the local time now.
std::tm Today(const std::optional<std::tm>& fixed) {
  if (fixed) return *fixed;
  std::tm tm{};
  const time_t now = std::time(nullptr);
  localtime_r(&now, &tm);
  return tm;
}

std::string FormatTime(const std::tm& tm, const std::string& fmt) {
  if (fmt.empty()) return "";
  for (size_t cap = 256; cap <= (1u << 16); cap *= 4) {
    std::string buf(cap + fmt.size() * 8, '\0');
    const size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
    if (n > 0) {
      buf.resize(n);
      return buf;
    }
  }
  return "";  // every conversion produced nothing (e.g. "%p" in some locales)
}

absl::StatusOr<Value> StrftimeNow(const std::optional<std::tm>& fixed, CallArgs& args) {
  if (args.positional.size() != 1 || !args.positional[0].is_string()) {
    return absl::InvalidArgumentError("strftime_now(format) expects one string argument");
  }
  return Value(FormatTime(Today(fixed), args.positional[0].as_string()));
}

// llama.cpp hands templates tool_calls[].function.arguments as parsed JSON,
// not the string the OpenAI API carries; templates then `tojson` them or
// iterate their items.
absl::StatusOr<nlohmann::ordered_json> ArgumentsAsObjects(const nlohmann::ordered_json& messages) {
  nlohmann::ordered_json out = messages;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!out[i].is_object()) continue;
    // As llama.cpp's message round trip: no content is "" (templates print
    // a tool-call turn's content, and `content: null` is how clients send it).
    if (!out[i].contains("content") || out[i]["content"].is_null()) out[i]["content"] = "";
    auto calls = out[i].find("tool_calls");
    if (calls == out[i].end() || !calls->is_array()) continue;
    for (size_t k = 0; k < calls->size(); ++k) {
      nlohmann::ordered_json& call = (*calls)[k];
      if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
      auto args = call["function"].find("arguments");
      if (args == call["function"].end() || !args->is_string()) continue;
      try {
        *args = nlohmann::ordered_json::parse(args->get<std::string>());
      } catch (const nlohmann::ordered_json::exception& e) {
        return absl::InvalidArgumentError(
            absl::StrCat("messages[", i, "].tool_calls[", k,
                         "].function.arguments is not valid JSON: ", e.what()));
      }
    }
  }
  return out;
}

absl::StatusOr<ValueDict> BuildVariables(const nlohmann::ordered_json& messages,
                                         const ChatTemplateOptions& options) {
  if (!messages.is_array()) {
    return absl::InvalidArgumentError("chat template: messages must be a JSON array");
  }
  std::optional<std::tm> fixed;
  if (!options.date_override.empty()) {
    ASSIGN_OR_RETURN(fixed, ParseDate(options.date_override));
  }
  ValueDict vars;
  ASSIGN_OR_RETURN(const nlohmann::ordered_json with_objects, ArgumentsAsObjects(messages));
  ASSIGN_OR_RETURN(Value msgs, Value::FromJson(with_objects));
  vars.Put("messages", std::move(msgs));
  vars.Put("bos_token", Value(options.bos_token));
  vars.Put("eos_token", Value(options.eos_token));
  vars.Put("enable_thinking", Value(options.enable_thinking));
  // As llama.cpp's jinja::caps_apply_preserve_reasoning and the
  // preserve_reasoning kwarg its server always passes.
  vars.Put("preserve_reasoning", Value(options.preserve_reasoning));
  vars.Put("preserve_thinking", Value(options.preserve_reasoning));
  for (const char* name : {"clear_thinking", "truncate_history_thinking", "drop_thinking"}) {
    vars.Put(name, Value(!options.preserve_reasoning));
  }
  if (options.add_generation_prompt) vars.Put("add_generation_prompt", Value(*options.add_generation_prompt));
  if (options.tools.is_array() && !options.tools.empty()) {
    ASSIGN_OR_RETURN(Value tools, Value::FromJson(options.tools));
    vars.Put("tools", std::move(tools));
  }
  vars.Put("raise_exception", Value::Function("raise_exception", [](CallArgs& a) -> absl::StatusOr<Value> {
             std::string msg = a.positional.empty() ? "raise_exception() called" : a.positional[0].Str();
             return absl::InvalidArgumentError(msg);
           }));
  vars.Put("strftime_now", Value::Function("strftime_now", [fixed](CallArgs& a) {
             return StrftimeNow(fixed, a);
           }));
  // As llama.cpp's extra context (Llama 3.x templates read date_string).
  const std::tm today = Today(fixed);
  vars.Put("date_string", Value(FormatTime(today, "%d %b %Y")));
  vars.Put("datetime", Value(FormatTime(today, "%b %d %Y")));
  if (options.extra_context.is_object()) {
    for (auto it = options.extra_context.begin(); it != options.extra_context.end(); ++it) {
      ASSIGN_OR_RETURN(Value v, Value::FromJson(it.value()));
      vars.Put(it.key(), std::move(v));
    }
  } else if (!options.extra_context.is_null()) {
    return absl::InvalidArgumentError("chat template: extra_context must be a JSON object");
  }
  return vars;
}

}  // namespace

absl::StatusOr<ChatTemplate> ChatTemplate::Parse(std::string source) {
  ASSIGN_OR_RETURN(JinjaTemplate t, JinjaTemplate::Parse(source));
  return ChatTemplate(std::make_shared<const std::string>(std::move(source)), std::move(t));
}

absl::StatusOr<std::string> ChatTemplate::Render(const nlohmann::ordered_json& messages,
                                                 const ChatTemplateOptions& options) const {
  ASSIGN_OR_RETURN(ValueDict vars, BuildVariables(messages, options));
  ASSIGN_OR_RETURN(std::string prompt, template_.Render(vars, options.limits));
  // Gemma 4's template opens no model turn after a turn that ended with
  // content after tool results; llama.cpp's chat handling adds it.
  constexpr std::string_view kGemma4Call = "'<|tool_call>call:'", kTurnEnd = "<turn|>\n";
  if (options.add_generation_prompt.value_or(false) && source_->find(kGemma4Call) != std::string::npos &&
      prompt.size() >= kTurnEnd.size() && prompt.compare(prompt.size() - kTurnEnd.size(), kTurnEnd.size(), kTurnEnd) == 0) {
    prompt += "<|turn>model\n";
  }
  return prompt;
}

const std::string& ChatMLFallbackTemplate() {
  static const std::string* const kTemplate = new std::string(
      "{%- for message in messages -%}\n"
      "{{- '<|im_start|>' + message['role'] + '\\n' -}}\n"
      "{%- if message['content'] is string -%}\n"
      "{{- message['content'] -}}\n"
      "{%- elif message['content'] is iterable -%}\n"
      "{%- for part in message['content'] -%}\n"
      "{%- if part is mapping and part['text'] is string -%}{{- part['text'] -}}{%- endif -%}\n"
      "{%- endfor -%}\n"
      "{%- endif -%}\n"
      "{{- '<|im_end|>\\n' -}}\n"
      "{%- endfor -%}\n"
      "{%- if add_generation_prompt -%}\n"
      "{{- '<|im_start|>assistant\\n' -}}\n"
      "{%- endif -%}\n");
  return *kTemplate;
}

}  // namespace moesplit::chat
