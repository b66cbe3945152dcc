// SPDX-License-Identifier: Apache-2.0
// store/file_check.hpp: what a store directory holds, checked before LMDB
// maps it. LMDB trusts its data file: a file shorter than its meta pages
// claim faults (SIGBUS) on the first read past the end. These checks read the
// file with pread, never through a map, so they cannot fault. Internal to
// store/ and the tools.
#pragma once

#include <cstdint>
#include <string>

#include "agentstate/error.hpp"

namespace agentstate::store {

/// The data file's state, as found.
enum class data_file_state {
  missing, ///< no DIR/data.mdb
  empty, ///< DIR/data.mdb of 0 bytes (LMDB would initialise it)
  present, ///< DIR/data.mdb whose meta pages and size agree (check_data_file)
};

/// What the newest valid meta page of a data file claims.
struct data_file_meta {
  std::uint32_t page_size = 0;
  std::uint64_t last_page = 0; ///< the highest page number in use
  std::uint64_t txn_id = 0;
  std::uint64_t file_bytes = 0;
  std::uint64_t map_bytes = 0; ///< the map size the file was last opened with
};

/// Reads DIR/data.mdb's two meta pages (LMDB 0.9 data format 1) and checks,
/// for each: the meta flag, magic and version; a page size that is a power of
/// two in 512..65536 and the same in both; and for the newer one (the one
/// LMDB uses): that the file holds every page it claims (size >= (last page
/// + 1) * page size) and that both database roots lie within them.
/// missing/empty as found; data_corrupt naming the path and the claim the
/// file breaks; io_error when the file cannot be read. Cost: two preads and
/// two fstats; damage is confirmed by two more reads 10 ms apart. Safe beside
/// a running engine: the size is taken after the meta page is read (a writer
/// grows the file before it commits a meta page that claims the new pages),
/// and a meta page torn by a concurrent rewrite reads whole on a retry.
/// `allow_short` (salvage): a file shorter than its pages passes as present.
result<data_file_state> check_data_file(const std::string& dir, data_file_meta* meta = nullptr,
                                        bool allow_short = false);

/// Whether engine::open may start an empty store (options::create_policy).
enum class create_rule { if_new, always, never };

/// The file that marks a store being made: DIR/agentstate.creating, written
/// durably before any other file of a new store and removed, durably, once
/// the store's first commit is. A directory that holds it never held a store
/// that acknowledged anything: what else is there (agentstate.lock, a
/// lock.mdb, a data.mdb empty or torn) was left by a creation that was cut
/// off (a kill, a crash, a power loss), and is made again.
inline constexpr const char* creating_file = "agentstate.creating";

/// An exclusive flock of the directory itself, held until destroyed (or
/// moved from). engine::open holds it while it decides how to open the store
/// in DIR, marks a new one and takes the store's lock, and while it removes
/// creating_file: so no process marks a store that another has just
/// finished making. Blocking; held for a few file operations.
class dir_flock {
public:
  /// Errors: io_error (DIR cannot be opened or locked).
  static result<dir_flock> take(const std::string& dir);
  dir_flock(dir_flock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  dir_flock& operator=(dir_flock&&) = delete;
  dir_flock(const dir_flock&) = delete;
  ~dir_flock();

private:
  explicit dir_flock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

/// Whether DIR holds creating_file.
bool creating(const std::string& dir);
/// Makes DIR/creating_file and syncs it and DIR. Errors: io_error.
result<void> mark_creating(const std::string& dir);
/// Removes DIR/lock.mdb and DIR/data.mdb, left by a creation cut off.
/// REQUIRES: creating(dir), and the store's lock (store_lock) held. Errors:
/// io_error.
result<void> discard_cut_creation(const std::string& dir);
/// Removes DIR/creating_file and syncs DIR. Errors: io_error.
result<void> unmark_creating(const std::string& dir);

/// Decides whether DIR may be opened for writing under `rule`, before the
/// store's lock is taken: ok when DIR/data.mdb checks out (check_data_file),
/// when no store is there and `rule` allows a new one, or when DIR holds
/// creating_file (a creation in progress or cut off; rule never: not_found).
/// A directory that holds agentstate.lock or lock.mdb but no (or an empty)
/// data.mdb, and no creating_file, held a store whose data is gone:
/// data_corrupt naming the path unless `rule` is always. A directory with no
/// store file and rule never: not_found.
result<void> check_store_dir(const std::string& dir, create_rule rule);

} // namespace agentstate::store
