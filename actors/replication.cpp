// SPDX-License-Identifier: Apache-2.0
// engine::lead_range, unlead_range, range_position, apply_replica(s): a range of
// the shard hash replicated from the engine that leads it to the engines
// that follow it (store/replica.hpp has the encodings and position rows; the
// writer, writer.cpp, stores a led range's positions and ships its writes).
#include <algorithm>
#include <atomic>
#include <iterator>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/core.hpp"
#include "actors/range_chunks.hpp"
#include "agentstate/engine.hpp"
#include "store/apply.hpp"
#include "store/format.hpp"
#include "store/replica.hpp"
#include "store/shard_copy.hpp"

namespace agentstate {

using namespace detail;

namespace {

std::string text(const store::replica_position& p) {
  return "(epoch " + std::to_string(p.epoch) + ", seq " + std::to_string(p.seq) + ")";
}

replica_position to_public(const store::replica_position& p) {
  return {p.epoch, p.seq};
}

/// r's stored position. REQUIRES: a transaction of the engine's store.
result<store::replica_position> stored_position(store::kv_read& txn, hash_range r) {
  auto p = store::read_replica_position(txn, r.lo, r.hi);
  if (!p)
    return std::move(p).err();
  return p->value_or(store::replica_position{});
}

/// Tells the live user and app actors about the shared-scope writes of a
/// batch applied in the commit `txn_id`, as the writer tells them about its
/// own commits, so that their reads show the batch. Cached state a write
/// does not say (a deleted scope, a value that does not parse) is read
/// again by every actor.
void notify_applied(engine_core& core, std::vector<store::write_set>& sets, std::uint64_t txn_id) {
  bool reload = false;
  auto send = [&](std::vector<store::state_write>& writes, const std::string& key) {
    scope_commit msg;
    msg.txn_id = txn_id; // no change-log sequence: a follower logs nothing
    msg.writes.reserve(writes.size());
    for (auto& w : writes) {
      json value;
      if (!w.erase) {
        auto v = parse_json(w.text, store::stored_json_depth);
        if (!v) {
          reload = true;
          return;
        }
        value = std::move(*v);
      }
      msg.writes.push_back({std::move(w.key), std::move(value), w.erase});
    }
    core.scopes.route(key, std::move(msg), nullptr, true);
  };
  using kind = store::write_set::kind;
  for (auto& ws : sets) {
    if (ws.op == kind::remove_user || ws.op == kind::remove_app) {
      reload = true;
      continue;
    }
    if (!ws.user_writes.empty())
      send(ws.user_writes, user_registry_key(ws.app, ws.user));
    if (!ws.app_writes.empty() && !ws.app_elsewhere)
      send(ws.app_writes, app_registry_key(ws.app));
  }
  if (reload)
    core.fence_epoch.fetch_add(1);
}

void remove_fence(engine_core& core, const model::hash_range& r) {
  auto& f = core.range_fences;
  f.erase(std::remove(f.begin(), f.end(), r), f.end());
}

} // namespace

void detail::add_fence(engine_core& core, const model::hash_range& r) {
  auto& f = core.range_fences;
  if (std::find(f.begin(), f.end(), r) == f.end())
    f.push_back(r);
}

void detail::end_lead(engine_core& core, const model::hash_range& r) {
  auto& led = core.led;
  led.erase(std::remove_if(led.begin(), led.end(),
                           [&](const engine_core::led_range& x) { return x.range == r; }),
            led.end());
  add_fence(core, r);
}

result<replica_position> engine::lead_range(hash_range r, std::uint64_t epoch) {
  if (core_->closed.load())
    return closing();
  if (!core_->opts.replicator)
    return error{errc::invalid_argument, "leading a replicated range needs options::replicator"};
  std::lock_guard<std::mutex> lk(core_->commit_mtx);
  try {
    auto txn = core_->kv->begin_read();
    auto pos = stored_position(*txn, r);
    if (!pos)
      return std::move(pos).err();
    if (epoch < pos->epoch)
      return error{errc::invalid_argument,
                   "epoch " + std::to_string(epoch) + " is below the range's position "
                     + text(*pos)};
    const auto range = to_model(r);
    auto& led = core_->led;
    auto it = std::find_if(led.begin(), led.end(),
                           [&](const engine_core::led_range& x) { return x.range == range; });
    if (it == led.end())
      led.push_back({range, epoch, *pos});
    else
      *it = {range, epoch, *pos};
    remove_fence(*core_, range);
    // What actors cached of r, if this engine served it before it followed
    // it, is stale.
    core_->fence_epoch.fetch_add(1);
    return to_public(*pos);
  } catch (const store::kv_failure& f) {
    return error{f.code, f.message};
  }
}

result<void> engine::unlead_range(hash_range r) {
  if (core_->closed.load())
    return closing();
  std::lock_guard<std::mutex> lk(core_->commit_mtx);
  end_lead(*core_, to_model(r));
  return {};
}

result<replica_position> engine::range_position(hash_range r) {
  if (core_->closed.load())
    return closing();
  try {
    auto txn = core_->kv->begin_read();
    auto pos = stored_position(*txn, r);
    if (!pos)
      return std::move(pos).err();
    return to_public(*pos);
  } catch (const store::kv_failure& f) {
    return error{f.code, f.message};
  }
}

result<std::pair<replica_position, range_digest>> engine::replica_state(hash_range r) {
  if (core_->closed.load())
    return closing();
  try {
    auto txn = core_->kv->begin_read();
    auto pos = stored_position(*txn, r);
    if (!pos)
      return std::move(pos).err();
    store::shard_reader reader(*txn, to_model(r));
    auto d = reader.digest();
    if (!d)
      return std::move(d).err();
    return std::make_pair(to_public(*pos), range_digest{d->sessions, d->rows, d->bytes, d->crc});
  } catch (const store::kv_failure& f) {
    return error{f.code, f.message};
  }
}

result<replica_position> engine::apply_replica(hash_range r, std::string_view batch) {
  auto out = apply_replicas({{r, batch}});
  return std::move(out.front());
}

namespace {

/// An input of apply_replicas, decoded.
struct replica_item {
  model::hash_range range;
  store::replica_position prev;
  std::uint64_t epoch = 0;
  std::vector<store::write_set> sets;
  /// Why it is refused whatever the others do (not a batch, a led range, a
  /// write set that does not apply): it takes no part in any transaction.
  std::optional<error> excluded;
  /// Why it does not follow its range's position in the transaction now
  /// being built.
  std::optional<error> refused;
  /// Its range's position with it, once it applied.
  store::replica_position reached;
};

/// A range's position in the transaction being built.
struct range_at {
  model::hash_range range;
  result<store::replica_position> pos; ///< or why it cannot be read
  bool advanced = false; ///< an input of it applied
  std::size_t last_refused = 0; ///< 1 + the index of its last refused input; 0: none
};

/// Why `it` is refused when it does not follow `at`'s position, as
/// apply_replica states.
std::optional<error> check_follows(const replica_item& it, const range_at& at) {
  if (!at.pos)
    return at.pos.err();
  const auto& pos = *at.pos;
  if (it.epoch < pos.epoch)
    return error{errc::condition_failed,
                 "a batch of epoch " + std::to_string(it.epoch)
                   + " is below this replica's position " + text(pos)
                   + ": its sender no longer leads the range"};
  if (!(it.prev == pos)) {
    std::string why = "the batch follows " + text(it.prev) + " but this replica is at " + text(pos);
    if (at.last_refused > 0)
      why += " (input " + std::to_string(at.last_refused - 1)
        + " of the same range in this call was refused)";
    return error{errc::version_conflict, std::move(why)};
  }
  return std::nullopt;
}

void raise_max(std::atomic<std::uint64_t>& x, std::uint64_t v) {
  auto cur = x.load(std::memory_order_relaxed);
  while (v > cur && !x.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}

} // namespace

std::vector<result<replica_position>> engine::apply_replicas(const std::vector<replica_input>& in) {
  auto every = [&in](const error& e) {
    return std::vector<result<replica_position>>(in.size(), e);
  };
  if (core_->closed.load())
    return every(closing());
  std::vector<replica_item> items(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    auto& it = items[i];
    it.range = to_model(in[i].range);
    auto b = store::decode_replica_batch(in[i].batch);
    if (!b) {
      it.excluded = error{errc::invalid_argument, "not a replica batch: " + b.err().message};
      continue;
    }
    it.prev = b->prev;
    it.epoch = b->epoch;
    it.sets.reserve(b->sets.size());
    for (auto& text_of_set : b->sets) {
      auto ws = store::decode_write_set(text_of_set);
      if (!ws) {
        it.excluded = error{errc::invalid_argument, "not a replica batch: " + ws.err().message};
        break;
      }
      it.sets.push_back(std::move(*ws));
    }
  }
  std::lock_guard<std::mutex> lk(core_->commit_mtx);
  for (auto& it : items) {
    if (it.excluded)
      continue;
    // This engine does not write the range itself from now on, even where
    // it still leads it (a leader deposed that has not heard yet).
    add_fence(*core_, it.range);
    auto led = std::find_if(core_->led.begin(), core_->led.end(),
                            [&](const engine_core::led_range& x) { return x.range == it.range; });
    if (led != core_->led.end())
      it.excluded = error{errc::condition_failed,
                          "this node leads the range (epoch " + std::to_string(led->epoch)
                            + "): it follows no other node's writes of it"};
  }
  try {
    // Each pass but the last excludes one more input (a write set of it did
    // not apply): at most in.size() + 1 passes.
    for (;;) {
      auto txn = core_->kv->begin_write();
      std::vector<range_at> ranges;
      auto range_of = [&](const model::hash_range& r) -> range_at& {
        for (auto& x : ranges)
          if (x.range == r)
            return x;
        ranges.push_back({r, stored_position(*txn, {r.lo, r.hi})});
        return ranges.back();
      };
      bool diverged = false, any = false;
      for (std::size_t i = 0; i < items.size() && !diverged; ++i) {
        auto& it = items[i];
        it.refused.reset();
        auto& at = range_of(it.range);
        if (it.excluded) {
          at.last_refused = i + 1;
          continue;
        }
        if ((it.refused = check_follows(it, at))) {
          at.last_refused = i + 1;
          continue;
        }
        for (std::size_t k = 0; k < it.sets.size(); ++k) {
          auto applied = store::apply(*txn, it.sets[k], nullptr);
          if (!applied) { // the transaction may hold part of it: begin again without it
            it.excluded = error{errc::data_corrupt,
                                "write " + std::to_string(at.pos->seq + k + 1)
                                  + " of the batch does not apply at this replica as it did at its "
                                    "leader (the stores diverged): "
                                  + applied.err().message};
            diverged = true;
            break;
          }
        }
        if (diverged)
          break;
        it.reached = {it.epoch, at.pos->seq + it.sets.size()};
        at.pos = it.reached;
        at.advanced = any = true;
      }
      if (diverged)
        continue; // txn aborts as it goes out of scope
      std::vector<result<replica_position>> out;
      out.reserve(items.size());
      for (auto& it : items) {
        if (it.excluded)
          out.emplace_back(*it.excluded);
        else if (it.refused)
          out.emplace_back(*it.refused);
        else
          out.emplace_back(to_public(it.reached));
      }
      if (!any)
        return out;
      for (auto& at : ranges)
        if (at.advanced)
          store::put_replica_position(*txn, at.range.lo, at.range.hi, *at.pos);
      const auto txn_id = txn->txn_id();
      txn->commit();
      std::vector<store::write_set> sets;
      for (auto& it : items)
        if (!it.excluded && !it.refused)
          std::move(it.sets.begin(), it.sets.end(), std::back_inserter(sets));
      core_->stats.commits.fetch_add(1, std::memory_order_relaxed);
      core_->stats.batched_writes.fetch_add(sets.size(), std::memory_order_relaxed);
      raise_max(core_->stats.max_batch, sets.size());
      notify_applied(*core_, sets, txn_id);
      const bool deletes = std::any_of(sets.begin(), sets.end(), [](const store::write_set& ws) {
        using kind = store::write_set::kind;
        return ws.op == kind::remove || ws.op == kind::remove_user;
      });
      if (deletes) { // their rows beyond a commit's share are purged in steps by the writer
        core_->purge_pending.store(true, std::memory_order_relaxed);
        caf::anon_send(core_->writer, purge_cmd{});
      }
      return out;
    }
  } catch (const store::kv_failure& f) {
    return every(error{f.code, f.message});
  }
}

} // namespace agentstate
