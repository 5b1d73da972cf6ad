#include "common/chat/internal/unicode.h"

#include "common/base/utf8.h"

#include <locale.h>
#include <wctype.h>

namespace moesplit::chat::internal {
namespace {

constexpr uint32_t kInvalidBase = 0x110000;

locale_t Utf8Locale() {
  static const locale_t loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(0));
  return loc;
}

bool IsInvalidMarker(uint32_t cp) { return cp >= kInvalidBase; }

}  // namespace

std::vector<uint32_t> DecodeUtf8(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const uint8_t c = static_cast<uint8_t>(s[i]);
    int len = 0;
    uint32_t cp = 0;
    if (c < 0x80) { out.push_back(c); ++i; continue; }
    if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
    bool ok = len > 0 && i + len <= s.size();
    for (int k = 1; ok && k < len; ++k) {
      const uint8_t cc = static_cast<uint8_t>(s[i + k]);
      if ((cc & 0xC0) != 0x80) { ok = false; break; }
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Reject overlong forms, surrogates and out-of-range values.
    if (ok) {
      static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
      ok = cp >= kMin[len] && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    }
    if (!ok) { out.push_back(kInvalidBase + c); ++i; continue; }
    out.push_back(cp);
    i += len;
  }
  return out;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (IsInvalidMarker(cp)) {
    out->push_back(static_cast<char>(cp - kInvalidBase));
    return;
  }
  ::moesplit::AppendUtf8(cp, out);
}

std::string EncodeUtf8(const std::vector<uint32_t>& cps, size_t begin, size_t end) {
  std::string out;
  for (size_t i = begin; i < end && i < cps.size(); ++i) AppendUtf8(cps[i], &out);
  return out;
}

size_t CodePointCount(std::string_view s) {
  if (IsAscii(s)) return s.size();
  return DecodeUtf8(s).size();
}

bool IsAscii(std::string_view s) {
  for (char c : s) {
    if (static_cast<uint8_t>(c) >= 0x80) return false;
  }
  return true;
}

bool IsPySpace(uint32_t cp) {
  switch (cp) {
    case ' ': case '\t': case '\n': case '\v': case '\f': case '\r':
    case 0x1C: case 0x1D: case 0x1E: case 0x1F: case 0x85: case 0xA0:
    case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

bool IsAlpha(uint32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  if (IsInvalidMarker(cp)) return false;
  locale_t loc = Utf8Locale();
  return loc != static_cast<locale_t>(0) && iswalpha_l(static_cast<wint_t>(cp), loc);
}

bool IsDigit(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  if (IsInvalidMarker(cp)) return false;
  locale_t loc = Utf8Locale();
  return loc != static_cast<locale_t>(0) && iswdigit_l(static_cast<wint_t>(cp), loc);
}

bool IsWordChar(uint32_t cp) { return cp == '_' || IsAlpha(cp) || IsDigit(cp); }

bool IsUpper(uint32_t cp) { return ToLower(cp) != cp; }
bool IsLower(uint32_t cp) { return ToUpper(cp) != cp; }

bool IsPrintable(uint32_t cp) {
  if (IsInvalidMarker(cp)) return false;
  if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) return false;
  if (cp == ' ') return true;
  if (IsPySpace(cp)) return false;
  if ((cp >= 0x200B && cp <= 0x200F) || (cp >= 0x202A && cp <= 0x202E) ||
      (cp >= 0x2060 && cp <= 0x2064) || cp == 0xFEFF) {
    return false;
  }
  if (cp >= 0xD800 && cp <= 0xDFFF) return false;
  if (cp >= 0xE000 && cp <= 0xF8FF) return false;  // private use
  return true;
}

uint32_t ToUpper(uint32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') ? cp - 32 : cp;
  if (IsInvalidMarker(cp)) return cp;
  locale_t loc = Utf8Locale();
  if (loc == static_cast<locale_t>(0)) return cp;
  return static_cast<uint32_t>(towupper_l(static_cast<wint_t>(cp), loc));
}

uint32_t ToLower(uint32_t cp) {
  if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  if (IsInvalidMarker(cp)) return cp;
  locale_t loc = Utf8Locale();
  if (loc == static_cast<locale_t>(0)) return cp;
  return static_cast<uint32_t>(towlower_l(static_cast<wint_t>(cp), loc));
}

std::string Upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (uint32_t cp : DecodeUtf8(s)) AppendUtf8(ToUpper(cp), &out);
  return out;
}

std::string Lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (uint32_t cp : DecodeUtf8(s)) AppendUtf8(ToLower(cp), &out);
  return out;
}

}  // namespace moesplit::chat::internal
