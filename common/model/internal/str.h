// std::string_view -> absl::string_view for absl::StrCat: Debian's Abseil
// keeps its own string_view type.
// Thread-safe: pure function.
#pragma once

#include <string_view>

#include "absl/strings/string_view.h"

namespace moesplit::model::internal {

inline absl::string_view Sv(std::string_view s) { return {s.data(), s.size()}; }

}  // namespace moesplit::model::internal
