// SPDX-License-Identifier: Apache-2.0
// agentstate: the command-line tool. `agentstate --help` lists the commands.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "agentstate/version.hpp"
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
  std::fputs("usage: agentstate <command> [options]\n\ncommands:\n", out);
  for (auto& c : agentstate::tools::commands())
    std::fprintf(out, "  %-10s %s\n", c.name, c.summary);
  std::fputs("\nRun 'agentstate <command> --help' for a command's options.\n"
             "Exit codes: 0 success, 1 the work failed, 2 bad usage.\n",
             out);
}

} // namespace

int main(int argc, char** argv) {
  agentstate::tools::args args(argv + 1, argv + argc);
  if (args.empty()) {
    usage(stderr);
    return 2;
  }
  auto name = args.front();
  args.erase(args.begin());
  if (name == "--help" || name == "-h" || name == "help") {
    usage(stdout);
    return 0;
  }
  if (name == "--version") {
    std::puts("agentstate " AGENTSTATE_VERSION_STRING);
    return 0;
  }
  for (auto& c : agentstate::tools::commands())
    if (name == c.name)
      return c.run(args);
  std::fprintf(stderr, "agentstate: unknown command '%s'\n\n", name.c_str());
  usage(stderr);
  return 2;
}
