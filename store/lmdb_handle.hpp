// SPDX-License-Identifier: Apache-2.0
// store/lmdb_handle.hpp: the pieces every LMDB file of store/ shares: the
// environment and its databases, error translation (every LMDB failure
// becomes a kv_failure), cursors, and keys as the shared database stores
// them. Internal to store/.
#pragma once

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>

#include <cstdio>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <string>
#include <string_view>

#include <lmdb++.h>

#include "store/kv.hpp"

namespace agentstate::store::lmdb_detail {

[[noreturn]] inline void fail(const char* what, int rc) {
  errc code = errc::io_error;
  switch (rc) {
    case MDB_MAP_FULL:
    case ENOSPC:
    case EDQUOT:
    case EFBIG: code = errc::storage_full; break;
    // LMDB's own findings about the file: a page that is not what its
    // parent or the meta page says (store/file_check.hpp checks the rest
    // before the map is made).
    case MDB_CORRUPTED:
    case MDB_PAGE_NOTFOUND:
    case MDB_INVALID:
    // A tree deeper than LMDB's cursor stack: a branch page pointing back up.
    case MDB_CURSOR_FULL:
    case MDB_VERSION_MISMATCH: code = errc::data_corrupt; break;
    case MDB_READERS_FULL: code = errc::unavailable; break;
    case MDB_BAD_TXN:
    case MDB_BAD_DBI:
    case MDB_BAD_VALSIZE:
    case EINVAL: code = errc::internal; break;
    default: break;
  }
  throw kv_failure{code, std::string(what) + ": " + ::mdb_strerror(rc)};
}

inline void check(const char* what, int rc) {
  if (rc != MDB_SUCCESS)
    fail(what, rc);
}

/// Below this many free bytes on the store's filesystem, a failed write is a
/// full disk. LMDB reports a short write(2) - what a full disk gives when
/// part of a commit's pages fit - as EIO, and a failed fsync of delayed
/// allocation may be EIO too.
constexpr std::uint64_t full_disk_bytes = std::uint64_t{16} << 20;

/// As fail, for a write path (commit, sync) of the store in `dir`: EIO with
/// less than full_disk_bytes free (statvfs, space an unprivileged writer may
/// use) is storage_full, the free space named. Nothing of the failed
/// transaction is stored; the same write succeeds once space frees.
[[noreturn]] inline void fail_write(const char* what, int rc, const std::string& dir) {
  if (rc == EIO && !dir.empty()) {
    struct statvfs fs;
    if (::statvfs(dir.c_str(), &fs) == 0) {
      auto free_bytes = static_cast<std::uint64_t>(fs.f_bavail) * fs.f_frsize;
      if (free_bytes < full_disk_bytes)
        throw kv_failure{errc::storage_full,
                         std::string(what) + ": the disk holding '" + dir + "' is full ("
                           + std::to_string(free_bytes) + " bytes free): " + ::mdb_strerror(rc)};
    }
  }
  fail(what, rc);
}

inline void check_write(const char* what, int rc, const std::string& dir) {
  if (rc != MDB_SUCCESS)
    fail_write(what, rc, dir);
}

inline MDB_val as_val(std::string_view s) {
  lmdb::val v(s.data(), s.size());
  return *static_cast<MDB_val*>(v);
}

inline std::string_view as_view(const MDB_val& v) {
  return {static_cast<const char*>(v.mv_data), v.mv_size};
}
/// As as_view, for a key or value LMDB found in a transaction whose pages
/// end `backed` bytes into the map at `map` (of `map_size` bytes): a view
/// into the map that runs past the pages the file backs (a damaged size or
/// page count) is data_corrupt, so reading it can never fault. Views outside
/// the map (a write transaction's dirty pages) are LMDB's own heap copies.
inline std::string_view checked_view(const MDB_val& v, const char* map, std::size_t map_size,
                                     std::size_t backed) {
  auto p = static_cast<const char*>(v.mv_data);
  auto at = reinterpret_cast<std::uintptr_t>(p), base = reinterpret_cast<std::uintptr_t>(map);
  std::size_t off = at - base;
  if (map && at >= base && off < map_size && (off > backed || v.mv_size > backed - off))
    throw kv_failure{errc::data_corrupt,
                     "a stored key or value runs past the end of the store's pages ("
                       + std::to_string(v.mv_size) + " bytes at offset " + std::to_string(off)
                       + " of " + std::to_string(backed) + ")"};
  return {p, v.mv_size};
}

inline bool has_prefix(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.compare(0, p.size(), p) == 0;
}

/// The LMDB database the small tables share (store format 3).
constexpr const char* shared_db = "rows";

/// Whether `t` has a database of its own in every format that has it.
constexpr bool own_database(table t) {
  return t == table::meta || t == table::events || t == table::changes;
}

/// The first byte of this process's mapping of `file` that starts at file
/// offset 0, or null.
inline const char* find_mapping(const std::string& file) {
  struct stat fs;
  if (::stat(file.c_str(), &fs) != 0)
    return nullptr;
  std::FILE* maps = std::fopen("/proc/self/maps", "re");
  if (!maps)
    return nullptr;
  const char* found = nullptr;
  char line[4096];
  while (!found && std::fgets(line, sizeof line, maps)) {
    unsigned long lo = 0, hi = 0, offset = 0, inode = 0;
    unsigned major = 0, minor = 0;
    char perms[8];
    if (std::sscanf(line, "%lx-%lx %7s %lx %x:%x %lu", &lo, &hi, perms, &offset, &major, &minor,
                    &inode)
          == 7
        && offset == 0 && inode == fs.st_ino && makedev(major, minor) == fs.st_dev)
      found = reinterpret_cast<const char*>(lo);
  }
  std::fclose(maps);
  return found;
}

struct env_handle {
  lmdb::env owner{nullptr}; // closes the environment last
  MDB_env* env = nullptr;
  MDB_dbi dbi[table_count] = {};
  /// Per table: the byte its keys carry in `rows`, or -1 where the table is
  /// a database of its own (meta, events; every table in formats 1-2), or
  /// `absent_table` where a read-only store predates the table (a format 1-2
  /// store has no creation-order indexes): it reads as empty.
  int tag[table_count];
  static constexpr int absent_table = -2;
  bool write_map = false; ///< MDB_WRITEMAP: no nested transactions
  std::string dir; ///< the store's directory (full-disk checks)
  bool read_only = false; ///< open_lmdb_kv_readonly: snapshots read meta["format"]
  /// Set when a fault left LMDB in the middle of a write transaction: that
  /// transaction is never touched again (aborting it walks state the fault
  /// may have left half-written) and every later begin_write is refused.
  std::atomic<bool> writes_refused{false};
  /// kv_read::may_hold_fences: cleared at open when table `fences` is empty,
  /// set by every put to it (before its transaction commits).
  std::atomic<bool> fences{true};
  const char* map = nullptr; ///< the map's first byte (mdb_env_info, after open)
  std::size_t map_size = 0; ///< the map's reserved size
  std::size_t page_size = 0;

  /// Records where LMDB mapped `dir`/data.mdb (after the environment
  /// opened): LMDB does not say (mdb_env_info's address is the one a
  /// FIXEDMAP store asked for), so the mapping of the file's inode is found
  /// in /proc/self/maps. Not found (no procfs): `map` stays null and values
  /// go unchecked.
  void locate_map() {
    MDB_envinfo ei;
    MDB_stat st;
    check("mdb_env_info", ::mdb_env_info(env, &ei));
    check("mdb_env_stat", ::mdb_env_stat(env, &st));
    map_size = ei.me_mapsize;
    page_size = st.ms_psize;
    map = find_mapping(dir + "/data.mdb");
  }
  /// The bytes of the map the file backs for a transaction beginning now:
  /// every page of the newest committed snapshot (pages are written before
  /// the meta page naming them). With WRITEMAP the file is as large as the
  /// map.
  std::size_t backed_bytes() const {
    if (write_map)
      return map_size;
    MDB_envinfo ei;
    if (::mdb_env_info(env, &ei) != MDB_SUCCESS)
      return map_size;
    return static_cast<std::size_t>(ei.me_last_pgno + 1) * page_size;
  }

  env_handle() { std::fill(std::begin(tag), std::end(tag), -1); }

  /// Table i's rows live in `rows`, under the byte i.
  void share(std::size_t i, MDB_dbi rows) {
    dbi[i] = rows;
    tag[i] = static_cast<int>(i);
  }
};

class cursor_guard {
public:
  cursor_guard(MDB_txn* txn, MDB_dbi dbi) {
    check("mdb_cursor_open", ::mdb_cursor_open(txn, dbi, &cur_));
  }
  ~cursor_guard() { ::mdb_cursor_close(cur_); }
  MDB_cursor* get() const { return cur_; }

private:
  MDB_cursor* cur_ = nullptr;
};

// A key as its table's database stores it: the table's byte first when the
// table shares `rows`, else the caller's key itself (no copy). A copy is
// built on the stack (LMDB keys are at most 511 bytes; a longer one, which
// LMDB refuses, goes to the heap). Not copyable: the value may point into it.
class stored_key {
public:
  stored_key(int tag, std::string_view key)
    : data_(const_cast<char*>(key.data())), size_(key.size()) {
    if (tag < 0)
      return;
    char* p = own(key.size() + 1);
    p[0] = static_cast<char>(tag);
    if (!key.empty())
      std::memcpy(p + 1, key.data(), key.size());
  }
  stored_key(const stored_key&) = delete;
  stored_key& operator=(const stored_key&) = delete;

  MDB_val val() const { return MDB_val{size_, data_}; }
  /// Turns the key into the least key above every key it prefixes (drops
  /// trailing 0xff bytes, then adds one to the last); false when none is
  /// left (every byte was 0xff: nothing sorts above).
  bool to_upper_bound() {
    if (!owned_) {
      const char* from = data_;
      std::size_t n = size_;
      char* p = own(n);
      if (n)
        std::memcpy(p, from, n);
    }
    while (size_ > 0 && static_cast<unsigned char>(data_[size_ - 1]) == 0xff)
      --size_;
    if (size_ == 0)
      return false;
    data_[size_ - 1] = static_cast<char>(static_cast<unsigned char>(data_[size_ - 1]) + 1);
    return true;
  }

private:
  // Points the key at n bytes of its own storage and returns them.
  char* own(std::size_t n) {
    data_ = n <= sizeof buf_ ? buf_ : (big_.resize(n), big_.data());
    size_ = n;
    owned_ = true;
    return data_;
  }

  char buf_[512];
  std::string big_;
  char* data_;
  std::size_t size_;
  bool owned_ = false;
};

} // namespace agentstate::store::lmdb_detail
