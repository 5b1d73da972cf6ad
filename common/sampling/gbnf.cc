#include "common/sampling/gbnf.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace moesplit::grammar {
namespace {

// llama.cpp's MAX_REPETITION_THRESHOLD.
constexpr uint64_t kMaxRepetitions = 2000;
constexpr uint32_t kMaxCodePoint = 0x10FFFF;

bool IsWordChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
}
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

std::string EncodeUtf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    s.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    s.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    s.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

// The UTF-8 encodings of the code points [s, e] (no surrogates inside) as
// sequences of byte ranges, one per alternative (the classic split: first
// at the encoding-length boundaries, then where a continuation byte's range
// would not be full).
void SplitUtf8(uint32_t s, uint32_t e, std::vector<Sequence>* out) {
  for (uint32_t max : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (s <= max && max < e) {
      SplitUtf8(s, max, out);
      SplitUtf8(max + 1, e, out);
      return;
    }
  }
  for (int i = 1; i < 4; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((s & ~m) != (e & ~m)) {
      if ((s & m) != 0) {
        SplitUtf8(s, s | m, out);
        SplitUtf8((s | m) + 1, e, out);
        return;
      }
      if ((e & m) != m) {
        SplitUtf8(s, (e & ~m) - 1, out);
        SplitUtf8(e & ~m, e, out);
        return;
      }
    }
  }
  const std::string a = EncodeUtf8(s), b = EncodeUtf8(e);
  Sequence seq;
  for (size_t i = 0; i < a.size(); ++i) {
    seq.push_back(Item::Bytes(
        ByteSet::Range(static_cast<uint8_t>(a[i]), static_cast<uint8_t>(b[i]))));
  }
  out->push_back(std::move(seq));
}

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

// Sorted, merged, without the surrogates; `negate`: the complement in
// [0, U+10FFFF].
Ranges Normalize(Ranges r, bool negate) {
  std::sort(r.begin(), r.end());
  Ranges merged;
  for (const auto& [lo, hi] : r) {
    if (!merged.empty() && lo <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, hi);
    } else {
      merged.push_back({lo, hi});
    }
  }
  if (negate) {
    Ranges comp;
    uint32_t next = 0;
    for (const auto& [lo, hi] : merged) {
      if (lo > next) comp.push_back({next, lo - 1});
      next = hi + 1;
    }
    if (next <= kMaxCodePoint) comp.push_back({next, kMaxCodePoint});
    merged = std::move(comp);
  }
  Ranges out;
  for (const auto& [lo, hi] : merged) {
    if (hi < 0xD800 || lo > 0xDFFF) {
      out.push_back({lo, hi});
      continue;
    }
    if (lo < 0xD800) out.push_back({lo, 0xD7FF});
    if (hi > 0xDFFF) out.push_back({0xE000, hi});
  }
  return out;
}

class Parser {
 public:
  Parser(std::string_view text, const TokenTest& has_token)
      : text_(text), has_token_(has_token) {}

  absl::StatusOr<std::shared_ptr<const Grammar>> Parse() {
    if (text_.size() > kMaxGbnfBytes) {
      return absl::InvalidArgumentError(absl::StrCat("grammar: ", text_.size(),
                                                     " bytes, more than the supported ",
                                                     kMaxGbnfBytes));
    }
    if (size_t nul = text_.find('\0'); nul != std::string_view::npos) {
      Fail(nul, "unexpected NUL byte");
      return error_;
    }
    Space(true);
    while (pos_ < text_.size()) {
      if (!Rule()) return error_;
    }
    for (const auto& [name, rule] : named_) {
      if (!rule.defined) {
        return absl::InvalidArgumentError(absl::StrCat(
            "grammar: rule '", name, "' is used but never defined (", Where(rule.first_use), ")"));
      }
    }
    auto root = named_.find("root");
    if (root == named_.end()) {
      return absl::InvalidArgumentError("grammar: no 'root' rule (generation starts there)");
    }
    absl::StatusOr<std::shared_ptr<const Grammar>> g = builder_.Build(root->second.id);
    if (!g.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("grammar: ", g.status().message()));
    }
    return g;
  }

 private:
  char Peek(size_t ahead = 0) const {
    return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
  }

  std::string Where(size_t at) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    std::string_view rest = text_.substr(std::min(at, text_.size()), 20);
    rest = rest.substr(0, rest.find('\n'));
    return absl::StrCat("line ", line, ", column ", col,
                        rest.empty() ? std::string(" (end of input)")
                                     : absl::StrCat(" (\"", std::string(rest), "\")"));
  }

  // Records the first error; always false.
  bool Fail(size_t at, std::string_view what) {
    if (error_.ok()) {
      error_ = absl::InvalidArgumentError(absl::StrCat("grammar: ", std::string(what), " at ", Where(at)));
    }
    return false;
  }

  void Space(bool newline_ok) {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\r' && text_[pos_] != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || (newline_ok && (c == '\r' || c == '\n'))) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  struct Named {
    uint32_t id = 0;
    bool defined = false;
    size_t first_use = 0;  // where the name was first seen
  };

  Named& Symbol(std::string_view name, size_t at) {
    auto it = named_.find(name);
    if (it == named_.end()) {
      it = named_.emplace(std::string(name), Named{builder_.Reserve(std::string(name)), false, at})
               .first;
    }
    return it->second;
  }

  // A rule of our own (groups, classes): never named by users.
  uint32_t Generated(const std::string& base) {
    return builder_.Reserve(absl::StrCat(base, "_", ++generated_));
  }

  void Define(uint32_t id, std::vector<Sequence> alternatives) {
    builder_.Define(id, std::move(alternatives));
  }

  bool Rule() {
    const size_t start = pos_;
    while (IsWordChar(Peek())) ++pos_;
    if (pos_ == start) return Fail(pos_, "expecting a rule name");
    const std::string name(text_.substr(start, pos_ - start));
    Space(false);
    if (text_.substr(pos_, 3) != "::=") return Fail(pos_, "expecting ::=");
    pos_ += 3;
    Space(true);
    Named& rule = Symbol(name, start);
    if (rule.defined) return Fail(start, absl::StrCat("rule '", name, "' is defined twice"));
    rule.defined = true;
    if (!Alternates(name, rule.id, false)) return false;
    if (Peek() == '\r') {
      pos_ += Peek(1) == '\n' ? 2 : 1;
    } else if (Peek() == '\n') {
      ++pos_;
    } else if (pos_ < text_.size()) {
      return Fail(pos_, "expecting newline or end");
    }
    Space(true);
    return true;
  }

  bool Alternates(const std::string& name, uint32_t id, bool nested) {
    std::vector<Sequence> alts(1);
    if (!SequenceOf(name, nested, &alts.back())) return false;
    while (Peek() == '|') {
      ++pos_;
      Space(true);
      alts.emplace_back();
      if (!SequenceOf(name, nested, &alts.back())) return false;
    }
    Define(id, std::move(alts));
    return true;
  }

  bool Int(uint64_t* v) {
    const size_t start = pos_;
    *v = 0;
    while (IsDigit(Peek())) {
      if (*v > kMaxRepetitions * 1000) return Fail(start, "number too large");
      *v = *v * 10 + static_cast<uint64_t>(Peek() - '0');
      ++pos_;
    }
    if (pos_ == start) return Fail(pos_, "expecting an integer");
    return true;
  }

  bool Hex(int digits, uint32_t* cp) {
    const size_t start = pos_;
    *cp = 0;
    for (int i = 0; i < digits; ++i) {
      const char c = Peek();
      int d = -1;
      if (c >= '0' && c <= '9') d = c - '0';
      if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
      if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
      if (d < 0) return Fail(start, absl::StrCat("expecting ", digits, " hex digits"));
      *cp = (*cp << 4) | static_cast<uint32_t>(d);
      ++pos_;
    }
    if (*cp > kMaxCodePoint) return Fail(start, "code point above U+10FFFF");
    return true;
  }

  // One character of a literal or class: an escape or a UTF-8 code point.
  bool Char(uint32_t* cp) {
    const size_t start = pos_;
    if (pos_ >= text_.size()) return Fail(pos_, "unexpected end of input");
    const uint8_t c = static_cast<uint8_t>(text_[pos_]);
    if (c == '\\') {
      const char e = Peek(1);
      pos_ += 2;
      switch (e) {
        case 'x': return Hex(2, cp);
        case 'u': return Hex(4, cp);
        case 'U': return Hex(8, cp);
        case 't': *cp = '\t'; return true;
        case 'r': *cp = '\r'; return true;
        case 'n': *cp = '\n'; return true;
        case '\\': case '"': case '[': case ']': case '-':
          *cp = static_cast<uint8_t>(e);
          return true;
        default: return Fail(start, "unknown escape");
      }
    }
    const int len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || pos_ + len > text_.size()) return Fail(start, "invalid UTF-8");
    *cp = len == 1 ? c : c & (0xFF >> (len + 1));
    for (int i = 1; i < len; ++i) {
      const uint8_t b = static_cast<uint8_t>(text_[pos_ + i]);
      if ((b & 0xC0) != 0x80) return Fail(start, "invalid UTF-8");
      *cp = (*cp << 6) | (b & 0x3F);
    }
    pos_ += len;
    return true;
  }

  // The code points of `ranges` as one item: a byte set when every one is a
  // single byte, else a reference to a rule of their encodings.
  Item CodePoints(const Ranges& ranges, const std::string& name) {
    ByteSet ascii;
    bool any_ascii = false;
    std::vector<Sequence> alts;
    for (const auto& [lo, hi] : ranges) {
      if (hi < 0x80) {
        ascii.Add(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi));
        any_ascii = true;
        continue;
      }
      if (lo < 0x80) {
        ascii.Add(static_cast<uint8_t>(lo), 0x7F);
        any_ascii = true;
      }
      SplitUtf8(std::max<uint32_t>(lo, 0x80), hi, &alts);
    }
    if (alts.empty()) return Item::Bytes(ascii);
    if (any_ascii) alts.insert(alts.begin(), Sequence{Item::Bytes(ascii)});
    const uint32_t id = Generated(name + "_char");
    Define(id, std::move(alts));
    return Item::Ref(id);
  }

  bool Class(const std::string& name, Item* out) {
    const size_t start = pos_;
    ++pos_;  // [
    bool negate = false;
    if (Peek() == '^') {
      negate = true;
      ++pos_;
    }
    Ranges ranges;
    while (Peek() != ']') {
      if (pos_ >= text_.size()) return Fail(start, "unterminated character class");
      uint32_t lo = 0, hi = 0;
      if (!Char(&lo)) return false;
      hi = lo;
      if (Peek() == '-' && Peek(1) != ']') {
        ++pos_;
        if (pos_ >= text_.size()) return Fail(pos_, "unexpected end of input");
        if (!Char(&hi)) return false;
        if (hi < lo) return Fail(start, "character range out of order");
      }
      ranges.push_back({lo, hi});
    }
    ++pos_;  // ]
    const Ranges r = Normalize(std::move(ranges), negate);
    if (r.empty()) return Fail(start, "the character class matches no character");
    *out = CodePoints(r, name);
    return true;
  }

  bool Token(Sequence* out) {
    const size_t start = pos_;
    if (Peek() == '!') return Fail(start, "negated tokens (!<...>) are not supported");
    if (Peek(1) == '[') {
      return Fail(start, "token ids (<[id]>) are not supported: name a special token by its text");
    }
    const size_t end = text_.find('>', pos_);
    if (end == std::string_view::npos) return Fail(start, "expecting '>'");
    const std::string_view token = text_.substr(pos_, end + 1 - pos_);
    if (!has_token_ || !has_token_(token)) {
      return Fail(start, absl::StrCat("'", std::string(token), "' is not a special token of this model"));
    }
    GrammarBuilder::Append(*out, GrammarBuilder::Literal(TokenBytes(token)));
    pos_ = end + 1;
    return true;
  }

  // {m}, {m,}, {m,n}, {,n} after '{'.
  bool Braces(uint64_t* min, int64_t* max) {
    const size_t start = pos_;
    Space(true);
    *min = 0;
    if (Peek() != ',' && !Int(min)) return false;
    Space(true);
    *max = static_cast<int64_t>(*min);
    if (Peek() == ',') {
      ++pos_;
      Space(true);
      *max = -1;
      if (IsDigit(Peek())) {
        uint64_t m = 0;
        if (!Int(&m)) return false;
        *max = m > kMaxRepetitions ? -1 : static_cast<int64_t>(m);
        Space(true);
      }
    }
    if (Peek() != '}') return Fail(pos_, "expecting '}'");
    ++pos_;
    if (*min > kMaxRepetitions) {
      return Fail(start, absl::StrCat("more than ", kMaxRepetitions, " repetitions"));
    }
    if (*max >= 0 && static_cast<uint64_t>(*max) < *min) {
      return Fail(start, "repetition maximum below its minimum");
    }
    return true;
  }

  bool SequenceOf(const std::string& name, bool nested, Sequence* out) {
    size_t last = out->size();  // where the last symbol starts
    while (pos_ < text_.size()) {
      const size_t at = pos_;
      const char c = Peek();
      if (c == '"') {
        ++pos_;
        last = out->size();
        while (Peek() != '"') {
          if (pos_ >= text_.size()) return Fail(at, "unterminated string literal");
          uint32_t cp = 0;
          if (!Char(&cp)) return false;
          if (cp >= 0xD800 && cp <= 0xDFFF) return Fail(at, "a surrogate code point in a literal");
          GrammarBuilder::Append(*out, GrammarBuilder::Literal(EncodeUtf8(cp)));
        }
        ++pos_;
      } else if (c == '[') {
        last = out->size();
        Item item;
        if (!Class(name, &item)) return false;
        out->push_back(item);
      } else if (c == '<' || c == '!') {
        last = out->size();
        if (!Token(out)) return false;
      } else if (IsWordChar(c)) {
        while (IsWordChar(Peek())) ++pos_;
        last = out->size();
        out->push_back(Item::Ref(Symbol(text_.substr(at, pos_ - at), at).id));
      } else if (c == '(') {
        ++pos_;
        Space(true);
        const uint32_t id = Generated(name);
        if (!Alternates(name, id, true)) return false;
        if (Peek() != ')') return Fail(pos_, "expecting ')'");
        ++pos_;
        last = out->size();
        out->push_back(Item::Ref(id));
      } else if (c == '.') {
        ++pos_;
        last = out->size();
        out->push_back(AnyChar());
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        ++pos_;
        uint64_t min = c == '+' ? 1 : 0;
        int64_t max = c == '?' ? 1 : -1;
        if (c == '{' && !Braces(&min, &max)) return false;
        if (last == out->size()) {
          return Fail(at, "expecting an item before */+/?/{");
        }
        const Sequence item(out->begin() + static_cast<std::ptrdiff_t>(last), out->end());
        out->resize(last);
        out->push_back(Item::Ref(builder_.Repeat(absl::StrCat(name, "_rep_", ++generated_), item,
                                                 static_cast<int>(min), static_cast<int>(max))));
      } else {
        break;
      }
      Space(nested);
    }
    return true;
  }

  Item AnyChar() {
    if (!any_.has_value()) any_ = CodePoints(Normalize({{0, kMaxCodePoint}}, false), "any");
    return *any_;
  }

  std::string_view text_;
  const TokenTest& has_token_;
  size_t pos_ = 0;
  absl::Status error_ = absl::OkStatus();
  GrammarBuilder builder_;
  std::map<std::string, Named, std::less<>> named_;  // the rules users name
  size_t generated_ = 0;
  std::optional<Item> any_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<const Grammar>> ParseGbnf(std::string_view text,
                                                         const TokenTest& has_token) {
  return Parser(text, has_token).Parse();
}

}  // namespace moesplit::grammar
