// GBNF: llama.cpp's grammar language (its grammars/README.md is the spec,
// src/llama-grammar.cpp the reference parser), compiled into the byte
// grammar of grammar.h, so that the `grammar` request field constrains
// decoding with the same TokenConstraint as JSON Schema does.
//
//   root ::= item ("," item)*        rules: name ::= alternatives; names are
//   item ::= [a-z]+ | "\"" [^"]* "\""   [A-Za-z0-9-]+; `root` is the start
//
// Supported as llama.cpp parses them: literals "..." and character classes
// [...] / [^...] with ranges (escapes \x.. \u.... \U........ \t \r \n \\ \"
// \[ \] \-; other characters are UTF-8), `.` (any character), rule
// references, groups ( ... ), alternatives |, repetition * + ? {m} {m,}
// {m,n} {,n} (m at most 2000; a bound n above 2000 means unbounded, as
// llama.cpp has it), # comments, rules ended by a newline (newlines are free
// inside groups), empty alternatives. Characters are Unicode code points:
// a class matches the UTF-8 encoding of each code point it holds (a negated
// class and `.` hold every code point but the surrogates, U+D800..DFFF,
// which UTF-8 cannot carry).
//
// Tokens: `<text>` where `text` (with the brackets) is one special token of
// the vocabulary (`<think>`, `<|im_end|>`) matches that token
// (grammar::TokenBytes; `has_token` says which texts are); any other
// `<...>`, a token id `<[id]>` and a negated token `!<...>` are refused:
// the byte grammar names tokens only by their text.
//
// Errors (InvalidArgument, nothing built): the message starts with "grammar"
// and gives the 1-based line and column where parsing stopped, e.g.
// `grammar: expecting ::= at line 2, column 6 ("= [a-z]")`; a rule used but
// never defined, a rule defined twice, no `root` rule, and left recursion
// (grammar.h) are errors of the whole grammar, naming the rule.
//
// Thread-safe: a pure function.
#pragma once

#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/sampling/grammar.h"

namespace moesplit::grammar {

// The largest GBNF text ParseGbnf reads (bytes).
inline constexpr size_t kMaxGbnfBytes = size_t{1} << 20;

// `has_token`: which `<text>` are special tokens of the vocabulary (null:
// none is, every `<...>` is refused).
absl::StatusOr<std::shared_ptr<const Grammar>> ParseGbnf(std::string_view text,
                                                         const TokenTest& has_token);

}  // namespace moesplit::grammar
