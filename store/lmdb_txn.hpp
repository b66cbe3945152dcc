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

namespace agentstate::store::lmdb_detail {

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
  MDB_txn* handle() const { return txn_; }

private:
  MDB_txn* txn_ = nullptr;
  bool legacy_ = false; // formats 1-3, read-only (kv_read::legacy_values)
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
  /// Format upgrades (store/lmdb_migration.cpp).
  void drop_table(std::string_view name) override;
  void absorb_table(table t) override;
  void begin_nested() override {
    MDB_txn* child = nullptr;
    check("mdb_txn_begin(nested)", ::mdb_txn_begin(h_.env, top(), 0, &child));
    stack_.push_back(child);
  }
  void commit_nested() override {
    MDB_txn* child = stack_.back();
    stack_.pop_back();
    check_write("mdb_txn_commit(nested)", ::mdb_txn_commit(child), h_.dir);
  }
  void abort_nested() noexcept override {
    ::mdb_txn_abort(stack_.back());
    stack_.pop_back();
  }
  void commit() override {
    MDB_txn* txn = stack_.front();
    stack_.clear();
    check_write("mdb_txn_commit", ::mdb_txn_commit(txn), h_.dir);
  }

private:
  MDB_txn* top() const { return stack_.back(); }
  std::vector<MDB_txn*> stack_;
  std::uint64_t id_ = 0;
};

} // namespace agentstate::store::lmdb_detail
