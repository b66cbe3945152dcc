// SPDX-License-Identifier: Apache-2.0
// tools/bench/serve_client.cpp: serve_child and self_binary of
// serve_client.hpp.
#include "tools/bench/serve_client.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

extern char** environ;

namespace agentstate::tools::bench {

struct serve_child::err_buffer {
  mutable std::mutex mtx;
  std::condition_variable cv;
  std::string text;
  bool closed = false;
};

std::unique_ptr<serve_child> serve_child::start(const std::string& bin,
                                                const std::vector<std::string>& args, bool tcp,
                                                std::string& why) {
  ::signal(SIGPIPE, SIG_IGN);
  int in[2], out[2], err[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
    why = std::string("pipe: ") + std::strerror(errno);
    return nullptr;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  std::vector<std::string> argv_s{bin, "serve"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  std::unique_ptr<serve_child> c(new serve_child());
  int rc = ::posix_spawn(&c->pid_, bin.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  c->in_ = in[1];
  c->out_ = out[0];
  c->err_ = err[0];
  c->tcp_ = tcp;
  c->err_buf_ = std::make_shared<err_buffer>();
  if (rc != 0) {
    c->pid_ = -1;
    why = "cannot start " + bin + ": " + std::strerror(rc);
    return nullptr;
  }
  c->err_thread_ = std::thread([p = c.get()] { p->read_stderr(); });
  if (!tcp)
    return c;
  // The listener prints its bound address once it listens.
  const std::string marker = "listening on ";
  auto& b = *c->err_buf_;
  std::unique_lock<std::mutex> lock(b.mtx);
  bool found = b.cv.wait_for(lock, std::chrono::seconds(10), [&] {
    auto at = b.text.find(marker);
    return b.closed || (at != std::string::npos && b.text.find('\n', at) != std::string::npos);
  });
  auto at = b.text.find(marker);
  if (!found || at == std::string::npos) {
    why = "serve did not print 'listening on HOST:PORT'; stderr: " + b.text;
    return nullptr;
  }
  // The address ends the line's message: at a space, a quote or the line's
  // end ("listening on 127.0.0.1:41234" address=... in the text log form).
  auto from = at + marker.size();
  c->address_ = b.text.substr(from, b.text.find_first_of(" \"\n", from) - from);
  return c;
}

void serve_child::read_stderr() {
  char buf[4096];
  for (;;) {
    auto n = ::read(err_, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    std::lock_guard<std::mutex> guard(err_buf_->mtx);
    if (n <= 0) {
      err_buf_->closed = true;
      err_buf_->cv.notify_all();
      return;
    }
    err_buf_->text.append(buf, static_cast<std::size_t>(n));
    err_buf_->cv.notify_all();
  }
}

serve_child::~serve_child() {
  if (in_ >= 0)
    ::close(in_);
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  if (err_thread_.joinable())
    err_thread_.join();
  for (int fd : {out_, err_})
    if (fd >= 0)
      ::close(fd);
}

double serve_child::cpu_seconds() const {
  if (pid_ <= 0)
    return -1;
  std::ifstream in("/proc/" + std::to_string(pid_) + "/stat");
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Fields after the command name (which may hold spaces) start after ')'.
  auto close = all.rfind(')');
  if (close == std::string::npos)
    return -1;
  std::istringstream rest(all.substr(close + 2));
  std::string field;
  double utime = -1, stime = -1;
  for (int i = 3; rest >> field; ++i) { // field 3 is the state
    if (i == 14)
      utime = std::strtod(field.c_str(), nullptr);
    if (i == 15) {
      stime = std::strtod(field.c_str(), nullptr);
      break;
    }
  }
  if (utime < 0 || stime < 0)
    return -1;
  return (utime + stime) / double(::sysconf(_SC_CLK_TCK));
}

int serve_child::stop() {
  if (in_ >= 0) {
    ::close(in_);
    in_ = -1;
  }
  if (pid_ <= 0)
    return -1;
  if (tcp_)
    ::kill(pid_, SIGTERM);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  int status = 0;
  for (;;) {
    auto r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_)
      break;
    if (r < 0 && errno != EINTR) {
      pid_ = -1;
      return -1;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string serve_child::stderr_text() const {
  std::lock_guard<std::mutex> guard(err_buf_->mtx);
  return err_buf_->text;
}

std::string self_binary() {
  char buf[4096];
  auto n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "/proc/self/exe";
}

} // namespace agentstate::tools::bench
