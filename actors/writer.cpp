// The store writer: the only code that opens write transactions. A detached
// blocking actor that drains its mailbox into one transaction (group commit,
// capped in count and bytes, no timer), makes one failure fail alone (a
// precondition failure writes nothing; a storage failure part-way through a
// write set reruns the batch with a nested transaction per write set, or a
// transaction per write set on a store that cannot nest),
// commits, notifies the user and app actors of committed shared-scope
// writes, and only then answers the session actors (so FIFO mailboxes give
// read-your-writes to scope reads). Polls its mailbox for up to
// options::spin_wait before it sleeps.
#include <vector>

#include <caf/all.hpp>

#include "actors/core.hpp"
#include "actors/messages.hpp"
#include "actors/spin.hpp"
#include "actors/validate.hpp"

namespace agentstate::detail {

namespace {

struct item {
  store::write_set ws;
  caf::response_promise rp;
  write_reply reply;
  std::uint64_t txn_id = 0; ///< the transaction that holds it (if reply is ok)
};

write_reply failure(errc code, std::string message) {
  write_reply r;
  r.code = code;
  r.message = std::move(message);
  return r;
}

void update_max(std::atomic<std::uint64_t>& x, std::uint64_t v) {
  auto cur = x.load(std::memory_order_relaxed);
  while (v > cur && !x.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}

// Runs `fn`, a transaction's work; if it throws (a kv_failure or any
// std::exception), every write set of `batch` not already failed fails with
// that error: the transaction, or its commit, failed and none is stored.
template <class F>
void or_fail_rest(std::vector<item>& batch, F&& fn) {
  auto fail_rest = [&batch](errc code, const std::string& message) {
    for (auto& it : batch)
      if (it.reply.code == errc::ok)
        it.reply = failure(code, message);
  };
  try {
    fn();
  } catch (const store::kv_failure& f) {
    fail_rest(f.code, f.message);
  } catch (const std::exception& e) {
    fail_rest(errc::internal, std::string("writer: ") + e.what());
  }
}

// The usual group commit: every write set applied straight into one
// transaction. A write set that fails a precondition has written nothing
// (store::apply's contract), so it fails alone. Returns false, with the
// transaction aborted and every write set and reply as they came, when a
// write set throws (it may have written part of itself, and only a savepoint
// can take that back: commit_batch_isolated) or when one has a late binding
// (resolve_late accumulates into it, so it cannot be run twice). A failed
// commit fails every write set, as in commit_batch_isolated.
// Costs: LMDB copies each page a transaction dirties once per (nested)
// transaction, so one transaction for the batch instead of one savepoint per
// write set saves a page copy for every page two write sets share.
bool commit_batch_direct(engine_core& core, std::vector<item>& batch) {
  for (auto& it : batch)
    if (it.ws.late)
      return false;
  std::unique_ptr<store::kv_write> txn;
  std::size_t ok = 0;
  try {
    txn = core.kv->begin_write();
    for (auto& it : batch) {
      it.txn_id = txn->txn_id();
      auto r = store::apply(*txn, it.ws);
      if (r)
        ++ok;
      else
        it.reply = failure(r.code(), r.err().message);
    }
  } catch (...) { // kv_failure, bad_alloc, a throwing put of any kind
    for (auto& it : batch)
      it.reply = write_reply{};
    return false;
  }
  or_fail_rest(batch, [&] {
    if (ok > 0)
      txn->commit();
  });
  return true;
}

// The group commit with a savepoint (nested transaction) per write set, so
// a write set that throws part-way fails alone; fills each item's reply.
void commit_batch_isolated(engine_core& core, std::vector<item>& batch) {
  // A throw out of here: the transaction (or its commit) failed and nothing
  // of this batch is stored.
  or_fail_rest(batch, [&] {
    auto txn = core.kv->begin_write();
    std::size_t ok = 0;
    for (auto& it : batch) {
      it.txn_id = txn->txn_id();
      txn->begin_nested();
      try {
        result<void> r;
        if (it.ws.late)
          r = resolve_late(*txn, core, it.ws);
        if (r)
          r = store::apply(*txn, it.ws);
        if (r) {
          txn->commit_nested();
          ++ok;
          continue;
        }
        it.reply = failure(r.code(), r.err().message);
      } catch (const store::kv_failure& f) {
        it.reply = failure(f.code, f.message);
      }
      txn->abort_nested();
    }
    if (ok > 0)
      txn->commit();
  });
}

// commit_batch_isolated for a store that cannot nest transactions (an LMDB
// writable map, nosync): one transaction per write set, so each fails or
// commits alone. Costs a commit (no flush in nosync) per write set.
void commit_each(engine_core& core, std::vector<item>& batch) {
  for (auto& it : batch) {
    try {
      auto txn = core.kv->begin_write();
      it.txn_id = txn->txn_id();
      result<void> r;
      if (it.ws.late)
        r = resolve_late(*txn, core, it.ws);
      if (r)
        r = store::apply(*txn, it.ws);
      if (r)
        txn->commit();
      else // the transaction aborts as it goes out of scope
        it.reply = failure(r.code(), r.err().message);
    } catch (const store::kv_failure& f) {
      it.reply = failure(f.code, f.message);
    } catch (const std::exception& e) {
      it.reply = failure(errc::internal, std::string("writer: ") + e.what());
    }
  }
}

// Tells the live user and app actors about committed shared-scope writes.
void notify_scopes(engine_core& core, std::vector<item>& batch) {
  for (auto& it : batch) {
    if (it.reply.code != errc::ok)
      continue;
    auto& ws = it.ws;
    auto send = [&](std::vector<store::state_write>& writes, const std::string& key) {
      scope_commit msg;
      msg.txn_id = it.txn_id;
      msg.writes.reserve(writes.size());
      for (auto& w : writes)
        msg.writes.push_back({std::move(w.key), std::move(w.value), w.erase});
      core.dir.route(key, std::move(msg), nullptr, true);
    };
    // Most appends write no shared scope: their keys are not even built.
    if (!ws.user_writes.empty())
      send(ws.user_writes, user_dir_key(ws.app, ws.user));
    if (!ws.app_writes.empty())
      send(ws.app_writes, app_dir_key(ws.app));
  }
}

void writer_loop(caf::blocking_actor* self, engine_core* core) {
  std::vector<item> batch;
  std::vector<caf::response_promise> flushes;
  std::size_t bytes = 0;
  bool running = true;
  const auto max_count = core->opts.max_batch_count;
  const auto max_bytes = core->opts.max_batch_bytes;
  auto on_write = [&](write_cmd& c) {
    bytes += c.ws.bytes();
    batch.push_back(item{std::move(c.ws), self->make_response_promise(), {}});
  };
  auto on_flush = [&](flush_cmd&) { flushes.push_back(self->make_response_promise()); };
  auto on_stop = [&](stop_writer_cmd&) { running = false; };
  auto has_mail = [self] { return !self->mailbox().empty(); };
  while (running) {
    spin_until(has_mail, core->opts.spin_wait);
    self->receive(on_write, on_flush, on_stop);
    while (running && batch.size() < max_count && bytes < max_bytes
           && !self->mailbox().empty())
      self->receive(on_write, on_flush, on_stop);
    if (!batch.empty()) {
      core->committing.store(true, std::memory_order_relaxed);
      if (!commit_batch_direct(*core, batch)) {
        if (core->kv->nests())
          commit_batch_isolated(*core, batch);
        else
          commit_each(*core, batch);
      }
      std::uint64_t ok = 0, commits = 0, last_txn = 0;
      for (auto& it : batch) {
        if (it.reply.code != errc::ok)
          continue;
        ++ok;
        if (commits == 0 || it.txn_id != last_txn) // commit_each: one per write set
          ++commits;
        last_txn = it.txn_id;
      }
      if (ok > 0) {
        core->stats.commits.fetch_add(commits, std::memory_order_relaxed);
        core->stats.batched_writes.fetch_add(ok, std::memory_order_relaxed);
        update_max(core->stats.max_batch, commits == 1 ? ok : 1);
      }
      core->stats.failed_writes.fetch_add(batch.size() - ok, std::memory_order_relaxed);
      notify_scopes(*core, batch);
      for (auto& it : batch) {
        if (it.reply.code == errc::ok)
          it.reply.late = std::move(it.ws.late);
        it.reply.spent = std::move(it.ws);
        it.rp.deliver(std::move(it.reply));
      }
      core->committing.store(false, std::memory_order_relaxed);
      batch.clear();
      bytes = 0;
    }
    if (!flushes.empty()) {
      write_reply r;
      try {
        core->kv->sync();
      } catch (const store::kv_failure& f) {
        r = failure(f.code, f.message);
      }
      for (auto& rp : flushes)
        rp.deliver(r);
      flushes.clear();
    }
  }
}

} // namespace

caf::actor spawn_writer(engine_core& core) {
  return core.sys->spawn<caf::detached>(writer_loop, &core);
}

} // namespace agentstate::detail
