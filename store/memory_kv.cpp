// SPDX-License-Identifier: Apache-2.0
// The in-memory kv_store: ordered maps under one reader-writer lock. A write
// transaction holds the lock exclusively for its life; nested transactions are
// savepoints in an undo log. The lock prefers writers, so a stream of readers
// cannot starve the store writer. A thread must not hold two transactions of
// this store at once.
#include "store/kv.hpp"

#include <pthread.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <tuple>
#include <utility>
#include <vector>

namespace agentstate::store {

namespace {

using table_map = std::map<std::string, std::string, std::less<>>;

/// A writer-preferring reader-writer lock (glibc's default, and so
/// std::shared_mutex, prefers readers). Meets SharedMutex for the std locks.
class rw_lock {
public:
  rw_lock() {
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&lock_, &attr);
    pthread_rwlockattr_destroy(&attr);
  }
  ~rw_lock() { pthread_rwlock_destroy(&lock_); }
  rw_lock(const rw_lock&) = delete;
  rw_lock& operator=(const rw_lock&) = delete;
  void lock() { pthread_rwlock_wrlock(&lock_); }
  void unlock() { pthread_rwlock_unlock(&lock_); }
  void lock_shared() { pthread_rwlock_rdlock(&lock_); }
  void unlock_shared() { pthread_rwlock_unlock(&lock_); }

private:
  pthread_rwlock_t lock_;
};

struct memory_db {
  rw_lock mtx;
  table_map tables[table_count];
  std::uint64_t last_txn = 0;
};

bool has_prefix(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.compare(0, p.size(), p) == 0;
}

void scan_map(const table_map& m, std::string_view prefix, std::string_view from,
              const kv_visitor& fn) {
  auto start = from.empty() || from < prefix ? prefix : from;
  for (auto it = m.lower_bound(start); it != m.end(); ++it) {
    if (!has_prefix(it->first, prefix) || !fn(it->first, it->second))
      return;
  }
}

void scan_map_back(const table_map& m, std::string_view prefix, std::string_view from,
                   const kv_visitor& fn) {
  // The first key past every key with `prefix` is prefix with its last byte
  // incremented; with no such byte, the end. With `from`, the first key past it.
  auto it = m.end();
  if (!from.empty() && from < prefix)
    return; // every key with the prefix sorts above `from`
  if (!from.empty() && has_prefix(from, prefix)) {
    it = m.upper_bound(from);
  } else {
    std::string upper(prefix);
    while (!upper.empty() && static_cast<unsigned char>(upper.back()) == 0xff)
      upper.pop_back();
    if (!upper.empty()) {
      upper.back() = static_cast<char>(static_cast<unsigned char>(upper.back()) + 1);
      it = m.lower_bound(upper);
    }
  }
  while (it != m.begin()) {
    --it;
    if (!has_prefix(it->first, prefix) || !fn(it->first, it->second))
      return;
  }
}

// The reads of a transaction over `db` (read or write: Base is kv_read or
// kv_write); the derived transaction holds the lock.
template <class Base>
class memory_reader : public Base {
public:
  explicit memory_reader(memory_db& db) : db_(db) {}
  std::optional<std::string_view> get(table t, std::string_view key) override {
    auto& m = db_.tables[static_cast<int>(t)];
    auto it = m.find(key);
    if (it == m.end())
      return std::nullopt;
    return std::string_view(it->second);
  }
  void scan(table t, std::string_view prefix, std::string_view from,
            const kv_visitor& fn) override {
    scan_map(db_.tables[static_cast<int>(t)], prefix, from, fn);
  }
  void scan_back(table t, std::string_view prefix, std::string_view from,
                 const kv_visitor& fn) override {
    scan_map_back(db_.tables[static_cast<int>(t)], prefix, from, fn);
  }
  bool checksums_needed() const override { return false; }

protected:
  memory_db& db_;
};

class memory_read : public memory_reader<kv_read> {
public:
  explicit memory_read(memory_db& db) : memory_reader(db), lock_(db.mtx) {}
  std::uint64_t txn_id() const override { return db_.last_txn; }
  bool may_hold_fences() const override {
    return !db_.tables[static_cast<int>(table::fences)].empty();
  }

private:
  std::shared_lock<rw_lock> lock_;
};

class memory_write : public memory_reader<kv_write> {
public:
  explicit memory_write(memory_db& db) : memory_reader(db), lock_(db.mtx) {}
  ~memory_write() override {
    if (!done_)
      rollback_to(0);
  }
  std::uint64_t txn_id() const override { return db_.last_txn + 1; }

  // At most one descent of the tree per put; the undo log keeps a pointer to the
  // element (std::map keeps pointers valid through other inserts and
  // erases, and through extract and re-insert), never a copy of the key.
  // The log's room is taken first, so a change is never made without its
  // undo entry (an allocation failure leaves the map as it was).
  void put(table t, std::string_view key, std::string_view value) override {
    auto& m = db_.tables[static_cast<int>(t)];
    room_for_undo();
    // A key past the table's last (the change log's, a new table's) is
    // placed at the end without a descent.
    auto it = !m.empty() && std::prev(m.end())->first < key ? m.end() : m.lower_bound(key);
    if (it == m.end() || it->first != key) {
      it = m.emplace_hint(it, std::piecewise_construct, std::forward_as_tuple(key),
                          std::forward_as_tuple(value));
      undo_.push_back({t, &*it, std::nullopt, {}});
    } else {
      undo_.push_back({t, &*it, std::move(it->second), {}});
      it->second.assign(value.data(), value.size());
    }
  }
  bool del(table t, std::string_view key) override {
    auto& m = db_.tables[static_cast<int>(t)];
    auto it = m.find(key);
    if (it == m.end())
      return false;
    room_for_undo();
    undo_.push_back({t, nullptr, std::nullopt, m.extract(it)});
    return true;
  }
  void drop_table(std::string_view) override {} // holds only `table`'s tables
  void absorb_table(table) override {} // never held an older layout
  void begin_nested() override { savepoints_.push_back(undo_.size()); }
  void commit_nested() override { savepoints_.pop_back(); }
  void abort_nested() noexcept override {
    rollback_to(savepoints_.back());
    savepoints_.pop_back();
  }
  void commit() override {
    done_ = true;
    undo_.clear();
    ++db_.last_txn;
    lock_.unlock(); // the transaction is over, as in LMDB
  }

private:
  // What one put or del changed: a put's element (with the value it
  // replaced, or none when it inserted the key), or a del's removed node.
  struct undo_entry {
    table t;
    table_map::value_type* element;
    std::optional<std::string> old;
    table_map::node_type removed;
  };
  // Makes sure the next push_back of an undo entry does not allocate
  // (capacity doubles, as push_back's own growth would).
  void room_for_undo() {
    if (undo_.size() == undo_.capacity())
      undo_.reserve(std::max<std::size_t>(16, 2 * undo_.capacity()));
  }
  // Undoes entries newest first, so each element an entry points at is in
  // its map again when the entry is undone.
  void rollback_to(std::size_t mark) noexcept {
    while (undo_.size() > mark) {
      auto& u = undo_.back();
      auto& m = db_.tables[static_cast<int>(u.t)];
      if (u.removed)
        m.insert(std::move(u.removed));
      else if (u.old)
        u.element->second = std::move(*u.old);
      else
        m.erase(m.find(u.element->first));
      undo_.pop_back();
    }
  }
  std::unique_lock<rw_lock> lock_;
  std::vector<undo_entry> undo_;
  std::vector<std::size_t> savepoints_;
  bool done_ = false;
};

class memory_kv : public kv_store {
public:
  std::unique_ptr<kv_read> begin_read() override { return std::make_unique<memory_read>(db_); }
  std::unique_ptr<kv_write> begin_write() override { return std::make_unique<memory_write>(db_); }
  void sync() override {}
  void copy_to(const std::string&, bool) override {
    throw kv_failure{errc::internal, "an in-memory store cannot be copied to disk"};
  }
  kv_info info() override {
    std::shared_lock<rw_lock> guard(db_.mtx);
    kv_info out;
    out.last_txn_id = db_.last_txn;
    for (std::size_t i = 0; i < table_count; ++i) {
      out.entries[i] = db_.tables[i].size();
      for (auto& [k, v] : db_.tables[i])
        out.used_bytes += k.size() + v.size();
    }
    return out;
  }

private:
  memory_db db_;
};

} // namespace

const char* table_name(table t) noexcept {
  switch (t) {
    case table::meta: return "meta";
    case table::sessions: return "sessions";
    case table::session_state: return "session_state";
    case table::user_state: return "user_state";
    case table::app_state: return "app_state";
    case table::events: return "events";
    case table::by_update: return "by_update";
    case table::by_user: return "by_user";
    case table::by_created: return "by_created";
    case table::by_user_created: return "by_user_created";
    case table::changes: return "changes";
    case table::origins: return "origins";
    case table::doomed: return "doomed";
    case table::expiry: return "expiry";
    case table::fences: return "fences";
    case table::session_counts: return "session_counts";
    case table::app_writes: return "app_writes";
    case table::outbox: return "outbox";
    case table::shard_index: return "shard_index";
  }
  return "?";
}

std::unique_ptr<kv_store> make_memory_kv() {
  return std::make_unique<memory_kv>();
}

} // namespace agentstate::store
