#include "services/cli/flags.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"

namespace moesplit::cli {
namespace {

// A bound on a flag's value as the user reads it: integers without ".0".
std::string BoundText(double v, bool integer) {
  return integer ? absl::StrCat(static_cast<int64_t>(v)) : absl::StrCat(v);
}

bool ValidHostChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_';
}

}  // namespace

std::string DashedName(absl::string_view name) {
  return absl::StrCat(name.size() == 1 ? "-" : "--", name);
}

// ---- FlagRef -----------------------------------------------------------------

FlagParser::FlagRef& FlagParser::FlagRef::DefaultText(std::string text) {
  parser_->flags_[index_].default_text = std::move(text);
  return *this;
}
FlagParser::FlagRef& FlagParser::FlagRef::Required() {
  parser_->flags_[index_].required = true;
  return *this;
}
FlagParser::FlagRef& FlagParser::FlagRef::Range(double lo, double hi) {
  Flag& f = parser_->flags_[index_];
  f.has_range = true;
  f.lo = lo;
  f.hi = hi;
  return *this;
}
FlagParser::FlagRef& FlagParser::FlagRef::OneOf(std::vector<std::string> values) {
  Flag& f = parser_->flags_[index_];
  if (f.meta.empty()) f.meta = absl::StrJoin(values, "|");
  f.one_of = std::move(values);
  return *this;
}
FlagParser::FlagRef& FlagParser::FlagRef::HostPort() {
  Flag& f = parser_->flags_[index_];
  if (f.meta.empty()) f.meta = "HOST:PORT";
  f.checks.push_back(CheckHostPort);
  return *this;
}
FlagParser::FlagRef& FlagParser::FlagRef::Check(
    std::function<absl::Status(absl::string_view)> check) {
  parser_->flags_[index_].checks.push_back(std::move(check));
  return *this;
}
FlagParser::FlagRef& FlagParser::FlagRef::Repeatable() {
  parser_->flags_[index_].repeatable = true;
  return *this;
}
FlagParser::FlagRef& FlagParser::FlagRef::Meta(std::string meta) {
  parser_->flags_[index_].meta = std::move(meta);
  return *this;
}

// ---- registration ------------------------------------------------------------

FlagParser::FlagRef FlagParser::Add(absl::string_view names, Kind kind, void* dst,
                                    std::string help) {
  Flag flag{{}, kind, dst, std::move(help), section_};
  for (absl::string_view n : absl::StrSplit(names, '|')) {
    if (by_name_.contains(n) || n == "help" || n == "h") {
      // A programmer error: two flags of one table share a name.
      std::fprintf(stderr, "FlagParser: flag name '%s' registered twice\n", std::string(n).c_str());
      std::abort();
    }
    by_name_[std::string(n)] = flags_.size();
    flag.names.emplace_back(n);
  }
  // The default the help shows: the bound variable's value now.
  switch (kind) {
    case Kind::kString:
      flag.default_text = *static_cast<std::string*>(dst);
      break;
    case Kind::kInt:
      flag.default_text = absl::StrCat(*static_cast<int64_t*>(dst));
      break;
    case Kind::kDouble:
      flag.default_text = absl::StrCat(*static_cast<double*>(dst));
      break;
    case Kind::kBool:
      flag.default_text = *static_cast<bool*>(dst) ? "true" : "";
      break;
  }
  flags_.push_back(std::move(flag));
  return FlagRef(this, flags_.size() - 1);
}

FlagParser::FlagRef FlagParser::AddString(absl::string_view names, std::string* dst,
                                          std::string help) {
  return Add(names, Kind::kString, dst, std::move(help));
}
FlagParser::FlagRef FlagParser::AddInt(absl::string_view names, int64_t* dst, std::string help) {
  return Add(names, Kind::kInt, dst, std::move(help));
}
FlagParser::FlagRef FlagParser::AddDouble(absl::string_view names, double* dst, std::string help) {
  return Add(names, Kind::kDouble, dst, std::move(help));
}
FlagParser::FlagRef FlagParser::AddBool(absl::string_view names, bool* dst, std::string help) {
  return Add(names, Kind::kBool, dst, std::move(help));
}

void FlagParser::Section(std::string title) { section_ = std::move(title); }

// ---- parsing -----------------------------------------------------------------

absl::Status FlagParser::CheckValue(const Flag& flag, absl::string_view shown,
                                    absl::string_view value) const {
  if (flag.has_range) {
    double v = 0;
    if (flag.kind == Kind::kInt) v = static_cast<double>(*static_cast<int64_t*>(flag.dst));
    if (flag.kind == Kind::kDouble) v = *static_cast<double*>(flag.dst);
    if (v < flag.lo || v > flag.hi) {
      const bool integer = flag.kind == Kind::kInt;
      return absl::InvalidArgumentError(absl::StrCat("flag ", shown, " must be in ",
                                                     BoundText(flag.lo, integer), "..",
                                                     BoundText(flag.hi, integer), ", got ", value));
    }
  }
  if (!flag.one_of.empty() &&
      std::find(flag.one_of.begin(), flag.one_of.end(), value) == flag.one_of.end()) {
    return absl::InvalidArgumentError(absl::StrCat("flag ", shown, " must be one of ",
                                                   absl::StrJoin(flag.one_of, ", "), "; got '",
                                                   value, "'"));
  }
  for (const auto& check : flag.checks) {
    if (absl::Status s = check(value); !s.ok()) {
      // Messages that already name the flag ("--shard layers=...") stay as they are.
      if (absl::StartsWith(s.message(), shown)) return absl::InvalidArgumentError(s.message());
      return absl::InvalidArgumentError(absl::StrCat("flag ", shown, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status FlagParser::Assign(Flag& flag, absl::string_view shown, absl::string_view value) {
  const bool append = flag.repeatable && flag.set && !flag.raw.empty() && !value.empty();
  flag.set = true;
  flag.raw = append ? absl::StrCat(flag.raw, ",", value) : std::string(value);
  switch (flag.kind) {
    case Kind::kString:
      *static_cast<std::string*>(flag.dst) = flag.raw;
      break;
    case Kind::kInt:
      if (!absl::SimpleAtoi(value, static_cast<int64_t*>(flag.dst))) {
        return absl::InvalidArgumentError(
            absl::StrCat("flag ", shown, " expects an integer, got '", value, "'"));
      }
      break;
    case Kind::kDouble: {
      double* d = static_cast<double*>(flag.dst);
      if (!absl::SimpleAtod(value, d) || !std::isfinite(*d)) {
        return absl::InvalidArgumentError(
            absl::StrCat("flag ", shown, " expects a number, got '", value, "'"));
      }
      break;
    }
    case Kind::kBool: {
      bool* b = static_cast<bool*>(flag.dst);
      if (!absl::SimpleAtob(value, b)) {
        return absl::InvalidArgumentError(
            absl::StrCat("flag ", shown, " expects true or false, got '", value, "'"));
      }
      break;
    }
  }
  return CheckValue(flag, shown, value);
}

std::string FlagParser::UnknownFlagMessage(absl::string_view arg, absl::string_view body,
                                           bool two_dashes) const {
  std::string msg = absl::StrCat("unknown flag ", arg.substr(0, arg.find('=')));
  std::vector<std::string> names = {"help"};
  if (!version_line_.empty()) names.push_back("version");
  for (const Flag& f : flags_) names.insert(names.end(), f.names.begin(), f.names.end());
  std::string best;
  if (!two_dashes && by_name_.contains(body)) {
    best = std::string(body);  // "-model": a long name typed with one dash
  } else {
    best = ClosestName(body, names);
  }
  if (!best.empty()) absl::StrAppend(&msg, " (did you mean ", DashedName(best), "?)");
  return msg;
}

absl::Status FlagParser::Parse(const std::vector<std::string>& args) {
  // --help / --version first: they win over anything else on the line.
  for (const std::string& a : args) {
    if (a == "--") break;
    if ((a == "--help" || a == "-h") && !Has("help") && !Has("h")) {
      help_requested_ = true;
      return absl::OkStatus();
    }
    if (a == "--version" && !version_line_.empty() && !Has("version")) {
      version_requested_ = true;
      return absl::OkStatus();
    }
  }
  bool only_positional = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (only_positional || arg.size() < 2 || arg[0] != '-') {
      positional_.push_back(arg);
      continue;
    }
    if (arg == "--") {
      only_positional = true;
      continue;
    }
    const bool two_dashes = arg[1] == '-';
    absl::string_view body = absl::string_view(arg).substr(two_dashes ? 2 : 1);
    absl::string_view value;
    bool has_value = false;
    if (size_t eq = body.find('='); eq != absl::string_view::npos) {
      value = body.substr(eq + 1);
      body = body.substr(0, eq);
      has_value = true;
    }
    auto it = by_name_.find(body);
    // Longer names need two dashes; one-letter names take one or two.
    if (it == by_name_.end() || (!two_dashes && body.size() > 1)) {
      return absl::InvalidArgumentError(UnknownFlagMessage(arg, body, two_dashes));
    }
    Flag& flag = flags_[it->second];
    const std::string shown = DashedName(body);
    if (!has_value && flag.kind == Kind::kBool) {
      value = "true";
      has_value = true;
    }
    if (!has_value) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(absl::StrCat("flag ", shown, " needs a value"));
      }
      value = args[++i];
    }
    if (absl::Status s = Assign(flag, shown, value); !s.ok()) return s;
  }
  for (const Flag& flag : flags_) {
    if (flag.required && !flag.set) {
      return absl::InvalidArgumentError(absl::StrCat(DashedName(flag.names[0]), " is required"));
    }
  }
  return absl::OkStatus();
}

bool FlagParser::WasSet(absl::string_view name) const {
  auto it = by_name_.find(name);
  return it != by_name_.end() && flags_[it->second].set;
}

std::vector<std::string> FlagParser::GivenArgs(absl::string_view section) const {
  std::vector<std::string> out;
  for (const Flag& f : flags_) {
    if (f.set && f.section == section) out.push_back(absl::StrCat("--", f.names[0], "=", f.raw));
  }
  return out;
}

// ---- help --------------------------------------------------------------------

std::string FlagParser::Usage() const {
  // "  NAMES META" in a 32-column gutter, the help wrapped at 100 columns
  // (continuation lines indented to the gutter).
  auto line = [](std::string left, absl::string_view help) {
    constexpr size_t kGutter = 32, kWidth = 100;
    left = absl::StrCat("  ", left);
    left += left.size() + 2 <= kGutter ? std::string(kGutter - left.size(), ' ') : "  ";
    std::string out = left;
    size_t col = left.size();
    bool first = true;
    for (absl::string_view word : absl::StrSplit(help, ' ', absl::SkipEmpty())) {
      if (!first && col + 1 + word.size() > kWidth) {
        absl::StrAppend(&out, "\n", std::string(kGutter, ' '));
        col = kGutter;
      } else if (!first) {
        out += ' ';
        ++col;
      }
      absl::StrAppend(&out, absl::StrReplaceAll(word, {{"\x01", " "}}));
      col += word.size();
      first = false;
    }
    return absl::StrCat(out, "\n");
  };
  std::string out;
  std::vector<std::string> sections;
  for (const Flag& f : flags_) {
    if (std::find(sections.begin(), sections.end(), f.section) == sections.end()) {
      sections.push_back(f.section);
    }
  }
  for (const std::string& section : sections) {
    if (!section.empty()) absl::StrAppend(&out, "\n", section, ":\n");
    for (const Flag& flag : flags_) {
      if (flag.section != section) continue;
      std::vector<std::string> shown;
      for (const std::string& n : flag.names) shown.push_back(DashedName(n));
      std::string left = absl::StrJoin(shown, ", ");
      if (flag.kind != Kind::kBool) {
        const char* by_kind = flag.kind == Kind::kInt      ? "N"
                              : flag.kind == Kind::kDouble ? "X"
                                                           : "VALUE";
        absl::StrAppend(&left, " ", flag.meta.empty() ? by_kind : flag.meta);
      }
      std::string help = flag.help;
      // The default is kept on one line (\x01: a space the wrapping keeps).
      if (flag.required) {
        absl::StrAppend(&help, " (required)");
      } else if (!flag.default_text.empty()) {
        absl::StrAppend(&help, " ",
                        absl::StrReplaceAll(absl::StrCat("(default: ", flag.default_text, ")"),
                                            {{" ", "\x01"}}));
      }
      absl::StrAppend(&out, line(left, help));
    }
  }
  if (!sections.empty() && !sections.back().empty()) absl::StrAppend(&out, "\n");
  absl::StrAppend(&out, line("-h, --help", "print this help and exit"));
  if (!version_line_.empty())
    absl::StrAppend(&out, line("--version", "print the version and exit"));
  return out;
}

std::string FlagParser::Help(absl::string_view synopsis) const {
  return absl::StrCat("usage: ", synopsis, "\n\nflags:\n", Usage());
}

absl::StatusOr<ParsedCommandLine> ParseCommandLine(FlagParser& p,
                                                   const std::vector<std::string>& args,
                                                   absl::string_view synopsis, std::FILE* out) {
  if (absl::Status s = p.Parse(args); !s.ok()) return s;
  if (p.help_requested()) {
    std::fputs(p.Help(synopsis).c_str(), out);
    return ParsedCommandLine::kExit;
  }
  if (p.version_requested()) {
    std::fprintf(out, "%s\n", p.version_line().c_str());
    return ParsedCommandLine::kExit;
  }
  return ParsedCommandLine::kRun;
}

// ---- values and names --------------------------------------------------------

absl::Status CheckHostPort(absl::string_view value) {
  const size_t colon = value.rfind(':');
  if (colon == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected HOST:PORT, got '", value, "' (no ':PORT')"));
  }
  absl::string_view host = value.substr(0, colon);
  const absl::string_view port = value.substr(colon + 1);
  if (host.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected HOST:PORT, got '", value, "' (no host: e.g. 127.0.0.1", value, ")"));
  }
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']' ||
        !std::all_of(host.begin() + 1, host.end() - 1, [](char c) {
          return absl::ascii_isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.' ||
                 c == '%';
        })) {
      return absl::InvalidArgumentError(
          absl::StrCat("expected HOST:PORT, got '", value, "' (bad IPv6 address ", host, ")"));
    }
  } else if (host.find(':') != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("expected HOST:PORT, got '", value,
                                                   "' (an IPv6 address needs brackets: [", host,
                                                   "]:", port, ")"));
  } else if (!std::all_of(host.begin(), host.end(), ValidHostChar)) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected HOST:PORT, got '", value, "' (bad host name '", host, "')"));
  }
  int64_t p = -1;
  if (port.empty() || !std::all_of(port.begin(), port.end(), absl::ascii_isdigit) ||
      port.size() > 6 || !absl::SimpleAtoi(port, &p) || p > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("expected HOST:PORT, got '", value, "' (port '",
                                                   port, "' is not a number in 0..65535)"));
  }
  return absl::OkStatus();
}

int EditDistance(absl::string_view a, absl::string_view b) {
  // Optimal string alignment: Levenshtein plus adjacent transpositions.
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<int>> d(n + 1, std::vector<int>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = static_cast<int>(i);
  for (size_t j = 0; j <= m; ++j) d[0][j] = static_cast<int>(j);
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      const int cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}

std::string ClosestName(absl::string_view typed, const std::vector<std::string>& candidates) {
  if (typed.empty()) return "";
  const int allowed = typed.size() <= 4 ? 1 : typed.size() <= 8 ? 2 : 3;
  std::string best;
  int best_d = allowed + 1;
  for (const std::string& c : candidates) {
    const int d = EditDistance(typed, c);
    // Not when every character would change ("-x" is not a typo of "-m").
    if (d < best_d && d < static_cast<int>(typed.size())) {
      best_d = d;
      best = c;
    }
  }
  if (!best.empty()) return best;
  // A unique completion ("gpu-mem" -> "gpu-memory") or a name with extra
  // letters ("temperature" -> "temp").
  std::string prefix_of;
  int matches = 0;
  for (const std::string& c : candidates) {
    const bool completes = typed.size() >= 3 && absl::StartsWith(c, typed);
    const bool extends = c.size() >= 3 && absl::StartsWith(typed, c);
    if ((completes || extends) && c != prefix_of) {
      prefix_of = c;
      ++matches;
    }
  }
  return matches == 1 ? prefix_of : "";
}

}  // namespace moesplit::cli
