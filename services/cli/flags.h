// FlagParser: the command-line parser of every moesplit binary (the
// `moesplit` subcommands, moesplit-dense, moesplit-expert-worker). One table
// per binary is the single source of its parsing, its validation and its
// --help: each flag is registered once, bound to a variable that holds the
// default, with its help text and the checks its value must pass.
//
// Syntax, after the subcommand name (or argv[0]):
//   --name value   --name=value   -n value / --n value (one-letter names)
//   --flag / --flag=true / --flag=false    for bool flags
//   --             ends flag parsing; everything after it is positional
// Anything else that starts with '-' (and is not a lone "-") is an unknown
// flag; the error suggests the closest registered name ("unknown flag
// --promt (did you mean --prompt?)"). Arguments that do not start with '-'
// are positional. --help / -h (and --version, when a version line is set)
// are built in: Parse() sees them before anything else and only records them
// (help_requested(), version_requested()).
//
// Checks run while parsing, on the value as typed (Range, OneOf, HostPort,
// Check), and Required flags are checked at the end, so a bad value is
// reported before a program does any work (loads a model). Parse() returns
// InvalidArgument naming the flag ("flag --n expects an integer, got 'x'",
// "flag --parallel must be in 1..1024, got 0", "flag --http expects
// HOST:PORT, got 'localhost'", "--model is required"); variables parsed
// before the bad one keep their new values.
//
// The help (Usage()) shows, for every flag, its names, a placeholder for its
// value, the help text and the default: the bound variable's value at
// registration, or DefaultText() where that says more ("all CPUs" for 0).
// Section() groups the flags that follow under a title, and GivenArgs()
// gives back the flags of one section that were set, as "--name=value", for
// a launcher to pass on to the program they belong to (`moesplit up`).
//
// Not thread-safe; one parser per command invocation. FlagRefs stay valid as
// long as their parser.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace moesplit::cli {

class FlagParser {
 public:
  // A registered flag, refined by chaining: p.AddInt("parallel", &n, "...").Range(1, 1024);
  class FlagRef {
   public:
    // Help shows "(default: TEXT)" instead of the bound variable's value.
    FlagRef& DefaultText(std::string text);
    // Parse() fails with "--NAME is required" when the flag is absent.
    FlagRef& Required();
    // Integer and number flags: the value must lie in [lo, hi].
    FlagRef& Range(double lo, double hi);
    // String flags: the value must be one of `values`.
    FlagRef& OneOf(std::vector<std::string> values);
    // String flags: HOST:PORT (see CheckHostPort).
    FlagRef& HostPort();
    // Any flag: a check of the value as typed; its message follows
    // "flag --NAME: ".
    FlagRef& Check(std::function<absl::Status(absl::string_view value)> check);
    // String flags: given again, the values are joined with ',' (each
    // value is checked on its own).
    FlagRef& Repeatable();
    // The placeholder shown in help after the names (default: VALUE, N or X
    // by kind; HOST:PORT; the OneOf values joined by '|').
    FlagRef& Meta(std::string meta);

   private:
    friend class FlagParser;
    FlagRef(FlagParser* parser, size_t index) : parser_(parser), index_(index) {}
    FlagParser* parser_;
    size_t index_;
  };

  // `names` is one name ("model") or several, separated by '|' ("n|n-predict");
  // a one-letter name is written with one or two dashes (-n, --n), longer
  // ones with two. The first name is the one GivenArgs() writes.
  FlagRef AddString(absl::string_view names, std::string* dst, std::string help);
  FlagRef AddInt(absl::string_view names, int64_t* dst, std::string help);
  FlagRef AddDouble(absl::string_view names, double* dst, std::string help);
  FlagRef AddBool(absl::string_view names, bool* dst, std::string help);

  // Flags registered after this call are listed under `title` in Usage().
  void Section(std::string title);
  // Enables --version; `line` is what the program prints for it.
  void SetVersionLine(std::string line) { version_line_ = std::move(line); }
  const std::string& version_line() const { return version_line_; }

  absl::Status Parse(const std::vector<std::string>& args);
  bool help_requested() const { return help_requested_; }
  bool version_requested() const { return version_requested_; }

  // Whether the flag (any of its names) appeared on the command line.
  bool WasSet(absl::string_view name) const;
  // Whether `name` is one of the registered flags' names.
  bool Has(absl::string_view name) const { return by_name_.contains(name); }
  const std::vector<std::string>& positional() const { return positional_; }

  // Every flag, one or more lines each (the help wrapped at 100 columns):
  //   "  --model, -m PATH              help (default: x)"
  // grouped under the Section() titles, then --help (and --version).
  std::string Usage() const;
  // "usage: SYNOPSIS\n\nflags:\n" + Usage().
  std::string Help(absl::string_view synopsis) const;

  // The flags of `section` ("" = before any Section()) that were set, in
  // registration order, as {"--name=value", ...} with their values as typed.
  std::vector<std::string> GivenArgs(absl::string_view section) const;

 private:
  enum class Kind { kString, kInt, kDouble, kBool };
  struct Flag {
    std::vector<std::string> names;
    Kind kind;
    void* dst;
    std::string help;
    std::string section;
    std::string default_text{};  // shown as "(default: ...)" unless empty
    std::string meta{};
    bool required = false;
    bool repeatable = false;
    bool has_range = false;
    double lo = 0, hi = 0;
    std::vector<std::string> one_of{};
    std::vector<std::function<absl::Status(absl::string_view)>> checks{};
    bool set = false;
    std::string raw{};  // the value as typed
  };
  FlagRef Add(absl::string_view names, Kind kind, void* dst, std::string help);
  absl::Status Assign(Flag& flag, absl::string_view shown, absl::string_view value);
  absl::Status CheckValue(const Flag& flag, absl::string_view shown, absl::string_view value) const;
  std::string UnknownFlagMessage(absl::string_view arg, absl::string_view body,
                                 bool two_dashes) const;

  std::vector<Flag> flags_;
  absl::flat_hash_map<std::string, size_t> by_name_;
  std::vector<std::string> positional_;
  std::string section_;
  std::string version_line_;
  bool help_requested_ = false;
  bool version_requested_ = false;
};

// A program's command line (argv without the program name) parsed with `p`:
// kRun to go on; kExit after printing p.Help(synopsis) or the version line
// to `out` (the program exits 0); or the flag error (exit 2).
enum class ParsedCommandLine { kRun, kExit };
absl::StatusOr<ParsedCommandLine> ParseCommandLine(FlagParser& p,
                                                   const std::vector<std::string>& args,
                                                   absl::string_view synopsis,
                                                   std::FILE* out = stdout);

// Flag names a caller registers itself instead of taking them from a shared
// table (`moesplit up`: the model, addresses and shards it chooses).
using FlagNames = absl::flat_hash_set<std::string>;

// "--name" or "-n" as the user types it.
std::string DashedName(absl::string_view name);

// HOST:PORT as the services listen on or connect to: HOST is a name, an IPv4
// address or a bracketed IPv6 address ([::1]), not empty; PORT a decimal
// number in 0..65535 (0: any free port). InvalidArgument saying what is
// wrong otherwise.
absl::Status CheckHostPort(absl::string_view value);

// Edit distance (insertions, deletions, substitutions and transpositions of
// neighbours, each 1) between two strings.
int EditDistance(absl::string_view a, absl::string_view b);

// The candidate closest to `typed` when it is close enough to be a likely
// misspelling (at most 1 edit for names up to 4 characters, 2 up to 8, 3
// beyond; or exactly one candidate starts with `typed` or `typed` with it);
// "" otherwise.
std::string ClosestName(absl::string_view typed, const std::vector<std::string>& candidates);

}  // namespace moesplit::cli
