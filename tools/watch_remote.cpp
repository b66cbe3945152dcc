// SPDX-License-Identifier: Apache-2.0
// tools/watch_remote.cpp: `agentstate watch ADDR` (tools/watch_remote.hpp): a
// client of `serve` over TCP, TLS or a Unix socket (agentstate/client.hpp) that
// prints the `watch` notifications (or `read_changes` pages with --once) as
// JSON lines. --from-start live is one `watch` from "start" (on a server that
// refuses "start", `read_changes` pages up to the head and a watch from there).
#include "tools/watch_remote.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <mutex>

#include "agentstate/client.hpp"
#include "agentstate/watch.hpp"
#include "tools/cli.hpp"

namespace agentstate::tools {

namespace {

using watch_clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int connect_ms = 10000;
constexpr int answer_ms = 30000;
/// A ping after this long without a line keeps a quiet watch from the
/// server's --idle-timeout-s (default 300 s).
constexpr int keepalive_ms = 30000;
/// How long a stopping watch waits for the answer to its unwatch.
constexpr int unwatch_ms = 5000;

int remaining_ms(watch_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<milliseconds>(deadline - watch_clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(left);
}

std::string text_of(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

/// What the client's I/O thread hands to the feed's thread: the watch's
/// events and the replies of unwatch and the keepalive pings, in arrival
/// order, with a pipe that is readable while any wait.
class inbox {
public:
  struct item {
    std::optional<watch_event> event;
    std::optional<rpc_reply> reply;
    bool unwatch = false; ///< `reply` answers the unwatch (else a ping)
  };

  inbox() { ok_ = ::pipe2(fd_, O_CLOEXEC | O_NONBLOCK) == 0; }
  ~inbox() {
    for (int fd : fd_)
      if (fd >= 0)
        ::close(fd);
  }
  inbox(const inbox&) = delete;
  inbox& operator=(const inbox&) = delete;

  bool ok() const { return ok_; }
  int fd() const { return fd_[0]; }

  /// Any thread.
  void push(item x) {
    std::lock_guard<std::mutex> g(mtx_);
    items_.push_back(std::move(x));
    char c = 1;
    [[maybe_unused]] auto n = ::write(fd_[1], &c, 1);
  }

  /// The oldest item, or nullopt when none waits (and the pipe is drained).
  std::optional<item> pop() {
    std::lock_guard<std::mutex> g(mtx_);
    if (items_.empty()) {
      char buf[256];
      while (::read(fd_[0], buf, sizeof buf) > 0) {
      }
      return std::nullopt;
    }
    item x = std::move(items_.front());
    items_.pop_front();
    return x;
  }

private:
  int fd_[2] = {-1, -1};
  bool ok_ = false;
  std::mutex mtx_;
  std::deque<item> items_;
};

/// The error lines the server sent with a null id (a refusal of the whole
/// connection, sent before it closes it).
struct server_notes {
  std::mutex mtx;
  std::optional<json> last;
};

/// One feed over one connection: the requests, the lines printed and the
/// cursor they reach. Runs on the calling thread.
class feed {
public:
  feed(rpc_client& c, const remote_watch& w, inbox& box, server_notes& notes)
    : c_(c), w_(w), box_(box), notes_(notes) {}

  int run() {
    if (!w_.token.empty()) {
      json answer;
      if (int rc = call("authenticate", json{{"token", w_.token}}, answer); rc != watch_ok)
        return rc;
    }
    return w_.once ? run_once() : run_live();
  }

private:
  // --once: read_changes pages from --from (or the log's oldest change,
  // --from-start) to the head. Without either the feed starts at the head: a
  // watch answers where that is, and the connection's end ends it.
  int run_once() {
    json answer;
    if (w_.from.empty() && !w_.from_start) {
      if (int rc = call("watch", w_.filter, answer); rc != watch_ok)
        return rc;
      say("watch", "at %s", text_of(answer, "cursor").c_str());
      return watch_ok;
    }
    if (int rc = read_to_head(); rc != watch_ok)
      return rc;
    say("watch", "at %s", last_.c_str());
    return watch_ok;
  }

  // Prints read_changes pages from last_ (empty: from the oldest change the
  // log keeps) until one is at the head; last_ follows each page.
  int read_to_head() {
    last_ = w_.from;
    json answer;
    for (;;) {
      json params = w_.filter;
      if (!last_.empty())
        params["from"] = last_;
      params["limit"] = 1000;
      if (int rc = call("read_changes", params, answer); rc != watch_ok)
        return rc;
      if (!print(answer["changes"]))
        return watch_unreachable;
      last_ = text_of(answer, "cursor");
      if (answer.value("at_head", false))
        return watch_ok;
    }
  }

  int run_live() {
    ::signal(SIGPIPE, SIG_IGN);
    if (!install_stop_handlers() || !box_.ok()) {
      say("watch", "pipe: %s", std::strerror(errno));
      return watch_unreachable;
    }
    json params = w_.filter;
    if (!w_.from.empty())
      params["from"] = w_.from;
    else if (w_.from_start)
      params["from"] = from_start; // the server replays its log, then goes on live
    json answer;
    inbox& box = box_;
    auto on_event = [&box](const watch_event& ev) { box.push(inbox::item{ev, std::nullopt}); };
    auto reply = c_.watch(params, on_event, milliseconds(answer_ms));
    if (w_.from_start && start_refused(reply)) {
      // A server older than the watch from "start" reads it as a cursor and
      // refuses it: its log's pages up to the head, then a watch from there
      // (no change missed or repeated between them).
      if (int rc = read_to_head(); rc != watch_ok)
        return rc;
      params["from"] = last_;
      reply = c_.watch(params, on_event, milliseconds(answer_ms));
    }
    if (int rc = finish("watch", std::move(reply), answer); rc != watch_ok)
      return rc;
    const std::string watch_id = text_of(answer, "watch_id");
    last_ = text_of(answer, "cursor");
    bool stopping = false;
    auto stop_deadline = watch_clock::now();
    for (;;) {
      while (auto x = box_.pop()) {
        if (x->reply) {
          if (!x->unwatch)
            continue; // the keepalive's pong
          if (x->reply->value.ok())
            if (auto c = text_of(*x->reply->value, "resume_from"); !c.empty())
              last_ = c;
          return stopped();
        }
        const watch_event& ev = *x->event;
        if (ev.what == watch_event::kind::lost)
          return stopping ? stopped() : lost(ev.why.message);
        if (ev.what == watch_event::kind::changes) {
          if (!print(ev.params["changes"]))
            return watch_unreachable;
          last_ = text_of(ev.params, "cursor");
          continue;
        }
        const json& p = ev.params;
        std::string reason = text_of(p, "reason");
        last_ = text_of(p, "resume_from");
        if (stopping && reason == "cancelled")
          continue; // the unwatch's answer follows
        std::string detail;
        if (p.contains("error")) {
          detail = ": " + text_of(p["error"], "kind") + ": " + text_of(p["error"], "message");
          if (auto oldest = text_of(p["error"], "oldest"); !oldest.empty())
            detail += " (the oldest cursor it serves is " + oldest + ")";
        }
        say("watch", "the server ended the watch (%s%s); resume with --from %s", reason.c_str(),
            detail.c_str(), last_.c_str());
        return watch_ended;
      }
      int wait = stopping ? remaining_ms(stop_deadline) : keepalive_ms;
      if (stopping && wait == 0)
        return stopped();
      pollfd p[2] = {{box_.fd(), POLLIN, 0}, {stopping ? -1 : stop_fd(), POLLIN, 0}};
      int n = ::poll(p, 2, wait);
      if (n < 0 && errno != EINTR) {
        say("watch", "poll: %s", std::strerror(errno));
        return watch_unreachable;
      }
      if (n == 0) {
        if (stopping)
          return stopped();
        c_.call_async("ping", nullptr, [&box](rpc_reply r) {
          box.push(inbox::item{std::nullopt, std::move(r)});
        });
        continue;
      }
      if (!stopping && (p[1].revents & POLLIN)) {
        stopping = true;
        stop_deadline = watch_clock::now() + milliseconds(unwatch_ms);
        c_.unwatch_async(watch_id, [&box](rpc_reply r) {
          box.push(inbox::item{std::nullopt, std::move(r), true});
        });
      }
    }
  }

  /// Whether `reply` (of a watch from "start") is the server's invalid
  /// params error: a server that takes no "start" (it names no cursor).
  static bool start_refused(const rpc_reply& reply) {
    return reply.answered && !reply.value && reply.value.code() == errc::invalid_argument;
  }

  /// Sends one request and waits for its answer. watch_ok with its result in
  /// `out`, or the exit status after reporting the failure.
  int call(const std::string& method, json params, json& out) {
    return finish(method, c_.call(method, std::move(params), milliseconds(answer_ms)), out);
  }

  /// The exit status of `reply`, the reply of `method`: watch_ok with its
  /// result in `out`, refused (the server answered an error, or refused the
  /// connection), lost.
  int finish(const std::string& method, rpc_reply reply, json& out) {
    if (reply.answered) {
      if (!reply.value)
        return refused(method, reply.error_object);
      out = std::move(*reply.value);
      return watch_ok;
    }
    {
      std::lock_guard<std::mutex> g(notes_.mtx);
      if (notes_.last)
        return refused(method, *notes_.last);
    }
    if (c_.connected())
      return lost("no answer to " + method + " within " + std::to_string(answer_ms / 1000) + " s");
    return lost(reply.value.err().message);
  }

  int refused(const std::string& method, const json& e) {
    const json& data = e.contains("data") ? e["data"] : json::object();
    std::string kind = text_of(data, "kind");
    std::string hint;
    if (kind == "unauthenticated")
      hint = w_.token.empty() ? " (the server needs a token: give --token-file FILE or set "
                                "AGENTSTATE_TOKEN)"
                              : " (the token was refused)";
    else if (kind == "cursor_expired" && !text_of(data, "oldest").empty())
      hint = "; the oldest cursor it serves is " + text_of(data, "oldest") + " (resume with --from "
        + text_of(data, "oldest") + ", accepting the gap)";
    say("watch", "the server refused %s: %s: %s%s", method.c_str(), kind.c_str(),
        text_of(e, "message").c_str(), hint.c_str());
    return watch_refused;
  }

  int lost(const std::string& why) {
    if (last_.empty())
      say("watch", "%s: %s", server::describe(w_.at).c_str(), why.c_str());
    else
      say("watch", "%s: %s; printed up to %s (resume with --from %s)",
          server::describe(w_.at).c_str(), why.c_str(), last_.c_str(), last_.c_str());
    return watch_lost;
  }

  int stopped() {
    say("watch", "stopped at %s", last_.c_str());
    return watch_ok;
  }

  /// Prints each change of `changes` as one line; false when stdout fails.
  bool print(const json& changes) {
    if (changes.is_array())
      for (const auto& c : changes)
        std::printf("%s\n", c.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
    std::fflush(stdout);
    if (std::ferror(stdout)) {
      say("watch", "cannot write to standard output");
      return false;
    }
    return true;
  }

  rpc_client& c_;
  const remote_watch& w_;
  inbox& box_;
  server_notes& notes_;
  std::string last_; ///< every change of the scope up to here is printed
};

bool decimal(const std::string& s) {
  if (s.empty() || s.size() > 5)
    return false;
  for (char ch : s)
    if (ch < '0' || ch > '9')
      return false;
  return true;
}

} // namespace

std::optional<server::listen_spec> server_address(const std::string& arg) {
  if (arg.rfind("unix:", 0) == 0)
    return server::parse_listen(arg);
  if (arg.rfind("tcp://", 0) == 0)
    return server::parse_listen(arg.substr(6));
  auto colon = arg.rfind(':');
  if (colon == std::string::npos || colon == 0 || !decimal(arg.substr(colon + 1)))
    return std::nullopt;
  struct stat st {};
  if (::stat(arg.c_str(), &st) == 0)
    return std::nullopt;
  return server::parse_listen(arg);
}

result<std::string> read_token_file(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    return error{errc::invalid_argument,
                 "cannot read the token file " + path + ": " + std::strerror(errno)};
  std::string line;
  while (std::getline(in, line)) {
    auto start = line.find_first_not_of(" \t\r");
    if (start == std::string::npos || line[start] == '#')
      continue;
    auto end = line.find_first_of(" \t\r", start);
    return line.substr(start, end == std::string::npos ? std::string::npos : end - start);
  }
  return error{errc::invalid_argument, "the token file " + path + " holds no token"};
}

int run_remote_watch(const remote_watch& w) {
  // The inbox and the notes outlive the client, whose handlers use them.
  inbox box;
  server_notes notes;
  client_options o;
  o.address = server::describe(w.at);
  o.tls = w.tls;
  o.tls_ca = w.tls_ca;
  o.tls_cert = w.tls_cert;
  o.tls_key = w.tls_key;
  o.connect_timeout = milliseconds(connect_ms);
  o.on_server_error = [&notes](const json& e) {
    std::lock_guard<std::mutex> g(notes.mtx);
    notes.last = e;
  };
  auto c = rpc_client::connect(o);
  if (!c) {
    say("watch", "cannot reach %s: %s", server::describe(w.at).c_str(), c.err().message.c_str());
    return watch_unreachable;
  }
  feed f(**c, w, box, notes);
  return f.run();
}

namespace {

// SIGINT/SIGTERM: the handler writes a byte to the pipe the feed loops poll.
int wake_pipe[2] = {-1, -1};

extern "C" void on_stop_signal(int) {
  if (wake_pipe[1] >= 0) {
    char c = 1;
    [[maybe_unused]] auto n = ::write(wake_pipe[1], &c, 1);
  }
}

} // namespace

bool install_stop_handlers() {
  if (wake_pipe[0] >= 0)
    return true;
  if (::pipe2(wake_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
    return false;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  return true;
}

int stop_fd() {
  return wake_pipe[0];
}

bool wait_stop(unsigned ms) {
  if (wake_pipe[0] < 0)
    return false;
  pollfd p{wake_pipe[0], POLLIN, 0};
  int n;
  do
    n = ::poll(&p, 1, static_cast<int>(ms));
  while (n < 0 && errno == EINTR);
  return n > 0 && (p.revents & POLLIN);
}

} // namespace agentstate::tools
