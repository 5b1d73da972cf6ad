// GBNF compiled into the byte grammar: sentences accepted and rejected for
// grammars written in the style of llama.cpp's examples (JSON, arithmetic,
// a bullet list; the texts are written here), every operator, Unicode
// classes, special tokens, and errors with their positions.
#include "common/sampling/gbnf.h"

#include <string>
#include <vector>

#include "common/sampling/token_constraint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moesplit::grammar {
namespace {

using ::testing::HasSubstr;

// Token i < 256 is byte i; 256 is the EOG token; 257 is the special token
// "<think>" (filed under its TokenBytes).
std::shared_ptr<const VocabIndex> ByteVocab() {
  static const auto* v = [] {
    std::vector<std::string> pieces;
    for (int b = 0; b < 256; ++b) pieces.push_back(std::string(1, static_cast<char>(b)));
    pieces.push_back("<eog>");
    pieces.push_back(TokenBytes("<think>"));
    std::vector<bool> usable(258, true);
    return new std::shared_ptr<const VocabIndex>(*VocabIndex::Create(pieces, usable, {256}));
  }();
  return *v;
}

TokenTest HasThink() {
  return [](std::string_view t) { return t == "<think>"; };
}

// Whether `text` is a complete sentence of the grammar.
bool Accepts(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  TokenConstraint c(g, ByteVocab());
  return c.AcceptBytes(text).ok() && c.complete();
}

struct Case {
  const char* name;
  const char* gbnf;
  std::vector<std::string> accept;
  std::vector<std::string> reject;
};

// A JSON grammar as llama.cpp's json.gbnf writes it (the same language,
// our own text): objects, arrays, strings with escapes, numbers, literals,
// bounded whitespace.
constexpr char kJson[] = R"g(# JSON
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::=
  "{" ws (
    string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws
array ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\"" ws
number ::= "-"? ( [0-9] | [1-9] [0-9]{0,15} ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]{1,3} )? ws
ws ::= | " " | "\n" [ \t]{0,20}
)g";

// Arithmetic lines "expr = term" as llama.cpp's arithmetic.gbnf has them.
constexpr char kArithmetic[] = R"g(root  ::= (expr "=" ws term "\n")+
expr  ::= term ([-+*/] term)*
term  ::= ident | num | "(" ws expr ")" ws
ident ::= [a-z] [a-z0-9_]* ws
num   ::= [0-9]+ ws
ws    ::= [ \t\n]*
)g";

// A bullet list whose items hold no line break of any kind (list.gbnf's
// language): multi-byte code points excluded by a negated class.
constexpr char kList[] = "root ::= item+\n"
                         "item ::= \"- \" [^\\r\\n\\x0b\\x0c\\x85\\u2028\\u2029]+ \"\\n\"\n";

TEST(GbnfTest, ExampleGrammarsAcceptTheirLanguageOnly) {
  const std::vector<Case> cases = {
      {"json",
       kJson,
       {R"({})", R"({"a":1})", R"({"a": [1, -2.5e10, "x\n\u00e9"], "b": {"c": null}})",
        "{\"k\": true, \"l\": false}\n", "{\"caf\xc3\xa9\": \"\xe2\x98\x83\"}"},
       {R"([])", R"({"a":})", R"({"a":01})", R"({'a':1})", "{\"a\":\"x\ny\"}", R"({"a":1,})",
        R"({"a":"\q"})"}},
      {"arithmetic",
       kArithmetic,
       {"x=1\n", "a +b *(c -2) = 42\n", "(x)=y\n1/2=3\n"},
       {"x=1", "=1\n", "x==1\n", "X=1\n", "a + b=1\n", "x=1\n="}},
      {"list",
       kList,
       {"- a\n", "- one\n- two words\n", "- caf\xc3\xa9 \xe2\x98\x83\n"},
       {"", "- \n", "-a\n", "- a", "- a\rb\n", "- a\xc2\x85" "b\n", "- a\xe2\x80\xa8" "b\n",
        "* a\n"}},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::shared_ptr<const Grammar>> g = ParseGbnf(c.gbnf, nullptr);
    ASSERT_TRUE(g.ok()) << c.name << ": " << g.status();
    for (const std::string& s : c.accept) EXPECT_TRUE(Accepts(*g, s)) << c.name << ": " << s;
    for (const std::string& s : c.reject) EXPECT_FALSE(Accepts(*g, s)) << c.name << ": " << s;
  }
}

TEST(GbnfTest, EveryOperator) {
  const std::vector<Case> cases = {
      {"alternatives and groups", R"(root ::= ("a" | "b") ("c" | ))", {"a", "bc", "ac"}, {"", "c", "abc"}},
      {"star", R"(root ::= "x" "ab"*)", {"x", "xab", "xabab"}, {"xa", "xaba"}},
      {"plus", R"(root ::= [0-9]+)", {"0", "123"}, {"", "1a"}},
      {"optional", R"(root ::= "a"? "b")", {"b", "ab"}, {"aab", "a"}},
      {"exactly", R"(root ::= "a"{3})", {"aaa"}, {"aa", "aaaa"}},
      {"at least", R"(root ::= "a"{2,})", {"aa", "aaaaa"}, {"a"}},
      {"between", R"(root ::= "a"{1,3})", {"a", "aaa"}, {"", "aaaa"}},
      {"at most", R"(root ::= "a"{,2} "b")", {"b", "ab", "aab"}, {"aaab"}},
      {"spaces in braces", R"(root ::= "a"{ 1 , 2 })", {"a", "aa"}, {"aaa"}},
      {"group repeated", R"(root ::= ("ab" | "c"){2})", {"abab", "cab", "cc"}, {"ab", "abc c"}},
      {"rule references", "root ::= greet \" \" name\ngreet ::= \"hi\" | \"hello\"\nname ::= [A-Z] [a-z]*\n",
       {"hi Bob", "hello A"}, {"hi bob", "hey Bob"}},
      {"newlines inside groups", "root ::= (\n  \"a\"\n  | \"b\"\n)\n", {"a", "b"}, {"ab"}},
      {"comments", "# leading\nroot ::= \"a\" # trailing\n# after\n", {"a"}, {"b"}},
      {"crlf", "root ::= r2\r\nr2 ::= \"z\"\r\n", {"z"}, {"zz"}},
      {"escapes", R"(root ::= "\x41\u00e9\U0001F600\t\"\\\[\]\-")",
       {"A\xc3\xa9\xf0\x9f\x98\x80\t\"\\[]-"}, {"A"}},
      {"class ranges and escapes", R"(root ::= [a-c\-\]x]+)", {"abc", "-]x"}, {"d", "\\"}},
      {"dash at the end of a class", R"(root ::= [a-]+)", {"a-a"}, {"b"}},
      {"negated class", R"(root ::= [^a-z]+)", {"ABC", "\xc3\xa9", "\xf4\x8f\xbf\xbf"},
       {"a", "\xed\xa0\x80", "\xff"}},
      {"unicode range", "root ::= [\xce\xb1-\xcf\x89]+",  // α-ω
       {"\xce\xb1\xce\xb2\xcf\x89"}, {"a", "\xce\x91"}},
      {"any character", R"(root ::= "<" . ">")",
       {"<a>", "<\n>", "<\xc3\xa9>", "<\xe2\x98\x83>", "<\xf0\x9f\x98\x80>"},
       {"<>", "<ab>", "<\xff>", "<\x80>", "<\xc3>"}},
      {"empty rule", "root ::= \"a\" e\ne ::=\n", {"a"}, {"ab"}},
      {"repeated repetition", R"(root ::= "a"{2}{2})", {"aaaa"}, {"aa"}},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::shared_ptr<const Grammar>> g = ParseGbnf(c.gbnf, nullptr);
    ASSERT_TRUE(g.ok()) << c.name << ": " << g.status();
    for (const std::string& s : c.accept) EXPECT_TRUE(Accepts(*g, s)) << c.name << ": " << s;
    for (const std::string& s : c.reject) EXPECT_FALSE(Accepts(*g, s)) << c.name << ": " << s;
  }
}

TEST(GbnfTest, SpecialTokensByTheirText) {
  absl::StatusOr<std::shared_ptr<const Grammar>> g =
      ParseGbnf(R"(root ::= <think> [a-z]+ "!")", HasThink());
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(Accepts(*g, TokenBytes("<think>") + "abc!"));
  EXPECT_FALSE(Accepts(*g, "<think>abc!"));  // the text is not the token
  TokenConstraint c(*g, ByteVocab());
  const auto mask = c.AllowedTokens();
  EXPECT_TRUE((mask[257 / 64] >> (257 % 64)) & 1);  // the token itself is allowed first
  EXPECT_FALSE((mask['<' / 64] >> ('<' % 64)) & 1);
}

TEST(GbnfTest, ErrorsSayWhereParsingStopped) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"root = \"a\"", "expecting ::= at line 1, column 6 (\"= \"a\"\")"},
      {"root ::= \"a\"\nnext \"b\"", "expecting ::= at line 2, column 6 (\"\"b\"\")"},
      {"root ::= \"a", "unterminated string literal at line 1, column 10"},
      {"root ::= \"\\q\"", "unknown escape at line 1, column 11"},
      {"root ::= \"\\x4\"", "expecting 2 hex digits at line 1, column 13"},
      {"root ::= [a-z", "unterminated character class at line 1, column 10"},
      {"root ::= [z-a]", "character range out of order at line 1, column 10"},
      {"root ::= (\"a\"", "expecting ')' at line 1, column 14 (end of input)"},
      {"root ::= * \"a\"", "expecting an item before */+/?/{ at line 1, column 10"},
      {"root ::= \"a\"{2001}", "more than 2000 repetitions at line 1, column 14"},
      {"root ::= \"a\"{3,2}", "repetition maximum below its minimum at line 1, column 14"},
      {"root ::= \"a\"{x}", "expecting an integer at line 1, column 14"},
      {"root ::= \"a\" )", "expecting newline or end at line 1, column 14"},
      {"root ::= <[12]>", "token ids (<[id]>) are not supported"},
      {"root ::= !<think>", "negated tokens (!<...>) are not supported"},
      {"root ::= <nope>", "'<nope>' is not a special token of this model at line 1, column 10"},
      {"root ::= x", "rule 'x' is used but never defined (line 1, column 10"},
      {"root ::= \"a\"\nroot ::= \"b\"", "rule 'root' is defined twice at line 2, column 1"},
      {"start ::= \"a\"", "no 'root' rule"},
      {"root ::= root \"a\" | \"b\"", "left-recursive at 'root'"},
      {"root ::= [^\\x00-\\U0010FFFF]", "the character class matches no character"},
      {std::string("root ::= \"a\0\"", 13), "unexpected NUL byte at line 1, column 12"},
      {"root ::= \"\xc3\"", "invalid UTF-8 at line 1, column 11"},
  };
  for (const auto& [text, want] : cases) {
    absl::StatusOr<std::shared_ptr<const Grammar>> g = ParseGbnf(text, HasThink());
    ASSERT_FALSE(g.ok()) << text;
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(std::string(g.status().message()), HasSubstr(want)) << text;
    EXPECT_EQ(std::string(g.status().message()).rfind("grammar: ", 0), 0u) << g.status();
  }
}

}  // namespace
}  // namespace moesplit::grammar
