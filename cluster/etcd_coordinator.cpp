// SPDX-License-Identifier: Apache-2.0
// cluster/etcd_coordinator.cpp: the coordinator on etcd. A cluster NAME is the
// keys under /agentstate/NAME/ (docs/cluster.md):
//   settings          {"shards":S,"expect_nodes":N,"replicas":R,"min_insync":M,
//                      "format":1}                             written once
//   nodes/ID          {"address":"HOST:PORT"}                    the registry
//   alive/ID          {"address":"HOST:PORT"}    under the node's lease
//   controller        "ID"                       under the controller's lease
//   shards/NNNNN      {"owner":"ID","epoch":E[,"to":"ID"[,"copying":true]]
//                      [,"replicas":[IDS],"isr":[IDS]]}   absent until first owned
//                      (replicas and isr only when R > 1; else both are [owner])
#include <algorithm>
#include <cstdio>
#include <map>
#include <utility>

#include "agentstate/json.hpp"
#include "cluster/coordinator.hpp"
#include "cluster/etcd.hpp"

namespace agentstate::cluster {

namespace {

/// etcd's default limit of operations in one transaction is 128; a batch of
/// shards takes two per shard (compare, put).
constexpr std::size_t max_batch = 60;

/// Reads member `name` of `s`, when present, as an array of node ids into
/// `out`; false when it is not one.
bool read_names(const json& s, const char* name, std::vector<std::string>& out) {
  auto it = s.find(name);
  if (it == s.end())
    return true;
  if (!it->is_array() || it->size() > 7)
    return false;
  for (auto& x : *it) {
    if (!x.is_string() || !check_name("node id", x.get<std::string>()).empty())
      return false;
    out.push_back(x.get<std::string>());
  }
  return true;
}

std::string shard_key_suffix(std::uint32_t shard) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%05u", shard);
  return buf;
}

class etcd_membership final : public membership {
public:
  etcd_membership(std::shared_ptr<etcd_client> etcd, std::string root, std::string id,
                  std::int64_t lease, std::chrono::seconds ttl)
    : etcd_(std::move(etcd)), root_(std::move(root)), id_(std::move(id)), lease_(lease), ttl_(ttl) {
  }

  result<void> keepalive() override {
    auto r = etcd_->lease_keepalive(lease_);
    if (!r)
      return std::move(r).err();
    return {};
  }

  result<void> leave() override { return etcd_->lease_revoke(lease_); }

  result<bool> lead() override {
    const std::string key = root_ + "controller";
    auto t = etcd_->txn({{key, etcd_compare::target::create_revision, 0, {}}},
                        {{etcd_op::kind::put, key, id_, lease_, {}}},
                        {{etcd_op::kind::range, key, {}, 0, {}}});
    if (!t)
      return std::move(t).err();
    if (t->succeeded)
      return true;
    if (t->ranges.empty() || t->ranges[0].kvs.empty())
      return false; // the controller left between the compare and the read
    const etcd_kv& kv = t->ranges[0].kvs[0];
    return kv.value == id_ && kv.lease == lease_;
  }

  std::chrono::seconds ttl() const override { return ttl_; }

private:
  std::shared_ptr<etcd_client> etcd_;
  std::string root_, id_;
  std::int64_t lease_;
  std::chrono::seconds ttl_;
};

class etcd_coordinator final : public coordinator {
public:
  etcd_coordinator(std::shared_ptr<etcd_client> etcd, std::string urls, std::string name)
    : etcd_(std::move(etcd)), urls_(std::move(urls)), name_(std::move(name)),
      root_("/agentstate/" + name_ + "/") {}

  const std::string& name() const override { return name_; }
  std::string describe() const override { return "cluster '" + name_ + "' in etcd at " + urls_; }

  result<void> create(const cluster_settings& s) override {
    if (s.shards < 1 || s.shards > 65536)
      return error{errc::invalid_argument,
                   "the shard count must be 1..65536, not " + std::to_string(s.shards)};
    if (s.expect_nodes < 1 || s.expect_nodes > s.shards)
      return error{errc::invalid_argument,
                   "the expected node count must be 1..shards, not "
                     + std::to_string(s.expect_nodes)};
    if (s.replicas < 1 || s.replicas > 7)
      return error{errc::invalid_argument,
                   "the replica count must be 1..7, not " + std::to_string(s.replicas)};
    if (s.replicas > s.expect_nodes)
      return error{errc::invalid_argument,
                   "a cluster keeping " + std::to_string(s.replicas)
                     + " replicas of each shard expects at least as many nodes, not "
                     + std::to_string(s.expect_nodes)};
    if (s.min_insync < 1 || s.min_insync > s.replicas)
      return error{errc::invalid_argument,
                   "the minimum in-sync count must be 1..replicas (" + std::to_string(s.replicas)
                     + "), not " + std::to_string(s.min_insync)};
    const std::string key = root_ + "settings";
    json value = {{"shards", s.shards},
                  {"expect_nodes", s.expect_nodes},
                  {"replicas", s.replicas},
                  {"min_insync", s.min_insync},
                  {"format", 1}};
    auto t = etcd_->txn({{key, etcd_compare::target::create_revision, 0, {}}},
                        {{etcd_op::kind::put, key, value.dump(), 0, {}}}, {});
    if (!t)
      return std::move(t).err();
    if (!t->succeeded)
      return error{errc::already_exists, describe() + " exists"};
    return {};
  }

  result<cluster_view> load() override {
    auto r = etcd_->range(root_, prefix_end(root_));
    if (!r)
      return std::move(r).err();
    cluster_view v;
    v.cluster = name_;
    v.revision = r->revision;
    bool have_settings = false;
    std::map<std::string, node_info> nodes;
    std::map<std::uint32_t, shard_entry> shards;
    for (auto& kv : r->kvs) {
      std::string rest = kv.key.substr(root_.size());
      if (rest == "settings") {
        json s = json::parse(kv.value, nullptr, false);
        if (!s.is_object() || !s.contains("shards") || !s["shards"].is_number_unsigned()
            || s["shards"].get<std::uint64_t>() < 1 || s["shards"].get<std::uint64_t>() > 65536)
          return error{errc::data_corrupt, describe() + ": the settings key is malformed"};
        v.settings.shards = s["shards"].get<std::uint32_t>();
        v.settings.expect_nodes = s.value("expect_nodes", 1u);
        auto count = [&s](const char* name) -> std::int64_t {
          auto it = s.find(name);
          if (it == s.end())
            return 1; // a cluster created before replicas: one copy
          return it->is_number_unsigned()
            ? static_cast<std::int64_t>(std::min<std::uint64_t>(it->get<std::uint64_t>(), 1000))
            : -1;
        };
        auto r = count("replicas"), m = count("min_insync");
        if (r < 1 || r > 7 || m < 1 || m > r)
          return error{errc::data_corrupt, describe() + ": the settings key is malformed"};
        v.settings.replicas = static_cast<std::uint32_t>(r);
        v.settings.min_insync = static_cast<std::uint32_t>(m);
        have_settings = true;
      } else if (rest == "controller") {
        v.controller = kv.value;
      } else if (rest.rfind("nodes/", 0) == 0 || rest.rfind("alive/", 0) == 0) {
        bool alive = rest[0] == 'a';
        std::string id = rest.substr(6);
        json n = json::parse(kv.value, nullptr, false);
        auto& info = nodes[id];
        info.id = id;
        if (n.is_object() && n.contains("address") && n["address"].is_string()
            && (info.address.empty() || alive))
          info.address = n["address"].get<std::string>();
        if (alive)
          info.alive = true;
      } else if (rest.rfind("shards/", 0) == 0) {
        json s = json::parse(kv.value, nullptr, false);
        std::string num = rest.substr(7);
        if (num.size() != 5 || num.find_first_not_of("0123456789") != std::string::npos
            || !s.is_object() || !s.contains("owner") || !s["owner"].is_string()
            || !s.contains("epoch") || !s["epoch"].is_number_unsigned())
          return error{errc::data_corrupt, describe() + ": shard key '" + rest + "' is malformed"};
        shard_entry e;
        e.shard = static_cast<std::uint32_t>(std::stoul(num));
        e.owner = s["owner"].get<std::string>();
        e.epoch = s["epoch"].get<std::uint64_t>();
        if (auto to = s.find("to"); to != s.end()) {
          if (!to->is_string())
            return error{errc::data_corrupt,
                         describe() + ": shard key '" + rest + "' is malformed"};
          e.to = to->get<std::string>();
        }
        if (auto copying = s.find("copying"); copying != s.end()) {
          if (!copying->is_boolean() || e.to.empty())
            return error{errc::data_corrupt,
                         describe() + ": shard key '" + rest + "' is malformed"};
          e.copying = copying->get<bool>();
        }
        if (!read_names(s, "replicas", e.replicas) || !read_names(s, "isr", e.isr))
          return error{errc::data_corrupt, describe() + ": shard key '" + rest + "' is malformed"};
        if (e.replicas.empty() && !e.owner.empty())
          e.replicas = {e.owner};
        if (e.isr.empty() && !e.owner.empty())
          e.isr = {e.owner};
        if (auto why = check_entry(e); !why.empty())
          return error{errc::data_corrupt,
                       describe() + ": shard key '" + rest + "' is inconsistent: " + why};
        e.revision = kv.mod_revision;
        shards[e.shard] = std::move(e);
      }
    }
    if (!have_settings)
      return error{errc::not_found, describe() + " does not exist (agentstate cluster init)"};
    for (auto& [id, n] : nodes)
      v.nodes.push_back(std::move(n));
    v.shards.resize(v.settings.shards);
    for (std::uint32_t i = 0; i < v.settings.shards; ++i)
      v.shards[i].shard = i;
    for (auto& [i, e] : shards) {
      if (i >= v.settings.shards)
        return error{errc::data_corrupt,
                     describe() + ": shard " + std::to_string(i) + " is beyond the cluster's "
                       + std::to_string(v.settings.shards)};
      v.shards[i] = std::move(e);
    }
    return v;
  }

  result<std::int64_t> update_shards(const std::vector<shard_entry>& expected,
                                     const std::vector<shard_entry>& next) override {
    if (expected.size() != next.size())
      return error{errc::invalid_argument, "update_shards: lists of different lengths"};
    if (expected.size() > max_batch)
      return error{errc::invalid_argument,
                   "update_shards: at most " + std::to_string(max_batch) + " shards in one step"};
    std::vector<etcd_compare> cmp;
    std::vector<etcd_op> ops;
    for (std::size_t i = 0; i < expected.size(); ++i) {
      const shard_entry& was = expected[i];
      const shard_entry& e = next[i];
      const std::string what = "shard " + std::to_string(was.shard) + ": ";
      if (auto why = check_name("node id", e.owner); !why.empty())
        return error{errc::invalid_argument, what + why};
      if (!e.to.empty())
        if (auto why = check_name("node id", e.to); !why.empty())
          return error{errc::invalid_argument, what + why};
      if (e.copying && e.to.empty())
        return error{errc::invalid_argument, what + "a shard is copied only to a node it moves to"};
      if (auto why = check_entry(e); !why.empty())
        return error{errc::invalid_argument, what + why};
      for (auto& id : e.replicas)
        if (auto why = check_name("node id", id); !why.empty())
          return error{errc::invalid_argument, what + why};
      const bool same_term = was.revision != 0 && e.owner == was.owner && e.to == was.to
        && e.copying == was.copying && e.replicas == was.replicas;
      if (e.epoch < was.epoch || (e.epoch == was.epoch && !same_term))
        return error{
          errc::invalid_argument,
          what + "the new epoch " + std::to_string(e.epoch) + " is not above "
            + std::to_string(was.epoch)
            + (e.epoch == was.epoch ? " (only the in-sync set may change within an epoch)" : "")};
      const std::string key = shard_key(was.shard);
      if (was.revision == 0)
        cmp.push_back({key, etcd_compare::target::create_revision, 0, {}});
      else
        cmp.push_back({key, etcd_compare::target::mod_revision, was.revision, {}});
      json value = {{"owner", e.owner}, {"epoch", e.epoch}};
      if (!e.to.empty())
        value["to"] = e.to;
      if (e.copying)
        value["copying"] = true;
      if (e.replicas.size() > 1) {
        value["replicas"] = e.replicas;
        value["isr"] = e.isr;
      }
      ops.push_back({etcd_op::kind::put, key, value.dump(), 0, {}});
    }
    auto t = etcd_->txn(cmp, ops, {});
    if (!t)
      return std::move(t).err();
    if (!t->succeeded)
      return error{errc::version_conflict, "the shard map changed since it was read"};
    return t->revision;
  }

  result<std::unique_ptr<membership>> join(const std::string& id, const std::string& address,
                                           std::chrono::seconds ttl) override {
    if (auto why = check_name("node id", id); !why.empty())
      return error{errc::invalid_argument, why};
    if (ttl.count() < 1)
      return error{errc::invalid_argument, "a node's lease needs a TTL of at least 1 s"};
    auto settings = etcd_->range(root_ + "settings");
    if (!settings)
      return std::move(settings).err();
    if (settings->kvs.empty())
      return error{errc::not_found, describe() + " does not exist (agentstate cluster init)"};
    auto lease = etcd_->lease_grant(ttl.count());
    if (!lease)
      return std::move(lease).err();
    const std::string alive = root_ + "alive/" + id;
    const std::string value = json{{"address", address}}.dump();
    auto put = etcd_->txn({{alive, etcd_compare::target::create_revision, 0, {}}},
                          {{etcd_op::kind::put, alive, value, *lease, {}},
                           {etcd_op::kind::put, root_ + "nodes/" + id, value, 0, {}}},
                          {});
    if (!put || !put->succeeded) {
      etcd_->lease_revoke(*lease);
      if (!put)
        return std::move(put).err();
      return error{errc::already_exists,
                   "node '" + id + "' is live in " + describe()
                     + " (another process, or one that died less than its lease's TTL ago)"};
    }
    return std::unique_ptr<membership>(new etcd_membership(etcd_, root_, id, *lease, ttl));
  }

  result<void> watch(std::int64_t after_revision, const std::function<bool(std::int64_t)>& on,
                     const std::atomic<bool>& stop) override {
    return etcd_->watch(
      root_, prefix_end(root_), after_revision + 1,
      [&](std::int64_t revision, std::vector<etcd_event>&) { return on(revision); }, stop);
  }

private:
  std::string shard_key(std::uint32_t shard) const {
    return root_ + "shards/" + shard_key_suffix(shard);
  }

  std::shared_ptr<etcd_client> etcd_;
  std::string urls_, name_, root_;
};

} // namespace

std::string check_entry(const shard_entry& e) {
  if (e.owner.empty())
    return e.replicas.empty() && e.isr.empty() && e.to.empty()
      ? ""
      : "a shard without an owner has no replicas, in-sync set or move";
  if (e.replicas.empty() || e.replicas[0] != e.owner)
    return "its replicas must start with its owner '" + e.owner + "'";
  for (std::size_t i = 0; i < e.replicas.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (e.replicas[i] == e.replicas[j])
        return "node '" + e.replicas[i] + "' is named twice among its replicas";
  if (e.isr.empty() || e.isr[0] != e.owner)
    return "its in-sync set must start with its owner '" + e.owner + "'";
  std::size_t at = 0; // the isr is a subsequence of the replicas
  for (auto& id : e.isr) {
    while (at < e.replicas.size() && e.replicas[at] != id)
      ++at;
    if (at == e.replicas.size())
      return "its in-sync set names '" + id
        + "', which is not one of its replicas (or not in their order)";
    ++at;
  }
  return "";
}

namespace {

/// `expected` given to `owner` at `epoch` (moving to `to`): the replicas are
/// {owner} when it kept one copy, else its own with owner first; the in-sync
/// set likewise.
result<shard_entry> handed(const shard_entry& expected, const std::string& owner,
                           std::uint64_t epoch, const std::string& to, bool copying) {
  shard_entry next;
  next.shard = expected.shard;
  next.owner = owner;
  next.epoch = epoch;
  next.to = to;
  next.copying = copying;
  if (expected.replicas.size() <= 1) {
    next.replicas = {owner};
    next.isr = {owner};
    return next;
  }
  auto owner_first = [&owner](const std::vector<std::string>& ids) {
    std::vector<std::string> out{owner};
    for (auto& id : ids)
      if (id != owner)
        out.push_back(id);
    return out;
  };
  next.replicas = owner_first(expected.replicas);
  next.isr = owner_first(expected.isr);
  if (next.replicas.size() > expected.replicas.size())
    return error{errc::invalid_argument,
                 "shard " + std::to_string(expected.shard) + " keeps "
                   + std::to_string(expected.replicas.size())
                   + " replicas: its owner can only become one of them"};
  return next;
}

} // namespace

result<shard_entry> coordinator::set_shard(const shard_entry& expected, const std::string& owner,
                                           std::uint64_t epoch, const std::string& to,
                                           bool copying) {
  auto next = handed(expected, owner, epoch, to, copying);
  if (!next)
    return std::move(next).err();
  auto r = update_shards({expected}, {*next});
  if (!r)
    return std::move(r).err();
  next->revision = *r;
  return std::move(*next);
}

result<void> coordinator::set_shards(const std::vector<shard_entry>& expected,
                                     const std::vector<std::string>& owners,
                                     const std::vector<std::uint64_t>& epochs) {
  if (expected.size() != owners.size() || expected.size() != epochs.size())
    return error{errc::invalid_argument, "set_shards: lists of different lengths"};
  std::vector<shard_entry> next;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    auto e = handed(expected[i], owners[i], epochs[i], "", false);
    if (!e)
      return std::move(e).err();
    next.push_back(std::move(*e));
  }
  auto r = update_shards(expected, next);
  if (!r)
    return std::move(r).err();
  return {};
}

const node_info* cluster_view::node(const std::string& id) const {
  for (auto& n : nodes)
    if (n.id == id)
      return &n;
  return nullptr;
}

std::string replicas_not_served(const cluster_view& v) {
  if (v.settings.replicas <= 1)
    return "";
  return "cluster '" + v.cluster + "' keeps " + std::to_string(v.settings.replicas)
    + " replicas of each shard: moving, draining and adopting into a cluster with replicas "
      "is not built yet";
}

std::string check_name(const std::string& what, const std::string& name) {
  bool ok = !name.empty() && name.size() <= 64 && name[0] != '.' && name[0] != '-';
  for (char c : name)
    ok = ok
      && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.'
          || c == '_' || c == '-');
  if (ok)
    return "";
  return "a " + what + " is 1 to 64 of A-Z a-z 0-9 . _ - (not starting with . or -), not '" + name
    + "'";
}

result<std::unique_ptr<coordinator>> make_etcd_coordinator(const std::string& urls,
                                                           const std::string& cluster) {
  if (auto why = check_name("cluster name", cluster); !why.empty())
    return error{errc::invalid_argument, why};
  auto eps = etcd_client::parse_endpoints(urls);
  if (!eps)
    return std::move(eps).err();
  etcd_client::config c;
  c.endpoints = std::move(*eps);
  auto client = etcd_client::make(std::move(c));
  if (!client)
    return std::move(client).err();
  return std::unique_ptr<coordinator>(
    new etcd_coordinator(std::shared_ptr<etcd_client>(std::move(*client)), urls, cluster));
}

} // namespace agentstate::cluster
