// Language tests of the Jinja engine: a table of templates whose expected
// output was rendered by Python jinja2 (jinja_cases.inc), error messages,
// Undefined semantics, resource limits and Value formatting.
#include "common/chat/jinja.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moesplit::chat {
namespace {

using ::testing::HasSubstr;

struct RenderCase {
  const char* source;
  const char* expected;
};

const RenderCase kJinja2Cases[] = {
#include "common/chat/jinja_cases.inc"
};

// The context jinja_cases.py renders with.
ValueDict TestContext() {
  const auto json = nlohmann::ordered_json::parse(R"({
    "msgs": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
    "n": 3, "s": "Hello World", "d": {"b": 2, "a": 1}, "none_v": null, "f": 2.5,
    "lst": [3, 1, 2], "uni": "naïve café — 日本語 🦙"})");
  ValueDict vars;
  for (auto it = json.begin(); it != json.end(); ++it) vars.Put(it.key(), *Value::FromJson(it.value()));
  return vars;
}

absl::StatusOr<std::string> RenderString(std::string_view source, const RenderLimits& limits = {}) {
  absl::StatusOr<JinjaTemplate> t = JinjaTemplate::Parse(source);
  if (!t.ok()) return t.status();
  return t->Render(TestContext(), limits);
}

TEST(JinjaTest, MatchesPythonJinja2) {
  int passed = 0;
  for (const RenderCase& c : kJinja2Cases) {
    absl::StatusOr<std::string> out = RenderString(c.source);
    ASSERT_TRUE(out.ok()) << "template: " << c.source << "\nerror: " << out.status();
    EXPECT_EQ(*out, c.expected) << "template: " << c.source;
    passed += *out == c.expected;
  }
  EXPECT_GE(sizeof(kJinja2Cases) / sizeof(kJinja2Cases[0]), 100u);
  std::printf("jinja2 cases: %d/%zu match\n", passed, sizeof(kJinja2Cases) / sizeof(kJinja2Cases[0]));
}

// Where the engine deliberately differs from jinja2's default Undefined
// (which raises on any attribute of an undefined value): chained access on
// Undefined stays Undefined, as llama.cpp's engine does.
TEST(JinjaTest, UndefinedIsChainable) {
  const RenderCase cases[] = {
      {"[{{ x.y }}]", "[]"},
      {"[{{ x.y.z }}]", "[]"},
      {"{{ x.y is defined }}", "False"},
      {"{{ x['k'][0] is undefined }}", "True"},
      {"{{ msgs[0].tool_calls.name is defined }}", "False"},
      {"[{{ x[1:2] }}]", "[]"},
  };
  for (const RenderCase& c : cases) {
    absl::StatusOr<std::string> out = RenderString(c.source);
    ASSERT_TRUE(out.ok()) << c.source << ": " << out.status();
    EXPECT_EQ(*out, c.expected) << c.source;
  }
}

struct ErrorCase {
  const char* source;
  absl::StatusCode code;
  const char* message;  // expected substring
};

TEST(JinjaTest, ErrorsArePreciseStatuses) {
  const ErrorCase cases[] = {
      {"{{ 1 + }}", absl::StatusCode::kInvalidArgument,
       "template syntax error at line 1, column 8: expected an expression, got end of print statement '}}'"},
      {"a\n{% if x %}b", absl::StatusCode::kInvalidArgument,
       "template syntax error at line 2, column 12: unexpected end of template; expected 'elif' or "
       "'else' or 'endif' to close the 'if' block opened at line 2, column 1"},
      {"{% for x in y %}{% endif %}", absl::StatusCode::kInvalidArgument,
       "line 1, column 20: unexpected 'endif' (no open block it could close)"},
      {"{{ x|nofilter }}", absl::StatusCode::kInvalidArgument,
       "template syntax error at line 1, column 6: unknown filter 'nofilter'"},
      {"{{ x is nosuchtest }}", absl::StatusCode::kInvalidArgument, "line 1, column 9: unknown test 'nosuchtest'"},
      {"{% foo %}", absl::StatusCode::kInvalidArgument, "line 1, column 4: unknown tag 'foo'"},
      {"{% include 'x' %}", absl::StatusCode::kInvalidArgument, "unsupported tag 'include'"},
      {"{% break %}", absl::StatusCode::kInvalidArgument, "'break' outside of a for loop"},
      {"{{ 'abc' ", absl::StatusCode::kInvalidArgument, "line 1, column 1: unexpected end of template: the tag opened here was never closed with '}}'"},
      {"x {# never closed", absl::StatusCode::kInvalidArgument, "line 1, column 3: missing end of comment tag"},
      {"{{ 'unterminated }}", absl::StatusCode::kInvalidArgument, "line 1, column 4: unterminated string literal"},
      {"{{ (1 ]) }}", absl::StatusCode::kInvalidArgument, "line 1, column 7: unexpected ']'"},
      {"{{ 1 $ 2 }}", absl::StatusCode::kInvalidArgument, "unexpected character '$'"},
      {"{{ 99999999999999999999 }}", absl::StatusCode::kInvalidArgument, "integer literal out of range"},
      {"{{ f(1, a=2, 3) }}", absl::StatusCode::kInvalidArgument, "positional argument follows keyword argument"},
      {"{% macro m(a=1, b) %}{% endmacro %}", absl::StatusCode::kInvalidArgument,
       "non-default argument follows default argument"},
      {"{% set true = 1 %}", absl::StatusCode::kInvalidArgument, "cannot assign to 'true'"},
      {"{% for x in y recursive %}{% endfor %}", absl::StatusCode::kInvalidArgument, "recursive for loops are not supported"},
      {"{{ 'a' + 1 }}", absl::StatusCode::kInvalidArgument,
       "template error at line 1, column 8: TypeError: can only concatenate str (not \"int\") to str"},
      {"x\n\n  {{ 1 < 'a' }}", absl::StatusCode::kInvalidArgument,
       "template error at line 3, column 8: TypeError: '<' not supported between instances of 'int' and 'str'"},
      {"{{ 1 / 0 }}", absl::StatusCode::kInvalidArgument, "ZeroDivisionError: division by zero"},
      {"{{ 5 // 0 }}", absl::StatusCode::kInvalidArgument, "ZeroDivisionError: integer division or modulo by zero"},
      {"{{ nothing + 1 }}", absl::StatusCode::kInvalidArgument, "UndefinedError: 'nothing' is undefined"},
      {"{{ nothing() }}", absl::StatusCode::kInvalidArgument, "UndefinedError: 'nothing' is undefined"},
      {"{{ n() }}", absl::StatusCode::kInvalidArgument, "TypeError: 'int' object is not callable"},
      {"{{ none_v.startswith('x') }}", absl::StatusCode::kInvalidArgument,
       "UndefinedError: 'NoneType object' has no attribute 'startswith'"},
      {"{{ lst.nope() }}", absl::StatusCode::kInvalidArgument, "UndefinedError: 'list object' has no attribute 'nope'"},
      {"{{ d.zz + 1 }}", absl::StatusCode::kInvalidArgument, "UndefinedError: 'dict object' has no attribute 'zz'"},
      {"{{ lst[7] + 1 }}", absl::StatusCode::kInvalidArgument, "UndefinedError: 'list object' has no element 7"},
      {"{{ ghost.a.b + 1 }}", absl::StatusCode::kInvalidArgument, "UndefinedError: 'ghost' is undefined"},
      {"{{ x|tojson }}", absl::StatusCode::kInvalidArgument, "Object of type Undefined is not JSON serializable"},
      {"{{ n|length }}", absl::StatusCode::kInvalidArgument, "TypeError: object of type 'int' has no len()"},
      {"{% for a in n %}{% endfor %}", absl::StatusCode::kInvalidArgument, "TypeError: 'int' object is not iterable"},
      {"{% for a, b in [[1]] %}{% endfor %}", absl::StatusCode::kInvalidArgument,
       "ValueError: not enough values to unpack (expected 2, got 1)"},
      {"{% set d2 = {} %}{% set d2.x = 1 %}", absl::StatusCode::kInvalidArgument,
       "cannot assign attribute 'x' on non-namespace object 'd2' (dict)"},
      {"{{ {[1]: 2} }}", absl::StatusCode::kInvalidArgument, "unhashable type: 'list'"},
      {"{{ 'a'.split('') }}", absl::StatusCode::kInvalidArgument, "ValueError: empty separator"},
      {"{{ lst|sort(nope=1) }}", absl::StatusCode::kInvalidArgument, "filter 'sort' got an unexpected keyword argument 'nope'"},
      {"{{ 9223372036854775807 + 1 }}", absl::StatusCode::kInvalidArgument, "integer overflow"},
      {"{{ [1, 'a']|sort }}", absl::StatusCode::kInvalidArgument, "'<' not supported"},
      {"{{ range(1, 2, 0) }}", absl::StatusCode::kInvalidArgument, "range() arg 3 must not be zero"},
      {"{% macro m(a) %}{% endmacro %}{{ m(1, a=2) }}", absl::StatusCode::kInvalidArgument,
       "macro 'm' got multiple values for argument 'a'"},
      {"{% macro m(a) %}{{ 1 / a }}{% endmacro %}\n{{ m(0) }}", absl::StatusCode::kInvalidArgument,
       "template error at line 1, column 22: ZeroDivisionError"},
      // Resource limits.
      {"{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", absl::StatusCode::kResourceExhausted,
       "template recursion is deeper than the limit"},
      {"{% for i in range(100000000) %}{% endfor %}", absl::StatusCode::kResourceExhausted,
       "longer than the limit of 1048576 items"},
      {"{{ 'x' * 100000000 }}", absl::StatusCode::kResourceExhausted, "larger than the limit"},
      {"{% for i in range(1000000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}",
       absl::StatusCode::kResourceExhausted, "template exceeded the limit of 2000000 evaluation steps"},
      {"{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
       absl::StatusCode::kResourceExhausted, "larger than the limit"},
  };
  RenderLimits limits;
  limits.max_steps = 2'000'000;  // keeps the step-limit case short
  for (const ErrorCase& c : cases) {
    absl::StatusOr<std::string> out = RenderString(c.source, limits);
    ASSERT_FALSE(out.ok()) << c.source << " rendered " << *out;
    EXPECT_EQ(out.status().code(), c.code) << c.source << ": " << out.status();
    EXPECT_THAT(std::string(out.status().message()), HasSubstr(c.message)) << c.source;
  }
}

TEST(JinjaTest, DeepNestingIsRejectedNotCrashing) {
  const std::string parens = std::string(5000, '(') + "1" + std::string(5000, ')');
  const std::string chain = "{{ 1" + [] { std::string s; for (int i = 0; i < 20000; ++i) s += " + 1"; return s; }() + " }}";
  const std::string unary = "{{ " + std::string(20000, '-') + "1 }}";
  const std::string nots = "{{ " + [] { std::string s; for (int i = 0; i < 20000; ++i) s += "not "; return s; }() + "1 }}";
  std::string blocks;
  for (int i = 0; i < 5000; ++i) blocks += "{% if true %}";
  for (const std::string& src : {"{{ " + parens + " }}", chain, unary, nots, blocks}) {
    absl::StatusOr<JinjaTemplate> t = JinjaTemplate::Parse(src);
    ASSERT_FALSE(t.ok());
    EXPECT_THAT(std::string(t.status().message()), testing::AnyOf(HasSubstr("nested too deeply"),
                                                                   HasSubstr("blocks are nested too deeply")));
  }
}

TEST(JinjaTest, DeepValuesAreReleasedWithoutRecursion) {
  // 200k nested lists built at run time; destruction must not overflow the stack.
  absl::StatusOr<std::string> out = RenderString(
      "{% set ns = namespace(x=[]) %}{% for i in range(200000) %}{% set ns.x = [ns.x] %}{% endfor %}ok");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "ok");
  RenderLimits small;
  small.max_output_bytes = 100;
  absl::StatusOr<std::string> big = RenderString("{% for i in range(50) %}0123456789{% endfor %}", small);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(JinjaTest, OptionsControlWhitespace) {
  const std::string src = "  {% if true %}\nx\n  {% endif %}\n";
  struct {
    JinjaOptions options;
    const char* expected;
  } cases[] = {
      {{true, true, false}, "x\n"},
      {{false, false, false}, "  \nx\n  "},
      {{false, false, true}, "  \nx\n  \n"},
      {{true, false, false}, "  x\n  "},
  };
  for (const auto& c : cases) {
    absl::StatusOr<JinjaTemplate> t = JinjaTemplate::Parse(src, c.options);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(*t->Render(ValueDict()), c.expected)
        << c.options.trim_blocks << c.options.lstrip_blocks << c.options.keep_trailing_newline;
  }
}

TEST(JinjaTest, NewlinesAreNormalised) {
  absl::StatusOr<std::string> out = RenderString("a\r\nb\rc{% if true %}\r\nd{% endif %}");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "a\nb\ncd");
}

TEST(ValueTest, PythonFloatRepr) {
  const std::pair<double, const char*> cases[] = {
      {1.0, "1.0"}, {0.1, "0.1"}, {1e16, "1e+16"}, {1e15, "1000000000000000.0"}, {1.5e-5, "1.5e-05"},
      {0.0001, "0.0001"}, {-2.5, "-2.5"}, {123456789.125, "123456789.125"}, {1e300 * 10, "1e+301"},
      {0.30000000000000004, "0.30000000000000004"}, {-0.0, "-0.0"}, {5e-324, "5e-324"},
  };
  for (const auto& [v, expected] : cases) EXPECT_EQ(FormatPythonFloat(v), expected) << v;
}

TEST(ValueTest, ReprAndJson) {
  Value d = Value::Dict();
  d.dict().Put("k", Value::List({Value(1), Value("it's"), Value::None(), Value(true), Value(2.0)}));
  EXPECT_EQ(d.Repr(), "{'k': [1, \"it's\", None, True, 2.0]}");
  Value::JsonOptions opt;
  EXPECT_EQ(*d.ToJson(opt), "{\"k\": [1, \"it's\", null, true, 2.0]}");
  opt.indent = "  ";
  EXPECT_EQ(*d.ToJson(opt), "{\n  \"k\": [\n    1,\n    \"it's\",\n    null,\n    true,\n    2.0\n  ]\n}");
  EXPECT_EQ(*Value("\x01\xe2\x82\xac\xf0\x9f\xa6\x99").ToJson({}), "\"\\u0001\xe2\x82\xac\xf0\x9f\xa6\x99\"");
  Value::JsonOptions ascii;
  ascii.ensure_ascii = true;
  EXPECT_EQ(*Value("\xe2\x82\xac\xf0\x9f\xa6\x99").ToJson(ascii), "\"\\u20ac\\ud83e\\udd99\"");
  EXPECT_EQ(PythonStringRepr("a\nb\x7f"), "'a\\nb\\x7f'");
}

TEST(ValueTest, DictKeysFollowPythonHashing) {
  Value d = Value::Dict();
  ASSERT_TRUE(d.dict().Set(Value(1), Value("int")).ok());
  ASSERT_TRUE(d.dict().Set(Value(1.0), Value("float")).ok());
  ASSERT_TRUE(d.dict().Set(Value(true), Value("bool")).ok());
  EXPECT_EQ(d.dict().size(), 1u);
  EXPECT_EQ(d.dict().Find(Value(1))->as_string(), "bool");
  EXPECT_FALSE(d.dict().Set(Value::List(), Value(1)).ok());
  EXPECT_TRUE(d.dict().Erase(Value(1)));
  EXPECT_EQ(d.dict().size(), 0u);
}

TEST(ValueTest, FromJsonRejectsExcessiveNesting) {
  std::string deep(1000, '[');
  deep += std::string(1000, ']');
  EXPECT_FALSE(Value::FromJson(nlohmann::json::parse(deep)).ok());
  absl::StatusOr<Value> ok = Value::FromJson(nlohmann::json::parse("[[[1]]]"));
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->Repr(), "[[[1]]]");
}

}  // namespace
}  // namespace moesplit::chat
