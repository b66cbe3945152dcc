// SPDX-License-Identifier: Apache-2.0
// actors/id_index.hpp: a session actor's index of its stored event ids, the
// lookup behind A6 (an event id already stored answers with that event).
// The store keeps no id index (format 2): an index row per event dirtied a
// page of its own per append, a third of the bytes an append writes.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <unordered_map>
#include <utility>

namespace agentstate::detail {

/// Maps event ids to the versions that may hold them. A hint, not a
/// record: it keeps a 64-bit hash per id, never the id, so a caller confirms
/// each candidate by reading the event at that version and comparing ids.
/// Complete when built from every stored event of the session and then told
/// of every append that commits: every stored id is then among its own
/// candidates. Entries may also be stale (a version since deleted, or
/// another id of the same hash); confirming skips those.
/// Cost: ~40 bytes per event; add and candidates are O(1) expected.
class event_id_index {
public:
  using hash_fn = std::uint64_t (*)(std::string_view);

  /// `hash` maps ids to 64-bit values (a test passes a colliding one).
  explicit event_id_index(hash_fn hash = &default_hash) : hash_(hash) {}

  /// Records that the event at `version` has `id`. Adding a pair twice
  /// keeps one entry.
  void add(std::string_view id, std::uint64_t version) {
    auto h = hash_(id);
    auto [it, end] = map_.equal_range(h);
    for (; it != end; ++it)
      if (it->second == version)
        return;
    map_.emplace(h, version);
  }

  /// Calls fn(version) for each version that may hold `id`, until fn
  /// returns false; ascending order is not promised.
  template <class F>
  void candidates(std::string_view id, F&& fn) const {
    auto [it, end] = map_.equal_range(hash_(id));
    for (; it != end; ++it)
      if (!fn(it->second))
        return;
  }

  std::size_t size() const { return map_.size(); }

  static std::uint64_t default_hash(std::string_view id) {
    return std::hash<std::string_view>{}(id);
  }

private:
  hash_fn hash_;
  std::unordered_multimap<std::uint64_t, std::uint64_t> map_;
};

} // namespace agentstate::detail
