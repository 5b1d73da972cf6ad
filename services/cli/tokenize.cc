// moesplit tokenize: token ids of a text, using only the file's tokenizer
// keys (so vocabulary-only GGUFs work too).
#include "absl/strings/str_join.h"
#include "common/base/status.h"
#include "common/gguf/gguf.h"
#include "common/tokenizer/tokenizer.h"
#include "services/cli/commands.h"

namespace moesplit::cli {

absl::Status RunTokenize(const Args& args, const CommandIo& io) {
  std::string model_path, text, text_file;
  bool special = false;
  FlagParser f;
  f.AddString("model|m", &model_path, "GGUF model or vocabulary (required)");
  f.AddString("text", &text, "text to tokenize (required, or --text-file)");
  f.AddString("text-file", &text_file, "file whose bytes are tokenized (required, or --text)").Meta("PATH");
  f.AddBool("special", &special,
            "parse special tokens written in the text (<|im_start|>, ...)");
  ASSIGN_OR_RETURN(bool go, ParseFlags(f, args,
                                       "tokenize --model M (--text S | "
                                       "--text-file F) [--special]",
                                       io));
  if (!go) return absl::OkStatus();
  if (!f.positional().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenize: unexpected argument '", f.positional()[0], "'"));
  }
  if (model_path.empty()) {
    return absl::InvalidArgumentError("tokenize: missing --model");
  }
  ASSIGN_OR_RETURN(std::string input, ReadTextFlag(f, text, text_file));
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(model_path));
  ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, Tokenizer::FromGguf(*file));
  ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                   tok->Encode(input, /*parse_special=*/special));
  std::fprintf(io.out, "%s\n", absl::StrJoin(ids, " ").c_str());
  return absl::OkStatus();
}

}  // namespace moesplit::cli
