// SPDX-License-Identifier: Apache-2.0
// tools/shard_replicator.cpp: see shard_replicator.hpp. One thread acts on
// the map's views (lead, unlead, fence) and on followers that lag (removing
// them from the in-sync set in the coordinator); shipments and answers run
// on the threads that bring them, under one mutex.
#include "tools/shard_replicator.hpp"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "cluster/etcd.hpp"
#include "model/shard.hpp"

namespace agentstate::tools {

namespace {

using clock = std::chrono::steady_clock;

hash_range range_of(std::uint32_t s, std::uint32_t shards) {
  auto r = model::shard_range(s, shards);
  return {r.lo, r.hi};
}

/// The shard whose range starts at `lo` (model::shard_range's lo).
std::uint32_t shard_at(std::uint64_t lo, std::uint32_t shards) {
  return static_cast<std::uint32_t>(((lo >> 32) * static_cast<std::uint64_t>(shards)) >> 32);
}

bool has(const std::vector<std::string>& ids, const std::string& id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

} // namespace

struct shard_replicator::impl : std::enable_shared_from_this<impl> {
  engine& eng;
  const cluster::node& node;
  std::shared_ptr<cluster::coordinator> coord;
  config cfg;
  server::logger& log;

  /// A run of write sets as shipped, up to sequence number `last`.
  struct run {
    std::uint64_t last = 0;
    std::string batch;
  };
  /// A shipment's answer: `done` once no follower in `waiting` is left.
  struct pending {
    std::uint64_t last = 0;
    std::function<void(result<void>)> done;
    std::set<std::string> waiting;
  };
  struct follower {
    std::deque<run> queued;
    bool in_flight = false;
    clock::time_point sent_at;
    std::uint64_t gen = 0; ///< answers of an older request are ignored
  };
  /// A shard this node leads, at `epoch`.
  struct shard_state {
    std::uint64_t epoch = 0;
    std::map<std::string, follower> followers;
    std::deque<pending> pendings;
    /// Followers this node removed from the in-sync set (its view may
    /// not show it yet).
    std::set<std::string> dropped;
  };

  std::mutex mtx;
  std::condition_variable cv;
  bool stopping = false;
  std::map<std::uint32_t, shard_state> shards; ///< guarded by mtx
  /// Lag removals for the thread to make: (shard, follower, why).
  std::vector<std::tuple<std::uint32_t, std::string, std::string>> lagging; ///< guarded by mtx
  std::thread worker;
  /// replicate and replica_state requests for the apply thread. Guarded by
  /// mtx.
  struct apply_job {
    std::string method;
    json params;
    std::function<void(result<json>)> done;
  };
  std::deque<apply_job> applies;
  std::condition_variable apply_cv;
  std::thread applier;

  // The thread's own (no lock): the epoch each shard is led at, the shards fenced here as a follower.
  std::map<std::uint32_t, std::uint64_t> led;
  std::set<std::uint32_t> fenced;
  bool logged = false;

  impl(engine& e, const cluster::node& n, std::shared_ptr<cluster::coordinator> c, config f,
       server::logger& l)
    : eng(e), node(n), coord(std::move(c)), cfg(std::move(f)), log(l) {}

  /// The answers of shard `s`'s pendings that wait for nobody now, taken
  /// out in order. REQUIRES: mtx held.
  std::vector<std::function<void(result<void>)>> ready(shard_state& st) {
    std::vector<std::function<void(result<void>)>> out;
    auto it = st.pendings.begin();
    while (it != st.pendings.end()) {
      if (it->waiting.empty()) {
        out.push_back(std::move(it->done));
        it = st.pendings.erase(it);
      } else {
        ++it;
      }
    }
    return out;
  }

  /// The shard state of `shard`, or null. REQUIRES: mtx held.
  shard_state* find(std::uint32_t shard) {
    auto it = shards.find(shard);
    return it == shards.end() ? nullptr : &it->second;
  }

  /// Follower `f` no longer holds back the pendings of `st` up to sequence
  /// number `upto`; the answers that wait for nobody now. REQUIRES: mtx held.
  std::vector<std::function<void(result<void>)>> release(shard_state& st, const std::string& f,
                                                         std::uint64_t upto) {
    for (auto& p : st.pendings)
      if (p.last <= upto)
        p.waiting.erase(f);
    return ready(st);
  }

  /// Every pending answer of `st`, taken out, and its followers' queues
  /// emptied (what they lack is not confirmed). REQUIRES: mtx held.
  std::vector<std::function<void(result<void>)>> abandon(shard_state& st) {
    std::vector<std::function<void(result<void>)>> out;
    for (auto& p : st.pendings)
      out.push_back(std::move(p.done));
    st.pendings.clear();
    for (auto& [id, f] : st.followers) {
      f.queued.clear();
      f.in_flight = false;
      ++f.gen;
    }
    return out;
  }

  static void answer(std::vector<std::function<void(result<void>)>>& dones, result<void> r) {
    for (auto& d : dones)
      d(r);
  }

  void ship(replica_shipment s, std::function<void(result<void>)> done) {
    auto v = node.view();
    const auto count = v->settings.shards;
    const auto shard = shard_at(s.lo, count);
    const auto& e = v->shards[shard];
    std::vector<std::string> to_pump;
    std::vector<std::function<void(result<void>)>> old;
    std::optional<result<void>> now; // the answer, when it is known at once
    {
      std::lock_guard<std::mutex> lock(mtx);
      if (stopping) {
        now = error{errc::unavailable, "node '" + cfg.id + "' is stopping"};
      } else if (e.owner != cfg.id || !e.to.empty()) {
        now = error{errc::unavailable,
                    "node '" + cfg.id + "' no longer leads shard " + std::to_string(shard)
                      + " (the map moved on)"};
      } else {
        auto& st = shards[shard];
        if (st.epoch != e.epoch) {
          old = abandon(st);
          st = shard_state{};
          st.epoch = e.epoch;
        }
        std::vector<std::string> followers;
        std::size_t in_sync = 0;
        for (auto& id : e.isr)
          if (!st.dropped.count(id)) {
            ++in_sync;
            if (id != cfg.id)
              followers.push_back(id);
          }
        if (in_sync < v->settings.min_insync) {
          now =
            error{errc::unavailable,
                  "shard " + std::to_string(shard) + " has " + std::to_string(in_sync)
                    + " replicas in sync, fewer than " + std::to_string(v->settings.min_insync)};
        } else if (followers.empty()) {
          now = result<void>{};
        } else {
          pending p;
          p.last = s.last.seq;
          p.done = std::move(done);
          for (auto& f : followers) {
            p.waiting.insert(f);
            st.followers[f].queued.push_back({s.last.seq, s.batch});
          }
          st.pendings.push_back(std::move(p));
          to_pump = std::move(followers);
        }
      }
    }
    answer(
      old,
      error{errc::unavailable, "shard " + std::to_string(shard) + " has a new epoch in the map"});
    if (now) {
      done(std::move(*now));
      return;
    }
    for (auto& f : to_pump)
      pump(shard, f);
  }

  /// Sends follower `f` of `shard` what waits for it, unless a request to
  /// it is in flight already.
  void pump(std::uint32_t shard, const std::string& f) {
    auto v = node.view();
    const auto* n = v->node(f);
    json params;
    std::uint64_t gen = 0, last = 0;
    {
      std::lock_guard<std::mutex> lock(mtx);
      auto it = shards.find(shard);
      if (stopping || it == shards.end())
        return;
      auto& fol = it->second.followers[f];
      if (fol.in_flight || fol.queued.empty())
        return;
      json batches = json::array();
      while (!fol.queued.empty()) {
        batches.push_back(cluster::b64(fol.queued.front().batch));
        last = fol.queued.front().last;
        fol.queued.pop_front();
      }
      fol.in_flight = true;
      fol.sent_at = clock::now();
      gen = ++fol.gen;
      params = {{"shard", shard}, {"epoch", it->second.epoch}, {"batches", std::move(batches)}};
      if (!n) {
        lagging.emplace_back(shard, f, "it is not a registered node");
        cv.notify_all();
        return;
      }
    }
    std::weak_ptr<impl> self = shared_from_this();
    cfg.send(n->address, "replicate", std::move(params),
             [self, shard, f, gen, last](result<json> r, json) {
               if (auto p = self.lock())
                 p->answered(shard, f, gen, last, std::move(r));
             });
  }

  void answered(std::uint32_t shard, const std::string& f, std::uint64_t gen, std::uint64_t last,
                result<json> r) {
    std::vector<std::function<void(result<void>)>> dones;
    {
      std::lock_guard<std::mutex> lock(mtx);
      auto* st = find(shard);
      if (!st)
        return;
      auto fit = st->followers.find(f);
      if (fit == st->followers.end() || fit->second.gen != gen)
        return; // a request this node gave up on
      fit->second.in_flight = false;
      if (!r) {
        lagging.emplace_back(shard, f, r.err().message);
        cv.notify_all();
        return;
      }
      dones = release(*st, f, last);
    }
    answer(dones, {});
    pump(shard, f);
  }

  /// Removes follower `f` of `shard` from the in-sync set (the thread's).
  void drop(std::uint32_t shard, const std::string& f, const std::string& why) {
    for (int attempt = 0; attempt < 5; ++attempt) {
      auto v = coord->load();
      if (!v) {
        fail_shard(shard,
                   "the coordinator cannot be reached to remove node '" + f
                     + "' from the in-sync set: " + v.err().message);
        return;
      }
      const auto& e = v->shards[shard];
      std::uint64_t epoch = 0;
      {
        std::lock_guard<std::mutex> lock(mtx);
        auto* st = find(shard);
        if (!st)
          return;
        epoch = st->epoch;
      }
      if (e.owner != cfg.id || e.epoch != epoch) {
        fail_shard(shard, "the map moved on");
        return;
      }
      if (has(e.isr, f)) {
        auto next = e;
        next.isr.erase(std::remove(next.isr.begin(), next.isr.end(), f), next.isr.end());
        if (next.isr.size() < v->settings.min_insync) {
          fail_shard(shard,
                     "node '" + f + "' (" + why
                       + ") cannot leave the in-sync set: " + std::to_string(next.isr.size())
                       + " would be fewer than " + std::to_string(v->settings.min_insync));
          return;
        }
        auto done = coord->update_shards({e}, {next});
        if (!done && done.code() == errc::version_conflict)
          continue;
        if (!done) {
          fail_shard(shard,
                     "cannot remove node '" + f + "' from the in-sync set: " + done.err().message);
          return;
        }
        log.warn("isr",
                 "shard " + std::to_string(shard) + ": node '" + f
                   + "' left the in-sync set: " + why,
                 {{"shard", shard}, {"node", f}, {"epoch", e.epoch}, {"isr", next.isr}});
      }
      std::vector<std::function<void(result<void>)>> dones;
      {
        std::lock_guard<std::mutex> lock(mtx);
        auto* st = find(shard);
        if (!st)
          return;
        st->dropped.insert(f);
        auto& fol = st->followers[f];
        fol.queued.clear();
        fol.in_flight = false;
        ++fol.gen; // its answers to requests already sent are ignored
        dones = release(*st, f, std::numeric_limits<std::uint64_t>::max());
      }
      answer(dones, {});
      return;
    }
    fail_shard(shard, "the shard's entry kept changing");
  }

  void fail_shard(std::uint32_t shard, const std::string& why) {
    std::vector<std::function<void(result<void>)>> dones;
    {
      std::lock_guard<std::mutex> lock(mtx);
      auto* st = find(shard);
      if (!st)
        return;
      dones = abandon(*st);
    }
    if (!dones.empty())
      log.error("isr", "shard " + std::to_string(shard) + " takes no writes: " + why,
                {{"shard", shard}});
    answer(dones, error{errc::unavailable, why});
  }

  /// Leads, unleads and fences as view `v` has it: every shard this node
  /// does not lead is fenced in its engine, so that no write of a shard it
  /// owns commits before it leads it (that write would reach no follower).
  /// Logs event `replicas` when the number of shards it leads changes.
  void follow_view(const cluster::cluster_view& v) {
    const auto count = v.settings.shards;
    const auto before = led.size();
    for (std::uint32_t s = 0; s < count; ++s) {
      const auto& e = v.shards[s];
      const bool leads = e.owner == cfg.id && e.to.empty();
      auto it = led.find(s);
      if (leads && (it == led.end() || it->second != e.epoch)) {
        auto r = eng.lead_range(range_of(s, count), e.epoch);
        if (r) {
          led[s] = e.epoch;
          fenced.erase(s);
        } else {
          log.error("replicas", "cannot lead shard " + std::to_string(s) + ": " + r.err().message,
                    {{"shard", s}});
          if (!fenced.count(s) && eng.fence_range(range_of(s, count)))
            fenced.insert(s); // not led: none of its writes commits here
        }
      } else if (!leads && it != led.end()) {
        eng.unlead_range(range_of(s, count)); // fences it
        led.erase(it);
        fenced.insert(s);
      }
      if (!leads && !fenced.count(s) && eng.fence_range(range_of(s, count)))
        fenced.insert(s);
    }
    if (led.size() != before || !logged) {
      logged = true;
      std::size_t follows = 0;
      for (auto& e : v.shards)
        follows += e.owner != cfg.id && has(e.replicas, cfg.id) ? 1 : 0;
      log.info("replicas",
               "node '" + cfg.id + "' leads " + std::to_string(led.size()) + " shards and follows "
                 + std::to_string(follows) + " (map revision " + std::to_string(v.revision) + ")",
               {{"leads", led.size()}, {"follows", follows}, {"revision", v.revision}});
    }
  }

  void loop() {
    std::int64_t seen = -1;
    // Views are looked at every 20 ms (a shard given to this node is led
    // within that; until then its writes answer unavailable), lags at that
    // granularity.
    const auto tick = std::chrono::milliseconds(20);
    for (;;) {
      std::vector<std::tuple<std::uint32_t, std::string, std::string>> todo;
      {
        std::unique_lock<std::mutex> lock(mtx);
        cv.wait_for(lock, tick, [this] { return stopping || !lagging.empty(); });
        if (stopping)
          return;
        const auto now = clock::now();
        for (auto& [s, st] : shards)
          for (auto& [id, f] : st.followers)
            if (f.in_flight && now - f.sent_at > cfg.lag_timeout) {
              lagging.emplace_back(
                s, id, "no answer within " + std::to_string(cfg.lag_timeout.count()) + " ms");
              f.in_flight = false;
              ++f.gen;
            }
        todo.swap(lagging);
      }
      auto v = node.view();
      if (v->revision != seen) {
        seen = v->revision;
        follow_view(*v);
      }
      for (auto& [s, f, why] : todo)
        drop(s, f, why);
    }
  }

  void queue_apply(std::string method, json params, std::function<void(result<json>)> done) {
    {
      std::lock_guard<std::mutex> lock(mtx);
      if (!stopping) {
        applies.push_back({std::move(method), std::move(params), std::move(done)});
        apply_cv.notify_one();
        return;
      }
    }
    done(error{errc::unavailable, "node '" + cfg.id + "' is stopping"});
  }

  void apply_loop() {
    for (;;) {
      apply_job job;
      {
        std::unique_lock<std::mutex> lock(mtx);
        apply_cv.wait(lock, [this] { return stopping || !applies.empty(); });
        if (stopping)
          return;
        job = std::move(applies.front());
        applies.pop_front();
      }
      job.done(job.method == "replicate" ? replicate(job.params) : state(job.params));
    }
  }

  /// replica_state: {shard} -> this node's position and digest of it.
  result<json> state(const json& params) {
    auto v = node.view();
    const auto count = v->settings.shards;
    auto s = params.is_object() ? params.find("shard") : params.end();
    if (!params.is_object() || s == params.end() || !s->is_number_unsigned()
        || s->get<std::uint64_t>() >= count)
      return error{errc::invalid_argument,
                   "replica_state takes shard, 0.." + std::to_string(count - 1)};
    const auto shard = s->get<std::uint32_t>();
    auto st = eng.replica_state(range_of(shard, count));
    if (!st)
      return std::move(st).err();
    const auto& [pos, d] = *st;
    return json{{"shard", shard}, {"epoch", pos.epoch}, {"seq", pos.seq}, {"sessions", d.sessions},
                {"rows", d.rows}, {"bytes", d.bytes},   {"crc", d.crc}};
  }

  result<json> replicate(const json& params) {
    auto bad = [](const std::string& why) { return error{errc::invalid_argument, why}; };
    if (!params.is_object())
      return bad("replicate takes an object");
    auto s = params.find("shard");
    auto ep = params.find("epoch");
    auto bs = params.find("batches");
    if (s == params.end() || !s->is_number_unsigned() || ep == params.end()
        || !ep->is_number_unsigned() || bs == params.end() || !bs->is_array() || bs->empty())
      return bad("replicate takes shard, epoch and batches (a non-empty array)");
    auto v = node.view();
    const auto count = v->settings.shards;
    if (s->get<std::uint64_t>() >= count)
      return bad("shard " + s->dump() + " is beyond the cluster's " + std::to_string(count));
    const auto shard = s->get<std::uint32_t>();
    const auto epoch = ep->get<std::uint64_t>();
    const auto& e = v->shards[shard];
    if (e.owner == cfg.id || !has(e.replicas, cfg.id))
      return error{errc::condition_failed,
                   "node '" + cfg.id + "' follows shard " + std::to_string(shard)
                     + " at no epoch the map has"};
    if (epoch < e.epoch)
      return error{errc::condition_failed,
                   "shard " + std::to_string(shard) + " is at epoch " + std::to_string(e.epoch)
                     + ": its sender at epoch " + std::to_string(epoch) + " no longer leads it"};
    replica_position at;
    for (auto& b : *bs) {
      std::string bytes;
      if (!b.is_string() || !cluster::unb64(b.get_ref<const std::string&>(), bytes))
        return bad("batches holds base64 texts");
      auto r = eng.apply_replica(range_of(shard, count), bytes);
      if (!r)
        return std::move(r).err();
      at = *r;
    }
    return json{{"shard", shard}, {"epoch", at.epoch}, {"seq", at.seq}};
  }

  void stop() {
    std::map<std::uint32_t, shard_state> left;
    std::deque<apply_job> unapplied;
    {
      std::lock_guard<std::mutex> lock(mtx);
      if (stopping)
        return;
      stopping = true;
      cv.notify_all();
      apply_cv.notify_all();
      left.swap(shards);
      unapplied.swap(applies);
    }
    if (worker.joinable())
      worker.join();
    if (applier.joinable())
      applier.join();
    for (auto& job : unapplied)
      job.done(error{errc::unavailable, "node '" + cfg.id + "' is stopping"});
    for (auto& [s, st] : left) {
      auto dones = abandon(st);
      answer(dones, error{errc::unavailable, "node '" + cfg.id + "' is stopping"});
    }
  }
};

std::unique_ptr<shard_replicator>
shard_replicator::start(engine& eng, const cluster::node& n,
                        std::shared_ptr<cluster::coordinator> coord, config cfg,
                        server::logger& log) {
  auto p = std::make_shared<impl>(eng, n, std::move(coord), std::move(cfg), log);
  p->follow_view(*n.view());
  auto* raw = p.get();
  p->worker = std::thread([raw] { raw->loop(); });
  p->applier = std::thread([raw] { raw->apply_loop(); });
  return std::unique_ptr<shard_replicator>(new shard_replicator(std::move(p)));
}

shard_replicator::shard_replicator(std::shared_ptr<impl> p) : p_(std::move(p)) {}

shard_replicator::~shard_replicator() {
  stop();
}

void shard_replicator::ship(replica_shipment s, std::function<void(result<void>)> done) {
  p_->ship(std::move(s), std::move(done));
}

void shard_replicator::replicate(json params, std::function<void(result<json>)> done) {
  p_->queue_apply("replicate", std::move(params), std::move(done));
}

void shard_replicator::replica_state(json params, std::function<void(result<json>)> done) {
  p_->queue_apply("replica_state", std::move(params), std::move(done));
}

void shard_replicator::stop() {
  p_->stop();
}

} // namespace agentstate::tools
