// moesplit: the command-line front end (see commands.h and README.md).
#include <string>
#include <vector>

#include "services/cli/commands.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return moesplit::cli::RunCli(args, moesplit::cli::CommandIo{});
}
