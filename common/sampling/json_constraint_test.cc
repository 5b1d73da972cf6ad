// The byte grammar, the JSON Schema compiler and token masking: byte strings
// accepted/rejected per keyword (a vocabulary of the 256 single bytes), and
// the mask on the real Qwen2 vocabulary checked token by token against the
// matcher itself, with control and EOG tokens.
#include <algorithm>
#include <cstdlib>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "common/gguf/gguf.h"
#include "common/sampling/json_schema.h"
#include "common/sampling/sampler.h"
#include "common/sampling/token_constraint.h"
#include "common/tokenizer/tokenizer.h"
#include "gtest/gtest.h"

namespace moesplit {
namespace {

using Json = nlohmann::ordered_json;

// Token i < 256 is byte i; 256 is the EOG token.
std::shared_ptr<const VocabIndex> ByteVocab() {
  static const auto* v = [] {
    std::vector<std::string> pieces;
    for (int b = 0; b < 256; ++b) pieces.push_back(std::string(1, static_cast<char>(b)));
    pieces.push_back("<eog>");
    std::vector<bool> usable(257, true);
    return new std::shared_ptr<const VocabIndex>(*VocabIndex::Create(pieces, usable, {256}));
  }();
  return *v;
}

absl::StatusOr<std::shared_ptr<const grammar::Grammar>> Schema(const std::string& schema,
                                                               bool strict = false) {
  ConstraintSpec spec;
  spec.kind = ConstraintSpec::Kind::kJsonSchema;
  spec.schema = Json::parse(schema);
  spec.strict = strict;
  return CompileConstraint(spec);
}

// Whether `text` is a complete sentence of the grammar.
bool Accepts(const std::shared_ptr<const grammar::Grammar>& g, const std::string& text) {
  TokenConstraint c(g, ByteVocab());
  return c.AcceptBytes(text).ok() && c.complete();
}

struct Case {
  const char* schema;
  std::vector<const char*> accept;
  std::vector<const char*> reject;
};

TEST(JsonSchemaTest, AcceptsAndRejectsPerKeyword) {
  const std::vector<Case> cases = {
      {R"({"type":"string"})",
       {R"("")", R"("abc")", R"("\ud83d\ude00\uFFFF\ud7ff")", R"("a\"b\\c\n\u00e9")", "\"caf\xc3\xa9 \xe2\x98\x83\"",
        "\"\xf0\x9f\x99\x82\""},
       {R"(abc)", R"("abc)", "\"a\nb\"", R"("\x")", R"("\u12")", R"("\ud83d")", R"("\udc00x")", "\"\xc3\"", "\"\xed\xa0\x80\"",
        "\"\xc0\xaf\"", " \"a\""}},
      {R"({"type":"string","minLength":2,"maxLength":3})",
       {R"("ab")", R"("abc")", R"("a\n")", "\"\xc3\xa9\xc3\xa9\""},
       {R"("a")", R"("abcd")", R"("")"}},
      {R"({"type":"integer"})",
       {"0", "-7", "1234567890123456"},
       {"01", "1.5", "-", "+1", "12345678901234567", "1e5"}},
      {R"({"type":"number"})",
       {"0", "-0.5", "3.25e-7", "1E+10", "42"},
       {".5", "1.", "1e", "1e123", "NaN"}},
      {R"({"type":"boolean"})", {"true", "false"}, {"True", "1", "null"}},
      {R"({"type":"null"})", {"null"}, {"nil", "\"null\""}},
      {R"({"type":["string","null"]})", {"null", "\"x\""}, {"1"}},
      {R"({"type":"integer","nullable":true})", {"null", "5"}, {"\"5\""}},
      {R"({"enum":["red",1,null,{"a":[true]}]})",
       {R"("red")", "1", "null", R"({"a":[true]})"},
       {R"("blue")", "2", R"({"a":[false]})"}},
      {R"({"const":"fixed"})", {R"("fixed")"}, {R"("other")"}},
      {R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},
          "required":["a"],"additionalProperties":false})",
       {R"({"a":1})", R"({"a":1,"b":"x"})", "{ \"a\": 1 , \"b\": \"x\"\n}", "{\n  \"a\": 1\n}"},
       {R"({})", R"({"b":"x"})", R"({"b":"x","a":1})", R"({"a":1,"c":2})", R"({"a":"1"})",
        R"({"a":1,})", "{   \"a\":1}"}},
      {R"({"type":"object","properties":{"x":{"type":"boolean"},"y":{"type":"null"}}})",
       {"{}", R"({"x":true})", R"({"y":null})", R"({"x":false,"y":null})"},
       {R"({"y":null,"x":true})", R"({,})"}},
      {R"({"type":"object","additionalProperties":{"type":"integer"}})",
       {"{}", R"({"k":1,"j":2})"},
       {R"({"k":"v"})"}},
      {R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3})",
       {"[1]", "[1,2,3]", "[ 1 , 2 ]"},
       {"[]", "[1,2,3,4]", "[1,]", "[\"a\"]"}},
      {R"({"type":"array","items":{"type":"string"}})", {"[]", R"(["a","b"])"}, {"[1]"}},
      {R"({"type":"array","maxItems":0})", {"[]"}, {"[1]"}},
      {R"({"anyOf":[{"type":"integer"},{"type":"string","maxLength":1}]})",
       {"1", R"("a")"},
       {R"("ab")", "true"}},
      {R"({"oneOf":[{"type":"boolean"},{"type":"null"}]})", {"true", "null"}, {"1"}},
      {R"({"$defs":{"pt":{"type":"object","properties":{"x":{"type":"number"}},"required":["x"]}},
          "type":"array","items":{"$ref":"#/$defs/pt"}})",
       {R"([{"x":1},{"x":2.5}])"},
       {R"([{"y":1}])"}},
      {R"({"type":"object","properties":{"name":{"type":"string","maxLength":4},
          "children":{"type":"array","items":{"$ref":"#"}}},"required":["name","children"]})",
       {R"({"name":"a","children":[]})", R"({"name":"a","children":[{"name":"b","children":[]}]})"},
       {R"({"name":"a"})", R"({"name":"a","children":[{"name":"b"}]})"}},
      {R"({})", {"1", R"({"a":[1,{"b":null}]})", R"("s")"}, {"", "{", "[1,]"}},
      {R"({"properties":{"a":{"type":"integer"}},"required":["a"]})", {R"({"a":0})"}, {"0"}},
  };
  for (const Case& c : cases) {
    auto g = Schema(c.schema);
    ASSERT_TRUE(g.ok()) << c.schema << ": " << g.status();
    for (const char* t : c.accept) EXPECT_TRUE(Accepts(*g, t)) << c.schema << " should accept " << t;
    for (const char* t : c.reject) EXPECT_FALSE(Accepts(*g, t)) << c.schema << " should reject " << t;
  }
}

TEST(JsonSchemaTest, BoundsPatternsFormatsAndAllOf) {
  const std::vector<Case> cases = {
      {R"({"type":"integer","minimum":-12,"maximum":130})",
       {"-12", "-1", "0", "7", "99", "100", "130"},
       {"-13", "131", "200", "-0", "007", "1000", "1.5"}},
      {R"({"type":"integer","exclusiveMinimum":0})", {"1", "9999999999999999"}, {"0", "-1"}},
      {R"({"type":"integer","minimum":0,"exclusiveMinimum":true,"maximum":10,"exclusiveMaximum":true})",
       {"1", "9"}, {"0", "10"}},
      // zod 4's .int(): the safe integers.
      {R"({"type":"integer","minimum":-9007199254740991,"maximum":9007199254740991})",
       {"0", "-9007199254740991", "9007199254740991", "123456789012345"},
       {"9007199254740992", "-9007199254740992", "9999999999999999"}},
      {R"({"type":"integer","multipleOf":5,"minimum":-20,"maximum":50})",
       {"-20", "-5", "0", "5", "45", "50"},
       {"-25", "-3", "7", "55", "51"}},
      {R"({"type":"integer","multipleOf":7})", {"0", "7", "-14", "700", "1001"}, {"8", "-15", "1000"}},
      {R"({"type":"number","minimum":0,"maximum":1})",
       {"0", "0.5", "1", "0.999"},
       {"-0.5", "1.5", "1.01", "2", "-1", "1e-2"}},
      {R"({"type":"number","exclusiveMinimum":0})", {"0.01", "3", "3.5"}, {"0", "-0.5", "0.0"}},
      {R"({"type":"number","minimum":-2,"exclusiveMaximum":-1})",
       {"-2", "-1.5", "-1.01"},
       {"-1", "-2.5", "0", "-0.5"}},
      {R"({"type":"number","multipleOf":0.01})", {"1.25", "-3", "0.5"}, {"1.255", "1e3"}},
      {R"({"type":["number","null"],"minimum":1})", {"null", "1", "2.5"}, {"0.5"}},
      {R"({"type":"string","pattern":"^[A-Z]{3}-\\d{2,4}$"})",
       {R"("ABC-12")", R"("XYZ-1234")"},
       {R"("AB-12")", R"("ABC-1")", R"("abc-12")", R"("ABC-12345")"}},
      {R"({"type":"string","pattern":"^(?:foo|ba[rz])+\\.txt$"})",
       {R"("foo.txt")", R"("barbazfoo.txt")"},
       {R"(".txt")", R"("fooxtxt")", R"("qux.txt")"}},
      {R"({"type":"string","pattern":"cat"})",
       {R"("cat")", R"("concatenate")", "\"\\\"cat\\\"\""},
       {R"("ca t")", R"("")"}},
      {R"({"type":"string","pattern":"^[^\"\\\\]*$"})", {R"("abc")", "\"\xc3\xa9\""}, {R"("a\"b")", R"("a\\b")"}},
      {R"({"type":"string","pattern":"^a\"b\\\\c\\n.$"})", {R"("a\"b\\c\nx")"}, {"\"a\\\"b\\\\c\\nx\\n\""}},
      {R"({"type":"string","pattern":"^.{2}$"})", {R"("ab")", "\"\xc3\xa9z\""}, {R"("a")", R"("a\n")"}},
      {R"({"type":"string","format":"date"})",
       {R"("2024-02-29")", R"("1999-12-31")", R"("2025-04-30")"},
       {R"("2024-13-01")", R"("2024-04-31")", R"("2024-02-30")", R"("24-01-01")", R"("2024-1-1")"}},
      {R"({"type":"string","format":"time"})",
       {R"("23:59:59Z")", R"("08:00:00.123+02:00")"},
       {R"("24:00:00Z")", R"("08:00Z")", R"("08:00:00")"}},
      {R"({"type":"string","format":"date-time"})",
       {R"("2024-05-06T07:08:09Z")", R"("2024-05-06T07:08:09.5-05:30")"},
       {R"("2024-05-06 07:08:09Z")", R"("2024-05-06")"}},
      {R"({"type":"string","format":"uuid"})",
       {R"("123e4567-e89b-12d3-a456-426614174000")"},
       {R"("123e4567e89b12d3a456426614174000")", R"("123e4567-e89b-12d3-a456-42661417400g")"}},
      {R"({"type":"string","format":"email"})",
       {R"("jane.doe+x@example.co.uk")", R"("a@b.io")"},
       {R"("jane@")", R"("@example.com")", R"("a..b@x.io")", R"("a@localhost")", R"("a b@x.io")"}},
      {R"({"type":"string","format":"uri"})",
       {R"("https://example.com/a/b?x=1&y=%20#top")", R"("mailto:jane@example.com")",
        R"("http://user@host:8080/")", R"("urn:isbn:0451450523")"},
       {R"("example.com")", R"("http://exa mple.com")", R"("1http://x")", R"("http://x/%zz")"}},
      {R"({"type":"string","format":"ipv4"})", {R"("192.168.0.1")", R"("0.0.0.0")"}, {R"("256.1.1.1")", R"("1.2.3")"}},
      {R"({"type":"string","format":"hostname"})", {R"("example.com")", R"("localhost")"}, {R"("-bad.com")", R"("a..b")"}},
      // A pattern decides over a format (an annotation in 2020-12).
      {R"({"type":"string","format":"uuid","pattern":"^x+$"})", {R"("xx")"}, {R"("123e4567-e89b-12d3-a456-426614174000")"}},
      {R"({"allOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},
                    {"properties":{"b":{"type":"string"}},"required":["b"]}]})",
       {R"({"a":1,"b":"x"})"},
       {R"({"a":1})", R"({"b":"x"})"}},
      {R"({"allOf":[{"type":"integer","minimum":0},{"maximum":9}]})", {"0", "9"}, {"-1", "10"}},
      {R"({"$defs":{"pos":{"type":"integer","minimum":1}},"$ref":"#/$defs/pos","maximum":3})",
       {"1", "3"},
       {"0", "4"}},
      {R"({"type":"array","items":{"type":"integer"},"uniqueItems":false})", {"[1,1]"}, {"[\"a\"]"}},
      {R"({"type":"array","uniqueItems":true,"maxItems":1})", {"[]", "[1]"}, {"[1,2]"}},
  };
  for (const Case& c : cases) {
    auto g = Schema(c.schema);
    ASSERT_TRUE(g.ok()) << c.schema << ": " << g.status();
    for (const char* t : c.accept) EXPECT_TRUE(Accepts(*g, t)) << c.schema << " should accept " << t;
    for (const char* t : c.reject) EXPECT_FALSE(Accepts(*g, t)) << c.schema << " should reject " << t;
  }
}

// Schemas exactly as zod 4's z.toJSONSchema() and pydantic 2's
// model_json_schema() write them for typical agent tools.
constexpr const char* kZodWeather = R"({
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {
    "city": {"description": "City name", "type": "string"},
    "days": {"type": "integer", "minimum": 1, "maximum": 14},
    "count": {"type": "integer", "minimum": -9007199254740991, "maximum": 9007199254740991},
    "units": {"type": "string", "enum": ["metric", "imperial"]},
    "when": {"type": "string", "format": "date", "pattern": "^(?:(?:\\d\\d[2468][048]|\\d\\d[13579][26]|\\d\\d0[48]|[02468][048]00|[13579][26]00)-02-29|\\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\\d|30)|(?:02)-(?:0[1-9]|1\\d|2[0-8])))$"},
    "id": {"type": "string", "format": "uuid", "pattern": "^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}|00000000-0000-0000-0000-000000000000|ffffffff-ffff-ffff-ffff-ffffffffffff)$"},
    "link": {"type": "string", "format": "uri"},
    "ratio": {"type": "number", "exclusiveMinimum": 0},
    "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    "tags": {"minItems": 1, "maxItems": 3, "type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 8}}
  },
  "required": ["city", "days", "count", "when", "id", "ratio", "note", "tags"],
  "additionalProperties": false
})";

constexpr const char* kPydanticPerson = R"({
  "$defs": {
    "Address": {
      "properties": {
        "street": {"title": "Street", "type": "string", "maxLength": 20},
        "zip": {"pattern": "^\\d{5}$", "title": "Zip", "type": "string"}
      },
      "required": ["street", "zip"], "title": "Address", "type": "object"
    }
  },
  "properties": {
    "name": {"maxLength": 50, "minLength": 1, "title": "Name", "type": "string"},
    "age": {"maximum": 150, "minimum": 0, "title": "Age", "type": "integer"},
    "email": {"anyOf": [{"format": "email", "type": "string"}, {"type": "null"}], "default": null, "title": "Email"},
    "address": {"$ref": "#/$defs/Address"},
    "previous": {"anyOf": [{"$ref": "#/$defs/Address"}, {"type": "null"}], "default": null},
    "tags": {"items": {"type": "string", "maxLength": 10}, "maxItems": 10, "title": "Tags", "type": "array"},
    "born": {"format": "date", "title": "Born", "type": "string"},
    "seen": {"format": "date-time", "title": "Seen", "type": "string"},
    "role": {"default": "user", "enum": ["admin", "user"], "title": "Role", "type": "string"},
    "kind": {"const": "person", "title": "Kind", "type": "string"},
    "score": {"exclusiveMaximum": 1, "exclusiveMinimum": 0, "title": "Score", "type": "number"},
    "level": {"allOf": [{"$ref": "#/definitions/Level"}], "default": 2},
    "price": {"type": "number", "multipleOf": 0.01, "minimum": 0}
  },
  "required": ["name", "age", "address", "born", "seen", "kind", "score", "level", "price"],
  "title": "Person", "type": "object",
  "definitions": {"Level": {"type": "integer", "minimum": 1, "maximum": 5, "title": "Level"}}
})";

// One random sentence of the grammar (a random walk over the allowed bytes
// that prefers to close strings and containers once it is long), or "" when
// it did not finish within the step limit.
std::string RandomInstance(const std::shared_ptr<const grammar::Grammar>& g, std::mt19937& rng) {
  TokenConstraint c(g, ByteVocab());
  std::string out;
  for (int step = 0; step < 4000; ++step) {
    std::vector<int> allowed;
    for (int id = 0; id < 256; ++id) {
      if ((c.AllowedTokens()[id >> 6] >> (id & 63)) & 1) allowed.push_back(id);
    }
    const bool can_end = (c.AllowedTokens()[256 >> 6] >> (256 & 63)) & 1;
    if (can_end && (allowed.empty() || rng() % 4 == 0)) return out;
    if (allowed.empty()) return "";
    int pick = allowed[rng() % allowed.size()];
    if (out.size() > 40 && rng() % 2 == 0) {
      for (int closing : {'"', ']', '}', ','}) {
        if (std::find(allowed.begin(), allowed.end(), closing) != allowed.end()) pick = closing;
      }
    }
    if (!c.Accept(pick).ok()) return "";
    out += static_cast<char>(pick);
  }
  return "";
}

bool Matches(const Json& v, const char* regex) {
  return v.is_string() && std::regex_search(v.get<std::string>(), std::regex(regex));
}

TEST(JsonSchemaTest, ZodAndPydanticSchemasGenerateValidInstances) {
  std::mt19937 rng(43);
  const std::string iso_date = R"(^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$)";
  {
    auto g = Schema(kZodWeather, /*strict=*/true);
    ASSERT_TRUE(g.ok()) << g.status();
    int finished = 0;
    for (int i = 0; i < 100; ++i) {
      const std::string text = RandomInstance(*g, rng);
      if (text.empty()) continue;
      ++finished;
      const Json v = Json::parse(text);  // throws (fails the test) if not JSON
      ASSERT_TRUE(v["city"].is_string()) << text;
      ASSERT_TRUE(v["days"].is_number_integer()) << text;
      EXPECT_GE(v["days"].get<int64_t>(), 1) << text;
      EXPECT_LE(v["days"].get<int64_t>(), 14) << text;
      EXPECT_LE(std::llabs(v["count"].get<int64_t>()), 9007199254740991LL) << text;
      if (v.contains("units")) {
        EXPECT_TRUE(v["units"] == "metric" || v["units"] == "imperial") << text;
      }
      EXPECT_TRUE(Matches(v["when"], iso_date.c_str())) << text;
      EXPECT_TRUE(Matches(v["id"], "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}$|^0{8}-0{4}-0{4}-0{4}-0{12}$|^f{8}-f{4}-f{4}-f{4}-f{12}$")) << text;
      if (v.contains("link")) {
        EXPECT_TRUE(Matches(v["link"], "^[A-Za-z][A-Za-z0-9+.-]*:[^ \"\\\\]*$")) << text;
      }
      EXPECT_TRUE(v["ratio"].is_number() && v["ratio"].get<double>() > 0) << text;
      EXPECT_TRUE(v["note"].is_null() || v["note"].is_string()) << text;
      ASSERT_TRUE(v["tags"].is_array()) << text;
      EXPECT_GE(v["tags"].size(), 1u) << text;
      EXPECT_LE(v["tags"].size(), 3u) << text;
      Json rest = v;
      for (const std::string k : {"city", "days", "count", "units", "when", "id", "link", "ratio", "note", "tags"}) {
        rest.erase(k);
      }
      EXPECT_TRUE(rest.empty()) << text;
    }
    EXPECT_GT(finished, 75);
  }
  {
    auto g = Schema(kPydanticPerson);
    ASSERT_TRUE(g.ok()) << g.status();
    int finished = 0;
    for (int i = 0; i < 100; ++i) {
      const std::string text = RandomInstance(*g, rng);
      if (text.empty()) continue;
      ++finished;
      const Json v = Json::parse(text);
      const std::string name = v["name"].get<std::string>();
      EXPECT_FALSE(name.empty()) << text;
      ASSERT_TRUE(v["age"].is_number_integer()) << text;
      EXPECT_TRUE(v["age"].get<int64_t>() >= 0 && v["age"].get<int64_t>() <= 150) << text;
      if (v.contains("email") && !v["email"].is_null()) {
        EXPECT_TRUE(Matches(v["email"], "^[^@ ]+@[A-Za-z0-9-]+(\\.[A-Za-z0-9-]+)+$")) << text;
      }
      EXPECT_TRUE(Matches(v["address"]["zip"], "^\\d{5}$")) << text;
      if (v.contains("previous") && !v["previous"].is_null()) {
        EXPECT_TRUE(Matches(v["previous"]["zip"], "^\\d{5}$")) << text;
      }
      EXPECT_TRUE(Matches(v["born"], iso_date.c_str())) << text;
      EXPECT_TRUE(Matches(v["seen"], R"(^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$)")) << text;
      if (v.contains("role")) {
        EXPECT_TRUE(v["role"] == "admin" || v["role"] == "user") << text;
      }
      EXPECT_EQ(v["kind"], "person") << text;
      const double score = v["score"].get<double>();
      EXPECT_TRUE(score > 0 && score < 1) << text;
      ASSERT_TRUE(v["level"].is_number_integer()) << text;
      EXPECT_TRUE(v["level"].get<int64_t>() >= 1 && v["level"].get<int64_t>() <= 5) << text;
      const double price = v["price"].get<double>();
      EXPECT_GE(price, 0) << text;
      EXPECT_TRUE(Matches(Json(v["price"].dump()), "^\\d+(\\.\\d{1,2})?$")) << text;
    }
    EXPECT_GT(finished, 75);
  }
  // zod's z.email() pattern needs lookahead: a 400 naming it, not a looser format.
  auto email = Schema(R"({"type":"string","format":"email","pattern":"^(?!\\.)(?!.*\\.\\.)([A-Za-z0-9_'+\\-\\.]*)[A-Za-z0-9_+-]@([A-Za-z0-9][A-Za-z0-9\\-]*\\.)+[A-Za-z]{2,}$"})");
  ASSERT_FALSE(email.ok());
  EXPECT_NE(std::string(email.status().message()).find("lookahead"), std::string::npos) << email.status();
}

TEST(JsonSchemaTest, JsonObjectIsAnyObjectWithBoundedWhitespace) {
  ConstraintSpec spec;
  auto g = CompileConstraint(spec);
  ASSERT_TRUE(g.ok()) << g.status();
  for (const char* t : {"{}", R"({"a":1,"b":[true,{"c":null}],"d":"x"})", "{\n  \"a\": -1.5e3\n}"}) {
    EXPECT_TRUE(Accepts(*g, t)) << t;
  }
  for (const std::string& t : std::vector<std::string>{"[]", "1", "\"a\"", "{\"a\":1}x", "{  }",
                                                      "{\n" + std::string(21, ' ') + "}"}) {
    EXPECT_FALSE(Accepts(*g, t)) << t;
  }
}

TEST(JsonSchemaTest, PrefixAndSuffixAreLiteral) {
  ConstraintSpec spec;
  spec.kind = ConstraintSpec::Kind::kJsonSchema;
  spec.prefix = "<tool_call>\n{\"name\": \"f\", \"arguments\": ";
  spec.schema = Json::parse(R"({"type":"object","properties":{"q":{"type":"string"}},"required":["q"]})");
  spec.suffix = "}\n</tool_call>";
  auto g = CompileConstraint(spec);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(Accepts(*g, spec.prefix + R"({"q":"x"})" + spec.suffix));
  EXPECT_FALSE(Accepts(*g, R"({"q":"x"})"));
  EXPECT_FALSE(Accepts(*g, spec.prefix + R"({"q":"x"})"));
  EXPECT_FALSE(Accepts(*g, spec.prefix + R"({"q":1})" + spec.suffix));
}

TEST(JsonSchemaTest, RefusesWhatItCannotEnforce) {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {R"({"type":"string","pattern":"^(?!\\.)a$"})", "lookahead"},
      {R"({"type":"string","pattern":"(a)\\1"})", "backreference"},
      {R"({"type":"string","pattern":"\\bword"})", "word boundary"},
      {R"({"type":"string","pattern":"a{5000}"})", "count above 4096"},
      {R"({"type":"string","pattern":"[é]"})", "non-ASCII character in a class"},
      {R"({"type":"string","pattern":"(?i)abc"})", "inline flag"},
      {R"({"type":"string","pattern":"a|^b"})", "'^' inside the expression"},
      {R"({"type":"string","pattern":"(ab"})", "unterminated group"},
      {R"j({"type":"string","pattern":"a)"})j", "unmatched ')'"},
      {R"({"type":"string","pattern":"*a"})", "nothing to repeat"},
      {R"({"type":"string","pattern":"^a$","maxLength":3})", "put the length into the pattern"},
      {R"({"type":"object","properties":{"a":{"type":"string","format":"ipv6"}}})",
       "schema #/properties/a: format 'ipv6' is not supported (supported: date, date-time"},
      {R"({"type":"integer","minimum":5,"maximum":4})", "no integer satisfies"},
      {R"({"type":"integer","exclusiveMinimum":3,"exclusiveMaximum":4})", "no integer satisfies"},
      {R"({"type":"number","minimum":0.5})", "not an integer is supported on integers only"},
      {R"({"type":"number","multipleOf":0.3})", "multipleOf 0.3 is not supported"},
      {R"({"type":"integer","multipleOf":0})", "multipleOf must be a number above 0"},
      {R"({"type":"integer","minimum":1e17})", "above the largest number"},
      {R"({"type":"array","items":{"type":"string"},"uniqueItems":true})", "uniqueItems true"},
      {R"({"allOf":[{"type":"string"},{"type":"integer"}]})", "no type in common"},
      {R"({"allOf":[{"properties":{"a":{"type":"string"}}},{"properties":{"a":{"type":"integer"}}}]})",
       "property 'a' has different schemas"},
      {R"({"allOf":[{"properties":{"a":{}},"additionalProperties":false},
                    {"properties":{"b":{}},"required":["b"]}]})",
       "property 'b' is required by one allOf branch and not allowed"},
      {R"({"allOf":[{"const":1},{"const":2}]})", "'const' differs"},
      {R"({"type":"strin"})", "unknown type \"strin\""},
      {R"({"$ref":"#/$defs/missing"})", "points nowhere"},
      {R"({"$ref":"http://x/y"})", "not local"},
      {R"({"$ref":"#"})", "left-recursive"},
      {R"({"type":"object","properties":{},"required":["a"]})", "not in properties"},
      {R"({"type":"array","maxItems":5000})", "above the supported 4096"},
      {R"({"type":"string","minLength":3,"maxLength":2})", "minLength is above maxLength"},
      {R"({"enum":[]})", "enum must be a non-empty array"},
      {R"({"type":"object","properties":{"a":{}},"additionalProperties":true})",
       "together with properties"},
      {R"(false)", "accepts nothing"},
      {R"(3)", "must be an object or a boolean"},
      {R"({"anyOf":[{"type":"string"}],"type":"string"})", "together with other keywords"},
  };
  for (const auto& [schema, want] : cases) {
    auto g = Schema(schema);
    ASSERT_FALSE(g.ok()) << schema;
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << schema;
    EXPECT_NE(std::string(g.status().message()).find(want), std::string::npos)
        << schema << ": " << g.status();
  }
  auto strict = Schema(R"({"type":"object","additionalProperties":true})", /*strict=*/true);
  ASSERT_FALSE(strict.ok());
  EXPECT_NE(std::string(strict.status().message()).find("strict"), std::string::npos);
}

TEST(TokenConstraintTest, EogOnlyWhenCompleteAndFinishedAtTheEnd) {
  auto g = Schema(R"({"type":"array","items":{"type":"integer"},"maxItems":2})");
  ASSERT_TRUE(g.ok());
  TokenConstraint c(*g, ByteVocab());
  auto allowed = [&](int id) { return (c.AllowedTokens()[id >> 6] >> (id & 63)) & 1; };
  EXPECT_TRUE(allowed('['));
  EXPECT_FALSE(allowed('1'));
  EXPECT_FALSE(allowed(256));
  EXPECT_FALSE(c.Accept(256).ok());
  EXPECT_FALSE(c.Accept('x').ok());
  ASSERT_TRUE(c.AcceptBytes("[12").ok());
  EXPECT_TRUE(allowed('3'));
  EXPECT_TRUE(allowed(','));
  EXPECT_FALSE(allowed(256));
  ASSERT_TRUE(c.Accept(']').ok());
  EXPECT_TRUE(c.complete());
  EXPECT_TRUE(c.finished());
  EXPECT_TRUE(allowed(256));
  EXPECT_FALSE(allowed(' '));
  ASSERT_TRUE(c.Accept(256).ok());
  EXPECT_FALSE(c.Accept(']').ok());

  // A number may go on: complete but not finished.
  auto n = Schema(R"({"type":"integer"})");
  TokenConstraint d(*n, ByteVocab());
  ASSERT_TRUE(d.AcceptBytes("7").ok());
  EXPECT_TRUE(d.complete());
  EXPECT_FALSE(d.finished());
}

TEST(TokenConstraintTest, SamplerChoosesOnlyAllowedTokens) {
  auto g = Schema(R"({"enum":["yes","no"]})");
  TokenConstraint c(*g, ByteVocab());
  SamplingParams p;
  p.temperature = 0;
  auto sampler = Sampler::Create(p, 257);
  ASSERT_TRUE(sampler.ok());
  std::vector<float> logits(257, 0.0f);
  logits['x'] = 10;  // the model's favourite is not allowed
  logits['n'] = 1;
  SampledToken t;
  ASSERT_TRUE(sampler->Sample(logits, c.AllowedTokens(), &t).ok());
  EXPECT_EQ(t.token, '"');
  ASSERT_TRUE(c.Accept(t.token).ok());
  ASSERT_TRUE(sampler->Sample(logits, c.AllowedTokens(), &t).ok());
  EXPECT_EQ(t.token, 'n');
  // Wrong mask size, and a mask whose tokens are all -inf.
  EXPECT_FALSE(sampler->Sample(logits, std::vector<uint64_t>(2, ~0ull), &t).ok());
  std::vector<float> dead(257, -INFINITY);
  dead['x'] = 1;
  EXPECT_FALSE(sampler->Sample(dead, c.AllowedTokens(), &t).ok());
}

TEST(TokenConstraintTest, CompactingTheCachesKeepsTheState) {
  auto g = Schema(R"({"type":"array","items":{"type":"object","properties":{
      "a":{"type":"string","maxLength":5},"b":{"type":"array","items":{"type":"integer"}}},
      "required":["a","b"]},"maxItems":6})");
  ASSERT_TRUE(g.ok()) << g.status();
  const std::string doc = R"([{"a":"xy","b":[1,22]}, {"a":"","b":[]},{"a":"abcde","b":[3]}])";
  TokenConstraint big(*g, ByteVocab());
  TokenConstraint small(*g, ByteVocab(), /*max_states=*/4);
  for (char ch : doc) {
    const auto a = big.AllowedTokens();
    const auto b = small.AllowedTokens();
    ASSERT_EQ(std::vector<uint64_t>(a.begin(), a.end()), std::vector<uint64_t>(b.begin(), b.end()))
        << "before '" << ch << "'";
    ASSERT_TRUE(big.Accept(static_cast<uint8_t>(ch)).ok());
    ASSERT_TRUE(small.Accept(static_cast<uint8_t>(ch)).ok()) << ch;
    EXPECT_LE(small.states(), 4u + 1u);  // compacted after each token
  }
  EXPECT_TRUE(small.finished());
  EXPECT_GT(big.states(), 20u);
}

// --- the real Qwen2 vocabulary

std::string FixturesDir() {
  const char* env = std::getenv("MOESPLIT_FIXTURES_DIR");
  return env != nullptr ? env : MOESPLIT_FIXTURES_DIR;
}

const Tokenizer& Qwen2() {
  static const Tokenizer* tok = [] {
    auto gguf = GgufFile::Open(FixturesDir() + "/vocab/ggml-vocab-qwen2.gguf");
    if (!gguf.ok()) {
      std::fprintf(stderr, "%s\n", std::string(gguf.status().message()).c_str());
      std::abort();
    }
    return Tokenizer::FromGguf(**gguf)->release();
  }();
  return *tok;
}

TEST(TokenConstraintTest, MaskOnTheQwen2VocabularyMatchesTokenByTokenChecks) {
  const Tokenizer& tok = Qwen2();
  auto vocab = VocabIndex::FromTokenizer(tok);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  auto g = Schema(R"({"type":"object","properties":{
      "name":{"type":"string","maxLength":12},
      "tags":{"type":"array","items":{"enum":["a","bb"]},"maxItems":3},
      "score":{"type":"number"}},"required":["name","tags","score"]})");
  ASSERT_TRUE(g.ok()) << g.status();
  const std::string text = R"({"name": "Zoë \"Z\"", "tags": ["bb", "a"], "score": -12.5})";
  auto ids = tok.Encode(text, /*parse_special=*/false, /*add_special=*/false);
  ASSERT_TRUE(ids.ok());
  TokenConstraint c(*g, *vocab);
  const int32_t im_start = tok.FindToken("<|im_start|>");
  ASSERT_GE(im_start, 0);
  ASSERT_FALSE(tok.EndOfGenerationIds().empty());
  const int32_t eog = tok.EndOfGenerationIds()[0];
  for (size_t step = 0; step <= ids->size(); ++step) {
    const std::vector<uint64_t> mask(c.AllowedTokens().begin(), c.AllowedTokens().end());
    auto allowed = [&](int32_t id) { return (mask[id >> 6] >> (id & 63)) & 1; };
    size_t n_allowed = 0;
    for (int32_t id = 0; id < tok.n_vocab(); ++id) {
      const bool expect = tok.IsEndOfGeneration(id)
                              ? c.complete()
                              : (*vocab)->usable(id) && c.CanAccept((*vocab)->piece(id));
      ASSERT_EQ(allowed(id), expect) << "step " << step << " token " << id << " '"
                                     << tok.Piece(id) << "'";
      n_allowed += expect;
    }
    EXPECT_GT(n_allowed, 0u) << step;
    EXPECT_FALSE(allowed(im_start)) << step;
    EXPECT_EQ(allowed(eog), step == ids->size()) << step;
    if (step < ids->size()) {
      ASSERT_TRUE(allowed((*ids)[step])) << "step " << step << " '" << tok.Piece((*ids)[step]) << "'";
      ASSERT_TRUE(c.Accept((*ids)[step]).ok());
    }
  }
  EXPECT_TRUE(c.finished());
  EXPECT_TRUE(c.Accept(eog).ok());
}

// A grammar's Tag allows the vocabulary's special token of that text (and
// the text spelled out); nothing else allows a special token, however its
// text fits, and no normal token can spell a token's mark.
TEST(TokenConstraintTest, TagsAllowTheSpecialTokenAndTheTextOnly) {
  auto spec = MakeTestVocab(400, TestVocabStyle::kHarmony);
  ASSERT_TRUE(spec.ok()) << spec.status();
  spec->tokens.push_back("<tool_call>");
  if (!spec->types.empty()) spec->types.push_back(TokenType::kUserDefined);
  auto tok = Tokenizer::FromSpec(*spec);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const Tokenizer& t = **tok;
  auto vocab = VocabIndex::FromTokenizer(t);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  const int32_t channel = t.FindToken("<|channel|>"), message = t.FindToken("<|message|>");
  const int32_t call = t.FindToken("<|call|>"), tool_call = t.FindToken("<tool_call>");
  const int32_t lt = t.FindToken("<");
  ASSERT_TRUE(channel >= 0 && message >= 0 && call >= 0 && tool_call >= 0 && lt >= 0);
  ASSERT_TRUE(t.IsEndOfGeneration(call));
  EXPECT_EQ((*vocab)->piece(channel), grammar::TokenBytes("<|channel|>"));
  EXPECT_EQ((*vocab)->piece(tool_call), grammar::TokenBytes("<tool_call>"));
  for (int32_t id = 0; id < t.n_vocab(); ++id) {
    if (t.Piece(id).find('\xFF') != std::string::npos) {
      EXPECT_FALSE((*vocab)->usable(id)) << id;
    }
  }

  grammar::GrammarBuilder b;
  const std::vector<std::string_view> tags = {"<|channel|>", "<tool_call>"};
  const uint32_t root = b.Rule("root", {b.TextWithTags("<|channel|>x<tool_call>", tags)});
  auto g = b.Build(root);
  ASSERT_TRUE(g.ok()) << g.status();
  TokenConstraint c(*g, *vocab);
  auto allowed = [&](int32_t id) { return (c.AllowedTokens()[id >> 6] >> (id & 63)) & 1; };
  EXPECT_TRUE(allowed(channel));
  EXPECT_TRUE(allowed(lt));  // spelled out
  EXPECT_FALSE(allowed(message));
  EXPECT_FALSE(allowed(tool_call));
  EXPECT_FALSE(allowed(call));
  ASSERT_TRUE(c.Accept(channel).ok());
  EXPECT_FALSE(c.Accept(channel).ok());
  ASSERT_TRUE(c.AcceptBytes("x").ok());
  EXPECT_TRUE(allowed(tool_call));
  ASSERT_TRUE(c.Accept(tool_call).ok());
  EXPECT_TRUE(c.complete());
  EXPECT_TRUE(allowed(call));
  // The same sentence spelled out, token by token of the plain text.
  TokenConstraint spelled(*g, *vocab);
  auto ids = t.Encode("<|channel|>x<tool_call>", /*parse_special=*/false, /*add_special=*/false);
  ASSERT_TRUE(ids.ok());
  for (int32_t id : *ids) ASSERT_TRUE(spelled.Accept(id).ok()) << t.Piece(id);
  EXPECT_TRUE(spelled.complete());

  // Knowing the vocabulary, a tag it holds is only the token and one it
  // lacks only the text.
  grammar::GrammarBuilder known(VocabIndex::SpecialTokenTest(t));
  const std::vector<std::string_view> known_tags = {"<|channel|>", "<nope>"};
  auto k = known.Build(known.Rule("root", {known.TextWithTags("<|channel|><nope>", known_tags)}));
  ASSERT_TRUE(k.ok()) << k.status();
  TokenConstraint strict(*k, *vocab);
  auto strict_allowed = [&](int32_t id) { return (strict.AllowedTokens()[id >> 6] >> (id & 63)) & 1; };
  EXPECT_TRUE(strict_allowed(channel));
  EXPECT_FALSE(strict_allowed(lt));
  ASSERT_TRUE(strict.Accept(channel).ok());
  EXPECT_TRUE(strict_allowed(lt));
  ASSERT_TRUE(strict.AcceptBytes("<nope>").ok());
  EXPECT_TRUE(strict.complete());
  EXPECT_FALSE(VocabIndex::SpecialTokenTest(t)("<|call|>"));  // ends generation
  EXPECT_FALSE(VocabIndex::SpecialTokenTest(t)("x"));

  // Inside a JSON string, whose text "<|channel|>" would fit, no special
  // token is allowed.
  auto str = Schema(R"({"type":"string"})");
  ASSERT_TRUE(str.ok());
  TokenConstraint in_string(*str, *vocab);
  ASSERT_TRUE(in_string.AcceptBytes("\"").ok());
  const auto mask = in_string.AllowedTokens();
  for (int32_t id : {channel, message, tool_call}) EXPECT_FALSE((mask[id >> 6] >> (id & 63)) & 1) << id;
  EXPECT_TRUE((mask[lt >> 6] >> (lt & 63)) & 1);
}

TEST(TokenConstraintTest, StringContentMaskIsCachedPerState) {
  auto vocab = VocabIndex::FromTokenizer(Qwen2());
  ASSERT_TRUE(vocab.ok());
  auto g = Schema(R"({"type":"string"})");
  TokenConstraint c(*g, *vocab);
  ASSERT_TRUE(c.AcceptBytes("\"ab").ok());
  const size_t before = c.states();
  const uint64_t* first = c.AllowedTokens().data();
  ASSERT_TRUE(c.AcceptBytes("cd").ok());
  // Inside an unbounded string every character leads back to one state.
  EXPECT_EQ(c.AllowedTokens().data(), first);
  EXPECT_GE(c.states(), before);
}

}  // namespace
}  // namespace moesplit
