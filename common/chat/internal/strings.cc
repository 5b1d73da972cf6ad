#include "common/chat/internal/strings.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "common/base/status.h"
#include "common/chat/internal/unicode.h"

namespace moesplit::chat::internal {
namespace {

bool IsCased(uint32_t cp) { return IsUpper(cp) || IsLower(cp); }

bool IsLineBreak(uint32_t cp) {
  switch (cp) {
    case '\n': case '\r': case '\v': case '\f': case 0x1C: case 0x1D: case 0x1E:
    case 0x85: case 0x2028: case 0x2029:
      return true;
    default:
      return false;
  }
}

// Python slice-style clamp of an optional index into [0, len].
int64_t ClampIndex(std::optional<int64_t> v, int64_t dflt, int64_t len) {
  if (!v) return dflt;
  int64_t x = *v;
  if (x < 0) x = std::max<int64_t>(0, x + len);
  return std::min(x, len);
}

std::string StripUnderscores(std::string_view s, bool* ok) {
  std::string out;
  *ok = true;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '_') { out.push_back(s[i]); continue; }
    // An underscore must sit between two digits.
    if (i == 0 || i + 1 >= s.size() || !std::isxdigit(static_cast<unsigned char>(s[i - 1])) ||
        !std::isxdigit(static_cast<unsigned char>(s[i + 1]))) {
      *ok = false;
    }
  }
  return out;
}

}  // namespace

std::string PyPad(const std::string& s, int64_t width, std::string_view fill, PadAlign align) {
  const int64_t len = static_cast<int64_t>(CodePointCount(s));
  if (width <= len) return s;
  const int64_t marg = width - len;
  int64_t left = 0;
  switch (align) {
    case PadAlign::kLeft: left = 0; break;
    case PadAlign::kRight: left = marg; break;
    case PadAlign::kCenter: left = marg / 2 + (marg & width & 1); break;
  }
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = left; i < marg; ++i) out += fill;
  return out;
}

std::string PyCapitalize(std::string_view s) {
  std::vector<uint32_t> cps = DecodeUtf8(s);
  std::string out;
  for (size_t i = 0; i < cps.size(); ++i) AppendUtf8(i == 0 ? ToUpper(cps[i]) : ToLower(cps[i]), &out);
  return out;
}

std::string PyTitle(std::string_view s) {
  std::string out;
  bool prev_cased = false;
  for (uint32_t cp : DecodeUtf8(s)) {
    const uint32_t c = prev_cased ? ToLower(cp) : ToUpper(cp);
    prev_cased = IsCased(cp);
    AppendUtf8(c, &out);
  }
  return out;
}

std::string JinjaTitle(std::string_view s) {
  std::string out;
  bool word_start = true;
  for (uint32_t cp : DecodeUtf8(s)) {
    const bool sep = IsPySpace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
    if (sep) {
      AppendUtf8(cp, &out);
      word_start = true;
    } else {
      AppendUtf8(word_start ? ToUpper(cp) : ToLower(cp), &out);
      word_start = false;
    }
  }
  return out;
}

std::string PySwapcase(std::string_view s) {
  std::string out;
  for (uint32_t cp : DecodeUtf8(s)) AppendUtf8(IsUpper(cp) ? ToLower(cp) : ToUpper(cp), &out);
  return out;
}

std::string PyStrip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  std::vector<uint32_t> cps = DecodeUtf8(s);
  std::vector<uint32_t> set;
  if (chars) set = DecodeUtf8(*chars);
  auto strip_it = [&](uint32_t cp) {
    return chars ? std::find(set.begin(), set.end(), cp) != set.end() : IsPySpace(cp);
  };
  size_t b = 0, e = cps.size();
  if (left) while (b < e && strip_it(cps[b])) ++b;
  if (right) while (e > b && strip_it(cps[e - 1])) --e;
  return EncodeUtf8(cps, b, e);
}

absl::StatusOr<std::vector<std::string>> PySplit(std::string_view s, const std::optional<std::string>& sep,
                                                 int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (maxsplit < 0) maxsplit = INT64_MAX;
  if (sep) {
    if (sep->empty()) return absl::InvalidArgumentError("ValueError: empty separator");
    if (!from_right) {
      size_t pos = 0;
      while (static_cast<int64_t>(parts.size()) < maxsplit) {
        const size_t hit = s.find(*sep, pos);
        if (hit == std::string_view::npos) break;
        parts.emplace_back(s.substr(pos, hit - pos));
        pos = hit + sep->size();
      }
      parts.emplace_back(s.substr(pos));
      return parts;
    }
    size_t end = s.size();
    while (static_cast<int64_t>(parts.size()) < maxsplit && end >= sep->size()) {
      const size_t hit = s.rfind(*sep, end - sep->size());
      if (hit == std::string_view::npos) break;
      parts.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
      end = hit;
    }
    parts.emplace_back(s.substr(0, end));
    std::reverse(parts.begin(), parts.end());
    return parts;
  }
  std::vector<uint32_t> cps = DecodeUtf8(s);
  if (from_right) std::reverse(cps.begin(), cps.end());
  size_t i = 0;
  while (true) {
    while (i < cps.size() && IsPySpace(cps[i])) ++i;
    if (i >= cps.size()) break;
    if (static_cast<int64_t>(parts.size()) >= maxsplit) {
      size_t e = cps.size();
      while (e > i && IsPySpace(cps[e - 1])) --e;
      std::vector<uint32_t> rest(cps.begin() + static_cast<ptrdiff_t>(i), cps.begin() + static_cast<ptrdiff_t>(e));
      if (from_right) std::reverse(rest.begin(), rest.end());
      parts.push_back(EncodeUtf8(rest, 0, rest.size()));
      break;
    }
    size_t j = i;
    while (j < cps.size() && !IsPySpace(cps[j])) ++j;
    std::vector<uint32_t> word(cps.begin() + static_cast<ptrdiff_t>(i), cps.begin() + static_cast<ptrdiff_t>(j));
    if (from_right) std::reverse(word.begin(), word.end());
    parts.push_back(EncodeUtf8(word, 0, word.size()));
    i = j;
  }
  if (from_right) std::reverse(parts.begin(), parts.end());
  return parts;
}

std::vector<std::string> PySplitLines(std::string_view s, bool keepends) {
  std::vector<uint32_t> cps = DecodeUtf8(s);
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < cps.size(); ++i) {
    if (!IsLineBreak(cps[i])) continue;
    size_t eol = i + 1;
    if (cps[i] == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') eol = i + 2;
    lines.push_back(EncodeUtf8(cps, start, keepends ? eol : i));
    start = eol;
    i = eol - 1;
  }
  if (start < cps.size()) lines.push_back(EncodeUtf8(cps, start, cps.size()));
  return lines;
}

absl::StatusOr<std::string> PyReplace(EvalContext& ctx, std::string_view s, std::string_view old,
                                      std::string_view repl, int64_t count) {
  if (count < 0) count = INT64_MAX;
  std::string out;
  if (old.empty()) {
    std::vector<uint32_t> cps = DecodeUtf8(s);
    int64_t n = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (n++ < count) out += repl;
      if (i < cps.size()) AppendUtf8(cps[i], &out);
      RETURN_IF_ERROR(ctx.CheckSize(out.size()));
    }
    return out;
  }
  size_t pos = 0;
  int64_t n = 0;
  while (n < count) {
    const size_t hit = s.find(old, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(repl);
    RETURN_IF_ERROR(ctx.CheckSize(out.size()));
    pos = hit + old.size();
    ++n;
  }
  out.append(s.substr(pos));
  RETURN_IF_ERROR(ctx.CheckSize(out.size()));
  return out;
}

int64_t PyFind(std::string_view s, std::string_view sub, std::optional<int64_t> start,
               std::optional<int64_t> end, bool reverse) {
  std::vector<uint32_t> hay = DecodeUtf8(s);
  std::vector<uint32_t> needle = DecodeUtf8(sub);
  const int64_t len = static_cast<int64_t>(hay.size());
  const int64_t b = ClampIndex(start, 0, len);
  const int64_t e = ClampIndex(end, len, len);
  const int64_t n = static_cast<int64_t>(needle.size());
  if (e - b < n) return -1;
  auto match_at = [&](int64_t i) {
    return std::equal(needle.begin(), needle.end(), hay.begin() + i);
  };
  if (!reverse) {
    for (int64_t i = b; i + n <= e; ++i) if (match_at(i)) return i;
  } else {
    for (int64_t i = e - n; i >= b; --i) if (match_at(i)) return i;
  }
  return -1;
}

int64_t PyCount(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(CodePointCount(s)) + 1;
  int64_t n = 0;
  for (size_t pos = s.find(sub); pos != std::string_view::npos; pos = s.find(sub, pos + sub.size())) ++n;
  return n;
}

std::optional<double> ParsePyFloat(std::string_view s) {
  const std::string t = PyStrip(s, std::nullopt, true, true);
  std::string_view v(t);
  std::string lower = absl::AsciiStrToLower(absl::string_view(v.data(), v.size()));
  std::string_view body = lower;
  bool neg = false;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) { neg = body[0] == '-'; body.remove_prefix(1); }
  if (body == "inf" || body == "infinity") return neg ? -HUGE_VAL : HUGE_VAL;
  if (body == "nan") return std::nan("");
  // [digits][.digits][e[+-]digits] with at least one digit in the mantissa.
  size_t i = 0;
  bool digits = false;
  auto eat_digits = [&]() { while (i < body.size() && (std::isdigit(static_cast<unsigned char>(body[i])) || body[i] == '_')) { digits = true; ++i; } };
  eat_digits();
  if (i < body.size() && body[i] == '.') { ++i; eat_digits(); }
  if (!digits) return std::nullopt;
  if (i < body.size() && body[i] == 'e') {
    ++i;
    if (i < body.size() && (body[i] == '+' || body[i] == '-')) ++i;
    const size_t before = i;
    while (i < body.size() && std::isdigit(static_cast<unsigned char>(body[i]))) ++i;
    if (i == before) return std::nullopt;
  }
  if (i != body.size()) return std::nullopt;
  bool ok = true;
  std::string clean = StripUnderscores(v, &ok);
  if (!ok) return std::nullopt;
  return std::strtod(clean.c_str(), nullptr);
}

std::optional<int64_t> ParsePyInt(std::string_view s, int base) {
  if (base != 0 && (base < 2 || base > 36)) return std::nullopt;
  const std::string t = PyStrip(s, std::nullopt, true, true);
  std::string_view v(t);
  bool neg = false;
  if (!v.empty() && (v[0] == '+' || v[0] == '-')) { neg = v[0] == '-'; v.remove_prefix(1); }
  if (v.size() > 2 && v[0] == '0') {
    const char k = static_cast<char>(std::tolower(static_cast<unsigned char>(v[1])));
    const int prefixed = k == 'x' ? 16 : k == 'o' ? 8 : k == 'b' ? 2 : 0;
    if (prefixed != 0 && (base == prefixed || base == 0)) { base = prefixed; v.remove_prefix(2); }
  }
  if (base == 0) base = 10;
  bool ok = true;
  std::string clean = StripUnderscores(v, &ok);
  if (!ok || clean.empty()) return std::nullopt;
  uint64_t mag = 0;
  auto res = std::from_chars(clean.data(), clean.data() + clean.size(), mag, base);
  if (res.ec != std::errc() || res.ptr != clean.data() + clean.size()) return std::nullopt;
  if (mag > static_cast<uint64_t>(INT64_MAX) + (neg ? 1 : 0)) return std::nullopt;
  return neg ? static_cast<int64_t>(0 - mag) : static_cast<int64_t>(mag);
}

double PyRound(double x, int64_t precision, std::string_view method) {
  if (!std::isfinite(x)) return x;
  if (method == "ceil" || method == "floor") {
    const double scale = std::pow(10.0, static_cast<double>(std::clamp<int64_t>(precision, -308, 308)));
    const double y = x * scale;
    return (method == "ceil" ? std::ceil(y) : std::floor(y)) / scale;
  }
  if (precision == 0) return std::nearbyint(x);
  if (precision > 0) {
    if (precision > 30) return x;
    char buf[400];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(precision), x);  // exact, half-even
    return std::strtod(buf, nullptr);
  }
  if (precision < -308) return std::copysign(0.0, x);
  const double scale = std::pow(10.0, static_cast<double>(-precision));
  return std::nearbyint(x / scale) * scale;
}

}  // namespace moesplit::chat::internal
