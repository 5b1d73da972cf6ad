// UTF-8 checks and encoding shared by the tokenizer, the chat templates and
// the services. "Valid" means RFC 3629 UTF-8: no overlong forms, no
// surrogates (U+D800..U+DFFF), nothing above U+10FFFF.
//
// Thread-safe: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace moesplit {

bool IsValidUtf8(std::string_view s);

// Appends the UTF-8 encoding of `cp`. REQUIRES: cp <= 0x10FFFF.
void AppendUtf8(uint32_t cp, std::string* out);

}  // namespace moesplit
