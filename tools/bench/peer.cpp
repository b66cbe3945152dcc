// SPDX-License-Identifier: Apache-2.0
// tools/bench/peer.cpp: runs a peer script (peer.hpp) as a child process and
// reads its JSON line.
#include "tools/bench/peer.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

extern char** environ;

namespace agentstate::tools::bench {

namespace {

ojson failure(const std::string& why, const std::string& output) {
  ojson e;
  e["error"] = why;
  e["output"] = output.size() > 300 ? output.substr(output.size() - 300) : output;
  return e;
}

// The last line of `text` that parses as a JSON object, or null.
ojson last_object(const std::string& text) {
  std::size_t end = text.size();
  while (end > 0) {
    std::size_t start = text.rfind('\n', end - 1);
    start = start == std::string::npos ? 0 : start + 1;
    auto line = text.substr(start, end - start);
    if (!line.empty() && line.front() == '{') {
      auto j = ojson::parse(line, nullptr, false);
      if (!j.is_discarded() && j.is_object())
        return j;
    }
    end = start == 0 ? 0 : start - 1;
  }
  return nullptr;
}

} // namespace

ojson run_peer(const std::string& script, char workload, double scale, int timeout_s) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0)
    return failure(std::string("pipe: ") + std::strerror(errno), "");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, out[1], 2);
  char scale_text[32];
  std::snprintf(scale_text, sizeof(scale_text), "%g", scale);
  std::vector<std::string> args{"node",    script,    "--workload", std::string(1, workload),
                                "--scale", scale_text};
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  int rc = ::posix_spawnp(&pid, "node", &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(out[1]);
  if (rc != 0) {
    ::close(out[0]);
    return failure(std::string("cannot start node: ") + std::strerror(rc), "");
  }
  std::string output;
  bool timed_out = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                  deadline - std::chrono::steady_clock::now())
                  .count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{out[0], POLLIN, 0};
    int n = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (n < 0 && errno != EINTR)
      break;
    if (n <= 0)
      continue;
    char buf[4096];
    ssize_t got = ::read(out[0], buf, sizeof(buf));
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0)
      break; // end of output: the script has exited (or closed its stdout)
    output.append(buf, static_cast<std::size_t>(got));
    if (output.size() > (1u << 20)) // keep the tail: the result is the last line
      output.erase(0, output.size() - (1u << 19));
  }
  ::close(out[0]);
  if (timed_out)
    ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out)
    return failure("the peer ran longer than " + std::to_string(timeout_s) + " s and was killed",
                   output);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string how = WIFEXITED(status)
      ? "exited with " + std::to_string(WEXITSTATUS(status))
      : "was killed by signal " + std::to_string(WTERMSIG(status));
    return failure("node " + script + " " + how, output);
  }
  auto j = last_object(output);
  if (j.is_null())
    return failure("node " + script + " printed no JSON object", output);
  return j;
}

void attach_peer(ojson& line, ojson peer) {
  auto positive = [](const ojson& j) {
    return j.is_object() && j.contains("events_per_s") && j["events_per_s"].is_number()
      && j["events_per_s"].get<double>() > 0;
  };
  if (positive(line) && positive(peer))
    line["ratio_to_peer"] = line["events_per_s"].get<double>() / peer["events_per_s"].get<double>();
  line["peer"] = std::move(peer);
}

} // namespace agentstate::tools::bench
