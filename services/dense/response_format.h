// response_format: OpenAI's structured-output request field, shared by the
// HTTP API (/v1/chat/completions, /v1/completions) and the gRPC Generate /
// Chat RPCs (their ResponseFormat message is turned into the same JSON).
//
//   {"type": "text"}                      no constraint (the default)
//   {"type": "json_object"}               the output is one JSON object
//   {"type": "json_schema", "json_schema": {"name": "...", "schema": {...},
//    "strict": true}}                     the output is valid under the schema
// The schema keywords supported and refused are common/sampling/
// json_schema.h's. Errors are InvalidArgument whose message starts with
// "response_format" (the HTTP API's `param`), naming the field or the
// schema keyword and its location; nothing is queued.
//
// Thread-safe: pure functions.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "common/sampling/grammar.h"
#include "nlohmann/json.hpp"

namespace moesplit::dense {

// The compiled constraint, or nullptr for "text" (and a null value).
absl::StatusOr<std::shared_ptr<const grammar::Grammar>> CompileResponseFormat(
    const nlohmann::ordered_json& response_format);

}  // namespace moesplit::dense
