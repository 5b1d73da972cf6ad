// moesplit logits: n_tokens x n_vocab little-endian float32, every position
// evaluated in one batch from an empty cache (the oracle fixtures' format).
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>

#include "absl/base/config.h"
#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "services/cli/commands.h"
#include "services/cli/engine.h"

namespace moesplit::cli {

namespace {

absl::Status WriteFloats(const std::string& path,
                         const std::vector<float>& values) {
#if defined(ABSL_IS_BIG_ENDIAN)
#error "logits files are little-endian; add a byte swap for this host"
#endif
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(
      std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!f) {
    return absl::PermissionDeniedError(
        absl::StrCat(path, ": cannot create: ", std::strerror(errno)));
  }
  if (std::fwrite(values.data(), sizeof(float), values.size(), f.get()) !=
          values.size() ||
      std::fflush(f.get()) != 0) {
    f.reset();
    std::remove(path.c_str());
    return absl::ResourceExhaustedError(absl::StrCat(path, ": write failed"));
  }
  return absl::OkStatus();
}

// The ids of --tokens, or of --text-file tokenized (exactly one is set).
absl::StatusOr<std::vector<int32_t>> InputTokens(const FlagParser& f,
                                                 const std::string& tokens_flag,
                                                 const std::string& text_file,
                                                 bool special,
                                                 const Engine& engine) {
  std::vector<int32_t> tokens;
  if (f.WasSet("tokens")) {
    ASSIGN_OR_RETURN(tokens, ParseTokenList(tokens_flag));
  } else {
    ASSIGN_OR_RETURN(std::string text, ReadFile(text_file));
    ASSIGN_OR_RETURN(tokens, engine.tokenizer().Encode(text, special));
    if (tokens.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(text_file, ": no tokens (empty text)"));
    }
  }
  RETURN_IF_ERROR(engine.CheckTokens(tokens));
  return tokens;
}

}  // namespace

absl::Status RunLogits(const Args& args, const CommandIo& io) {
  std::string model_path, tokens_flag, text_file, out_path;
  bool special = false;
  int64_t threads = 0;
  FlagParser f;
  f.AddString("model|m", &model_path, "GGUF model (required)");
  f.AddString("tokens", &tokens_flag, "token ids, e.g. 1,2,3 (required, or --text-file)")
      .Meta("IDS");
  f.AddString("text-file", &text_file, "tokenize this file instead (required, or --tokens)")
      .Meta("PATH");
  f.AddBool("special", &special, "with --text-file: parse special tokens");
  f.AddString("out|o", &out_path, "output file (required)");
  f.AddInt("threads|t", &threads, "threads; 0: every CPU the process may use");
  ExpertsFlag experts;
  AddExpertsFlags(f, &experts);
  ASSIGN_OR_RETURN(bool go, ParseFlags(f, args,
                                       "logits --model M (--tokens 1,2,3 | "
                                       "--text-file F [--special]) --out FILE",
                                       io));
  if (!go) return absl::OkStatus();
  if (!f.positional().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("logits: unexpected argument '", f.positional()[0], "'"));
  }
  if (model_path.empty()) {
    return absl::InvalidArgumentError("logits: missing --model");
  }
  if (out_path.empty()) return absl::InvalidArgumentError("logits: missing --out");
  if (f.WasSet("tokens") == f.WasSet("text-file")) {
    return absl::InvalidArgumentError(
        "logits: give exactly one of --tokens and --text-file");
  }
  if (f.WasSet("tokens")) RETURN_IF_ERROR(ParseTokenList(tokens_flag).status());
  ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                   Engine::Open(model_path, ThreadCount(threads), experts));
  ASSIGN_OR_RETURN(std::vector<int32_t> tokens,
                   InputTokens(f, tokens_flag, text_file, special, *engine));
  ASSIGN_OR_RETURN(std::unique_ptr<model::SequenceState> cache,
                   model::SequenceState::Create(engine->model().hparams(),
                                          static_cast<int64_t>(tokens.size())));
  std::vector<float> logits;
  const auto start = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(engine->forward().Eval(tokens, cache.get(),
                                         model::LogitsMode::kAll, &logits));
  const double secs = std::chrono::duration<double>(
                          std::chrono::steady_clock::now() - start)
                          .count();
  if (logits.size() != tokens.size() * static_cast<size_t>(engine->n_vocab())) {
    return absl::InternalError(
        absl::StrCat("forward pass returned ", logits.size(), " logits for ",
                     tokens.size(), " tokens x ", engine->n_vocab()));
  }
  RETURN_IF_ERROR(WriteFloats(out_path, logits));
  std::fprintf(io.err, "logits: %zu tokens x %lld vocab -> %s (%.2f s)\n",
               tokens.size(), static_cast<long long>(engine->n_vocab()),
               out_path.c_str(), secs);
  return absl::OkStatus();
}

}  // namespace moesplit::cli
