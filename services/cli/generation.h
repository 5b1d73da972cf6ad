// The token loop of `moesplit generate`, apart from the engine so that it can
// be tested with any logits source.
//
// Starting from the logits after the prompt, up to n_max times: sample a
// token (common/sampling's Sampler, which also records it in its history);
// if it ends generation (Tokenizer::IsEndOfGeneration) stop without emitting
// it; otherwise pass its text through a StreamDecoder (so `emit`
// only ever sees whole UTF-8 characters; special tokens render as nothing)
// and, unless it was the last allowed token, call `eval` to get the logits
// after it. At the end, whatever the decoder holds back is emitted.
//
// Not thread-safe; errors from the sampler or `eval` stop the loop and are
// returned (text emitted so far stays emitted).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tokenizer/tokenizer.h"
#include "common/sampling/sampler.h"

namespace moesplit::cli {

struct GenerationResult {
  std::vector<int32_t> tokens;  // sampled, including a final end token
  bool stopped_at_end = false;  // an end-of-generation token was sampled
};

// `eval(token, &logits)` replaces `logits` with those after `token`.
using EvalFn = std::function<absl::Status(int32_t, std::vector<float>*)>;
using EmitFn = std::function<void(absl::string_view)>;

absl::StatusOr<GenerationResult> GenerateTokens(const Tokenizer& tokenizer,
                                                Sampler& sampler,
                                                std::vector<float> logits,
                                                int64_t n_max,
                                                const EvalFn& eval,
                                                const EmitFn& emit);

}  // namespace moesplit::cli
