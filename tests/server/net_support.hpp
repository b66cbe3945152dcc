// SPDX-License-Identifier: Apache-2.0
// tests/server/net_support.hpp: the network server as a child process
// (`agentstate serve --listen ...`, optionally under a wrapper such as
// prlimit), a blocking client of the protocol built on agentstate::rpc_client,
// a raw socket for the bytes no client sends, and TLS material made with the
// openssl CLI. Shared by the tests under tests/server/ and the others that
// drive a server over the network.
// REQUIRES: the including target defines AGENTSTATE_BIN.
#pragma once

#include "support/sanitizers.hpp"
#include "support/test_support.hpp"

#include "agentstate/client.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <fstream>
#include <mutex>
#include <regex>
#include <sstream>

extern char** environ;

namespace agentstate::test::net {

using namespace std::chrono_literals;

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

/// Runs `cmd` through the shell; returns {exit status, stdout (and stderr
/// unless `with_stderr` is false)}.
inline std::pair<int, std::string> shell(const std::string& cmd, bool with_stderr = true) {
  std::string out;
  FILE* p = ::popen((with_stderr ? "(" + cmd + ") 2>&1" : cmd).c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  while (auto n = std::fread(buf, 1, sizeof buf, p))
    out.append(buf, n);
  int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

/// Raises this process's descriptor limit to at least `n` (the hard limit
/// too when running as root); REQUIREs success.
inline void need_descriptors(rlim_t n) {
  rlimit rl{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &rl) == 0);
  if (rl.rlim_cur >= n)
    return;
  rl.rlim_cur = n;
  if (rl.rlim_max < n)
    rl.rlim_max = n;
  INFO("cannot raise RLIMIT_NOFILE to ", n, ": ", std::strerror(errno));
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &rl) == 0);
}

/// `agentstate serve ARGS` with stdin and stdout on /dev/null and stderr (the
/// log) in a file. `wrapper` (e.g. {"prlimit", "--nofile=64:64", "--"}) runs
/// the tool. Killed at destruction if still running.
class server_process {
public:
  server_process(std::vector<std::string> args, std::string err_path,
                 std::vector<std::string> wrapper = {})
    : err_path_(std::move(err_path)) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::vector<std::string> argv_s = wrapper;
    argv_s.push_back(AGENTSTATE_BIN);
    argv_s.push_back("serve");
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    int rc = ::posix_spawnp(&pid_, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    REQUIRE(rc == 0);
  }

  /// Kills the child if still running; fails the test when its log holds a
  /// sanitizer report (sanitizer builds).
  ~server_process() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    auto text = log();
    CHECK_MESSAGE(sanitizer_report(text).empty(), "sanitizer report in the server's log: ", text);
  }
  server_process(const server_process&) = delete;
  server_process& operator=(const server_process&) = delete;

  std::string log() const { return read_text(err_path_); }

  /// The log once `pred(log)` holds of it; REQUIREs that within `t` (a
  /// bounded poll of the child's log file).
  template <class Pred>
  std::string log_when(Pred pred, std::chrono::milliseconds t = 10s) {
    std::string text;
    INFO("log: ", text);
    REQUIRE(eventually(
      [&] {
        text = log();
        return pred(text);
      },
      t, 10ms));
    return text;
  }

  /// The first match of `pattern`'s group 1 in the log, waiting up to `t`
  /// (REQUIREs the child alive meanwhile).
  std::string wait_log(const std::string& pattern, std::chrono::milliseconds t = 10s) {
    std::regex re(pattern);
    INFO("waiting for /", pattern, "/ in the log");
    auto text = log_when(
      [&](const std::string& x) {
        if (std::regex_search(x, re))
          return true;
        REQUIRE(alive());
        return false;
      },
      t);
    std::smatch m;
    std::regex_search(text, m, re);
    return m.size() > 1 ? m[1].str() : m[0].str();
  }

  /// The port of the first "listening on 127.0.0.1:PORT".
  int port() { return std::stoi(wait_log("listening on 127\\.0\\.0\\.1:([0-9]+)")); }

  /// Waits until the log says the server serves (listeners bound, store open).
  void wait_serving() { wait_log("event=serving|\"event\":\"serving\""); }

  void signal(int sig) { REQUIRE(::kill(pid_, sig) == 0); }

  /// The exit status; REQUIREs a normal exit within `t`.
  int wait_exit(std::chrono::milliseconds t = 15s) {
    int status = 0;
    INFO("log: ", log());
    REQUIRE(reaped_within(pid_, status, t));
    pid_ = -1;
    REQUIRE(WIFEXITED(status));
    return WEXITSTATUS(status);
  }

  /// True once the process has exited and been reaped (a SIGKILL's end,
  /// say), waiting up to `t`; false while it still runs then.
  bool exited_within(std::chrono::milliseconds t) {
    return eventually([&] { return !alive(); }, t);
  }

  bool alive() {
    if (pid_ <= 0)
      return false;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return false;
    }
    return true;
  }

  pid_t pid() const { return pid_; }

  /// A field of /proc/PID/status (VmRSS, VmHWM in KiB; Threads), or -1.
  long status(const std::string& field) const {
    std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
    std::string line;
    while (std::getline(in, line))
      if (line.rfind(field + ":", 0) == 0)
        return std::stol(line.substr(field.size() + 1));
    return -1;
  }

  /// Open descriptors of the process.
  std::size_t descriptors() const {
    std::size_t n = 0;
    if (DIR* d = ::opendir(("/proc/" + std::to_string(pid_) + "/fd").c_str())) {
      while (auto e = ::readdir(d))
        if (e->d_name[0] != '.')
          ++n;
      ::closedir(d);
    }
    return n;
  }

private:
  std::string err_path_;
  pid_t pid_ = -1;
};

/// A blocking TCP loopback or Unix socket that sends the bytes it is given:
/// raw because the tests using it send what no client would (malformed,
/// oversize or half-written lines, ids of any type, slow reads, floods).
/// No doctest assertions inside (usable from worker threads): failures come
/// back as empty results.
class raw_socket {
public:
  /// TCP to 127.0.0.1:port.
  explicit raw_socket(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  /// A Unix socket at `path`.
  explicit raw_socket(const std::string& path) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
    if (fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~raw_socket() {
    if (fd_ >= 0)
      ::close(fd_);
  }
  raw_socket(const raw_socket&) = delete;
  raw_socket& operator=(const raw_socket&) = delete;
  raw_socket(raw_socket&& o) noexcept : fd_(o.fd_), buf_(std::move(o.buf_)) { o.fd_ = -1; }

  bool connected() const { return fd_ >= 0; }
  int fd() const { return fd_; }

  bool send(const std::string& bytes) {
    std::size_t off = 0;
    while (off < bytes.size()) {
      auto n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        return false;
      off += static_cast<std::size_t>(n);
    }
    return true;
  }

  bool send_line(const json& x) { return send(x.dump() + "\n"); }

  /// The next line, parsed; nullopt on timeout, end of stream or bad JSON.
  std::optional<json> next(std::chrono::milliseconds t = 10s) {
    auto line = next_raw(t);
    if (!line)
      return std::nullopt;
    auto r = parse_json(*line, 512);
    if (!r)
      return std::nullopt;
    return std::move(*r);
  }

  std::optional<std::string> next_raw(std::chrono::milliseconds t = 10s) {
    auto deadline = std::chrono::steady_clock::now() + t;
    for (;;) {
      if (auto nl = buf_.find('\n'); nl != std::string::npos) {
        auto line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0)
        return std::nullopt;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0)
        continue;
      char chunk[65536];
      auto n = ::recv(fd_, chunk, sizeof chunk, 0);
      if (n <= 0)
        return std::nullopt;
      buf_.append(chunk, static_cast<std::size_t>(n));
    }
  }

  /// Sends one request and returns its response (nullopt on failure).
  std::optional<json> call(const std::string& method, json params = nullptr, json id = "call",
                           std::chrono::milliseconds t = 10s) {
    json req{{"jsonrpc", "2.0"}, {"id", id}, {"method", method}};
    if (!params.is_null())
      req["params"] = std::move(params);
    if (!send_line(req))
      return std::nullopt;
    return next(t);
  }

  /// True when the server closed the connection (end of stream or reset)
  /// within `t`, after any lines still buffered.
  bool closed_within(std::chrono::milliseconds t) {
    auto deadline = std::chrono::steady_clock::now() + t;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0)
        return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0)
        continue;
      char chunk[65536];
      auto n = ::recv(fd_, chunk, sizeof chunk, 0);
      if (n <= 0)
        return true;
      buf_.append(chunk, static_cast<std::size_t>(n));
    }
  }

private:
  int fd_ = -1;
  std::string buf_;
};

/// A blocking client of the protocol on TCP loopback or a Unix socket, built
/// on agentstate::rpc_client (which picks the wire ids). Responses come back
/// as the server's response objects, `id` being the label the test gave;
/// watches started here queue their notifications (`changes`,
/// `watch_ended`) for next(). No doctest assertions inside (usable from
/// worker threads): failures come back as empty results.
class client {
public:
  /// TCP to 127.0.0.1:port.
  explicit client(int port) : client("127.0.0.1:" + std::to_string(port), 0) {}
  /// A Unix socket at `path`.
  explicit client(const std::string& path) : client("unix:" + path, 0) {}

  bool connected() const { return rpc_ && rpc_->connected(); }
  /// The library client underneath (null when connecting failed).
  rpc_client* rpc() const { return rpc_.get(); }

  /// Sends one request and waits for its response (the response object,
  /// `id` set to `id`); nullopt when it is not answered within `t` or the
  /// connection is lost. A `watch` call queues its notifications for next().
  std::optional<json> call(const std::string& method, json params = nullptr, json id = "call",
                           std::chrono::milliseconds t = 10s) {
    if (!rpc_)
      return std::nullopt;
    auto st = state_;
    auto r = method == "watch" ? rpc_->watch(
               std::move(params), [st](const watch_event& ev) { st->notify(ev); }, t)
                               : rpc_->call(method, std::move(params), t);
    return response_of(std::move(r), std::move(id));
  }

  /// Sends request `req` (`{"id","method","params"}`) without waiting; its
  /// response is queued for next() in the order the server's lines came,
  /// notifications included. False when the connection is closed.
  bool send_line(const json& req) {
    if (!connected() || !req.is_object() || !req.contains("method"))
      return false;
    auto st = state_;
    json id = req.value("id", json());
    auto done = [st, id](rpc_reply r) {
      if (auto resp = response_of(std::move(r), id))
        st->push(std::move(*resp));
      else
        st->wake();
    };
    json params = req.value("params", json());
    const auto method = req["method"].get<std::string>();
    if (method == "watch")
      rpc_->watch_async(
        std::move(params), [st](const watch_event& ev) { st->notify(ev); }, std::move(done));
    else
      rpc_->call_async(method, std::move(params), std::move(done));
    return true;
  }

  /// The next queued response or notification; nullopt when none comes
  /// within `t`, or when the connection has ended and none is left (noticed
  /// at once while a call or watch is outstanding, else at `t`).
  std::optional<json> next(std::chrono::milliseconds t = 10s) {
    std::unique_lock<std::mutex> lock(state_->mtx);
    state_->cv.wait_for(lock, t, [&] { return !state_->queue.empty() || !connected(); });
    if (state_->queue.empty())
      return std::nullopt;
    auto m = std::move(state_->queue.front());
    state_->queue.pop_front();
    return m;
  }

private:
  struct queue_state {
    std::mutex mtx;
    std::condition_variable cv;
    std::deque<json> queue;

    void push(json m) {
      std::lock_guard<std::mutex> g(mtx);
      queue.push_back(std::move(m));
      cv.notify_all();
    }
    void wake() {
      std::lock_guard<std::mutex> g(mtx);
      cv.notify_all();
    }
    void notify(const watch_event& ev) {
      if (ev.what == watch_event::kind::lost)
        return wake();
      push(json{{"jsonrpc", "2.0"},
                {"method", ev.what == watch_event::kind::ended ? "watch_ended" : "changes"},
                {"params", ev.params}});
    }
  };

  client(const std::string& address, int) {
    client_options o;
    o.address = address;
    o.max_line_bytes = std::size_t(1) << 30;
    if (auto c = rpc_client::connect(o))
      rpc_ = std::move(*c);
  }

  static std::optional<json> response_of(rpc_reply r, json id) {
    if (!r.answered)
      return std::nullopt;
    json out{{"jsonrpc", "2.0"}, {"id", std::move(id)}};
    if (r.value)
      out["result"] = std::move(*r.value);
    else
      out["error"] = std::move(r.error_object);
    return out;
  }

  std::shared_ptr<queue_state> state_ = std::make_shared<queue_state>();
  std::unique_ptr<rpc_client> rpc_;
};

inline json rpc(json id, const std::string& method, json params = nullptr) {
  json r{{"jsonrpc", "2.0"}, {"id", std::move(id)}, {"method", method}};
  if (!params.is_null())
    r["params"] = std::move(params);
  return r;
}

inline json sref_params(const std::string& app, const std::string& session,
                        const std::string& user = "u") {
  return json{{"app_name", app}, {"user_id", user}, {"session_id", session}};
}

inline json with(json params, const std::string& key, json value) {
  params[key] = std::move(value);
  return params;
}

/// data.kind of an error response ("" when it is not one).
inline std::string kind_of(const std::optional<json>& r) {
  if (!r || !r->contains("error"))
    return "";
  return (*r)["error"]["data"]["kind"].get<std::string>();
}

/// True when `r` is a success response.
inline bool ok(const std::optional<json>& r) {
  return r && r->contains("result") && !r->contains("error");
}

/// The "server" section of the stats `c` reads once `pred` holds of it;
/// REQUIREs that within `t` (a bounded poll of the server's counters, one
/// stats call each `every`: a test counting its own requests counts the
/// calls of `pred`), failing with the last stats read.
template <class Pred>
json stats_when(client& c, Pred pred, std::chrono::milliseconds t,
                std::chrono::milliseconds every = 20ms) {
  json server;
  INFO("stats: ", server.dump());
  REQUIRE(eventually(
    [&] {
      auto r = c.call("stats", nullptr, "stats");
      REQUIRE(ok(r));
      server = (*r)["result"]["server"];
      return static_cast<bool>(pred(server));
    },
    t, every));
  return server;
}

// -- TLS material ------------------------------------------------------------------

/// A CA and a certificate it signed (P-256 keys: quick to make), made with
/// the openssl CLI in `dir`:
/// NAME-ca.pem / NAME-ca.key, NAME.pem / NAME.key (subjectAltName
/// IP:127.0.0.1). Each call makes a fresh CA.
struct tls_pair {
  std::string ca, ca_key, cert, key;
};

inline tls_pair make_tls_pair(const std::string& dir, const std::string& name) {
  tls_pair p{dir + "/" + name + "-ca.pem", dir + "/" + name + "-ca.key", dir + "/" + name + ".pem",
             dir + "/" + name + ".key"};
  auto ext = dir + "/" + name + ".ext";
  write_text(ext, "subjectAltName=IP:127.0.0.1,DNS:localhost\n");
  const std::string ec_key = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  std::string cmd = "set -e; openssl req -x509" + ec_key + " -days 2 -subj /CN=" + name
    + "-test-ca -keyout " + p.ca_key + " -out " + p.ca + " && openssl req" + ec_key
    + " -subj /CN=" + name + " -keyout " + p.key + " -out " + dir + "/" + name
    + ".csr && openssl x509 -req -days 2 -in " + dir + "/" + name + ".csr -CA " + p.ca + " -CAkey "
    + p.ca_key + " -CAcreateserial -extfile " + ext + " -out " + p.cert;
  auto [code, out] = shell(cmd);
  INFO("openssl: ", out);
  REQUIRE(code == 0);
  return p;
}

/// A TLS client in Python (ssl module): connects to 127.0.0.1:port verifying
/// the server against `ca` (and presenting `cert`/`key` when given), sends
/// each line of `lines`, prints one response line per request line read back.
/// Prints "TLS-ERROR <class>: <message>" and exits 3 when the handshake or
/// the connection fails.
inline std::pair<int, std::string> python_tls(int port, const std::string& ca,
                                              const std::vector<std::string>& lines,
                                              const std::string& cert = "",
                                              const std::string& key = "") {
  static const char* script = R"PY(
import socket, ssl, sys
port, ca, cert, key = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
lines = sys.argv[5:]
ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca)
if cert:
    ctx.load_cert_chain(cert, key)
try:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            f = s.makefile("rwb")
            for line in lines:
                f.write(line.encode() + b"\n")
            f.flush()
            for _ in lines:
                got = f.readline()
                if not got:
                    print("TLS-ERROR EOF: connection closed")
                    sys.exit(3)
                sys.stdout.write(got.decode())
            print("VERSION " + s.version())
except (ssl.SSLError, OSError) as e:
    print("TLS-ERROR %s: %s" % (type(e).__name__, e))
    sys.exit(3)
)PY";
  std::string cmd = "/usr/bin/python3 -c '" + std::string(script) + "' " + std::to_string(port)
    + " '" + ca + "' '" + cert + "' '" + key + "'";
  for (const auto& l : lines)
    cmd += " '" + l + "'";
  return shell(cmd);
}

} // namespace agentstate::test::net
