#include "services/cli/generation.h"

#include "common/base/status.h"

namespace moesplit::cli {

absl::StatusOr<GenerationResult> GenerateTokens(const Tokenizer& tokenizer,
                                                Sampler& sampler,
                                                std::vector<float> logits,
                                                int64_t n_max,
                                                const EvalFn& eval,
                                                const EmitFn& emit) {
  GenerationResult result;
  StreamDecoder decoder(&tokenizer, /*render_special=*/false);
  while (static_cast<int64_t>(result.tokens.size()) < n_max) {
    ASSIGN_OR_RETURN(SampledToken sampled, sampler.Sample(logits));
    const int32_t next = sampled.token;
    result.tokens.push_back(next);
    if (tokenizer.IsEndOfGeneration(next)) {
      result.stopped_at_end = true;
      break;
    }
    ASSIGN_OR_RETURN(std::string piece, decoder.Push(next));
    if (!piece.empty()) emit(piece);
    if (static_cast<int64_t>(result.tokens.size()) == n_max) break;
    RETURN_IF_ERROR(eval(next, &logits));
  }
  const std::string rest = decoder.Flush();
  if (!rest.empty()) emit(rest);
  return result;
}

}  // namespace moesplit::cli
