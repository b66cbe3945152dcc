// SPDX-License-Identifier: Apache-2.0
#include "store/commit.hpp"

#include <exception>
#include <memory>

#include "store/apply.hpp"

namespace agentstate::store {

namespace {

void fail(batch_entry& e, errc code, std::string message) {
  e.code = code;
  e.message = std::move(message);
}

// Runs `fn`, one transaction's work; if it throws, every entry not already
// failed fails with that error: the transaction, or its commit, failed and
// none of them is stored.
template <class F>
void or_fail_rest(std::vector<batch_entry>& entries, F&& fn) {
  auto fail_rest = [&entries](errc code, const std::string& message) {
    for (auto& e : entries)
      if (e.code == errc::ok)
        fail(e, code, message);
  };
  try {
    fn();
  } catch (const kv_failure& f) {
    fail_rest(f.code, f.message);
  } catch (const std::exception& e) {
    fail_rest(errc::internal, std::string("writer: ") + e.what());
  }
}

// Every entry straight into one transaction. A precondition failure has
// written nothing (apply's contract), so it fails alone. Returns false, with
// the transaction aborted and every outcome reset, when an entry throws (it
// may have written part of itself, which only a savepoint can take back) or
// is late (resolve accumulates into it, so it cannot run twice).
bool commit_direct(kv_store& kv, std::vector<batch_entry>& entries) {
  for (auto& e : entries)
    if (e.late)
      return false;
  std::unique_ptr<kv_write> txn;
  std::size_t ok = 0;
  try {
    txn = kv.begin_write();
    for (auto& e : entries) {
      e.txn_id = txn->txn_id();
      auto r = apply(*txn, *e.ws);
      if (r)
        ++ok;
      else
        fail(e, r.code(), r.err().message);
    }
  } catch (...) { // kv_failure, bad_alloc, a throwing put of any kind
    for (auto& e : entries) {
      e.code = errc::ok;
      e.message.clear();
    }
    return false;
  }
  or_fail_rest(entries, [&] {
    if (ok > 0)
      txn->commit();
  });
  return true;
}

result<void> resolve_and_apply(kv_write& txn, std::vector<batch_entry>& entries, std::size_t i,
                               const resolve_fn& resolve) {
  auto& e = entries[i];
  if (e.late) {
    if (!resolve)
      return error{errc::internal, "a late-bound write set without a resolver"};
    if (auto r = resolve(txn, i); !r)
      return r;
  }
  return apply(txn, *e.ws);
}

// A savepoint per entry, so an entry that throws part-way fails alone.
void commit_isolated(kv_store& kv, std::vector<batch_entry>& entries, const resolve_fn& resolve) {
  or_fail_rest(entries, [&] {
    auto txn = kv.begin_write();
    std::size_t ok = 0;
    for (std::size_t i = 0; i < entries.size(); ++i) {
      auto& e = entries[i];
      e.txn_id = txn->txn_id();
      txn->begin_nested();
      try {
        auto r = resolve_and_apply(*txn, entries, i, resolve);
        if (r) {
          txn->commit_nested();
          ++ok;
          continue;
        }
        fail(e, r.code(), r.err().message);
      } catch (const kv_failure& f) {
        fail(e, f.code, f.message);
      }
      txn->abort_nested();
    }
    if (ok > 0)
      txn->commit();
  });
}

// For a store that cannot nest transactions (an LMDB writable map, nosync):
// one transaction per entry. Costs a commit (no flush in nosync) per entry.
void commit_each(kv_store& kv, std::vector<batch_entry>& entries, const resolve_fn& resolve) {
  for (std::size_t i = 0; i < entries.size(); ++i) {
    auto& e = entries[i];
    try {
      auto txn = kv.begin_write();
      e.txn_id = txn->txn_id();
      auto r = resolve_and_apply(*txn, entries, i, resolve);
      if (r)
        txn->commit();
      else // the transaction aborts as it goes out of scope
        fail(e, r.code(), r.err().message);
    } catch (const kv_failure& f) {
      fail(e, f.code, f.message);
    } catch (const std::exception& x) {
      fail(e, errc::internal, std::string("writer: ") + x.what());
    }
  }
}

} // namespace

void commit_batch(kv_store& kv, std::vector<batch_entry>& entries, const resolve_fn& resolve) {
  if (commit_direct(kv, entries))
    return;
  if (kv.nests())
    commit_isolated(kv, entries, resolve);
  else
    commit_each(kv, entries, resolve);
}

result<void> commit_one(kv_store& kv, table t, std::string_view key, std::string_view value) {
  try {
    auto w = kv.begin_write();
    w->put(t, key, value);
    w->commit();
    return {};
  } catch (const kv_failure& f) {
    return error{f.code, f.message};
  }
}

result<void> sync(kv_store& kv) {
  try {
    kv.sync();
    return {};
  } catch (const kv_failure& f) {
    return error{f.code, f.message};
  }
}

} // namespace agentstate::store
