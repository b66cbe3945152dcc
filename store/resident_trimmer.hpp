// SPDX-License-Identifier: Apache-2.0
// store/resident_trimmer.hpp: the thread behind resident_bound (kv.hpp),
// which keeps an LMDB store's pages mapped into the process under a bound.
// Internal to store/.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include <lmdb.h>

#include "store/kv.hpp"

namespace agentstate::store::lmdb_detail {

/// Resident file-backed pages of this process (RssFile + RssShmem, the
/// "shared" column of /proc/self/statm), in bytes; 0 when unreadable.
std::uint64_t file_resident_bytes();

/// After construction it makes no LMDB call and shares no lock with readers
/// or the writer: it reads /proc/self/statm and where the data file's data
/// ends, and calls madvise. Stopped (joined) by its destructor.
class resident_trimmer {
public:
  /// Throws kv_failure (no descriptor) or std::system_error (no thread).
  resident_trimmer(MDB_env* env, resident_bound bound);
  ~resident_trimmer();
  resident_trimmer(const resident_trimmer&) = delete;
  resident_trimmer& operator=(const resident_trimmer&) = delete;

  /// How many times the store's pages were dropped.
  std::uint64_t trims() const { return trims_.load(std::memory_order_relaxed); }
  /// How many checks the thread has made: wake-ups (a period's end, or early
  /// through touched()) at which it read the process's resident bytes and
  /// trimmed if they were over the bound. Counted as a check ends, after its
  /// trim is in trims() (release/acquire): the check under way when this is
  /// read may have begun before the read.
  std::uint64_t checks() const { return checks_.load(std::memory_order_acquire); }
  /// Called per transaction begun: every `check_every` of them wake the
  /// thread early, so a burst of reads (each maps a handful of pages, tens
  /// of KiB) cannot run far past the bound before the next check. A wake-up
  /// lost to the race with the thread's wait only delays the check to the
  /// end of the period. Thread-safe, lock-free.
  void touched() {
    if (ops_.fetch_add(1, std::memory_order_relaxed) % check_every == check_every - 1)
      cv_.notify_one();
  }

private:
  void find_map();
  std::uint64_t data_end() const;
  void run();
  bool drop_pages() const;

  resident_bound bound_;
  void* map_ = nullptr;
  std::uint64_t map_size_ = 0;
  int fd_ = -1; ///< LMDB's: fstat only, never lseek
  int own_fd_ = -1; ///< the same file, opened again for lseek
  std::uint64_t baseline_ = 0;
  std::atomic<std::uint64_t> trims_{0};
  std::atomic<std::uint64_t> checks_{0};
  static constexpr std::uint64_t check_every = 64;
  std::atomic<std::uint64_t> ops_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

} // namespace agentstate::store::lmdb_detail
