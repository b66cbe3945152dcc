// SPDX-License-Identifier: Apache-2.0
#include "store/commit.hpp"

#include <exception>
#include <memory>
#include <optional>

#include "store/apply.hpp"

namespace agentstate::store {

namespace {

void fail(batch_entry& e, errc code, std::string message) {
  e.code = code;
  e.message = std::move(message);
}

// Notes the sequence entry `e` took, when apply logged it.
void note_seq(batch_entry& e, bool wrote, const change_log* log) {
  e.seq = log && wrote ? log->next - 1 : 0;
}

// Trims the log before a transaction that logged `logged` entries commits:
// at most two old rows per new one (and 16 more), so a log over its bound
// shrinks back within a few commits and no commit pays for all of it.
void trim(kv_write& txn, change_log* log, std::size_t logged) {
  if (log)
    trim_log(txn, *log, 2 * logged + 16);
}

void restore(change_log* log, const std::optional<change_log>& saved) {
  if (log && saved)
    *log = *saved;
}

// Commits `txn`; if the commit throws, `log` goes back to `saved` (nothing
// of the transaction is stored) and the failure propagates.
void commit_or_restore(kv_write& txn, change_log* log, const std::optional<change_log>& saved) {
  try {
    txn.commit();
  } catch (...) {
    restore(log, saved);
    throw;
  }
}

// Calls `seal` (when set) with the entries of [from, to) that succeeded.
void seal_txn(kv_write& txn, const std::vector<batch_entry>& entries, std::size_t from,
              std::size_t to, const seal_fn& seal) {
  if (!seal)
    return;
  std::vector<std::size_t> ok;
  for (std::size_t i = from; i < to; ++i)
    if (entries[i].code == errc::ok)
      ok.push_back(i);
  if (!ok.empty())
    seal(txn, ok);
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
bool commit_direct(kv_store& kv, std::vector<batch_entry>& entries, change_log* log,
                   const seal_fn& seal) {
  for (auto& e : entries)
    if (e.late)
      return false;
  std::unique_ptr<kv_write> txn;
  std::size_t ok = 0;
  const auto saved = log ? std::optional<change_log>(*log) : std::nullopt;
  try {
    txn = kv.begin_write();
    for (auto& e : entries) {
      e.txn_id = txn->txn_id();
      auto r = apply(*txn, *e.ws, log);
      if (r) {
        note_seq(e, *r, log);
        ++ok;
      } else {
        fail(e, r.code(), r.err().message);
      }
    }
    if (ok > 0) {
      trim(*txn, log, ok);
      seal_txn(*txn, entries, 0, entries.size(), seal);
    }
  } catch (...) { // kv_failure, bad_alloc, a throwing put of any kind
    for (auto& e : entries) {
      e.code = errc::ok;
      e.message.clear();
      e.seq = 0;
    }
    restore(log, saved);
    return false;
  }
  or_fail_rest(entries, [&] {
    if (ok > 0)
      commit_or_restore(*txn, log, saved);
  });
  return true;
}

// Resolves entry i when it is late, applies it and logs it. Throws
// kv_failure (the caller's savepoint or transaction takes its writes back).
result<void> resolve_and_apply(kv_write& txn, std::vector<batch_entry>& entries, std::size_t i,
                               const resolve_fn& resolve, change_log* log) {
  auto& e = entries[i];
  if (e.late) {
    if (!resolve)
      return error{errc::internal, "a late-bound write set without a resolver"};
    if (auto r = resolve(txn, i); !r)
      return r;
  }
  auto r = apply(txn, *e.ws, log);
  if (!r)
    return std::move(r).err();
  note_seq(e, *r, log);
  return {};
}

// A savepoint per entry, so an entry that throws part-way fails alone.
void commit_isolated(kv_store& kv, std::vector<batch_entry>& entries, const resolve_fn& resolve,
                     change_log* log, const seal_fn& seal) {
  const auto saved = log ? std::optional<change_log>(*log) : std::nullopt;
  or_fail_rest(entries, [&] {
    auto txn = kv.begin_write();
    std::size_t ok = 0;
    for (std::size_t i = 0; i < entries.size(); ++i) {
      auto& e = entries[i];
      e.txn_id = txn->txn_id();
      const auto before = log ? std::optional<change_log>(*log) : std::nullopt;
      txn->begin_nested();
      try {
        auto r = resolve_and_apply(*txn, entries, i, resolve, log);
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
      e.seq = 0;
      restore(log, before);
    }
    if (ok > 0) {
      trim(*txn, log, ok);
      seal_txn(*txn, entries, 0, entries.size(), seal);
      commit_or_restore(*txn, log, saved);
    }
  });
}

// For a store that cannot nest transactions (an LMDB writable map, nosync):
// one transaction per entry. Costs a commit (no flush in nosync) per entry.
void commit_each(kv_store& kv, std::vector<batch_entry>& entries, const resolve_fn& resolve,
                 change_log* log, const seal_fn& seal) {
  for (std::size_t i = 0; i < entries.size(); ++i) {
    auto& e = entries[i];
    const auto saved = log ? std::optional<change_log>(*log) : std::nullopt;
    try {
      auto txn = kv.begin_write();
      e.txn_id = txn->txn_id();
      auto r = resolve_and_apply(*txn, entries, i, resolve, log);
      if (r) {
        trim(*txn, log, 1);
        seal_txn(*txn, entries, i, i + 1, seal);
        commit_or_restore(*txn, log, saved);
      } else { // the transaction aborts as it goes out of scope
        fail(e, r.code(), r.err().message);
        restore(log, saved);
      }
    } catch (const kv_failure& f) {
      fail(e, f.code, f.message);
      restore(log, saved);
    } catch (const std::exception& x) {
      fail(e, errc::internal, std::string("writer: ") + x.what());
      restore(log, saved);
    }
    if (e.code != errc::ok)
      e.seq = 0;
  }
}

} // namespace

void commit_batch(kv_store& kv, std::vector<batch_entry>& entries, const resolve_fn& resolve,
                  change_log* log, double now, const seal_fn& seal) {
  if (log)
    log->now = now;
  if (!commit_direct(kv, entries, log, seal)) {
    if (kv.nests())
      commit_isolated(kv, entries, resolve, log, seal);
    else
      commit_each(kv, entries, resolve, log, seal);
  }
  for (auto& e : entries)
    if (e.code != errc::ok)
      e.seq = 0;
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
