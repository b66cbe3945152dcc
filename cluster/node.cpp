// SPDX-License-Identifier: Apache-2.0
// cluster/node.cpp: a node's membership, view and controller duty. Three
// threads: the keeper renews the lease (and joins again when it expired), the
// watcher follows the coordinator's watch and marks the view stale, the
// controller loop reloads the view and, while this node is the controller,
// gives out never-owned shards.
#include "cluster/node.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <utility>
#include <vector>

namespace agentstate::cluster {

namespace {
using clock = std::chrono::steady_clock;
/// How long a failed watch or load waits before trying again.
constexpr auto retry_wait = std::chrono::milliseconds(300);
/// How often the control loop reloads even without a change it saw.
constexpr auto recheck = std::chrono::seconds(2);
} // namespace

struct node::impl {
  std::shared_ptr<coordinator> coord;
  config cfg;

  mutable std::mutex mtx;
  mutable std::condition_variable cv;
  std::shared_ptr<const cluster_view> current; ///< guarded by mtx
  std::shared_ptr<membership> member; ///< guarded by mtx
  bool stale = false; ///< guarded by mtx: the watch saw a change since the last load
  bool stopping = false; ///< guarded by mtx
  std::atomic<bool> stop{false};
  std::atomic<clock::rep> valid_until{0}; ///< lease good until (steady clock)

  std::thread keeper, watcher, controller;

  std::shared_ptr<membership> membership_now() {
    std::lock_guard<std::mutex> lock(mtx);
    return member;
  }

  /// Waits `d` or until stop; true when stopping.
  bool pause(clock::duration d) {
    std::unique_lock<std::mutex> lock(mtx);
    return cv.wait_for(lock, d, [this] { return stopping; });
  }

  void publish(cluster_view v) {
    std::shared_ptr<const cluster_view> newer;
    {
      std::lock_guard<std::mutex> lock(mtx);
      const bool higher = !current || v.revision > current->revision;
      if (higher || v.revision == current->revision)
        current = std::make_shared<const cluster_view>(std::move(v));
      if (higher)
        newer = current;
      cv.notify_all();
    }
    if (newer && cfg.on_view)
      cfg.on_view(*newer);
  }

  void keep() {
    for (;;) {
      auto sent = clock::now();
      auto m = membership_now();
      auto r = m->keepalive();
      if (r) {
        valid_until.store((sent + cfg.ttl).time_since_epoch().count());
      } else if (r.code() == errc::not_found) {
        // The lease expired (the coordinator was out of reach too long):
        // join again under a new one.
        auto again = coord->join(cfg.id, cfg.address, cfg.ttl);
        if (again) {
          valid_until.store((sent + cfg.ttl).time_since_epoch().count());
          std::lock_guard<std::mutex> lock(mtx);
          member = std::shared_ptr<membership>(std::move(*again));
          stale = true;
          cv.notify_all();
        }
      }
      // TTL/3 in the clock's units: cfg.ttl / 3 in whole seconds is 0 for
      // a TTL under 3 s.
      const auto period = std::chrono::duration_cast<clock::duration>(cfg.ttl) / 3;
      if (!cfg.renew_wait) {
        if (pause(period))
          return;
        continue;
      }
      cfg.renew_wait(period);
      std::lock_guard<std::mutex> lock(mtx);
      if (stopping)
        return;
    }
  }

  void watch() {
    std::int64_t after = 0;
    {
      std::lock_guard<std::mutex> lock(mtx);
      after = current->revision;
    }
    while (!stop.load()) {
      auto r = coord->watch(
        after,
        [&](std::int64_t revision) {
          after = revision;
          std::lock_guard<std::mutex> lock(mtx);
          stale = true;
          cv.notify_all();
          return !stopping;
        },
        stop);
      if (stop.load())
        return;
      {
        std::lock_guard<std::mutex> lock(mtx);
        stale = true; // reload: changes may have been missed
        cv.notify_all();
        if (r.code() == errc::cursor_expired)
          after = current->revision;
      }
      if (pause(retry_wait))
        return;
    }
  }

  /// Gives the never-owned shards of `v` to its live nodes; false when the
  /// map changed meanwhile (the next load retries). Each shard's owner is the
  /// live node owning fewest shards, its followers the settings.replicas - 1
  /// other live nodes keeping fewest copies (ties by id both ways). Gives
  /// nothing while fewer nodes than that are live.
  bool assign(const cluster_view& v) {
    std::map<std::string, std::size_t> owned, copies; // by live id
    for (auto& n : v.nodes)
      if (n.alive) {
        owned[n.id] = 0;
        copies[n.id] = 0;
      }
    const std::size_t r = v.settings.replicas;
    if (owned.empty() || owned.size() < r)
      return true;
    for (auto& s : v.shards) {
      if (owned.count(s.owner))
        ++owned[s.owner];
      for (auto& id : s.replicas)
        if (copies.count(id))
          ++copies[id];
    }
    std::vector<shard_entry> expected, next;
    auto flush = [&]() -> bool {
      if (expected.empty())
        return true;
      auto done = coord->update_shards(expected, next);
      expected.clear();
      next.clear();
      return done.ok();
    };
    for (auto& s : v.shards) {
      if (!s.owner.empty())
        continue;
      auto best = owned.begin(); // std::map order: ties go to the lower id
      for (auto it = owned.begin(); it != owned.end(); ++it)
        if (it->second < best->second)
          best = it;
      ++best->second;
      shard_entry e;
      e.shard = s.shard;
      e.owner = best->first;
      e.epoch = s.epoch + 1;
      e.replicas = {e.owner};
      ++copies[e.owner];
      while (e.replicas.size() < r) {
        const std::string* pick = nullptr;
        std::size_t fewest = 0;
        for (auto& [id, n] : copies)
          if (std::find(e.replicas.begin(), e.replicas.end(), id) == e.replicas.end()
              && (!pick || n < fewest)) {
            pick = &id;
            fewest = n;
          }
        ++copies[*pick];
        e.replicas.push_back(*pick);
      }
      e.isr = e.replicas; // nothing written yet: every copy is in sync
      expected.push_back(s);
      next.push_back(std::move(e));
      if (expected.size() == 50 && !flush())
        return false;
    }
    return flush();
  }

  void control() {
    std::set<std::string> last_live;
    clock::time_point live_since = clock::now();
    for (;;) {
      std::optional<clock::time_point> settle_at;
      auto loaded = coord->load();
      if (loaded) {
        cluster_view v = std::move(*loaded);
        std::set<std::string> live;
        for (auto& n : v.nodes)
          if (n.alive)
            live.insert(n.id);
        if (live != last_live) {
          last_live = live;
          live_since = clock::now();
        }
        bool unowned = std::any_of(v.shards.begin(), v.shards.end(),
                                   [](const shard_entry& s) { return s.owner.empty(); });
        bool enough = live.size() >= v.settings.expect_nodes;
        bool leading = v.controller == cfg.id;
        if (unowned && enough && (v.controller.empty() || leading) && serving_now()) {
          auto m = membership_now();
          auto led = m->lead();
          leading = led && *led;
        }
        if (unowned && enough && leading && serving_now()) {
          if (clock::now() - live_since >= cfg.settle)
            assign(v);
          else
            settle_at = live_since + cfg.settle;
        }
        publish(std::move(v));
      }
      std::unique_lock<std::mutex> lock(mtx);
      auto until = settle_at ? *settle_at : clock::now() + (loaded ? recheck : retry_wait);
      cv.wait_until(lock, until, [this] { return stopping || stale; });
      if (stopping)
        return;
      stale = false;
    }
  }

  bool serving_now() const { return clock::now().time_since_epoch().count() < valid_until.load(); }
};

node::node(std::unique_ptr<impl> p) : p_(std::move(p)) {}

result<std::unique_ptr<node>> node::start(std::shared_ptr<coordinator> c, config cfg) {
  if (auto why = check_name("node id", cfg.id); !why.empty())
    return error{errc::invalid_argument, why};
  auto p = std::make_unique<impl>();
  p->coord = std::move(c);
  p->cfg = std::move(cfg);
  auto wait = p->cfg.join_wait.count() > 0 ? clock::duration(p->cfg.join_wait)
                                           : clock::duration(p->cfg.ttl * 3);
  auto give_up = clock::now() + wait;
  for (;;) {
    auto sent = clock::now();
    auto joined = p->coord->join(p->cfg.id, p->cfg.address, p->cfg.ttl);
    if (joined) {
      p->member = std::shared_ptr<membership>(std::move(*joined));
      p->valid_until.store((sent + p->cfg.ttl).time_since_epoch().count());
      break;
    }
    if (joined.code() != errc::already_exists || clock::now() >= give_up)
      return std::move(joined).err();
    // The id is live: a previous process of this node whose lease has not
    // expired yet. Bounded wait for its expiry (checked every 250 ms).
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  auto v = p->coord->load();
  if (!v) {
    p->member->leave();
    return std::move(v).err();
  }
  p->current = std::make_shared<const cluster_view>(std::move(*v));
  if (p->cfg.on_view)
    p->cfg.on_view(*p->current);
  auto* raw = p.get();
  raw->keeper = std::thread([raw] { raw->keep(); });
  raw->watcher = std::thread([raw] { raw->watch(); });
  raw->controller = std::thread([raw] { raw->control(); });
  return std::unique_ptr<node>(new node(std::move(p)));
}

node::~node() {
  {
    std::lock_guard<std::mutex> lock(p_->mtx);
    p_->stopping = true;
    p_->stop.store(true);
    p_->cv.notify_all();
  }
  for (auto* t : {&p_->keeper, &p_->watcher, &p_->controller})
    if (t->joinable())
      t->join();
  p_->member->leave();
}

const std::string& node::id() const {
  return p_->cfg.id;
}

std::shared_ptr<const cluster_view> node::view() const {
  std::lock_guard<std::mutex> lock(p_->mtx);
  return p_->current;
}

bool node::serving() const {
  return p_->serving_now();
}

bool node::wait_for(const std::function<bool(const cluster_view&)>& pred,
                    std::chrono::milliseconds limit) const {
  std::unique_lock<std::mutex> lock(p_->mtx);
  return p_->cv.wait_for(lock, limit, [&] { return pred(*p_->current); });
}

} // namespace agentstate::cluster
