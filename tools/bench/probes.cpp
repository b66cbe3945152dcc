// SPDX-License-Identifier: Apache-2.0
// tools/bench/probes.cpp: the flush and LMDB commit probes of probes.hpp.
#include "tools/bench/probes.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <vector>

#include "store/commit.hpp"
#include "store/keys.hpp"
#include "store/open.hpp"
#include "tools/bench/measures.hpp"
#include "tools/bench/temp_store.hpp"

namespace agentstate::tools::bench {

flush_probe probe_flush(const std::string& dir) {
  flush_probe out;
  std::string path = dir + "/agentstate-bench-fsync-probe";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    return out;
  int dfd = ::open(path.c_str(), O_RDWR | O_DSYNC | O_CLOEXEC);
  std::vector<double> a, b;
  char block[8192];
  std::memset(block, 'x', sizeof(block));
  bool ok = ::pwrite(fd, block, sizeof(block), 0) == static_cast<ssize_t>(sizeof(block))
    && ::fdatasync(fd) == 0 && dfd >= 0;
  for (int i = 0; ok && i < 50; ++i) {
    auto t0 = steady::now();
    ok = ::pwrite(fd, block, 4096, 4096) == 4096 && ::fdatasync(fd) == 0;
    auto t1 = steady::now();
    ok = ok && ::pwrite(dfd, block, 120, 32) == 120;
    auto t2 = steady::now();
    a.push_back(us_between(t0, t1));
    b.push_back(us_between(t1, t2));
  }
  if (dfd >= 0)
    ::close(dfd);
  ::close(fd);
  ::unlink(path.c_str());
  if (!ok || a.empty())
    return out;
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  out.fdatasync_us = a[a.size() / 2];
  out.dsync_write_us = b[b.size() / 2];
  return out;
}

double probe_lmdb_commits(const std::string& dir) {
  std::string path = make_temp_dir(dir + "/agentstate-bench-commit-probe-");
  if (path.empty())
    return -1;
  double rate = -1;
  if (auto kv = store::open_lmdb(path, true, std::uint64_t{64} << 20)) {
    const std::string value(200, 'v');
    constexpr int n = 300;
    auto t0 = steady::now();
    bool ok = true;
    for (int i = 0; i < n && ok; ++i) {
      std::string key = "k";
      store::append_be64(key, static_cast<std::uint64_t>(i));
      ok = store::commit_one(**kv, store::table::events, key, value).ok();
    }
    if (ok)
      rate = n / since(t0);
  }
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  return rate;
}

} // namespace agentstate::tools::bench
