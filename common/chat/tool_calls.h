// Tool calls in model output: which format a chat template teaches its model
// (the family, detected from the template's source as llama.cpp's
// common/chat.cpp does), and the parser that turns the model's text into
// OpenAI-style calls {id, name, arguments (a JSON string)}.
//
// Families and what their models write (after any <think> block, which the
// reasoning splitter has already removed):
//   kHermes      Qwen2.5, Qwen3, Hermes 2/3: one call per block
//                  <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
//                (detected by "<tool_call>" in the template)
//   kQwen3Coder  Qwen3-Coder, Qwen3.5: XML parameters, one tag per key
//                  <tool_call>\n<function=f>\n<parameter=city>\nOslo\n</parameter>\n
//                  </function>\n</tool_call>
//                a value is JSON when it parses as JSON and the function's
//                schema does not declare the parameter a string, else the
//                text itself (detected by "<tool_call>" + "<function=" +
//                "<parameter=")
//   kDeepSeekV31 DeepSeek-V3.1: one block holding every call
//                  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{...}
//                  <｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
//                (detected by "<｜tool▁calls▁begin｜>")
//   kHarmony     gpt-oss: a message to a recipient on the commentary channel,
//                  <|start|>assistant to=functions.f<|channel|>commentary json
//                  <|message|>{...}<|call|>
//                the harmony splitter (harmony.h) collects those messages;
//                ToolCallsFromHarmony turns them into calls (detected by
//                "<|channel|>")
//   kGlm45       GLM-4.5 / 4.6: one call per block, the name then a key and a
//                value tag per argument
//                  <tool_call>f\n<arg_key>city</arg_key>\n<arg_value>Oslo
//                  </arg_value>\n</tool_call>
//                values as kQwen3Coder's, taken as written (no newline
//                stripped; detected by "<tool_call>" + "<arg_key>" +
//                "<arg_value>")
//   kGlm47       GLM-4.7 / 4.7-Flash: kGlm45 without the newlines
//                  <tool_call>f<arg_key>city</arg_key><arg_value>Oslo
//                  </arg_value></tool_call>
//                (detected as kGlm45, the template writing
//                "</arg_key><arg_value>"; both read either layout)
//   kMiniMaxM2   MiniMax-M2: one block holding every call
//                  <minimax:tool_call>\n<invoke name="f">\n<parameter
//                  name="city">Oslo</parameter>\n</invoke>\n</minimax:tool_call>
//                values as kGlm45's (detected by "<minimax:tool_call>" +
//                "<invoke name=")
//   kGemma4      Gemma 4: one call per block, the arguments in Gemma's
//                dictionary syntax (keys bare, strings between <|"|> quotes,
//                numbers, true/false/null, [..] and {..} as JSON's)
//                  <|tool_call>call:f{city:<|"|>Oslo<|"|>,days:3}<tool_call|>
//                (detected by "'<|tool_call>call:'"; the reasoning before
//                it is Gemma's thought channel, harmony.h kThoughtChannel)
//   kLlama3Json  Llama 3.1 / 3.2 / 3.3: the answer is the call, a bare JSON
//                object, optionally after "<|python_tag|>"
//                  {"name": "f", "parameters": {...}}
//                ("arguments" read too); several calls one after another
//                (whitespace or ';' between them). Text before the first
//                object makes the whole answer content (detected by the
//                templates' 'Respond in the format {"name": function name,
//                "parameters": ...}')
// Nemotron 3 Nano writes kQwen3Coder's calls (its template is detected as
// such, as llama.cpp does).
// The family follows the template, not the architecture: Qwen3-Coder-Next
// (qwen3next) ships Qwen3-Coder's template (kQwen3Coder), Qwen3-Next-80B-A3B
// Qwen3's (kHermes).
//
// The rule (ToolCallStream, on the answer text):
//   1. Text outside a call block is content. Whitespace between calls, or
//      from the last call to the end, is dropped (after other text it is
//      content).
//   2. A block whose body parses (valid JSON arguments, a function name the
//      request offered, and, with config.only_name, that name) becomes its
//      calls; with config.parallel false only the first call of the answer
//      is kept, later ones are dropped.
//   3. A block that does not parse, and everything after it, is content as
//      written (malformed output is never an error). A block cut off by the
//      end of generation counts when its body parses without the closing tag.
// In a stream, text is held back only while it may still be the start of
// an opening tag, or while a block is open; the concatenation of what Push
// and Finish return equals ParseToolCalls of the whole text.
//
// Constrained decoding (tool_choice "required" or a named function) forces
// the model to write ToolCallFrameFor(family, name).prefix, then arguments
// matching the function's parameters (one JSON object for kHermes,
// kDeepSeekV31, kHarmony and kLlama3Json; a Gemma dictionary for kGemma4; one tag per
// argument, ArgumentTagsFor, for the others), then .suffix.
//
// Thread-safety: ToolCallStream is not thread-safe; the functions are.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/chat/harmony.h"
#include "nlohmann/json.hpp"

namespace moesplit::chat {

enum class ToolCallFamily {
  kNone,
  kHermes,
  kQwen3Coder,
  kDeepSeekV31,
  kHarmony,
  kGlm45,
  kGlm47,
  kMiniMaxM2,
  kGemma4,
  kLlama3Json,
};

ToolCallFamily DetectToolCallFamily(std::string_view template_source);
const char* ToolCallFamilyName(ToolCallFamily family);

struct ToolCall {
  std::string id;         // "call_" + 24 random letters and digits
  std::string name;
  std::string arguments;  // a JSON text (compact)
};

struct ToolCallFrameText {
  std::string prefix;  // what opens a call of the function
  std::string suffix;  // what closes it
};
// kNone: both empty.
ToolCallFrameText ToolCallFrameFor(ToolCallFamily family, std::string_view name);

// How the families whose arguments are tags write one argument K = V:
// key_prefix K key_suffix V value_suffix, V being the raw text of a string
// (never containing value_end) or JSON. The parser reads them back with
// any whitespace between the tags.
struct ArgumentTags {
  std::string key_prefix;
  std::string key_suffix;
  std::string value_suffix;
  std::string value_end;  // the tag that ends a value
};
// kQwen3Coder: "<parameter=" K ">\n" V "\n</parameter>\n"; kGlm45:
// "<arg_key>" K "</arg_key>\n<arg_value>" V "</arg_value>\n"; kGlm47: the
// same without the newlines; kMiniMaxM2: "<parameter name=\"" K "\">" V
// "</parameter>\n". Null for the others (their arguments are one JSON
// object).
const ArgumentTags* ArgumentTagsFor(ToolCallFamily family);
// The tags of the family's frames, and "<think>" / "</think>", that its
// models' vocabularies hold as one (special) token each, so that a grammar
// forcing a frame writes them as those tokens (grammar::GrammarBuilder::Tag).
std::vector<std::string_view> FrameTags(ToolCallFamily family);

struct ToolCallConfig {
  ToolCallFamily family = ToolCallFamily::kNone;
  // The OpenAI `tools` array of the request (validated: each element has
  // function.name; function.parameters, when present, is an object).
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();
  std::string only_name;  // non-empty: only calls of this function count
  bool parallel = true;   // false: at most one call
};

struct ToolCallOutput {
  std::string content;
  std::vector<ToolCall> calls;
};

class ToolCallStream {
 public:
  explicit ToolCallStream(ToolCallConfig config);

  // Newly classified answer text and completed calls.
  ToolCallOutput Push(std::string_view content_delta);
  // At the end of generation: what was held back. Push after Finish is not
  // allowed.
  ToolCallOutput Finish();
  // Calls returned so far.
  int calls_made() const { return calls_made_; }

 private:
  enum class State { kText, kCall, kPlain };
  void Process(bool final, ToolCallOutput* out);
  // kLlama3Json: calls are bare JSON objects, no tags around them.
  void ProcessBareJson(bool final, ToolCallOutput* out);
  void TakeCalls(std::vector<ToolCall>* calls, ToolCallOutput* out);
  // The calls of one block body; false when it does not parse.
  bool ParseBlock(std::string_view body, std::vector<ToolCall>* calls) const;

  const ToolCallConfig config_;
  std::string open_, close_;
  State state_ = State::kText;
  int calls_made_ = 0;
  // Content other than whitespace went out since the last call block (its
  // whitespace is then content, not the space between calls).
  bool text_since_call_ = false;
  std::string pending_;
};

ToolCallOutput ParseToolCalls(std::string_view content, const ToolCallConfig& config);

// gpt-oss: the calls among the harmony messages addressed to a recipient
// ("functions.NAME", body = the JSON arguments). A message that is not a
// valid call comes back as content (its body as written).
ToolCallOutput ToolCallsFromHarmony(const std::vector<HarmonyCall>& messages,
                                    const ToolCallConfig& config);

std::string NewToolCallId();

}  // namespace moesplit::chat
