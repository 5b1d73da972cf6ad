// UTF-8 helpers giving Python str semantics (code points) over UTF-8 bytes.
//
// Invalid UTF-8 bytes decode as one code point each (U+FFFD-like, but the
// original byte is preserved on re-encoding), so no input is ever rejected or
// altered by decode → encode. Case mapping uses the C library's simple
// Unicode case mapping (C.UTF-8 locale, thread-safe *_l functions), falling
// back to ASCII when that locale is missing; full special casing (ß → SS)
// is not done. Thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace moesplit::chat::internal {

// Code points of s. Invalid bytes become 0x110000 + byte (outside Unicode).
std::vector<uint32_t> DecodeUtf8(std::string_view s);
void AppendUtf8(uint32_t cp, std::string* out);
std::string EncodeUtf8(const std::vector<uint32_t>& cps, size_t begin, size_t end);
// Number of code points (Python len()).
size_t CodePointCount(std::string_view s);
bool IsAscii(std::string_view s);

// Python str.isspace() for one code point.
bool IsPySpace(uint32_t cp);
// \w of Python's re (Unicode): letters, digits, underscore.
bool IsWordChar(uint32_t cp);
bool IsAlpha(uint32_t cp);
bool IsDigit(uint32_t cp);
bool IsUpper(uint32_t cp);
bool IsLower(uint32_t cp);
// Python str.isprintable() for one code point (approximation: controls,
// separators and common format characters are not printable).
bool IsPrintable(uint32_t cp);
uint32_t ToUpper(uint32_t cp);
uint32_t ToLower(uint32_t cp);

std::string Upper(std::string_view s);
std::string Lower(std::string_view s);

}  // namespace moesplit::chat::internal
