// SPDX-License-Identifier: Apache-2.0
// store/lmdb_txn.hpp: LMDB read and write transactions behind kv_read and
// kv_write. Each is used by one thread at a time (MDB_NOTLS lets a read
// transaction move between threads). Internal to store/.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <optional>
#include <string_view>
#include <vector>

#include "store/lmdb_handle.hpp"
#include "store/tree_counts.hpp"
#include "store/map_guard.hpp"

namespace agentstate::store::lmdb_detail {

using map_guard::guarded_call;

// LMDB 0.9's page and node layout (mdb.c: MDB_page, MDB_node), read by
// leaf_intact. A page: pgno (8 bytes), pad (2), flags (2), lower (2), upper
// (2), then one 2-byte offset per node; the nodes fill the page from
// `upper` to its end, packed (mdb_node_add places each just below `upper`,
// mdb_node_del moves the others over the gap). A leaf node: data size (lo,
// hi: 2 bytes each), flags (2), key size (2), the key, then the data or,
// for F_BIGDATA, the number of its overflow page (8 bytes); each node's
// size is rounded up to even.
constexpr std::size_t page_header_bytes = 16;
// P_BRANCH, P_LEAF, P_OVERFLOW, P_META, P_LEAF2, P_SUBP: a page's kind (the
// other flag bits say where a write transaction holds it). The store's
// tables are not DUPSORT, so their keys lie on plain leaves only.
constexpr std::uint16_t page_leaf = 0x02, page_overflow = 0x04,
                        page_kinds = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40;
constexpr std::uint16_t node_bigdata = 0x01;

inline std::uint16_t read_u16(const char* p) {
  std::uint16_t x;
  std::memcpy(&x, p, 2);
  return x;
}

/// Whether the leaf page at `page` (`page_size` bytes, inside the map) is
/// laid out as LMDB writes one: its node offsets inside it, its nodes
/// exactly filling the space from `upper` to its end. A page whose node
/// count (`lower`) lost or gained entries, or whose offsets were damaged,
/// is not: LMDB itself would walk it and silently skip or repeat rows.
/// Pages of any other kind pass (LMDB checks what it reads of them).
inline bool leaf_intact(const char* page, std::size_t page_size) {
  const std::uint16_t flags = read_u16(page + 10);
  if ((flags & page_kinds) != page_leaf)
    return true;
  const std::size_t lower = read_u16(page + 12), upper = read_u16(page + 14);
  if (lower < page_header_bytes || (lower - page_header_bytes) % 2 != 0 || upper < lower
      || upper > page_size)
    return false;
  std::size_t filled = 0;
  for (std::size_t at = page_header_bytes; at < lower; at += 2) {
    const std::size_t node = read_u16(page + at);
    if (node < upper || node + 8 > page_size)
      return false;
    const char* n = page + node;
    std::size_t size = 8 + std::size_t{read_u16(n + 6)};
    size += (read_u16(n + 4) & node_bigdata)
      ? 8
      : (std::size_t{read_u16(n)} | (std::size_t{read_u16(n + 2)} << 16));
    size += size & 1;
    if (node + size > page_size)
      return false;
    filled += size;
  }
  return filled == page_size - upper;
}

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

  // data_corrupt unless the leaf page holding `node` is intact
  // (leaf_intact; checked again only when a read moves to another page);
  // memory outside the map (a write transaction's own pages) is not
  // checked.
  //
  // `node` is the node LMDB read the key from (the key's address less the
  // node's 8-byte header): it must also be one the page lists, or LMDB's
  // cursor stood on an index the page does not have (a page that lost its
  // entries is stepped into at its "last" one).
  void check_node(const char* node) {
    if (!h_.map || !h_.page_size)
      return;
    auto at = reinterpret_cast<std::uintptr_t>(node),
         base = reinterpret_cast<std::uintptr_t>(h_.map);
    if (at < base || at - base >= backed_)
      return;
    const std::size_t number = (at - base) / h_.page_size;
    const char* page = h_.map + number * h_.page_size;
    if ((read_u16(page + 10) & page_kinds) != page_leaf)
      throw kv_failure{errc::data_corrupt,
                       "page " + std::to_string(number)
                         + " of the store is damaged: a read reached a key on a page that is "
                           "not a leaf"};
    if (page != checked_page_) {
      if (!leaf_intact(page, h_.page_size))
        throw kv_failure{errc::data_corrupt,
                         "page " + std::to_string(number)
                           + " of the store is damaged: its entries do not fill it as LMDB "
                             "writes them (rows on it may be missing)"};
      checked_page_ = page;
    }
    const std::size_t offset = static_cast<std::size_t>(node - page);
    const std::size_t lower = read_u16(page + 12);
    for (std::size_t i = page_header_bytes; i < lower; i += 2)
      if (read_u16(page + i) == offset)
        return;
    throw kv_failure{errc::data_corrupt,
                     "page " + std::to_string(number)
                       + " of the store is damaged: a read reached an entry "
                         "the page does not list"};
  }
  void check_key(const MDB_val& k) {
    if (k.mv_size == 0) // the store writes no empty key; LMDB reads one off a damaged page
      throw kv_failure{errc::data_corrupt, "the store's B-tree is damaged: an empty key"};
    check_node(static_cast<const char*>(k.mv_data) - 8);
  }
  // The node of value `v` of a key of `key_size` bytes, unless the value
  // lies on an overflow page of its own (whose page LMDB checks).
  void check_value(const MDB_val& v, std::size_t key_size) {
    if (!h_.map || !h_.page_size)
      return;
    auto at = reinterpret_cast<std::uintptr_t>(v.mv_data),
         base = reinterpret_cast<std::uintptr_t>(h_.map);
    if (at < base || at - base >= backed_)
      return;
    const char* page = h_.map + (at - base) / h_.page_size * h_.page_size;
    if ((read_u16(page + 10) & page_kinds) == page_overflow)
      return;
    check_node(static_cast<const char*>(v.mv_data) - key_size - 8);
  }

  // After a cursor found no key where the tree should hold some (FIRST,
  // LAST, or a search past the last key): data_corrupt unless the
  // database's own count agrees that it is empty (a leaf that lost every
  // entry hides the rows before or after it).
  void confirm_empty(cursor_guard& c, table t) {
    MDB_stat st;
    check("mdb_stat", guarded_call("mdb_stat", [&] {
            return ::mdb_stat(::mdb_cursor_txn(c.get()), ::mdb_cursor_dbi(c.get()), &st);
          }));
    if (st.ms_entries != 0)
      out_of_order(t,
                   "a walk found no rows where the tree counts " + std::to_string(st.ms_entries));
  }

  [[noreturn]] static void out_of_order(table t, std::string_view what) {
    throw kv_failure{errc::data_corrupt,
                     std::string("the ") + table_name(t)
                       + " B-tree is damaged: " + std::string(what)};
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
    if (rc == MDB_NOTFOUND) {
      confirm_missing(txn, t, k);
      return std::nullopt;
    }
    check("mdb_get", rc);
    auto out = view(v);
    check_value(v, k.mv_size);
    return out;
  }

  // After a get that found no row under `k`: data_corrupt unless the tree
  // agrees, its first key at or after `k` being above it and the key before
  // that below it. A damaged branch key sends LMDB's search into the wrong
  // leaf, where it finds nothing, while the row is still stored.
  void confirm_missing(MDB_txn* txn, table t, const MDB_val& want) {
    cursor_guard c(txn, dbi(t));
    MDB_val k, v;
    int rc = seek_last_before(c, t, want, true, k, v, "a lookup missed a stored key");
    if (rc == MDB_SUCCESS && view(k) == as_view(want))
      out_of_order(t, "a lookup missed a stored key");
    if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND)
      fail("mdb_cursor_get", rc);
  }

  // Puts the cursor on the last key below `want` (at or below it when
  // `inclusive`) and confirms that it sorts there: a damaged branch key can
  // make LMDB's search land late, past stored keys (data_corrupt, `what`).
  // Returns the cursor's rc (MDB_NOTFOUND: no such key), with the key and
  // value in `k` and `v`.
  int seek_last_before(cursor_guard& c, table t, const MDB_val& want, bool inclusive, MDB_val& k,
                       MDB_val& v, const char* what) {
    k = want;
    int rc = get(c, k, v, MDB_SET_RANGE);
    if (rc == MDB_SUCCESS) {
      check_key(k);
      if (!inclusive || view(k) != as_view(want))
        rc = get(c, k, v, MDB_PREV);
    } else if (rc == MDB_NOTFOUND) {
      rc = get(c, k, v, MDB_LAST);
      if (rc == MDB_NOTFOUND)
        confirm_empty(c, t);
    }
    if (rc == MDB_SUCCESS) {
      check_key(k);
      if (inclusive ? view(k) > as_view(want) : view(k) >= as_view(want))
        out_of_order(t, what);
    }
    return rc;
  }

  // After MDB_SET_RANGE put the cursor on `k`, the first key at or after
  // `start` as LMDB's search found it: data_corrupt unless the key before it
  // is below `start` (a damaged branch key makes the search land late,
  // past rows of the range). Leaves the cursor on `k`.
  void confirm_start(cursor_guard& c, table t, const MDB_val& start, const MDB_val& k) {
    MDB_val pk, pv;
    check_key(k);
    int rc = get(c, pk, pv, MDB_PREV);
    if (rc == MDB_SUCCESS) {
      check_key(pk);
      if (view(pk) >= as_view(start))
        out_of_order(t, "a search landed past stored keys");
      // The key before that, too: a damaged key that sorts below its
      // neighbours misleads LMDB's binary search of its page into landing
      // just after it, past the rows before it.
      MDB_val qk, qv;
      int before = get(c, qk, qv, MDB_PREV);
      if (before == MDB_SUCCESS) {
        check_key(qk);
        if (view(qk) >= view(pk))
          out_of_order(t, "keys out of order");
        before = get(c, qk, qv, MDB_NEXT);
      } else if (before == MDB_NOTFOUND) {
        before = get(c, qk, qv, MDB_FIRST);
      }
      if (before != MDB_SUCCESS)
        fail("mdb_cursor_get", before == MDB_NOTFOUND ? MDB_CORRUPTED : before);
      rc = get(c, pk, pv, MDB_NEXT);
    } else if (rc == MDB_NOTFOUND) {
      rc = get(c, pk, pv, MDB_FIRST);
    }
    if (rc != MDB_SUCCESS)
      fail("mdb_cursor_get", rc == MDB_NOTFOUND ? MDB_CORRUPTED : rc);
    if (as_view(pk) != as_view(k))
      out_of_order(t, "keys out of order");
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
    const bool forward = step == MDB_NEXT;
    std::string_view prev; // the stored key visited before (none yet: empty)
    bool inside = true; // the key in k belongs to the walk's range
    while (rc == MDB_SUCCESS) {
      auto stored = view(k);
      check_key(k);
      // Keys come in strict order in an intact tree: a key out of order is
      // a damaged page (a repeated or misplaced node, a key changed).
      if (!prev.empty() && (forward ? stored <= prev : stored >= prev))
        out_of_order(t, "keys out of order");
      if (!inside)
        return; // the key after the one that ended the range: in order
      auto key = stored;
      bool in_range = !(key.size() < skip || (skip && key[0] != static_cast<char>(tg)));
      if (in_range) {
        key.remove_prefix(skip);
        in_range = has_prefix(key, prefix);
      }
      if (in_range && !fn(key, view(v)))
        return;
      // The first key past the range ends the walk once the key after it
      // is seen in order too: a row of the range whose key was damaged
      // into one sorting just above the range would otherwise end the walk
      // early and hide the rows behind it.
      inside = in_range;
      prev = stored;
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
    const MDB_val want = k;
    int rc = guarded_call("mdb_cursor_get", [&] {
      return ::mdb_cursor_get(c.get(), &k, &v, k.mv_size == 0 ? MDB_FIRST : MDB_SET_RANGE);
    });
    if (rc == MDB_SUCCESS && want.mv_size != 0)
      confirm_start(c, t, want, k);
    else if (rc == MDB_NOTFOUND && want.mv_size != 0)
      confirm_none_from(c, t, want);
    else if (rc == MDB_NOTFOUND)
      confirm_empty(c, t);
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
      rc = seek_last_before(c, t, at.val(), true, k, v, "a search landed past stored keys");
      visit(c, rc, k, v, MDB_PREV, t, prefix, fn);
      return;
    }
    stored_key upper(tag(t), prefix);
    if (!upper.to_upper_bound()) {
      rc = get(c, k, v, MDB_LAST);
      if (rc == MDB_NOTFOUND)
        confirm_empty(c, t);
    } else {
      rc = seek_last_before(c, t, upper.val(), false, k, v, "a search landed past stored keys");
    }
    visit(c, rc, k, v, MDB_PREV, t, prefix, fn);
  }

  // One guarded cursor step.
  static int get(cursor_guard& c, MDB_val& k, MDB_val& v, MDB_cursor_op op) {
    return guarded_call("mdb_cursor_get", [&] { return ::mdb_cursor_get(c.get(), &k, &v, op); });
  }

  // After MDB_SET_RANGE found no key at or after `start`: data_corrupt
  // unless the last key is below it.
  void confirm_none_from(cursor_guard& c, table t, const MDB_val& start) {
    MDB_val k, v;
    int rc = get(c, k, v, MDB_LAST);
    if (rc == MDB_SUCCESS) {
      check_key(k);
      if (view(k) >= as_view(start))
        out_of_order(t, "a search missed stored keys");
    } else if (rc == MDB_NOTFOUND) {
      confirm_empty(c, t);
    }
    if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND)
      fail("mdb_cursor_get", rc);
  }

  // recorded_counts: mdb_stat's entry count of each database a
  // table of `txn` lives in.
  std::vector<tree_count> counts_of(MDB_txn* txn) {
    std::vector<tree_count> out;
    std::vector<MDB_dbi> seen;
    for (std::size_t i = 0; i < table_count; ++i) {
      auto t = static_cast<table>(i);
      if (absent(t))
        continue;
      auto at = std::find(seen.begin(), seen.end(), dbi(t));
      if (at != seen.end()) {
        out[static_cast<std::size_t>(at - seen.begin())].tables.push_back(t);
        continue;
      }
      MDB_stat st;
      check("mdb_stat", guarded_call("mdb_stat", [&] { return ::mdb_stat(txn, dbi(t), &st); }));
      seen.push_back(dbi(t));
      out.push_back({{t}, st.ms_entries});
    }
    return out;
  }

  env_handle& h_;
  std::size_t backed_ = 0; // the map's file-backed bytes once the transaction began
  const char* checked_page_ = nullptr; // the leaf page check_node passed last
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
        // Formats 1-7 keep no state tallies (a format is one digit there).
        tallies_ = !(fmt && fmt->size() == 1 && (*fmt)[0] >= '1' && (*fmt)[0] <= '7');
        // Formats 1-8 keep no session counts.
        counts_ = !(fmt && fmt->size() == 1 && (*fmt)[0] >= '1' && (*fmt)[0] <= '8');
        // Formats 1-10 keep no shard index.
        index_ =
          !(fmt && ((fmt->size() == 1 && (*fmt)[0] >= '1' && (*fmt)[0] <= '9') || *fmt == "10"));
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
  bool state_tallies() const override { return tallies_; }
  bool session_counts() const override { return counts_; }
  bool shard_index() const override { return index_; }
  bool may_hold_fences() const override { return h_.fences.load(); }
  std::vector<tree_count> recorded_counts() { return counts_of(txn_); }
  MDB_txn* handle() const { return txn_; }

private:
  MDB_txn* txn_ = nullptr;
  bool legacy_ = false; // formats 1-3, read-only (kv_read::legacy_values)
  bool tallies_ = true; // false: formats 1-7, read-only (kv_read::state_tallies)
  bool counts_ = true; // false: formats 1-8, read-only (kv_read::session_counts)
  bool index_ = true; // false: formats 1-10, read-only (kv_read::shard_index)
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
