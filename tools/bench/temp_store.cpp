// SPDX-License-Identifier: Apache-2.0
// tools/bench/temp_store.cpp: temp_store and the interrupt handler that
// removes it.
#include "tools/bench/temp_store.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <vector>

namespace agentstate::tools::bench {

namespace {

// The store directory of the running workload, for the signal handler. The
// handler only calls async-signal-safe functions on these precomputed paths.
constexpr std::size_t max_path = 4096;
char interrupted_files[4][max_path]; // data.mdb, lock.mdb, agentstate.lock, the dir
volatile std::sig_atomic_t have_store = 0;

extern "C" void on_interrupt(int sig) {
  if (have_store) {
    for (int i = 0; i < 3; ++i)
      ::unlink(interrupted_files[i]);
    ::rmdir(interrupted_files[3]);
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void set_interrupt_store(const std::string& dir) {
  have_store = 0;
  if (dir.empty() || dir.size() + 32 > max_path)
    return;
  const char* names[3] = {"/data.mdb", "/lock.mdb", "/agentstate.lock"};
  for (int i = 0; i < 3; ++i)
    std::snprintf(interrupted_files[i], max_path, "%s%s", dir.c_str(), names[i]);
  std::snprintf(interrupted_files[3], max_path, "%s", dir.c_str());
  have_store = 1;
}

} // namespace

std::string make_temp_dir(const std::string& prefix) {
  std::string tmpl = prefix + "XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr)
    return std::string();
  return buf.data();
}

void install_interrupt_handler() {
  std::signal(SIGINT, on_interrupt);
  std::signal(SIGTERM, on_interrupt);
}

temp_store::temp_store(const std::string& base)
  : path_(make_temp_dir(base + "/agentstate-bench-")) {
  set_interrupt_store(path_);
}

temp_store::~temp_store() {
  have_store = 0;
  if (!path_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
}

double temp_store::size_mb() const {
  struct stat st;
  if (::stat((path_ + "/data.mdb").c_str(), &st) != 0)
    return 0.0;
  auto used = std::min<std::uint64_t>(static_cast<std::uint64_t>(st.st_size),
                                      static_cast<std::uint64_t>(st.st_blocks) * 512);
  return static_cast<double>(used) / (1024.0 * 1024.0);
}

} // namespace agentstate::tools::bench
