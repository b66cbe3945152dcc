// SPDX-License-Identifier: Apache-2.0
// tests/support/spawn_self.hpp: runs this test binary again as a child
// process for one of its hidden (doctest::skip) test cases, the way the
// kill -9 tests make the process they kill. Test-only.
#pragma once

#include <doctest/doctest.h>

#include <fcntl.h>
#include <spawn.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

extern char** environ;

namespace agentstate::test {

/// A child's environment: `extra` ("NAME=value") first, so that each wins
/// over a variable of the same name, then this process's. envp() is the
/// array execve and posix_spawn take; it lives as long as this object.
class child_environment {
public:
  explicit child_environment(const std::vector<std::string>& extra) : strings_(extra) {
    for (char** p = environ; *p; ++p)
      strings_.emplace_back(*p);
    for (auto& s : strings_)
      pointers_.push_back(s.data());
    pointers_.push_back(nullptr);
  }
  child_environment(const child_environment&) = delete;
  child_environment& operator=(const child_environment&) = delete;
  char** envp() { return pointers_.data(); }

private:
  std::vector<std::string> strings_;
  std::vector<char*> pointers_;
};

/// Starts this binary with `--no-skip --test-case=<test_case>` (a doctest
/// name pattern), with `env` ("NAME=value") added to this process's
/// environment and its standard output sent to /dev/null. Returns the
/// child's pid (REQUIREs the spawn succeeds).
inline pid_t spawn_self(const std::string& test_case, const std::vector<std::string>& env) {
  child_environment child_env(env);
  std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::vector<std::string> args_s{self, "--no-skip", "--test-case=" + test_case, "--minimal"};
  std::vector<char*> argv;
  for (auto& s : args_s)
    argv.push_back(s.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, self.c_str(), &fa, nullptr, argv.data(), child_env.envp());
  posix_spawn_file_actions_destroy(&fa);
  REQUIRE(rc == 0);
  return pid;
}

} // namespace agentstate::test
