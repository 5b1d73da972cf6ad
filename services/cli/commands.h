// The moesplit subcommands and the dispatcher main() calls.
//
// Every subcommand takes the arguments after its name and writes its normal
// output to io.out, progress and statistics to io.err. Errors come back as a
// Status; RunCli prints them as ONE line "moesplit: <message>" on io.err and
// maps them to the exit status:
//   0  success (also --help);
//   2  bad input: unknown subcommand or flag, missing/bad file, unsupported
//      architecture or type, token id out of range, empty prompt, ... (every
//      code except the four below);
//   1  failures that are not the input's fault: kInternal, kDataLoss,
//      kUnknown, kResourceExhausted.
//
// Not thread-safe (process-wide output streams).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "services/cli/flags.h"

namespace moesplit::cli {

struct CommandIo {
  std::FILE* out = stdout;
  std::FILE* err = stderr;
};

using Args = std::vector<std::string>;

absl::Status RunInspect(const Args& args, const CommandIo& io);
absl::Status RunTokenize(const Args& args, const CommandIo& io);
absl::Status RunLogits(const Args& args, const CommandIo& io);
absl::Status RunGenerate(const Args& args, const CommandIo& io);
absl::Status RunMakeTestModel(const Args& args, const CommandIo& io);
absl::Status RunUp(const Args& args, const CommandIo& io);
absl::Status RunBench(const Args& args, const CommandIo& io);
absl::Status RunPlan(const Args& args, const CommandIo& io);
absl::Status RunHealth(const Args& args, const CommandIo& io);
absl::Status RunComplete(const Args& args, const CommandIo& io);
absl::Status RunChat(const Args& args, const CommandIo& io);
absl::Status RunRenderTemplate(const Args& args, const CommandIo& io);

// argv without the program name. Returns the process exit status.
int RunCli(const Args& args, const CommandIo& io);

// Exit status for a Status (see above).
int ExitCodeFor(const absl::Status& status);

// Parses `args` into `flags`. Returns false (after printing "usage: moesplit
// <synopsis>" and the flag list to io.out) when --help or -h is present.
absl::StatusOr<bool> ParseFlags(FlagParser& flags, const Args& args,
                                absl::string_view synopsis,
                                const CommandIo& io);

// Reads a whole file; NotFound / PermissionDenied naming it.
absl::StatusOr<std::string> ReadFile(const std::string& path);

// The text of --text or --text-file (exactly one must be set in `f`).
absl::StatusOr<std::string> ReadTextFlag(const FlagParser& f,
                                         const std::string& text,
                                         const std::string& text_file);

// `--threads`: 0 -> every CPU this process may use (AvailableCpuCount()).
int ThreadCount(int64_t requested);

}  // namespace moesplit::cli
