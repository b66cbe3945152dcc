// SPDX-License-Identifier: Apache-2.0
// agentstate: the command-line tool. `agentstate --help` (or `agentstate
// help`) lists the commands; `agentstate COMMAND ...` parses the rest with the
// command's declarations (tools/cli.hpp); `agentstate help COMMAND` is
// `agentstate COMMAND --help`.
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
  std::fputs("usage: agentstate COMMAND [OPTION...]\n"
             "       agentstate help [COMMAND]\n"
             "       agentstate --version\n"
             "\n"
             "The store tools, server and benchmarks of agentstate, an embedded session\n"
             "engine for agent hosts. Every message a command writes on stderr is one\n"
             "line that starts with 'agentstate COMMAND: '.\n"
             "\ncommands:\n",
             out);
  for (auto& c : agentstate::tools::commands())
    std::fprintf(out, "  %-10s %s\n", c.name, c.summary);
  std::fputs("\noptions:\n"
             "  -h, --help  print this help and exit\n"
             "  --version   print the version and exit\n"
             "\n"
             "Run 'agentstate help COMMAND' (or 'agentstate COMMAND --help') for a\n"
             "command's options, exit codes and environment.\n"
             "\nexit status:\n"
             "  0   done\n"
             "  1   the work failed (one line on stderr says why)\n"
             "  2   bad usage (one line on stderr names the problem)\n"
             "  3   salvage: some sessions lost; watch: the server answered an error\n"
             "  4   watch: the server ended the watch\n"
             "  5   watch: the connection was lost\n"
             "\nenvironment:\n"
             "  AGENTSTATE_TOKEN  watch, prune: the token for a server when no\n"
             "                    --token-file is given\n"
             "  SSL_CERT_FILE, SSL_CERT_DIR\n"
             "                    watch, prune: with --tls and no --tls-ca, where OpenSSL\n"
             "                    finds the system's CAs\n"
             "  TMPDIR            bench: where its temporary stores go (default /tmp)\n",
             out);
}

/// `agentstate help [COMMAND]`: the tool's --help, or COMMAND's.
int help(int argc, char** argv) {
  using namespace agentstate::tools;
  if (argc == 2
      || (argc == 3 && (!std::strcmp(argv[2], "--help") || !std::strcmp(argv[2], "-h")))) {
    usage(stdout);
    return std::fflush(stdout) == 0 ? exit_ok : exit_failed;
  }
  if (argc > 3)
    return usage_error("help", "takes one command name, not " + std::to_string(argc - 2));
  const std::string name = argv[2];
  for (auto& c : commands())
    if (name == c.name)
      return parse_and_run(c, {"--help"});
  return usage_error("help", "unknown command '" + name + "'");
}

} // namespace

int main(int argc, char** argv) {
  using namespace agentstate::tools;
  if (argc > 1) {
    const std::string name = argv[1];
    for (auto& c : commands())
      if (name == c.name)
        return parse_and_run(c, args(argv + 2, argv + argc));
    if (name == "help")
      return help(argc, argv);
  }
  // No command: the tool's own options.
  // An unknown command or option is refused before --help is honoured:
  // `agentstate nosuch --help` names nosuch and exits 2.
  for (int i = 1; i < argc; ++i) {
    const std::string x = argv[i];
    if (x != "-h" && x != "--help" && x != "--version")
      return usage_error("",
                         x.size() > 1 && x[0] == '-' ? "unknown option '" + x + "'"
                                                     : "unknown command '" + x + "'");
  }
  auto t = parse_tool_args(argc, argv);
  if (!t.problem.empty())
    return usage_error("", t.problem);
  if (t.help) {
    usage(stdout);
    return std::fflush(stdout) == 0 ? exit_ok : exit_failed;
  }
  if (t.version) {
    std::puts("agentstate " AGENTSTATE_VERSION_STRING);
    return exit_ok;
  }
  return usage_error("", "no command given");
}
