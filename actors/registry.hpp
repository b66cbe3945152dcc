// SPDX-License-Identifier: Apache-2.0
// actors/registry.hpp: maps identities to live actors of one kind.
// Guarantees a single activation per identity, passivation without losing a
// message, and refusal of new work once closing. Not an actor: a sharded,
// mutex-protected map that host threads and actors call directly (no
// mailbox hop on the hot path).
//
// Passivation protocol: route() counts the messages it sends to an actor
// under the shard lock; the actor counts the routed messages it handled. An
// idle actor calls try_passivate(handled); it succeeds only when the counts
// match, i.e. no routed message is waiting in its mailbox, and removes the
// entry under the same lock, so later messages spawn a fresh activation.
//
// Capacity (set_capacity): each shard keeps its actors in least recently
// routed order; when a spawn takes a shard past its share of the capacity,
// the shard's least recently routed actor is sent `Evict{}` and moved to the
// front (so the next spawn picks another). The actor passivates if it can
// (try_passivate), so the live count follows the capacity within the actors
// that are busy. Approximate LRU: per shard, not across shards.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <caf/actor_addr.hpp>
#include <caf/send.hpp>

namespace agentstate::detail {

/// `Handle` is the actors' typed handle: route() compiles only for messages
/// its interface accepts. `Evict` is the message asking an actor to
/// passivate when its shard is over capacity.
template <class Handle, class Evict>
class registry {
public:
  using factory = std::function<Handle()>;

  /// At most about `total` live actors (each of the 64 shards keeps at most
  /// total/64, rounded up, beyond the busy ones). 0 = no bound. Call before
  /// the first route().
  void set_capacity(std::size_t total) {
    per_shard_ = total == 0 ? 0 : (total + shard_count - 1) / shard_count;
  }

  /// Sends `msg` to the actor for `key`, first spawning it with `make` if it
  /// is not live and `make` is set. Returns false (and sends nothing) when
  /// the actor is not live and `make` is empty, or when closing and not
  /// `force`. Thread-safe; never blocks beyond the shard lock.
  template <class T>
  bool route(const std::string& key, T&& msg, const factory& make, bool force = false) {
    auto& s = shard_of(key);
    std::lock_guard<std::mutex> guard(s.mtx);
    // Checked under the lock: close() sets the flag, then visits every shard,
    // so an actor spawned here is either refused or seen by close().
    if (!force && closing_.load(std::memory_order_acquire))
      return false;
    auto it = s.live.find(key);
    if (it == s.live.end()) {
      if (!make)
        return false;
      it = s.live.emplace(key, entry{make(), 0, {}}).first;
      it->second.lru = s.order.insert(s.order.begin(), &it->second);
      live_.fetch_add(1, std::memory_order_relaxed);
      if (per_shard_ != 0 && s.live.size() > per_shard_)
        evict_one(s);
    } else if (it->second.lru != s.order.begin()) {
      s.order.splice(s.order.begin(), s.order, it->second.lru);
    }
    ++it->second.routed;
    caf::anon_send(it->second.handle, std::forward<T>(msg));
    return true;
  }

  /// Removes `key` if `self` is its live actor and it handled every routed
  /// message. Returns whether the caller must now quit. Thread-safe.
  bool try_passivate(const std::string& key, const caf::actor_addr& self, std::uint64_t handled) {
    auto& s = shard_of(key);
    std::lock_guard<std::mutex> guard(s.mtx);
    auto it = s.live.find(key);
    if (it == s.live.end() || it->second.handle.address() != self || it->second.routed != handled)
      return false;
    s.order.erase(it->second.lru);
    s.live.erase(it);
    live_.fetch_sub(1, std::memory_order_relaxed);
    return true;
  }

  /// Removes `key` unconditionally if `self` is its live actor (on quit).
  void remove(const std::string& key, const caf::actor_addr& self) {
    auto& s = shard_of(key);
    std::lock_guard<std::mutex> guard(s.mtx);
    auto it = s.live.find(key);
    if (it != s.live.end() && it->second.handle.address() == self) {
      s.order.erase(it->second.lru);
      s.live.erase(it);
      live_.fetch_sub(1, std::memory_order_relaxed);
    }
  }

  /// From now on route() refuses unforced work. Returns the live actors' keys.
  std::vector<std::string> close() {
    closing_.store(true, std::memory_order_release);
    std::vector<std::string> out;
    for (auto& s : shards_) {
      std::lock_guard<std::mutex> guard(s.mtx);
      for (auto& kv : s.live)
        out.push_back(kv.first);
    }
    return out;
  }

  std::size_t live() const { return live_.load(std::memory_order_relaxed); }

  /// Sends a copy of `msg` to every actor live now (each shard's handles are
  /// taken under its lock and sent to after it). Not routed: the actors do
  /// not count it as handled. Returns how many were sent to. Thread-safe.
  template <class T>
  std::size_t send_all(const T& msg) {
    std::size_t sent = 0;
    std::vector<Handle> handles;
    for (auto& s : shards_) {
      handles.clear();
      {
        std::lock_guard<std::mutex> guard(s.mtx);
        handles.reserve(s.live.size());
        for (auto& kv : s.live)
          handles.push_back(kv.second.handle);
      }
      for (auto& h : handles)
        caf::anon_send(h, msg);
      sent += handles.size();
    }
    return sent;
  }

  /// Evict messages sent so far (set_capacity).
  std::uint64_t evictions() const { return evictions_.load(std::memory_order_relaxed); }

private:
  struct entry;
  using order_list = std::list<entry*>;
  struct entry {
    Handle handle;
    std::uint64_t routed;
    typename order_list::iterator lru; ///< this entry in its shard's order
  };
  struct shard {
    std::mutex mtx;
    std::unordered_map<std::string, entry> live; ///< nodes are stable: order points into them
    order_list order; ///< most recently routed first
  };
  // Under s.mtx: asks the least recently routed actor of `s` (not the one
  // just spawned, which is at the front) to passivate.
  void evict_one(shard& s) {
    if (s.order.size() < 2)
      return;
    auto victim = std::prev(s.order.end());
    caf::anon_send((*victim)->handle, Evict{});
    s.order.splice(s.order.begin(), s.order, victim);
    evictions_.fetch_add(1, std::memory_order_relaxed);
  }
  static constexpr std::size_t shard_count = 64;
  shard& shard_of(const std::string& key) {
    return shards_[std::hash<std::string>{}(key) % shard_count];
  }
  shard shards_[shard_count];
  std::atomic<bool> closing_{false};
  std::atomic<std::size_t> live_{0};
  std::atomic<std::uint64_t> evictions_{0};
  std::size_t per_shard_ = 0; // 0: no bound
};

} // namespace agentstate::detail
