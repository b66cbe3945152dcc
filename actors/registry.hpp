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
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <caf/actor_addr.hpp>
#include <caf/send.hpp>

namespace agentstate::detail {

/// `Handle` is the actors' typed handle: route() compiles only for messages
/// its interface accepts.
template <class Handle>
class registry {
public:
  using factory = std::function<Handle()>;

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
      it = s.live.emplace(key, entry{make(), 0}).first;
      live_.fetch_add(1, std::memory_order_relaxed);
    }
    ++it->second.routed;
    caf::anon_send(it->second.handle, std::forward<T>(msg));
    return true;
  }

  /// Removes `key` if `self` is its live actor and it handled every routed
  /// message. Returns whether the caller must now quit. Thread-safe.
  bool try_passivate(const std::string& key, const caf::actor_addr& self,
                     std::uint64_t handled) {
    auto& s = shard_of(key);
    std::lock_guard<std::mutex> guard(s.mtx);
    auto it = s.live.find(key);
    if (it == s.live.end() || it->second.handle.address() != self
        || it->second.routed != handled)
      return false;
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

private:
  struct entry {
    Handle handle;
    std::uint64_t routed;
  };
  struct shard {
    std::mutex mtx;
    std::unordered_map<std::string, entry> live;
  };
  static constexpr std::size_t shard_count = 64;
  shard& shard_of(const std::string& key) {
    return shards_[std::hash<std::string>{}(key) % shard_count];
  }
  shard shards_[shard_count];
  std::atomic<bool> closing_{false};
  std::atomic<std::size_t> live_{0};
};

} // namespace agentstate::detail
