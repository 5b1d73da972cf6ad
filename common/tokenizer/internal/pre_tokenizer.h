// Pre-tokenizers of byte-level BPE vocabularies (private to common/tokenizer).
//
// Before BPE merges run, text is cut into "words" by the regular expressions
// llama.cpp (src/llama-vocab.cpp, llm_tokenizer_bpe) assigns to the GGUF key
// `tokenizer.ggml.pre`. The table in pre_tokenizer.cc holds those expressions
// verbatim; supporting a new pre type means adding one table entry.
//
// Splitting follows llama.cpp's unicode_regex_split: each expression in turn
// refines the current pieces; within a piece, every match is a word and the
// text between matches (if any) is a word too. Expressions run on PCRE2 in
// UTF mode with Unicode properties (PCRE2_UTF | PCRE2_UCP), JIT-compiled when
// the library supports it.
//
// One deliberate rewrite: llama.cpp's `\s` is Unicode White_Space as Python's
// `regex` module defines it (its unicode_set_whitespace), whereas PCRE2's
// `\s` under UCP also matches U+180E. So `\s` / `\S` are replaced by the
// explicit class kLlamaWhitespace before compiling (see TranslateLlamaRegex).
//
// Thread-safe: a PreTokenizer is immutable after Create; Split may run
// concurrently from many threads.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace moesplit::tokenizer_internal {

// Members of llama.cpp's whitespace set, as a PCRE2 class body.
inline constexpr std::string_view kLlamaWhitespace =
    "\\t\\n\\x0B\\f\\r\\x20\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}"
    "\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

// One `tokenizer.ggml.pre` value.
struct PreTokenizerSpec {
  std::string name;                  // the tokenizer.ggml.pre string
  std::vector<std::string> regexes;  // llama.cpp's regex_exprs, in order
  // llama.cpp's ignore_merges: a word that is itself a token becomes that
  // token without running the merges (which could reach another split).
  bool ignore_merges = false;
};

// The table entry for `pre`, or nullptr.
const PreTokenizerSpec* FindPreTokenizerSpec(std::string_view pre);
// Names in the table, for error messages.
std::string SupportedPreTokenizers();

// Rewrites `\s` (outside or inside a class) and `\S` (outside a class) to
// explicit classes over kLlamaWhitespace. InvalidArgument for `\S` inside a
// class or a trailing backslash.
absl::StatusOr<std::string> TranslateLlamaRegex(std::string_view regex);

class PreTokenizer {
 public:
  // InvalidArgument naming `pre` (and the supported names) when unknown.
  static absl::StatusOr<std::unique_ptr<PreTokenizer>> Create(
      std::string_view pre);
  // InvalidArgument when an expression does not compile.
  static absl::StatusOr<std::unique_ptr<PreTokenizer>> FromSpec(
      const PreTokenizerSpec& spec);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Appends the words of `text` to `words` (views into `text`, in order,
  // covering it exactly). REQUIRES: `text` is valid UTF-8. Internal error only
  // if PCRE2 fails to match (resource limits).
  absl::Status Split(std::string_view text,
                     std::vector<std::string_view>* words) const;

  const PreTokenizerSpec& spec() const { return spec_; }
  bool jit() const { return jit_; }  // every expression JIT-compiled

 private:
  struct Compiled;
  PreTokenizer() = default;
  absl::Status SplitPiece(const Compiled& re, std::string_view piece,
                          std::vector<std::string_view>* out) const;

  PreTokenizerSpec spec_;
  std::vector<std::unique_ptr<Compiled>> compiled_;
  bool jit_ = false;
};

}  // namespace moesplit::tokenizer_internal
