// Bounds on the list fields of a request, one set for both front ends (the
// OpenAI HTTP API in openai_api.cc and the gRPC API in inference_service.cc),
// checked before any work is spent on the request. Each check returns
// InvalidArgument whose message opens with the field's name and gives the
// limit, e.g. "stop holds at most 4 strings, got 5".
//
// Thread-safe: constants and pure functions.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
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

// A text prompt's tokens, tokenizing no further than the context allows: a
// prompt of n_ctx tokens or more is InvalidArgument ("the prompt has at
// least N tokens, the context holds n_ctx") after at most n_ctx tokens of
// work, however long the text.
inline absl::StatusOr<std::vector<int32_t>> EncodeWithinContext(const Tokenizer& tok,
                                                                std::string_view text,
                                                                bool add_special, int n_ctx) {
  ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                   tok.Encode(text, /*parse_special=*/true, add_special,
                              static_cast<size_t>(n_ctx > 1 ? n_ctx - 1 : 0)));
  if (ids.size() < static_cast<size_t>(n_ctx)) return ids;
  return absl::InvalidArgumentError(absl::StrCat("the prompt has at least ", ids.size(),
                                                 " tokens, the context holds ", n_ctx));
}

}  // namespace moesplit::dense
