#include "common/plan/byte_size.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace moesplit::plan {
namespace {

struct Unit {
  absl::string_view name;  // lower case
  uint64_t factor;
};

constexpr uint64_t kKi = 1024;
constexpr Unit kUnits[] = {
    {"", 1},           {"b", 1},
    {"k", kKi},        {"ki", kKi},        {"kib", kKi},        {"kb", 1000},
    {"m", kKi * kKi},  {"mi", kKi * kKi},  {"mib", kKi * kKi},  {"mb", 1000000},
    {"g", kKi * kKi * kKi}, {"gi", kKi * kKi * kKi}, {"gib", kKi * kKi * kKi},
    {"gb", 1000000000},
    {"t", kKi * kKi * kKi * kKi}, {"ti", kKi * kKi * kKi * kKi},
    {"tib", kKi * kKi * kKi * kKi}, {"tb", 1000000000000},
};

absl::Status Bad(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("bad size '", text, "': ", why));
}

}  // namespace

absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text) {
  const absl::string_view s = absl::StripAsciiWhitespace(text);
  if (s.empty()) return Bad(text, "empty (give e.g. 8GiB, 7.5G, 8000MiB or a byte count)");
  if (s[0] == '-' || s[0] == '+') return Bad(text, "no sign allowed; sizes are non-negative");
  size_t i = 0;
  int dots = 0, digits = 0;
  for (; i < s.size() && (absl::ascii_isdigit(s[i]) || s[i] == '.'); ++i) {
    if (s[i] == '.') ++dots; else ++digits;
  }
  if (digits == 0) return Bad(text, "no number (give e.g. 8GiB)");
  if (dots > 1) return Bad(text, "more than one '.'");
  const absl::string_view number = s.substr(0, i);
  const std::string unit =
      absl::AsciiStrToLower(absl::StripAsciiWhitespace(s.substr(i)));
  const Unit* found = nullptr;
  for (const Unit& u : kUnits) {
    if (u.name == unit) found = &u;
  }
  if (found == nullptr) {
    return Bad(text, absl::StrCat("unknown unit '", s.substr(i),
                                  "' (use B, KiB, MiB, GiB, TiB or K, M, G, T for "
                                  "powers of 1024; KB, MB, GB, TB for powers of 1000)"));
  }
  // Integer part exactly; the fraction times the factor, rounded down.
  const size_t dot = number.find('.');
  const absl::string_view int_part = number.substr(0, dot);
  const absl::string_view frac_part =
      dot == absl::string_view::npos ? absl::string_view() : number.substr(dot + 1);
  unsigned __int128 value = 0;
  for (char c : int_part) {
    value = value * 10 + static_cast<unsigned>(c - '0');
    if (value > UINT64_MAX) return Bad(text, "more than 2^64 - 1 bytes");
  }
  value *= found->factor;
  // fraction = f / 10^n; add floor(f * factor / 10^n), exact in 128 bits for
  // up to 18 fraction digits (more are ignored).
  unsigned __int128 f = 0, scale = 1;
  for (size_t j = 0; j < frac_part.size() && j < 18; ++j) {
    f = f * 10 + static_cast<unsigned>(frac_part[j] - '0');
    scale *= 10;
  }
  value += f * found->factor / scale;
  if (value > UINT64_MAX) return Bad(text, "more than 2^64 - 1 bytes");
  return static_cast<uint64_t>(value);
}

std::string FormatBytes(uint64_t b) {
  constexpr double kGi = 1073741824.0, kMi = 1048576.0;
  if (b >= (uint64_t{1} << 30)) return absl::StrFormat("%.2f GiB", b / kGi);
  if (b >= (uint64_t{1} << 20)) return absl::StrFormat("%.2f MiB", b / kMi);
  if (b >= 1024) return absl::StrFormat("%.1f KiB", b / 1024.0);
  return absl::StrCat(b, " B");
}

}  // namespace moesplit::plan
