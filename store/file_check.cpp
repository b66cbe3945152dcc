// SPDX-License-Identifier: Apache-2.0
#include "store/file_check.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

namespace agentstate::store {

namespace {

// LMDB 0.9's data format 1 on a 64-bit build (lmdb's mdb.c: MDB_page,
// MDB_meta, MDB_db): a page header of 16 bytes (pgno u64, pad u16, flags u16,
// lower u16, upper u16), then the meta: magic u32, version u32, address u64,
// mapsize u64, two MDB_db of 48 bytes (pad u32 - the page size in the first -,
// flags u16, depth u16, branch, leaf and overflow page counts, entries, root:
// u64 each), last page u64, txn id u64.
constexpr std::size_t page_header = 16;
constexpr std::size_t meta_bytes = page_header + 152;
constexpr std::uint16_t p_meta = 0x08;
constexpr std::uint32_t lmdb_magic = 0xBEEFC0DE;
constexpr std::uint32_t lmdb_data_version = 1;
constexpr std::uint64_t no_page = ~std::uint64_t{0};

template <class T>
T load_as(const unsigned char* p) {
  T x;
  std::memcpy(&x, p, sizeof x);
  return x;
}

struct meta_page {
  std::uint16_t flags;
  std::uint32_t magic, version, page_size;
  std::uint64_t map_size, roots[2], last_page, txn_id;
};

meta_page parse(const unsigned char* p) {
  meta_page m;
  m.flags = load_as<std::uint16_t>(p + 10);
  m.magic = load_as<std::uint32_t>(p + 16);
  m.version = load_as<std::uint32_t>(p + 20);
  m.map_size = load_as<std::uint64_t>(p + 32);
  m.page_size = load_as<std::uint32_t>(p + 40);
  m.roots[0] = load_as<std::uint64_t>(p + 80);
  m.roots[1] = load_as<std::uint64_t>(p + 128);
  m.last_page = load_as<std::uint64_t>(p + 136);
  m.txn_id = load_as<std::uint64_t>(p + 144);
  return m;
}

std::string check_meta(const meta_page& m, int which) {
  auto name = "meta page " + std::to_string(which);
  if (!(m.flags & p_meta))
    return name + " lacks the meta flag";
  if (m.magic != lmdb_magic)
    return name + " has no LMDB magic";
  if (m.version != lmdb_data_version)
    return name + " has data version " + std::to_string(m.version) + ", expected "
      + std::to_string(lmdb_data_version);
  if (m.page_size < 512 || m.page_size > 65536 || (m.page_size & (m.page_size - 1)) != 0)
    return name + " claims page size " + std::to_string(m.page_size);
  return {};
}

bool read_at(int fd, unsigned char* buf, std::size_t n, std::uint64_t off) {
  std::size_t done = 0;
  while (done < n) {
    auto r = ::pread(fd, buf + done, n - done, static_cast<off_t>(off + done));
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return false;
    done += static_cast<std::size_t>(r);
  }
  return true;
}

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

/// Makes DIR's entries durable (fsync of the directory).
result<void> sync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return error{errc::io_error, "cannot open directory " + dir + ": " + std::strerror(errno)};
  const bool synced = ::fsync(fd) == 0;
  const int sync_errno = errno;
  ::close(fd);
  if (!synced)
    return error{errc::io_error, "cannot sync directory " + dir + ": " + std::strerror(sync_errno)};
  return {};
}

} // namespace

namespace {

result<data_file_state> check_once(const std::string& dir, data_file_meta* out, bool allow_short) {
  auto path = dir + "/data.mdb";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT)
      return data_file_state::missing;
    return error{errc::io_error, "cannot read " + path + ": " + std::strerror(errno)};
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return error{errc::io_error, "cannot stat " + path + ": " + std::strerror(e)};
  }
  auto size = static_cast<std::uint64_t>(st.st_size);
  auto corrupt = [&](const std::string& why) {
    ::close(fd);
    return error{errc::data_corrupt,
                 path + " is damaged: " + why + " (" + std::to_string(size)
                   + " bytes; restore a backup or run agentstate salvage)"};
  };
  if (size == 0) {
    ::close(fd);
    return data_file_state::empty;
  }
  unsigned char buf[meta_bytes];
  if (size < meta_bytes || !read_at(fd, buf, meta_bytes, 0))
    return corrupt("too short to hold its first meta page");
  meta_page m[2];
  m[0] = parse(buf);
  if (auto why = check_meta(m[0], 0); !why.empty())
    return corrupt(why);
  if (size < std::uint64_t{m[0].page_size} + meta_bytes
      || !read_at(fd, buf, meta_bytes, m[0].page_size))
    return corrupt("too short to hold its second meta page");
  m[1] = parse(buf);
  if (auto why = check_meta(m[1], 1); !why.empty())
    return corrupt(why);
  if (m[1].page_size != m[0].page_size)
    return corrupt("the meta pages disagree on the page size");
  const meta_page& now = m[1].txn_id > m[0].txn_id ? m[1] : m[0];
  auto psize = std::uint64_t{now.page_size};
  if (now.last_page < 1 || now.last_page > (std::uint64_t{1} << 48) / psize)
    return corrupt("the meta page of txn " + std::to_string(now.txn_id) + " claims last page "
                   + std::to_string(now.last_page));
  auto need = (now.last_page + 1) * psize;
  // The size as of after the meta page was read: a writer grows the file
  // before it commits a meta page claiming the new pages, so a size taken
  // before the read may predate both.
  if (size < need && ::fstat(fd, &st) == 0)
    size = static_cast<std::uint64_t>(st.st_size);
  if (size < need && !allow_short)
    return corrupt("truncated: the meta page of txn " + std::to_string(now.txn_id) + " claims "
                   + std::to_string(now.last_page + 1) + " pages of " + std::to_string(psize)
                   + " bytes (" + std::to_string(need) + " bytes)");
  for (auto root : now.roots)
    if (root != no_page && (root < 2 || root > now.last_page))
      return corrupt("the meta page of txn " + std::to_string(now.txn_id) + " names root page "
                     + std::to_string(root) + " outside pages 2.." + std::to_string(now.last_page));
  ::close(fd);
  if (out)
    *out = {now.page_size, now.last_page, now.txn_id, size, now.map_size};
  return data_file_state::present;
}

} // namespace

result<data_file_state> check_data_file(const std::string& dir, data_file_meta* out,
                                        bool allow_short) {
  // Damage is checked three times, 10 ms apart: a meta page read while a
  // writer rewrote it may be torn; damage on disk stays.
  auto r = check_once(dir, out, allow_short);
  for (int again = 0; again < 2 && !r && r.code() == errc::data_corrupt; ++again) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    r = check_once(dir, out, allow_short);
  }
  return r;
}

result<dir_flock> dir_flock::take(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return error{errc::io_error, "cannot open directory " + dir + ": " + std::strerror(errno)};
  while (::flock(fd, LOCK_EX) != 0) {
    if (errno == EINTR)
      continue;
    const int e = errno;
    ::close(fd);
    return error{errc::io_error, "cannot lock directory " + dir + ": " + std::strerror(e)};
  }
  return dir_flock(fd);
}

dir_flock::~dir_flock() {
  if (fd_ >= 0)
    ::close(fd_);
}

bool creating(const std::string& dir) {
  return exists(dir + "/" + creating_file);
}

result<void> mark_creating(const std::string& dir) {
  const auto path = dir + "/" + creating_file;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    return error{errc::io_error, "cannot create " + path + ": " + std::strerror(errno)};
  const bool synced = ::fsync(fd) == 0;
  const int sync_errno = errno;
  ::close(fd);
  if (!synced)
    return error{errc::io_error, "cannot sync " + path + ": " + std::strerror(sync_errno)};
  return sync_dir(dir);
}

result<void> discard_cut_creation(const std::string& dir) {
  for (const char* f : {"data.mdb", "lock.mdb"}) {
    const auto path = dir + "/" + f;
    if (::unlink(path.c_str()) != 0 && errno != ENOENT)
      return error{errc::io_error,
                   "cannot remove " + path
                     + " (left by a creation cut off): " + std::strerror(errno)};
  }
  return sync_dir(dir);
}

result<void> unmark_creating(const std::string& dir) {
  const auto path = dir + "/" + creating_file;
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    return error{errc::io_error, "cannot remove " + path + ": " + std::strerror(errno)};
  return sync_dir(dir);
}

result<void> check_store_dir(const std::string& dir, create_rule rule) {
  if (creating(dir)) {
    if (rule == create_rule::never)
      return error{errc::not_found, "no store in '" + dir + "' (its creation was cut off)"};
    return {};
  }
  auto state = check_data_file(dir);
  if (!state)
    return std::move(state).err();
  if (*state == data_file_state::present)
    return {};
  bool had_store = exists(dir + "/agentstate.lock") || exists(dir + "/lock.mdb");
  if (rule == create_rule::always)
    return {};
  if (had_store || *state == data_file_state::empty) {
    if (rule == create_rule::if_new || rule == create_rule::never) {
      std::string what = *state == data_file_state::empty ? "an empty data.mdb" : "no data.mdb";
      return error{errc::data_corrupt,
                   "store '" + dir + "' has its lock files but " + what
                     + ": its data is gone (deleted or truncated); refusing to start an empty "
                       "store in its place (create it anew with serve --create, "
                       "options::create = create_policy::always)"};
    }
  }
  if (rule == create_rule::never)
    return error{errc::not_found, "no store in '" + dir + "' (no data.mdb)"};
  return {};
}

} // namespace agentstate::store
