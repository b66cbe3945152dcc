// SPDX-License-Identifier: Apache-2.0
// tools/bench/serve_client.hpp: `agentstate serve` as a child process of the
// bench, and the client that drives it over a real pipe (its stdin/stdout) or
// over loopback TCP connections: a closed loop of pipelined requests run by
// one thread with poll(2), so the client's own cost per request stays small
// next to the server's on a 2-core machine.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
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

/// A connected TCP socket to "HOST:PORT" or "[HOST]:PORT" (TCP_NODELAY), or
/// -1 with `why`. HOST is a numeric address or a name (resolved, every
/// address tried in turn); PORT is numeric. The socket is blocking.
int connect_tcp(const std::string& address, std::string& why);

/// A connected Unix-domain stream socket at `path`, or -1 with `why` (a path
/// of 108 bytes or more cannot be named). The socket is blocking.
int connect_unix(const std::string& path, std::string& why);

/// One client stream: the descriptor requests are written to and the one
/// responses are read from (the same socket over TCP).
struct stream_fds {
  int write_fd = -1;
  int read_fd = -1;
};

/// The parts of a response line a bench needs, read without a JSON parser from
/// the server's own compact form ({"jsonrpc":"2.0","id":N,"result":...}).
struct response_view {
  bool well_formed = false; ///< the prefix and a whole-number id were found
  std::uint64_t id = 0;
  bool ok = false; ///< a "result" member, not an "error"
  std::string_view line;
};

/// Reads `line` as above. A line in another form comes back !well_formed
/// (the caller reports it as an error).
response_view read_response(std::string_view line);

/// The number after the last "version": in `line`, or -1 when there is none.
std::int64_t last_version(std::string_view line);

/// Runs a closed loop of requests over `streams` on the calling thread until
/// `outstanding()` is zero after at least one response, or a stream fails.
/// `start(i, out)` appends stream i's first request lines (each ending in
/// '\n') to `out`; `on_line(i, line, out)` handles each response line of
/// stream i and may append follow-up requests to `out`. The loop writes each
/// stream's queued lines in as few write(2)s as it can, and reads with a
/// 256 KiB buffer. Returns "" on success, or why it stopped: a stream closed
/// or failed, or no response for 60 s. Descriptors are set non-blocking.
std::string
run_requests(const std::vector<stream_fds>& streams,
             const std::function<void(std::size_t, std::string&)>& start,
             const std::function<void(std::size_t, std::string_view, std::string&)>& on_line,
             const std::function<std::size_t()>& outstanding);

} // namespace agentstate::tools::bench
