// FlagParser: the small command-line parser every moesplit subcommand uses.
//
// A subcommand registers its flags (each bound to a variable that holds the
// default), then parses the arguments that follow the subcommand name:
//   --name value   --name=value   -n value / --n value (one-letter names)
//   --flag / --flag=true / --flag=false    for bool flags
//   --             ends flag parsing; everything after it is positional
// Anything else that starts with '-' (and is not a lone "-") is an unknown
// flag. Arguments that do not start with '-' are positional.
//
// Parse() leaves the bound variables holding the parsed values; on failure it
// returns InvalidArgument naming the flag ("unknown flag --foo", "flag --n
// expects an integer, got 'x'", "flag --model needs a value"), and variables
// parsed before the bad one keep their new values.
//
// Not thread-safe; one parser per command invocation.
#pragma once

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"

namespace moesplit::cli {

class FlagParser {
 public:
  // `names` is one name ("model") or several, separated by '|' ("n|n-predict");
  // a one-letter name is written with one or two dashes (-n, --n), longer
  // ones with two.
  void AddString(absl::string_view names, std::string* dst, std::string help);
  void AddInt(absl::string_view names, int64_t* dst, std::string help);
  void AddDouble(absl::string_view names, double* dst, std::string help);
  void AddBool(absl::string_view names, bool* dst, std::string help);

  absl::Status Parse(const std::vector<std::string>& args);

  // Whether the flag (any of its names) appeared on the command line.
  bool WasSet(absl::string_view name) const;
  const std::vector<std::string>& positional() const { return positional_; }

  // One line per flag: "  --model, -m VALUE   help".
  std::string Usage() const;

 private:
  enum class Kind { kString, kInt, kDouble, kBool };
  struct Flag {
    std::vector<std::string> names;
    Kind kind;
    void* dst;
    std::string help;
    bool set = false;
  };
  void Add(absl::string_view names, Kind kind, void* dst, std::string help);
  absl::Status Assign(Flag& flag, absl::string_view shown,
                      absl::string_view value);

  std::vector<Flag> flags_;
  absl::flat_hash_map<std::string, size_t> by_name_;
  std::vector<std::string> positional_;
};

// "--name" or "-n" as the user types it.
std::string DashedName(absl::string_view name);

}  // namespace moesplit::cli
