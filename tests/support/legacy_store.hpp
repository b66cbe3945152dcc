// SPDX-License-Identifier: Apache-2.0
// tests/support/legacy_store.hpp: turning a store this build wrote back into
// what an older format wrote (format 3: bare values, no creation-order
// indexes, no log, no origins; format 6: no origins; format 10: no shard
// index), directly through LMDB,
// for the upgrade tests. Test-only.
#pragma once

#include <doctest/doctest.h>
#include <lmdb.h>

#include <string>
#include <utility>
#include <vector>

#include "store/keys.hpp"
#include "store/kv.hpp"
#include "store/records.hpp"

namespace agentstate::test {

/// Format 3's value of row `key` of `t`, whose format 4 value is `sealed`.
inline std::string legacy_value(store::table t, std::string_view key, std::string_view sealed) {
  auto body = store::open_row(t, key, sealed, false);
  REQUIRE(body);
  switch (t) {
    case store::table::sessions:
    case store::table::events: return '\x01' + std::string(*body);
    case store::table::by_update:
    case store::table::by_user: return {};
    default: return std::string(*body);
  }
}

/// Rewrites every value of the LMDB database `dbi` in `txn` with fn(key,
/// value) (a null result keeps the row as it is).
template <class F>
void rewrite_values(MDB_txn* txn, MDB_dbi dbi, F&& fn) {
  std::vector<std::pair<std::string, std::string>> rows;
  MDB_cursor* c = nullptr;
  REQUIRE(mdb_cursor_open(txn, dbi, &c) == 0);
  MDB_val k, v;
  for (int rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0;
       rc = mdb_cursor_get(c, &k, &v, MDB_NEXT))
    rows.emplace_back(std::string(static_cast<const char*>(k.mv_data), k.mv_size),
                      std::string(static_cast<const char*>(v.mv_data), v.mv_size));
  mdb_cursor_close(c);
  for (auto& [key, value] : rows) {
    auto nv = fn(key, value);
    MDB_val mk{key.size(), key.data()}, mv{nv.size(), nv.data()};
    REQUIRE(mdb_put(txn, dbi, &mk, &mv, 0) == 0);
  }
}

/// Whether format 3 had table `t` (formats 1-4 had no creation-order
/// indexes, formats 1-6 no origins and no purge marks).
inline bool format3_table(store::table t) {
  return t != store::table::by_created && t != store::table::by_user_created
    && t != store::table::origins && t != store::table::doomed && t != store::table::expiry
    && t != store::table::fences && t != store::table::session_counts
    && t != store::table::app_writes && t != store::table::outbox && t != store::table::shard_index;
}

/// Deletes every row of `rows` for which `doomed(t, key)` holds (its table
/// and its key within the table).
template <class Pred>
void drop_rows_of(MDB_txn* txn, Pred doomed) {
  MDB_dbi rows;
  REQUIRE(mdb_dbi_open(txn, "rows", 0, &rows) == 0);
  std::vector<std::string> keys;
  MDB_cursor* c = nullptr;
  REQUIRE(mdb_cursor_open(txn, rows, &c) == 0);
  MDB_val k, v;
  for (int rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0;
       rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
    REQUIRE(k.mv_size > 0);
    std::string_view key(static_cast<const char*>(k.mv_data), k.mv_size);
    if (doomed(static_cast<store::table>(key[0]), key.substr(1)))
      keys.emplace_back(key);
  }
  mdb_cursor_close(c);
  for (auto& key : keys) {
    MDB_val mk{key.size(), key.data()};
    REQUIRE(mdb_del(txn, rows, &mk, nullptr) == 0);
  }
}

/// Deletes every state tally row (store format 8): formats 7 and older kept
/// none.
inline void drop_tallies(MDB_txn* txn) {
  drop_rows_of(txn,
               [](store::table t, std::string_view key) { return store::is_tally_key(t, key); });
}

/// Deletes every app's and user's session count row (store format 9):
/// formats 8 and older kept none.
inline void drop_session_counts(MDB_txn* txn) {
  drop_rows_of(txn,
               [](store::table t, std::string_view) { return t == store::table::session_counts; });
}

/// Deletes every shard index entry (store format 11): formats 10 and older
/// kept none.
inline void drop_shard_index(MDB_txn* txn) {
  drop_rows_of(txn,
               [](store::table t, std::string_view) { return t == store::table::shard_index; });
}

/// Makes a closed store this build wrote what format 10 wrote: no shard
/// index, meta["format"] "10".
inline void make_format10(MDB_txn* txn) {
  drop_shard_index(txn);
  MDB_dbi meta;
  REQUIRE(mdb_dbi_open(txn, "meta", 0, &meta) == 0);
  std::string fk = "format", fv = "10";
  MDB_val mk{fk.size(), fk.data()}, mv{fv.size(), fv.data()};
  REQUIRE(mdb_put(txn, meta, &mk, &mv, 0) == 0);
}

/// Makes a closed store this build wrote what format 6 wrote: no origin
/// rows, no session counts, no shard index, meta["format"] "6".
inline void make_format6(MDB_txn* txn) {
  drop_rows_of(txn, [](store::table t, std::string_view) {
    return t == store::table::origins || t == store::table::session_counts
      || t == store::table::shard_index;
  });
  MDB_dbi meta;
  REQUIRE(mdb_dbi_open(txn, "meta", 0, &meta) == 0);
  std::string fk = "format", fv = "6";
  MDB_val mk{fk.size(), fk.data()}, mv{fv.size(), fv.data()};
  REQUIRE(mdb_put(txn, meta, &mk, &mv, 0) == 0);
}

/// Deletes the rows of the tables format 3 did not have from `rows` (the
/// creation-order indexes, origins, purge marks, session counts and the shard
/// index).
inline void drop_created_indexes(MDB_txn* txn) {
  drop_rows_of(txn, [](store::table t, std::string_view) { return !format3_table(t); });
}

/// Makes the closed format-5 store in `dir` what format 3 wrote: values
/// bare, no creation-order indexes, meta["format"] "3". `txn` is a write
/// transaction on it.
inline void unseal_store(MDB_txn* txn) {
  drop_created_indexes(txn);
  MDB_dbi rows, events, meta;
  REQUIRE(mdb_dbi_open(txn, "rows", 0, &rows) == 0);
  REQUIRE(mdb_dbi_open(txn, "events", 0, &events) == 0);
  REQUIRE(mdb_dbi_open(txn, "meta", 0, &meta) == 0);
  rewrite_values(txn, rows, [](const std::string& k, const std::string& v) {
    REQUIRE(k.size() > 1);
    return legacy_value(static_cast<store::table>(k[0]), std::string_view(k).substr(1), v);
  });
  rewrite_values(txn, events, [](const std::string& k, const std::string& v) {
    return legacy_value(store::table::events, k, v);
  });
  std::string fk = "format", fv = "3";
  MDB_val mk{fk.size(), fk.data()}, mv{fv.size(), fv.data()};
  REQUIRE(mdb_put(txn, meta, &mk, &mv, 0) == 0);
}

} // namespace agentstate::test
