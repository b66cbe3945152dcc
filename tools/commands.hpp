// tools/commands.hpp: the subcommands of the agentstate tool. Each takes the
// arguments after its name and returns the process exit code:
// 0 success, 1 the work failed (details on stderr), 2 bad usage.
#pragma once

#include <string>
#include <vector>

namespace agentstate::tools {

int run_demo(const std::vector<std::string>& args);

} // namespace agentstate::tools
