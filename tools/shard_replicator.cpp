// SPDX-License-Identifier: Apache-2.0
// Over 600 lines: one impl; leading, following and failing over share its
// shard states, rings of kept runs and threads.
// tools/shard_replicator.cpp: see shard_replicator.hpp. One thread acts on
// the map's views (lead, unlead, fence) and on followers that lag (removing
// them from the in-sync set in the coordinator), one fails over dead
// owners' shards and confirms this node's own at start, one applies what
// followers receive; shipments and answers run on the threads that bring
// them, under one mutex.
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

using position_t = ::agentstate::replica_position;
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

bool same(const position_t& a, const position_t& b) {
  return a.epoch == b.epoch && a.seq == b.seq;
}

bool before(const position_t& a, const position_t& b) {
  return a.epoch < b.epoch || (a.epoch == b.epoch && a.seq < b.seq);
}

std::string text(const position_t& p) {
  return "(epoch " + std::to_string(p.epoch) + ", seq " + std::to_string(p.seq) + ")";
}

/// How long a copy leading no shard waits before it checks again whether it
/// may lead a shard it owned when it started, or fail over a dead owner's.
constexpr auto failover_recheck = std::chrono::milliseconds(200);
/// How long a shard whose writes failed (a follower it could not drop, the
/// coordinator out of reach) waits before it is led again.
constexpr auto relead_wait = std::chrono::milliseconds(500);
/// The recent batches kept per shard for followers to catch up from: at most
/// this many, and at most ring_budget / shards bytes (at least 256 KiB).
constexpr std::size_t ring_entries = 4096;
constexpr std::size_t ring_budget = std::size_t{64} << 20;
/// A replicate request carries runs up to about this many bytes (before
/// base64), at least one.
constexpr std::size_t request_bytes = std::size_t{4} << 20;
/// A repair's chunks of a shard's rows, and the rate it sends them at, so
/// that a copy leaves the node's disk and network to its clients too.
constexpr std::size_t repair_chunk_bytes = std::size_t{1} << 20;
constexpr std::size_t repair_bytes_per_s = std::size_t{32} << 20;
/// How long a repair that failed waits before the shard's copy on that
/// node is tried again.
constexpr auto repair_retry = std::chrono::seconds(1);
/// At most this many replicate requests queued together apply in one
/// commit (engine::apply_replicas).
constexpr std::size_t group_jobs = 256;

} // namespace

struct shard_replicator::impl : std::enable_shared_from_this<impl> {
  engine& eng;
  const cluster::node& node;
  std::shared_ptr<cluster::coordinator> coord;
  config cfg;
  server::logger& log;

  using batch_ptr = std::shared_ptr<const std::string>;
  using done_fn = std::function<void(result<void>)>;

  /// A run of write sets as shipped, up to sequence number `last`, shipped
  /// by this node at `at` (a run caught up from a kept batch: when the
  /// batch was kept).
  struct run {
    std::uint64_t last = 0;
    batch_ptr batch;
    clock::time_point at;
  };
  /// A shipment's answer: `done` once no follower in `waiting` is left.
  struct pending {
    std::uint64_t last = 0;
    done_fn done;
    std::set<std::string> waiting;
  };
  struct follower {
    std::deque<run> queued;
    /// A request to it is out: a replicate, or the replica_position that
    /// begins a lead.
    bool in_flight = false;
    clock::time_point sent_at;
    /// The oldest run of the replicate in flight; else sent_at.
    clock::time_point oldest;
    /// The sequence number up to which it confirmed its copy; none before
    /// its first answer.
    std::optional<std::uint64_t> acked;
    std::uint64_t gen = 0; ///< answers of an older request are ignored
    /// Out of the in-sync set, being copied (repair): it gets every run, but
    /// no write waits for it, and no lag removes it.
    bool catching_up = false;
  };
  /// A shard this node leads, at `epoch`, from position `start`.
  struct shard_state {
    std::uint64_t epoch = 0;
    std::uint64_t lead = 0; ///< which lead of this node it is (impl::leads)
    bool leading = false; ///< the engine's lead began (start is known)
    position_t start;
    /// The sequence number of the last write set of the lead (start's
    /// until the first shipment).
    std::uint64_t head = 0;
    std::map<std::string, follower> followers;
    std::deque<pending> pendings;
    /// Followers this node removed from the in-sync set (its view may
    /// not show it yet).
    std::set<std::string> dropped;
    /// Copies that caught up after a repair: in sync from then on, whether
    /// or not the view shows them in the in-sync set yet.
    std::set<std::string> joining;
  };
  /// A batch this node committed (leading) or applied (following), kept so
  /// that a follower behind it can catch up from it.
  struct kept {
    position_t prev, last;
    batch_ptr batch;
    clock::time_point at;
  };
  struct ring {
    std::deque<kept> entries; ///< a chain: each one's prev is the last one's last
    std::size_t bytes = 0;
  };

  std::mutex mtx;
  std::condition_variable cv;
  bool stopping = false;
  std::map<std::uint32_t, shard_state> shards; ///< guarded by mtx
  std::uint64_t leads = 0; ///< guarded by mtx: the leads begun
  /// Counted for stats(): shards this node failed over or gave away, copies
  /// it removed from an in-sync set, copies it repaired. Guarded by mtx.
  std::uint64_t failovers = 0, removals = 0, repairs = 0;
  std::map<std::uint32_t, ring> rings; ///< guarded by mtx
  std::size_t ring_cap = 0; ///< bytes per shard's ring
  /// Lag removals for the thread to make: (shard, follower, why).
  std::vector<std::tuple<std::uint32_t, std::string, std::string>> lagging; ///< guarded by mtx
  /// Shards whose lead the engine ended (a write answered with an error),
  /// to be led again at that epoch from the time given. Guarded by mtx.
  std::map<std::uint32_t, std::pair<clock::time_point, std::uint64_t>> relead;
  /// Shards this node owned when it started: led only once the failover
  /// thread confirmed that its copy holds every acknowledged write, else
  /// handed to a follower that does (see hand_over). Guarded by mtx.
  std::set<std::uint32_t> unconfirmed;
  bool refollow = false; ///< guarded by mtx: follow the view again now
  /// The store is new and the node is still in in-sync sets of shards it
  /// follows (config::new_store). Guarded by mtx.
  bool leaving = false;
  std::thread worker;
  /// replicate, replica_state and replica_position requests for the apply
  /// thread. Guarded by mtx.
  struct apply_job {
    std::string method;
    json params;
    std::function<void(result<json>)> done;
  };
  std::deque<apply_job> applies;
  std::condition_variable apply_cv;
  std::thread applier;
  std::condition_variable failover_cv;
  bool failover_wake = false; ///< guarded by mtx
  std::thread failer;
  std::condition_variable repair_cv;
  std::thread repairer;

  // The worker's own (no lock): the epoch each shard is led at, the shards
  // fenced here as a follower.
  std::map<std::uint32_t, std::uint64_t> led;
  std::set<std::uint32_t> fenced;
  /// The number of shards led when event `replicas` was last logged (none
  /// yet: nullopt).
  std::optional<std::size_t> logged;
  // The failover thread's own: shards whose failover it reported it cannot
  // make yet.
  std::set<std::uint32_t> stuck;

  impl(engine& e, const cluster::node& n, std::shared_ptr<cluster::coordinator> c, config f,
       server::logger& l)
    : eng(e), node(n), coord(std::move(c)), cfg(std::move(f)), log(l) {}

  error not_serving() const {
    return error{errc::unavailable,
                 "node '" + cfg.id
                   + "' cannot reach the cluster's coordinator: the write is committed here "
                     "but not acknowledged (in doubt)"};
  }

  /// The answers of shard `s`'s pendings that wait for nobody now, taken
  /// out in order. REQUIRES: mtx held.
  std::vector<done_fn> ready(shard_state& st) {
    std::vector<done_fn> out;
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
  std::vector<done_fn> release(shard_state& st, const std::string& f, std::uint64_t upto) {
    for (auto& p : st.pendings)
      if (p.last <= upto)
        p.waiting.erase(f);
    return ready(st);
  }

  /// Every pending answer of `st`, taken out, and its followers' queues
  /// emptied (what they lack is not confirmed). REQUIRES: mtx held.
  std::vector<done_fn> abandon(shard_state& st) {
    std::vector<done_fn> out;
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

  /// Keeps batch `b` (prev -> last) of `shard`, committed here at `at`, in
  /// its ring; a batch that does not follow the ring's last one starts it
  /// anew. REQUIRES: mtx held.
  void remember(std::uint32_t shard, position_t prev, position_t last, batch_ptr b,
                clock::time_point at) {
    auto& r = rings[shard];
    if (!r.entries.empty() && !same(r.entries.back().last, prev)) {
      r.entries.clear();
      r.bytes = 0;
    }
    r.bytes += b->size();
    r.entries.push_back({prev, last, std::move(b), at});
    while (r.entries.size() > 1 && (r.bytes > ring_cap || r.entries.size() > ring_entries)) {
      r.bytes -= r.entries.front().batch->size();
      r.entries.pop_front();
    }
  }

  /// The kept batches of `shard` that take a copy at `from` to `to`, in
  /// order; none when the ring does not hold all of them. REQUIRES: mtx held.
  std::optional<std::vector<run>> catch_up(std::uint32_t shard, position_t from, position_t to) {
    auto it = rings.find(shard);
    if (it == rings.end())
      return std::nullopt;
    std::vector<run> out;
    auto at = from;
    bool on = false;
    for (auto& k : it->second.entries) {
      if (!on && !same(k.prev, from))
        continue;
      on = true;
      if (!same(k.prev, at) || before(to, k.last))
        return std::nullopt;
      out.push_back({k.last.seq, k.batch, k.at});
      at = k.last;
      if (same(at, to))
        return out;
    }
    return std::nullopt;
  }

  /// Answers `dones` with `r`, as this node's lease allows: a success only
  /// while it serves. Any error ended the engine's lead of `shard` at
  /// `epoch`: it is led again after relead_wait.
  void settle(std::uint32_t shard, std::uint64_t epoch, std::vector<done_fn>& dones,
              result<void> r) {
    if (dones.empty())
      return;
    if (r && !node.serving())
      r = not_serving();
    if (!r) {
      std::lock_guard<std::mutex> lock(mtx);
      relead[shard] = {clock::now() + relead_wait, epoch};
    }
    for (auto& d : dones)
      d(r);
  }

  void ship(replica_shipment s, std::function<void(result<void>)> done) {
    auto v = node.view();
    const auto count = v->settings.shards;
    const auto shard = shard_at(s.lo, count);
    const auto& e = v->shards[shard];
    const auto epoch = s.last.epoch;
    std::vector<std::string> to_pump;
    std::optional<result<void>> now; // the answer, when it is known at once
    {
      std::lock_guard<std::mutex> lock(mtx);
      auto* st = find(shard);
      if (stopping) {
        now = error{errc::unavailable, "node '" + cfg.id + "' is stopping"};
      } else if (e.owner != cfg.id || !e.to.empty() || !st || st->epoch != epoch) {
        now = error{errc::unavailable,
                    "node '" + cfg.id + "' no longer leads shard " + std::to_string(shard)
                      + " (the map moved on)"};
      } else {
        auto batch = std::make_shared<const std::string>(std::move(s.batch));
        const auto at = clock::now();
        remember(shard, s.prev, s.last, batch, at);
        st->head = s.last.seq;
        std::vector<std::string> followers;
        std::size_t in_sync = 0;
        for (auto& id : e.isr)
          if (!st->dropped.count(id)) {
            ++in_sync;
            if (id != cfg.id)
              followers.push_back(id);
          }
        for (auto& id : st->joining)
          if (!has(e.isr, id) && !st->dropped.count(id)) {
            ++in_sync;
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
            st->followers[f].queued.push_back({s.last.seq, batch, at});
          }
          st->pendings.push_back(std::move(p));
          to_pump = std::move(followers);
        }
        for (auto& [id, fol] : st->followers)
          if (fol.catching_up) { // every committed run; no write waits for it
            fol.queued.push_back({s.last.seq, batch, at});
            to_pump.push_back(id);
          }
      }
    }
    if (now) {
      std::vector<done_fn> one{std::move(done)};
      settle(shard, epoch, one, std::move(*now));
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
      std::size_t bytes = 0;
      fol.oldest = fol.queued.front().at;
      while (!fol.queued.empty() && bytes < request_bytes) {
        bytes += fol.queued.front().batch->size();
        batches.push_back(cluster::b64(*fol.queued.front().batch));
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
    std::vector<done_fn> dones;
    std::uint64_t epoch = 0;
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
      epoch = st->epoch;
      fit->second.acked = last;
      dones = release(*st, f, last);
    }
    settle(shard, epoch, dones, {});
    pump(shard, f);
  }

  /// Asks follower `f` of `shard` where its copy is, the first step of a
  /// lead (positioned() has the answer).
  void ask_position(std::uint32_t shard, const std::string& f, std::uint64_t gen) {
    auto v = node.view();
    const auto* n = v->node(f);
    if (!n) {
      std::lock_guard<std::mutex> lock(mtx);
      lagging.emplace_back(shard, f, "it is not a registered node");
      cv.notify_all();
      return;
    }
    std::weak_ptr<impl> self = shared_from_this();
    cfg.send(n->address, "replica_position", json{{"shards", json::array({shard})}},
             [self, shard, f, gen](result<json> r, json) {
               if (auto p = self.lock())
                 p->positioned(shard, f, gen, std::move(r));
             });
  }

  /// Follower `f`'s position of `shard`: in step with the lead's start, or
  /// behind it by batches this node keeps (queued first), or dropped.
  void positioned(std::uint32_t shard, const std::string& f, std::uint64_t gen, result<json> r) {
    {
      std::lock_guard<std::mutex> lock(mtx);
      auto* st = find(shard);
      if (!st)
        return;
      auto fit = st->followers.find(f);
      if (fit == st->followers.end() || fit->second.gen != gen)
        return;
      auto& fol = fit->second;
      fol.in_flight = false;
      std::string why;
      position_t at;
      if (!r)
        why = r.err().message;
      else if (!read_position(*r, shard, at))
        why = "its answer to replica_position has no position of shard " + std::to_string(shard);
      else
        fol.acked = at.seq;
      if (why.empty() && !same(at, st->start)) {
        auto missing = catch_up(shard, at, st->start);
        if (!missing)
          why = "its copy at " + text(at) + " does not lead to this node's, where the lead began, "
            + text(st->start) + ", by writes this node keeps";
        else
          fol.queued.insert(fol.queued.begin(), missing->begin(), missing->end());
      }
      if (!why.empty()) {
        lagging.emplace_back(shard, f, why);
        cv.notify_all();
        return;
      }
    }
    pump(shard, f);
  }

  /// Position `at` of `shard` in a replica_position answer; false when it has none.
  static bool read_position(const json& answer, std::uint32_t shard, position_t& at) {
    if (!answer.is_object() || !answer.contains("positions") || !answer["positions"].is_array())
      return false;
    for (auto& p : answer["positions"]) {
      if (!p.is_object() || p.value("shard", json()) != json(shard))
        continue;
      auto e = p.find("epoch");
      auto q = p.find("seq");
      if (e == p.end() || q == p.end() || !e->is_number_unsigned() || !q->is_number_unsigned())
        return false;
      at = {e->get<std::uint64_t>(), q->get<std::uint64_t>()};
      return true;
    }
    return false;
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
        {
          std::lock_guard<std::mutex> lock(mtx);
          ++removals;
        }
        log.warn("isr",
                 "shard " + std::to_string(shard) + ": node '" + f
                   + "' left the in-sync set: " + why,
                 {{"shard", shard}, {"node", f}, {"epoch", e.epoch}, {"isr", next.isr}});
      }
      std::vector<done_fn> dones;
      {
        std::lock_guard<std::mutex> lock(mtx);
        auto* st = find(shard);
        if (!st)
          return;
        st->dropped.insert(f);
        st->joining.erase(f);
        auto& fol = st->followers[f];
        fol.catching_up = false;
        fol.queued.clear();
        fol.in_flight = false;
        ++fol.gen; // its answers to requests already sent are ignored
        dones = release(*st, f, std::numeric_limits<std::uint64_t>::max());
      }
      settle(shard, epoch, dones, {});
      return;
    }
    fail_shard(shard, "the shard's entry kept changing");
  }

  void fail_shard(std::uint32_t shard, const std::string& why) {
    std::vector<done_fn> dones;
    std::uint64_t epoch = 0;
    {
      std::lock_guard<std::mutex> lock(mtx);
      auto* st = find(shard);
      if (!st)
        return;
      epoch = st->epoch;
      dones = abandon(*st);
    }
    if (!dones.empty())
      log.error("isr", "shard " + std::to_string(shard) + " takes no writes: " + why,
                {{"shard", shard}});
    settle(shard, epoch, dones, error{errc::unavailable, why});
  }

  /// Begins leading shard `s` of entry `e` at e's epoch: its state first
  /// (so that what the engine ships from the lead on finds it), then the
  /// engine's lead, then each in-sync follower's position (positioned()).
  void begin_lead(std::uint32_t s, const cluster::shard_entry& e, std::uint32_t count) {
    // The in-sync set as the coordinator has it now, with the view's: a copy
    // this node added back may not be in the view yet, and every write must
    // wait for it.
    auto isr = e.isr;
    if (auto cur = coord->load(); cur && cur->shards[s].owner == cfg.id) {
      for (auto& id : cur->shards[s].isr)
        if (!has(isr, id))
          isr.push_back(id);
    }
    std::vector<done_fn> old;
    {
      std::lock_guard<std::mutex> lock(mtx);
      if (auto* st = find(s))
        old = abandon(*st);
      relead.erase(s);
      auto& st = shards[s];
      st = shard_state{};
      st.epoch = e.epoch;
      st.lead = ++leads;
      for (auto& id : isr)
        if (id != cfg.id) { // nothing is sent before its position is known
          st.followers[id].in_flight = true;
          st.followers[id].sent_at = st.followers[id].oldest = clock::now();
          if (!has(e.isr, id))
            st.joining.insert(id);
        }
    }
    for (auto& d : old)
      d(error{errc::unavailable, "shard " + std::to_string(s) + " is led anew"});
    auto r = eng.lead_range(range_of(s, count), e.epoch);
    std::vector<std::pair<std::string, std::uint64_t>> ask;
    {
      std::lock_guard<std::mutex> lock(mtx);
      auto* st = find(s);
      if (r && st) {
        st->leading = true;
        st->start = *r;
        st->head = r->seq;
        for (auto& [id, f] : st->followers) {
          f.sent_at = f.oldest = clock::now();
          ask.emplace_back(id, ++f.gen);
        }
      } else if (st) {
        old = abandon(*st);
        shards.erase(s);
      }
    }
    if (!r) {
      for (auto& d : old)
        d(error{errc::unavailable, "shard " + std::to_string(s) + " is not led"});
      log.error("replicas", "cannot lead shard " + std::to_string(s) + ": " + r.err().message,
                {{"shard", s}});
      if (!fenced.count(s) && eng.fence_range(range_of(s, count)))
        fenced.insert(s); // not led: none of its writes commits here
      return;
    }
    led[s] = e.epoch;
    fenced.erase(s);
    for (auto& [f, gen] : ask)
      ask_position(s, f, gen);
  }

  /// Leads, unleads and fences as view `v` has it: every shard this node
  /// does not lead is fenced in its engine, so that no write of a shard it
  /// owns commits before it leads it (that write would reach no follower).
  /// Logs event `replicas` when the number of shards it leads changes.
  void follow_view(const cluster::cluster_view& v) {
    const auto count = v.settings.shards;
    std::set<std::uint32_t> waiting;
    {
      std::lock_guard<std::mutex> lock(mtx);
      for (auto it = unconfirmed.begin(); it != unconfirmed.end();) {
        const auto& e = v.shards[*it];
        if (e.owner != cfg.id || !e.to.empty())
          it = unconfirmed.erase(it); // no longer this node's to confirm
        else
          ++it;
      }
      waiting = unconfirmed;
    }
    for (std::uint32_t s = 0; s < count; ++s) {
      const auto& e = v.shards[s];
      const bool leads = e.owner == cfg.id && e.to.empty() && !waiting.count(s);
      auto it = led.find(s);
      if (leads && (it == led.end() || it->second != e.epoch)) {
        begin_lead(s, e, count);
      } else if (!leads) {
        // Its lead, and its state: a lead the engine ended (relead due) has
        // a state still.
        if (it != led.end()) {
          eng.unlead_range(range_of(s, count)); // fences it
          led.erase(it);
          fenced.insert(s);
        }
        std::vector<done_fn> dones;
        std::uint64_t epoch = 0;
        {
          std::lock_guard<std::mutex> lock(mtx);
          if (auto* st = find(s)) {
            epoch = st->epoch;
            dones = abandon(*st);
            shards.erase(s);
          }
        }
        for (auto& d : dones)
          d(error{errc::unavailable,
                  "node '" + cfg.id + "' no longer leads shard " + std::to_string(s)
                    + " (the map moved on at epoch " + std::to_string(epoch) + ")"});
      }
      if (!leads && !fenced.count(s) && eng.fence_range(range_of(s, count)))
        fenced.insert(s);
    }
    if (logged != led.size()) {
      logged = led.size();
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
      std::vector<std::pair<std::uint32_t, std::uint64_t>> due;
      bool again = false;
      {
        std::unique_lock<std::mutex> lock(mtx);
        cv.wait_for(lock, tick, [this] { return stopping || !lagging.empty() || refollow; });
        if (stopping)
          return;
        const auto now = clock::now();
        for (auto& [s, st] : shards)
          for (auto& [id, f] : st.followers)
            if (f.in_flight && !f.catching_up && now - f.sent_at > cfg.lag_timeout) {
              lagging.emplace_back(
                s, id, "no answer within " + std::to_string(cfg.lag_timeout.count()) + " ms");
              f.in_flight = false;
              ++f.gen;
            }
        todo.swap(lagging);
        for (auto it = relead.begin(); it != relead.end();) {
          if (it->second.first <= now) {
            due.emplace_back(it->first, it->second.second);
            it = relead.erase(it);
          } else {
            ++it;
          }
        }
        again = refollow;
        refollow = false;
      }
      for (auto& [s, epoch] : due) {
        auto it = led.find(s);
        if (it != led.end() && it->second == epoch) {
          led.erase(it); // the engine's lead ended: follow_view leads it again
          again = true;
        }
      }
      auto v = node.view();
      if (v->revision != seen || again) {
        seen = v->revision;
        follow_view(*v);
        std::lock_guard<std::mutex> lock(mtx);
        failover_wake = true;
        failover_cv.notify_all();
      }
      for (auto& [s, f, why] : todo)
        drop(s, f, why);
    }
  }

  // -- failover ---------------------------------------------------------------

  /// The positions that live in-sync members answer for the shards asked of
  /// each (peer id -> shards), within the lag timeout: peer -> shard ->
  /// position. A peer that does not answer in time is left out.
  std::map<std::string, std::map<std::uint32_t, position_t>>
  gather_positions(const cluster::cluster_view& v,
                   const std::map<std::string, std::vector<std::uint32_t>>& ask) {
    struct gathered {
      std::mutex m;
      std::condition_variable cv;
      std::size_t left = 0;
      std::map<std::string, json> answers;
    };
    auto g = std::make_shared<gathered>();
    std::vector<std::pair<std::string, std::string>> to; // (id, address)
    for (auto& [id, list] : ask)
      if (const auto* n = v.node(id))
        to.emplace_back(id, n->address);
    g->left = to.size();
    for (auto& [id, address] : to)
      cfg.send(address, "replica_position", json{{"shards", ask.at(id)}},
               [g, id = id](result<json> r, json) {
                 std::lock_guard<std::mutex> lock(g->m);
                 if (r)
                   g->answers[id] = std::move(*r);
                 --g->left;
                 g->cv.notify_all();
               });
    std::map<std::string, json> answers;
    {
      std::unique_lock<std::mutex> lock(g->m);
      g->cv.wait_for(lock, cfg.lag_timeout, [&] { return g->left == 0; });
      answers = g->answers;
    }
    std::map<std::string, std::map<std::uint32_t, position_t>> out;
    for (auto& [id, answer] : answers)
      for (auto s : ask.at(id)) {
        position_t at;
        if (read_position(answer, s, at))
          out[id][s] = at;
      }
    return out;
  }

  /// Entry `e` with `owner` leading it at the next epoch, first of its
  /// replicas, and `members` (with owner) its in-sync set.
  static cluster::shard_entry handed(const cluster::shard_entry& e, const std::string& owner,
                                     const std::set<std::string>& members) {
    auto next = e;
    next.owner = owner;
    next.epoch = e.epoch + 1;
    next.to.clear();
    next.copying = false;
    next.replicas = {owner};
    for (auto& id : e.replicas)
      if (id != owner)
        next.replicas.push_back(id);
    next.isr.clear();
    for (auto& id : next.replicas)
      if (id == owner || members.count(id))
        next.isr.push_back(id);
    return next;
  }

  /// Decides the shards `take` (their owner is down and this node is their
  /// first live in-sync member) and `mine` (owned by this node when it
  /// started, not led yet), from the positions of their live in-sync
  /// copies:
  /// - a dead owner's shard goes, at the next epoch, to the copy furthest
  ///   on (every in-sync copy holds every acknowledged write; the furthest
  ///   also holds most of what was not acknowledged), with every copy that
  ///   answered in sync, once at least min_insync copies answer;
  /// - a shard of this node's is led by it when some in-sync copy that
  ///   answers is where this node's is and none is further on; else it goes
  ///   to the furthest of the others (this node's copy may lack what was
  ///   acknowledged, from a lost or replaced store, or hold what never was),
  ///   and this node leaves its in-sync set. It waits while no other
  ///   in-sync copy answers (unless there is none).
  void hand_over(const cluster::cluster_view& v, const std::vector<std::uint32_t>& take,
                 const std::vector<std::uint32_t>& mine) {
    const auto count = v.settings.shards;
    std::map<std::string, std::vector<std::uint32_t>> ask;
    auto ask_isr = [&](std::uint32_t s) {
      const auto& e = v.shards[s];
      for (auto& id : e.isr) {
        const auto* n = v.node(id);
        if (id != cfg.id && id != e.owner && n && n->alive)
          ask[id].push_back(s);
      }
    };
    for (auto s : take)
      ask_isr(s);
    for (auto s : mine)
      ask_isr(s);
    auto got = ask.empty() ? decltype(gather_positions(v, ask)){} : gather_positions(v, ask);
    std::vector<cluster::shard_entry> expected, next;
    std::vector<std::string> notes;
    std::vector<std::uint32_t> keep;
    auto position_of = [&](const std::string& id, std::uint32_t s) -> std::optional<position_t> {
      auto it = got.find(id);
      if (it == got.end())
        return std::nullopt;
      auto p = it->second.find(s);
      return p == it->second.end() ? std::nullopt : std::optional<position_t>(p->second);
    };
    for (auto s : take) {
      const auto& e = v.shards[s];
      auto own = eng.range_position(range_of(s, count));
      if (!own)
        continue;
      std::set<std::string> members{cfg.id};
      std::string best = cfg.id;
      position_t far = *own;
      for (auto& id : e.isr) {
        if (id == cfg.id || id == e.owner)
          continue;
        auto p = position_of(id, s);
        if (!p)
          continue;
        members.insert(id);
        if (before(far, *p)) {
          far = *p;
          best = id;
        }
      }
      if (members.size() < v.settings.min_insync) {
        if (stuck.insert(s).second)
          log.warn("failover",
                   "shard " + std::to_string(s) + ": its owner '" + e.owner + "' is down and "
                     + std::to_string(members.size()) + " of its in-sync copies answer, fewer than "
                     + std::to_string(v.settings.min_insync) + ": it waits",
                   {{"shard", s}, {"owner", e.owner}});
        continue;
      }
      expected.push_back(e);
      next.push_back(handed(e, best, members));
      notes.push_back("shard " + std::to_string(s) + ": its owner '" + e.owner + "' is down: node '"
                      + best + "' leads it at epoch " + std::to_string(e.epoch + 1) + " from "
                      + text(far));
    }
    for (auto s : mine) {
      const auto& e = v.shards[s];
      auto own = eng.range_position(range_of(s, count));
      if (!own)
        continue;
      bool others = false, equal = false, behind = false;
      std::set<std::string> members;
      std::string best;
      position_t far;
      for (auto& id : e.isr) {
        if (id == cfg.id)
          continue;
        others = true;
        auto p = position_of(id, s);
        if (!p)
          continue;
        members.insert(id);
        equal = equal || same(*p, *own);
        behind = behind || before(*own, *p);
        if (best.empty() || before(far, *p)) {
          far = *p;
          best = id;
        }
      }
      if (!others || (equal && !behind)) {
        keep.push_back(s);
        continue;
      }
      if (members.empty())
        continue; // no other in-sync copy answers: wait
      expected.push_back(e);
      next.push_back(handed(e, best, members));
      notes.push_back("shard " + std::to_string(s) + ": this node's copy at " + text(*own)
                      + " is not where its in-sync copies are: node '" + best
                      + "' leads it at epoch " + std::to_string(e.epoch + 1) + " from "
                      + text(far));
    }
    if (!keep.empty()) {
      std::lock_guard<std::mutex> lock(mtx);
      for (auto s : keep)
        unconfirmed.erase(s);
      refollow = true;
      cv.notify_all();
    }
    for (std::size_t at = 0; at < expected.size(); at += 50) {
      const auto end = std::min(expected.size(), at + 50);
      std::vector<cluster::shard_entry> ex(expected.begin() + at, expected.begin() + end);
      std::vector<cluster::shard_entry> nx(next.begin() + at, next.begin() + end);
      auto done = coord->update_shards(ex, nx);
      if (!done)
        continue; // the map changed (or etcd is out of reach): the next pass decides again
      {
        std::lock_guard<std::mutex> lock(mtx);
        failovers += end - at;
      }
      for (auto k = at; k < end; ++k) {
        stuck.erase(nx[k - at].shard);
        log.warn("failover", notes[k],
                 {{"shard", nx[k - at].shard},
                  {"owner", nx[k - at].owner},
                  {"epoch", nx[k - at].epoch},
                  {"isr", nx[k - at].isr}});
      }
    }
  }

  /// Removes this node from the in-sync set of every shard it follows (its
  /// store is new); true when none is left.
  bool leave_isrs() {
    for (int attempt = 0; attempt < 5; ++attempt) {
      auto v = coord->load();
      if (!v)
        return false;
      std::vector<cluster::shard_entry> expected, next;
      for (auto& e : v->shards)
        if (e.owner != cfg.id && has(e.isr, cfg.id)) {
          expected.push_back(e);
          next.push_back(e);
          auto& isr = next.back().isr;
          isr.erase(std::remove(isr.begin(), isr.end(), cfg.id), isr.end());
        }
      bool changed = false;
      for (std::size_t at = 0; at < expected.size(); at += 50) {
        const auto end = std::min(expected.size(), at + 50);
        auto done = coord->update_shards({expected.begin() + at, expected.begin() + end},
                                         {next.begin() + at, next.begin() + end});
        if (!done && done.code() != errc::version_conflict)
          return false;
        changed = changed || !done;
      }
      if (!changed) {
        if (!expected.empty())
          log.warn("isr",
                   "node '" + cfg.id + "''s store is new: it left the in-sync sets of the "
                     + std::to_string(expected.size()) + " shards it follows",
                   {{"shards", expected.size()}});
        std::lock_guard<std::mutex> lock(mtx);
        leaving = false;
        return true;
      }
    }
    return false;
  }

  void failover_loop() {
    for (;;) {
      bool leave = false;
      {
        std::unique_lock<std::mutex> lock(mtx);
        failover_cv.wait_for(lock, failover_recheck, [this] { return stopping || failover_wake; });
        if (stopping)
          return;
        failover_wake = false;
        leave = leaving;
      }
      if (leave && !leave_isrs())
        continue;
      auto v = node.view();
      if (!node.serving())
        continue;
      std::set<std::uint32_t> waiting;
      {
        std::lock_guard<std::mutex> lock(mtx);
        waiting = unconfirmed;
      }
      std::vector<std::uint32_t> take, mine;
      for (std::uint32_t s = 0; s < v->settings.shards; ++s) {
        const auto& e = v->shards[s];
        if (e.owner.empty() || !e.to.empty())
          continue;
        if (e.owner == cfg.id) {
          if (waiting.count(s))
            mine.push_back(s);
          continue;
        }
        const auto* o = v->node(e.owner);
        if (o && o->alive)
          continue;
        for (auto& id : e.isr) {
          const auto* n = v->node(id);
          if (id == e.owner || !n || !n->alive)
            continue;
          if (id == cfg.id)
            take.push_back(s);
          break; // the first live in-sync member acts
        }
      }
      if (!take.empty() || !mine.empty())
        hand_over(*v, take, mine);
    }
  }

  // -- repair -----------------------------------------------------------------

  /// Calls node method `method` at `address`; its answer, or unavailable
  /// when none came within `limit`.
  result<json> call(const std::string& address, const std::string& method, json params,
                    std::chrono::milliseconds limit) {
    struct waiter {
      std::mutex m;
      std::condition_variable cv;
      std::optional<result<json>> r;
    };
    auto w = std::make_shared<waiter>();
    cfg.send(address, method, std::move(params), [w](result<json> r, json) {
      std::lock_guard<std::mutex> lock(w->m);
      w->r = std::move(r);
      w->cv.notify_all();
    });
    std::unique_lock<std::mutex> lock(w->m);
    if (!w->cv.wait_for(lock, limit, [&] { return w->r.has_value(); }))
      return error{errc::unavailable,
                   "node at " + address + " did not answer " + method + " within "
                     + std::to_string(limit.count()) + " ms"};
    return std::move(*w->r);
  }

  /// Follower `f` of `shard`, while it is still the copy a repair in lead
  /// `lead` is making; else null. REQUIRES: mtx held.
  follower* copying(std::uint32_t shard, std::uint64_t lead, const std::string& f) {
    auto* st = find(shard);
    if (!st || st->lead != lead || st->dropped.count(f))
      return nullptr;
    auto it = st->followers.find(f);
    return it == st->followers.end() || !it->second.catching_up ? nullptr : &it->second;
  }

  /// Gives up the repair of `f`'s copy of `shard` in lead `lead`, before
  /// it joined the in-sync set: it gets nothing more.
  void give_up(std::uint32_t shard, std::uint64_t lead, const std::string& f) {
    std::vector<done_fn> dones;
    std::uint64_t epoch = 0;
    {
      std::lock_guard<std::mutex> lock(mtx);
      auto* st = find(shard);
      if (!st || st->lead != lead)
        return;
      epoch = st->epoch;
      st->dropped.insert(f);
      st->joining.erase(f);
      auto it = st->followers.find(f);
      if (it != st->followers.end()) {
        it->second.catching_up = false;
        it->second.queued.clear();
        it->second.in_flight = false;
        ++it->second.gen;
      }
      dones = release(*st, f, std::numeric_limits<std::uint64_t>::max());
    }
    settle(shard, epoch, dones, {});
  }

  /// Copies shard `s` (led here at e.epoch) to node `f` at `address`, whose
  /// copy is out of the in-sync set, and brings it back into the set: a
  /// snapshot of the shard (taken after f starts getting every run
  /// committed, so that the runs after the snapshot reach it) sent in
  /// chunks of 1 MiB at most 32 MiB/s (node method replica_copy), then the
  /// runs committed since, then, once it holds all of them, the writes wait
  /// for it and a compare-and-swap adds it to the in-sync set.
  result<void> repair(std::uint32_t s, const cluster::shard_entry& e, const std::string& f,
                      const std::string& address, std::uint32_t count) {
    const auto range = range_of(s, count);
    const auto epoch = e.epoch;
    std::uint64_t lead = 0;
    {
      std::lock_guard<std::mutex> lock(mtx);
      auto* st = find(s);
      if (stopping || !st || st->epoch != epoch)
        return error{errc::unavailable, "the lead moved on"};
      lead = st->lead;
      if (st->joining.count(f))
        return {}; // repaired already: in sync, the view has not shown it yet
      auto& fol = st->followers[f];
      const auto gen = fol.gen + 1;
      fol = follower{};
      fol.gen = gen;
      fol.catching_up = true;
      fol.in_flight = true; // nothing is sent before the copy is in place
      fol.sent_at = fol.oldest = clock::now();
      st->dropped.erase(f);
      st->joining.erase(f);
    }
    auto fail = [&](error why) -> result<void> {
      give_up(s, lead, f);
      return why;
    };
    // Once it joined, it leaves the in-sync set as a lagging follower does
    // (the compare-and-swap that added it may have happened).
    auto fail_joined = [&](error why) -> result<void> {
      std::lock_guard<std::mutex> lock(mtx);
      auto* st = find(s);
      if (st && st->lead == lead) {
        lagging.emplace_back(s, f, why.message);
        cv.notify_all();
      }
      return why;
    };
    auto snap = eng.snapshot_range(range);
    if (!snap)
      return fail(std::move(snap).err());
    const auto at = (*snap)->position();
    // Each check takes the lock and lets it go before fail() takes it again.
    auto moved_on = [&](const std::function<void(follower&)>& then = {}) {
      std::lock_guard<std::mutex> lock(mtx);
      auto* fol = copying(s, lead, f);
      if (stopping || !fol)
        return true;
      if (then)
        then(*fol);
      return false;
    };
    if (moved_on([&](follower& fol) { // the snapshot holds the runs up to its position
          while (!fol.queued.empty() && fol.queued.front().last <= at.seq)
            fol.queued.pop_front();
        }))
      return fail(error{errc::unavailable, "the lead moved on"});
    log.info("repair",
             "shard " + std::to_string(s) + ": copying it to node '" + f + "' at " + text(at),
             {{"shard", s}, {"node", f}, {"epoch", at.epoch}, {"seq", at.seq}});
    const auto t0 = clock::now();
    auto step = [&](json p) {
      p["shard"] = s;
      p["epoch"] = epoch;
      return call(address, "replica_copy", std::move(p), std::chrono::seconds(30));
    };
    if (auto r = step({{"op", "begin"}}); !r)
      return fail(std::move(r).err());
    std::string from;
    std::uint64_t sent = 0, rows = 0;
    do {
      if (moved_on())
        return fail(error{errc::unavailable, "the lead moved on"});
      auto c = (*snap)->read(from, repair_chunk_bytes);
      if (!c)
        return fail(std::move(c).err());
      if (auto r = step({{"op", "chunk"}, {"chunk", cluster::b64(c->bytes)}}); !r)
        return fail(std::move(r).err());
      sent += c->bytes.size();
      rows += c->rows;
      from = c->next;
      // Throttled: the bytes sent stay within repair_bytes_per_s since t0.
      const auto due = t0 + std::chrono::microseconds(sent * 1000000 / repair_bytes_per_s);
      {
        std::unique_lock<std::mutex> lock(mtx);
        repair_cv.wait_until(lock, due, [this] { return stopping; });
      }
    } while (!from.empty());
    auto d = (*snap)->digest();
    if (!d)
      return fail(std::move(d).err());
    snap->reset(); // the store's pages go back to its writes
    if (auto r = step(
          {{"op", "end"},
           {"position", {{"epoch", at.epoch}, {"seq", at.seq}}},
           {"digest",
            {{"sessions", d->sessions}, {"rows", d->rows}, {"bytes", d->bytes}, {"crc", d->crc}}}});
        !r)
      return fail(std::move(r).err());
    if (moved_on([&](follower& fol) {
          fol.in_flight = false;
          fol.acked = at.seq;
        }))
      return fail(error{errc::unavailable, "the lead moved on"});
    pump(s, f); // the runs committed since the snapshot
    // Caught up once nothing waits for it nor is in flight: from then on
    // every write waits for it.
    const auto deadline = clock::now() + std::chrono::seconds(30);
    for (;;) {
      std::string why;
      {
        std::unique_lock<std::mutex> lock(mtx);
        auto* fol = copying(s, lead, f);
        if (stopping || !fol) {
          why = "it fell out while it caught up";
        } else if (fol->queued.empty() && !fol->in_flight) {
          fol->catching_up = false;
          find(s)->joining.insert(f);
          break;
        } else if (clock::now() > deadline) {
          why = "it did not catch up within 30 s";
        } else {
          // poll: the follower's answers arrive on other threads
          repair_cv.wait_for(lock, std::chrono::milliseconds(10), [this] { return stopping; });
          continue;
        }
      }
      return fail(error{errc::unavailable, why});
    }
    // Still in step (not dropped since it joined), then added; dropped
    // while the compare-and-swap was out, it leaves the set again.
    auto joined = [&] {
      std::lock_guard<std::mutex> lock(mtx);
      auto* st = find(s);
      return st && st->lead == lead && st->joining.count(f) && !st->dropped.count(f);
    };
    for (int attempt = 0; attempt < 5; ++attempt) {
      if (!joined())
        return error{errc::unavailable, "it fell out once it caught up"};
      auto cur = coord->load();
      if (!cur)
        return fail_joined(std::move(cur).err());
      const auto& ce = cur->shards[s];
      if (ce.owner != cfg.id || ce.epoch != epoch)
        return fail_joined(error{errc::unavailable, "the map moved on"});
      if (has(ce.isr, f))
        return {};
      auto next = ce;
      next.isr.clear();
      for (auto& id : ce.replicas)
        if (id == f || has(ce.isr, id))
          next.isr.push_back(id);
      auto done = coord->update_shards({ce}, {next});
      if (done && !joined())
        return fail_joined(error{errc::unavailable, "it fell out as it rejoined"});
      if (done) {
        {
          std::lock_guard<std::mutex> lock(mtx);
          ++repairs;
        }
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - t0);
        log.info("isr",
                 "shard " + std::to_string(s) + ": node '" + f
                   + "' is back in the in-sync set, copied at " + text(at) + " ("
                   + std::to_string(rows) + " rows, " + std::to_string(sent) + " bytes, "
                   + std::to_string(ms.count()) + " ms)",
                 {{"shard", s},
                  {"node", f},
                  {"isr", next.isr},
                  {"rows", rows},
                  {"bytes", sent},
                  {"ms", ms.count()}});
        return {};
      }
      if (done.code() != errc::version_conflict)
        return fail_joined(std::move(done).err());
    }
    return fail_joined(error{errc::unavailable, "the shard's entry kept changing"});
  }

  /// Repairs, one at a time, the copies out of the in-sync set of the
  /// shards this node leads, on live nodes; a failed one is tried again
  /// after repair_retry.
  void repair_loop() {
    std::map<std::pair<std::uint32_t, std::string>, clock::time_point> later;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mtx);
        repair_cv.wait_for(lock, failover_recheck, [this] { return stopping; });
        if (stopping)
          return;
      }
      if (!node.serving())
        continue;
      auto v = node.view();
      std::vector<std::pair<std::uint32_t, std::uint64_t>> leading;
      {
        std::lock_guard<std::mutex> lock(mtx);
        for (auto& [s, st] : shards)
          leading.emplace_back(s, st.epoch);
      }
      for (auto& [s, epoch] : leading) {
        const auto& e = v->shards[s];
        if (e.owner != cfg.id || e.epoch != epoch || !e.to.empty())
          continue;
        for (auto& f : e.replicas) {
          const auto* n = v->node(f);
          if (f == cfg.id || has(e.isr, f) || !n || !n->alive)
            continue;
          const auto key = std::make_pair(s, f);
          auto it = later.find(key);
          if (it != later.end() && clock::now() < it->second)
            continue;
          if (auto r = repair(s, e, f, n->address, v->settings.shards); r) {
            later.erase(key);
          } else {
            log.warn("repair",
                     "shard " + std::to_string(s) + ": copying it to node '" + f
                       + "' failed: " + r.err().message,
                     {{"shard", s}, {"node", f}});
            later[key] = clock::now() + repair_retry;
          }
          std::lock_guard<std::mutex> lock(mtx);
          if (stopping)
            return;
        }
      }
    }
  }

  // -- the apply thread -------------------------------------------------------

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
      std::vector<apply_job> group; // replicate requests queued together
      bool refuse = false;
      {
        std::unique_lock<std::mutex> lock(mtx);
        apply_cv.wait(lock, [this] { return stopping || !applies.empty(); });
        if (stopping)
          return;
        refuse = leaving && applies.front().method != "replica_state";
        while (!refuse && !applies.empty() && applies.front().method == "replicate"
               && group.size() < group_jobs) {
          group.push_back(std::move(applies.front()));
          applies.pop_front();
        }
        if (group.empty()) {
          job = std::move(applies.front());
          applies.pop_front();
        }
      }
      if (!group.empty()) {
        replicate_group(group);
        continue;
      }
      if (refuse)
        job.done(error{errc::unavailable,
                       "node '" + cfg.id
                         + "''s store is new: it leaves the in-sync sets of the shards it "
                           "follows first"});
      else if (job.method == "replica_position")
        job.done(positions(job.params));
      else if (job.method == "replica_copy")
        job.done(copy_step(job.params));
      else
        job.done(state(job.params));
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

  /// replica_position: {shards: [S...]} -> {positions: [{shard, epoch, seq}]}.
  result<json> positions(const json& params) {
    auto v = node.view();
    const auto count = v->settings.shards;
    auto list = params.is_object() ? params.find("shards") : params.end();
    const std::string usage = "replica_position takes shards, a non-empty array of at most "
      + std::to_string(count) + " shards, each 0.." + std::to_string(count - 1);
    if (!params.is_object() || list == params.end() || !list->is_array() || list->empty()
        || list->size() > count)
      return error{errc::invalid_argument, usage};
    json out = json::array();
    for (auto& s : *list) {
      if (!s.is_number_unsigned() || s.get<std::uint64_t>() >= count)
        return error{errc::invalid_argument, usage};
      const auto shard = s.get<std::uint32_t>();
      auto p = eng.range_position(range_of(shard, count));
      if (!p)
        return std::move(p).err();
      out.push_back({{"shard", shard}, {"epoch", p->epoch}, {"seq", p->seq}});
    }
    return json{{"positions", std::move(out)}};
  }

  /// replica_copy: one step of a repair of this node's copy of a shard
  /// (shard_replicator::replica_copy).
  result<json> copy_step(const json& params) {
    auto bad = [](const std::string& why) { return error{errc::invalid_argument, why}; };
    const std::string usage =
      "replica_copy takes shard, epoch and op: begin, chunk (with chunk, base64) or end (with "
      "position {epoch, seq} and digest {sessions, rows, bytes, crc})";
    if (!params.is_object())
      return bad(usage);
    auto s = params.find("shard");
    auto ep = params.find("epoch");
    auto op = params.find("op");
    if (s == params.end() || !s->is_number_unsigned() || ep == params.end()
        || !ep->is_number_unsigned() || op == params.end() || !op->is_string())
      return bad(usage);
    auto v = node.view();
    const auto count = v->settings.shards;
    if (s->get<std::uint64_t>() >= count)
      return bad("shard " + s->dump() + " is beyond the cluster's " + std::to_string(count));
    const auto shard = s->get<std::uint32_t>();
    const auto epoch = ep->get<std::uint64_t>();
    const auto& e = v->shards[shard];
    if (e.owner == cfg.id || !has(e.replicas, cfg.id))
      return error{errc::condition_failed,
                   "node '" + cfg.id + "' keeps no copy of shard " + std::to_string(shard)
                     + " that another leads"};
    if (epoch < e.epoch)
      return error{errc::condition_failed,
                   "shard " + std::to_string(shard) + " is at epoch " + std::to_string(e.epoch)
                     + ": its sender at epoch " + std::to_string(epoch) + " no longer leads it"};
    const auto range = range_of(shard, count);
    const auto& what = op->get_ref<const std::string&>();
    auto uint_of = [](const json& o, const char* k, std::uint64_t& out) {
      auto it = o.is_object() ? o.find(k) : o.end();
      if (it == o.end() || !it->is_number_unsigned())
        return false;
      out = it->get<std::uint64_t>();
      return true;
    };
    if (what == "begin") {
      if (auto r = eng.begin_replica_copy(range); !r)
        return std::move(r).err();
      std::lock_guard<std::mutex> lock(mtx);
      rings.erase(shard); // what it kept no longer leads anywhere
    } else if (what == "chunk") {
      auto c = params.find("chunk");
      std::string bytes;
      if (c == params.end() || !c->is_string()
          || !cluster::unb64(c->get_ref<const std::string&>(), bytes))
        return bad(usage);
      if (auto r = eng.write_range(range, bytes); !r)
        return std::move(r).err();
    } else if (what == "end") {
      const json pos = params.value("position", json());
      const json dig = params.value("digest", json());
      std::uint64_t pe = 0, pq = 0, ds = 0, dr = 0, db = 0, dc = 0;
      if (!uint_of(pos, "epoch", pe) || !uint_of(pos, "seq", pq) || !uint_of(dig, "sessions", ds)
          || !uint_of(dig, "rows", dr) || !uint_of(dig, "bytes", db) || !uint_of(dig, "crc", dc)
          || dc > std::numeric_limits<std::uint32_t>::max())
        return bad(usage);
      range_digest want{ds, dr, db, static_cast<std::uint32_t>(dc)};
      if (auto r = eng.end_replica_copy(range, {pe, pq}, want); !r)
        return std::move(r).err();
    } else {
      return bad(usage);
    }
    return json{{"shard", shard}, {"op", what}};
  }

  /// A replicate request checked against the view and decoded.
  struct replicate_request {
    std::uint32_t shard = 0;
    std::vector<batch_ptr> runs;
  };

  /// replicate's params checked (see shard_replicator::replicate).
  result<replicate_request> check_replicate(const json& params, const cluster::cluster_view& v) {
    auto bad = [](const std::string& why) { return error{errc::invalid_argument, why}; };
    if (!params.is_object())
      return bad("replicate takes an object");
    auto s = params.find("shard");
    auto ep = params.find("epoch");
    auto bs = params.find("batches");
    if (s == params.end() || !s->is_number_unsigned() || ep == params.end()
        || !ep->is_number_unsigned() || bs == params.end() || !bs->is_array() || bs->empty())
      return bad("replicate takes shard, epoch and batches (a non-empty array)");
    const auto count = v.settings.shards;
    if (s->get<std::uint64_t>() >= count)
      return bad("shard " + s->dump() + " is beyond the cluster's " + std::to_string(count));
    replicate_request out;
    out.shard = s->get<std::uint32_t>();
    const auto epoch = ep->get<std::uint64_t>();
    const auto& e = v.shards[out.shard];
    if (e.owner == cfg.id || !has(e.replicas, cfg.id))
      return error{errc::condition_failed,
                   "node '" + cfg.id + "' follows shard " + std::to_string(out.shard)
                     + " at no epoch the map has"};
    if (epoch < e.epoch)
      return error{errc::condition_failed,
                   "shard " + std::to_string(out.shard) + " is at epoch " + std::to_string(e.epoch)
                     + ": its sender at epoch " + std::to_string(epoch) + " no longer leads it"};
    for (auto& b : *bs) {
      std::string bytes;
      if (!b.is_string() || !cluster::unb64(b.get_ref<const std::string&>(), bytes))
        return bad("batches holds base64 texts");
      out.runs.push_back(std::make_shared<const std::string>(std::move(bytes)));
    }
    return out;
  }

  /// Applies the replicate requests `jobs` in one commit where they apply
  /// (engine::apply_replicas) and answers each: the position its shard
  /// reached, or the first refusal of its runs (the runs after it are
  /// refused too: they no longer follow).
  void replicate_group(std::vector<apply_job>& jobs) {
    auto v = node.view();
    const auto count = v->settings.shards;
    std::vector<std::optional<replicate_request>> reqs(jobs.size());
    std::vector<std::optional<error>> refused(jobs.size());
    std::vector<engine::replica_input> in;
    std::map<std::uint32_t, position_t> at; // each shard's position before the group
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      auto r = check_replicate(jobs[i].params, *v);
      if (!r) {
        refused[i] = std::move(r).err();
        continue;
      }
      if (!at.count(r->shard)) {
        auto p = eng.range_position(range_of(r->shard, count));
        if (!p) {
          refused[i] = std::move(p).err();
          continue;
        }
        at[r->shard] = *p;
      }
      for (auto& b : r->runs)
        in.push_back({range_of(r->shard, count), *b});
      reqs[i] = std::move(*r);
    }
    auto results = in.empty() ? std::vector<result<position_t>>{} : eng.apply_replicas(in);
    std::size_t k = 0;
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      if (!reqs[i]) {
        jobs[i].done(*refused[i]);
        continue;
      }
      const auto shard = reqs[i]->shard;
      std::optional<error> failed;
      {
        std::lock_guard<std::mutex> lock(mtx);
        for (auto& b : reqs[i]->runs) {
          auto& r = results[k++];
          if (failed)
            continue;
          if (!r) {
            failed = r.err();
            continue;
          }
          remember(shard, at[shard], *r, b, clock::now());
          at[shard] = *r;
        }
      }
      if (failed)
        jobs[i].done(std::move(*failed));
      else
        jobs[i].done(json{{"shard", shard}, {"epoch", at[shard].epoch}, {"seq", at[shard].seq}});
    }
  }

  /// Follower `f`'s lag behind `st`'s head: write sets not confirmed
  /// (null before its first answer) and the age of the oldest of them.
  /// REQUIRES: mtx held.
  static json lag_of(const shard_state& st, const follower& f, clock::time_point now) {
    json records = nullptr;
    std::int64_t ms = 0;
    if (f.acked)
      records = st.head > *f.acked ? st.head - *f.acked : 0;
    if (!f.acked || *f.acked < st.head) {
      auto since = f.in_flight ? f.oldest : !f.queued.empty() ? f.queued.front().at : now;
      ms = std::max<std::int64_t>(
        0, std::chrono::duration_cast<std::chrono::milliseconds>(now - since).count());
    }
    return json{{"lag_records", std::move(records)}, {"lag_ms", ms}};
  }

  json stats() {
    auto v = node.view();
    std::size_t follows = 0;
    for (auto& e : v->shards)
      follows += e.owner != cfg.id && has(e.replicas, cfg.id) ? 1 : 0;
    struct behind {
      std::uint32_t shard;
      std::string node;
      std::size_t queued;
      std::int64_t in_flight_ms;
      bool catching_up;
    };
    std::vector<behind> list;
    json led = json::array();
    const auto now = clock::now();
    std::lock_guard<std::mutex> lock(mtx);
    std::size_t waiting = 0;
    for (auto& [s, st] : shards) {
      waiting += st.pendings.size();
      json followers = json::array();
      for (auto& [id, f] : st.followers) {
        const bool out = st.dropped.count(id) > 0;
        json one = {{"node", id},
                    {"state",
                     out               ? "out_of_sync"
                       : f.catching_up ? "catching_up"
                                       : "in_sync"},
                    {"acked_seq", f.acked ? json(*f.acked) : json(nullptr)}};
        one.update(out ? json{{"lag_records", nullptr}, {"lag_ms", nullptr}} : lag_of(st, f, now));
        followers.push_back(std::move(one));
        if (!out && (f.in_flight || !f.queued.empty() || f.catching_up))
          list.push_back(
            {s, id, f.queued.size(),
             f.in_flight
               ? std::chrono::duration_cast<std::chrono::milliseconds>(now - f.sent_at).count()
               : 0,
             f.catching_up});
      }
      led.push_back({{"shard", s},
                     {"epoch", st.epoch},
                     {"head_seq", st.head},
                     {"writes_waiting", st.pendings.size()},
                     {"followers", std::move(followers)}});
    }
    std::sort(list.begin(), list.end(), [](const behind& a, const behind& b) {
      return a.in_flight_ms != b.in_flight_ms ? a.in_flight_ms > b.in_flight_ms
                                              : a.queued > b.queued;
    });
    json slowest = json::array();
    for (std::size_t i = 0; i < list.size() && i < 16; ++i)
      slowest.push_back({{"shard", list[i].shard},
                         {"node", list[i].node},
                         {"queued_runs", list[i].queued},
                         {"in_flight_ms", list[i].in_flight_ms},
                         {"catching_up", list[i].catching_up}});
    std::size_t kept = 0;
    for (auto& [s, r] : rings)
      kept += r.bytes;
    return json{{"leads", shards.size()},
                {"follows", follows},
                {"writes_waiting", waiting},
                {"followers_behind", list.size()},
                {"slowest_followers", std::move(slowest)},
                {"kept_run_bytes", kept},
                {"failovers", failovers},
                {"isr_removals", removals},
                {"repairs", repairs},
                {"shards", std::move(led)}};
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
      failover_cv.notify_all();
      repair_cv.notify_all();
      left.swap(shards);
      unapplied.swap(applies);
    }
    for (auto* t : {&worker, &applier, &failer, &repairer})
      if (t->joinable())
        t->join();
    for (auto& job : unapplied)
      job.done(error{errc::unavailable, "node '" + cfg.id + "' is stopping"});
    for (auto& [s, st] : left) {
      auto dones = abandon(st);
      for (auto& d : dones)
        d(error{errc::unavailable, "node '" + cfg.id + "' is stopping"});
    }
  }
};

std::unique_ptr<shard_replicator>
shard_replicator::start(engine& eng, const cluster::node& n,
                        std::shared_ptr<cluster::coordinator> coord, config cfg,
                        server::logger& log) {
  auto p = std::make_shared<impl>(eng, n, std::move(coord), std::move(cfg), log);
  auto v = n.view();
  p->ring_cap =
    std::max<std::size_t>(std::size_t{256} << 10, ring_budget / std::max(1u, v->settings.shards));
  for (auto& e : v->shards)
    if (e.owner == p->cfg.id && e.to.empty())
      p->unconfirmed.insert(e.shard); // its copy may lack what was acknowledged
  p->leaving = p->cfg.new_store;
  if (p->leaving)
    p->leave_isrs(); // else the failover thread tries again
  p->follow_view(*v);
  auto* raw = p.get();
  p->worker = std::thread([raw] { raw->loop(); });
  p->applier = std::thread([raw] { raw->apply_loop(); });
  p->failer = std::thread([raw] { raw->failover_loop(); });
  p->repairer = std::thread([raw] { raw->repair_loop(); });
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

void shard_replicator::replica_position(json params, std::function<void(result<json>)> done) {
  p_->queue_apply("replica_position", std::move(params), std::move(done));
}

void shard_replicator::replica_copy(json params, std::function<void(result<json>)> done) {
  p_->queue_apply("replica_copy", std::move(params), std::move(done));
}

json shard_replicator::stats() const {
  return p_->stats();
}

bool shard_replicator::leads(std::uint32_t shard, std::uint64_t epoch) const {
  std::lock_guard<std::mutex> lock(p_->mtx);
  auto* st = p_->find(shard);
  return st && st->epoch == epoch && st->leading;
}

void shard_replicator::stop() {
  p_->stop();
}

} // namespace agentstate::tools
