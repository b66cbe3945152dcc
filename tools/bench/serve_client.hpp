// SPDX-License-Identifier: Apache-2.0
// tools/bench/serve_client.hpp: `agentstate serve` as a child process of the
// bench (the --via workloads and workload k), its stdin/stdout on pipes. The
// bench's requests go through agentstate::rpc_client (rpc_client::adopt
// over the pipes, rpc_client::connect over TCP).
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace agentstate::tools::bench {

/// A running `BIN serve ARGS...`: stdin/stdout are pipes held here, stderr is
/// collected by a thread of its own (for "listening on HOST:PORT" and for
/// error reports). Made and stopped on one thread.
class serve_child {
public:
  /// Starts `bin serve args...`. With `tcp`, also waits (up to 10 s) for the
  /// "listening on HOST:PORT" line on stderr. Null, with `why` set, when the
  /// process cannot be started or never listens.
  static std::unique_ptr<serve_child>
  start(const std::string& bin, const std::vector<std::string>& args, bool tcp, std::string& why);

  /// Stops the child if still running (SIGKILL) and reaps it.
  ~serve_child();
  serve_child(const serve_child&) = delete;
  serve_child& operator=(const serve_child&) = delete;

  int stdin_fd() const { return in_; }
  int stdout_fd() const { return out_; }
  /// "HOST:PORT" from the listening line (tcp only).
  const std::string& address() const { return address_; }

  /// CPU seconds (user + system) the child has used so far, all threads
  /// (/proc/PID/stat); -1 when unreadable.
  double cpu_seconds() const;

  /// Ends the run the way a client does: closes stdin (end of input) and,
  /// for a listener, sends SIGTERM; then waits up to 30 s for the exit.
  /// Returns the exit status, or -1 when the child did not exit normally
  /// (killed, or killed here after the wait).
  int stop();

  /// What the child wrote to stderr so far.
  std::string stderr_text() const;

private:
  serve_child() = default;
  void read_stderr();

  pid_t pid_ = -1;
  int in_ = -1, out_ = -1, err_ = -1;
  bool tcp_ = false;
  std::string address_;
  struct err_buffer;
  std::shared_ptr<err_buffer> err_buf_;
  std::thread err_thread_;
};

/// This running binary's path (/proc/self/exe resolved), the `serve` the --via
/// workloads and workload k start unless --serve-bin names another.
std::string self_binary();

} // namespace agentstate::tools::bench
