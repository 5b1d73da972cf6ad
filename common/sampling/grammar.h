// Grammar: a context-free grammar over BYTES, compiled for a pushdown matcher
// (token_constraint.h), and GrammarBuilder, which makes one.
//
// A grammar is a list of rules; a rule is a list of alternatives; an
// alternative is a sequence of items, each either a byte set (matches one
// byte in the set) or a reference to a rule. The empty alternative matches
// the empty string. Rules are flattened into one element array (llama.cpp's
// llama_grammar layout: each alternative's items, then kAlt, the last one
// then kEnd), so a matcher position is one uint32_t index:
//   element i: kBytes (matches `set`), kRef (`rule`), kAlt (end of an
//   alternative, another follows), kEnd (end of the rule's last alternative).
// rule_start(r) is the index of rule r's first alternative.
//
// Special tokens. A vocabulary's control and user-defined tokens (harmony's
// "<|channel|>", DeepSeek's "<｜tool▁sep｜>", "<tool_call>") are one token
// each, not the bytes of their text. The grammar names such a token by
// TokenBytes(text): kTokenMark, the text, kTokenMark. kTokenMark (0xFF)
// never occurs in UTF-8, so no text a grammar accepts can spell it, and
// VocabIndex (token_constraint.h) files each special token under exactly
// those bytes. GrammarBuilder::Tag(text) matches the token where the
// vocabulary has it, and the text spelled out where it does not.
//
// Build() refuses (InvalidArgument) a rule referenced but never defined, a
// grammar of more than kMaxGrammarElements elements, and left recursion (a
// rule that can reach itself again without consuming a byte), which no
// top-down matcher can expand; it names the rule.
//
// Thread-safe: a Grammar is immutable; a GrammarBuilder is not thread-safe.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

// Aborts on a broken invariant (a programmer error, never bad input).
#define GRAMMAR_CHECK(cond, what)                                              \
  do {                                                                         \
    if (!(cond)) {                                                             \
      std::fprintf(stderr, "%s:%d: check failed: %s (%s)\n", __FILE__, __LINE__, \
                   #cond, what);                                               \
      std::abort();                                                            \
    }                                                                          \
  } while (0)

namespace moesplit::grammar {

// The largest grammar Build() accepts (elements, 40 bytes each).
inline constexpr size_t kMaxGrammarElements = size_t{1} << 20;

inline constexpr uint8_t kTokenMark = 0xFF;

// Whether the vocabulary holds `text` as one special token
// (VocabIndex::SpecialTokenTest makes one from a tokenizer).
using TokenTest = std::function<bool(std::string_view)>;

// The bytes by which a grammar names the special token whose text is
// `text` (see the file comment).
std::string TokenBytes(std::string_view text);

struct ByteSet {
  uint64_t bits[4] = {0, 0, 0, 0};
  bool Has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  ByteSet& Add(uint8_t lo, uint8_t hi);  // [lo, hi] inclusive
  ByteSet& Add(uint8_t b) { return Add(b, b); }
  ByteSet& Remove(uint8_t b);
  static ByteSet Of(uint8_t b) { return ByteSet().Add(b); }
  static ByteSet Range(uint8_t lo, uint8_t hi) { return ByteSet().Add(lo, hi); }
};

enum class ElementKind : uint8_t { kBytes, kRef, kAlt, kEnd };

struct Element {
  ElementKind kind = ElementKind::kEnd;
  uint32_t rule = 0;  // kRef
  ByteSet set;        // kBytes
};

class Grammar {
 public:
  uint32_t root() const { return root_; }
  const Element& at(uint32_t pos) const { return elements_[pos]; }
  uint32_t rule_start(uint32_t rule) const { return starts_[rule]; }
  size_t rules() const { return starts_.size(); }
  // The element index of each alternative's first element.
  const std::vector<uint32_t>& alternatives(uint32_t rule) const { return alts_[rule]; }
  size_t elements() const { return elements_.size(); }
  static bool IsEndOfAlternative(ElementKind k) {
    return k == ElementKind::kAlt || k == ElementKind::kEnd;
  }

 private:
  friend class GrammarBuilder;
  std::vector<Element> elements_;
  std::vector<uint32_t> starts_;
  std::vector<std::vector<uint32_t>> alts_;
  std::vector<std::string> names_;
  uint32_t root_ = 0;
};

// One item of an alternative.
struct Item {
  bool is_ref = false;
  uint32_t rule = 0;
  ByteSet set;
  static Item Bytes(ByteSet s) { return Item{false, 0, s}; }
  static Item Ref(uint32_t r) { return Item{true, r, ByteSet()}; }
};
using Sequence = std::vector<Item>;

class GrammarBuilder {
 public:
  // `has_token`: which tag texts the vocabulary holds as special tokens;
  // null = not known, so that a Tag takes either form.
  explicit GrammarBuilder(TokenTest has_token = nullptr) : has_token_(std::move(has_token)) {}

  // A new rule id, defined later with Define (names show in errors).
  uint32_t Reserve(std::string name);
  // REQUIRES: `rule` reserved and not yet defined; at least one alternative
  // (an empty Sequence is the empty string).
  void Define(uint32_t rule, std::vector<Sequence> alternatives);
  // Reserve + Define.
  uint32_t Rule(std::string name, std::vector<Sequence> alternatives);

  // The bytes of `text`, one item each.
  static Sequence Literal(std::string_view text);
  // A reference to a rule matching the special token `text` where the
  // vocabulary has it, else the bytes of `text` (both when it is not known;
  // one rule per text, made on first use).
  Item Tag(std::string_view text);
  // `text` as a sequence in which each occurrence of one of `tags` is
  // Tag(tag) and the rest is Literal.
  Sequence TextWithTags(std::string_view text, const std::vector<std::string_view>& tags);

  // A rule matching `item` repeated min..max times (max < 0: unbounded).
  // REQUIRES: 0 <= min, max < 0 or min <= max.
  uint32_t Repeat(std::string name, const Sequence& item, int min, int max);

  // Appends b to a (concatenation helper).
  static void Append(Sequence& a, const Sequence& b) { a.insert(a.end(), b.begin(), b.end()); }

  // Elements so far (to refuse huge schemas early).
  size_t size() const { return size_; }

  // See the file comment for the errors.
  absl::StatusOr<std::shared_ptr<const Grammar>> Build(uint32_t root) const;

 private:
  absl::Status CheckLeftRecursion() const;
  std::vector<std::string> names_;
  std::vector<std::vector<Sequence>> rules_;
  std::vector<bool> defined_;
  TokenTest has_token_;
  std::map<std::string, uint32_t, std::less<>> tags_;
  size_t size_ = 0;
};

}  // namespace moesplit::grammar
