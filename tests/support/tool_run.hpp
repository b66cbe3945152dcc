// SPDX-License-Identifier: Apache-2.0
// tests/support/tool_run.hpp: running the real `agentstate` tool in a test:
// every command's name, one run with its standard streams captured (files,
// or a pseudo-terminal), and a run's description for failure messages.
// REQUIRES: the including target defines AGENTSTATE_BIN; doctest is included.
#pragma once

#include <fcntl.h>
#include <pty.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "support/spawn_self.hpp"
#include "support/test_support.hpp"

namespace agentstate::test {

inline const char* const all_commands[] = {"backup",  "bench",  "cluster", "console", "dump",
                                           "demo",    "export", "import",  "inspect", "prune",
                                           "salvage", "serve",  "verify",  "watch"};

struct ran {
  int rc = -1;
  std::string out, err;
};

/// Where a run's standard streams go: stdin from a file ("" = /dev/null);
/// stdout and stderr captured, each from a file or, when `*_tty`, from a
/// pseudo-terminal (output processing off, so bytes arrive as written).
struct streams {
  std::string in;
  int in_fd = -1; ///< instead of `in`: this descriptor (e.g. a pipe's read end)
  bool out_tty = false, err_tty = false;
  std::vector<std::string> env; ///< "NAME=VALUE" added to the tool's environment
};

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// Runs the tool with `args`; returns its exit code and what it wrote.
inline ran run_tool(const std::vector<std::string>& args, const streams& s = {}) {
  temp_dir io;
  auto out_path = io.path() / "out", err_path = io.path() / "err";
  int master = -1, slave = -1;
  if (s.out_tty || s.err_tty) {
    REQUIRE(::openpty(&master, &slave, nullptr, nullptr, nullptr) == 0);
    termios t{};
    REQUIRE(::tcgetattr(slave, &t) == 0);
    t.c_oflag &= ~static_cast<tcflag_t>(OPOST);
    REQUIRE(::tcsetattr(slave, TCSANOW, &t) == 0);
  }
  child_environment child_env(s.env); // built before the fork
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int in = s.in_fd >= 0 ? s.in_fd : ::open(s.in.empty() ? "/dev/null" : s.in.c_str(), O_RDONLY);
    int out = s.out_tty ? slave : ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = s.err_tty ? slave : ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || out < 0 || err < 0)
      ::_exit(127);
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(err, 2);
    if (master >= 0)
      ::close(master);
    std::vector<std::string> argv_s{AGENTSTATE_BIN};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execve(AGENTSTATE_BIN, argv.data(), child_env.envp());
    ::_exit(127);
  }
  std::string tty;
  if (master >= 0) {
    ::close(slave);
    char buf[4096];
    for (;;) { // until the child's side is closed (EIO)
      ssize_t n = ::read(master, buf, sizeof buf);
      if (n > 0)
        tty.append(buf, static_cast<std::size_t>(n));
      else if (n < 0 && errno == EINTR)
        continue;
      else
        break;
    }
    ::close(master);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ran r;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = s.out_tty ? tty : slurp(out_path);
  r.err = s.err_tty ? tty : slurp(err_path);
  return r;
}

inline std::string describe(const std::vector<std::string>& args, const ran& r) {
  std::string cmd = "agentstate";
  for (auto& a : args)
    cmd += " " + a;
  return cmd + " -> exit " + std::to_string(r.rc) + "\nstdout: " + r.out.substr(0, 600)
    + "\nstderr: " + r.err.substr(0, 600);
}

} // namespace agentstate::test
