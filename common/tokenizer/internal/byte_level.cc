#include "common/tokenizer/internal/byte_level.h"

#include <array>

#include "absl/strings/str_format.h"
#include "common/tokenizer/internal/utf8.h"

namespace moesplit::tokenizer_internal {
namespace {

constexpr uint32_t kMaxMappedCp = 0x144;  // 256 + 68

struct ByteTables {
  std::array<std::string, 256> byte_to_utf8;
  std::array<int16_t, kMaxMappedCp> cp_to_byte;
};

bool MapsToItself(int b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) ||
         (b >= 0xAE && b <= 0xFF);
}

const ByteTables& Tables() {
  static const ByteTables* const tables = [] {
    auto* t = new ByteTables;
    t->cp_to_byte.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const uint32_t cp = MapsToItself(b) ? static_cast<uint32_t>(b) : next++;
      AppendUtf8(cp, &t->byte_to_utf8[b]);
      t->cp_to_byte[cp] = static_cast<int16_t>(b);
    }
    return t;
  }();
  return *tables;
}

}  // namespace

std::string_view ByteToUnicode(uint8_t byte) {
  return Tables().byte_to_utf8[byte];
}

int UnicodeToByte(uint32_t cp) {
  return cp < kMaxMappedCp ? Tables().cp_to_byte[cp] : -1;
}

void ByteEncode(std::string_view raw, std::string* out) {
  const ByteTables& t = Tables();
  for (char c : raw) out->append(t.byte_to_utf8[static_cast<uint8_t>(c)]);
}

std::string ByteDecode(std::string_view token_text) {
  std::string out;
  out.reserve(token_text.size());
  size_t pos = 0;
  while (pos < token_text.size()) {
    uint32_t cp = kReplacementChar;
    size_t len = 1;
    if (!DecodeUtf8(token_text, pos, &cp, &len)) {
      cp = kReplacementChar;
      len = 1;
    }
    const int b = UnicodeToByte(cp);
    if (b >= 0) {
      out.push_back(static_cast<char>(b));
    } else {
      std::string utf8;
      AppendUtf8(cp, &utf8);
      out.append("[UNK_BYTE_0x");
      for (char c : utf8) absl::StrAppendFormat(&out, "%02x", static_cast<uint8_t>(c));
      out.append(token_text);
      out.append("]");
    }
    pos += len;
  }
  return out;
}

}  // namespace moesplit::tokenizer_internal
