// SPDX-License-Identifier: Apache-2.0
// cluster/etcd_coordinator.cpp: the coordinator on etcd. A cluster NAME is the
// keys under /agentstate/NAME/ (docs/cluster.md):
//   settings          {"shards":S,"expect_nodes":N,"format":1}   written once
//   nodes/ID          {"address":"HOST:PORT"}                    the registry
//   alive/ID          {"address":"HOST:PORT"}    under the node's lease
//   controller        "ID"                       under the controller's lease
//   shards/NNNNN      {"owner":"ID","epoch":E[,"to":"ID"[,"copying":true]]}
//                                                          absent until first owned
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
    const std::string key = root_ + "settings";
    json value = {{"shards", s.shards}, {"expect_nodes", s.expect_nodes}, {"format", 1}};
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

  result<shard_entry> set_shard(const shard_entry& expected, const std::string& owner,
                                std::uint64_t epoch, const std::string& to, bool copying) override {
    if (!to.empty())
      if (auto why = check_name("node id", to); !why.empty())
        return error{errc::invalid_argument, why};
    if (copying && to.empty())
      return error{errc::invalid_argument, "a shard is copied only to a node it moves to"};
    auto r = put_shards({expected}, {owner}, {epoch}, {to}, copying);
    if (!r)
      return std::move(r).err();
    auto v = etcd_->range(shard_key(expected.shard));
    if (!v)
      return std::move(v).err();
    shard_entry e{expected.shard, owner, epoch, to, v->kvs.empty() ? 0 : v->kvs[0].mod_revision,
                  copying};
    return e;
  }

  result<void> set_shards(const std::vector<shard_entry>& expected,
                          const std::vector<std::string>& owners,
                          const std::vector<std::uint64_t>& epochs) override {
    return put_shards(expected, owners, epochs, std::vector<std::string>(expected.size()));
  }

  result<void> put_shards(const std::vector<shard_entry>& expected,
                          const std::vector<std::string>& owners,
                          const std::vector<std::uint64_t>& epochs,
                          const std::vector<std::string>& tos, bool copying = false) {
    if (expected.size() != owners.size() || expected.size() != epochs.size()
        || expected.size() != tos.size())
      return error{errc::invalid_argument, "set_shards: lists of different lengths"};
    if (expected.size() > max_batch)
      return error{errc::invalid_argument,
                   "set_shards: at most " + std::to_string(max_batch) + " shards in one step"};
    std::vector<etcd_compare> cmp;
    std::vector<etcd_op> ops;
    for (std::size_t i = 0; i < expected.size(); ++i) {
      if (epochs[i] <= expected[i].epoch)
        return error{errc::invalid_argument,
                     "shard " + std::to_string(expected[i].shard) + ": the new epoch "
                       + std::to_string(epochs[i]) + " is not above "
                       + std::to_string(expected[i].epoch)};
      if (auto why = check_name("node id", owners[i]); !why.empty())
        return error{errc::invalid_argument, why};
      const std::string key = shard_key(expected[i].shard);
      if (expected[i].revision == 0)
        cmp.push_back({key, etcd_compare::target::create_revision, 0, {}});
      else
        cmp.push_back({key, etcd_compare::target::mod_revision, expected[i].revision, {}});
      json value = {{"owner", owners[i]}, {"epoch", epochs[i]}};
      if (!tos[i].empty())
        value["to"] = tos[i];
      if (copying)
        value["copying"] = true;
      ops.push_back({etcd_op::kind::put, key, value.dump(), 0, {}});
    }
    auto t = etcd_->txn(cmp, ops, {});
    if (!t)
      return std::move(t).err();
    if (!t->succeeded)
      return error{errc::version_conflict, "the shard map changed since it was read"};
    return {};
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

const node_info* cluster_view::node(const std::string& id) const {
  for (auto& n : nodes)
    if (n.id == id)
      return &n;
  return nullptr;
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
