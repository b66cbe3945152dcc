// SPDX-License-Identifier: Apache-2.0
// The LMDB kv_store. Rules (docs/architecture.md, "LMDB"): MDB_NOTLS, every table opened
// once at open, mdb_reader_check at open, never WRITEMAP|MAPASYNC (WRITEMAP
// only with NOSYNC, on request). The map is reserved at its maximum size up
// front (address space only; the file grows with use, or, with WRITEMAP, is
// sparse at that size), so no resize ever runs under live readers;
// MDB_MAP_FULL means the configured maximum is reached and surfaces as
// storage_full. Layout: kv.hpp, open_lmdb_kv.
#include "store/kv.hpp"

#include <sys/stat.h>

#include <atomic>
#include <memory>
#include <string>
#include <system_error>

#include "store/file_check.hpp"
#include "store/format.hpp"
#include "store/lmdb_txn.hpp"
#include "store/resident_trimmer.hpp"

namespace agentstate::store {

using namespace lmdb_detail;

namespace {

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
  std::uint64_t resident_trims() const override { return trimmer_ ? trimmer_->trims() : 0; }
  std::uint64_t resident_checks() const override { return trimmer_ ? trimmer_->checks() : 0; }
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
      check_write("mdb_env_sync", ::mdb_env_sync(h_->env, 1), h_->dir);
  }
  void copy_to(const std::string& dest, bool compact) override {
    check("mdb_env_copy2", ::mdb_env_copy2(h_->env, dest.c_str(), compact ? MDB_CP_COMPACT : 0u));
  }
  void copy_to_fd(int fd, bool compact) override {
    check("mdb_env_copyfd2", ::mdb_env_copyfd2(h_->env, fd, compact ? MDB_CP_COMPACT : 0u));
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
      if (h_->tag[i] == env_handle::absent_table)
        continue;
      if (h_->tag[i] >= 0) {
        shared = true;
        continue;
      }
      MDB_stat ts;
      check("mdb_stat",
            guarded_call("mdb_stat", [&] { return ::mdb_stat(r.handle(), h_->dbi[i], &ts); }));
      out.entries[i] = ts.ms_entries;
    }
    if (shared) { // one walk over `rows`, counted by each key's table byte
      cursor_guard c(r.handle(), h_->dbi[static_cast<int>(table::sessions)]);
      MDB_val k, v;
      auto step = [&](MDB_cursor_op op) {
        return guarded_call("mdb_cursor_get",
                            [&] { return ::mdb_cursor_get(c.get(), &k, &v, op); });
      };
      int rc = step(MDB_FIRST);
      while (rc == MDB_SUCCESS) {
        std::size_t tag = k.mv_size
          ? static_cast<unsigned char>(*static_cast<const char*>(k.mv_data))
          : table_count;
        if (tag < table_count && h_->tag[tag] == static_cast<int>(tag))
          ++out.entries[tag];
        rc = step(MDB_NEXT);
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

// LMDB's assertion handler (mdb_env_set_assert): map_guard's.
void on_lmdb_assert(MDB_env*, const char* msg) {
  map_guard::on_lmdb_assert(msg);
}

// Before LMDB maps DIR/data.mdb: refuses a file its meta pages disagree with
// (check_data_file). `need_data`: a missing or empty file is refused too.
void check_before_map(const std::string& dir, bool need_data, bool allow_short = false) {
  auto state = check_data_file(dir, nullptr, allow_short);
  if (!state)
    throw kv_failure{state.code(), state.err().message};
  if (need_data && *state == data_file_state::missing)
    throw kv_failure{errc::not_found, "no store in '" + dir + "' (no data.mdb)"};
  if (need_data && *state == data_file_state::empty)
    throw kv_failure{errc::data_corrupt, "store '" + dir + "' has an empty data.mdb"};
}

// The environment of the store in `dir`, opened with `flags` (a map of
// `map_size` bytes; 0 keeps the file's), under the map guard: LMDB's
// assertions raise inside it. Throws kv_failure.
std::unique_ptr<env_handle> open_env(const std::string& dir, unsigned flags,
                                     std::uint64_t map_size) {
  map_guard::install();
  auto h = std::make_unique<env_handle>();
  h->dir = dir;
  try {
    h->owner = lmdb::env::create();
    ::mdb_env_set_assert(h->owner.handle(), on_lmdb_assert);
    h->owner.set_max_dbs(16);
    h->owner.set_max_readers(1022);
    if (map_size)
      h->owner.set_mapsize(map_size);
    h->owner.open(dir.c_str(), flags, 0644);
  } catch (const lmdb::error& e) {
    fail(e.origin(), e.code());
  }
  h->env = h->owner.handle();
  return h;
}

// Before an open for writing creates any table: data_corrupt when `h`'s
// store exists (its main database names tables) but lacks a table its
// format has - `meta`, `events`, from format 3 `rows`, from format 6
// `changes` - so a table whose name or record was damaged is never
// replaced by a new empty one. A new store (no tables) passes.
void check_tables(env_handle& h, const std::string& dir) {
  MDB_txn* txn = nullptr;
  check("mdb_txn_begin", guarded_call("mdb_txn_begin", [&] {
          return ::mdb_txn_begin(h.env, nullptr, MDB_RDONLY, &txn);
        }));
  struct aborter {
    MDB_txn* t;
    ~aborter() { ::mdb_txn_abort(t); }
  } end{txn};
  MDB_dbi main_db, dbi;
  MDB_stat st;
  check("mdb_dbi_open",
        guarded_call("mdb_dbi_open", [&] { return ::mdb_dbi_open(txn, nullptr, 0, &main_db); }));
  check("mdb_stat", guarded_call("mdb_stat", [&] { return ::mdb_stat(txn, main_db, &st); }));
  if (st.ms_entries == 0)
    return; // a new store
  auto has = [&](const char* name) {
    int rc = guarded_call("mdb_dbi_open", [&] { return ::mdb_dbi_open(txn, name, 0, &dbi); });
    if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND)
      fail("mdb_dbi_open", rc);
    return rc == MDB_SUCCESS;
  };
  auto lacks = [&](const char* name) {
    throw kv_failure{errc::data_corrupt,
                     "store '" + dir + "' lacks its '" + name
                       + "' table (the store is damaged; `agentstate "
                         "salvage` copies what reads clean)"};
  };
  if (!has(table_name(table::meta)))
    lacks(table_name(table::meta));
  MDB_val k{6, const_cast<char*>("format")}, v;
  int rc = guarded_call("mdb_get", [&] { return ::mdb_get(txn, dbi, &k, &v); });
  if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND)
    fail("mdb_get", rc);
  std::uint32_t format = 0;
  if (rc == MDB_SUCCESS) {
    format = known_format(checked_view(v, h.map, h.map_size, h.backed_bytes()));
  } else {
    // No format: a store whose tables were made but whose meta was never
    // written (a crash before its first commit) has an empty meta.
    check("mdb_stat", guarded_call("mdb_stat", [&] { return ::mdb_stat(txn, dbi, &st); }));
    if (st.ms_entries != 0)
      throw kv_failure{errc::data_corrupt,
                       "store '" + dir
                         + "' has a meta table without its format (the "
                           "store is damaged)"};
  }
  if (!has(table_name(table::events)))
    lacks(table_name(table::events));
  if (format >= 3 && !has(shared_db))
    lacks(shared_db);
  if (format >= 6 && !has(table_name(table::changes)))
    lacks(table_name(table::changes));
}

} // namespace

std::vector<tree_count> recorded_counts(kv_read& txn) {
  if (auto* r = dynamic_cast<lmdb_read*>(&txn))
    return r->recorded_counts();
  return {};
}

std::unique_ptr<kv_store> open_lmdb_kv(const std::string& dir, bool sync, std::uint64_t map_size,
                                       resident_bound bound, bool write_map) {
  if (write_map && sync)
    throw kv_failure{errc::invalid_argument, "a writable map needs nosync"};
  check_before_map(dir, false);
  auto h =
    open_env(dir, MDB_NOTLS | (sync ? 0u : MDB_NOSYNC) | (write_map ? MDB_WRITEMAP : 0u), map_size);
  h->write_map = write_map;
  h->locate_map();
  int dead = 0;
  check("mdb_reader_check", ::mdb_reader_check(h->env, &dead));
  check_tables(*h, dir);
  MDB_txn* txn = nullptr;
  check("mdb_txn_begin",
        guarded_call("mdb_txn_begin", [&] { return ::mdb_txn_begin(h->env, nullptr, 0, &txn); }));
  MDB_dbi rows;
  // A fault in here leaves the transaction as it is (never aborted: aborting
  // walks what the fault may have left half-written); the store is not
  // opened.
  int rc =
    guarded_call("mdb_dbi_open", [&] { return ::mdb_dbi_open(txn, shared_db, MDB_CREATE, &rows); });
  for (std::size_t i = 0; i < table_count && rc == MDB_SUCCESS; ++i) {
    auto t = static_cast<table>(i);
    if (own_database(t))
      rc = guarded_call("mdb_dbi_open",
                        [&] { return ::mdb_dbi_open(txn, table_name(t), MDB_CREATE, &h->dbi[i]); });
    else
      h->share(i, rows);
  }
  if (rc != MDB_SUCCESS) {
    ::mdb_txn_abort(txn);
    fail("mdb_dbi_open", rc);
  }
  check("mdb_txn_commit", guarded_call("mdb_txn_commit", [&] { return ::mdb_txn_commit(txn); }));
  {
    lmdb_read r(*h);
    bool any = false;
    r.scan(table::fences, {}, {}, [&](std::string_view, std::string_view) {
      any = true;
      return false;
    });
    h->fences.store(any);
  }
  return std::make_unique<lmdb_kv>(std::move(h), false, bound);
}

std::unique_ptr<kv_store> open_lmdb_kv_readonly(const std::string& dir, bool allow_damage) {
  check_before_map(dir, true, allow_damage);
  auto h = open_env(dir, MDB_NOTLS | MDB_RDONLY, 0);
  h->read_only = true;
  h->locate_map();
  MDB_txn* txn = nullptr;
  check("mdb_txn_begin", guarded_call("mdb_txn_begin", [&] {
          return ::mdb_txn_begin(h->env, nullptr, MDB_RDONLY, &txn);
        }));
  MDB_dbi rows;
  int shared =
    guarded_call("mdb_dbi_open", [&] { return ::mdb_dbi_open(txn, shared_db, 0, &rows); });
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
    int rc = guarded_call("mdb_dbi_open",
                          [&] { return ::mdb_dbi_open(txn, table_name(t), 0, &h->dbi[i]); });
    if (rc == MDB_NOTFOUND
        && (t == table::by_created || t == table::by_user_created || t == table::changes
            || t == table::origins || t == table::doomed || t == table::expiry || t == table::fences
            || t == table::session_counts || t == table::app_writes || t == table::outbox
            || t == table::shard_index)) {
      h->tag[i] = env_handle::absent_table; // a store of a format before the table's
      continue;
    }
    if (rc != MDB_SUCCESS) {
      ::mdb_txn_abort(txn);
      if (rc == MDB_NOTFOUND) // a table its format has is gone: its name or record damaged
        throw kv_failure{errc::data_corrupt,
                         std::string("store lacks table '") + table_name(static_cast<table>(i))
                           + "' (the store is damaged)"};
      fail("mdb_dbi_open", rc);
    }
  }
  // Committing a read-only transaction keeps its database handles open.
  check("mdb_txn_commit", guarded_call("mdb_txn_commit", [&] { return ::mdb_txn_commit(txn); }));
  return std::make_unique<lmdb_kv>(std::move(h), true);
}

} // namespace agentstate::store
