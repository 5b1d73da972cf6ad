#include "common/tokenizer/internal/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status.h"
#include "common/tokenizer/internal/utf8.h"

namespace moesplit::tokenizer_internal {
namespace {

// llama.cpp src/llama-vocab.cpp, llm_tokenizer_bpe: LLAMA_VOCAB_PRE_TYPE_QWEN2
// (tokenizer.ggml.pre "qwen2", "deepseek-r1-qwen", ...). The original
// tokenizer.json form is
// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
constexpr char kQwen2Regex[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|"
    "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// LLAMA_VOCAB_PRE_TYPE_QWEN35 (tokenizer.ggml.pre "qwen35"): as qwen2, but
// combining marks (\p{M}) join letters and leave the punctuation class.
constexpr char kQwen35Regex[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}|"
    " ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// LLAMA_VOCAB_PRE_TYPE_GPT4O (tokenizer.ggml.pre "gpt-4o": gpt-oss's o200k
// pre-tokenizer). The original tokenizer.json form is
// [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
// [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
// \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
// llama.cpp runs the rewrite below, in which "upper" is a letter other than
// a-z and "lower" a letter other than A-Z (so a non-ASCII letter is both, and
// combining marks are not letters): that is what its tokenizer does, so that
// is what we match.
constexpr char kGpt4oRegex[] =
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+"
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|"
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*"
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// LLAMA_VOCAB_PRE_TYPE_DEEPSEEK3_LLM (tokenizer.ggml.pre "deepseek-v3"):
// numbers in groups of up to three, then runs of CJK ideographs and kana, then
// the word expression.
constexpr char kDeepSeek3Digits[] = "\\p{N}{1,3}";
constexpr char kDeepSeek3Cjk[] = "[一-龥぀-ゟ゠-ヿ]+";
constexpr char kDeepSeek3Words[] =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|"
    "[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|"
    "\\s*[\r\n]+|\\s+(?!\\S)|\\s+";

// LLAMA_VOCAB_PRE_TYPE_CHATGLM4 (tokenizer.ggml.pre "glm4", "chatglm-bpe"):
// the qwen2 expression with numbers in groups of up to three. llama.cpp also
// drops the BOS token for it (special_bos_id = NULL): the GLM files have
// none to add.
constexpr char kGlm4Regex[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|"
    "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// To support another pre type: add {name, llama.cpp's regex_exprs for it}
// here, plus fixtures that pin its behaviour down. (Types for which llama.cpp
// sets clean_spaces or add_bos also need those implemented; none of the
// entries below does: llama.cpp's add_bos for llama3 is the default the
// file's tokenizer.ggml.add_bos_token overrides.)
const std::vector<PreTokenizerSpec>& Table() {
  static const auto* const table = new std::vector<PreTokenizerSpec>{
      {"qwen2", {kQwen2Regex}},
      {"deepseek-r1-qwen", {kQwen2Regex}},
      {"qwen35", {kQwen35Regex}},
      {"gpt-4o", {kGpt4oRegex}},
      // LLAMA_VOCAB_PRE_TYPE_MINIMAX_M2: GPT-4o's split.
      {"minimax-m2", {kGpt4oRegex}},
      {"deepseek-v3", {kDeepSeek3Digits, kDeepSeek3Cjk, kDeepSeek3Words}},
      {"glm4", {kGlm4Regex}},
      {"chatglm-bpe", {kGlm4Regex}},
      // LLAMA_VOCAB_PRE_TYPE_LLAMA3 ("pixtral" in Nemotron-3's files; also
      // "llama3", "llama-bpe", ...): the glm4 expression, and ignore_merges.
      {"pixtral", {kGlm4Regex}, /*ignore_merges=*/true},
      // The `gemma4` tokenizer model (raw UTF-8 with spaces as U+2581): no
      // split beyond runs of newlines.
      {"gemma4", {"[^\\n]+|[\\n]+"}},
  };
  return *table;
}

std::string Pcre2Error(int code) {
  PCRE2_UCHAR buf[256];
  const int n = pcre2_get_error_message(code, buf, sizeof(buf));
  if (n < 0) return absl::StrCat("PCRE2 error ", code);
  return std::string(reinterpret_cast<const char*>(buf), n);
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* md) const { pcre2_match_data_free(md); }
};

}  // namespace

struct PreTokenizer::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

const PreTokenizerSpec* FindPreTokenizerSpec(std::string_view pre) {
  for (const PreTokenizerSpec& spec : Table()) {
    if (spec.name == pre) return &spec;
  }
  return nullptr;
}

std::string SupportedPreTokenizers() {
  std::vector<std::string> names;
  for (const PreTokenizerSpec& spec : Table()) names.push_back(spec.name);
  return absl::StrJoin(names, ", ");
}

absl::StatusOr<std::string> TranslateLlamaRegex(std::string_view re) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < re.size(); ++i) {
    const char c = re[i];
    if (c == '\\') {
      if (i + 1 >= re.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("regex ends in a backslash: ", AbslView(re)));
      }
      const char e = re[++i];
      if (e == 's') {
        absl::StrAppend(&out, in_class ? "" : "[", AbslView(kLlamaWhitespace),
                        in_class ? "" : "]");
      } else if (e == 'S') {
        if (in_class) {
          return absl::InvalidArgumentError(
              absl::StrCat("\\S inside a character class is not supported: ",
                           AbslView(re)));
        }
        absl::StrAppend(&out, "[^", AbslView(kLlamaWhitespace), "]");
      } else {
        out.push_back(c);
        out.push_back(e);
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out.push_back(c);
      if (i + 1 < re.size() && re[i + 1] == '^') out.push_back(re[++i]);
      if (i + 1 < re.size() && re[i + 1] == ']') out.push_back(re[++i]);
      continue;
    }
    if (in_class && c == '[' && i + 1 < re.size() && re[i + 1] == ':') {
      return absl::InvalidArgumentError(
          absl::StrCat("POSIX classes are not supported: ", AbslView(re)));
    }
    if (in_class && c == ']') in_class = false;
    out.push_back(c);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::Create(
    std::string_view pre) {
  const PreTokenizerSpec* spec = FindPreTokenizerSpec(pre);
  if (spec == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown pre-tokenizer type (tokenizer.ggml.pre) '",
                     AbslView(pre),
                     "'; supported: ", SupportedPreTokenizers()));
  }
  return FromSpec(*spec);
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::FromSpec(
    const PreTokenizerSpec& spec) {
  std::unique_ptr<PreTokenizer> pt(new PreTokenizer);
  pt->spec_ = spec;
  pt->jit_ = !spec.regexes.empty();
  for (const std::string& regex : spec.regexes) {
    ASSIGN_OR_RETURN(std::string pattern, TranslateLlamaRegex(regex));
    int error = 0;
    PCRE2_SIZE offset = 0;
    auto compiled = std::make_unique<Compiled>();
    compiled->code = pcre2_compile(
        reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
        PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
    if (compiled->code == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pre-tokenizer '", spec.name, "': regex does not compile at offset ",
          offset, ": ", Pcre2Error(error), ": ", pattern));
    }
    if (pcre2_jit_compile(compiled->code, PCRE2_JIT_COMPLETE) != 0) {
      pt->jit_ = false;  // the interpreter is used instead
    }
    pt->compiled_.push_back(std::move(compiled));
  }
  return pt;
}

PreTokenizer::~PreTokenizer() = default;

absl::Status PreTokenizer::SplitPiece(
    const Compiled& re, std::string_view piece,
    std::vector<std::string_view>* out) const {
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> md(
      pcre2_match_data_create_from_pattern(re.code, nullptr));
  if (md == nullptr) return absl::ResourceExhaustedError("pcre2 match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
  size_t pos = 0;       // where the next search starts
  size_t emitted = 0;   // end of the last word emitted
  while (pos < piece.size()) {
    // The text was validated once up front; re-checking it on every call
    // would make splitting quadratic.
    int rc = pcre2_match(re.code, subject, piece.size(), pos,
                         PCRE2_NO_UTF_CHECK, md.get(), nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      rc = pcre2_match(re.code, subject, piece.size(), pos,
                       PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md.get(), nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      return absl::InternalError(absl::StrCat("pre-tokenizer '", spec_.name,
                                              "': ", Pcre2Error(rc)));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const size_t begin = ov[0], end = ov[1];
    if (end == begin) {  // an empty match: step over one character
      uint32_t cp = 0;
      size_t len = 1;
      DecodeUtf8(piece, begin, &cp, &len);
      pos = begin + len;
      continue;
    }
    if (begin > emitted) out->push_back(piece.substr(emitted, begin - emitted));
    out->push_back(piece.substr(begin, end - begin));
    emitted = pos = end;
  }
  if (emitted < piece.size()) out->push_back(piece.substr(emitted));
  return absl::OkStatus();
}

absl::Status PreTokenizer::Split(std::string_view text,
                                 std::vector<std::string_view>* words) const {
  if (text.empty()) return absl::OkStatus();
  std::vector<std::string_view> pieces = {text};
  std::vector<std::string_view> next;
  for (const auto& re : compiled_) {
    next.clear();
    for (std::string_view piece : pieces) {
      RETURN_IF_ERROR(SplitPiece(*re, piece, &next));
    }
    pieces.swap(next);
  }
  words->insert(words->end(), pieces.begin(), pieces.end());
  return absl::OkStatus();
}

}  // namespace moesplit::tokenizer_internal
