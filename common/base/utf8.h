// UTF-8 checks, repairs and encoding shared by the tokenizer, the chat
// templates and the services. "Valid" means RFC 3629 UTF-8: no overlong
// forms, no surrogates (U+D800..U+DFFF), nothing above U+10FFFF (what PCRE2
// accepts in UTF mode, and what protobuf requires of a proto3 `string`).
//
// Thread-safe: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace moesplit {

bool IsValidUtf8(std::string_view s);

// Appends the UTF-8 encoding of `cp`. REQUIRES: cp <= 0x10FFFF.
void AppendUtf8(uint32_t cp, std::string* out);

// Decodes one code point at `s[pos]`. On success stores it in `*cp`, its
// length in `*len` and returns true; returns false when the bytes at `pos` do
// not start a valid (and complete) sequence.
bool DecodeUtf8(std::string_view s, size_t pos, uint32_t* cp, size_t* len);

// Returns `s` with every byte that does not belong to a valid sequence
// replaced by U+FFFD, one replacement per byte. This is how llama.cpp's
// unicode_cpts_from_utf8 treats broken input before pre-tokenization.
std::string SanitizeUtf8(std::string_view s);

// Length of the longest suffix of `s` (0..3 bytes) that is a proper prefix of
// some valid sequence, i.e. could still become valid when more bytes arrive.
size_t IncompleteUtf8Suffix(std::string_view s);

// Converts `s` to valid UTF-8 for output: each maximal invalid subpart
// (Unicode 15, §3.9 "U+FFFD substitution of maximal subparts") becomes one
// U+FFFD; valid sequences are copied, so valid input comes back unchanged.
std::string ReplaceInvalidUtf8(std::string_view s);

}  // namespace moesplit
