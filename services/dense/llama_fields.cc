#include "services/dense/llama_fields.h"

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "common/sampling/gbnf.h"
#include "common/sampling/token_constraint.h"
#include "services/dense/openai_api.h"

namespace moesplit::dense {
namespace {

using Json = nlohmann::ordered_json;

absl::Status Bad(const char* param, const std::string& message) {
  absl::Status s = absl::InvalidArgumentError(message);
  s.SetPayload(kParamPayload, absl::Cord(param));
  return s;
}

// The field's value, or null when absent (null counts as absent, as in
// llama-server).
const Json* Field(const Json& body, const char* key) {
  auto it = body.find(key);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

absl::Status Float(const Json& body, const char* key, float* out) {
  const Json* v = Field(body, key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_number()) return Bad(key, absl::StrCat(key, " must be a number"));
  const double d = v->get<double>();
  if (std::fabs(d) > FLT_MAX) return Bad(key, absl::StrCat(key, " is out of range, got ", d));
  *out = static_cast<float>(d);
  return absl::OkStatus();
}

// A bias: a number (as a float) or false (-inf).
absl::Status Bias(const Json& v, const std::string& where, float* out) {
  if (v.is_boolean() && !v.get<bool>()) {
    *out = -INFINITY;
    return absl::OkStatus();
  }
  if (!v.is_number() || std::fabs(v.get<double>()) > FLT_MAX) {
    return Bad("logit_bias", absl::StrCat("logit_bias: the bias of ", where,
                                          " must be a number or false, got ", v.dump()));
  }
  *out = v.get<float>();
  return absl::OkStatus();
}

// A token given as an id (integer, or an object key that is one) or as a
// string, whose tokens all get the bias.
absl::Status AddBias(const Tokenizer& tok, const Json& token, float bias,
                     std::vector<LogitBias>* out) {
  const int32_t n_vocab = tok.n_vocab();
  auto id = [&](int64_t t) -> absl::Status {
    if (t < 0 || t >= n_vocab) {
      return Bad("logit_bias", absl::StrCat("logit_bias: token id ", t,
                                            " is outside the vocabulary [0, ", n_vocab, ")"));
    }
    out->push_back({static_cast<int32_t>(t), bias});
    return absl::OkStatus();
  };
  if (token.is_number_integer()) return id(token.get<int64_t>());
  if (!token.is_string()) {
    return Bad("logit_bias", absl::StrCat("logit_bias: a token must be an id or a string, got ",
                                          token.dump()));
  }
  const std::string& text = token.get_ref<const std::string&>();
  ASSIGN_OR_RETURN(std::vector<int32_t> ids, tok.Encode(text, /*parse_special=*/false,
                                                        /*add_special=*/false));
  if (ids.empty()) {
    return Bad("logit_bias", absl::StrCat("logit_bias: \"", text, "\" has no tokens"));
  }
  for (int32_t t : ids) RETURN_IF_ERROR(id(t));
  return absl::OkStatus();
}

absl::Status ParseLogitBias(const Json& v, const Tokenizer& tok, std::vector<LogitBias>* out) {
  if (v.is_object()) {
    for (auto it = v.begin(); it != v.end(); ++it) {
      float bias = 0;
      RETURN_IF_ERROR(Bias(it.value(), absl::StrCat("\"", it.key(), "\""), &bias));
      const std::string& key = it.key();
      char* end = nullptr;
      const long long t = std::strtoll(key.c_str(), &end, 10);
      const bool is_id = !key.empty() && *end == '\0' && !absl::ascii_isspace(key[0]);
      RETURN_IF_ERROR(AddBias(tok, is_id ? Json(t) : Json(key), bias, out));
    }
    return absl::OkStatus();
  }
  if (!v.is_array()) {
    return Bad("logit_bias",
               "logit_bias must be an object {\"token id\": bias} or an array of [token, bias] "
               "pairs");
  }
  for (size_t i = 0; i < v.size(); ++i) {
    const Json& e = v[i];
    if (!e.is_array() || e.size() != 2) {
      return Bad("logit_bias", absl::StrCat("logit_bias[", i,
                                            "] must be a [token, bias] pair, got ", e.dump()));
    }
    float bias = 0;
    RETURN_IF_ERROR(Bias(e[1], absl::StrCat("logit_bias[", i, "]"), &bias));
    RETURN_IF_ERROR(AddBias(tok, e[0], bias, out));
  }
  return absl::OkStatus();
}

// llama.cpp's default sampler chain, in order.
enum class Stage { kPenalties, kDry, kTopNSigma, kTopK, kTypicalP, kTopP, kMinP, kXtc, kTemperature };
struct StageName {
  const char* name;  // llama.cpp's canonical name
  char letter;
  Stage stage;
};
constexpr StageName kStages[] = {
    {"penalties", 'e', Stage::kPenalties}, {"dry", 'd', Stage::kDry},
    {"top_n_sigma", 's', Stage::kTopNSigma}, {"top_k", 'k', Stage::kTopK},
    {"typ_p", 'y', Stage::kTypicalP},      {"top_p", 'p', Stage::kTopP},
    {"min_p", 'm', Stage::kMinP},          {"xtc", 'x', Stage::kXtc},
    {"temperature", 't', Stage::kTemperature}};

// A sampler's name as llama.cpp reads it: canonical, kebab-case, without
// the underscore, or one of its aliases (case-insensitive). -1: unknown.
int StageOf(std::string name) {
  name = absl::AsciiStrToLower(name);
  if (name == "nucleus") name = "top_p";
  if (name == "temp") name = "temperature";
  if (name == "typ" || name == "typical") name = "typ_p";
  for (int i = 0; i < static_cast<int>(std::size(kStages)); ++i) {
    std::string canonical = kStages[i].name, kebab = canonical, bare;
    for (char& c : kebab) c = c == '_' ? '-' : c;
    for (char c : canonical) {
      if (c != '_') bare.push_back(c);
    }
    if (name == canonical || name == kebab || name == bare) return i;
  }
  return -1;
}

// `samplers`: the stages left out are switched off.
absl::Status ApplySamplers(const Json& v, SamplingParams* s) {
  std::vector<int> order;
  std::vector<std::string> names;
  if (v.is_string()) {
    for (char c : v.get<std::string>()) {
      int stage = -1;
      for (int i = 0; i < static_cast<int>(std::size(kStages)); ++i) {
        if (kStages[i].letter == c) stage = i;
      }
      order.push_back(stage);
      names.push_back(std::string(1, c));
    }
  } else if (v.is_array()) {
    for (const Json& n : v) {
      if (!n.is_string()) return Bad("samplers", "samplers must be an array of sampler names or a string of letters");
      order.push_back(StageOf(n.get<std::string>()));
      names.push_back(n.get<std::string>());
    }
  } else {
    return Bad("samplers", "samplers must be an array of sampler names or a string of letters");
  }
  std::vector<bool> on(std::size(kStages), false);
  int prev = -1;
  for (size_t i = 0; i < order.size(); ++i) {
    if (order[i] < 0) {
      return Bad("samplers", absl::StrCat("samplers: '", names[i],
                                          "' is not a sampler this server runs (penalties, dry, "
                                          "top_n_sigma, top_k, typ_p, top_p, min_p, xtc, "
                                          "temperature)"));
    }
    if (order[i] <= prev) {
      return Bad("samplers",
                 "samplers: only llama.cpp's default order is supported (penalties, dry, "
                 "top_n_sigma, top_k, typ_p, top_p, min_p, xtc, temperature), each at most "
                 "once; leaving samplers out switches them off");
    }
    prev = order[i];
    on[order[i]] = true;
  }
  if (!on[static_cast<int>(Stage::kTemperature)]) {
    return Bad("samplers", "samplers must include temperature");
  }
  for (size_t i = 0; i < on.size(); ++i) {
    if (on[i]) continue;
    switch (kStages[i].stage) {
      case Stage::kPenalties:
        s->repetition_penalty = 1.0f;
        s->presence_penalty = 0.0f;
        s->frequency_penalty = 0.0f;
        break;
      case Stage::kDry: s->dry.multiplier = 0.0f; break;
      case Stage::kTopNSigma: s->top_n_sigma = -1.0f; break;
      case Stage::kTopK: s->top_k = 0; break;
      case Stage::kTypicalP: s->typical_p = 1.0f; break;
      case Stage::kTopP: s->top_p = 1.0f; break;
      case Stage::kMinP: s->min_p = 0.0f; break;
      case Stage::kXtc: s->xtc_probability = 0.0f; break;
      case Stage::kTemperature: break;
    }
  }
  return absl::OkStatus();
}

// A field refused unless it holds its disabled value.
enum class Off { kZero, kFalse, kNegative, kEmpty };
struct Refused {
  const char* field;
  Off off;
  const char* why;
};
constexpr Refused kRefused[] = {
    {"mirostat", Off::kZero, "Mirostat sampling is not supported (0 turns it off)"},
    {"dynatemp_range", Off::kZero, "dynamic temperature is not supported (0 turns it off)"},
    {"adaptive_target", Off::kNegative,
     "adaptive-p sampling is not supported (a negative value turns it off)"},
    {"min_keep", Off::kZero, "min_keep is not supported (0: the filters keep at least one token)"},
    {"n_indent", Off::kZero, "n_indent is not supported (0 turns it off)"},
    {"t_max_predict_ms", Off::kZero, "t_max_predict_ms is not supported (0 turns it off)"},
    {"n_cache_reuse", Off::kZero,
     "n_cache_reuse (KV shifting) is not supported: the prefix cache reuses whole blocks (0 "
     "turns it off)"},
    {"post_sampling_probs", Off::kFalse,
     "post_sampling_probs is not supported: probabilities are the model's, before sampling"},
    {"lora", Off::kEmpty, "LoRA adapters are not supported"},
    {"grammar_lazy", Off::kFalse, "lazy grammars are not supported"},
    {"grammar_triggers", Off::kEmpty, "grammar triggers (lazy grammars) are not supported"},
    {"echo", Off::kFalse, "echo is not supported"},
    {"timings_per_token", Off::kFalse,
     "timings_per_token is not supported (timings come with the last chunk)"},
    {"reasoning_budget_tokens", Off::kNegative,
     "a reasoning budget is not supported (-1 turns it off)"},
    {"response_fields", Off::kEmpty,
     "response_fields belongs to llama-server's native /completion, which is not served"},
};

absl::Status CheckRefused(const Json& body) {
  for (const Refused& r : kRefused) {
    const Json* v = Field(body, r.field);
    if (v == nullptr) continue;
    bool off = false;
    switch (r.off) {
      case Off::kZero: off = v->is_number() && v->get<double>() == 0; break;
      case Off::kFalse: off = v->is_boolean() && !v->get<bool>(); break;
      case Off::kNegative: off = v->is_number() && v->get<double>() < 0; break;
      case Off::kEmpty: off = (v->is_array() || v->is_object() || v->is_string()) && v->empty(); break;
    }
    if (!off) return Bad(r.field, absl::StrCat(r.field, ": ", r.why, ", got ", v->dump()));
  }
  // The parameters of those samplers: well-typed (they act only through them).
  for (const char* key : {"mirostat_tau", "mirostat_eta", "dynatemp_exponent", "adaptive_decay"}) {
    const Json* v = Field(body, key);
    if (v != nullptr && !v->is_number()) return Bad(key, absl::StrCat(key, " must be a number"));
  }
  return absl::OkStatus();
}

// An integer field >= -1 (llama-server's -1 / 0 conventions).
absl::Status Int(const Json& body, const char* key, int64_t min, int32_t* out) {
  const Json* v = Field(body, key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_number_integer() || v->get<int64_t>() < min || v->get<int64_t>() > INT32_MAX) {
    return Bad(key, absl::StrCat(key, " must be an integer >= ", min, ", got ", v->dump()));
  }
  *out = static_cast<int32_t>(v->get<int64_t>());
  return absl::OkStatus();
}

// DRY: llama-server's fields and defaults (a dry_base below 1 means the
// default, as there); the breakers are tokenized only when DRY is on.
absl::Status ParseDry(const Json& body, const Tokenizer& tok, DryParams* dry) {
  RETURN_IF_ERROR(Float(body, "dry_multiplier", &dry->multiplier));
  float base = dry->base;
  RETURN_IF_ERROR(Float(body, "dry_base", &base));
  if (base >= 1.0f) dry->base = base;
  RETURN_IF_ERROR(Int(body, "dry_allowed_length", 0, &dry->allowed_length));
  RETURN_IF_ERROR(Int(body, "dry_penalty_last_n", -1, &dry->penalty_last_n));
  std::vector<std::string> breakers = DryBreakers::Defaults();
  if (const Json* v = Field(body, "dry_sequence_breakers"); v != nullptr) {
    bool ok = v->is_array() && !v->empty();
    for (const Json& e : ok ? *v : Json::array()) ok = ok && e.is_string();
    if (!ok) {
      return Bad("dry_sequence_breakers",
                 "dry_sequence_breakers must be a non-empty array of strings");
    }
    breakers = v->get<std::vector<std::string>>();
  }
  if (dry->active()) {
    absl::StatusOr<std::shared_ptr<const DryBreakers>> b = DryBreakers::FromStrings(tok, breakers);
    if (!b.ok()) return Bad("dry_sequence_breakers", std::string(b.status().message()));
    dry->breakers = *std::move(b);
  }
  return absl::OkStatus();
}

// llama-server's name for a field also read under OpenAI's (or vLLM's) name:
// either may be given; both only when they agree.
absl::Status Alias(const Json& body, const char* llama, const char* other, double given,
                   const std::function<void(double)>& set) {
  const Json* v = Field(body, llama);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_number()) return Bad(llama, absl::StrCat(llama, " must be a number"));
  const double d = v->get<double>();
  // As floats: the other name's value was already stored as one.
  if (Field(body, other) != nullptr && static_cast<float>(d) != static_cast<float>(given)) {
    return Bad(llama, absl::StrCat(llama, " (", v->dump(), ") and ", other, " (", given,
                                   ") disagree: give one"));
  }
  set(d);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LlamaFields> ParseLlamaFields(const Json& body, const Tokenizer& tok,
                                             int max_sequences, GenerateParams* params) {
  RETURN_IF_ERROR(CheckRefused(body));
  SamplingParams& s = params->sampling;
  RETURN_IF_ERROR(Alias(body, "repeat_penalty", "repetition_penalty", s.repetition_penalty,
                        [&](double d) { s.repetition_penalty = static_cast<float>(d); }));
  if (const Json* v = Field(body, "repeat_last_n"); v != nullptr) {
    if (!v->is_number_integer() || v->get<int64_t>() < -1 || v->get<int64_t>() > INT32_MAX) {
      return Bad("repeat_last_n",
                 absl::StrCat("repeat_last_n must be an integer >= -1 (-1: the whole history, "
                              "0: penalties off), got ", v->dump()));
    }
    s.penalty_last_n = static_cast<int32_t>(v->get<int64_t>());
  }
  const char* max_key = Field(body, "max_completion_tokens") != nullptr ? "max_completion_tokens"
                                                                       : "max_tokens";
  if (const Json* v = Field(body, "n_predict"); v != nullptr) {
    // -1: until the end of generation or the context (our max_tokens 0).
    if (!v->is_number_integer() || v->get<int64_t>() < -1 || v->get<int64_t>() > INT32_MAX) {
      return Bad("n_predict", absl::StrCat("n_predict must be an integer >= -1, got ", v->dump()));
    }
    const int n = v->get<int64_t>() < 0 ? 0 : static_cast<int>(v->get<int64_t>());
    if (Field(body, max_key) != nullptr && n != params->max_tokens) {
      return Bad("n_predict", absl::StrCat("n_predict (", v->dump(), ") and ", max_key, " (",
                                           params->max_tokens, ") disagree: give one"));
    }
    params->max_tokens = n;
  }
  RETURN_IF_ERROR(Float(body, "typical_p", &s.typical_p));
  RETURN_IF_ERROR(Float(body, "top_n_sigma", &s.top_n_sigma));
  RETURN_IF_ERROR(Float(body, "xtc_probability", &s.xtc_probability));
  RETURN_IF_ERROR(Float(body, "xtc_threshold", &s.xtc_threshold));
  RETURN_IF_ERROR(ParseDry(body, tok, &s.dry));
  if (const Json* v = Field(body, "logit_bias"); v != nullptr) {
    RETURN_IF_ERROR(ParseLogitBias(*v, tok, &s.logit_bias));
  }
  if (const Json* v = Field(body, "samplers"); v != nullptr) {
    RETURN_IF_ERROR(ApplySamplers(*v, &s));
  }
  if (const Json* v = Field(body, "cache_prompt"); v != nullptr) {
    if (!v->is_boolean()) return Bad("cache_prompt", "cache_prompt must be true or false");
    params->cache_prompt = v->get<bool>();
  }
  if (const Json* v = Field(body, "id_slot"); v != nullptr) {
    if (!v->is_number_integer() || v->get<int64_t>() < -1 ||
        v->get<int64_t>() >= max_sequences) {
      return Bad("id_slot", absl::StrCat("id_slot must be -1 (any slot) or a slot in 0..",
                                         max_sequences - 1, " (--parallel), got ", v->dump()));
    }
  }
  LlamaFields out;
  if (const Json* v = Field(body, "grammar"); v != nullptr) {
    if (!v->is_string()) return Bad("grammar", "grammar must be a string (GBNF)");
    if (!v->get_ref<const std::string&>().empty()) {
      absl::StatusOr<std::shared_ptr<const grammar::Grammar>> g =
          grammar::ParseGbnf(v->get_ref<const std::string&>(), VocabIndex::SpecialTokenTest(tok));
      if (!g.ok()) return Bad("grammar", std::string(g.status().message()));
      out.grammar = *std::move(g);
    }
  }
  return out;
}

}  // namespace moesplit::dense
