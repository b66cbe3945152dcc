// The LMDB kv_store. Rules from DESIGN.md §4: MDB_NOTLS, every table opened
// once at open, mdb_reader_check at open, never WRITEMAP|MAPASYNC (WRITEMAP
// only with NOSYNC, on request). The map is reserved at its maximum size up
// front (address space only; the file grows with use, or, with WRITEMAP, is
// sparse at that size), so no resize ever runs under live readers;
// MDB_MAP_FULL means the configured maximum is reached and surfaces as
// storage_full. Layout: kv.hpp, open_lmdb_kv.
#include "store/kv.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <lmdb++.h>

namespace agentstate::store {

namespace {

[[noreturn]] void fail(const char* what, int rc) {
  errc code = errc::io_error;
  switch (rc) {
    case MDB_MAP_FULL:
    case ENOSPC: code = errc::storage_full; break;
    case MDB_READERS_FULL: code = errc::unavailable; break;
    case MDB_BAD_TXN:
    case MDB_BAD_DBI:
    case MDB_BAD_VALSIZE:
    case EINVAL: code = errc::internal; break;
    default: break;
  }
  throw kv_failure{code, std::string(what) + ": " + ::mdb_strerror(rc)};
}

void check(const char* what, int rc) {
  if (rc != MDB_SUCCESS)
    fail(what, rc);
}

MDB_val as_val(std::string_view s) {
  lmdb::val v(s.data(), s.size());
  return *static_cast<MDB_val*>(v);
}

std::string_view as_view(const MDB_val& v) {
  return {static_cast<const char*>(v.mv_data), v.mv_size};
}

bool has_prefix(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.compare(0, p.size(), p) == 0;
}

/// The LMDB database the small tables share (store format 3).
constexpr const char* shared_db = "rows";

/// Whether `t` has a database of its own in every format.
constexpr bool own_database(table t) {
  return t == table::meta || t == table::events;
}

struct env_handle {
  lmdb::env owner{nullptr}; // closes the environment last
  MDB_env* env = nullptr;
  MDB_dbi dbi[table_count] = {};
  /// Per table: the byte its keys carry in `rows`, or -1 where the table is
  /// a database of its own (meta, events; every table in formats 1-2).
  int tag[table_count];
  bool write_map = false; ///< MDB_WRITEMAP: no nested transactions

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
  stored_key(int tag, std::string_view key) : data_(const_cast<char*>(key.data())), size_(key.size()) {
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

// Reads shared by read and write transactions, on the current MDB_txn.
class lmdb_reader {
protected:
  lmdb_reader(env_handle& h) : h_(h) {}

  int tag(table t) const { return h_.tag[static_cast<int>(t)]; }
  MDB_dbi dbi(table t) const { return h_.dbi[static_cast<int>(t)]; }

  std::optional<std::string_view> do_get(MDB_txn* txn, table t, std::string_view key) {
    stored_key sk(tag(t), key);
    MDB_val k = sk.val(), v;
    int rc = ::mdb_get(txn, dbi(t), &k, &v);
    if (rc == MDB_NOTFOUND)
      return std::nullopt;
    check("mdb_get", rc);
    return as_view(v);
  }

  // Visits the entries of t from the cursor's position (the entry in k, v
  // when rc is MDB_SUCCESS) while their keys, the table's byte stripped,
  // start with `prefix`, moving by `step`.
  void visit(cursor_guard& c, int rc, MDB_val k, MDB_val v, MDB_cursor_op step, table t,
             std::string_view prefix, const kv_visitor& fn) {
    const int tg = tag(t);
    const std::size_t skip = tg < 0 ? 0 : 1;
    while (rc == MDB_SUCCESS) {
      auto key = as_view(k);
      if (key.size() < skip || (skip && key[0] != static_cast<char>(tg)))
        return;
      key.remove_prefix(skip);
      if (!has_prefix(key, prefix) || !fn(key, as_view(v)))
        return;
      rc = ::mdb_cursor_get(c.get(), &k, &v, step);
    }
    if (rc != MDB_NOTFOUND)
      fail("mdb_cursor_get", rc);
  }

  void do_scan(MDB_txn* txn, table t, std::string_view prefix, std::string_view from,
               const kv_visitor& fn) {
    cursor_guard c(txn, dbi(t));
    stored_key start(tag(t), !from.empty() && from > prefix ? from : prefix);
    MDB_val k = start.val(), v;
    int rc = k.mv_size == 0 ? ::mdb_cursor_get(c.get(), &k, &v, MDB_FIRST)
                            : ::mdb_cursor_get(c.get(), &k, &v, MDB_SET_RANGE);
    visit(c, rc, k, v, MDB_NEXT, t, prefix, fn);
  }

  void do_scan_back(MDB_txn* txn, table t, std::string_view prefix, std::string_view from,
                    const kv_visitor& fn) {
    cursor_guard c(txn, dbi(t));
    MDB_val k, v;
    int rc;
    if (!from.empty() && from < prefix)
      return; // every key with the prefix sorts above `from`
    if (!from.empty() && has_prefix(from, prefix)) {
      // The last key <= from: from itself, or the one before the first above it.
      stored_key at(tag(t), from);
      k = at.val();
      MDB_val want = k;
      rc = ::mdb_cursor_get(c.get(), &k, &v, MDB_SET_RANGE);
      if (rc == MDB_SUCCESS && as_view(k) != as_view(want))
        rc = ::mdb_cursor_get(c.get(), &k, &v, MDB_PREV);
      else if (rc == MDB_NOTFOUND)
        rc = ::mdb_cursor_get(c.get(), &k, &v, MDB_LAST);
      visit(c, rc, k, v, MDB_PREV, t, prefix, fn);
      return;
    }
    stored_key upper(tag(t), prefix);
    if (!upper.to_upper_bound()) {
      rc = ::mdb_cursor_get(c.get(), &k, &v, MDB_LAST);
    } else {
      k = upper.val();
      rc = ::mdb_cursor_get(c.get(), &k, &v, MDB_SET_RANGE);
      if (rc == MDB_SUCCESS)
        rc = ::mdb_cursor_get(c.get(), &k, &v, MDB_PREV);
      else if (rc == MDB_NOTFOUND)
        rc = ::mdb_cursor_get(c.get(), &k, &v, MDB_LAST);
    }
    visit(c, rc, k, v, MDB_PREV, t, prefix, fn);
  }

  env_handle& h_;
};

class lmdb_read : public kv_read, lmdb_reader {
public:
  explicit lmdb_read(env_handle& h) : lmdb_reader(h) {
    check("mdb_txn_begin(read)", ::mdb_txn_begin(h.env, nullptr, MDB_RDONLY, &txn_));
  }
  ~lmdb_read() override { ::mdb_txn_abort(txn_); }
  std::optional<std::string_view> get(table t, std::string_view key) override {
    return do_get(txn_, t, key);
  }
  void scan(table t, std::string_view prefix, std::string_view from,
            const kv_visitor& fn) override {
    do_scan(txn_, t, prefix, from, fn);
  }
  void scan_back(table t, std::string_view prefix, std::string_view from,
                 const kv_visitor& fn) override {
    do_scan_back(txn_, t, prefix, from, fn);
  }
  std::uint64_t txn_id() const override { return ::mdb_txn_id(txn_); }
  MDB_txn* handle() const { return txn_; }

private:
  MDB_txn* txn_ = nullptr;
};

class lmdb_write : public kv_write, lmdb_reader {
public:
  explicit lmdb_write(env_handle& h) : lmdb_reader(h) {
    MDB_txn* txn = nullptr;
    check("mdb_txn_begin(write)", ::mdb_txn_begin(h.env, nullptr, 0, &txn));
    stack_.push_back(txn);
    id_ = ::mdb_txn_id(txn);
  }
  ~lmdb_write() override {
    // Aborting the outermost transaction aborts its children too.
    if (!stack_.empty())
      ::mdb_txn_abort(stack_.front());
  }
  std::optional<std::string_view> get(table t, std::string_view key) override {
    return do_get(top(), t, key);
  }
  void scan(table t, std::string_view prefix, std::string_view from,
            const kv_visitor& fn) override {
    do_scan(top(), t, prefix, from, fn);
  }
  void scan_back(table t, std::string_view prefix, std::string_view from,
                 const kv_visitor& fn) override {
    do_scan_back(top(), t, prefix, from, fn);
  }
  std::uint64_t txn_id() const override { return id_; }

  void put(table t, std::string_view key, std::string_view value) override {
    stored_key sk(tag(t), key);
    MDB_val k = sk.val(), v = as_val(value);
    check("mdb_put", ::mdb_put(top(), dbi(t), &k, &v, 0));
  }
  bool del(table t, std::string_view key) override {
    stored_key sk(tag(t), key);
    MDB_val k = sk.val();
    int rc = ::mdb_del(top(), dbi(t), &k, nullptr);
    if (rc == MDB_NOTFOUND)
      return false;
    check("mdb_del", rc);
    return true;
  }
  void drop_table(std::string_view name) override {
    std::string n(name);
    MDB_dbi dbi;
    int rc = ::mdb_dbi_open(top(), n.c_str(), 0, &dbi);
    if (rc == MDB_NOTFOUND)
      return;
    check("mdb_dbi_open", rc);
    check("mdb_drop", ::mdb_drop(top(), dbi, 1));
  }
  void absorb_table(table t) override {
    auto i = static_cast<int>(t);
    if (h_.tag[i] < 0)
      return;
    MDB_dbi old;
    int rc = ::mdb_dbi_open(top(), table_name(t), 0, &old);
    if (rc == MDB_NOTFOUND)
      return;
    check("mdb_dbi_open", rc);
    {
      cursor_guard c(top(), old);
      MDB_val k, v;
      rc = ::mdb_cursor_get(c.get(), &k, &v, MDB_FIRST);
      while (rc == MDB_SUCCESS) {
        stored_key sk(h_.tag[i], as_view(k));
        MDB_val nk = sk.val();
        check("mdb_put", ::mdb_put(top(), h_.dbi[i], &nk, &v, 0));
        rc = ::mdb_cursor_get(c.get(), &k, &v, MDB_NEXT);
      }
      if (rc != MDB_NOTFOUND)
        fail("mdb_cursor_get", rc);
    }
    check("mdb_drop", ::mdb_drop(top(), old, 1));
  }
  void begin_nested() override {
    MDB_txn* child = nullptr;
    check("mdb_txn_begin(nested)", ::mdb_txn_begin(h_.env, top(), 0, &child));
    stack_.push_back(child);
  }
  void commit_nested() override {
    MDB_txn* child = stack_.back();
    stack_.pop_back();
    check("mdb_txn_commit(nested)", ::mdb_txn_commit(child));
  }
  void abort_nested() noexcept override {
    ::mdb_txn_abort(stack_.back());
    stack_.pop_back();
  }
  void commit() override {
    MDB_txn* txn = stack_.front();
    stack_.clear();
    check("mdb_txn_commit", ::mdb_txn_commit(txn));
  }

private:
  MDB_txn* top() const { return stack_.back(); }
  std::vector<MDB_txn*> stack_;
  std::uint64_t id_ = 0;
};

// Resident file-backed pages of this process (RssFile + RssShmem, the
// "shared" column of /proc/self/statm), in bytes; 0 when unreadable.
std::uint64_t file_resident_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f)
    return 0;
  unsigned long long size = 0, resident = 0, shared = 0;
  int n = std::fscanf(f, "%llu %llu %llu", &size, &resident, &shared);
  std::fclose(f);
  return n == 3 ? shared * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE)) : 0;
}

// The thread behind resident_bound. After construction it makes no LMDB
// call and shares no lock with readers or the writer: it reads
// /proc/self/statm and where the data file's data ends, and calls madvise.
class resident_trimmer {
public:
  resident_trimmer(MDB_env* env, resident_bound bound) : bound_(bound) {
    check("mdb_env_get_fd", ::mdb_env_get_fd(env, &fd_));
    // A descriptor of our own for lseek(SEEK_DATA/SEEK_HOLE): LMDB writes
    // page runs with lseek + writev on its descriptor, so moving that
    // descriptor's offset from this thread would misplace its writes.
    own_fd_ = ::open(("/proc/self/fd/" + std::to_string(fd_)).c_str(), O_RDONLY | O_CLOEXEC);
    find_map();
    baseline_ = file_resident_bytes();
    thread_ = std::thread([this] { run(); });
  }
  ~resident_trimmer() {
    {
      std::lock_guard<std::mutex> g(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
    if (own_fd_ >= 0)
      ::close(own_fd_);
  }
  std::uint64_t trims() const { return trims_.load(std::memory_order_relaxed); }
  /// Called per transaction begun: every `check_every` of them wake the
  /// thread early, so a burst of reads (each maps a handful of pages, tens
  /// of KiB) cannot run far past the bound before the next check. A wake-up
  /// lost to the race with the thread's wait only delays the check to the
  /// end of the period.
  void touched() {
    if (ops_.fetch_add(1, std::memory_order_relaxed) % check_every == check_every - 1)
      cv_.notify_one();
  }

private:
  // LMDB does not publish its map's address (mdb_env_info's me_mapaddr is
  // only set with MDB_FIXEDMAP), so find the mapping of the data file, by
  // inode, in /proc/self/maps. No mapping found = nothing to trim.
  void find_map() {
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
      if (std::sscanf(line, "%llx-%llx %7s %llx %x:%x %llu", &start, &end, perms, &offset,
                      &dev_major, &dev_minor, &inode)
            == 7
          && inode == static_cast<unsigned long long>(st.st_ino)
          && dev_major == major(st.st_dev) && dev_minor == minor(st.st_dev) && offset == 0
          && end - start > map_size_) {
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
  std::uint64_t data_end() const {
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

  void run() {
    std::unique_lock<std::mutex> g(mu_);
    std::uint64_t seen = 0, last = baseline_;
    auto wait = bound_.period;
    auto due = [&] {
      return stop_ || ops_.load(std::memory_order_relaxed) - seen >= check_every;
    };
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
      if (now == 0) // statm unreadable (e.g. out of descriptors): skip a turn
        continue;
      baseline_ = baseline_ ? std::min(baseline_, now) : now; // 0 = not read yet
      // Pages mapping fast (a quarter of the bound since the last check:
      // write batches and random reads map 16 pages per fault, the kernel's
      // fault-around) shorten the next wait tenfold, so the overshoot stays
      // a fraction of the bound.
      wait = now > last && now - last > bound_.max_bytes / 4 ? bound_.period / 10
                                                            : bound_.period;
      last = now;
      if (!map_ || now - baseline_ <= bound_.max_bytes)
        continue;
      auto used = std::min(data_end(), map_size_);
      auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
      used = (used + page - 1) / page * page;
      // In 8 MiB steps: each madvise holds the map's lock while it unmaps,
      // and a reader faulting meanwhile waits for that step only.
      constexpr std::uint64_t step = std::uint64_t{8} << 20;
      bool ok = used > 0;
      for (std::uint64_t off = 0; ok && off < used; off += step)
        ok = ::madvise(static_cast<char*>(map_) + off, std::min(step, used - off),
                       MADV_DONTNEED) == 0;
      if (ok) {
        trims_.fetch_add(1, std::memory_order_relaxed);
        if (auto after = file_resident_bytes())
          baseline_ = last = after;
      }
    }
  }

  resident_bound bound_;
  void* map_ = nullptr;
  std::uint64_t map_size_ = 0;
  int fd_ = -1;     ///< LMDB's: fstat only, never lseek
  int own_fd_ = -1; ///< the same file, opened again for lseek
  std::uint64_t baseline_ = 0;
  std::atomic<std::uint64_t> trims_{0};
  static constexpr std::uint64_t check_every = 64;
  std::atomic<std::uint64_t> ops_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

class lmdb_kv : public kv_store {
public:
  lmdb_kv(std::unique_ptr<env_handle> h, bool read_only, resident_bound bound = {})
    : h_(std::move(h)), read_only_(read_only) {
    if (bound.max_bytes > 0) {
      try {
        trimmer_ = std::make_unique<resident_trimmer>(h_->env, bound);
      } catch (const std::system_error& e) {
        throw kv_failure{errc::unavailable,
                         std::string("cannot start the resident-bound thread: ") + e.what()};
      }
    }
  }
  std::uint64_t resident_trims() const override {
    return trimmer_ ? trimmer_->trims() : 0;
  }
  bool nests() const override { return !h_->write_map; }
  std::unique_ptr<kv_read> begin_read() override {
    if (trimmer_)
      trimmer_->touched();
    return std::make_unique<lmdb_read>(*h_);
  }
  std::unique_ptr<kv_write> begin_write() override {
    if (read_only_)
      throw kv_failure{errc::internal, "store opened read-only"};
    if (trimmer_)
      trimmer_->touched();
    return std::make_unique<lmdb_write>(*h_);
  }
  void sync() override {
    if (!read_only_)
      check("mdb_env_sync", ::mdb_env_sync(h_->env, 1));
  }
  void copy_to(const std::string& dest, bool compact) override {
    check("mdb_env_copy2",
          ::mdb_env_copy2(h_->env, dest.c_str(), compact ? MDB_CP_COMPACT : 0u));
  }
  kv_info info() override {
    MDB_envinfo ei;
    MDB_stat st;
    check("mdb_env_info", ::mdb_env_info(h_->env, &ei));
    check("mdb_env_stat", ::mdb_env_stat(h_->env, &st));
    kv_info out;
    out.map_size = ei.me_mapsize;
    out.used_bytes = static_cast<std::uint64_t>(ei.me_last_pgno + 1) * st.ms_psize;
    out.last_txn_id = ei.me_last_txnid;
    out.max_readers = ei.me_maxreaders;
    out.readers_used = ei.me_numreaders;
    lmdb_read r(*h_);
    bool shared = false;
    for (std::size_t i = 0; i < table_count; ++i) {
      if (h_->tag[i] >= 0) {
        shared = true;
        continue;
      }
      MDB_stat ts;
      check("mdb_stat", ::mdb_stat(r.handle(), h_->dbi[i], &ts));
      out.entries[i] = ts.ms_entries;
    }
    if (shared) { // one walk over `rows`, counted by each key's table byte
      cursor_guard c(r.handle(), h_->dbi[static_cast<int>(table::sessions)]);
      MDB_val k, v;
      int rc = ::mdb_cursor_get(c.get(), &k, &v, MDB_FIRST);
      while (rc == MDB_SUCCESS) {
        std::size_t tag = k.mv_size ? static_cast<unsigned char>(*static_cast<const char*>(k.mv_data))
                                    : table_count;
        if (tag < table_count && h_->tag[tag] == static_cast<int>(tag))
          ++out.entries[tag];
        rc = ::mdb_cursor_get(c.get(), &k, &v, MDB_NEXT);
      }
      if (rc != MDB_NOTFOUND)
        fail("mdb_cursor_get", rc);
    }
    return out;
  }

private:
  std::unique_ptr<env_handle> h_;
  bool read_only_;
  std::unique_ptr<resident_trimmer> trimmer_; // destroyed (joined) before h_ closes
};

} // namespace

std::unique_ptr<kv_store> open_lmdb_kv(const std::string& dir, bool sync,
                                       std::uint64_t map_size, resident_bound bound,
                                       bool write_map) {
  if (write_map && sync)
    throw kv_failure{errc::invalid_argument, "a writable map needs nosync"};
  auto h = std::make_unique<env_handle>();
  try {
    h->owner = lmdb::env::create();
    h->owner.set_max_dbs(16);
    h->owner.set_max_readers(1022);
    h->owner.set_mapsize(map_size);
    h->owner.open(dir.c_str(),
                  MDB_NOTLS | (sync ? 0u : MDB_NOSYNC) | (write_map ? MDB_WRITEMAP : 0u),
                  0644);
  } catch (const lmdb::error& e) {
    fail(e.origin(), e.code());
  }
  h->env = h->owner.handle();
  h->write_map = write_map;
  int dead = 0;
  check("mdb_reader_check", ::mdb_reader_check(h->env, &dead));
  MDB_txn* txn = nullptr;
  check("mdb_txn_begin", ::mdb_txn_begin(h->env, nullptr, 0, &txn));
  MDB_dbi rows;
  int rc = ::mdb_dbi_open(txn, shared_db, MDB_CREATE, &rows);
  for (std::size_t i = 0; i < table_count && rc == MDB_SUCCESS; ++i) {
    auto t = static_cast<table>(i);
    if (own_database(t))
      rc = ::mdb_dbi_open(txn, table_name(t), MDB_CREATE, &h->dbi[i]);
    else
      h->share(i, rows);
  }
  if (rc != MDB_SUCCESS) {
    ::mdb_txn_abort(txn);
    fail("mdb_dbi_open", rc);
  }
  check("mdb_txn_commit", ::mdb_txn_commit(txn));
  return std::make_unique<lmdb_kv>(std::move(h), false, bound);
}

std::unique_ptr<kv_store> open_lmdb_kv_readonly(const std::string& dir) {
  struct stat st;
  if (::stat((dir + "/data.mdb").c_str(), &st) != 0)
    throw kv_failure{errc::not_found, "no store in '" + dir + "' (no data.mdb)"};
  auto h = std::make_unique<env_handle>();
  try {
    h->owner = lmdb::env::create();
    h->owner.set_max_dbs(16);
    h->owner.set_max_readers(1022);
    h->owner.open(dir.c_str(), MDB_NOTLS | MDB_RDONLY, 0644);
  } catch (const lmdb::error& e) {
    fail(e.origin(), e.code());
  }
  h->env = h->owner.handle();
  MDB_txn* txn = nullptr;
  check("mdb_txn_begin", ::mdb_txn_begin(h->env, nullptr, MDB_RDONLY, &txn));
  MDB_dbi rows;
  int shared = ::mdb_dbi_open(txn, shared_db, 0, &rows);
  if (shared != MDB_SUCCESS && shared != MDB_NOTFOUND) {
    ::mdb_txn_abort(txn);
    fail("mdb_dbi_open", shared);
  }
  for (std::size_t i = 0; i < table_count; ++i) {
    auto t = static_cast<table>(i);
    if (shared == MDB_SUCCESS && !own_database(t)) {
      h->share(i, rows);
      continue;
    }
    int rc = ::mdb_dbi_open(txn, table_name(t), 0, &h->dbi[i]);
    if (rc != MDB_SUCCESS) {
      ::mdb_txn_abort(txn);
      if (rc == MDB_NOTFOUND)
        throw kv_failure{errc::internal, std::string("store lacks table '")
                                           + table_name(static_cast<table>(i)) + "'"};
      fail("mdb_dbi_open", rc);
    }
  }
  // Committing a read-only transaction keeps its database handles open.
  check("mdb_txn_commit", ::mdb_txn_commit(txn));
  return std::make_unique<lmdb_kv>(std::move(h), true);
}

} // namespace agentstate::store
