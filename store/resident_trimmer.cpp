// SPDX-License-Identifier: Apache-2.0
#include "store/resident_trimmer.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "store/lmdb_handle.hpp"

namespace agentstate::store::lmdb_detail {

std::uint64_t file_resident_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f)
    return 0;
  unsigned long long size = 0, resident = 0, shared = 0;
  int n = std::fscanf(f, "%llu %llu %llu", &size, &resident, &shared);
  std::fclose(f);
  return n == 3 ? shared * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE)) : 0;
}

resident_trimmer::resident_trimmer(MDB_env* env, resident_bound bound) : bound_(bound) {
  check("mdb_env_get_fd", ::mdb_env_get_fd(env, &fd_));
  // A descriptor of our own for lseek(SEEK_DATA/SEEK_HOLE): LMDB writes
  // page runs with lseek + writev on its descriptor, so moving that
  // descriptor's offset from this thread would misplace its writes.
  own_fd_ = ::open(("/proc/self/fd/" + std::to_string(fd_)).c_str(), O_RDONLY | O_CLOEXEC);
  find_map();
  baseline_ = file_resident_bytes();
  thread_ = std::thread([this] { run(); });
}

resident_trimmer::~resident_trimmer() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  thread_.join();
  if (own_fd_ >= 0)
    ::close(own_fd_);
}

// LMDB does not publish its map's address (mdb_env_info's me_mapaddr is
// only set with MDB_FIXEDMAP), so find the mapping of the data file, by
// inode, in /proc/self/maps. No mapping found = nothing to trim.
void resident_trimmer::find_map() {
  struct stat st;
  if (::fstat(fd_, &st) != 0)
    return;
  std::FILE* f = std::fopen("/proc/self/maps", "r");
  if (!f)
    return;
  char line[4096];
  while (std::fgets(line, sizeof line, f)) {
    unsigned long long start = 0, end = 0, offset = 0, inode = 0;
    unsigned dev_major = 0, dev_minor = 0;
    char perms[8];
    if (std::sscanf(line, "%llx-%llx %7s %llx %x:%x %llu", &start, &end, perms, &offset, &dev_major,
                    &dev_minor, &inode)
          == 7
        && inode == static_cast<unsigned long long>(st.st_ino) && dev_major == major(st.st_dev)
        && dev_minor == minor(st.st_dev) && offset == 0 && end - start > map_size_) {
      map_ = reinterpret_cast<void*>(static_cast<std::uintptr_t>(start));
      map_size_ = end - start;
    }
  }
  std::fclose(f);
}

// Where the data file's last data ends: the part of the map LMDB's pages
// can occupy. A writable map's file is sparse at the map's size, so its
// size says nothing; the walk over data segments (SEEK_DATA/SEEK_HOLE, on
// our own descriptor) costs one lseek pair per segment, and LMDB's pages
// are contiguous. Without our descriptor: the file's size.
std::uint64_t resident_trimmer::data_end() const {
  if (own_fd_ < 0) {
    struct stat st;
    return ::fstat(fd_, &st) == 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
  }
  off_t end = 0, pos = 0;
  for (;;) {
    off_t data = ::lseek(own_fd_, pos, SEEK_DATA);
    if (data < 0)
      break; // ENXIO: no data at or after pos
    off_t hole = ::lseek(own_fd_, data, SEEK_HOLE);
    if (hole < 0)
      break;
    end = pos = hole;
  }
  return static_cast<std::uint64_t>(end);
}

// Drops the store's pages from the map (madvise MADV_DONTNEED over the part
// its data occupies); false when there is none or a call failed.
bool resident_trimmer::drop_pages() const {
  auto used = std::min(data_end(), map_size_);
  auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  used = (used + page - 1) / page * page;
  // In 8 MiB steps: each madvise holds the map's lock while it unmaps,
  // and a reader faulting meanwhile waits for that step only.
  constexpr std::uint64_t step = std::uint64_t{8} << 20;
  bool ok = used > 0;
  for (std::uint64_t off = 0; ok && off < used; off += step)
    ok = ::madvise(static_cast<char*>(map_) + off, std::min(step, used - off), MADV_DONTNEED) == 0;
  return ok;
}

void resident_trimmer::run() {
  std::unique_lock<std::mutex> g(mu_);
  std::uint64_t seen = 0, last = baseline_;
  auto wait = bound_.period;
  auto due = [&] { return stop_ || ops_.load(std::memory_order_relaxed) - seen >= check_every; };
  for (;;) {
    cv_.wait_for(g, wait, due);
    if (stop_)
      return;
    seen = ops_.load(std::memory_order_relaxed);
    // The measure is process-wide, so it is taken relative to a baseline
    // that follows the other mapped files: the lowest value seen, re-anchored
    // after each trim (when none of the store's pages are mapped). A host
    // that maps a large file after open costs at most one needless trim
    // per bound of its growth, and none once it stops growing.
    auto now = file_resident_bytes();
    if (now == 0) // statm unreadable (e.g. out of descriptors): skip a turn, not a check
      continue;
    baseline_ = baseline_ ? std::min(baseline_, now) : now; // 0 = not read yet
    // Pages mapping fast (a quarter of the bound since the last check:
    // write batches and random reads map 16 pages per fault, the kernel's
    // fault-around) shorten the next wait tenfold, so the overshoot stays
    // a fraction of the bound.
    wait = now > last && now - last > bound_.max_bytes / 4 ? bound_.period / 10 : bound_.period;
    last = now;
    if (map_ && now - baseline_ > bound_.max_bytes && drop_pages()) {
      trims_.fetch_add(1, std::memory_order_relaxed);
      if (auto after = file_resident_bytes())
        baseline_ = last = after;
    }
    checks_.fetch_add(1, std::memory_order_release);
  }
}

} // namespace agentstate::store::lmdb_detail
