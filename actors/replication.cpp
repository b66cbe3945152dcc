// SPDX-License-Identifier: Apache-2.0
// engine::lead_range, unlead_range, range_position, apply_replica: a range of
// the shard hash replicated from the engine that leads it to the engines
// that follow it (store/replica.hpp has the encodings and position rows; the
// writer, writer.cpp, stores a led range's positions and ships its writes).
#include <algorithm>
#include <mutex>
#include <string>

#include <caf/all.hpp>

#include "actors/core.hpp"
#include "agentstate/engine.hpp"
#include "store/apply.hpp"
#include "store/format.hpp"
#include "store/replica.hpp"
#include "store/shard_copy.hpp"

namespace agentstate {

using namespace detail;

namespace {

model::hash_range to_model(hash_range r) {
  return {r.lo, r.hi};
}

error closing() {
  return error{errc::unavailable, "the engine is closing"};
}

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
  if (core_->closed.load())
    return closing();
  auto b = store::decode_replica_batch(batch);
  if (!b)
    return error{errc::invalid_argument, "not a replica batch: " + b.err().message};
  std::vector<store::write_set> sets;
  sets.reserve(b->sets.size());
  for (auto& text_of_set : b->sets) {
    auto ws = store::decode_write_set(text_of_set);
    if (!ws)
      return error{errc::invalid_argument, "not a replica batch: " + ws.err().message};
    sets.push_back(std::move(*ws));
  }
  if (auto f = fence_range(r); !f)
    return std::move(f).err();
  std::lock_guard<std::mutex> lk(core_->commit_mtx);
  const auto range = to_model(r);
  for (auto& x : core_->led)
    if (x.range == range)
      return error{errc::condition_failed,
                   "this node leads the range (epoch " + std::to_string(x.epoch)
                     + "): it follows no other node's writes of it"};
  try {
    auto txn = core_->kv->begin_write();
    auto pos = stored_position(*txn, r);
    if (!pos)
      return std::move(pos).err();
    if (b->epoch < pos->epoch)
      return error{errc::condition_failed,
                   "a batch of epoch " + std::to_string(b->epoch)
                     + " is below this replica's position " + text(*pos)
                     + ": its sender no longer leads the range"};
    if (!(b->prev == *pos))
      return error{errc::version_conflict,
                   "the batch follows " + text(b->prev) + " but this replica is at " + text(*pos)};
    for (std::size_t i = 0; i < sets.size(); ++i) {
      auto applied = store::apply(*txn, sets[i], nullptr);
      if (!applied)
        return error{errc::data_corrupt,
                     "write " + std::to_string(pos->seq + i + 1)
                       + " of the batch does not apply at this replica as it did at its "
                         "leader (the stores diverged): "
                       + applied.err().message};
    }
    const store::replica_position reached{b->epoch, pos->seq + sets.size()};
    store::put_replica_position(*txn, r.lo, r.hi, reached);
    const auto txn_id = txn->txn_id();
    txn->commit();
    notify_applied(*core_, sets, txn_id);
    const bool deletes = std::any_of(sets.begin(), sets.end(), [](const store::write_set& ws) {
      using kind = store::write_set::kind;
      return ws.op == kind::remove || ws.op == kind::remove_user;
    });
    if (deletes) { // their rows beyond a commit's share are purged in steps by the writer
      core_->purge_pending.store(true, std::memory_order_relaxed);
      caf::anon_send(core_->writer, purge_cmd{});
    }
    return to_public(reached);
  } catch (const store::kv_failure& f) {
    return error{f.code, f.message};
  }
}

} // namespace agentstate
