// Bounds on the list fields of a request, one set for both front ends (the
// OpenAI HTTP API in openai_api.cc and the gRPC API in inference_service.cc),
// checked before any work is spent on the request. Each check returns
// InvalidArgument whose message opens with the field's name and gives the
// limit, e.g. "stop holds at most 4 strings, got 5".
//
// Thread-safe: constants and pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/base/status.h"
#include "common/tokenizer/tokenizer.h"

namespace moesplit::dense {

// OpenAI's limit on `stop` (a 200,000-string list slowed every other request
// 7x while the stop matcher was built and fed).
inline constexpr int kMaxStop = 4;
// OpenAI's limit on `messages`.
inline constexpr int kMaxMessages = 2048;

inline absl::Status CheckStopCount(size_t n) {
  if (n <= static_cast<size_t>(kMaxStop)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("stop holds at most ", kMaxStop, " strings, got ", n));
}

inline absl::Status CheckMessageCount(size_t n) {
  if (n <= static_cast<size_t>(kMaxMessages)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("messages holds at most ", kMaxMessages, " entries, got ", n));
}

// The payload key of a prompt-longer-than-the-context error: "N CTX", the
// prompt's tokens (a lower bound when tokenizing stopped at the context) and
// the context. The HTTP API answers it as code "context_length_exceeded"
// with n_prompt_tokens and n_ctx (llama-server's fields).
inline constexpr char kContextOverflowPayload[] = "moesplit/context_overflow";

// InvalidArgument "the prompt has [at least ]N tokens[ (B bytes)], the
// context holds n_ctx", with kContextOverflowPayload.
inline absl::Status ContextOverflowError(size_t n_prompt_tokens, int n_ctx, bool at_least,
                                         absl::string_view detail = "") {
  absl::Status s = absl::InvalidArgumentError(
      absl::StrCat("the prompt has ", at_least ? "at least " : "", n_prompt_tokens, " tokens",
                   detail, ", the context holds ", n_ctx));
  s.SetPayload(kContextOverflowPayload, absl::Cord(absl::StrCat(n_prompt_tokens, " ", n_ctx)));
  return s;
}

// The prompt's tokens and the context of a ContextOverflowError; false for
// any other status.
inline bool ContextOverflowOf(const absl::Status& s, size_t* n_prompt_tokens, int* n_ctx) {
  auto p = s.GetPayload(kContextOverflowPayload);
  if (!p) return false;
  const std::string text(*p);
  const size_t space = text.find(' ');
  return space != std::string::npos &&
         absl::SimpleAtoi(absl::string_view(text).substr(0, space), n_prompt_tokens) &&
         absl::SimpleAtoi(absl::string_view(text).substr(space + 1), n_ctx);
}

// A text prompt's tokens, tokenizing no further than the context allows: a
// prompt of n_ctx tokens or more is a ContextOverflowError ("the prompt has
// at least N tokens, the context holds n_ctx") after at most n_ctx tokens of
// work, however long the text.
inline absl::StatusOr<std::vector<int32_t>> EncodeWithinContext(const Tokenizer& tok,
                                                                std::string_view text,
                                                                bool add_special, int n_ctx) {
  ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                   tok.Encode(text, /*parse_special=*/true, add_special,
                              static_cast<size_t>(n_ctx > 1 ? n_ctx - 1 : 0)));
  if (ids.size() < static_cast<size_t>(n_ctx)) return ids;
  return ContextOverflowError(ids.size(), n_ctx, /*at_least=*/true);
}

}  // namespace moesplit::dense
