// SPDX-License-Identifier: Apache-2.0
// tools/commands.hpp: the subcommands of the agentstate tool. Each lives in its
// own file under tools/ and registers itself at static-initialization time:
//
//   static const bool registered = agentstate::tools::register_command(
//     {"demo", "a guided run of the engine on an LMDB store", run_demo});
//
// A command takes the arguments after its name and returns the exit code:
// 0 success, 1 the work failed (details on stderr), 2 bad usage. Every command
// answers --help on stdout with exit 0.
#pragma once

#include <string>
#include <vector>

namespace agentstate::tools {

using args = std::vector<std::string>;

struct command {
  const char* name;
  const char* summary; ///< one line for `agentstate --help`
  int (*run)(const args&);
};

/// Adds `c` to the tool. Returns true (for static registration).
bool register_command(const command& c);

/// Every registered command, sorted by name.
std::vector<command> commands();

} // namespace agentstate::tools
