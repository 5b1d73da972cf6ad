// A regular-expression subset compiled into byte-grammar rules that match
// the TEXT OF A JSON STRING'S CONTENT (between the quotes) whose decoded
// value the expression matches: JSON Schema's `pattern` and the string
// formats (json_schema.h). Private to common/sampling.
//
// Syntax (ECMAScript's, which JSON Schema names):
//   literals, `.` (any character but \n \r U+2028 U+2029), escapes
//   \d \D \w \W \s \S \t \n \r \f \v \0 \xHH \uHHHH and \ before a
//   punctuation character; classes [...] / [^...] of ASCII characters,
//   ranges and the class escapes; groups ( ), (?: ), (?<name> );
//   alternation |; quantifiers * + ? {n} {n,} {n,m}, each optionally lazy
//   (a trailing ?: the set of matched strings is the same).
//   `^` only at the start and `$` only at the end of the whole expression;
//   a side without its anchor matches any text there (JSON Schema's
//   patterns are searches, not full matches).
// Refused (InvalidArgument naming the construct and its offset):
//   lookaround (?= (?! (?<= (?<!, backreferences, \b \B, \p{...},
//   inline flags (?i), possessive quantifiers, non-ASCII characters or
//   ranges inside a class, and counts above kMaxRepeat.
//
// Emitted text: a character is written raw when JSON allows it and as
// \" \\ \b \f \n \r \t otherwise; other control characters and \u escapes
// are never emitted (a subset of the JSON texts of the matching values,
// which keeps every output valid). Non-ASCII characters are matched by `.`,
// negated classes, \D and \W (not by \S, whose complement includes Unicode
// spaces: \S is ASCII only) and written as UTF-8.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/sampling/grammar.h"

namespace moesplit::grammar {

// A rule matching the JSON string content described above; errors are
// InvalidArgument starting "pattern ".
absl::StatusOr<uint32_t> RegexStringContent(GrammarBuilder& b, std::string_view pattern,
                                            int max_repeat);

}  // namespace moesplit::grammar
