// SPDX-License-Identifier: Apache-2.0
// test-tiers: tsan
// `agentstate serve --listen` (#44): requests were parsed on the network
// thread, so one client's long request line held up every other connection
// of its I/O thread for as long as it took to parse (a 15 MiB nested line:
// 789 ms). A long line is now decoded on the server's decoding threads;
// its connection reads and hands in nothing more until it is handed in, so
// its requests keep their order. A real `serve` child over TCP loopback.
#include "server/net_support.hpp"

#include <netinet/in.h>

using namespace agentstate;
using namespace agentstate::test;
using namespace agentstate::test::net;

namespace {

/// The local port of a connected socket.
int local_port(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  return ntohs(a.sin_port);
}

/// The bytes of the loopback TCP connection between ports `p` and `q` that
/// a process has not yet taken: the send and receive queues of both its
/// sockets, from /proc/net/tcp. -1 when neither socket is listed.
long long queued_bytes(int p, int q) {
  std::ifstream in("/proc/net/tcp");
  std::string line;
  std::getline(in, line); // the header
  long long total = -1;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state, queues;
    fields >> slot >> local >> remote >> state >> queues;
    auto port_of = [](const std::string& addr) {
      auto colon = addr.find(':');
      return colon == std::string::npos ? -1 : std::stoi(addr.substr(colon + 1), nullptr, 16);
    };
    const int lp = port_of(local), rp = port_of(remote);
    if (!((lp == p && rp == q) || (lp == q && rp == p)))
      continue;
    auto colon = queues.find(':');
    if (colon == std::string::npos)
      continue;
    total = std::max<long long>(total, 0) + std::stoll(queues.substr(0, colon), nullptr, 16)
      + std::stoll(queues.substr(colon + 1), nullptr, 16);
  }
  return total;
}

/// Waits until the server has read every byte `c` sent it.
void wait_all_read(const raw_socket& c, int server_port) {
  const int mine = local_port(c.fd());
  long long left = -1;
  INFO("bytes of the connection not yet read: ", left);
  // The kernel's socket queues have nothing to wait on: polled every 1 ms.
  REQUIRE(eventually(
    [&] {
      left = queued_bytes(mine, server_port);
      REQUIRE(left >= 0);
      return left == 0;
    },
    30s, 1ms));
}

/// A request line of about `bytes` bytes that takes long to parse: arrays
/// nested 48 deep, over and over (within the server's depth limit, so the
/// parser reads all of it), and no closing brace at the very end, so the
/// line is found invalid only there.
std::string long_invalid_line(std::size_t bytes) {
  const std::string unit = std::string(48, '[') + "0" + std::string(48, ']') + ",";
  std::string line = R"({"jsonrpc":"2.0","id":"long","method":"ping","params":{"v":[)";
  line.reserve(bytes + unit.size() + 16);
  while (line.size() < bytes)
    line += unit;
  line += "0]}"; // the request object is never closed
  return line;
}

} // namespace

TEST_CASE("regression: requests were parsed on the network thread, so a long line held up the "
          "other clients of its I/O thread; another connection's ping is now answered while it "
          "is parsed (#44)") {
  temp_dir tmp;
  server_process srv({"--memory", "--listen", "0", "--io-threads", "1"}, tmp.str() + "/serve.log");
  const int port = srv.port();
  srv.wait_serving();
  raw_socket a(port); // raw: an invalid line of 3 MiB
  client b(port);
  REQUIRE(a.connected());
  REQUIRE(b.connected());
  // Both accepted, on the one I/O thread.
  REQUIRE(ok(a.call("ping")));
  REQUIRE(ok(b.call("ping")));

  REQUIRE(a.send(long_invalid_line(std::size_t{3} << 20) + "\n"));
  // Every byte of the line is in the server: parsing it is what remains.
  wait_all_read(a, port);
  REQUIRE(b.send_line(rpc("b", "ping")));
  auto pong = b.next(120s);
  INFO("b's answer: ", pong ? pong->dump() : "none");
  REQUIRE(ok(pong));
  CHECK((*pong)["id"] == "b");
  // a's answer had not been written when b's arrived: a line is answered at
  // once when its parse fails, so a's parse was still under way.
  pollfd p{a.fd(), POLLIN, 0};
  CHECK(::poll(&p, 1, 0) == 0);

  auto answer = a.next(120s);
  REQUIRE(answer);
  INFO("a's answer: ", answer->dump());
  CHECK((*answer)["id"].is_null());
  CHECK((*answer)["error"]["code"] == -32700);
  CHECK(kind_of(answer) == "invalid_argument");
  // The connection serves on.
  CHECK(ok(a.call("ping")));
  srv.signal(SIGTERM);
  CHECK(srv.wait_exit() == 0);
}

TEST_CASE("regression: a long line parsed off the I/O thread keeps its connection's order: a "
          "pipelined long append and the get_session after it run and answer in order (#44)") {
  temp_dir tmp;
  server_process srv({"--memory", "--listen", "0", "--io-threads", "1"}, tmp.str() + "/serve.log");
  const int port = srv.port();
  srv.wait_serving();
  client c(port);
  REQUIRE(c.connected());
  REQUIRE(ok(c.call("create_session", sref_params("app", "s"))));

  // About 600 KiB of small numbers: far past the size parsed on the I/O
  // thread, within --max-event-bytes.
  json numbers = json::array();
  for (int i = 0; numbers.size() < 120000; ++i)
    numbers.push_back(i % 1000);
  json ev{{"id", "long-event"}, {"author", "a"}, {"content", {{"numbers", numbers}}}};
  auto append = rpc(1, "append_event", with(sref_params("app", "s"), "event", ev));
  REQUIRE(append.dump().size() > (std::size_t{256} << 10));
  auto get = rpc(2, "get_session", sref_params("app", "s"));
  REQUIRE(c.send_line(append));
  REQUIRE(c.send_line(get));

  auto first = c.next(60s);
  REQUIRE(first);
  INFO("first answer: ", first->dump().substr(0, 400));
  CHECK((*first)["id"] == 1);
  REQUIRE(first->contains("result"));
  CHECK((*first)["result"]["version"] == 1);
  auto second = c.next(60s);
  REQUIRE(second);
  INFO("second answer: ", second->dump().substr(0, 400));
  CHECK((*second)["id"] == 2);
  REQUIRE(second->contains("result"));
  const auto& events = (*second)["result"]["events"];
  REQUIRE(events.size() == 1);
  CHECK(events[0]["id"] == "long-event");
  CHECK(events[0]["content"]["numbers"].size() == numbers.size());
  srv.signal(SIGTERM);
  CHECK(srv.wait_exit() == 0);
}

TEST_CASE("serve --listen: a long last line without its newline, parsed off the I/O thread, is "
          "answered before the end of input closes the connection (#44)") {
  temp_dir tmp;
  server_process srv({"--memory", "--listen", "0", "--io-threads", "1"}, tmp.str() + "/serve.log");
  const int port = srv.port();
  srv.wait_serving();
  raw_socket c(port); // raw: a last line without its newline
  REQUIRE(c.connected());
  REQUIRE(ok(c.call("create_session", sref_params("app", "s"))));
  json ev{{"id", "last"}, {"author", "a"}, {"content", {{"text", std::string(300000, 'x')}}}};
  REQUIRE(c.send(rpc(1, "append_event", with(sref_params("app", "s"), "event", ev)).dump()));
  REQUIRE(::shutdown(c.fd(), SHUT_WR) == 0);
  auto r = c.next(60s);
  REQUIRE(r);
  INFO("answer: ", r->dump().substr(0, 400));
  CHECK((*r)["id"] == 1);
  REQUIRE(r->contains("result"));
  CHECK((*r)["result"]["version"] == 1);
  CHECK(c.closed_within(30s));
  client d(port);
  auto s = d.call("get_session", sref_params("app", "s"));
  REQUIRE(ok(s));
  CHECK((*s)["result"]["events"].size() == 1);
  srv.signal(SIGTERM);
  CHECK(srv.wait_exit() == 0);
}
