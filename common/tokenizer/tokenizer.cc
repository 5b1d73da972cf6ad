#include "common/tokenizer/tokenizer.h"

#include <algorithm>
#include <initializer_list>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/types/span.h"
#include "common/base/status.h"
#include "common/tokenizer/internal/bpe.h"
#include "common/tokenizer/internal/byte_level.h"
#include "common/tokenizer/internal/pre_tokenizer.h"
#include "common/tokenizer/internal/utf8.h"

namespace moesplit {
namespace {

using tokenizer_internal::BpeModel;
using tokenizer_internal::PreTokenizer;

// llama.cpp's llama_token_attr bits.
enum Attr : uint32_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1u << 0,
  kAttrUnused = 1u << 1,
  kAttrNormal = 1u << 2,
  kAttrControl = 1u << 3,
  kAttrUserDefined = 1u << 4,
  kAttrByte = 1u << 5,
};

uint32_t AttrOf(TokenType type) {
  switch (type) {
    case TokenType::kNormal: return kAttrNormal;
    case TokenType::kUnknown: return kAttrUnknown;
    case TokenType::kControl: return kAttrControl;
    case TokenType::kUserDefined: return kAttrUserDefined;
    case TokenType::kUnused: return kAttrUnused;
    case TokenType::kByte: return kAttrByte;
    default: return kAttrUndefined;
  }
}

using TextList = absl::Span<const std::string_view>;

// Texts llama.cpp (llama_vocab::impl::load) recognises when the file names
// no id: end of turn, end of message, and the FIM tokens.
constexpr std::string_view kEotTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
    "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]",
    "<\xEF\xBD\x9C" "end\xE2\x96\x81" "of\xE2\x96\x81" "sentence\xEF\xBD\x9C>",
    "<end_of_utterance>"};
constexpr std::string_view kEomTexts[] = {"<|eom_id|>"};
constexpr std::string_view kFimPreTexts[] = {
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
    "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>", "<PRE>",
    "\xE2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>"};
constexpr std::string_view kFimSufTexts[] = {
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
    "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "hole\xEF\xBD\x9C>", "<SUF>",
    "\xE2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>"};
constexpr std::string_view kFimMidTexts[] = {
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>",
    "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>", "<MID>",
    "\xE2\x96\x81<MID>", "<|code_middle|>", "<|middle|>"};
constexpr std::string_view kFimPadTexts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>",
                                   "<PAD>", "[PAD]"};
constexpr std::string_view kFimRepTexts[] = {"<|fim_repo|>", "<|repo_name|>",
                                   "<fim-repo>", "<REPO>", "<reponame>"};
constexpr std::string_view kFimSepTexts[] = {"<|file_sep|>"};
// Every token with one of these texts ends generation (special_eog_ids).
constexpr std::string_view kEogTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>",
    "<|flush|>", "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>",
    "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
    "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xEF\xBD\x9C" "end\xE2\x96\x81" "of\xE2\x96\x81" "sentence\xEF\xBD\x9C>",
    "[e~["};

// U+2581 LOWER ONE EIGHTH BLOCK: a space in `gemma4` vocabularies.
constexpr char kEscapedSpace[] = "\xE2\x96\x81";

// Parses "<0xAB>" (a kByte token's text).
bool ParseByteToken(std::string_view text, uint8_t* byte) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') {
    return false;
  }
  int value = 0;
  for (char c : text.substr(3, 2)) {
    int digit = -1;
    if (c >= '0' && c <= '9') digit = c - '0';
    if (c >= 'A' && c <= 'F') digit = c - 'A' + 10;
    if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
    if (digit < 0) return false;
    value = value * 16 + digit;
  }
  *byte = static_cast<uint8_t>(value);
  return true;
}

}  // namespace

struct Tokenizer::Fragment {
  int32_t token;  // >= 0: a special token; -1: raw text
  size_t offset;
  size_t length;
};

// Words already encoded during one Encode call -> where their ids sit in the
// output. Long texts repeat words a lot; the cache lives only for one call,
// so Encode stays lock-free.
struct Tokenizer::WordCache {
  static constexpr size_t kMaxWordBytes = 64;
  absl::flat_hash_map<std::string, std::pair<size_t, size_t>> ranges;
};

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(
    const GgufFile& gguf) {
  ASSIGN_OR_RETURN(VocabSpec spec, ReadVocabSpec(gguf));
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = FromSpec(spec);
  if (!tok.ok()) {
    return absl::Status(tok.status().code(), absl::StrCat(gguf.path(), ": ",
                                                          tok.status().message()));
  }
  return tok;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromSpec(
    const VocabSpec& spec) {
  std::unique_ptr<Tokenizer> tok(new Tokenizer);
  RETURN_IF_ERROR(tok->Init(spec));
  return tok;
}

absl::Status Tokenizer::Init(const VocabSpec& spec) {
  if (spec.model != "gpt2" && spec.model != "gemma4") {
    return absl::InvalidArgumentError(absl::StrCat(
        "unsupported tokenizer model '", spec.model, "' (gpt2 or gemma4)"));
  }
  raw_utf8_ = spec.model == "gemma4";
  if (raw_utf8_ && spec.pre != "gemma4") {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokenizer model gemma4 with pre-tokenizer '", spec.pre, "' (it has its own: gemma4)"));
  }
  if (spec.pre.empty()) {
    return absl::InvalidArgumentError(
        "tokenizer.ggml.pre is missing (llama.cpp would fall back to its "
        "'default' pre-tokenizer, which is not supported)");
  }
  ASSIGN_OR_RETURN(pre_, PreTokenizer::Create(spec.pre));
  const size_t n = spec.tokens.size();
  if (n == 0 || n > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("bad vocabulary size ", n));
  }
  if (!spec.types.empty() && spec.types.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat(spec.types.size(), " token types for ", n, " tokens"));
  }
  tokens_ = spec.tokens;
  for (size_t i = 0; i < n; ++i) {  // llama.cpp renames empty tokens
    if (tokens_[i].empty()) tokens_[i] = absl::StrCat("[EMPTY_", i, "]");
  }
  types_ = spec.types.empty() ? std::vector<TokenType>(n, TokenType::kNormal)
                              : spec.types;
  ASSIGN_OR_RETURN(BpeModel bpe, BpeModel::Build(tokens_, spec.merges));
  bpe_ = std::make_unique<BpeModel>(std::move(bpe));
  for (int32_t id : {spec.bos, spec.eos, spec.pad, spec.eot, spec.eom}) {
    if (id < -1 || id >= static_cast<int64_t>(n)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "special token id ", id, " out of range for vocabulary size ", n));
    }
  }
  bos_ = spec.bos, eos_ = spec.eos, pad_ = spec.pad;
  eot_ = spec.eot, eom_ = spec.eom;
  add_bos_ = spec.add_bos, add_eos_ = spec.add_eos;
  if ((add_bos_ && bos_ < 0) || (add_eos_ && eos_ < 0)) {
    return absl::InvalidArgumentError(
        "tokenizer.ggml.add_bos_token/add_eos_token is true, but the "
        "bos/eos token id is not set");
  }
  InitAttributes();
  pieces_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    if ((attrs_[i] & kAttrByte) != 0) {
      uint8_t byte = 0;
      if (!ParseByteToken(tokens_[i], &byte)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "byte token ", i, " '", tokens_[i], "' is not of the form <0xAB>"));
      }
    }
    pieces_[i] = RenderPiece(static_cast<int32_t>(i));
  }
  return absl::OkStatus();
}

void Tokenizer::InitAttributes() {
  const size_t n = tokens_.size();
  attrs_.resize(n);
  for (size_t i = 0; i < n; ++i) attrs_[i] = AttrOf(types_[i]);
  const auto make_control = [&](int32_t id) {
    if (id >= 0) attrs_[id] |= kAttrControl;
  };
  // The first listed text present in the vocabulary, or -1.
  const auto first_of = [&](TextList texts) {
    for (std::string_view text : texts) {
      const int32_t id = bpe_->Find(text);
      if (id >= 0) return id;
    }
    return int32_t{-1};
  };
  if (eot_ < 0) eot_ = first_of(kEotTexts);
  if (eom_ < 0) eom_ = first_of(kEomTexts);
  make_control(eot_);
  make_control(eom_);
  for (TextList fim : {TextList(kFimPreTexts), TextList(kFimSufTexts),
                       TextList(kFimMidTexts)}) {
    make_control(first_of(fim));
  }
  is_eog_.assign(n, 0);
  const auto add_eog = [&](int32_t id) {
    if (id < 0) return;
    is_eog_[id] = 1;
    make_control(id);
  };
  for (TextList fim : {TextList(kFimPadTexts), TextList(kFimRepTexts),
                       TextList(kFimSepTexts)}) {
    add_eog(first_of(fim));
  }
  for (std::string_view text : kEogTexts) add_eog(bpe_->Find(text));
  if (eos_ >= 0) is_eog_[eos_] = 1;
  if (eot_ >= 0) is_eog_[eot_] = 1;
  if (eom_ >= 0) is_eog_[eom_] = 1;
  // gpt-oss (o200k_harmony), as llama.cpp special-cases it: the harmony
  // framing tokens always render (user-defined), and where <|return|> and
  // <|call|> end generation, <|end|> only closes a message (an analysis
  // message is followed by the final one): not end of generation, rendered.
  for (std::string_view text : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}) {
    if (const int32_t id = bpe_->Find(text); id >= 0) attrs_[id] = kAttrUserDefined;
  }
  const auto eog_text = [&](std::string_view text) {
    const int32_t id = bpe_->Find(text);
    return id >= 0 && is_eog_[id] != 0;
  };
  const int32_t end_id = bpe_->Find("<|end|>");
  if (end_id >= 0 && is_eog_[end_id] != 0 &&
      ((eog_text("<|return|>") && (eog_text("<|call|>") || eog_text("<|calls|>"))) ||
       ((eog_text("<|call|>") || eog_text("<|calls|>")) && eog_text("<|flush|>")))) {
    is_eog_[end_id] = 0;
    attrs_[end_id] = kAttrUserDefined;
  }
  for (size_t i = 0; i < n; ++i) {
    if (is_eog_[i]) eog_ids_.push_back(static_cast<int32_t>(i));
    if (attrs_[i] & (kAttrControl | kAttrUserDefined | kAttrUnknown)) {
      special_ids_.push_back(static_cast<int32_t>(i));
    }
  }
  std::stable_sort(special_ids_.begin(), special_ids_.end(),
                   [&](int32_t a, int32_t b) {
                     return tokens_[a].size() > tokens_[b].size();
                   });
}

const std::string& Tokenizer::pre_type() const { return pre_->spec().name; }

bool Tokenizer::IsEndOfGeneration(int32_t id) const {
  return id >= 0 && id < n_vocab() && is_eog_[id] != 0;
}

bool Tokenizer::IsControl(int32_t id) const {
  return id >= 0 && id < n_vocab() &&
         (attrs_[id] & (kAttrControl | kAttrUnknown)) != 0;
}

int32_t Tokenizer::FindToken(std::string_view text) const {
  return bpe_->Find(text);
}

std::string Tokenizer::RenderPiece(int32_t id) const {
  const uint32_t attr = attrs_[id];
  if (attr & (kAttrUnknown | kAttrControl | kAttrUserDefined)) {
    return tokens_[id];
  }
  if (attr & kAttrNormal) {
    return raw_utf8_ ? absl::StrReplaceAll(tokens_[id], {{kEscapedSpace, " "}})
                     : tokenizer_internal::ByteDecode(tokens_[id]);
  }
  if (attr & kAttrByte) {
    uint8_t byte = 0;
    ParseByteToken(tokens_[id], &byte);  // validated in Init
    return std::string(1, static_cast<char>(byte));
  }
  return "";  // unused / undefined
}

std::vector<Tokenizer::Fragment> Tokenizer::Partition(
    std::string_view text, bool parse_special) const {
  std::vector<Fragment> fragments;
  if (!text.empty()) fragments.push_back({-1, 0, text.size()});
  std::vector<Fragment> next;
  for (int32_t id : special_ids_) {
    if (!parse_special && (attrs_[id] & (kAttrControl | kAttrUnknown))) {
      continue;  // only user-defined tokens are cut out of plain text
    }
    const std::string& special = tokens_[id];
    next.clear();
    for (const Fragment& f : fragments) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      const std::string_view region = text.substr(0, f.offset + f.length);
      size_t pos = f.offset;
      for (size_t m = region.find(special, pos); m != std::string_view::npos;
           m = region.find(special, pos)) {
        if (m > pos) next.push_back({-1, pos, m - pos});
        next.push_back({id, 0, 0});
        pos = m + special.size();
      }
      if (pos < region.size()) next.push_back({-1, pos, region.size() - pos});
    }
    fragments.swap(next);
  }
  return fragments;
}

absl::Status Tokenizer::EncodeText(std::string_view text, WordCache* cache,
                                   size_t limit,
                                   std::vector<int32_t>* out) const {
  std::string sanitized;
  if (!tokenizer_internal::IsValidUtf8(text)) {
    sanitized = tokenizer_internal::SanitizeUtf8(text);
    text = sanitized;
  }
  std::string escaped;
  if (raw_utf8_) {
    escaped = absl::StrReplaceAll(AbslView(text), {{" ", kEscapedSpace}});
    text = escaped;
  }
  std::vector<std::string_view> words;
  RETURN_IF_ERROR(pre_->Split(text, &words));
  std::string encoded;
  for (std::string_view word : words) {
    if (out->size() > limit) break;
    const bool cacheable = word.size() <= WordCache::kMaxWordBytes;
    if (cacheable) {
      auto it = cache->ranges.find(AbslView(word));
      if (it != cache->ranges.end()) {
        const auto [begin, size] = it->second;
        for (size_t i = 0; i < size; ++i) out->push_back((*out)[begin + i]);
        continue;
      }
    }
    const size_t begin = out->size();
    if (raw_utf8_) {
      // llama.cpp: a run of newlines that is a token is that token.
      const int32_t whole = word.find_first_not_of('\n') == std::string_view::npos ? bpe_->Find(word) : -1;
      if (whole >= 0) {
        out->push_back(whole);
      } else {
        bpe_->EncodeWord(word, out, /*hex_bytes=*/true);
      }
    } else {
      encoded.clear();
      tokenizer_internal::ByteEncode(word, &encoded);
      // ignore_merges: a word that is a token is that token.
      const int32_t whole = pre_->spec().ignore_merges ? bpe_->Find(encoded) : -1;
      if (whole >= 0) {
        out->push_back(whole);
      } else {
        bpe_->EncodeWord(encoded, out);
      }
    }
    if (cacheable) {
      cache->ranges.try_emplace(std::string(word), begin, out->size() - begin);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(
    std::string_view text, bool parse_special, bool add_special,
    size_t limit) const {
  std::vector<int32_t> out;
  out.reserve(std::min(text.size(), limit) / 3 + 2);
  if (add_special && add_bos_) out.push_back(bos_);
  WordCache cache;
  for (const Fragment& f : Partition(text, parse_special)) {
    if (out.size() > limit) return out;
    if (f.token >= 0) {
      out.push_back(f.token);
    } else {
      RETURN_IF_ERROR(
          EncodeText(text.substr(f.offset, f.length), &cache, limit, &out));
    }
  }
  if (out.size() > limit) return out;
  if (add_special && add_eos_) out.push_back(eos_);
  return out;
}

absl::StatusOr<std::string> Tokenizer::Decode(absl::Span<const int32_t> ids,
                                              bool render_special) const {
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || id >= n_vocab()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token id ", id, " is out of range for vocabulary size ", n_vocab()));
    }
    if (!render_special && IsControl(id)) continue;
    out.append(pieces_[id]);
  }
  return out;
}

StreamDecoder::StreamDecoder(const Tokenizer* tokenizer, bool render_special)
    : tokenizer_(tokenizer), render_special_(render_special) {}

absl::StatusOr<std::string> StreamDecoder::Push(int32_t id) {
  ASSIGN_OR_RETURN(std::string piece,
                   tokenizer_->Decode(absl::MakeConstSpan(&id, 1),
                                      render_special_));
  pending_.append(piece);
  const size_t hold = tokenizer_internal::IncompleteUtf8Suffix(pending_);
  const size_t ready = pending_.size() - hold;
  std::string out = tokenizer_internal::ReplaceInvalidUtf8(
      std::string_view(pending_).substr(0, ready));
  pending_.erase(0, ready);
  return out;
}

std::string StreamDecoder::Flush() {
  std::string out = tokenizer_internal::ReplaceInvalidUtf8(pending_);
  pending_.clear();
  return out;
}

}  // namespace moesplit
