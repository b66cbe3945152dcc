// SPDX-License-Identifier: Apache-2.0
// test-tiers: tsan
// rpc_client (include/agentstate/client.hpp) against a real `agentstate serve`
// child: 1,000 pipelined calls matched by id, one session's appends kept in
// call order, calls from several threads, a Unix socket, TLS with a test CA,
// tokens accepted and refused, a watch's changes and its end, the server
// killed (kill -9) with calls in flight, deadlines, a response line over the
// reader's limit, and the send queue's cap. The server is paused (SIGSTOP)
// where a test needs calls to stay unanswered.
#include "server/net_support.hpp"
#include "support/test_support.hpp"
#include "support/counter.hpp"

#include "agentstate/client.hpp"

#include <condition_variable>
#include <mutex>

using namespace agentstate;
using namespace agentstate::test;
using namespace agentstate::test::net;

namespace {

using test::counter;

struct fixture {
  temp_dir dir;
  std::string path(const std::string& name) const { return (dir.path() / name).string(); }
};

std::unique_ptr<rpc_client> connect_to(const std::string& address, client_options o = {}) {
  o.address = address;
  auto c = rpc_client::connect(o);
  INFO("connect ", address, ": ", c.err().message);
  REQUIRE(c.ok());
  return std::move(*c);
}

std::string tcp_address(server_process& srv) {
  return "127.0.0.1:" + std::to_string(srv.port());
}

json event_params(const std::string& session, int n) {
  auto p = sref_params("app", session);
  p["event"] = json{{"id", "e" + std::to_string(n)},
                    {"author", "agent"},
                    {"actions", {{"state_delta", {{"n", n}}}}}};
  return p;
}

/// Pauses the server (SIGSTOP) until destroyed (SIGCONT) or resume().
class paused {
public:
  explicit paused(server_process& s) : pid_(s.pid()) { REQUIRE(::kill(pid_, SIGSTOP) == 0); }
  ~paused() { resume(); }
  void resume() {
    if (pid_ > 0)
      ::kill(pid_, SIGCONT);
    pid_ = -1;
  }

private:
  pid_t pid_;
};

const std::string good_token = "client-test-token-0123456789abcdef";

} // namespace

TEST_CASE("client: 1000 pipelined calls on one connection, each reply matched to its call by id; "
          "calls from several threads; a blocking call from a handler is refused") {
  fixture f;
  server_process srv({"--memory", "--listen", "0"}, f.path("log"));
  constexpr int n = 1000;
  std::vector<std::string> got(n);
  std::vector<int> times(n, 0);
  counter done;
  counter pongs;
  std::promise<rpc_reply> inner;
  auto c = connect_to(tcp_address(srv));
  CHECK(c->server() == "127.0.0.1:" + std::to_string(srv.port()));

  for (int i = 0; i < n; ++i)
    c->call_async("create_session", sref_params("app", "p" + std::to_string(i)),
                  [&, i](rpc_reply r) {
                    ++times[static_cast<std::size_t>(i)];
                    if (r.answered && r.value.ok())
                      got[static_cast<std::size_t>(i)] = (*r.value)["id"].get<std::string>();
                    done.add();
                  });
  REQUIRE(done.wait(n));
  for (int i = 0; i < n; ++i) {
    CHECK(times[static_cast<std::size_t>(i)] == 1);
    CHECK(got[static_cast<std::size_t>(i)] == "p" + std::to_string(i));
  }
  CHECK(c->outstanding() == 0);

  // Four threads at once, 250 calls each.
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 250; ++i)
        c->call_async("ping", nullptr, [&](rpc_reply r) {
          if (r.answered && r.value.ok() && *r.value == "pong")
            pongs.add();
        });
    });
  for (auto& t : threads)
    t.join();
  REQUIRE(pongs.wait(1000));

  // A blocking call inside a handler (the I/O thread) fails instead of hanging.
  c->call_async("ping", nullptr, [&](rpc_reply) { inner.set_value(c->call("ping", nullptr)); });
  auto r = inner.get_future().get();
  CHECK(!r.answered);
  CHECK(r.value.code() == errc::invalid_argument);

  // A server error keeps its kind, message and JSON-RPC object.
  auto dup = c->call("create_session", sref_params("app", "p1"));
  CHECK(dup.answered);
  CHECK(dup.value.code() == errc::already_exists);
  CHECK(dup.error_object["data"]["kind"] == "already_exists");
  CHECK(dup.error_object["code"] == -32000);
}

TEST_CASE("client: pipelined appends to one session get versions in the order of the calls") {
  fixture f;
  server_process srv({"--memory", "--listen", "0"}, f.path("log"));
  constexpr int n = 500;
  std::vector<std::int64_t> version(n, -1);
  counter done;
  auto c = connect_to(tcp_address(srv));
  REQUIRE(c->call("create_session", sref_params("app", "s")).value.ok());
  for (int i = 0; i < n; ++i)
    c->call_async("append_event", event_params("s", i), [&, i](rpc_reply r) {
      if (r.value.ok())
        version[static_cast<std::size_t>(i)] = (*r.value)["version"].get<std::int64_t>();
      done.add();
    });
  REQUIRE(done.wait(n));
  for (int i = 0; i < n; ++i)
    CHECK(version[static_cast<std::size_t>(i)] == i + 1);
  auto s = c->call("get_session", sref_params("app", "s"));
  REQUIRE(s.value.ok());
  const json& events = (*s.value)["events"];
  REQUIRE(events.size() == static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i)
    CHECK(events[static_cast<std::size_t>(i)]["id"] == "e" + std::to_string(i));
}

TEST_CASE("client: a Unix socket; malformed addresses and a closed port are refused") {
  fixture f;
  auto sock = f.path("s.sock");
  server_process srv({"--memory", "--listen", "unix:" + sock}, f.path("log"));
  srv.wait_serving();
  auto c = connect_to("unix:" + sock);
  auto r = c->call("ping", nullptr);
  CHECK(r.answered);
  REQUIRE(r.value.ok());
  CHECK(*r.value == "pong");
  CHECK(c->server() == "unix:" + sock);

  for (std::string bad : {"", "unix:", "127.0.0.1:99999", "127.0.0.1:0", "tcp://[::1"}) {
    client_options o;
    o.address = bad;
    auto x = rpc_client::connect(o);
    INFO("address '", bad, "'");
    CHECK(x.code() == errc::invalid_argument);
  }
  client_options o;
  o.address = "unix:" + f.path("nobody.sock");
  auto none = rpc_client::connect(o);
  CHECK(none.code() == errc::unavailable);
  CHECK(none.err().message.find("nobody.sock") != std::string::npos);
}

TEST_CASE("client: TLS with a test CA (and a client certificate); a client trusting another CA "
          "is refused naming the certificate; a missing CA file is invalid_argument") {
  fixture f;
  auto server_pair = make_tls_pair(f.dir.str(), "server");
  auto client_pair = make_tls_pair(f.dir.str(), "client");
  auto other = make_tls_pair(f.dir.str(), "other");
  server_process srv({"--memory", "--listen", "0", "--tls-cert", server_pair.cert, "--tls-key",
                      server_pair.key, "--tls-client-ca", client_pair.ca},
                     f.path("log"));
  auto addr = tcp_address(srv);

  client_options o;
  o.tls = true;
  o.tls_ca = server_pair.ca;
  o.tls_cert = client_pair.cert;
  o.tls_key = client_pair.key;
  {
    counter done;
    std::vector<std::string> ids(300);
    auto c = connect_to(addr, o);
    auto r = c->call("create_session", sref_params("app", "tls"));
    REQUIRE(r.value.ok());
    CHECK((*r.value)["id"] == "tls");
    // Pipelined over TLS: reads and writes of the one stream overlap.
    for (std::size_t i = 0; i < ids.size(); ++i)
      c->call_async("create_session", sref_params("app", "t" + std::to_string(i)),
                    [&, i](rpc_reply x) {
                      if (x.value.ok())
                        ids[i] = (*x.value)["id"].get<std::string>();
                      done.add();
                    });
    REQUIRE(done.wait(ids.size()));
    for (std::size_t i = 0; i < ids.size(); ++i)
      CHECK(ids[i] == "t" + std::to_string(i));
  }

  o.address = addr;
  o.tls_ca = other.ca;
  auto wrong = rpc_client::connect(o);
  CHECK(wrong.code() == errc::unavailable);
  CHECK(wrong.err().message.find("certificate") != std::string::npos);

  o.tls_ca = f.path("missing.pem");
  auto missing = rpc_client::connect(o);
  CHECK(missing.code() == errc::invalid_argument);
  CHECK(missing.err().message.find("missing.pem") != std::string::npos);

  client_options on_unix;
  on_unix.address = "unix:" + f.path("x.sock");
  on_unix.tls = true;
  CHECK(rpc_client::connect(on_unix).code() == errc::invalid_argument);
}

TEST_CASE("client: a token is sent first and accepted; a wrong one fails connect with "
          "unauthenticated; without one the server's refusal is an answered error") {
  fixture f;
  auto tokens = f.path("tokens");
  write_text(tokens, good_token + " *\n");
  ::chmod(tokens.c_str(), 0600);
  server_process srv({"--memory", "--listen", "0", "--auth-file", tokens}, f.path("log"));
  auto addr = tcp_address(srv);

  client_options o;
  o.token = good_token;
  auto c = connect_to(addr, o);
  CHECK(c->call("create_session", sref_params("app", "a")).value.ok());

  o.address = addr;
  o.token = "a-wrong-token-0123456789abcdef";
  auto wrong = rpc_client::connect(o);
  CHECK(wrong.code() == errc::unauthenticated);
  CHECK(wrong.err().message.find(o.token) == std::string::npos);

  auto anonymous = connect_to(addr);
  auto r = anonymous->call("create_session", sref_params("app", "b"));
  CHECK(r.answered);
  CHECK(r.value.code() == errc::unauthenticated);
  CHECK(r.error_object["code"] == -32001);
}

TEST_CASE("client: a watch receives the changes another client makes; unwatch ends it "
          "(watch_ended before the reply); closing the client ends a live watch with lost once") {
  fixture f;
  server_process srv({"--memory", "--listen", "0"}, f.path("log"));
  auto addr = tcp_address(srv);
  std::mutex mtx;
  std::vector<std::string> seen; // "change:KIND", "ended:REASON", "lost", "reply"
  counter changes;
  counter replied;
  counter lost;
  int lost_events = 0;
  auto watcher = connect_to(addr);
  auto writer = connect_to(addr);

  auto w = watcher->watch(json{{"scope", "app"}, {"app_name", "app"}, {"include_sessions", true}},
                          [&](const watch_event& ev) {
                            std::lock_guard<std::mutex> g(mtx);
                            if (ev.what == watch_event::kind::changes) {
                              for (const auto& ch : ev.params["changes"]) {
                                seen.push_back("change:" + ch["kind"].get<std::string>());
                                changes.add();
                              }
                            } else if (ev.what == watch_event::kind::ended) {
                              seen.push_back("ended:" + ev.params["reason"].get<std::string>());
                            } else {
                              seen.push_back("lost");
                            }
                          });
  REQUIRE(w.value.ok());
  std::string watch_id = (*w.value)["watch_id"];

  REQUIRE(writer->call("create_session", sref_params("app", "w")).value.ok());
  for (int i = 0; i < 3; ++i)
    REQUIRE(writer->call("append_event", event_params("w", i)).value.ok());
  REQUIRE(changes.wait(4));

  watcher->unwatch_async(watch_id, [&](rpc_reply r) {
    std::lock_guard<std::mutex> g(mtx);
    seen.push_back(r.value.ok() && r.value->contains("resume_from") ? "reply" : "bad reply");
    replied.add();
  });
  REQUIRE(replied.wait(1));
  {
    std::lock_guard<std::mutex> g(mtx);
    CHECK(seen
          == std::vector<std::string>{"change:create", "change:append", "change:append",
                                      "change:append", "ended:cancelled", "reply"});
  }

  // A second watch, still live when the client closes: `lost`, once.
  auto w2 = watcher->watch(json{{"scope", "all"}}, [&](const watch_event& ev) {
    if (ev.what == watch_event::kind::lost) {
      ++lost_events;
      CHECK(ev.why.code == errc::unavailable);
      lost.add();
    }
  });
  REQUIRE(w2.value.ok());
  watcher->close();
  REQUIRE(lost.wait(1));
  CHECK(!watcher->connected());
  auto after = watcher->call("ping", nullptr);
  CHECK(!after.answered);
  CHECK(after.value.code() == errc::unavailable);
  watcher.reset(); // joins the I/O thread: no event can follow
  CHECK(lost_events == 1);
}

TEST_CASE("client: serve killed (kill -9) with calls in flight ends every one with unavailable "
          "exactly once, and the watch with lost") {
  fixture f;
  server_process srv({"--memory", "--listen", "0"}, f.path("log"));
  constexpr int n = 300;
  std::vector<int> times(n, 0);
  std::vector<errc> codes(n, errc::ok);
  std::vector<bool> answered(n, true);
  counter done;
  counter lost;
  auto c = connect_to(tcp_address(srv));
  REQUIRE(c->call("create_session", sref_params("app", "k")).value.ok());
  auto w = c->watch(json{{"scope", "all"}}, [&](const watch_event& ev) {
    if (ev.what == watch_event::kind::lost)
      lost.add();
  });
  REQUIRE(w.value.ok());

  {
    paused stop(srv); // nothing is answered from here on
    for (int i = 0; i < n; ++i)
      c->call_async("append_event", event_params("k", i), [&, i](rpc_reply r) {
        auto k = static_cast<std::size_t>(i);
        ++times[k];
        codes[k] = r.value.code();
        answered[k] = r.answered;
        done.add();
      });
    CHECK(c->outstanding() == n);
    srv.signal(SIGKILL);
    REQUIRE(done.wait(n));
    REQUIRE(lost.wait(1));
  }
  CHECK(!c->connected());
  c.reset(); // joins the I/O thread: nothing can complete after this
  for (std::size_t i = 0; i < n; ++i) {
    CHECK(times[i] == 1);
    CHECK(codes[i] == errc::unavailable);
    CHECK(!answered[i]);
  }
  CHECK(lost.value() == 1);
}

TEST_CASE("client: a deadline ends an unanswered call with unavailable; its late answer is "
          "dropped and the connection goes on") {
  fixture f;
  server_process srv({"--memory", "--listen", "0"}, f.path("log"));
  std::vector<int> times(4, 0);
  std::vector<errc> codes(4, errc::ok);
  counter done;
  auto c = connect_to(tcp_address(srv));
  {
    paused stop(srv);
    const int deadlines_ms[] = {300, 100, 200, 0};
    for (std::size_t i = 0; i < 4; ++i)
      c->call_async(
        "ping", nullptr,
        [&, i](rpc_reply r) {
          ++times[i];
          codes[i] = r.answered ? errc::ok : r.value.code();
          done.add();
        },
        std::chrono::milliseconds(deadlines_ms[i]));
    REQUIRE(done.wait(3));
    CHECK(c->connected());
  }
  REQUIRE(done.wait(4)); // the call without a deadline is answered
  // A call after the late answers: they reached the client before its reply.
  CHECK(c->call("ping", nullptr).value.ok());
  CHECK(times == std::vector<int>{1, 1, 1, 1});
  CHECK(codes
        == std::vector<errc>{errc::unavailable, errc::unavailable, errc::unavailable, errc::ok});
}

TEST_CASE("client: a response line over max_line_bytes fails its call with too_large and the "
          "connection goes on; a notification over it ends the connection") {
  fixture f;
  server_process srv({"--memory", "--listen", "0"}, f.path("log"));
  auto addr = tcp_address(srv);
  client_options o;
  o.max_line_bytes = 4096;
  counter lost;
  std::string why;
  auto c = connect_to(addr, o);
  auto big = sref_params("app", "big");
  big["state"] = json{{"text", std::string(20000, 'x')}};
  auto r = c->call("create_session", big);
  CHECK(!r.answered);
  CHECK(r.value.code() == errc::too_large);
  CHECK(c->connected());
  auto ping = c->call("ping", nullptr);
  REQUIRE(ping.value.ok());
  CHECK(*ping.value == "pong");

  // The watch's notification of a change over the limit: the connection ends.
  auto w = c->watch(json{{"scope", "app"}, {"app_name", "app"}, {"include_sessions", true}},
                    [&](const watch_event& ev) {
                      if (ev.what == watch_event::kind::lost) {
                        why = ev.why.message;
                        lost.add();
                      }
                    });
  REQUIRE(w.value.ok());
  auto writer = connect_to(addr);
  auto big2 = sref_params("app", "big2");
  big2["state"] = json{{"text", std::string(20000, 'y')}};
  REQUIRE(writer->call("create_session", big2).value.ok());
  REQUIRE(lost.wait(1));
  CHECK(why.find("max_line_bytes") != std::string::npos);
  CHECK(!c->connected());
}

TEST_CASE("client: the send queue cap refuses a call at once (unavailable) instead of growing; "
          "a line longer than the cap is too_large; queued calls complete once the server reads") {
  fixture f;
  server_process srv({"--memory", "--listen", "0"}, f.path("log"));
  client_options o;
  o.max_send_queue_bytes = 256 * 1024;
  counter answered;
  std::size_t accepted = 0;
  bool refused = false;
  std::string why;
  auto c = connect_to(tcp_address(srv), o);

  auto huge = c->call("ping", json{{"pad", std::string(300 * 1024, 'p')}});
  CHECK(!huge.answered);
  CHECK(huge.value.code() == errc::too_large);

  const json pad{{"pad", std::string(8 * 1024, 'q')}};
  {
    paused stop(srv);
    // The kernel's socket buffers take some megabytes first; 20,000 calls of
    // 8 KiB pass any of them.
    for (int i = 0; i < 20000 && !refused; ++i) {
      const auto me = std::this_thread::get_id();
      c->call_async("ping", pad, [&, me](rpc_reply r) {
        if (!r.answered && std::this_thread::get_id() == me) {
          refused = true;
          why = r.value.err().message;
          CHECK(r.value.code() == errc::unavailable);
          return;
        }
        if (r.answered && r.value.ok())
          answered.add();
      });
      if (!refused)
        ++accepted;
      CHECK(c->queued_bytes() <= o.max_send_queue_bytes);
    }
    REQUIRE(refused);
    CHECK(why.find("send queue full") != std::string::npos);
  }
  REQUIRE(answered.wait(accepted, 120s));
  // The last write's completion runs on the client's I/O thread, which may
  // read the answers to its requests first: the queue empties just after.
  CHECK(test::eventually([&] { return c->queued_bytes() == 0; }));
  CHECK(c->call("ping", pad).value.ok());
}
