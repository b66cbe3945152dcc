#include "actors/directory.hpp"

namespace agentstate::detail {

bool directory::try_passivate(const std::string& key, const caf::actor_addr& self,
                              std::uint64_t handled) {
  auto& s = shard_of(key);
  std::lock_guard<std::mutex> guard(s.mtx);
  auto it = s.live.find(key);
  if (it == s.live.end() || it->second.handle.address() != self)
    return false;
  if (it->second.routed != handled)
    return false;
  s.live.erase(it);
  live_.fetch_sub(1, std::memory_order_relaxed);
  return true;
}

void directory::remove(const std::string& key, const caf::actor_addr& self) {
  auto& s = shard_of(key);
  std::lock_guard<std::mutex> guard(s.mtx);
  auto it = s.live.find(key);
  if (it != s.live.end() && it->second.handle.address() == self) {
    s.live.erase(it);
    live_.fetch_sub(1, std::memory_order_relaxed);
  }
}

std::vector<std::pair<std::string, caf::actor>> directory::close() {
  closing_.store(true, std::memory_order_release);
  std::vector<std::pair<std::string, caf::actor>> out;
  for (auto& s : shards_) {
    std::lock_guard<std::mutex> guard(s.mtx);
    for (auto& [k, e] : s.live)
      out.emplace_back(k, e.handle);
  }
  return out;
}

} // namespace agentstate::detail
