// Log: the services' one logger. Every line goes to stderr, whole (one
// write per line, so lines of concurrent threads never interleave), as
//   text: 2026-12-01T22:35:41.123Z INFO moesplit-dense: message key=value ...
//   json: {"ts":"2026-12-01T22:35:41.123Z","level":"info","source":"moesplit-dense",
//          "msg":"message","key":value,...}
// Timestamps are RFC 3339 UTC with milliseconds. Fields keep their order; a
// text value with a space, '"' or '=' is quoted (JSON string escapes). The
// format is process-wide (SetLogFormat, --log-format) and defaults to text.
//
// Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace moesplit {

enum class LogLevel { kInfo, kWarning, kError };
enum class LogFormat { kText, kJson };

// "text" or "json"; InvalidArgument otherwise.
absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view name);
void SetLogFormat(LogFormat format);
LogFormat GetLogFormat();

// One key/value of a line: a string, an integer or a number (printed with
// at most 3 decimals; NaN and infinities print as null in JSON).
struct LogField {
  std::string key;
  std::variant<std::string, int64_t, double> value;
  LogField(std::string k, std::string v) : key(std::move(k)), value(std::move(v)) {}
  LogField(std::string k, const char* v) : key(std::move(k)), value(std::string(v)) {}
  LogField(std::string k, int v) : key(std::move(k)), value(static_cast<int64_t>(v)) {}
  LogField(std::string k, int64_t v) : key(std::move(k)), value(v) {}
  LogField(std::string k, uint64_t v) : key(std::move(k)), value(static_cast<int64_t>(v)) {}
  LogField(std::string k, double v) : key(std::move(k)), value(v) {}
};

// The line Log writes (without the newline), for `format`, at `when`.
std::string FormatLogLine(LogFormat format, std::chrono::system_clock::time_point when,
                          LogLevel level, absl::string_view source, absl::string_view message,
                          const std::vector<LogField>& fields);

// Writes one line to stderr in the process's format.
void Log(LogLevel level, absl::string_view source, absl::string_view message,
         const std::vector<LogField>& fields = {});

// "2026-12-01T22:35:41.123Z".
std::string Rfc3339Millis(std::chrono::system_clock::time_point when);

}  // namespace moesplit
