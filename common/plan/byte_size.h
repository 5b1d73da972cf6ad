// Byte sizes as people type them ("8GiB", "7.5G", "8000MiB", "123456") and
// as the planner prints them.
//
// Grammar: NUMBER [UNIT], optional spaces between them, where NUMBER is a
// non-negative decimal (digits with at most one '.', no exponent, no sign)
// and UNIT, case-insensitive, is one of
//   B (or none)                        1
//   K, KI, KIB   M, MI, MIB   G, GI, GIB   T, TI, TIB    powers of 1024
//   KB, MB, GB, TB                     powers of 1000 (SI)
// A bare letter is binary, as in GNU tools ("-m 8G"). A fractional result is
// rounded down to whole bytes ("1.1K" = 1126).
//
// Thread-safe: pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace moesplit::plan {

// InvalidArgument quoting the text and saying what is wrong: empty, a sign,
// no digits, more than one '.', an unknown unit (listing the accepted ones),
// or more than 2^64 - 1 bytes.
absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text);

// "8.00 GiB", "3.19 GiB", "16.00 MiB", "512.0 KiB", "17 B": binary units,
// two decimals from MiB up.
std::string FormatBytes(uint64_t bytes);

// Bytes in GiB, e.g. 1.3 for a message ("1.30 GiB short").
inline double ToGiB(uint64_t bytes) { return bytes / 1073741824.0; }

}  // namespace moesplit::plan
