#include "common/chat/internal/lexer.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/base/status.h"
#include "common/chat/internal/unicode.h"

namespace moesplit::chat::internal {
namespace {

bool IsAsciiSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Length of the UTF-8 sequence starting at s[i] if it encodes Unicode
// whitespace, else 0.
size_t SpaceAt(std::string_view s, size_t i) {
  if (i >= s.size()) return 0;
  const uint8_t c = static_cast<uint8_t>(s[i]);
  if (c < 0x80) return IsPySpace(c) ? 1 : 0;
  const size_t len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
  if (len == 0 || i + len > s.size()) return 0;
  std::vector<uint32_t> cp = DecodeUtf8(s.substr(i, len));
  return (cp.size() == 1 && IsPySpace(cp[0])) ? len : 0;
}

// Python str.rstrip() (Unicode whitespace).
std::string_view RStripPy(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && end - start < 4 && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) {
      --start;
    }
    if (SpaceAt(s, start) != end - start) break;
    end = start;
  }
  return s.substr(0, end);
}

// Index after the Unicode whitespace starting at i.
size_t SkipSpacePy(std::string_view s, size_t i) {
  while (size_t n = SpaceAt(s, i)) i += n;
  return i;
}

constexpr std::string_view kOps[] = {
    "//", "**", "==", "!=", ">=", "<=", "+", "-", "*", "/", "%", "~", "[", "]", "(", ")",
    "{", "}", "<", ">", "=", ".", ":", "|", ",", ";"};

class Lexer {
 public:
  Lexer(std::string src, const LexerOptions& options) : src_(std::move(src)), opt_(options) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  absl::StatusOr<std::vector<Token>> Run() {
    bool line_starting = true;
    size_t pos = 0;
    while (pos < src_.size()) {
      const size_t start = FindTagStart(pos);
      if (start == std::string::npos) {
        EmitData(std::string_view(src_).substr(pos), pos);
        break;
      }
      const char kind = src_[start + 1];
      size_t after = start + 2;
      char sign = 0;
      if (after < src_.size() && (src_[after] == '-' || src_[after] == '+')) sign = src_[after++];
      EmitData(StripText(pos, start, sign, kind != '{', line_starting), pos);
      size_t raw_body = 0;
      if (kind == '%' && MatchRawBegin(after, &raw_body)) {
        ASSIGN_OR_RETURN(pos, LexRaw(start, raw_body, &line_starting));
        continue;
      }
      if (kind == '#') {
        ASSIGN_OR_RETURN(pos, SkipComment(start, after));
      } else {
        ASSIGN_OR_RETURN(pos, LexTag(start, after, kind == '%'));
      }
      line_starting = pos > 0 && src_[pos - 1] == '\n';
    }
    Token eof;
    eof.type = TokenType::kEof;
    SetPos(&eof, src_.size());
    tokens_.push_back(std::move(eof));
    return std::move(tokens_);
  }

 private:
  size_t FindTagStart(size_t pos) const {
    while (true) {
      pos = src_.find('{', pos);
      if (pos == std::string::npos || pos + 1 >= src_.size()) return std::string::npos;
      const char c = src_[pos + 1];
      if (c == '{' || c == '%' || c == '#') return pos;
      ++pos;
    }
  }

  // The data before a tag at `start`, after `-` / lstrip_blocks handling.
  std::string_view StripText(size_t pos, size_t start, char sign, bool is_block_or_comment,
                             bool line_starting) const {
    std::string_view text = std::string_view(src_).substr(pos, start - pos);
    if (sign == '-') return RStripPy(text);
    if (sign != '+' && opt_.lstrip_blocks && is_block_or_comment) {
      const size_t nl = text.rfind('\n');
      const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
      if (l_pos > 0 || line_starting) {
        std::string_view tail = text.substr(l_pos);
        if (!tail.empty() && SkipSpacePy(tail, 0) == tail.size()) return text.substr(0, l_pos);
      }
    }
    return text;
  }

  void EmitData(std::string_view text, size_t pos) {
    if (text.empty()) return;
    Token t;
    t.type = TokenType::kData;
    t.text = std::string(text);
    SetPos(&t, pos);
    tokens_.push_back(std::move(t));
  }

  // `{%[-+]? raw (-%}\s*|%})` starting after the sign; sets *body to the
  // index after the tag.
  bool MatchRawBegin(size_t after, size_t* body) const {
    size_t p = after;
    while (p < src_.size() && IsAsciiSpace(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    if (p < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[p])) || src_[p] == '_')) {
      return false;
    }
    while (p < src_.size() && IsAsciiSpace(src_[p])) ++p;
    if (src_.compare(p, 3, "-%}") == 0) {
      *body = SkipSpacePy(src_, p + 3);
      return true;
    }
    if (src_.compare(p, 2, "%}") == 0) {
      *body = p + 2;
      return true;
    }
    return false;
  }

  absl::StatusOr<size_t> LexRaw(size_t tag_start, size_t body, bool* line_starting) {
    size_t search = body;
    while (true) {
      const size_t open = src_.find("{%", search);
      if (open == std::string::npos) {
        return Error(tag_start, "missing end of raw directive ('{% endraw %}')");
      }
      size_t p = open + 2;
      char sign = 0;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
      while (p < src_.size() && IsAsciiSpace(src_[p])) ++p;
      if (src_.compare(p, 6, "endraw") != 0) { search = open + 2; continue; }
      p += 6;
      while (p < src_.size() && IsAsciiSpace(src_[p])) ++p;
      size_t end;
      if (src_.compare(p, 3, "-%}") == 0) {
        end = SkipSpacePy(src_, p + 3);
      } else if (src_.compare(p, 3, "+%}") == 0) {
        end = p + 3;
      } else if (src_.compare(p, 2, "%}") == 0) {
        end = p + 2;
        if (opt_.trim_blocks && end < src_.size() && src_[end] == '\n') ++end;
      } else {
        search = open + 2;
        continue;
      }
      const bool starting = body > 0 && src_[body - 1] == '\n';
      EmitData(StripText(body, open, sign, true, starting), body);
      *line_starting = src_[end - 1] == '\n';
      return end;
    }
  }

  absl::StatusOr<size_t> SkipComment(size_t start, size_t after) {
    const size_t close = src_.find("#}", after);
    if (close == std::string::npos) return Error(start, "missing end of comment tag");
    size_t pos = close + 2;
    const char before = close > after ? src_[close - 1] : 0;
    if (before == '-') {
      pos = SkipSpacePy(src_, pos);
    } else if (before != '+' && opt_.trim_blocks && pos < src_.size() && src_[pos] == '\n') {
      ++pos;
    }
    return pos;
  }

  // Checks for the end of the tag at p; returns the index after it or npos.
  size_t MatchTagEnd(size_t p, bool block) const {
    const char close = block ? '%' : '}';
    if (src_[p] == '-' && p + 2 < src_.size() && src_[p + 1] == close && src_[p + 2] == '}') {
      return SkipSpacePy(src_, p + 3);
    }
    if (block && src_[p] == '+' && src_.compare(p + 1, 2, "%}") == 0) return p + 3;
    if (src_[p] == close && p + 1 < src_.size() && src_[p + 1] == '}') {
      size_t end = p + 2;
      if (block && opt_.trim_blocks && end < src_.size() && src_[end] == '\n') ++end;
      return end;
    }
    return std::string::npos;
  }

  absl::StatusOr<size_t> LexTag(size_t start, size_t after, bool block) {
    Token begin;
    begin.type = block ? TokenType::kBlockBegin : TokenType::kVarBegin;
    begin.text = block ? "{%" : "{{";
    SetPos(&begin, start);
    tokens_.push_back(std::move(begin));
    std::vector<char> balance;
    size_t p = after;
    while (true) {
      while (p < src_.size() && IsAsciiSpace(src_[p])) ++p;
      if (p >= src_.size()) {
        return Error(start, absl::StrCat("unexpected end of template: the tag opened here was "
                                         "never closed with '", block ? "%}" : "}}", "'"));
      }
      if (balance.empty()) {
        const size_t end = MatchTagEnd(p, block);
        if (end != std::string::npos) {
          Token t;
          t.type = block ? TokenType::kBlockEnd : TokenType::kVarEnd;
          t.text = block ? "%}" : "}}";
          SetPos(&t, p);
          tokens_.push_back(std::move(t));
          return end;
        }
      }
      ASSIGN_OR_RETURN(p, LexToken(p, &balance));
    }
  }

  absl::StatusOr<size_t> LexToken(size_t p, std::vector<char>* balance) {
    const char c = src_[p];
    Token t;
    SetPos(&t, p);
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t e = p + 1;
      while (e < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
      t.type = TokenType::kName;
      t.text = src_.substr(p, e - p);
      tokens_.push_back(std::move(t));
      return e;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) return LexNumber(p, std::move(t));
    if (c == '\'' || c == '"') return LexString(p, std::move(t));
    for (std::string_view op : kOps) {
      if (src_.compare(p, op.size(), op) != 0) continue;
      if (op == "(" || op == "[" || op == "{") {
        balance->push_back(op[0]);
      } else if (op == ")" || op == "]" || op == "}") {
        const char want = op == ")" ? '(' : op == "]" ? '[' : '{';
        if (balance->empty() || balance->back() != want) {
          return Error(p, absl::StrCat("unexpected '", AbslView(op), "'"));
        }
        balance->pop_back();
      }
      t.type = TokenType::kOp;
      t.text = std::string(op);
      tokens_.push_back(std::move(t));
      return p + op.size();
    }
    return Error(p, absl::StrCat("unexpected character '", AbslView(src_.substr(p, 1)), "'"));
  }

  absl::StatusOr<size_t> LexNumber(size_t p, Token t) {
    const bool after_dot = !tokens_.empty() && tokens_.back().type == TokenType::kOp &&
                           tokens_.back().text == ".";
    auto digits_end = [&](size_t i, auto pred) {
      while (i < src_.size() && (pred(src_[i]) || (src_[i] == '_' && i + 1 < src_.size() &&
                                                   pred(src_[i + 1])))) {
        ++i;
      }
      return i;
    };
    auto is_dec = [](char ch) { return ch >= '0' && ch <= '9'; };
    // 0x / 0o / 0b prefixes.
    if (src_[p] == '0' && p + 2 < src_.size()) {
      const char k = static_cast<char>(std::tolower(static_cast<unsigned char>(src_[p + 1])));
      const int base = k == 'x' ? 16 : k == 'o' ? 8 : k == 'b' ? 2 : 0;
      if (base != 0) {
        auto in_base = [base](char ch) {
          const int v = std::isdigit(static_cast<unsigned char>(ch)) ? ch - '0'
                        : std::isxdigit(static_cast<unsigned char>(ch))
                            ? std::tolower(static_cast<unsigned char>(ch)) - 'a' + 10
                            : 99;
          return v < base;
        };
        const size_t e = digits_end(p + 2, in_base);
        return FinishInt(p, p + 2, e, base, std::move(t));
      }
    }
    size_t e = digits_end(p, is_dec);
    bool is_float = false;
    if (!after_dot && e + 1 < src_.size() && src_[e] == '.' && is_dec(src_[e + 1])) {
      e = digits_end(e + 1, is_dec);
      is_float = true;
    }
    if (!after_dot && e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t x = e + 1;
      if (x < src_.size() && (src_[x] == '+' || src_[x] == '-')) ++x;
      if (x < src_.size() && is_dec(src_[x])) {
        e = digits_end(x, is_dec);
        is_float = true;
      }
    }
    if (!is_float) return FinishInt(p, p, e, 10, std::move(t));
    std::string text = src_.substr(p, e - p);
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    t.type = TokenType::kFloat;
    t.float_value = std::strtod(text.c_str(), nullptr);
    t.text = std::move(text);
    tokens_.push_back(std::move(t));
    return e;
  }

  absl::StatusOr<size_t> FinishInt(size_t p, size_t digits, size_t e, int base, Token t) {
    std::string text = src_.substr(digits, e - digits);
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    if (text.empty()) return Error(p, "invalid number literal");
    int64_t v = 0;
    auto res = std::from_chars(text.data(), text.data() + text.size(), v, base);
    if (res.ec != std::errc() || res.ptr != text.data() + text.size()) {
      return Error(p, "integer literal out of range");
    }
    t.type = TokenType::kInt;
    t.int_value = v;
    t.text = src_.substr(p, e - p);
    tokens_.push_back(std::move(t));
    return e;
  }

  absl::StatusOr<size_t> LexString(size_t p, Token t) {
    const char quote = src_[p];
    std::string value;
    size_t i = p + 1;
    while (true) {
      if (i >= src_.size()) return Error(p, "unterminated string literal");
      const char c = src_[i];
      if (c == quote) break;
      if (c != '\\' || i + 1 >= src_.size()) {
        value.push_back(c);
        ++i;
        continue;
      }
      i = Unescape(i, &value);
    }
    t.type = TokenType::kString;
    t.text = std::move(value);
    tokens_.push_back(std::move(t));
    return i + 1;
  }

  // Python unicode-escape for the escape at src_[i] == '\\'; returns the
  // index after it. Unknown escapes are kept verbatim, as Python does.
  size_t Unescape(size_t i, std::string* out) const {
    const char e = src_[i + 1];
    auto simple = [&](char ch) { out->push_back(ch); return i + 2; };
    switch (e) {
      case 'n': return simple('\n');
      case 't': return simple('\t');
      case 'r': return simple('\r');
      case '\\': return simple('\\');
      case '\'': return simple('\'');
      case '"': return simple('"');
      case 'a': return simple('\a');
      case 'b': return simple('\b');
      case 'f': return simple('\f');
      case 'v': return simple('\v');
      case '\n': return i + 2;  // line continuation
      default: break;
    }
    if (e >= '0' && e <= '7') {
      uint32_t v = 0;
      size_t j = i + 1;
      for (int k = 0; k < 3 && j < src_.size() && src_[j] >= '0' && src_[j] <= '7'; ++k, ++j) {
        v = v * 8 + static_cast<uint32_t>(src_[j] - '0');
      }
      AppendUtf8(v, out);
      return j;
    }
    const int width = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (width > 0 && i + 2 + width <= src_.size()) {
      uint32_t v = 0;
      auto res = std::from_chars(src_.data() + i + 2, src_.data() + i + 2 + width, v, 16);
      if (res.ec == std::errc() && res.ptr == src_.data() + i + 2 + width && v <= 0x10FFFF &&
          !(v >= 0xD800 && v <= 0xDFFF)) {
        AppendUtf8(v, out);
        return i + 2 + width;
      }
    }
    out->push_back('\\');
    return i + 1;
  }

  void SetPos(Token* t, size_t offset) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const size_t line = static_cast<size_t>(it - line_starts_.begin());
    t->line = static_cast<int>(line);
    t->column = static_cast<int>(offset - line_starts_[line - 1]) + 1;
  }

  absl::Status Error(size_t offset, std::string_view message) const {
    Token t;
    SetPos(&t, offset);
    return SyntaxError(t.line, t.column, message);
  }

  std::string src_;
  LexerOptions opt_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

std::string NormalizeNewlines(std::string_view source, bool keep_trailing_newline) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!keep_trailing_newline && !out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

absl::Status SyntaxError(int line, int column, std::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("template syntax error at line ", line,
                                                 ", column ", column, ": ", AbslView(message)));
}

absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source, const LexerOptions& options) {
  Lexer lexer(NormalizeNewlines(source, options.keep_trailing_newline), options);
  return lexer.Run();
}

}  // namespace moesplit::chat::internal
