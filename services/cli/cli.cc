#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/base/build_info.h"
#include "common/base/cpu_count.h"
#include "common/base/status.h"
#include "services/cli/commands.h"

namespace moesplit::cli {
namespace {

struct Command {
  absl::string_view name;
  absl::string_view summary;
  absl::Status (*run)(const Args&, const CommandIo&);
};

constexpr Command kCommands[] = {
    {"inspect", "architecture, hyper-parameters, tensors and bytes by role",
     RunInspect},
    {"tokenize", "token ids of a text", RunTokenize},
    {"logits", "all-position logits of a token sequence, as float32",
     RunLogits},
    {"generate", "stream generated text", RunGenerate},
    {"make-test-model", "write a random-weight qwen3moe/qwen2moe GGUF",
     RunMakeTestModel},
    {"up", "start expert-workers and the dense service on this host", RunUp},
    {"bench", "prefill/decode speed, the worker alone and DRAM bandwidth", RunBench},
    {"plan", "GPU memory plan: dense weights, KV cache, workspace, expert cache",
     RunPlan},
    {"health", "gRPC health check of a running service (exit 0 when SERVING)", RunHealth},
    {"complete", "one streamed completion from a running dense service", RunComplete},
    {"chat", "interactive chat with a running dense service (gRPC)", RunChat},
    {"render-template", "print the prompt a chat template renders for messages",
     RunRenderTemplate},
};

void PrintUsage(std::FILE* f) {
  std::fprintf(f, "usage: moesplit <command> [flags]  (moesplit <command> "
                  "--help for its flags; moesplit --version)\n\ncommands:\n");
  for (const Command& c : kCommands) {
    std::fprintf(f, "  %-16s %s\n", std::string(c.name).c_str(),
                 std::string(c.summary).c_str());
  }
}

std::string CommandNames() {
  std::string out;
  for (const Command& c : kCommands) {
    absl::StrAppend(&out, out.empty() ? "" : ", ", c.name);
  }
  return out;
}

}  // namespace

int ExitCodeFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk: return 0;
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kResourceExhausted: return 1;
    default: return 2;
  }
}

absl::StatusOr<bool> ParseFlags(FlagParser& flags, const Args& args,
                                absl::string_view synopsis,
                                const CommandIo& io) {
  ASSIGN_OR_RETURN(const ParsedCommandLine r,
                   ParseCommandLine(flags, args, absl::StrCat("moesplit ", synopsis), io.out));
  return r == ParsedCommandLine::kRun;
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    const std::string msg = absl::StrCat(path, ": ", std::strerror(err));
    if (err == EACCES) return absl::PermissionDeniedError(msg);
    return absl::NotFoundError(msg);
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  return ss.str();
}

absl::StatusOr<std::string> ReadTextFlag(const FlagParser& f,
                                         const std::string& text,
                                         const std::string& text_file) {
  if (f.WasSet("text") == f.WasSet("text-file")) {
    return absl::InvalidArgumentError(
        "give exactly one of --text and --text-file");
  }
  if (f.WasSet("text")) return text;
  return ReadFile(text_file);
}

int ThreadCount(int64_t requested) {
  if (requested > 0) return static_cast<int>(std::min<int64_t>(requested, 1024));
  return AvailableCpuCount();
}

int RunCli(const Args& args, const CommandIo& io) {
  absl::Status status;
  if (args.empty()) {
    status = absl::InvalidArgumentError(
        absl::StrCat("missing command (one of: ", CommandNames(),
                     "; see moesplit --help)"));
  } else if (args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    PrintUsage(io.out);
    return 0;
  } else if (args[0] == "--version" || args[0] == "version") {
    std::fprintf(io.out, "%s\n", VersionLine("moesplit").c_str());
    return 0;
  } else {
    const Command* found = nullptr;
    std::vector<std::string> names;
    for (const Command& c : kCommands) {
      if (c.name == args[0]) found = &c;
      names.emplace_back(c.name);
    }
    if (found == nullptr) {
      const std::string guess = ClosestName(args[0], names);
      status = absl::InvalidArgumentError(
          args[0].rfind('-', 0) == 0
              ? absl::StrCat("unknown flag ", args[0],
                             " (give a command first: ", CommandNames(), ")")
              : absl::StrCat("unknown command '", args[0], "' (",
                             guess.empty() ? "" : absl::StrCat("did you mean ", guess, "? "),
                             "commands: ", CommandNames(), ")"));
    } else {
      status = found->run(Args(args.begin() + 1, args.end()), io);
    }
  }
  if (status.ok()) return 0;
  std::string message(status.message());
  if (message.empty()) message = status.ToString();
  message = absl::StrReplaceAll(message, {{"\r", " "}, {"\n", " "}});
  std::fflush(io.out);
  std::fprintf(io.err, "moesplit: %s\n", message.c_str());
  return ExitCodeFor(status);
}

}  // namespace moesplit::cli
