// SPDX-License-Identifier: Apache-2.0
// agentstate: the command-line tool. `agentstate --help` lists the commands;
// `agentstate COMMAND ...` parses the rest with the command's declarations
// (tools/cli.hpp).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "agentstate/version.hpp"
#include "tools/cli.hpp"
#include "tools/commands.hpp"

namespace agentstate::tools {

namespace {

std::vector<command>& registry() {
  static std::vector<command> xs;
  return xs;
}

} // namespace

bool register_command(const command& c) {
  registry().push_back(c);
  return true;
}

std::vector<command> commands() {
  auto xs = registry();
  std::sort(xs.begin(), xs.end(),
            [](const command& a, const command& b) { return std::strcmp(a.name, b.name) < 0; });
  return xs;
}

} // namespace agentstate::tools

namespace {

void usage(std::FILE* out) {
  std::fputs("usage: agentstate <command> [options]\n"
             "       agentstate --version\n\ncommands:\n",
             out);
  for (auto& c : agentstate::tools::commands())
    std::fprintf(out, "  %-10s %s\n", c.name, c.summary);
  std::fputs("\noptions:\n"
             "  -h, --help  print this help and exit\n"
             "  --version   print the version and exit\n"
             "\nRun 'agentstate <command> --help' for a command's options.\n"
             "Exit codes: 0 success, 1 the work failed, 2 bad usage.\n",
             out);
}

} // namespace

int main(int argc, char** argv) {
  using namespace agentstate::tools;
  if (argc > 1) {
    const std::string name = argv[1];
    for (auto& c : commands())
      if (name == c.name)
        return parse_and_run(c, args(argv + 2, argv + argc));
    if (name == "help" && argc == 2) {
      usage(stdout);
      return 0;
    }
  }
  // No command: the tool's own options.
  auto t = parse_tool_args(argc, argv);
  if (t.help) {
    usage(stdout);
    return 0;
  }
  if (!t.problem.empty())
    return usage_error("", t.problem);
  for (auto& x : t.rest)
    return usage_error("",
                       x.size() > 1 && x[0] == '-' ? "unknown option '" + x + "'"
                                                   : "unknown command '" + x + "'");
  if (t.version) {
    std::puts("agentstate " AGENTSTATE_VERSION_STRING);
    return 0;
  }
  return usage_error("", "no command given");
}
