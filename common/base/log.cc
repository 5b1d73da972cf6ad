#include "common/base/log.h"

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace moesplit {
namespace {

std::atomic<LogFormat> g_format{LogFormat::kText};

const char* LevelName(LogLevel level, LogFormat format) {
  switch (level) {
    case LogLevel::kInfo: return format == LogFormat::kJson ? "info" : "INFO";
    case LogLevel::kWarning: return format == LogFormat::kJson ? "warning" : "WARN";
    case LogLevel::kError: return format == LogFormat::kJson ? "error" : "ERROR";
  }
  return "INFO";
}

// A JSON string literal of `s` (bytes that are not valid UTF-8 pass as they
// are: callers log text they already checked or produced).
std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          absl::StrAppendFormat(&out, "\\u%04x", c);
        } else {
          out += ch;
        }
    }
  }
  out += '"';
  return out;
}

std::string Number(double v, bool json) {
  if (!std::isfinite(v)) return json ? "null" : "nan";
  std::string s = absl::StrFormat("%.3f", v);
  // Trailing zeros (and a trailing point) say nothing.
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s == "-0" ? "0" : s;
}

std::string TextValue(absl::string_view s) {
  const bool plain = !s.empty() && s.find_first_of(" \"=\n\r\t\\") == absl::string_view::npos;
  return plain ? std::string(s) : JsonString(s);
}

}  // namespace

absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view name) {
  if (name == "text") return LogFormat::kText;
  if (name == "json") return LogFormat::kJson;
  return absl::InvalidArgumentError(absl::StrCat("log format must be text or json, got '", name,
                                                 "'"));
}

void SetLogFormat(LogFormat format) { g_format.store(format); }
LogFormat GetLogFormat() { return g_format.load(); }

std::string Rfc3339Millis(std::chrono::system_clock::time_point when) {
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(when.time_since_epoch()).count();
  const time_t secs = static_cast<time_t>(ms >= 0 ? ms / 1000 : (ms - 999) / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  return absl::StrFormat("%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                         tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                         static_cast<int>(ms - static_cast<int64_t>(secs) * 1000));
}

std::string FormatLogLine(LogFormat format, std::chrono::system_clock::time_point when,
                          LogLevel level, absl::string_view source, absl::string_view message,
                          const std::vector<LogField>& fields) {
  const bool json = format == LogFormat::kJson;
  std::string line;
  if (json) {
    line = absl::StrCat("{\"ts\":\"", Rfc3339Millis(when), "\",\"level\":\"",
                        LevelName(level, format), "\",\"source\":", JsonString(source),
                        ",\"msg\":", JsonString(message));
  } else {
    line = absl::StrCat(Rfc3339Millis(when), " ", LevelName(level, format), " ", source, ": ",
                        message);
  }
  for (const LogField& f : fields) {
    std::string v;
    if (const auto* s = std::get_if<std::string>(&f.value)) {
      v = json ? JsonString(*s) : TextValue(*s);
    } else if (const auto* i = std::get_if<int64_t>(&f.value)) {
      v = absl::StrCat(*i);
    } else {
      v = Number(std::get<double>(f.value), json);
    }
    if (json) {
      absl::StrAppend(&line, ",", JsonString(f.key), ":", v);
    } else {
      absl::StrAppend(&line, " ", f.key, "=", v);
    }
  }
  if (json) line += "}";
  return line;
}

void Log(LogLevel level, absl::string_view source, absl::string_view message,
         const std::vector<LogField>& fields) {
  std::string line = FormatLogLine(GetLogFormat(), std::chrono::system_clock::now(), level,
                                   source, message, fields);
  line += '\n';
  // One write: lines of concurrent threads never interleave.
  size_t off = 0;
  while (off < line.size()) {
    const ssize_t n = write(STDERR_FILENO, line.data() + off, line.size() - off);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
}

}  // namespace moesplit
