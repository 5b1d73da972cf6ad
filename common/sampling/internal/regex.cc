#include "common/sampling/internal/regex.h"

#include <bitset>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"

namespace moesplit::grammar {
namespace {

// Which non-ASCII characters a class holds (exactly all, all but the line
// separators U+2028/U+2029, or none).
enum class NonAscii { kNone, kAll, kAllButLineSeparators };

struct CharClass {
  std::bitset<128> ascii;
  NonAscii non_ascii = NonAscii::kNone;
  // Holds a class escape whose complement is not exactly "all non-ASCII"
  // (\s \S \D \W): a negation then keeps no non-ASCII character.
  bool approximate = false;
};

bool IsHex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  return (c | 0x20) - 'a' + 10;
}

std::string Utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

class RegexCompiler {
 public:
  RegexCompiler(GrammarBuilder& b, std::string_view p, int max_repeat)
      : b_(b), p_(p), max_repeat_(max_repeat) {}

  absl::StatusOr<uint32_t> Compile() {
    size_t begin = 0;
    end_ = p_.size();
    const bool anchored_start = !p_.empty() && p_[0] == '^';
    if (anchored_start) begin = 1;
    bool anchored_end = false;
    if (end_ > begin && p_[end_ - 1] == '$') {
      size_t slashes = 0;
      while (end_ - 1 - slashes > begin && p_[end_ - 2 - slashes] == '\\') ++slashes;
      if (slashes % 2 == 0) {
        anchored_end = true;
        --end_;
      }
    }
    i_ = begin;
    ASSIGN_OR_RETURN(const uint32_t body, Alternation(0));
    if (i_ != end_) return Err("unmatched ')'");
    Sequence seq;
    CharClass any;
    any.ascii.set();
    any.non_ascii = NonAscii::kAll;
    std::optional<Item> anything;
    if (!anchored_start || !anchored_end) {
      ASSIGN_OR_RETURN(const Item c, ClassItem(any));
      anything = Item::Ref(b_.Repeat("pattern-any", {c}, 0, -1));
    }
    if (!anchored_start) seq.push_back(*anything);
    seq.push_back(Item::Ref(body));
    if (!anchored_end) seq.push_back(*anything);
    return b_.Rule("pattern", {seq});
  }

 private:
  absl::Status Err(const std::string& what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("pattern at offset ", i_, ": ", what, " is not supported"));
  }
  bool More() const { return i_ < end_; }
  char Peek(size_t ahead = 0) const { return i_ + ahead < end_ ? p_[i_ + ahead] : '\0'; }

  absl::StatusOr<uint32_t> Alternation(int depth) {
    if (depth > 64) return Err("nesting deeper than 64 groups");
    std::vector<Sequence> alts;
    ASSIGN_OR_RETURN(Sequence first, Concat(depth));
    alts.push_back(std::move(first));
    while (More() && Peek() == '|') {
      ++i_;
      ASSIGN_OR_RETURN(Sequence next, Concat(depth));
      alts.push_back(std::move(next));
    }
    return b_.Rule("pattern-alternatives", std::move(alts));
  }

  absl::StatusOr<Sequence> Concat(int depth) {
    Sequence seq;
    while (More() && Peek() != '|' && Peek() != ')') {
      const char c = Peek();
      if (c == '*' || c == '+' || c == '?') return Err(absl::StrCat("'", std::string(1, c), "' with nothing to repeat"));
      ASSIGN_OR_RETURN(Item atom, Atom(depth));
      ASSIGN_OR_RETURN(atom, Quantified(atom));
      seq.push_back(atom);
    }
    return seq;
  }

  // {n}, {n,}, {n,m} at i_ (true, with the counts) or not a quantifier.
  bool Braces(int* min, int* max, size_t* after) const {
    size_t j = i_ + 1;
    auto number = [&](long* v) {
      const size_t s = j;
      *v = 0;
      while (j < end_ && p_[j] >= '0' && p_[j] <= '9' && j - s < 9) *v = *v * 10 + (p_[j++] - '0');
      return j > s;
    };
    long lo = 0, hi = 0;
    if (!number(&lo)) return false;
    hi = lo;
    if (j < end_ && p_[j] == ',') {
      ++j;
      if (!number(&hi)) hi = -1;
    }
    if (j >= end_ || p_[j] != '}') return false;
    *min = static_cast<int>(lo);
    *max = static_cast<int>(hi);
    *after = j + 1;
    return true;
  }

  absl::StatusOr<Item> Quantified(Item atom) {
    if (!More()) return atom;
    int min = 0, max = 0;
    const char c = Peek();
    if (c == '*') {
      min = 0, max = -1, ++i_;
    } else if (c == '+') {
      min = 1, max = -1, ++i_;
    } else if (c == '?') {
      min = 0, max = 1, ++i_;
    } else if (size_t after = 0; c == '{' && Braces(&min, &max, &after)) {
      if (max >= 0 && min > max) return Err("a count {n,m} with n above m");
      if (min > max_repeat_ || max > max_repeat_) {
        return Err(absl::StrCat("a count above ", max_repeat_));
      }
      i_ = after;
    } else {
      return atom;
    }
    if (More() && Peek() == '?') ++i_;  // lazy: the same strings
    if (More() && Peek() == '+') return Err("a possessive quantifier");
    if (More() && (Peek() == '*' || Peek() == '{')) {
      int a = 0, b = 0;
      size_t after = 0;
      if (Peek() == '*' || Braces(&a, &b, &after)) return Err("a quantifier after a quantifier");
    }
    if (min == 1 && max == 1) return atom;
    return Item::Ref(b_.Repeat("pattern-repeat", {atom}, min, max));
  }

  absl::StatusOr<Item> Atom(int depth) {
    const char c = Peek();
    if (c == '(') {
      const size_t open = i_++;
      if (Peek() == '?') {
        const char k = Peek(1);
        if (k == ':') {
          i_ += 2;
        } else if (k == '=' || k == '!') {
          i_ = open;  // the offset of the construct
          return Err("lookahead (?= / (?!");
        } else if (k == '<' && (Peek(2) == '=' || Peek(2) == '!')) {
          i_ = open;
          return Err("lookbehind (?<= / (?<!");
        } else if (k == '<') {
          const size_t close = p_.find('>', i_);
          if (close == std::string_view::npos || close >= end_) return Err("an unterminated group name");
          i_ = close + 1;
        } else {
          return Err("an inline flag or group kind (?");
        }
      }
      ASSIGN_OR_RETURN(const uint32_t r, Alternation(depth + 1));
      if (!More() || Peek() != ')') return Err("an unterminated group");
      ++i_;
      return Item::Ref(r);
    }
    if (c == '[') {
      ++i_;
      ASSIGN_OR_RETURN(const CharClass cls, ClassBody());
      return ClassItem(cls);
    }
    if (c == '.') {
      ++i_;
      CharClass dot;
      dot.ascii.set();
      dot.ascii.reset('\n');
      dot.ascii.reset('\r');
      dot.non_ascii = NonAscii::kAllButLineSeparators;
      return ClassItem(dot);
    }
    if (c == '^' || c == '$') return Err(absl::StrCat("'", std::string(1, c), "' inside the expression"));
    if (c == '\\') {
      ++i_;
      CharClass cls;
      uint32_t cp = 0;
      bool is_class = false;
      RETURN_IF_ERROR(Escape(/*in_class=*/false, &cls, &is_class, &cp));
      if (is_class) return ClassItem(cls);
      return CodePoint(cp);
    }
    // A literal character: ASCII, or one UTF-8 sequence.
    const uint8_t u = static_cast<uint8_t>(c);
    if (u < 0x80) {
      ++i_;
      return CodePoint(u);
    }
    const size_t n = u >= 0xF0 ? 4 : u >= 0xE0 ? 3 : 2;
    if (i_ + n > end_) return Err("a truncated UTF-8 character");
    const Sequence bytes = GrammarBuilder::Literal(p_.substr(i_, n));
    i_ += n;
    return Item::Ref(b_.Rule("pattern-char", {bytes}));
  }

  absl::StatusOr<Item> CodePoint(uint32_t cp) {
    if (cp < 0x80) {
      CharClass one;
      one.ascii.set(cp);
      return ClassItem(one);
    }
    return Item::Ref(b_.Rule("pattern-char", {GrammarBuilder::Literal(Utf8(cp))}));
  }

  // After a backslash: a class escape (into *cls, *is_class) or one code
  // point (*cp).
  absl::Status Escape(bool in_class, CharClass* cls, bool* is_class, uint32_t* cp) {
    if (!More()) return Err("a trailing backslash");
    const char c = p_[i_++];
    *is_class = true;
    auto digits = [](CharClass* k) {
      for (char d = '0'; d <= '9'; ++d) k->ascii.set(d);
    };
    auto word = [&](CharClass* k) {
      digits(k);
      for (char d = 'a'; d <= 'z'; ++d) k->ascii.set(d), k->ascii.set(d - 'a' + 'A');
      k->ascii.set('_');
    };
    auto space = [](CharClass* k) {
      for (char d : std::string(" \t\n\r\v\f")) k->ascii.set(d);
    };
    CharClass k;
    switch (c) {
      case 'd': digits(&k); break;
      case 'w': word(&k); break;
      case 's': space(&k); k.approximate = true; break;
      case 'D': digits(&k); k.ascii.flip(); k.non_ascii = NonAscii::kAll; k.approximate = true; break;
      case 'W': word(&k); k.ascii.flip(); k.non_ascii = NonAscii::kAll; k.approximate = true; break;
      case 'S': space(&k); k.ascii.flip(); k.approximate = true; break;
      default: *is_class = false; break;
    }
    if (*is_class) {
      *cls = k;
      return absl::OkStatus();
    }
    switch (c) {
      case 't': *cp = '\t'; return absl::OkStatus();
      case 'n': *cp = '\n'; return absl::OkStatus();
      case 'r': *cp = '\r'; return absl::OkStatus();
      case 'f': *cp = '\f'; return absl::OkStatus();
      case 'v': *cp = '\v'; return absl::OkStatus();
      case 'b':
        if (in_class) {
          *cp = '\b';
          return absl::OkStatus();
        }
        return Err("a word boundary \\b");
      case '0':
        if (Peek() >= '0' && Peek() <= '9') return Err("an octal escape");
        *cp = 0;
        return absl::OkStatus();
      case 'x':
      case 'u': {
        const size_t n = c == 'x' ? 2 : 4;
        uint32_t v = 0;
        for (size_t j = 0; j < n; ++j) {
          if (!IsHex(Peek())) return Err(absl::StrCat("a malformed \\", std::string(1, c), " escape"));
          v = v * 16 + HexValue(p_[i_++]);
        }
        if (v >= 0xD800 && v <= 0xDFFF) return Err("a surrogate \\u escape");
        *cp = v;
        return absl::OkStatus();
      }
      case 'B': return Err("a word boundary \\B");
      case 'p':
      case 'P': return Err("a Unicode property escape");
      case 'k': return Err("a named backreference");
      case 'c': return Err("a control escape \\c");
      default: break;
    }
    if (c >= '1' && c <= '9') return Err("a backreference");
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || static_cast<uint8_t>(c) >= 0x80) {
      return Err(absl::StrCat("the escape \\", std::string(1, c)));
    }
    *cp = static_cast<uint8_t>(c);
    return absl::OkStatus();
  }

  // After '[': the class up to and including ']'.
  absl::StatusOr<CharClass> ClassBody() {
    CharClass cls;
    bool negate = false;
    if (Peek() == '^' && More()) {
      negate = true;
      ++i_;
    }
    // One member: a code point (returns true) or a class escape merged
    // into cls (returns false).
    auto member = [&](uint32_t* cp) -> absl::StatusOr<bool> {
      const char c = p_[i_];
      if (c == '\\') {
        ++i_;
        CharClass k;
        bool is_class = false;
        RETURN_IF_ERROR(Escape(/*in_class=*/true, &k, &is_class, cp));
        if (is_class) {
          cls.ascii |= k.ascii;
          if (k.non_ascii == NonAscii::kAll) cls.non_ascii = NonAscii::kAll;
          cls.approximate = cls.approximate || k.approximate;
          return false;
        }
      } else {
        *cp = static_cast<uint8_t>(c);
        ++i_;
      }
      if (*cp >= 0x80) return Err("a non-ASCII character in a class");
      return true;
    };
    while (true) {
      if (!More()) return Err("an unterminated class");
      if (Peek() == ']') {
        ++i_;
        break;
      }
      uint32_t lo = 0;
      ASSIGN_OR_RETURN(const bool is_char, member(&lo));
      if (!is_char) continue;
      if (Peek() == '-' && i_ + 1 < end_ && p_[i_ + 1] != ']') {
        ++i_;
        uint32_t hi = 0;
        ASSIGN_OR_RETURN(const bool hi_is_char, member(&hi));
        if (!hi_is_char) return Err("a class escape as the end of a range");
        if (hi < lo) return Err("a range whose end is below its start");
        for (uint32_t x = lo; x <= hi; ++x) cls.ascii.set(x);
      } else {
        cls.ascii.set(lo);
      }
    }
    if (negate) {
      cls.ascii.flip();
      cls.non_ascii = cls.non_ascii == NonAscii::kNone && !cls.approximate ? NonAscii::kAll
                                                                            : NonAscii::kNone;
    }
    return cls;
  }

  // One character of the class, as JSON string content.
  absl::StatusOr<Item> ClassItem(const CharClass& c) {
    const auto key = std::make_pair(c.ascii.to_string(), static_cast<int>(c.non_ascii));
    if (auto it = classes_.find(key); it != classes_.end()) return it->second;
    ByteSet plain;
    bool any_plain = false;
    for (int x = 0x20; x < 0x80; ++x) {
      if (c.ascii.test(x) && x != '"' && x != '\\') {
        plain.Add(static_cast<uint8_t>(x));
        any_plain = true;
      }
    }
    std::vector<Sequence> alts;
    if (any_plain) alts.push_back({Item::Bytes(plain)});
    const std::pair<char, char> escapes[] = {{'"', '"'}, {'\\', '\\'}, {'\b', 'b'}, {'\f', 'f'},
                                             {'\n', 'n'}, {'\r', 'r'}, {'\t', 't'}};
    for (const auto& [ch, esc] : escapes) {
      if (c.ascii.test(static_cast<uint8_t>(ch))) {
        alts.push_back({Item::Bytes(ByteSet::Of('\\')), Item::Bytes(ByteSet::Of(esc))});
      }
    }
    if (c.non_ascii != NonAscii::kNone) {
      auto B = [](ByteSet s) { return Item::Bytes(s); };
      const ByteSet cont = ByteSet::Range(0x80, 0xBF);
      alts.push_back({B(ByteSet::Range(0xC2, 0xDF)), B(cont)});
      alts.push_back({B(ByteSet::Of(0xE0)), B(ByteSet::Range(0xA0, 0xBF)), B(cont)});
      if (c.non_ascii == NonAscii::kAll) {
        alts.push_back({B(ByteSet::Range(0xE1, 0xEC)), B(cont), B(cont)});
      } else {  // U+2028/U+2029 are E2 80 A8/A9
        alts.push_back({B(ByteSet::Of(0xE1)), B(cont), B(cont)});
        alts.push_back({B(ByteSet::Of(0xE2)), B(ByteSet::Range(0x81, 0xBF)), B(cont)});
        ByteSet last = cont;
        last.Remove(0xA8).Remove(0xA9);
        alts.push_back({B(ByteSet::Of(0xE2)), B(ByteSet::Of(0x80)), B(last)});
        alts.push_back({B(ByteSet::Range(0xE3, 0xEC)), B(cont), B(cont)});
      }
      alts.push_back({B(ByteSet::Of(0xED)), B(ByteSet::Range(0x80, 0x9F)), B(cont)});
      alts.push_back({B(ByteSet::Range(0xEE, 0xEF)), B(cont), B(cont)});
      alts.push_back({B(ByteSet::Of(0xF0)), B(ByteSet::Range(0x90, 0xBF)), B(cont), B(cont)});
      alts.push_back({B(ByteSet::Range(0xF1, 0xF3)), B(cont), B(cont), B(cont)});
      alts.push_back({B(ByteSet::Of(0xF4)), B(ByteSet::Range(0x80, 0x8F)), B(cont), B(cont)});
    }
    if (alts.empty()) return Err("a class that matches no character JSON text can hold");
    const Item item = alts.size() == 1 && alts[0].size() == 1
                          ? alts[0][0]
                          : Item::Ref(b_.Rule("pattern-class", std::move(alts)));
    classes_.emplace(key, item);
    return item;
  }

  GrammarBuilder& b_;
  const std::string_view p_;
  const int max_repeat_;
  size_t i_ = 0;
  size_t end_ = 0;
  std::map<std::pair<std::string, int>, Item> classes_;
};

}  // namespace

absl::StatusOr<uint32_t> RegexStringContent(GrammarBuilder& b, std::string_view pattern,
                                            int max_repeat) {
  return RegexCompiler(b, pattern, max_repeat).Compile();
}

}  // namespace moesplit::grammar
