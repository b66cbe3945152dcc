// SPDX-License-Identifier: Apache-2.0
// store/lmdb_txn.hpp: LMDB read and write transactions behind kv_read and
// kv_write. Each is used by one thread at a time (MDB_NOTLS lets a read
// transaction move between threads). Internal to store/.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "store/lmdb_handle.hpp"
#include "store/map_guard.hpp"

namespace agentstate::store::lmdb_detail {

using map_guard::guarded_call;

// Reads shared by read and write transactions, on the current MDB_txn. Every
// LMDB call runs under a map_guard point and every key and value it returns
// is checked against the pages the file backs (checked_view), so a damaged
// page is data_corrupt, never a signal.
class lmdb_reader {
protected:
  lmdb_reader(env_handle& h) : h_(h) {}
  // Called once the transaction has begun: the newest committed snapshot is
  // then at least the transaction's own, so every page it reads lies below.
  void bound_pages() { backed_ = h_.backed_bytes(); }

  std::string_view view(const MDB_val& v) const {
    return checked_view(v, h_.map, h_.map_size, backed_);
  }

  int tag(table t) const { return h_.tag[static_cast<int>(t)]; }
  MDB_dbi dbi(table t) const { return h_.dbi[static_cast<int>(t)]; }

  bool absent(table t) const { return tag(t) == env_handle::absent_table; }

  std::optional<std::string_view> do_get(MDB_txn* txn, table t, std::string_view key) {
    if (absent(t))
      return std::nullopt;
    stored_key sk(tag(t), key);
    MDB_val k = sk.val(), v;
    int rc = guarded_call("mdb_get", [&] { return ::mdb_get(txn, dbi(t), &k, &v); });
    if (rc == MDB_NOTFOUND)
      return std::nullopt;
    check("mdb_get", rc);
    return view(v);
  }

  // Visits the entries of t from the cursor's position (the entry in k, v
  // when rc is MDB_SUCCESS) while their keys, the table's byte stripped,
  // start with `prefix`, moving by `step`.
  void visit(cursor_guard& c, int rc, MDB_val k, MDB_val v, MDB_cursor_op step, table t,
             std::string_view prefix, const kv_visitor& fn) {
    // One guard point for the whole walk (not one per step): walk() arms it
    // around each mdb_cursor_get only; `fn` runs under the caller's point.
    // Nothing here changes after sigsetjmp; walk()'s frame holds no object
    // with a destructor, so leaving it by siglongjmp skips none.
    struct position {
      int rc;
      MDB_val k, v;
    } at{rc, k, v}; // in memory: nothing live across sigsetjmp sits in a register
    map_guard::point p;
    map_guard::point* const outer = map_guard::armed();
    if (sigsetjmp(p.jump, 0) != 0) {
      map_guard::arm(outer);
      map_guard::raise(p, "mdb_cursor_get");
    }
    walk(p, outer, c, at.rc, at.k, at.v, step, t, prefix, fn);
  }

  void walk(map_guard::point& p, map_guard::point* outer, cursor_guard& c, int rc, MDB_val k,
            MDB_val v, MDB_cursor_op step, table t, std::string_view prefix, const kv_visitor& fn) {
    const int tg = tag(t);
    const std::size_t skip = tg < 0 ? 0 : 1;
    while (rc == MDB_SUCCESS) {
      auto key = view(k);
      if (key.size() < skip || (skip && key[0] != static_cast<char>(tg)))
        return;
      key.remove_prefix(skip);
      if (!has_prefix(key, prefix) || !fn(key, view(v)))
        return;
      map_guard::arm(&p);
      rc = ::mdb_cursor_get(c.get(), &k, &v, step);
      map_guard::arm(outer);
    }
    if (rc != MDB_NOTFOUND)
      fail("mdb_cursor_get", rc);
  }

  void do_scan(MDB_txn* txn, table t, std::string_view prefix, std::string_view from,
               const kv_visitor& fn) {
    if (absent(t))
      return;
    cursor_guard c(txn, dbi(t));
    stored_key start(tag(t), !from.empty() && from > prefix ? from : prefix);
    MDB_val k = start.val(), v;
    int rc = guarded_call("mdb_cursor_get", [&] {
      return ::mdb_cursor_get(c.get(), &k, &v, k.mv_size == 0 ? MDB_FIRST : MDB_SET_RANGE);
    });
    visit(c, rc, k, v, MDB_NEXT, t, prefix, fn);
  }

  void do_scan_back(MDB_txn* txn, table t, std::string_view prefix, std::string_view from,
                    const kv_visitor& fn) {
    if (absent(t))
      return;
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
      rc = get(c, k, v, MDB_SET_RANGE);
      if (rc == MDB_SUCCESS && as_view(k) != as_view(want))
        rc = get(c, k, v, MDB_PREV);
      else if (rc == MDB_NOTFOUND)
        rc = get(c, k, v, MDB_LAST);
      visit(c, rc, k, v, MDB_PREV, t, prefix, fn);
      return;
    }
    stored_key upper(tag(t), prefix);
    if (!upper.to_upper_bound()) {
      rc = get(c, k, v, MDB_LAST);
    } else {
      k = upper.val();
      rc = get(c, k, v, MDB_SET_RANGE);
      if (rc == MDB_SUCCESS)
        rc = get(c, k, v, MDB_PREV);
      else if (rc == MDB_NOTFOUND)
        rc = get(c, k, v, MDB_LAST);
    }
    visit(c, rc, k, v, MDB_PREV, t, prefix, fn);
  }

  // One guarded cursor step.
  static int get(cursor_guard& c, MDB_val& k, MDB_val& v, MDB_cursor_op op) {
    return guarded_call("mdb_cursor_get", [&] { return ::mdb_cursor_get(c.get(), &k, &v, op); });
  }

  env_handle& h_;
  std::size_t backed_ = 0; // the map's file-backed bytes once the transaction began
};

class lmdb_read : public kv_read, lmdb_reader {
public:
  explicit lmdb_read(env_handle& h) : lmdb_reader(h) {
    check("mdb_txn_begin(read)", guarded_call("mdb_txn_begin", [&] {
            return ::mdb_txn_begin(h.env, nullptr, MDB_RDONLY, &txn_);
          }));
    bound_pages();
    if (h.read_only) {
      try {
        auto fmt = do_get(txn_, table::meta, "format");
        legacy_ = fmt && (*fmt == "1" || *fmt == "2" || *fmt == "3");
      } catch (...) {
        ::mdb_txn_abort(txn_);
        throw;
      }
    }
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
  bool legacy_values() const override { return legacy_; }
  bool may_hold_fences() const override { return h_.fences.load(); }
  MDB_txn* handle() const { return txn_; }

private:
  MDB_txn* txn_ = nullptr;
  bool legacy_ = false; // formats 1-3, read-only (kv_read::legacy_values)
};

class lmdb_write : public kv_write, lmdb_reader {
public:
  explicit lmdb_write(env_handle& h) : lmdb_reader(h) {
    if (h.writes_refused.load(std::memory_order_acquire))
      throw kv_failure{errc::data_corrupt,
                       "writes are refused: an earlier write met a damaged page of store '" + h.dir
                         + "' (reads go on; `agentstate salvage` copies what reads clean)"};
    MDB_txn* txn = nullptr;
    check("mdb_txn_begin(write)", guarding([&] {
            return guarded_call("mdb_txn_begin",
                                [&] { return ::mdb_txn_begin(h.env, nullptr, 0, &txn); });
          }));
    stack_.push_back(txn);
    id_ = ::mdb_txn_id(txn);
    bound_pages();
  }
  ~lmdb_write() override {
    // Aborting the outermost transaction aborts its children too.
    if (!stack_.empty())
      ::mdb_txn_abort(stack_.front());
  }
  std::optional<std::string_view> get(table t, std::string_view key) override {
    return guarding([&] { return do_get(top(), t, key); });
  }
  void scan(table t, std::string_view prefix, std::string_view from,
            const kv_visitor& fn) override {
    guarding([&] { do_scan(top(), t, prefix, from, fn); });
  }
  void scan_back(table t, std::string_view prefix, std::string_view from,
                 const kv_visitor& fn) override {
    guarding([&] { do_scan_back(top(), t, prefix, from, fn); });
  }
  std::uint64_t txn_id() const override { return id_; }

  bool may_hold_fences() const override { return h_.fences.load(); }
  void put(table t, std::string_view key, std::string_view value) override {
    if (t == table::fences)
      h_.fences.store(true);
    stored_key sk(tag(t), key);
    MDB_val k = sk.val(), v = as_val(value);
    check("mdb_put", guarding([&] {
            return guarded_call("mdb_put", [&] { return ::mdb_put(top(), dbi(t), &k, &v, 0); });
          }));
  }
  bool del(table t, std::string_view key) override {
    stored_key sk(tag(t), key);
    MDB_val k = sk.val();
    int rc = guarding([&] {
      return guarded_call("mdb_del", [&] { return ::mdb_del(top(), dbi(t), &k, nullptr); });
    });
    if (rc == MDB_NOTFOUND)
      return false;
    check("mdb_del", rc);
    return true;
  }
  /// Format upgrades (store/lmdb_migration.cpp).
  void drop_table(std::string_view name) override;
  void absorb_table(table t) override;
  void begin_nested() override {
    MDB_txn* child = nullptr;
    check("mdb_txn_begin(nested)", guarding([&] {
            return guarded_call("mdb_txn_begin",
                                [&] { return ::mdb_txn_begin(h_.env, top(), 0, &child); });
          }));
    stack_.push_back(child);
  }
  void commit_nested() override {
    // A fault inside the commit leaves the transaction ours (still on the
    // stack, aborted with the rest); any return of LMDB's has freed it.
    MDB_txn* child = stack_.back();
    int rc = guarded_commit(child);
    stack_.pop_back();
    check_write("mdb_txn_commit(nested)", rc, h_.dir);
  }
  void abort_nested() noexcept override {
    ::mdb_txn_abort(stack_.back());
    stack_.pop_back();
  }
  void commit() override {
    MDB_txn* txn = stack_.front();
    int rc = guarded_commit(txn);
    stack_.clear();
    check_write("mdb_txn_commit", rc, h_.dir);
  }

private:
  MDB_txn* top() const { return stack_.back(); }
  // Runs `f`; a map_fault from it refuses this store's writes from now on
  // and leaves the transaction unaborted (env_handle::writes_refused).
  template <class F>
  auto guarding(F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const map_guard::map_fault&) {
      h_.writes_refused.store(true, std::memory_order_release);
      stack_.clear();
      throw;
    }
  }
  // mdb_txn_commit(t) under guarding(); LMDB's return code.
  int guarded_commit(MDB_txn* t) {
    return guarding(
      [&] { return guarded_call("mdb_txn_commit", [&] { return ::mdb_txn_commit(t); }); });
  }
  std::vector<MDB_txn*> stack_;
  std::uint64_t id_ = 0;
};

} // namespace agentstate::store::lmdb_detail
