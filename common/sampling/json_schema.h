// JSON output constraints: a literal prefix, then one JSON value (any JSON
// object, or a value valid under a JSON Schema), then a literal suffix,
// compiled to a byte Grammar (grammar.h) for TokenConstraint.
//
// The value's text is compact JSON plus bounded whitespace: after `{`, `[`,
// `,` and `:` and before `}` / `]`, at most one space or one newline
// followed by up to 20 spaces/tabs (llama.cpp's space rule), so a model
// cannot loop on whitespace. Numbers: an integer part of at most 16 digits,
// a fraction of at most 16 digits, an exponent of at most 2 digits. Strings:
// any valid UTF-8 except `"`, `\` and control bytes, or the escapes
// \" \\ \/ \b \f \n \r \t \uXXXX; minLength/maxLength count these
// characters (an escape is one).
//
// JSON Schema keywords (everything else is refused, naming the keyword and
// where it is, as "#/properties/a/items"):
//   type (a name or an array of names: object, array, string, number,
//     integer, boolean, null), nullable: true (adds null);
//   object: properties (emitted in the order written; required ones always,
//     the others optional), required (names from properties),
//     additionalProperties: false or absent = no other keys (OpenAI's strict
//     semantics); true or a schema only for an object without properties
//     (a map), and never with strict;
//   array: items (a schema), minItems, maxItems, uniqueItems (false, or
//     true with maxItems <= 1);
//   string: minLength, maxLength; or pattern (internal/regex.h's subset;
//     a side without its anchor matches any text); or format: date, time,
//     date-time (RFC 3339; February has 29 days every year), uuid, email,
//     hostname, ipv4, uri (a pattern beside a format decides: format is an
//     annotation in 2020-12); lengths together with either are refused;
//   integer and number: minimum, maximum, exclusiveMinimum,
//     exclusiveMaximum (numbers, or draft 4's booleans), multipleOf (an
//     integer up to 1000; on a number also 10^-n = at most n fraction
//     digits). A number's bounds must be integers; a bounded number has no
//     exponent; written magnitudes stay within 16 digits;
//   enum, const (the values' compact JSON text);
//   anyOf, oneOf (oneOf as anyOf: its branches must not overlap);
//   allOf, and $ref beside other keywords: merged into one schema
//     (properties and required joined, a property in two branches must have
//     one schema, bounds take the tighter, types intersect, any other
//     keyword must agree; a branch with additionalProperties false keeps
//     only its properties);
//   $ref to "#", "#/$defs/NAME" or "#/definitions/NAME" (local only; may be
//     recursive when the cycle consumes input);
//   annotations ignored: title, description, default, examples, $schema,
//     $id, $comment, $defs, definitions, deprecated, readOnly, writeOnly.
// Refused: min/maxProperties, prefixItems, not, if/then/else, contains,
// patternProperties, dependentRequired, and any other keyword; the regex
// constructs internal/regex.h refuses; unknown formats.
// Type-specific keywords without `type` imply it (properties: object,
// items: array, minLength/pattern/format: string, minimum/multipleOf:
// number); a schema without either is any value.
// Repetition bounds (maxItems, maxLength) above kMaxRepeat are refused.
//
// Thread-safe: pure functions.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/sampling/grammar.h"
#include "nlohmann/json.hpp"

namespace moesplit {

inline constexpr int kMaxRepeat = 4096;

struct ConstraintSpec {
  enum class Kind { kJsonObject, kJsonSchema };
  Kind kind = Kind::kJsonObject;
  std::string prefix;            // literal bytes before the JSON value
  nlohmann::ordered_json schema;  // kJsonSchema: the schema (object or bool)
  bool strict = false;           // OpenAI's json_schema.strict
  std::string suffix;            // literal bytes after the JSON value
};

// InvalidArgument naming the keyword and its location for a schema this
// compiler cannot enforce (see the file comment) or one that is malformed.
absl::StatusOr<std::shared_ptr<const grammar::Grammar>> CompileConstraint(
    const ConstraintSpec& spec);

class JsonSchemaCompiler;

// The same values as rules of a caller's grammar, for outputs that embed
// JSON in other text (a tool call's XML parameters, chat_tools.h). `root`
// is what "$ref": "#..." resolves against; builder and root outlive this.
class JsonSchemaRules {
 public:
  JsonSchemaRules(grammar::GrammarBuilder* builder, const nlohmann::ordered_json& root, bool strict = false);
  ~JsonSchemaRules();
  // A rule matching one value valid under `schema` (root or a part of it;
  // `where` its location for errors, e.g. "#/properties/a"). Errors as
  // CompileConstraint's.
  absl::StatusOr<uint32_t> Value(const nlohmann::ordered_json& schema, const std::string& where);

 private:
  std::unique_ptr<JsonSchemaCompiler> c_;
};

}  // namespace moesplit
