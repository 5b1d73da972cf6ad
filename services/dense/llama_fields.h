// llama-server's request fields beyond OpenAI's, on /v1/chat/completions and
// /v1/completions (and their llama-server paths): each one takes effect or
// the request is a 400 naming it -- nothing is accepted and ignored.
//
// Applied (docs/api.md lists them with their meaning):
//   repeat_penalty, repeat_last_n, n_predict
//                     llama-server's names of repetition_penalty,
//                     penalty_last_n (-1: the whole history) and max_tokens
//                     (-1: no limit); with both names given they must agree.
//   logit_bias        OpenAI's {"token id": bias} object, where a key that is
//                     not an integer is a string whose tokens all get the
//                     bias (as llama-server); llama.cpp's [[token id, bias],
//                     ...] and [["string", bias], ...]; a bias of `false`
//                     bans the token (-inf). Strings are tokenized without
//                     special tokens. Any malformed entry, token id outside
//                     the vocabulary, string without tokens or bias that is
//                     neither a number nor false is a 400 (llama-server skips
//                     such entries silently).
//   typical_p, top_n_sigma, xtc_probability, xtc_threshold
//                     SamplingParams (sampling_params.h: ranges).
//   dry_multiplier, dry_base, dry_allowed_length, dry_penalty_last_n,
//   dry_sequence_breakers
//                     DRY (common/sampling/dry.h) with llama-server's
//                     defaults (1.75, 2, 64, ["\n", ":", "\"", "*"]); a
//                     dry_base below 1 means the default, as there.
//   samplers          llama.cpp's sampler order, as names (any of llama.cpp's
//                     aliases) or one letter each: accepted when it is a
//                     subsequence of llama.cpp's default order (penalties,
//                     dry, top_n_sigma, top_k, typ_p, top_p, min_p, xtc,
//                     temperature) holding temperature; the samplers it
//                     leaves out are switched off, as llama.cpp does. Another
//                     order is a 400.
//   grammar           GBNF text (common/sampling/gbnf.h) compiled into the
//                     output constraint; "" is none. Errors name the line and
//                     column.
//   cache_prompt      false: this request neither reads nor fills the prefix
//                     cache (true, the default: both).
//   id_slot           -1 (any) or 0 .. max_sequences - 1: accepted; which
//                     sequence slot runs a request does not matter here (the
//                     prefix cache is shared by all of them, so a request
//                     reuses its conversation's prefix from any slot).
// Refused with a 400 when set to a value that would act (the field's
// disabled value is accepted): mirostat, dynatemp_range, adaptive_target, min_keep, n_indent, t_max_predict_ms, n_cache_reuse,
// post_sampling_probs, lora, grammar_lazy, grammar_triggers, echo,
// timings_per_token, reasoning_budget_tokens, response_fields. The
// parameters of a refused sampler (mirostat_tau/eta, dynatemp_exponent,
// adaptive_decay)
// act only through it: they are accepted when well-typed, as in llama-server
// where they do nothing while their sampler is off.
//
// Errors carry the field name as the message's first word, and the HTTP
// `param` (kParamPayload).
//
// Thread-safe: pure functions.
#pragma once

#include <memory>

#include "absl/status/status.h"
#include "common/sampling/grammar.h"
#include "common/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "services/dense/dense_engine.h"

namespace moesplit::dense {

struct LlamaFields {
  // `grammar`, compiled (null: none).
  std::shared_ptr<const grammar::Grammar> grammar;
};

// Reads the fields above from `body` into `params` (its sampling fields set
// from the OpenAI fields first, so that `samplers` can switch them off);
// `max_sequences` bounds id_slot. InvalidArgument, with the field as param,
// for a bad or refused value.
absl::StatusOr<LlamaFields> ParseLlamaFields(const nlohmann::ordered_json& body,
                                             const Tokenizer& tok, int max_sequences,
                                             GenerateParams* params);

}  // namespace moesplit::dense
