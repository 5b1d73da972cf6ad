// GPT-2 byte-level mapping (private to common/tokenizer).
//
// Byte-level BPE vocabularies store every token as text in which each byte
// of the real text is one printable code point: bytes 0x21..0x7E, 0xA1..0xAC
// and 0xAE..0xFF map to themselves, the other 68 bytes map, in byte order, to
// U+0100..U+0143 (so ' ' is 'Ġ' U+0120, '\n' is 'Ċ' U+010A). This is
// `bytes_to_unicode()` of OpenAI's GPT-2 encoder and llama.cpp's
// unicode_byte_to_utf8 / unicode_utf8_to_byte.
//
// Thread-safe: immutable tables built on first use.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace moesplit::tokenizer_internal {

// UTF-8 of the code point that stands for `byte`.
std::string_view ByteToUnicode(uint8_t byte);

// The byte a code point stands for, or -1 when it stands for none.
int UnicodeToByte(uint32_t cp);

// Appends the byte-level form of `raw` (each byte -> its code point's UTF-8).
void ByteEncode(std::string_view raw, std::string* out);

// The bytes a byte-level token text stands for. Code points outside the map
// are kept as llama.cpp's llama_decode_text does: "[UNK_BYTE_0x<hex>" +
// the whole text + "]".
std::string ByteDecode(std::string_view token_text);

}  // namespace moesplit::tokenizer_internal
