// Clients of the dense service's gRPC API and the chat-template renderer:
//   moesplit chat      interactive: reads user lines from stdin, keeps the
//                      conversation, streams each answer (reasoning shown
//                      between <think> and </think> on io.err).
//   moesplit render-template
//                      prints the prompt a model's chat template (or
//                      --template-file) renders for a messages JSON file,
//                      exactly, with no newline added.
#include <grpcpp/grpcpp.h>

#include <iostream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "common/chat/chat_template.h"
#include "services/dense/chat_prompt.h"
#include "common/gguf/gguf.h"
#include "common/tokenizer/tokenizer.h"
#include "moesplit/v1/inference.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "services/cli/commands.h"
#include "services/cli/remote.h"

namespace moesplit::cli {
namespace {

namespace v1 = moesplit::v1;

absl::Status FromGrpc(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

struct ClientFlags {
  std::string server = "127.0.0.1:50051", model, system;
  int64_t n = 256, seed = 0, top_k = 0;
  double temp = 0.7, top_p = 1.0, min_p = 0.0;
  bool no_think = false;

  void Register(FlagParser& p) {
    p.AddString("server|addr", &server, "the dense service's gRPC address").HostPort();
    p.AddString("model", &model, "model name to ask for").DefaultText("whatever is served");
    p.AddInt("n", &n, "most tokens per answer (0: until the end or the context)");
    p.AddDouble("temp", &temp, "sampling temperature (0 = greedy)");
    p.AddDouble("top-p", &top_p, "nucleus sampling mass");
    p.AddInt("top-k", &top_k, "top-k sampling (0 = off)");
    p.AddDouble("min-p", &min_p, "min-p sampling (0 = off)");
    p.AddInt("seed", &seed, "sampling seed (0 = random)");
  }
  void Fill(v1::SamplingParams* s) const {
    s->set_temperature(static_cast<float>(temp));
    s->set_top_p(static_cast<float>(top_p));
    s->set_top_k(static_cast<int32_t>(top_k));
    s->set_min_p(static_cast<float>(min_p));
    s->set_seed(static_cast<uint64_t>(seed));
    s->set_has_seed(seed != 0);
  }
};

}  // namespace

absl::Status RunChat(const Args& args, const CommandIo& io) {
  ClientFlags f;
  FlagParser p;
  f.Register(p);
  p.AddString("system", &f.system, "system message").DefaultText("none");
  p.AddBool("no-think", &f.no_think, "ask a reasoning model not to think");
  ClientSecurityFlags sf;
  sf.Register(p);
  ASSIGN_OR_RETURN(const bool go, ParseFlags(p, args, "chat --server H:P [flags]  (one user turn per stdin line)", io));
  if (!go) return absl::OkStatus();
  ASSIGN_OR_RETURN(const ClientSecurity security, ClientSecurity::Load(sf));
  auto stub = v1::Inference::NewStub(security.Channel(f.server));
  std::vector<v1::ChatMessage> history;
  if (!f.system.empty()) {
    v1::ChatMessage m;
    m.set_role("system");
    m.set_content(f.system);
    history.push_back(m);
  }
  std::string line;
  for (;;) {
    std::fprintf(io.err, "> ");
    std::fflush(io.err);
    if (!std::getline(std::cin, line)) break;
    if (line.empty()) continue;
    if (line == "/exit" || line == "/quit") break;
    v1::ChatMessage user;
    user.set_role("user");
    user.set_content(line);
    history.push_back(user);
    v1::ChatRequest req;
    req.set_model(f.model);
    for (const auto& m : history) *req.add_messages() = m;
    req.set_max_tokens(static_cast<int32_t>(f.n));
    req.set_disable_thinking(f.no_think);
    f.Fill(req.mutable_sampling());
    grpc::ClientContext ctx;
    security.Authorize(&ctx);
    auto reader = stub->Chat(&ctx, req);
    v1::ChatResponse resp;
    std::string content, reasoning;
    bool in_think = false;
    while (reader->Read(&resp)) {
      if (!resp.reasoning_content().empty()) {
        if (!in_think) std::fprintf(io.err, "<think>");
        in_think = true;
        std::fwrite(resp.reasoning_content().data(), 1, resp.reasoning_content().size(), io.err);
        reasoning += resp.reasoning_content();
      }
      if (!resp.content().empty()) {
        if (in_think) std::fprintf(io.err, "</think>\n");
        in_think = false;
        std::fwrite(resp.content().data(), 1, resp.content().size(), io.out);
        std::fflush(io.out);
        content += resp.content();
      }
    }
    if (in_think) std::fprintf(io.err, "</think>\n");
    grpc::Status s = reader->Finish();
    std::fprintf(io.out, "\n");
    std::fflush(io.out);
    if (!s.ok()) {
      history.pop_back();  // the turn failed; the user may retry
      std::fprintf(io.err, "moesplit chat: %s\n", s.error_message().c_str());
      if (s.error_code() == grpc::StatusCode::UNAVAILABLE) return FromGrpc(s);
      continue;
    }
    v1::ChatMessage answer;
    answer.set_role("assistant");
    answer.set_content(content);
    history.push_back(answer);
  }
  return absl::OkStatus();
}

absl::Status RunRenderTemplate(const Args& args, const CommandIo& io) {
  std::string model, messages_file, template_file, date, tools_file, continue_final;
  bool no_gen = false, no_thinking = false;
  FlagParser p;
  p.AddString("model|m", &model, "GGUF model: its chat template, BOS and EOS tokens (required)");
  p.AddString("messages-json", &messages_file,
              "JSON file: an array of messages, or {\"messages\": [...], \"tools\": [...]} (required)");
  p.AddString("tools-json", &tools_file,
              "JSON file: the OpenAI `tools` array given to the template (replaces a "
              "\"tools\" key of --messages-json)")
      .Meta("PATH")
      .DefaultText("none");
  p.AddBool("no-generation-prompt", &no_gen, "do not open the assistant's turn");
  p.AddString("continue-final-message", &continue_final,
              "continue the last (assistant's) message as llama-server's continue_final_message: "
              "auto, content or reasoning_content; needs --no-generation-prompt (a trailing "
              "assistant message is continued without it too, as auto)")
      .Meta("MODE")
      .DefaultText("not set");
  p.AddBool("no-thinking", &no_thinking, "render with enable_thinking false");
  p.AddString("template-file", &template_file, "use this Jinja template instead of the model's")
      .Meta("PATH")
      .DefaultText("the model's");
  p.AddString("date", &date, "date for strftime_now, YYYY-MM-DD").DefaultText("today");
  ASSIGN_OR_RETURN(const bool go,
                   ParseFlags(p, args,
                              "render-template --model M --messages-json F "
                              "[--tools-json F] [--no-generation-prompt] "
                              "[--continue-final-message MODE] [--no-thinking] "
                              "[--template-file T]",
                              io));
  if (!go) return absl::OkStatus();
  if (model.empty() || messages_file.empty()) {
    return absl::InvalidArgumentError("--model and --messages-json are required");
  }
  ASSIGN_OR_RETURN(auto file, GgufFile::Open(model));
  ASSIGN_OR_RETURN(auto tok, Tokenizer::FromGguf(*file));
  std::string source;  // empty: the model's
  if (!template_file.empty()) {
    ASSIGN_OR_RETURN(source, ReadFile(template_file));
  }
  // The server's renderer: a trailing assistant message is continued.
  ASSIGN_OR_RETURN(const dense::ChatPrompt chat, dense::ChatPrompt::ForModel(*file, *tok, source));
  if (!chat.warning().empty()) {
    std::fprintf(io.err, "moesplit render-template: warning: %s: %s\n", model.c_str(),
                 chat.warning().c_str());
  }
  dense::ChatPromptOptions o;
  if (continue_final == "auto") {
    o.continue_final_message = dense::ContinueFinalMessage::kAuto;
  } else if (continue_final == "content") {
    o.continue_final_message = dense::ContinueFinalMessage::kContent;
  } else if (continue_final == "reasoning_content") {
    o.continue_final_message = dense::ContinueFinalMessage::kReasoning;
  } else if (!continue_final.empty()) {
    return absl::InvalidArgumentError(
        "--continue-final-message must be auto, content or reasoning_content");
  }
  ASSIGN_OR_RETURN(const std::string text, ReadFile(messages_file));
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::ordered_json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(messages_file, ": ", e.what()));
  }
  nlohmann::ordered_json messages = j;
  if (j.is_object()) {
    messages = j.value("messages", nlohmann::ordered_json::array());
    if (j.contains("tools")) o.tools = j["tools"];
  }
  if (!messages.is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(messages_file, ": no messages array"));
  }
  if (!tools_file.empty()) {
    ASSIGN_OR_RETURN(const std::string tools_text, ReadFile(tools_file));
    try {
      o.tools = nlohmann::ordered_json::parse(tools_text);
    } catch (const nlohmann::ordered_json::exception& e) {
      return absl::InvalidArgumentError(absl::StrCat(tools_file, ": ", e.what()));
    }
    if (!o.tools.is_array()) {
      return absl::InvalidArgumentError(absl::StrCat(tools_file, ": not a JSON array of tools"));
    }
  }
  o.add_generation_prompt = !no_gen;
  o.enable_thinking = !no_thinking;
  o.date_override = date;
  ASSIGN_OR_RETURN(const std::string prompt, chat.Render(messages, o));
  std::fwrite(prompt.data(), 1, prompt.size(), io.out);
  return absl::OkStatus();
}

}  // namespace moesplit::cli
