// UTF-8 helpers for the tokenizer (private to common/tokenizer).
//
// "Valid" means RFC 3629 UTF-8: no overlong forms, no surrogates
// (U+D800..U+DFFF), nothing above U+10FFFF. This is what PCRE2 accepts in
// UTF mode, so text is made valid before it reaches the pre-tokenizer.
//
// Thread-safe: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/base/utf8.h"

namespace moesplit::tokenizer_internal {

inline constexpr uint32_t kReplacementChar = 0xFFFD;

// The helpers live in common/base/utf8.h (the services use them too).
using ::moesplit::AppendUtf8;
using ::moesplit::DecodeUtf8;
using ::moesplit::IncompleteUtf8Suffix;
using ::moesplit::IsValidUtf8;
using ::moesplit::ReplaceInvalidUtf8;
using ::moesplit::SanitizeUtf8;

}  // namespace moesplit::tokenizer_internal
