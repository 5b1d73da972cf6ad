// Python str operations over UTF-8 (indices and lengths in code points),
// shared by the filters and the str methods. Thread-safe (pure).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/chat/internal/builtins.h"

namespace moesplit::chat::internal {

enum class PadAlign { kLeft, kRight, kCenter };

// str.ljust (kLeft) / rjust (kRight) / center (kCenter) with a one-code-point fill.
std::string PyPad(const std::string& s, int64_t width, std::string_view fill, PadAlign align);
std::string PyCapitalize(std::string_view s);
std::string PyTitle(std::string_view s);     // str.title()
std::string JinjaTitle(std::string_view s);  // jinja2's `title` filter (words split at -\s({[<)
std::string PySwapcase(std::string_view s);
// str.strip/lstrip/rstrip; chars nullopt = Unicode whitespace.
std::string PyStrip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// str.split / str.rsplit; sep nullopt = runs of whitespace. Empty sep → error.
absl::StatusOr<std::vector<std::string>> PySplit(std::string_view s, const std::optional<std::string>& sep,
                                                 int64_t maxsplit, bool from_right);
std::vector<std::string> PySplitLines(std::string_view s, bool keepends);
absl::StatusOr<std::string> PyReplace(EvalContext& ctx, std::string_view s, std::string_view old,
                                      std::string_view repl, int64_t count);
// str.find / rfind within [start, end) (code points, Python slice rules);
// -1 when absent.
int64_t PyFind(std::string_view s, std::string_view sub, std::optional<int64_t> start,
               std::optional<int64_t> end, bool reverse);
int64_t PyCount(std::string_view s, std::string_view sub);
// float(str) / int(str, base) as Python parses them; nullopt when invalid.
std::optional<double> ParsePyFloat(std::string_view s);
std::optional<int64_t> ParsePyInt(std::string_view s, int base);
// jinja2 `round`: method "common" (Python round, half to even), "ceil", "floor".
double PyRound(double x, int64_t precision, std::string_view method);

}  // namespace moesplit::chat::internal
