// SPDX-License-Identifier: Apache-2.0
// test-name: tools_serve_watch_resume_test
// A watch over pipes whose reader falls behind (the real binary; this test
// reads its stdout only once it has written 80 appends): with a small
// output budget the watch pauses for room instead of holding a delivery
// thread, and serve's resumer restarts it once the output drains; every
// change arrives once, in commit order, and every request is answered.
#include "support/serve_process.hpp"
#include "support/test_support.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>

extern char** environ;

namespace {

using namespace agentstate;
using namespace agentstate::test;
using namespace std::chrono_literals;

// `agentstate serve ARGS` on two pipes; killed at destruction if running.
// Not support/serve_process.hpp's server: that one drains stdout on a thread
// of its own, and this test needs a reader that falls behind.
class piped_serve {
public:
  explicit piped_serve(std::vector<std::string> args) {
    ::signal(SIGPIPE, SIG_IGN);
    int in[2], out[2];
    REQUIRE(::pipe2(in, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
    args.insert(args.begin(), "serve");
    pid_ = spawn_tool(args, in[0], out[1], "");
    ::close(in[0]);
    ::close(out[1]);
    in_ = in[1];
    out_ = out[0];
  }
  ~piped_serve() {
    close_input();
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    ::close(out_);
  }
  piped_serve(const piped_serve&) = delete;
  piped_serve& operator=(const piped_serve&) = delete;

  // Any thread; false once the pipe is broken.
  bool send_line(const json& x) {
    auto bytes = x.dump() + "\n";
    std::size_t off = 0;
    while (off < bytes.size()) {
      auto n = ::write(in_, bytes.data() + off, bytes.size() - off);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        return false;
      off += static_cast<std::size_t>(n);
    }
    return true;
  }

  void close_input() {
    if (in_ >= 0)
      ::close(in_);
    in_ = -1;
  }

  // The next stdout line, parsed; nullopt after `t` without one.
  std::optional<json> next(std::chrono::milliseconds t = 20s) {
    auto deadline = std::chrono::steady_clock::now() + t;
    for (;;) {
      if (auto nl = buf_.find('\n'); nl != std::string::npos) {
        auto r = parse_json(std::string_view(buf_).substr(0, nl), 512);
        buf_.erase(0, nl + 1);
        if (!r)
          return std::nullopt;
        return std::move(*r);
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0)
        return std::nullopt;
      pollfd p{out_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0)
        continue;
      char chunk[65536];
      auto n = ::read(out_, chunk, sizeof chunk);
      if (n <= 0)
        return std::nullopt;
      buf_.append(chunk, static_cast<std::size_t>(n));
    }
  }

private:
  pid_t pid_ = -1;
  int in_ = -1, out_ = -1;
  std::string buf_;
};

json request(json id, const std::string& method, json params) {
  return json{{"jsonrpc", "2.0"}, {"id", std::move(id)}, {"method", method}, {"params", params}};
}

} // namespace

TEST_CASE("serve over pipes: a watch paused for room resumes once the output drains; every "
          "change once, in order") {
  // 64 KiB of output budget: the watch pauses once 32 KiB are unread.
  piped_serve s({"--memory", "--max-output-bytes", "65536"});
  const json ref{{"app_name", "a"}, {"user_id", "u"}, {"session_id", "s"}};
  REQUIRE(s.send_line(request("create", "create_session", ref)));
  REQUIRE(s.send_line(request("watch", "watch", json{{"scope", "all"}})));
  constexpr int n = 400;
  std::atomic<int> written{0};
  // Each append's notification is over 2 KB: 400 of them are many times
  // the pipe and the budget. The writer blocks whenever serve stops
  // taking requests (its answers wait too).
  std::thread writer([&] {
    const std::string text(2000, 'y');
    for (int i = 0; i < n; ++i) {
      json p = ref;
      p["event"] = json{{"author", "x"}, {"content", {{"parts", json::array({{{"text", text}}})}}}};
      if (!s.send_line(request(i, "append_event", p)))
        return;
      ++written;
    }
    s.send_line(request("end", "ping", nullptr));
  });
  // Read nothing until 80 appends are written: with at most ~32 of them in
  // the input pipe, serve has answered ~50 (each answer carries its 2 KB
  // event) and the watch has met a full output. Bounded (10 s), and not a
  // check: the writer stops when serve stops taking requests, the answers
  // filling the output, and the reads below go on either way.
  (void)eventually([&] { return written.load() >= 80; }, 10s);
  std::vector<std::uint64_t> versions;
  int answers = 0; // create, watch, the appends and the ping: n + 3
  while (answers < n + 3 || static_cast<int>(versions.size()) < n) {
    auto line = s.next();
    INFO("answers ", answers, ", changes ", versions.size());
    REQUIRE(line);
    if (line->value("method", "") == "changes") {
      for (auto& c : (*line)["params"]["changes"])
        if (c["kind"] == "append")
          versions.push_back(c["version"].get<std::uint64_t>());
    } else {
      REQUIRE(line->contains("id"));
      CHECK(line->contains("result"));
      ++answers;
    }
  }
  writer.join();
  REQUIRE(versions.size() == static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < versions.size(); ++i)
    CHECK(versions[i] == i + 1);
}
