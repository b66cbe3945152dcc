// SPDX-License-Identifier: Apache-2.0
// engine::snapshot_range, begin_replica_copy, end_replica_copy: a follower's
// copy of a replicated range repaired from a snapshot of its leader's
// (store/shard_copy.hpp reads and writes the rows, store/replica.hpp keeps
// the positions).
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>

#include "actors/core.hpp"
#include "actors/range_chunks.hpp"
#include "agentstate/engine.hpp"
#include "store/replica.hpp"
#include "store/shard_copy.hpp"

namespace agentstate {

using namespace detail;

namespace {

range_digest public_digest(const store::shard_digest& d) {
  return {d.sessions, d.rows, d.bytes, d.crc};
}

std::string digest_text(const range_digest& d) {
  char crc[16];
  std::snprintf(crc, sizeof crc, "%08x", static_cast<unsigned>(d.crc));
  return "(sessions " + std::to_string(d.sessions) + ", rows " + std::to_string(d.rows) + ", bytes "
    + std::to_string(d.bytes) + ", crc " + crc + ")";
}

/// r's stored position ({0, 0}: none). REQUIRES: a transaction of the
/// engine's store.
result<replica_position> stored_public_position(store::kv_read& txn, hash_range r) {
  auto p = store::read_replica_position(txn, r.lo, r.hi);
  if (!p)
    return std::move(p).err();
  const auto at = p->value_or(store::replica_position{});
  return replica_position{at.epoch, at.seq};
}

/// Whether this engine leads `r`. REQUIRES: core.commit_mtx held.
std::optional<error> led_here(engine_core& core, hash_range r, const char* what) {
  const auto range = to_model(r);
  for (auto& x : core.led)
    if (x.range == range)
      return error{errc::condition_failed,
                   std::string("this node leads the range (epoch ") + std::to_string(x.epoch)
                     + "): " + what};
  return std::nullopt;
}

/// A snapshot that is one read transaction of the engine's store, held
/// until destruction (a store whose writes do not wait for readers).
class held_snapshot final : public range_snapshot {
public:
  held_snapshot(engine_core& core, std::unique_ptr<store::kv_read> txn, hash_range r,
                replica_position at)
    : core_(core), txn_(std::move(txn)), reader_(*txn_, to_model(r)), at_(at) {}

  replica_position position() const override { return at_; }

  result<range_chunk> read(const std::string& from, std::size_t max_bytes) override {
    if (core_.closed.load())
      return closing();
    try {
      return read_chunk(reader_, from, max_bytes);
    } catch (const store::kv_failure& f) {
      return error{f.code, f.message};
    }
  }

  result<range_digest> digest() override {
    if (core_.closed.load())
      return closing();
    auto d = reader_.digest();
    if (!d)
      return std::move(d).err();
    return public_digest(*d);
  }

private:
  engine_core& core_;
  std::unique_ptr<store::kv_read> txn_;
  store::shard_reader reader_; // over *txn_
  replica_position at_;
};

/// A snapshot copied into a memory store of its own (for a store whose
/// writes wait for its open readers): each call reads that copy in a read
/// transaction of its own, so nothing stays open across calls, and nothing
/// of the engine is held.
class copied_snapshot final : public range_snapshot {
public:
  copied_snapshot(std::unique_ptr<store::kv_store> copy, hash_range r, replica_position at)
    : copy_(std::move(copy)), range_(to_model(r)), at_(at) {}

  replica_position position() const override { return at_; }

  result<range_chunk> read(const std::string& from, std::size_t max_bytes) override {
    auto reader = store::shard_reader::open(*copy_, range_);
    if (!reader)
      return std::move(reader).err();
    return read_chunk(**reader, from, max_bytes);
  }

  result<range_digest> digest() override {
    auto reader = store::shard_reader::open(*copy_, range_);
    if (!reader)
      return std::move(reader).err();
    auto d = (*reader)->digest();
    if (!d)
      return std::move(d).err();
    return public_digest(*d);
  }

private:
  std::unique_ptr<store::kv_store> copy_;
  model::hash_range range_;
  replica_position at_;
};

} // namespace

result<std::unique_ptr<range_snapshot>> engine::snapshot_range(hash_range r) {
  if (core_->closed.load())
    return closing();
  try {
    auto txn = core_->kv->begin_read();
    auto at = stored_public_position(*txn, r);
    if (!at)
      return std::move(at).err();
    if (core_->opts.mode != durability::memory)
      return std::unique_ptr<range_snapshot>(
        std::make_unique<held_snapshot>(*core_, std::move(txn), r, *at));
    // The memory store's writes wait while `txn` is open: copy r out of it
    // now, every chunk from `txn`, then let it go.
    auto copy = store::make_memory_kv();
    store::shard_reader reader(*txn, to_model(r));
    store::shard_position from;
    while (from.phase != store::shard_phase::done) {
      auto c = reader.next(from);
      if (!c)
        return std::move(c).err();
      if (auto w = store::shard_writer::apply(*copy, *c); !w)
        return std::move(w).err();
      from = c->next;
    }
    return std::unique_ptr<range_snapshot>(
      std::make_unique<copied_snapshot>(std::move(copy), r, *at));
  } catch (const store::kv_failure& f) {
    return error{f.code, f.message};
  }
}

result<void> engine::begin_replica_copy(hash_range r) {
  if (core_->closed.load())
    return closing();
  {
    std::lock_guard<std::mutex> lk(core_->commit_mtx);
    if (auto led = led_here(*core_, r, "its copy is not replaced"))
      return *led;
    add_fence(*core_, to_model(r));
    try {
      // First, alone: a copy cut off after this commit is at no position.
      auto txn = core_->kv->begin_write();
      store::erase_replica_position(*txn, r.lo, r.hi);
      txn->commit();
    } catch (const store::kv_failure& f) {
      return error{f.code, f.message};
    }
    core_->fence_epoch.fetch_add(1);
  }
  auto dropped = drop_range(r);
  if (!dropped)
    return std::move(dropped).err();
  return {};
}

result<void> engine::end_replica_copy(hash_range r, replica_position position,
                                      range_digest expected) {
  if (core_->closed.load())
    return closing();
  std::lock_guard<std::mutex> lk(core_->commit_mtx);
  if (auto led = led_here(*core_, r, "it takes no copy"))
    return *led;
  add_fence(*core_, to_model(r));
  try {
    auto txn = core_->kv->begin_write();
    store::shard_reader reader(*txn, to_model(r));
    auto d = reader.digest();
    if (!d)
      return std::move(d).err();
    const auto held = public_digest(*d);
    if (held != expected)
      return error{errc::data_corrupt,
                   "the copy of the range holds rows of digest " + digest_text(held)
                     + ", not the snapshot's " + digest_text(expected) + ": copy it again"};
    if (position.epoch == 0 && position.seq == 0)
      store::erase_replica_position(*txn, r.lo, r.hi);
    else
      store::put_replica_position(*txn, r.lo, r.hi, {position.epoch, position.seq});
    txn->commit();
  } catch (const store::kv_failure& f) {
    return error{f.code, f.message};
  }
  core_->fence_epoch.fetch_add(1);
  return {};
}

} // namespace agentstate
