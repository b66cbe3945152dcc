// SPDX-License-Identifier: Apache-2.0
// tests/support/watch_child.hpp: `agentstate watch ARGS` as a child process
// (stdout lines collected by a thread, stderr to a file), for the tests of
// the watch tool. REQUIRES: the including target defines AGENTSTATE_BIN.
#pragma once

#include "server/net_support.hpp"
#include "support/serve_process.hpp"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>

namespace agentstate::test {

/// A shell-quoted path.
inline std::string shell_quoted(const std::string& s) {
  return "'" + s + "'";
}

/// `agentstate ARGS` (ARGS shell words, `env` assignments before it) run to
/// its end: its exit status, stdout, and stderr (through `err_path`).
struct tool_run {
  int rc = -1;
  std::string out, err;
};

inline tool_run run_tool(const std::string& args, const std::string& err_path,
                         const std::string& env = "") {
  auto [rc, out] = net::shell(
    env + " " + std::string(AGENTSTATE_BIN) + " " + args + " 2>" + shell_quoted(err_path), false);
  return {rc, out, net::read_text(err_path)};
}

/// `text`'s lines, without their line ends.
inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> xs;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    xs.push_back(line);
  return xs;
}

/// `agentstate watch ARGS` running as a child: a thread collects its stdout
/// lines, stderr goes to a file. Killed at destruction if still running.
class watch_child {
public:
  watch_child(const std::vector<std::string>& args, std::string err_path)
    : err_path_(std::move(err_path)) {
    int out[2];
    REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
    std::vector<std::string> watch_args{"watch"};
    watch_args.insert(watch_args.end(), args.begin(), args.end());
    pid_ = spawn_tool(watch_args, -1, out[1], err_path_);
    ::close(out[1]);
    out_ = out[0];
    reader_ = std::thread([this] { read_stdout(); });
  }
  ~watch_child() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (reader_.joinable())
      reader_.join();
    ::close(out_);
  }
  watch_child(const watch_child&) = delete;
  watch_child& operator=(const watch_child&) = delete;

  /// The first `n` stdout lines; REQUIREs them within `t`.
  std::vector<std::string> lines(std::size_t n, std::chrono::milliseconds t = 20s) {
    std::unique_lock<std::mutex> lock(mtx_);
    INFO("watch's stderr: ", net::read_text(err_path_));
    REQUIRE(cv_.wait_for(lock, t, [&] { return lines_.size() >= n; }));
    return std::vector<std::string>(lines_.begin(), lines_.begin() + static_cast<long>(n));
  }
  std::size_t count() {
    std::lock_guard<std::mutex> g(mtx_);
    return lines_.size();
  }
  void signal(int sig) { REQUIRE(::kill(pid_, sig) == 0); }
  int wait_exit(std::chrono::milliseconds t = 15s) {
    int status = 0;
    {
      INFO("watch's stderr: ", net::read_text(err_path_));
      REQUIRE(reaped_within(pid_, status, t));
    }
    pid_ = -1;
    REQUIRE(WIFEXITED(status));
    return WEXITSTATUS(status);
  }
  std::string err() const { return net::read_text(err_path_); }

private:
  void read_stdout() { collect_lines(out_, mtx_, cv_, lines_); }

  std::string err_path_;
  pid_t pid_ = -1;
  int out_ = -1;
  std::thread reader_;
  std::mutex mtx_;
  std::condition_variable cv_;
  std::deque<std::string> lines_;
};

} // namespace agentstate::test
