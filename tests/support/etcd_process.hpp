// SPDX-License-Identifier: Apache-2.0
// tests/support/etcd_process.hpp: a real etcd (Debian etcd-server) as a child
// process of a test: one member on loopback ports nobody holds, a data
// directory of its own, stopped by its PID (SIGKILL) and reaped when the
// object goes; pause() and resume() freeze and thaw it (SIGSTOP/SIGCONT) to
// make it unreachable without losing its data. Test-only.
#pragma once

#include "support/test_support.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "cluster/etcd.hpp"

extern char** environ;

namespace agentstate::test {

/// A loopback TCP port free at the moment of the call (the kernel's pick for
/// port 0). Another process may take it before it is used: etcd_process
/// retries its start on other ports when etcd cannot bind.
inline int free_loopback_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

class etcd_process {
public:
  /// Starts etcd and waits (bounded: 20 s) until it answers a read.
  etcd_process() {
    for (int attempt = 0; attempt < 3; ++attempt) {
      if (try_start())
        return;
      stop();
    }
    FAIL("etcd did not start: " << log());
  }

  ~etcd_process() { stop(); }
  etcd_process(const etcd_process&) = delete;
  etcd_process& operator=(const etcd_process&) = delete;

  /// "http://127.0.0.1:PORT", the client URL.
  const std::string& url() const { return url_; }
  pid_t pid() const { return pid_; }

  void pause() { REQUIRE(::kill(pid_, SIGSTOP) == 0); }
  void resume() { REQUIRE(::kill(pid_, SIGCONT) == 0); }

  /// What etcd wrote to stderr and stdout.
  std::string log() const {
    std::ifstream in(dir_.path() / "etcd.log");
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

  void stop() {
    if (pid_ > 0) {
      ::kill(pid_, SIGCONT);
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }

private:
  bool try_start() {
    int client = free_loopback_port();
    int peer = free_loopback_port();
    url_ = "http://127.0.0.1:" + std::to_string(client);
    std::string peer_url = "http://127.0.0.1:" + std::to_string(peer);
    std::string data = (dir_.path() / ("data" + std::to_string(client))).string();
    std::vector<std::string> args{"etcd",
                                  "--name",
                                  "t",
                                  "--data-dir",
                                  data,
                                  "--listen-client-urls",
                                  url_,
                                  "--advertise-client-urls",
                                  url_,
                                  "--listen-peer-urls",
                                  peer_url,
                                  "--initial-advertise-peer-urls",
                                  peer_url,
                                  "--initial-cluster",
                                  "t=" + peer_url,
                                  "--log-level",
                                  "warn"};
    std::string log_path = (dir_.path() / "etcd.log").string();
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    std::vector<char*> argv;
    for (auto& a : args)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    int rc = ::posix_spawnp(&pid_, "etcd", &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    REQUIRE_MESSAGE(rc == 0, "cannot start etcd (tools/setup.sh --all installs etcd-server)");
    auto client_cfg = cluster::etcd_client::config{{url_}, std::chrono::milliseconds(500)};
    auto c = cluster::etcd_client::make(client_cfg);
    REQUIRE(c.ok());
    // A bounded poll of a child process's start (etcd has no readiness pipe).
    bool exited = false;
    const bool answered = eventually(
      [&] {
        if ((*c)->range("/").ok())
          return true;
        int status = 0;
        exited = ::waitpid(pid_, &status, WNOHANG) == pid_;
        return exited;
      },
      std::chrono::seconds(20), std::chrono::milliseconds(50));
    if (exited)
      pid_ = -1; // exited: a port was taken meanwhile
    return answered && !exited;
  }

  temp_dir dir_;
  std::string url_;
  pid_t pid_ = -1;
};

} // namespace agentstate::test
