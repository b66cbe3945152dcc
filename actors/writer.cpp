// SPDX-License-Identifier: Apache-2.0
// The store writer: opens every write transaction but the inline commits of
// durability memory (try_commit_inline, here too), which take the same
// commit mutex and steps. A detached blocking actor that drains its mailbox
// into one group commit (capped in count and bytes, no timer;
// store::commit_batch makes each write set fail alone), notifies the user
// and app actors of committed shared-scope writes, and only then answers the
// session actors (so FIFO mailboxes give read-your-writes to scope reads).
// Polls its mailbox for up to options::spin_wait before it sleeps. Purges
// large deleted sessions' rows in bounded steps between group commits
// (store/purge.hpp), and when an inline commit deleted a session.
#include <algorithm>
#include <array>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include <caf/all.hpp>

#include "actors/core.hpp"
#include "actors/messages.hpp"
#include "actors/spin.hpp"
#include "actors/resolve.hpp"
#include "store/commit.hpp"
#include "store/purge.hpp"
#include "store/replica.hpp"

namespace agentstate::detail {

namespace {

void update_max(std::atomic<std::uint64_t>& x, std::uint64_t v) {
  auto cur = x.load(std::memory_order_relaxed);
  while (v > cur && !x.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}

// Tells the live user and app actors about committed shared-scope writes.
void notify_scopes(engine_core& core, store::write_set& ws, std::uint64_t txn_id,
                   std::uint64_t seq) {
  auto send = [&](std::vector<store::state_write>& writes, const std::string& key) {
    scope_commit msg;
    msg.txn_id = txn_id;
    msg.seq = seq;
    msg.writes.reserve(writes.size());
    for (auto& w : writes)
      msg.writes.push_back({std::move(w.key), std::move(w.value), w.erase});
    core.scopes.route(key, std::move(msg), nullptr, true);
  };
  // Most appends write no shared scope: their keys are not even built.
  if (!ws.user_writes.empty())
    send(ws.user_writes, user_registry_key(ws.app, ws.user));
  if (!ws.app_writes.empty() && !ws.app_elsewhere)
    send(ws.app_writes, app_registry_key(ws.app));
}

// Counts a batch's commits and write sets into the engine's stats.
void count(engine_core& core, const std::vector<store::batch_entry>& entries) {
  std::uint64_t ok = 0, commits = 0, last_txn = 0;
  for (auto& e : entries) {
    if (e.code != errc::ok)
      continue;
    ++ok;
    if (commits == 0 || e.txn_id != last_txn) // a transaction per write set
      ++commits;
    last_txn = e.txn_id;
  }
  if (ok > 0) {
    core.stats.commits.fetch_add(commits, std::memory_order_relaxed);
    core.stats.batched_writes.fetch_add(ok, std::memory_order_relaxed);
    update_max(core.stats.max_batch, commits == 1 ? ok : 1);
  }
  core.stats.failed_writes.fetch_add(entries.size() - ok, std::memory_order_relaxed);
}

// Why write set `ws` may not commit under the range fences
// (engine::fence_range), or nullptr. REQUIRES: core.commit_mtx held.
const char* range_fenced(const engine_core& core, const store::write_set& ws) {
  auto in = [&core](std::uint64_t h) {
    for (const auto& r : core.range_fences)
      if (r.contains(h))
        return true;
    return false;
  };
  using kind = store::write_set::kind;
  if (ws.op == kind::remove_app)
    return "a shard of this node is moving between nodes: deleting an app waits until "
           "it has";
  if (ws.op != kind::app_write && in(model::user_hash(ws.app, ws.user)))
    return "the shard of this user is moving between nodes";
  if ((ws.op == kind::app_write || (!ws.app_writes.empty() && !ws.app_elsewhere))
      && in(model::app_hash(ws.app)))
    return "the home shard of this app's app: state is moving between nodes";
  return nullptr;
}

// The index in core.led of the range write set `ws` writes, or -1 when it
// writes none of them. REQUIRES: core.commit_mtx held.
int led_index(const engine_core& core, const store::write_set& ws) {
  if (core.led.empty())
    return -1;
  using kind = store::write_set::kind;
  const auto h =
    ws.op == kind::app_write ? model::app_hash(ws.app) : model::user_hash(ws.app, ws.user);
  for (std::size_t i = 0; i < core.led.size(); ++i)
    if (core.led[i].range.contains(h))
      return static_cast<int>(i);
  return -1;
}

// Why write set `ws` may not commit while ranges are led (its rows would
// span a led range and another, so no one shipment carries them), or
// nullptr. REQUIRES: core.commit_mtx held.
const char* unshippable(const engine_core& core, const store::write_set& ws) {
  if (core.led.empty())
    return nullptr;
  using kind = store::write_set::kind;
  if (ws.op == kind::remove_app)
    return "deleting an app is not built yet on a node whose shards are replicated";
  if (ws.op != kind::app_write && !ws.app_writes.empty() && !ws.app_elsewhere) {
    auto in = [&core](std::uint64_t h) {
      for (std::size_t i = 0; i < core.led.size(); ++i)
        if (core.led[i].range.contains(h))
          return static_cast<int>(i);
      return -1;
    };
    if (in(model::user_hash(ws.app, ws.user)) != in(model::app_hash(ws.app)))
      return "an app: write of an app homed in another replicated range goes through its "
             "home (options::app_home)";
  }
  return nullptr;
}

// The seal of a group commit while ranges are led: each transaction stores,
// for each led range it writes, the position of its last write set there
// (every earlier entry's outcome is final when it runs, so entry i's
// sequence number is its range's committed one plus the entries up to i
// that succeeded in that range). REQUIRES: core.commit_mtx held.
store::seal_fn led_seal(engine_core& core, const std::vector<int>& range_of,
                        const std::vector<store::batch_entry>& entries) {
  if (core.led.empty())
    return {};
  return [&core, &range_of, &entries](store::kv_write& txn, const std::vector<std::size_t>& ok) {
    std::vector<std::uint64_t> last(core.led.size(), 0);
    for (std::size_t i : ok)
      if (range_of[i] >= 0)
        last[range_of[i]] = i + 1;
    for (std::size_t k = 0; k < core.led.size(); ++k) {
      if (last[k] == 0)
        continue;
      std::uint64_t seq = core.led[k].pos.seq;
      for (std::size_t j = 0; j < last[k]; ++j)
        if (range_of[j] == static_cast<int>(k) && entries[j].code == errc::ok)
          ++seq;
      const auto& r = core.led[k].range;
      store::put_replica_position(txn, r.lo, r.hi, {core.led[k].epoch, seq});
    }
  };
}

// store::commit_batch over the plans no range fence refuses; the others
// fail unavailable. `range_of[i]`: plan i's led range (led_index), or -1;
// empty while no range is led. REQUIRES: core.commit_mtx held, entries
// built.
template <class Plans>
void commit_unfenced(engine_core& core, Plans& plans, std::vector<store::batch_entry>& entries,
                     const std::vector<int>& range_of) {
  auto resolve = [&](store::kv_read& txn, std::size_t i) {
    return resolve_late(txn, core, plans[i]);
  };
  if (core.range_fences.empty() && core.led.empty()) {
    store::commit_batch(*core.kv, entries, resolve, &core.log, wall_now(core));
    return;
  }
  std::vector<store::batch_entry> open;
  std::vector<std::size_t> at;
  std::vector<int> open_range;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const char* why = range_fenced(core, plans[i].ws);
    if (!why)
      why = unshippable(core, plans[i].ws);
    if (why) {
      entries[i].code = errc::unavailable;
      entries[i].message = std::string(why) + "; retry";
    } else {
      open.push_back(entries[i]);
      at.push_back(i);
      open_range.push_back(range_of.empty() ? -1 : range_of[i]);
    }
  }
  if (open.empty())
    return;
  store::commit_batch(
    *core.kv, open,
    [&](store::kv_read& txn, std::size_t j) { return resolve_late(txn, core, plans[at[j]]); },
    &core.log, wall_now(core), led_seal(core, open_range, open));
  for (std::size_t j = 0; j < open.size(); ++j)
    entries[at[j]] = std::move(open[j]);
}

// After a group commit with ranges led: for each led range its committed
// write sets wrote, the shipment carrying them (their encodings, in order)
// and the range's new position; `ship_of[i]` is set to the index in the
// result of the shipment entry i waits for (-1: none). REQUIRES:
// core.commit_mtx held.
template <class Plans>
std::vector<replica_shipment>
shipments(engine_core& core, Plans& plans, const std::vector<store::batch_entry>& entries,
          const std::vector<int>& range_of, std::vector<int>& ship_of) {
  std::vector<replica_shipment> out;
  ship_of.assign(entries.size(), -1);
  if (core.led.empty())
    return out;
  for (std::size_t k = 0; k < core.led.size(); ++k) {
    store::replica_batch b;
    auto& led = core.led[k];
    b.prev = led.pos;
    b.epoch = led.epoch;
    for (std::size_t i = 0; i < entries.size(); ++i)
      if (range_of[i] == static_cast<int>(k) && entries[i].code == errc::ok) {
        b.sets.push_back(store::encode_write_set(plans[i].ws));
        ship_of[i] = static_cast<int>(out.size());
      }
    if (b.sets.empty())
      continue;
    replica_shipment s;
    s.lo = led.range.lo;
    s.hi = led.range.hi;
    s.prev = {led.pos.epoch, led.pos.seq};
    led.pos = {led.epoch, led.pos.seq + b.sets.size()};
    s.last = {led.pos.epoch, led.pos.seq};
    s.batch = store::encode_replica_batch(b);
    out.push_back(std::move(s));
  }
  return out;
}

// Commits `plans` as one group commit, counts it, notifies the scope actors
// of committed shared-scope writes and then hands each write set's verdict
// to answer(i, reply) (FIFO mailboxes give read-your-writes to scope reads:
// the notice is queued before the answer). REQUIRES: core.commit_mtx held.
// With ranges led, the write sets committed in them are shipped: the
// shipments come back in `out` and answer(i, reply) is told through
// `ship_of[i]` which one entry i waits for (-1: none; replies are made
// before the shipments are handed to the replicator).
template <class Plans, class Answer>
void commit_group(engine_core& core, Plans& plans, std::vector<store::batch_entry>& entries,
                  Answer&& answer, std::vector<replica_shipment>* out = nullptr,
                  std::vector<int>* ship_of = nullptr) {
  core.committing.store(true, std::memory_order_relaxed);
  entries.clear();
  std::vector<int> range_of; // empty (all -1) while no range is led: no allocation
  for (write_plan& plan : plans) {
    auto& e = entries.emplace_back();
    e.ws = &plan.ws;
    e.late = plan.late != nullptr;
    if (!core.led.empty())
      range_of.push_back(led_index(core, plan.ws));
  }
  commit_unfenced(core, plans, entries, range_of);
  if (out && ship_of)
    *out = shipments(core, plans, entries, range_of, *ship_of);
  count(core, entries);
  if (core.hub->active()) {
    std::uint64_t head = 0;
    for (auto& e : entries)
      head = std::max(head, e.seq);
    if (head)
      core.hub->published(head);
  }
  for (std::size_t i = 0; i < plans.size(); ++i)
    if (entries[i].code == errc::ok) {
      notify_scopes(core, plans[i].ws, entries[i].txn_id, entries[i].seq);
      auto op = plans[i].ws.op;
      if (op == store::write_set::kind::remove_user || op == store::write_set::kind::remove_app) {
        // Cached session and scope state under the fence is stale now,
        // before anyone hears of the delete.
        core.fence_epoch.fetch_add(1);
        core.purge_pending.store(true, std::memory_order_relaxed);
      } else if (op == store::write_set::kind::remove) {
        // Every session delete comes from the session's actor (engine::prune's
        // too), which knows of it: no cached state is stale.
        core.purge_pending.store(true, std::memory_order_relaxed);
      }
    }
  for (std::size_t i = 0; i < plans.size(); ++i) {
    write_reply reply;
    reply.code = entries[i].code;
    reply.message = std::move(entries[i].message);
    if (reply.code == errc::ok
        || (reply.code == errc::already_exists
            && plans[i].ws.op == store::write_set::kind::app_write))
      reply.late = std::move(plans[i].late);
    reply.spent = std::move(plans[i].ws);
    reply.seq = entries[i].seq;
    answer(i, std::move(reply));
  }
  core.committing.store(false, std::memory_order_relaxed);
}

// Answers waiting for their shipments (options::replicator), by shipment
// id. The writer's own: touched on its thread only.
struct waiting_answers {
  struct one {
    caf::response_promise promise;
    write_reply reply;
  };
  std::uint64_t next_id = 1;
  std::unordered_map<std::uint64_t, std::vector<one>> by_id;

  // Delivers shipment `c.id`'s answers with its verdict. A failed shipment
  // ends the lead of its range (options::replicator).
  void shipped(engine_core& core, const shipped_cmd& c) {
    auto it = by_id.find(c.id);
    if (it == by_id.end())
      return;
    for (auto& w : it->second) {
      if (c.code != errc::ok) {
        w.reply.code = c.code;
        w.reply.message = "committed at this node, but its replicas did not confirm it ("
          + c.message + "): in doubt; retry with the same event id";
      }
      w.promise.deliver(std::move(w.reply));
    }
    by_id.erase(it);
  }

  // Answers every waiting write unavailable: the engine closes before the
  // replicator confirmed them (they are committed here: in doubt).
  void closing() {
    for (auto& [id, answers] : by_id)
      for (auto& w : answers) {
        w.reply.code = errc::unavailable;
        w.reply.message = "committed at this node, but the engine closed before its replicas "
                          "confirmed it: in doubt; retry with the same event id";
        w.promise.deliver(std::move(w.reply));
      }
    by_id.clear();
  }
};

// Hands `out` to the replicator in order; each one's verdict comes back to
// the writer as a shipped_cmd under the id its answers wait under.
void ship(engine_core& core, std::vector<replica_shipment>& out,
          const std::vector<std::uint64_t>& ids) {
  for (std::size_t k = 0; k < out.size(); ++k) {
    const std::uint64_t id = ids[k];
    const auto lo = out[k].lo, hi = out[k].hi;
    const auto epoch = out[k].last.epoch;
    engine_core* c = &core;
    core.opts.replicator(std::move(out[k]), [c, id, lo, hi, epoch](result<void> r) {
      shipped_cmd msg;
      msg.id = id;
      if (!r) {
        msg.code = r.code();
        msg.message = r.err().message;
        // The range's followers may lack what this node committed: it
        // takes no more writes until it is led again (a lead begun since,
        // at another epoch, stays).
        const model::hash_range range{lo, hi};
        std::lock_guard<std::mutex> lk(c->commit_mtx);
        for (auto& x : c->led)
          if (x.range == range && x.epoch == epoch) {
            end_lead(*c, range);
            break;
          }
      }
      caf::anon_send(c->writer, std::move(msg));
    });
  }
}

// The writer's batch: write plans and, beside them, who gets each verdict.
// Write sets of led ranges are answered when their shipment is confirmed.
void commit_and_answer(engine_core& core, std::vector<write_plan>& plans,
                       std::vector<caf::response_promise>& promises,
                       std::vector<store::batch_entry>& entries, waiting_answers& waiting) {
  std::vector<replica_shipment> out;
  std::vector<int> ship_of;
  std::vector<std::uint64_t> ids;
  {
    std::lock_guard<std::mutex> lk(core.commit_mtx);
    commit_group(
      core, plans, entries,
      [&](std::size_t i, write_reply&& r) {
        // Uncounted before its sender hears (sent_to_writer).
        core.writer_backlog.fetch_sub(1, std::memory_order_relaxed);
        if (ship_of[i] < 0) {
          promises[i].deliver(std::move(r));
          return;
        }
        if (ids.empty())
          for (std::size_t k = 0; k < out.size(); ++k)
            ids.push_back(waiting.next_id++);
        waiting.by_id[ids[ship_of[i]]].push_back({std::move(promises[i]), std::move(r)});
      },
      &out, &ship_of);
  }
  if (!out.empty())
    ship(core, out, ids);
  plans.clear();
  promises.clear();
}

// One bounded step of the purge of deleted sessions' rows, in its own
// transaction; clears purge_pending once nothing is left. A failure leaves
// the marks for the next delete or the next open to resume.
void purge_step(engine_core& core) {
  std::lock_guard<std::mutex> lk(core.commit_mtx);
  auto r = store::purge_once(*core.kv);
  if (!r || *r == 0)
    core.purge_pending.store(false, std::memory_order_relaxed);
}

write_reply sync_reply(engine_core& core) {
  write_reply reply;
  if (auto r = store::sync(*core.kv); !r) {
    reply.code = r.code();
    reply.message = std::move(r).err().message;
  }
  return reply;
}

// The production writer: a detached thread that blocks for one message, then
// drains whatever is queued (up to the caps) into one group commit.
void writer_loop(caf::blocking_actor* self, engine_core* core) {
  std::vector<write_plan> batch;
  std::vector<caf::response_promise> promises;
  std::vector<store::batch_entry> entries;
  std::vector<caf::response_promise> flushes;
  waiting_answers waiting;
  std::size_t bytes = 0;
  bool running = true;
  const auto max_count = core->opts.max_batch_count;
  const auto max_bytes = core->opts.max_batch_bytes;
  auto on_write = [&](write_cmd& c) {
    bytes += c.plan.ws.bytes();
    batch.push_back(std::move(c.plan));
    promises.push_back(self->make_response_promise());
  };
  auto on_flush = [&](flush_cmd&) { flushes.push_back(self->make_response_promise()); };
  auto on_stop = [&](stop_writer_cmd&) { running = false; };
  auto on_purge = [](purge_cmd&) {}; // the loop purges while purge_pending holds
  auto on_shipped = [&](shipped_cmd& c) { waiting.shipped(*core, c); };
  auto has_mail = [self] { return !self->mailbox().empty(); };
  while (running) {
    // While deleted sessions' rows are left, the writer never sleeps: it
    // purges one bounded step after each group commit, and between them
    // when no write waits.
    const bool purging = core->purge_pending.load(std::memory_order_relaxed);
    if (!purging)
      spin_until(has_mail, core->opts.spin_wait);
    if (purging && !has_mail()) {
      purge_step(*core);
      continue;
    }
    self->receive(on_write, on_flush, on_stop, on_purge, on_shipped);
    while (running && batch.size() < max_count && bytes < max_bytes && !self->mailbox().empty())
      self->receive(on_write, on_flush, on_stop, on_purge, on_shipped);
    if (!batch.empty()) {
      commit_and_answer(*core, batch, promises, entries, waiting);
      bytes = 0;
    }
    if (!flushes.empty()) {
      auto reply = sync_reply(*core);
      for (auto& rp : flushes)
        rp.deliver(reply);
      flushes.clear();
    }
    if (running && core->purge_pending.load(std::memory_order_relaxed))
      purge_step(*core);
  }
  waiting.closing();
}

// The writer on CAF's test coordinator (engine_core::deterministic): a
// scheduled actor, so the test runs it like every other actor; a group
// commit of one write set per message.
writer_hdl::behavior_type scheduled_writer(writer_hdl::pointer self, engine_core* core) {
  auto waiting = std::make_shared<waiting_answers>();
  return {
    [self, core, waiting](write_cmd& c) -> caf::result<write_reply> {
      std::vector<write_plan> batch;
      std::vector<caf::response_promise> promises;
      std::vector<store::batch_entry> entries;
      batch.push_back(std::move(c.plan));
      promises.push_back(self->make_response_promise());
      commit_and_answer(*core, batch, promises, entries, *waiting); // answers through the promise
      while (core->purge_pending.load(std::memory_order_relaxed))
        purge_step(*core);
      return caf::delegated<write_reply>{};
    },
    [core](flush_cmd&) -> write_reply { return sync_reply(*core); },
    [self, waiting](stop_writer_cmd&) {
      waiting->closing();
      self->quit();
    },
    [core](purge_cmd&) {
      while (core->purge_pending.load(std::memory_order_relaxed))
        purge_step(*core);
    },
    [core, waiting](shipped_cmd& c) { waiting->shipped(*core, c); },
  };
}

} // namespace

std::optional<write_reply> try_commit_inline(engine_core& core, write_plan& plan) {
  std::unique_lock<std::mutex> lk(core.commit_mtx, std::defer_lock);
  if (!spin_until([&] { return lk.try_lock(); }, std::chrono::microseconds(200)))
    return std::nullopt;
  if (!core.led.empty()) // the writer ships and answers write sets of led ranges
    return std::nullopt;
  std::array<write_plan, 1> plans{std::move(plan)};
  thread_local std::vector<store::batch_entry> entries; // no allocation per commit
  write_reply out;
  commit_group(core, plans, entries, [&](std::size_t, write_reply&& r) { out = std::move(r); });
  lk.unlock();
  if (out.code == errc::ok && out.spent.op == store::write_set::kind::remove)
    caf::anon_send(core.writer, purge_cmd{});
  return out;
}

writer_hdl spawn_writer(engine_core& core) {
  if (core.deterministic)
    return core.sys->spawn(scheduled_writer, &core);
  return caf::actor_cast<writer_hdl>(core.sys->spawn<caf::detached>(writer_loop, &core));
}

} // namespace agentstate::detail
