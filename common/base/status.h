// Status helpers shared by every moesplit component.
//
// Errors are absl::Status / absl::StatusOr<T> whose codes are the gRPC codes
// (see absl/status/status.h for which code to choose). Debian 12's Abseil does
// not ship status macros, so they are defined once here.
//
//   RETURN_IF_ERROR(expr);            // returns the Status if !ok()
//   ASSIGN_OR_RETURN(T v, expr);      // declares v from a StatusOr or returns
//
// Thread-safe: macros only.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define MOESPLIT_CONCAT_INNER_(a, b) a##b
#define MOESPLIT_CONCAT_(a, b) MOESPLIT_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                         \
  do {                                                \
    ::absl::Status moesplit_status_ = (expr);         \
    if (!moesplit_status_.ok()) return moesplit_status_; \
  } while (0)

#define MOESPLIT_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                    \
  if (!tmp.ok()) return std::move(tmp).status();        \
  lhs = std::move(tmp).value()

#define ASSIGN_OR_RETURN(lhs, expr) \
  MOESPLIT_ASSIGN_OR_RETURN_IMPL_(  \
      MOESPLIT_CONCAT_(moesplit_statusor_, __LINE__), lhs, expr)

#include <string_view>

#include "absl/strings/string_view.h"

namespace moesplit {
// Debian 12's Abseil is built with its own absl::string_view (not an alias of
// std::string_view); this converts at the boundary (StrCat, hash-map lookups).
inline absl::string_view AbslView(std::string_view s) { return {s.data(), s.size()}; }
}  // namespace moesplit
