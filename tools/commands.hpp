// SPDX-License-Identifier: Apache-2.0
// tools/commands.hpp: the subcommands of the agentstate tool. Each lives in its
// own file under tools/ and registers itself at static-initialization time:
//
//   static const bool registered = agentstate::tools::register_command(
//     {"demo", "a guided run of the engine on an LMDB store", define_demo});
//
// A command's define function declares its usage, options and positionals on
// the command_line (tools/cli.hpp), bound to state the function it returns
// owns; that function runs after a parse without error and returns the exit
// code: exit_ok (0), exit_failed (1: the work failed, say() on stderr),
// exit_usage (2: usage_error), or a code of the command's own from 3 up, each
// listed in its command_line's `exits`. --help, generated from the
// declarations, goes to stdout with exit 0; so does `agentstate help CMD`.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace agentstate::tools {

struct command_line;

using args = std::vector<std::string>;
using runner = std::function<int()>;

struct command {
  const char* name;
  const char* summary; ///< one line for `agentstate --help`
  runner (*define)(command_line&);
};

/// Adds `c` to the tool. Returns true (for static registration).
bool register_command(const command& c);

/// Every registered command, sorted by name.
std::vector<command> commands();

/// Parses `xs` (the arguments after the command's name) with `c`'s
/// declarations and runs it; returns its exit code (tools/cli.cpp).
int parse_and_run(const command& c, const args& xs);

} // namespace agentstate::tools
