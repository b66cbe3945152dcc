// SPDX-License-Identifier: Apache-2.0
// tests/support/serve_process.hpp: `agentstate serve` as a child process
// driven through pipes (requests to its stdin, a thread collecting stdout
// lines, stderr to a file), plus JSON-RPC builders. The same driver as
// tests/protocol/serve_test.cpp, shared by the hostile-input and ownership tiers.
// REQUIRES: the including target defines AGENTSTATE_BIN.
#pragma once

#include "support/sanitizers.hpp"
#include "support/test_support.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

extern char** environ;

namespace agentstate::test {

/// Reads `fd` until end of file or an error, appending each complete line
/// (without its '\n') to `lines` under `mtx` and notifying `cv`: the body of
/// a child's stdout reader thread.
inline void collect_lines(int fd, std::mutex& mtx, std::condition_variable& cv,
                          std::deque<std::string>& lines) {
  std::string buf;
  char chunk[65536];
  for (;;) {
    auto n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    buf.append(chunk, static_cast<std::size_t>(n));
    std::size_t start = 0;
    for (auto nl = buf.find('\n'); nl != std::string::npos; nl = buf.find('\n', start)) {
      std::lock_guard<std::mutex> guard(mtx);
      lines.push_back(buf.substr(start, nl - start));
      start = nl + 1;
      cv.notify_all();
    }
    buf.erase(0, start);
  }
}

using namespace std::chrono_literals;

/// Starts `agentstate ARGS` (the binary AGENTSTATE_BIN) with standard input
/// from `in` (-1: /dev/null), standard output to `out`, and standard error
/// to the file `err_path` (truncated; "": /dev/null). REQUIREs the spawn;
/// returns the child's pid. The caller closes its copies of `in` and `out`.
inline pid_t spawn_tool(const std::vector<std::string>& args, int in, int out,
                        const std::string& err_path) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (in >= 0)
    posix_spawn_file_actions_adddup2(&fa, in, 0);
  else
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out, 1);
  if (err_path.empty())
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  else
    posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> argv_s{AGENTSTATE_BIN};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, AGENTSTATE_BIN, &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  REQUIRE(rc == 0);
  return pid;
}

// The tool as a child process: requests go to its stdin, a thread collects
// its stdout lines, stderr goes to a file.
class server {
public:
  explicit server(std::vector<std::string> args, const std::string& err_path)
    : err_path_(err_path) {
    ::signal(SIGPIPE, SIG_IGN);
    int in[2], out[2];
    REQUIRE(::pipe2(in, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
    args.insert(args.begin(), "serve");
    pid_ = spawn_tool(args, in[0], out[1], err_path);
    ::close(in[0]);
    ::close(out[1]);
    in_ = in[1];
    out_ = out[0];
    reader_ = std::thread([this] { read_stdout(); });
  }

  /// Kills the child if still running; fails the test when its stderr holds
  /// a sanitizer report (sanitizer builds).
  ~server() {
    close_stdin();
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (reader_.joinable())
      reader_.join();
    ::close(out_);
    std::ifstream err(err_path_);
    std::string text((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
    CHECK_MESSAGE(sanitizer_report(text).empty(), "sanitizer report in serve's stderr: ", text);
  }

  void send(const std::string& bytes) {
    std::size_t off = 0;
    while (off < bytes.size()) {
      auto n = ::write(in_, bytes.data() + off, bytes.size() - off);
      if (n < 0 && errno == EINTR)
        continue;
      REQUIRE(n > 0);
      off += static_cast<std::size_t>(n);
    }
  }

  void send_line(const json& x) { send(x.dump() + "\n"); }

  void close_stdin() {
    if (in_ >= 0)
      ::close(in_);
    in_ = -1;
  }

  /// The next stdout line, parsed, in arrival order; REQUIREs one within `t`.
  json next(std::chrono::milliseconds t = 10s) {
    std::unique_lock<std::mutex> lock(mtx_);
    REQUIRE(cv_.wait_for(lock, t, [this] { return !lines_.empty(); }));
    auto line = std::move(lines_.front());
    lines_.pop_front();
    INFO("stdout line: ", line);
    auto r = parse_json(line, 512);
    REQUIRE(r.ok());
    REQUIRE(r->is_object());
    CHECK((*r)["jsonrpc"] == "2.0");
    return std::move(*r);
  }

  /// Waits for `n` responses and returns them by id (ids must be unique).
  std::map<std::string, json> collect(std::size_t n, std::chrono::milliseconds t = 20s) {
    std::map<std::string, json> out;
    for (std::size_t i = 0; i < n; ++i) {
      auto r = next(t);
      auto key = r["id"].dump();
      INFO("duplicate response id ", key);
      REQUIRE(out.count(key) == 0);
      out.emplace(key, std::move(r));
    }
    return out;
  }

  /// The stdout lines not yet taken, once the child has exited (wait_exit)
  /// and its stdout has reached end of file: what it wrote after the lines
  /// taken, all of it (a barrier, not a wait for silence).
  std::deque<std::string> rest() {
    REQUIRE(pid_ == -1);
    if (reader_.joinable())
      reader_.join();
    std::lock_guard<std::mutex> guard(mtx_);
    return std::exchange(lines_, {});
  }

  /// Sends one request and waits for its response (REQUIREs no other
  /// response arrives first: use it only when nothing else is pending).
  json call(const std::string& method, json params, json id = "call") {
    json req{{"jsonrpc", "2.0"}, {"id", id}, {"method", method}};
    if (!params.is_null())
      req["params"] = std::move(params);
    send_line(req);
    auto r = next();
    REQUIRE(r["id"] == id);
    return r;
  }

  /// The result of a call that must succeed.
  json ok(const std::string& method, json params) {
    auto r = call(method, std::move(params));
    INFO("response: ", r.dump());
    REQUIRE(r.contains("result"));
    REQUIRE(!r.contains("error"));
    return r["result"];
  }

  /// The exit status after stdin is closed (unless `close_input` is false);
  /// REQUIREs exit within `t`.
  int wait_exit(std::chrono::milliseconds t = 15s, bool close_input = true) {
    if (close_input)
      close_stdin();
    int status = 0;
    REQUIRE(reaped_within(pid_, status, t));
    pid_ = -1;
    REQUIRE(WIFEXITED(status));
    return WEXITSTATUS(status);
  }

  void signal(int sig) { REQUIRE(::kill(pid_, sig) == 0); }

  pid_t pid() const { return pid_; }

  /// A field of /proc/PID/status in KiB (VmRSS, VmHWM), or -1.
  long status_kib(const std::string& field) const {
    std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
    std::string line;
    while (std::getline(in, line))
      if (line.rfind(field + ":", 0) == 0)
        return std::stol(line.substr(field.size() + 1));
    return -1;
  }

  /// True while the process has not exited (or been reaped).
  bool alive() {
    if (pid_ <= 0)
      return false;
    int status = 0;
    auto r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      return false;
    }
    return true;
  }

  /// stdout lines not yet taken.
  std::size_t unread() {
    std::lock_guard<std::mutex> guard(mtx_);
    return lines_.size();
  }

private:
  void read_stdout() { collect_lines(out_, mtx_, cv_, lines_); }

  pid_t pid_ = -1;
  std::string err_path_;
  int in_ = -1;
  int out_ = -1;
  std::thread reader_;
  std::mutex mtx_;
  std::condition_variable cv_;
  std::deque<std::string> lines_;
};

inline json rpc(json id, const std::string& method, json params) {
  json r{{"jsonrpc", "2.0"}, {"id", std::move(id)}, {"method", method}};
  if (!params.is_null())
    r["params"] = std::move(params);
  return r;
}

inline json session_params(const std::string& session, const std::string& user = "u1",
                           const std::string& app = "app") {
  return json{{"app_name", app}, {"user_id", user}, {"session_id", session}};
}

inline json with(json params, const std::string& key, json value) {
  params[key] = std::move(value);
  return params;
}

/// Runs `agentstate ARGS` through the shell; returns {exit code, stdout}.
inline std::pair<int, std::string> run_tool(const std::string& args) {
  std::string cmd = std::string(AGENTSTATE_BIN) + " " + args;
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[65536];
  while (auto n = std::fread(buf, 1, sizeof buf, p))
    out.append(buf, n);
  int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

} // namespace agentstate::test
