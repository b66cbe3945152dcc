// SPDX-License-Identifier: Apache-2.0
#include "tools/cluster_move.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "cluster/etcd.hpp"
#include "model/shard.hpp"

namespace agentstate::tools {

namespace {

using clock_type = std::chrono::steady_clock;

/// One node the move talks to, connected on first use and again after a
/// lost connection.
struct node_link {
  std::string id, address;
  std::unique_ptr<rpc_client> client;
};

/// `method` at node `n`: its answer, or its error; asked again (a new
/// connection when the old one is gone) while it answers unavailable.
result<json> call_node(node_link& n, const move_options& o, const std::string& method,
                       const json& params) {
  std::string why;
  for (unsigned attempt = 0;; ++attempt) {
    if (!n.client || !n.client->connected()) {
      client_options co = o.node;
      co.address = n.address;
      // A chunk travels as base64 (4/3 of its bytes) inside the envelope.
      co.max_line_bytes = std::max(co.max_line_bytes, 2 * o.chunk_bytes + (std::size_t{1} << 20));
      auto made = rpc_client::connect(co);
      if (made)
        n.client = std::move(*made);
      else
        why = made.err().message;
    }
    if (n.client && n.client->connected()) {
      auto r = n.client->call(method, params, o.call_timeout);
      if (r.value)
        return std::move(*r.value);
      if (r.value.code() != errc::unavailable)
        return error{r.value.code(),
                     "node '" + n.id + "' (" + method + "): " + r.value.err().message};
      why = r.value.err().message;
    }
    if (attempt >= o.retries)
      return error{errc::unavailable,
                   "node '" + n.id + "' at " + n.address + " (" + method + "): " + why};
    std::this_thread::sleep_for(
      std::min(std::chrono::milliseconds(100) * (attempt + 1), std::chrono::milliseconds(2000)));
  }
}

/// The live node `id` of `v`, or why not.
result<const cluster::node_info*> live_node(const cluster::cluster_view& v, const std::string& id,
                                            const char* what) {
  const auto* n = v.node(id);
  if (!n)
    return error{errc::invalid_argument,
                 std::string(what) + " '" + id + "' is not a node of " + v.cluster};
  if (!n->alive)
    return error{errc::unavailable, std::string(what) + " '" + id + "' is down"};
  return n;
}

std::uint64_t count_of(const json& j, const char* name) {
  auto it = j.find(name);
  return it != j.end() && it->is_number_unsigned() ? it->get<std::uint64_t>() : 0;
}

} // namespace

json move_report::to_json() const {
  return json{{"shard", shard},
              {"from", from},
              {"to", to},
              {"epoch", epoch},
              {"chunks", chunks},
              {"sessions", sessions},
              {"rows", rows},
              {"bytes", bytes},
              {"fenced_sessions", fenced_sessions},
              {"whole_copy_fenced", whole_copy_fenced},
              {"unavailable_ms", unavailable_ms},
              {"nothing_to_do", nothing_to_do},
              {"undone", undone}};
}

namespace {

/// The steps of one move, between the tool and the two nodes.
struct mover_run {
  const move_options& o;
  std::uint32_t shard;
  node_link from, into;
  move_report& out;

  /// Copies the shard from `from` to `into` at `epoch`: all of it, or with
  /// `since`, what the owner's log names after it. Counts into `out` (and
  /// `fenced`); the first chunk's "mark" into `mark`.
  result<void> copy(std::uint64_t epoch, std::optional<std::uint64_t> since, std::uint64_t* fenced,
                    std::optional<std::uint64_t>* mark) {
    json next = nullptr;
    do {
      json ask = {{"shard", shard}, {"epoch", epoch}, {"max_bytes", o.chunk_bytes}};
      if (!next.is_null())
        ask["from"] = next;
      if (since)
        ask["since"] = *since;
      auto chunk = call_node(from, o, "shard_export", ask);
      if (!chunk)
        return std::move(chunk).err();
      auto text = chunk->find("chunk");
      if (text == chunk->end() || !text->is_string() || !chunk->contains("next"))
        return error{errc::internal,
                     "node '" + from.id + "' answered shard_export without a chunk"};
      if (mark && next.is_null() && chunk->contains("mark"))
        *mark = count_of(*chunk, "mark");
      out.bytes += text->get_ref<const std::string&>().size() / 4 * 3;
      const auto sessions = count_of(*chunk, "sessions");
      out.sessions += sessions;
      if (fenced)
        *fenced += sessions;
      out.rows += count_of(*chunk, "rows");
      ++out.chunks;
      next = (*chunk)["next"];
      json put = {{"shard", shard}, {"epoch", epoch}, {"chunk", std::move(*text)}};
      if (auto r = call_node(into, o, "shard_import", put); !r)
        return std::move(r).err();
    } while (!next.is_null());
    return {};
  }

  /// Whether the two nodes' digests of the shard agree.
  result<bool> same(std::uint64_t epoch) {
    json ask = {{"shard", shard}, {"epoch", epoch}};
    auto a = call_node(from, o, "shard_digest", ask);
    if (!a)
      return std::move(a).err();
    auto b = call_node(into, o, "shard_digest", ask);
    if (!b)
      return std::move(b).err();
    return *a == *b;
  }
};

} // namespace

result<move_report> move_shard(cluster::coordinator& c, std::uint32_t shard, const std::string& to,
                               const move_options& o) {
  auto v = c.load();
  if (!v)
    return std::move(v).err();
  if (auto why = replicas_not_served(*v); !why.empty())
    return error{errc::invalid_argument, why};
  if (shard >= v->shards.size())
    return error{errc::invalid_argument,
                 "shard " + std::to_string(shard) + " is beyond the cluster's "
                   + std::to_string(v->shards.size())};
  move_report out;
  out.shard = shard;
  out.to = to;
  auto target = live_node(*v, to, "node");
  if (!target)
    return std::move(target).err();
  auto e = v->shards[shard];
  out.from = e.owner;
  if (e.owner.empty())
    return error{errc::unavailable,
                 "shard " + std::to_string(shard) + " has no owner yet: nothing to move"};
  if (e.owner == to) {
    out.epoch = e.epoch;
    if (e.to.empty()) {
      out.nothing_to_do = true;
      return out;
    }
    // Moving away from `to`: it stays (its rows never left; the copy made
    // elsewhere is dropped there).
    auto set = c.set_shard(e, to, e.epoch + 1, "");
    if (!set)
      return std::move(set).err();
    out.epoch = set->epoch;
    out.undone = true;
    return out;
  }
  auto source = live_node(*v, e.owner, "the shard's owner");
  if (!source)
    return error{source.code(), source.err().message + ": its rows cannot be read"};
  mover_run run{
    o, shard, {e.owner, (*source)->address, nullptr}, {to, (*target)->address, nullptr}, out};
  std::optional<std::uint64_t> mark;
  if (e.to != to) { // not yet moving there: a first copy while the owner serves
    auto set = c.set_shard(e, e.owner, e.epoch + 1, to, true);
    if (!set)
      return std::move(set).err();
    e = *set;
  }
  auto stopped = clock_type::now();
  if (e.copying) {
    if (auto r = run.copy(e.epoch, std::nullopt, nullptr, &mark); !r)
      return std::move(r).err();
    stopped = clock_type::now();
    auto set = c.set_shard(e, e.owner, e.epoch + 1, to);
    if (!set)
      return std::move(set).err();
    e = *set;
  }
  bool caught_up = false;
  if (mark) {
    auto r = run.copy(e.epoch, mark, &out.fenced_sessions, nullptr);
    if (r)
      caught_up = true;
    else if (r.code() != errc::cursor_expired && r.code() != errc::condition_failed)
      return std::move(r).err();
  }
  if (caught_up) {
    auto same = run.same(e.epoch);
    if (!same)
      return std::move(same).err();
    caught_up = *same;
  }
  if (!caught_up) {
    out.whole_copy_fenced = true;
    if (auto r = run.copy(e.epoch, std::nullopt, &out.fenced_sessions, nullptr); !r)
      return std::move(r).err();
    auto same = run.same(e.epoch);
    if (!same)
      return std::move(same).err();
    if (!*same)
      return error{errc::data_corrupt,
                   "after a whole copy, node '" + to + "''s rows of shard " + std::to_string(shard)
                     + " differ from node '" + e.owner + "''s: the move stays where it is"};
  }
  // The switch: only from the entry the copy was made under.
  auto now = c.load();
  if (!now)
    return std::move(now).err();
  const auto& cur = now->shards[shard];
  if (cur.owner != e.owner || cur.epoch != e.epoch || cur.to != to || cur.copying)
    return error{errc::version_conflict,
                 "shard " + std::to_string(shard) + " changed in the map while it was copied"};
  auto done = c.set_shard(cur, to, cur.epoch + 1, "");
  if (!done)
    return std::move(done).err();
  out.epoch = done->epoch;
  out.unavailable_ms =
    std::chrono::duration<double, std::milli>(clock_type::now() - stopped).count();
  return out;
}

result<std::size_t> drain_node(cluster::coordinator& c, const std::string& node,
                               const move_options& o,
                               const std::function<void(const move_report&)>& on_moved) {
  auto v = c.load();
  if (!v)
    return std::move(v).err();
  if (auto why = replicas_not_served(*v); !why.empty())
    return error{errc::invalid_argument, why};
  if (!v->node(node))
    return error{errc::invalid_argument, "'" + node + "' is not a node of " + v->cluster};
  std::vector<std::uint32_t> todo;
  std::map<std::string, std::size_t> load; // shards per live node but `node`
  for (auto& n : v->nodes)
    if (n.alive && n.id != node)
      load[n.id] = 0;
  if (load.empty())
    return error{errc::invalid_argument,
                 "no other node is live to take the shards of '" + node + "'"};
  for (auto& e : v->shards) {
    if (e.owner == node)
      todo.push_back(e.shard);
    else if (auto it = load.find(e.owner); it != load.end())
      ++it->second;
  }
  std::mutex mtx;
  std::size_t next = 0, moved = 0;
  std::optional<error> failed;
  auto work = [&] {
    for (;;) {
      std::uint32_t shard = 0;
      std::string to;
      {
        std::lock_guard<std::mutex> lock(mtx);
        if (failed || next == todo.size())
          return;
        shard = todo[next++];
        auto least = std::min_element(load.begin(), load.end(), [](const auto& a, const auto& b) {
          return a.second < b.second;
        });
        to = least->first;
        ++least->second;
      }
      auto r = move_shard(c, shard, to, o);
      std::lock_guard<std::mutex> lock(mtx);
      if (!r) {
        if (!failed)
          failed =
            error{r.code(),
                  "shard " + std::to_string(shard) + " to node '" + to + "': " + r.err().message};
        return;
      }
      ++moved;
      if (on_moved)
        on_moved(*r);
    }
  };
  std::thread second(work);
  work();
  second.join();
  if (failed)
    return *failed;
  return moved;
}

json adopt_report::to_json() const {
  return json{{"shards", shards},     {"chunks", chunks}, {"bytes", bytes},
              {"sessions", sessions}, {"added", added},   {"present", present}};
}

result<adopt_report> adopt_store(
  cluster::coordinator& c, engine& local, const move_options& o,
  const std::function<void(std::uint32_t, const std::string&, const adopt_report&)>& on_shard) {
  auto v = c.load();
  if (!v)
    return std::move(v).err();
  if (auto why = replicas_not_served(*v); !why.empty())
    return error{errc::invalid_argument, why};
  const auto count = v->settings.shards;
  adopt_report out;
  std::map<std::string, node_link> links;
  for (std::uint32_t s = 0; s < count; ++s) {
    const auto r = model::shard_range(s, count);
    const hash_range range{r.lo, r.hi};
    const auto& e = v->shards[s];
    node_link* to = nullptr;
    std::string at;
    do {
      auto chunk = local.read_range(range, at, o.chunk_bytes);
      if (!chunk)
        return error{chunk.code(),
                     "reading the store's rows of shard " + std::to_string(s) + ": "
                       + chunk.err().message};
      at = chunk->next;
      if (chunk->rows == 0)
        continue;
      if (!to) {
        if (e.owner.empty())
          return error{errc::unavailable,
                       "shard " + std::to_string(s) + " has no owner yet: start the nodes first"};
        if (!e.to.empty())
          return error{errc::unavailable,
                       "shard " + std::to_string(s) + " is moving to node '" + e.to
                         + "': adopt again once it has moved"};
        const std::string what = "shard " + std::to_string(s) + "'s owner";
        auto owner = live_node(*v, e.owner, what.c_str());
        if (!owner)
          return std::move(owner).err();
        auto it = links.find(e.owner);
        if (it == links.end())
          it = links.emplace(e.owner, node_link{e.owner, (*owner)->address, nullptr}).first;
        to = &it->second;
        ++out.shards;
      }
      json put = {{"shard", s}, {"epoch", e.epoch}, {"chunk", cluster::b64(chunk->bytes)}};
      auto got = call_node(*to, o, "shard_adopt", put);
      if (!got)
        return error{got.code(), "shard " + std::to_string(s) + ": " + got.err().message};
      ++out.chunks;
      out.bytes += chunk->bytes.size();
      out.sessions += count_of(*got, "sessions");
      out.added += count_of(*got, "added");
      out.present += count_of(*got, "present");
    } while (!at.empty());
    if (to && on_shard)
      on_shard(s, e.owner, out);
  }
  return out;
}

json verify_report::to_json() const {
  return json{{"shards", shards},       {"copies", copies},           {"equal", equal},
              {"different", different}, {"out_of_sync", out_of_sync}, {"problems", problems}};
}

result<verify_report> verify_replicas(cluster::coordinator& c, const move_options& o,
                                      const std::function<void(const json&)>& on_problem) {
  auto v = c.load();
  if (!v)
    return std::move(v).err();
  verify_report out;
  std::map<std::string, node_link> links;
  auto state_at = [&](const std::string& id, std::uint32_t s) -> result<json> {
    auto* n = v->node(id);
    if (!n)
      return error{errc::unavailable, "node '" + id + "' is not registered"};
    auto& link = links[id];
    link.id = id;
    link.address = n->address;
    return call_node(link, o, "replica_state", json{{"shard", s}});
  };
  auto problem = [&](json p) {
    ++out.different;
    if (on_problem)
      on_problem(p);
    out.problems.push_back(std::move(p));
  };
  for (auto& e : v->shards) {
    if (e.owner.empty() || e.replicas.size() < 2)
      continue;
    ++out.shards;
    for (auto& id : e.replicas) {
      if (id == e.owner)
        continue;
      if (std::find(e.isr.begin(), e.isr.end(), id) == e.isr.end()) {
        ++out.out_of_sync;
        continue;
      }
      ++out.copies;
      // Writes go on: a copy may be a few runs behind its owner for a moment.
      // Both are read again until their positions meet (bounded: 10 tries).
      json owner, copy;
      std::string why;
      for (int attempt = 0; attempt < 10; ++attempt) {
        auto a = state_at(e.owner, e.shard);
        auto b = state_at(id, e.shard);
        if (!a || !b) {
          why = !a ? a.err().message : b.err().message;
          break;
        }
        owner = std::move(*a);
        copy = std::move(*b);
        if (owner["epoch"] == copy["epoch"] && owner["seq"] == copy["seq"])
          break;
        // bounded poll: the follower applies what its owner sent on its own thread
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      json p = {{"shard", e.shard}, {"owner", e.owner}, {"node", id}};
      if (!why.empty()) {
        p["why"] = "cannot be read: " + why;
        problem(std::move(p));
      } else if (owner["epoch"] != copy["epoch"] || owner["seq"] != copy["seq"]) {
        p["why"] = "at another position than its owner";
        p["at"] = copy;
        p["owner_at"] = owner;
        problem(std::move(p));
      } else if (owner != copy) {
        p["why"] = "holds other rows than its owner at the same position";
        p["at"] = copy;
        p["owner_at"] = owner;
        problem(std::move(p));
      } else {
        ++out.equal;
      }
    }
  }
  return out;
}

lag_report read_lags(const cluster::cluster_view& v, const move_options& o) {
  lag_report out;
  std::set<std::string> owners;
  for (auto& e : v.shards)
    if (!e.owner.empty() && e.replicas.size() > 1)
      owners.insert(e.owner);
  auto once = o;
  once.retries = 0;
  for (auto& id : owners) {
    auto* n = v.node(id);
    if (!n || !n->alive) {
      out.unreachable[id] = "it is down";
      continue;
    }
    node_link link{id, n->address, nullptr};
    auto r = call_node(link, once, "stats", json::object());
    if (!r) {
      out.unreachable[id] = r.err().message;
      continue;
    }
    const json* led = nullptr;
    if (auto s = r->find("server"); s != r->end() && s->is_object())
      if (auto c = s->find("cluster"); c != s->end() && c->is_object())
        if (auto rep = c->find("replication"); rep != c->end() && rep->is_object())
          if (auto sh = rep->find("shards"); sh != rep->end() && sh->is_array())
            led = &*sh;
    if (!led) {
      out.unreachable[id] = "its stats have no server.cluster.replication.shards";
      continue;
    }
    for (auto& e : *led) {
      auto s = e.find("shard");
      auto f = e.find("followers");
      if (s == e.end() || !s->is_number_unsigned() || f == e.end() || !f->is_array())
        continue;
      const auto shard = s->get<std::uint32_t>();
      if (shard < v.shards.size() && v.shards[shard].owner == id)
        out.shards[shard] = *f;
    }
  }
  return out;
}

} // namespace agentstate::tools
