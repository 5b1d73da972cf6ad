#include "common/tokenizer/vocab_spec.h"

#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "common/tokenizer/internal/pre_tokenizer.h"

namespace moesplit {
namespace {

constexpr char kModelKey[] = "tokenizer.ggml.model";
constexpr char kPreKey[] = "tokenizer.ggml.pre";
constexpr char kTokensKey[] = "tokenizer.ggml.tokens";
constexpr char kTypesKey[] = "tokenizer.ggml.token_type";
constexpr char kMergesKey[] = "tokenizer.ggml.merges";
constexpr char kAddBosKey[] = "tokenizer.ggml.add_bos_token";
constexpr char kAddEosKey[] = "tokenizer.ggml.add_eos_token";

struct IdKey {
  const char* key;
  int32_t VocabSpec::*field;
};
constexpr IdKey kIdKeys[] = {
    {"tokenizer.ggml.bos_token_id", &VocabSpec::bos},
    {"tokenizer.ggml.eos_token_id", &VocabSpec::eos},
    {"tokenizer.ggml.padding_token_id", &VocabSpec::pad},
    {"tokenizer.ggml.eot_token_id", &VocabSpec::eot},
    {"tokenizer.ggml.eom_token_id", &VocabSpec::eom},
};

absl::StatusOr<const std::vector<std::string>*> StringArray(
    const GgufFile& gguf, const char* key) {
  ASSIGN_OR_RETURN(const GgufValue* value, gguf.GetArray(key));
  if (value->element_type() != GgufValueType::kString) {
    return absl::InvalidArgumentError(
        absl::StrCat(gguf.path(), ": ", key, " is an array of ",
                     AbslView(GgufValueTypeName(value->element_type())),
                     ", expected string"));
  }
  return &value->strings();
}

absl::Status ReadTypes(const GgufFile& gguf, VocabSpec* spec) {
  if (gguf.Find(kTypesKey) == nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(const GgufValue* value, gguf.GetArray(kTypesKey));
  const size_t n = spec->tokens.size();
  const bool u64 = value->element_type() == GgufValueType::kUint64;
  const size_t have = u64 ? value->uints().size() : value->ints().size();
  if (value->element_type() == GgufValueType::kString ||
      value->element_type() == GgufValueType::kArray ||
      value->element_type() == GgufValueType::kFloat32 ||
      value->element_type() == GgufValueType::kFloat64 || have < n) {
    return absl::InvalidArgumentError(absl::StrCat(
        gguf.path(), ": ", kTypesKey, " must be an integer array of at least ",
        n, " values (one per token)"));
  }
  spec->types.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t t = u64 ? static_cast<int64_t>(value->uints()[i])
                          : value->ints()[i];
    spec->types[i] = static_cast<TokenType>(t);
  }
  return absl::OkStatus();
}

absl::Status ReadIds(const GgufFile& gguf, VocabSpec* spec) {
  for (const IdKey& id : kIdKeys) {
    const GgufValue* value = gguf.Find(id.key);
    if (value == nullptr) continue;
    absl::StatusOr<uint64_t> v = value->AsUint();
    if (!v.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          gguf.path(), ": ", id.key, ": ", v.status().message()));
    }
    // llama.cpp warns and ignores an out-of-range id.
    spec->*id.field =
        *v < spec->tokens.size() ? static_cast<int32_t>(*v) : -1;
  }
  return absl::OkStatus();
}

absl::Status ValidateMerge(const VocabSpec& spec,
                           const absl::flat_hash_set<absl::string_view>& vocab,
                           size_t i) {
  const std::string& line = spec.merges[i];
  const size_t space = line.size() < 2 ? std::string::npos : line.find(' ', 1);
  if (space == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("merge ", i, " '", line, "' is not 'left right'"));
  }
  const std::string_view left = std::string_view(line).substr(0, space);
  const std::string_view right = std::string_view(line).substr(space + 1);
  const std::string joined = absl::StrCat(AbslView(left), AbslView(right));
  for (std::string_view part : {left, right, std::string_view(joined)}) {
    if (!vocab.contains(AbslView(part))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "merge ", i, " '", line, "': '", AbslView(part), "' is not a token"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateVocabSpec(const VocabSpec& spec) {
  if (spec.model != "gpt2" && spec.model != "gemma4") {
    return absl::InvalidArgumentError(absl::StrCat(
        "unsupported tokenizer model '", spec.model, "' (gpt2 or gemma4)"));
  }
  if (tokenizer_internal::FindPreTokenizerSpec(spec.pre) == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown pre-tokenizer type '", spec.pre, "'; supported: ",
        tokenizer_internal::SupportedPreTokenizers()));
  }
  const size_t n = spec.tokens.size();
  if (n == 0 || n > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("bad vocabulary size ", n));
  }
  absl::flat_hash_set<absl::string_view> vocab;
  for (size_t i = 0; i < n; ++i) {
    if (spec.tokens[i].empty() || !vocab.insert(spec.tokens[i]).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token ", i, " '", spec.tokens[i], "' is empty or a duplicate"));
    }
  }
  if (!spec.types.empty() && spec.types.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        spec.types.size(), " token types for ", n, " tokens"));
  }
  for (size_t i = 0; i < spec.types.size(); ++i) {
    const auto t = static_cast<int32_t>(spec.types[i]);
    if (t < 0 || t > static_cast<int32_t>(TokenType::kByte)) {
      return absl::InvalidArgumentError(
          absl::StrCat("token ", i, " has unknown type ", t));
    }
  }
  for (size_t i = 0; i < spec.merges.size(); ++i) {
    RETURN_IF_ERROR(ValidateMerge(spec, vocab, i));
  }
  for (const IdKey& id : kIdKeys) {
    const int32_t v = spec.*id.field;
    if (v < -1 || v >= static_cast<int64_t>(n)) {
      return absl::InvalidArgumentError(absl::StrCat(
          id.key, " = ", v, " is out of range for vocabulary size ", n));
    }
  }
  if ((spec.add_bos && spec.bos < 0) || (spec.add_eos && spec.eos < 0)) {
    return absl::InvalidArgumentError(
        "add_bos_token/add_eos_token set without a bos/eos token id");
  }
  return absl::OkStatus();
}

absl::StatusOr<VocabSpec> ReadVocabSpec(const GgufFile& gguf) {
  VocabSpec spec;
  ASSIGN_OR_RETURN(spec.model, gguf.GetString(kModelKey));
  if (spec.model != "gpt2" && spec.model != "gemma4") {
    return absl::InvalidArgumentError(absl::StrCat(
        gguf.path(), ": unsupported tokenizer model (", kModelKey, ") '",
        spec.model, "'; byte-level BPE ('gpt2') and Gemma's ('gemma4') are implemented"));
  }
  ASSIGN_OR_RETURN(spec.pre, gguf.GetStringOr(kPreKey, ""));
  // llama.cpp: the gemma4 model has its own pre-tokenizer whatever the key says.
  if (spec.model == "gemma4") spec.pre = "gemma4";
  ASSIGN_OR_RETURN(const std::vector<std::string>* tokens,
                   StringArray(gguf, kTokensKey));
  spec.tokens = *tokens;
  RETURN_IF_ERROR(ReadTypes(gguf, &spec));
  ASSIGN_OR_RETURN(const std::vector<std::string>* merges,
                   StringArray(gguf, kMergesKey));
  spec.merges = *merges;
  RETURN_IF_ERROR(ReadIds(gguf, &spec));
  ASSIGN_OR_RETURN(spec.add_bos, gguf.GetBoolOr(kAddBosKey, false));
  // llama.cpp always adds BOS for gemma4 (its vocabularies said false).
  if (spec.model == "gemma4") spec.add_bos = true;
  ASSIGN_OR_RETURN(spec.add_eos, gguf.GetBoolOr(kAddEosKey, false));
  return spec;
}

absl::Status WriteVocabSpec(const VocabSpec& spec, GgufWriter* writer) {
  RETURN_IF_ERROR(ValidateVocabSpec(spec));
  writer->SetString(kModelKey, spec.model);
  writer->SetString(kPreKey, spec.pre);
  writer->Set(kTokensKey, GgufValue::StringArray(spec.tokens));
  std::vector<int64_t> types(spec.tokens.size(),
                             static_cast<int64_t>(TokenType::kNormal));
  for (size_t i = 0; i < spec.types.size(); ++i) {
    types[i] = static_cast<int64_t>(spec.types[i]);
  }
  writer->Set(kTypesKey,
              GgufValue::IntArray(GgufValueType::kInt32, std::move(types)));
  writer->Set(kMergesKey, GgufValue::StringArray(spec.merges));
  for (const IdKey& id : kIdKeys) {
    if (spec.*id.field >= 0) {
      writer->SetU32(id.key, static_cast<uint32_t>(spec.*id.field));
    }
  }
  writer->SetBool(kAddBosKey, spec.add_bos);  // Qwen models say false
  if (spec.add_eos) writer->SetBool(kAddEosKey, true);
  return absl::OkStatus();
}

}  // namespace moesplit
