// SPDX-License-Identifier: Apache-2.0
// test-name: tools_serve_tcp_test
// test-tiers: tsan
// `agentstate serve --listen`: the real binary on a loopback port, many
// clients at once, stopped with SIGTERM.
#include "support/sanitizers.hpp"
#include "support/test_support.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <regex>

extern char** environ;

namespace {

using namespace agentstate;
using namespace agentstate::test;
using namespace std::chrono_literals;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The tool as a child process with stdin from /dev/null and stderr in a file.
class server_process {
public:
  server_process(std::vector<std::string> args, std::string err_path)
    : err_path_(std::move(err_path)) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    std::vector<std::string> argv_s{AGENTSTATE_BIN, "serve"};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    int rc = ::posix_spawn(&pid_, AGENTSTATE_BIN, &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    REQUIRE(rc == 0);
  }

  ~server_process() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    auto text = read_file(err_path_);
    CHECK_MESSAGE(sanitizer_report(text).empty(), "sanitizer report in the server's log: ", text);
  }

  /// The port from the "listening on 127.0.0.1:PORT" line on stderr.
  int port(std::chrono::milliseconds t = 10s) {
    std::regex re("listening on 127\\.0\\.0\\.1:([0-9]+)");
    auto deadline = std::chrono::steady_clock::now() + t;
    for (;;) {
      std::smatch m;
      auto text = read_file(err_path_);
      if (std::regex_search(text, m, re))
        return std::stoi(m[1]);
      INFO("stderr so far: ", text);
      REQUIRE(std::chrono::steady_clock::now() < deadline);
      std::this_thread::sleep_for(10ms);
    }
  }

  void signal(int sig) { REQUIRE(::kill(pid_, sig) == 0); }

  int wait_exit(std::chrono::milliseconds t = 15s) {
    auto deadline = std::chrono::steady_clock::now() + t;
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) != pid_) {
      REQUIRE(std::chrono::steady_clock::now() < deadline);
      std::this_thread::sleep_for(5ms);
    }
    pid_ = -1;
    REQUIRE(WIFEXITED(status));
    return WEXITSTATUS(status);
  }

private:
  std::string err_path_;
  pid_t pid_ = -1;
};

// A blocking loopback client. No doctest assertions: it runs on worker
// threads; failures come back as empty results.
class client {
public:
  explicit client(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~client() {
    if (fd_ >= 0)
      ::close(fd_);
  }
  bool connected() const { return fd_ >= 0; }

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

  /// The next response line, parsed; nullopt on timeout, EOF or bad JSON.
  std::optional<json> next(std::chrono::milliseconds t = 10s) {
    auto deadline = std::chrono::steady_clock::now() + t;
    for (;;) {
      if (auto nl = buf_.find('\n'); nl != std::string::npos) {
        auto line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        auto r = parse_json(line, 512);
        if (!r)
          return std::nullopt;
        return std::move(*r);
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

private:
  int fd_ = -1;
  std::string buf_;
};

json request(json id, const std::string& method, json params) {
  return json{{"jsonrpc", "2.0"}, {"id", std::move(id)}, {"method", method},
              {"params", std::move(params)}};
}

json session_params(const std::string& session) {
  return json{{"app_name", "tcp"}, {"user_id", "u"}, {"session_id", session}};
}

json append_params(const std::string& session) {
  auto p = session_params(session);
  p["event"] = json{{"author", "client"}};
  return p;
}

// What one client thread saw.
struct client_report {
  bool connected = false;
  int answered = 0;
  std::vector<std::int64_t> own_versions;    // in request order
  std::vector<std::int64_t> shared_versions; // in request order
  std::vector<std::string> problems;
};

} // namespace

TEST_CASE("serve --listen: concurrent clients, per-connection order, SIGTERM exits 0") {
  temp_dir dir;
  auto store = (dir.path() / "store").string();
  server_process srv({"--listen", "127.0.0.1:0", "--store", store, "--durability", "nosync"},
                     (dir.path() / "stderr.txt").string());
  int port = srv.port();
  REQUIRE(port > 0);

  {
    client c(port);
    REQUIRE(c.connected());
    REQUIRE(c.send(request(1, "create_session", session_params("shared")).dump() + "\n"));
    auto r = c.next();
    REQUIRE(r);
    INFO("response: ", r->dump());
    CHECK((*r)["result"]["id"] == "shared");
  }

  const int clients = 6;
  const int per_client = 60;
  std::vector<client_report> reports(clients);
  std::vector<std::thread> threads;
  for (int k = 0; k < clients; ++k) {
    threads.emplace_back([k, port, per_client, &report = reports[k]] {
      client c(port);
      report.connected = c.connected();
      if (!report.connected)
        return;
      auto own = "own-" + std::to_string(k);
      // Everything pipelined in one write: create, then own and shared
      // appends interleaved, then a read of each.
      std::string batch = request("create", "create_session", session_params(own)).dump() + "\n";
      for (int i = 0; i < per_client; ++i) {
        batch += request("own-" + std::to_string(i), "append_event", append_params(own)).dump()
                 + "\n";
        batch += request("shared-" + std::to_string(i), "append_event",
                         append_params("shared"))
                   .dump()
                 + "\n";
      }
      batch += request("get", "get_session", session_params(own)).dump() + "\n";
      if (!c.send(batch)) {
        report.problems.push_back("send failed");
        return;
      }
      std::map<std::string, json> got;
      const int want = 2 + 2 * per_client;
      while (static_cast<int>(got.size()) < want) {
        auto r = c.next();
        if (!r) {
          report.problems.push_back("timed out after " + std::to_string(got.size()));
          return;
        }
        if (!r->contains("result"))
          report.problems.push_back("error response: " + r->dump());
        got[(*r)["id"].get<std::string>()] = *r;
      }
      report.answered = static_cast<int>(got.size());
      for (int i = 0; i < per_client; ++i) {
        report.own_versions.push_back(
          got["own-" + std::to_string(i)]["result"]["version"].get<std::int64_t>());
        report.shared_versions.push_back(
          got["shared-" + std::to_string(i)]["result"]["version"].get<std::int64_t>());
      }
      if (got["get"]["result"]["version"] != per_client)
        report.problems.push_back("own session read: " + got["get"].dump());
    });
  }
  for (auto& t : threads)
    t.join();

  std::vector<std::int64_t> all_shared;
  for (int k = 0; k < clients; ++k) {
    auto& r = reports[k];
    INFO("client ", k);
    REQUIRE(r.connected);
    CHECK(r.problems.empty());
    for (auto& p : r.problems)
      MESSAGE(p);
    CHECK(r.answered == 2 + 2 * per_client);
    for (int i = 0; i < static_cast<int>(r.own_versions.size()); ++i)
      CHECK(r.own_versions[i] == i + 1);
    // This connection's appends to the shared session ran in its order.
    CHECK(std::is_sorted(r.shared_versions.begin(), r.shared_versions.end()));
    all_shared.insert(all_shared.end(), r.shared_versions.begin(), r.shared_versions.end());
  }
  std::sort(all_shared.begin(), all_shared.end());
  std::vector<std::int64_t> want(clients * per_client);
  for (std::size_t i = 0; i < want.size(); ++i)
    want[i] = static_cast<std::int64_t>(i) + 1;
  CHECK(all_shared == want);

  // A connection left open does not keep the server from stopping.
  client idle(port);
  REQUIRE(idle.connected());
  REQUIRE(idle.send(request("s", "stats", json::object()).dump() + "\n"));
  REQUIRE(idle.next());
  srv.signal(SIGTERM);
  CHECK(srv.wait_exit() == 0);
  CHECK(!idle.next(2s)); // closed by the server

  options o;
  o.dir = store;
  auto eng = engine::open(o);
  REQUIRE_OK(eng);
  CHECK(get_existing(**eng, sref("tcp", "u", "shared")).version == clients * per_client);
  for (int k = 0; k < clients; ++k)
    CHECK(get_existing(**eng, sref("tcp", "u", "own-" + std::to_string(k))).version
          == static_cast<std::uint64_t>(per_client));
}

TEST_CASE("serve --listen: a port already in use fails with exit 1") {
  temp_dir dir;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(fd, 1) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  auto port = std::to_string(ntohs(a.sin_port));
  auto err = (dir.path() / "stderr.txt").string();
  server_process srv({"--listen", "127.0.0.1:" + port, "--memory"}, err);
  CHECK(srv.wait_exit() == 1);
  CHECK(read_file(err).find("cannot listen") != std::string::npos);
  ::close(fd);
}

TEST_CASE("serve --listen: a client that never reads its responses does not block SIGTERM") {
  temp_dir dir;
  server_process srv({"--listen", "127.0.0.1:0", "--memory"},
                     (dir.path() / "stderr.txt").string());
  int port = srv.port();
  client c(port);
  REQUIRE(c.connected());
  auto create = session_params("big");
  create["state"] = json{{"blob", std::string(100 * 1024, 'x')}};
  REQUIRE(c.send(request("create", "create_session", create).dump() + "\n"));
  REQUIRE(c.next());
  // About 20 MB of responses, more than the socket buffers hold; none is read.
  std::string batch;
  for (int i = 0; i < 200; ++i)
    batch += request(i, "get_session", session_params("big")).dump() + "\n";
  REQUIRE(c.send(batch));
  std::this_thread::sleep_for(300ms);
  auto start = std::chrono::steady_clock::now();
  srv.signal(SIGTERM);
  CHECK(srv.wait_exit(20s) == 0);
  CHECK(std::chrono::steady_clock::now() - start < 15s);
  CHECK(read_file((dir.path() / "stderr.txt").string()).find("not reading")
        != std::string::npos);
}
