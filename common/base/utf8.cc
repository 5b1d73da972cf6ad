#include "common/base/utf8.h"

namespace moesplit {
namespace {

// Total length of the sequence a lead byte starts, or 0 for a byte that can
// never start a valid sequence (continuations, C0/C1 overlongs, F5..FF).
size_t SequenceLength(uint8_t b) {
  if (b < 0x80) return 1;
  if (b < 0xC2) return 0;
  if (b < 0xE0) return 2;
  if (b < 0xF0) return 3;
  if (b < 0xF5) return 4;
  return 0;
}

// How many bytes from `pos` follow the pattern of the sequence started there
// (1..need), or 0 when s[pos] is not a lead byte. The second byte's range
// depends on the lead (this excludes overlongs, surrogates, > U+10FFFF).
size_t MatchLength(std::string_view s, size_t pos, size_t* need) {
  const uint8_t lead = static_cast<uint8_t>(s[pos]);
  *need = SequenceLength(lead);
  if (*need == 0) return 0;
  size_t k = 1;
  while (k < *need && pos + k < s.size()) {
    const uint8_t b = static_cast<uint8_t>(s[pos + k]);
    uint8_t lo = 0x80, hi = 0xBF;
    if (k == 1) {
      if (lead == 0xE0) lo = 0xA0;
      if (lead == 0xED) hi = 0x9F;
      if (lead == 0xF0) lo = 0x90;
      if (lead == 0xF4) hi = 0x8F;
    }
    if (b < lo || b > hi) break;
    ++k;
  }
  return k;
}

void AppendReplacement(std::string* out) { out->append("\xEF\xBF\xBD"); }

}  // namespace

bool DecodeUtf8(std::string_view s, size_t pos, uint32_t* cp, size_t* len) {
  if (pos >= s.size()) return false;
  size_t need = 0;
  const size_t k = MatchLength(s, pos, &need);
  if (need == 0 || k != need) return false;
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(s[pos + i]); };
  switch (need) {
    case 1: *cp = byte(0); break;
    case 2: *cp = ((byte(0) & 0x1Fu) << 6) | (byte(1) & 0x3Fu); break;
    case 3:
      *cp = ((byte(0) & 0x0Fu) << 12) | ((byte(1) & 0x3Fu) << 6) |
            (byte(2) & 0x3Fu);
      break;
    default:
      *cp = ((byte(0) & 0x07u) << 18) | ((byte(1) & 0x3Fu) << 12) |
            ((byte(2) & 0x3Fu) << 6) | (byte(3) & 0x3Fu);
      break;
  }
  *len = need;
  return true;
}

std::string SanitizeUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  size_t pos = 0;
  while (pos < s.size()) {
    size_t need = 0;
    if (MatchLength(s, pos, &need) == need && need != 0) {
      out.append(s.substr(pos, need));
      pos += need;
    } else {
      AppendReplacement(&out);
      ++pos;
    }
  }
  return out;
}

size_t IncompleteUtf8Suffix(std::string_view s) {
  const size_t first = s.size() >= 3 ? s.size() - 3 : 0;
  for (size_t p = first; p < s.size(); ++p) {
    size_t need = 0;
    const size_t k = MatchLength(s, p, &need);
    if (need > 0 && k == s.size() - p && k < need) return k;
  }
  return 0;
}

std::string ReplaceInvalidUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) {
    size_t need = 0;
    const size_t k = MatchLength(s, pos, &need);
    if (need != 0 && k == need) {
      out.append(s.substr(pos, need));
      pos += need;
    } else {
      AppendReplacement(&out);
      pos += k == 0 ? 1 : k;  // a maximal subpart is at least one byte
    }
  }
  return out;
}


bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    int len;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > n) return false;
    for (int k = 1; k < len; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += len;
  }
  return true;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace moesplit
