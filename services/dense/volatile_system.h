// VolatileSystemFilter: text that changes on every request although the
// conversation does not, left out of system prompts before they are
// rendered, so that it does not defeat the prefix cache (docs/api.md,
// "Volatile system text"). Claude Code starts its system prompt with
//   x-anthropic-billing-header: cc_version=2.1.101.e51; cc_entrypoint=cli; cch=a5145;
// whose cch changes with every request: at the prompt's very start, it would
// make every request recompute the whole prompt.
//
// The pattern (--volatile-system-pattern) is a PCRE2 regular expression
// (UTF-8, multi-line: ^ and $ match at line ends); every match in the text
// of a system or developer message (a string, or each text part; a part
// left empty is dropped) is removed. Several patterns: one alternation
// (a|b). The model never sees what is removed.
//
// Thread-safe: immutable after Create.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace moesplit::dense {

// The default: the billing header's key=value; fields (the header's name
// and fields only, so that text after it on the same line stays), and the
// line end after them.
inline constexpr char kDefaultVolatileSystemPattern[] =
    R"(x-anthropic-billing-header:(?:[ \t]*[A-Za-z0-9_.-]+=[^;\n]*;)*[ \t]*\n?)";

class VolatileSystemFilter {
 public:
  // InvalidArgument naming the pattern's error and offset.
  static absl::StatusOr<std::unique_ptr<VolatileSystemFilter>> Create(const std::string& pattern);
  ~VolatileSystemFilter();

  // `text` without the pattern's matches (unchanged when matching fails,
  // e.g. on invalid UTF-8, which rendering refuses later).
  std::string Strip(std::string_view text) const;

  // The chat messages with the system and developer messages' text
  // stripped; other messages, and anything that is not text, unchanged.
  nlohmann::ordered_json StripMessages(const nlohmann::ordered_json& messages) const;

 private:
  struct Code;
  explicit VolatileSystemFilter(std::unique_ptr<Code> code);
  std::unique_ptr<Code> code_;
};

}  // namespace moesplit::dense
