#include "services/cli/flags.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace moesplit::cli {

std::string DashedName(absl::string_view name) {
  return absl::StrCat(name.size() == 1 ? "-" : "--", name);
}

void FlagParser::Add(absl::string_view names, Kind kind, void* dst,
                     std::string help) {
  Flag flag{{}, kind, dst, std::move(help)};
  for (absl::string_view n : absl::StrSplit(names, '|')) {
    by_name_[std::string(n)] = flags_.size();
    flag.names.emplace_back(n);
  }
  flags_.push_back(std::move(flag));
}

void FlagParser::AddString(absl::string_view names, std::string* dst,
                           std::string help) {
  Add(names, Kind::kString, dst, std::move(help));
}
void FlagParser::AddInt(absl::string_view names, int64_t* dst,
                        std::string help) {
  Add(names, Kind::kInt, dst, std::move(help));
}
void FlagParser::AddDouble(absl::string_view names, double* dst,
                           std::string help) {
  Add(names, Kind::kDouble, dst, std::move(help));
}
void FlagParser::AddBool(absl::string_view names, bool* dst, std::string help) {
  Add(names, Kind::kBool, dst, std::move(help));
}

absl::Status FlagParser::Assign(Flag& flag, absl::string_view shown,
                                absl::string_view value) {
  flag.set = true;
  switch (flag.kind) {
    case Kind::kString:
      *static_cast<std::string*>(flag.dst) = std::string(value);
      return absl::OkStatus();
    case Kind::kInt:
      if (!absl::SimpleAtoi(value, static_cast<int64_t*>(flag.dst))) {
        return absl::InvalidArgumentError(absl::StrCat(
            "flag ", shown, " expects an integer, got '", value, "'"));
      }
      return absl::OkStatus();
    case Kind::kDouble: {
      double* d = static_cast<double*>(flag.dst);
      if (!absl::SimpleAtod(value, d) || !std::isfinite(*d)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "flag ", shown, " expects a number, got '", value, "'"));
      }
      return absl::OkStatus();
    }
    case Kind::kBool: {
      bool* b = static_cast<bool*>(flag.dst);
      if (!absl::SimpleAtob(value, b)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "flag ", shown, " expects true or false, got '", value, "'"));
      }
      return absl::OkStatus();
    }
  }
  return absl::InternalError("unreachable flag kind");
}

absl::Status FlagParser::Parse(const std::vector<std::string>& args) {
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
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag ", arg.substr(0, arg.find('='))));
    }
    Flag& flag = flags_[it->second];
    const std::string shown = DashedName(body);
    if (!has_value && flag.kind == Kind::kBool) {
      value = "true";
      has_value = true;
    }
    if (!has_value) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("flag ", shown, " needs a value"));
      }
      value = args[++i];
    }
    if (absl::Status s = Assign(flag, shown, value); !s.ok()) return s;
  }
  return absl::OkStatus();
}

bool FlagParser::WasSet(absl::string_view name) const {
  auto it = by_name_.find(name);
  return it != by_name_.end() && flags_[it->second].set;
}

std::string FlagParser::Usage() const {
  std::string out;
  for (const Flag& flag : flags_) {
    std::vector<std::string> shown;
    for (const std::string& n : flag.names) shown.push_back(DashedName(n));
    std::string left = absl::StrJoin(shown, ", ");
    if (flag.kind != Kind::kBool) absl::StrAppend(&left, " VALUE");
    if (left.size() < 26) left.resize(26, ' ');
    absl::StrAppend(&out, "  ", left, " ", flag.help, "\n");
  }
  return out;
}

}  // namespace moesplit::cli
