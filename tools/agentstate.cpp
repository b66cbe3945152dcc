// agentstate: the command-line tool. `agentstate --help` lists the commands.
#include <cstdio>
#include <string>
#include <vector>

#include "tools/commands.hpp"

namespace {

const char* usage =
  "usage: agentstate <command> [options]\n"
  "\n"
  "commands:\n"
  "  demo [--dir DIR]   a guided run of the engine on an LMDB store\n"
  "                     (default ./agentstate-data)\n"
  "\n"
  "Run 'agentstate <command> --help' for a command's options.\n"
  "Exit codes: 0 success, 1 the work failed, 2 bad usage.\n";

} // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::fputs(usage, stderr);
    return 2;
  }
  auto cmd = args.front();
  args.erase(args.begin());
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::fputs(usage, stdout);
    return 0;
  }
  if (cmd == "--version") {
    std::puts("agentstate 0.1.0");
    return 0;
  }
  if (cmd == "demo")
    return agentstate::tools::run_demo(args);
  std::fprintf(stderr, "agentstate: unknown command '%s'\n\n%s", cmd.c_str(), usage);
  return 2;
}
