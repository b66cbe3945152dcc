// SPDX-License-Identifier: Apache-2.0
// The coordinator on a real etcd (tests/support/etcd_process.hpp): creating a
// cluster, the shard map's compare-and-swap and epochs, the node registry
// under leases, the controller role, the watch; and the shard function's
// documented values.
#include <doctest/doctest.h>

#include "cluster/coordinator.hpp"
#include "cluster/etcd.hpp"
#include "model/shard.hpp"
#include "support/etcd_process.hpp"

#include <atomic>
#include <map>
#include <set>
#include <string>
#include <thread>

namespace {

using namespace agentstate;
using namespace std::chrono_literals;

std::unique_ptr<cluster::coordinator> coordinator_of(const test::etcd_process& etcd,
                                                     const std::string& name) {
  auto c = cluster::make_etcd_coordinator(etcd.url(), name);
  REQUIRE(c.ok());
  return std::move(*c);
}

} // namespace

TEST_CASE("shard_of and home_shard are FNV-1a 64 of the names, spread, as docs/cluster.md gives "
          "them") {
  // Values a client in another language checks its own implementation with.
  CHECK(model::fnv1a64("") == 14695981039346656037ull);
  CHECK(model::fnv1a64("a") == 0xaf63dc4c8601ec8cull);
  CHECK(model::fnv1a64(std::string("chat\0alice", 10)) == 0xbfe051261cd2972bull);
  CHECK(model::user_hash("chat", "alice") == 0x0cbd8c5bc4fdbbe9ull);
  CHECK(model::app_hash("chat") == 0xff647b523a9c9456ull);
  CHECK(model::shard_of("chat", "alice", 256) == 12);
  CHECK(model::home_shard("chat", 256) == 255);
  CHECK(model::shard_of("chat", "alice", 1) == 0);
  CHECK(model::shard_of("chat", "alice", 65536) == 3261);
  CHECK(model::home_shard("chat", 3) == 2);
  // The separator keeps ("ab", "c") and ("a", "bc") apart.
  CHECK(model::fnv1a64(std::string("ab\0c", 4)) != model::fnv1a64(std::string("a\0bc", 4)));
  for (std::uint32_t s : {1u, 7u, 256u, 65536u})
    CHECK(model::shard_of("app", "user", s) < s);
}

TEST_CASE("shard_of spreads names that differ only in their last bytes over the shards") {
  // Regression: a shard is a range of the hash's top bits, and FNV-1a's top
  // bits barely depend on the last bytes, so without spread64 users u0 to u63
  // fell in 2 of 16 shards (and 10,000 such users in 105 of 256).
  std::map<std::uint32_t, int> per_shard;
  for (int u = 0; u < 64; ++u)
    ++per_shard[model::shard_of("app", "u" + std::to_string(u), 16)];
  CHECK(per_shard.size() >= 14);
  for (auto& [shard, n] : per_shard)
    CHECK(n <= 12);
  std::set<std::uint32_t> used;
  for (int u = 0; u < 10000; ++u)
    used.insert(model::shard_of("app", "u" + std::to_string(u), 256));
  CHECK(used.size() == 256);
}

TEST_CASE("shard_range is the contiguous hash range of exactly the shard's hashes") {
  for (std::uint32_t shards : {1u, 3u, 7u, 256u, 1000u, 65535u, 65536u}) {
    CAPTURE(shards);
    // The ranges tile the hash space in shard order: each starts where the last ended.
    const std::uint32_t step = shards > 2000 ? 997 : 1;
    for (std::uint32_t s = 0; s < shards; ++s) {
      auto r = model::shard_range(s, shards);
      CHECK(r.lo == (s == 0 ? 0 : model::shard_range(s - 1, shards).hi));
      if (s % step != 0 && s + 1 != shards)
        continue;
      CAPTURE(s);
      CHECK(r.hi == (s + 1 == shards ? 0 : model::shard_range(s + 1, shards).lo));
      // The bounds belong to it, their neighbours to the shards beside it.
      CHECK(model::shard_of_hash(r.lo, shards) == s);
      CHECK(model::shard_of_hash(r.hi - 1, shards) == s);
      CHECK(r.contains(r.lo));
      CHECK(r.contains(r.hi - 1));
      if (s > 0) {
        CHECK(model::shard_of_hash(r.lo - 1, shards) == s - 1);
        CHECK_FALSE(r.contains(r.lo - 1));
      }
      if (s + 1 < shards) {
        CHECK(model::shard_of_hash(r.hi, shards) == s + 1);
        CHECK_FALSE(r.contains(r.hi));
      }
    }
    CHECK(model::shard_range(shards - 1, shards).hi == 0); // the last ends at 2^64
  }
  CHECK(model::shard_range(0, 1) == model::hash_range{0, 0});
  CHECK(model::shard_range(1, 2) == model::hash_range{0x8000000000000000ull, 0});
  CHECK(model::shard_range(1, 3)
        == model::hash_range{0x5555555600000000ull, 0xaaaaaaab00000000ull});
  const auto h = model::user_hash("chat", "alice");
  CHECK(model::shard_range(model::shard_of("chat", "alice", 256), 256).contains(h));
}

TEST_CASE("cluster create is refused when the cluster exists, and load reads what it wrote") {
  test::etcd_process etcd;
  auto c = coordinator_of(etcd, "c1");
  CHECK(c->load().code() == errc::not_found);
  cluster::cluster_settings s;
  s.shards = 16;
  s.expect_nodes = 2;
  REQUIRE(c->create(s).ok());
  auto again = c->create(s);
  CHECK(again.code() == errc::already_exists);
  auto v = c->load();
  REQUIRE(v.ok());
  CHECK(v->settings.shards == 16);
  CHECK(v->settings.expect_nodes == 2);
  REQUIRE(v->shards.size() == 16);
  for (auto& e : v->shards) {
    CHECK(e.owner.empty());
    CHECK(e.epoch == 0);
    CHECK(e.revision == 0);
  }
  // Another cluster in the same etcd is separate.
  auto other = coordinator_of(etcd, "c10");
  CHECK(other->load().code() == errc::not_found);
  cluster::cluster_settings bad;
  bad.shards = 0;
  CHECK(other->create(bad).code() == errc::invalid_argument);
  bad.shards = 70000;
  CHECK(other->create(bad).code() == errc::invalid_argument);
  bad.shards = 4;
  bad.expect_nodes = 5;
  CHECK(other->create(bad).code() == errc::invalid_argument);
}

TEST_CASE("a shard changes only by compare-and-swap on its revision, with a higher epoch") {
  test::etcd_process etcd;
  auto c = coordinator_of(etcd, "cas");
  cluster::cluster_settings s;
  s.shards = 4;
  REQUIRE(c->create(s).ok());
  auto v = c->load();
  REQUIRE(v.ok());
  auto first = c->set_shard(v->shards[2], "n1", 1, "");
  REQUIRE(first.ok());
  CHECK(first->owner == "n1");
  CHECK(first->epoch == 1);
  CHECK(first->revision > 0);
  // The stale entry (never owned) no longer matches.
  CHECK(c->set_shard(v->shards[2], "n2", 1, "").code() == errc::version_conflict);
  // The epoch must rise.
  CHECK(c->set_shard(*first, "n2", 1, "").code() == errc::invalid_argument);
  auto second = c->set_shard(*first, "n2", 2, "");
  REQUIRE(second.ok());
  CHECK(c->set_shard(*first, "n3", 3, "").code() == errc::version_conflict);
  auto after = c->load();
  REQUIRE(after.ok());
  CHECK(after->shards[2].owner == "n2");
  CHECK(after->shards[2].epoch == 2);
  CHECK(after->shards[2].revision == second->revision);
  CHECK(after->shards[2].to.empty());
  // A move in progress names its target, and the next change clears it.
  auto moving = c->set_shard(after->shards[2], "n2", 3, "n3");
  REQUIRE(moving.ok());
  CHECK(moving->to == "n3");
  CHECK(c->set_shard(*moving, "n2", 4, "bad/name").code() == errc::invalid_argument);
  auto seen = c->load();
  REQUIRE(seen.ok());
  CHECK(seen->shards[2].to == "n3");
  CHECK(seen->shards[2].epoch == 3);
  REQUIRE(c->set_shard(seen->shards[2], "n3", 4, "").ok());
  auto moved = c->load();
  REQUIRE(moved.ok());
  CHECK(moved->shards[2].owner == "n3");
  CHECK(moved->shards[2].to.empty());
  after = std::move(moved);
  // A batch is all or none: one stale entry refuses every change.
  CHECK(c->set_shards({after->shards[0], v->shards[2]}, {"n1", "n1"}, {1, 1}).code()
        == errc::version_conflict);
  auto none = c->load();
  REQUIRE(none.ok());
  CHECK(none->shards[0].owner.empty());
  REQUIRE(c->set_shards({after->shards[0], after->shards[1]}, {"n1", "n2"}, {1, 1}).ok());
  CHECK(c->set_shard(after->shards[3], "bad/name", 1, "").code() == errc::invalid_argument);
}

TEST_CASE("a replicated cluster's settings and shard entries: replicas, in-sync set, epochs") {
  test::etcd_process etcd;
  auto c = coordinator_of(etcd, "rep");
  cluster::cluster_settings bad;
  bad.shards = 8;
  bad.expect_nodes = 3;
  bad.replicas = 4; // more copies than nodes
  CHECK(c->create(bad).code() == errc::invalid_argument);
  bad.replicas = 8;
  bad.expect_nodes = 8;
  CHECK(c->create(bad).code() == errc::invalid_argument);
  bad.replicas = 3;
  bad.min_insync = 4;
  CHECK(c->create(bad).code() == errc::invalid_argument);
  bad.min_insync = 0;
  CHECK(c->create(bad).code() == errc::invalid_argument);
  CHECK(c->load().code() == errc::not_found); // nothing refused was written
  cluster::cluster_settings s;
  s.shards = 8;
  s.expect_nodes = 3;
  s.replicas = 3;
  s.min_insync = cluster::majority(3);
  REQUIRE(c->create(s).ok());
  auto v = c->load();
  REQUIRE(v.ok());
  CHECK(v->settings.replicas == 3);
  CHECK(v->settings.min_insync == 2);
  CHECK(v->shards[0].replicas.empty());
  CHECK(v->shards[0].isr.empty());

  cluster::shard_entry e;
  e.owner = "a";
  e.epoch = 1;
  e.replicas = {"a", "b", "c"};
  e.isr = {"a", "b", "c"};
  auto first = c->update_shards({v->shards[0]}, {e});
  REQUIRE(first.ok());
  auto seen = c->load();
  REQUIRE(seen.ok());
  CHECK(seen->shards[0].replicas == e.replicas);
  CHECK(seen->shards[0].isr == e.isr);
  CHECK(seen->shards[0].revision == *first);

  // Within an epoch only the in-sync set changes (a follower dropped, added back).
  auto shrunk = e;
  shrunk.isr = {"a", "c"};
  auto dropped = c->update_shards({seen->shards[0]}, {shrunk});
  REQUIRE(dropped.ok());
  auto stale = seen->shards[0];
  CHECK(c->update_shards({stale}, {e}).code() == errc::version_conflict);
  seen = c->load();
  REQUIRE(seen.ok());
  CHECK(seen->shards[0].epoch == 1);
  CHECK(seen->shards[0].isr == std::vector<std::string>{"a", "c"});
  auto new_owner = shrunk;
  new_owner.owner = "c";
  new_owner.replicas = {"c", "a", "b"};
  new_owner.isr = {"c", "a"};
  CHECK(c->update_shards({seen->shards[0]}, {new_owner}).code() == errc::invalid_argument);
  new_owner.epoch = 2;
  REQUIRE(c->update_shards({seen->shards[0]}, {new_owner}).ok());

  // Inconsistent entries are refused and change nothing.
  seen = c->load();
  REQUIRE(seen.ok());
  auto wrong = [&](std::vector<std::string> replicas, std::vector<std::string> isr) {
    auto x = new_owner;
    x.epoch = 3;
    x.replicas = std::move(replicas);
    x.isr = std::move(isr);
    return c->update_shards({seen->shards[0]}, {x}).code();
  };
  CHECK(wrong({"a", "c"}, {"c"}) == errc::invalid_argument); // the owner is not first
  CHECK(wrong({"c", "a", "a"}, {"c"}) == errc::invalid_argument); // twice
  CHECK(wrong({"c", "a"}, {"c", "b"}) == errc::invalid_argument); // isr beyond replicas
  CHECK(wrong({"c", "a"}, {"a"}) == errc::invalid_argument); // isr without the owner
  CHECK(wrong({"c", "a", "b"}, {"c", "b", "a"}) == errc::invalid_argument); // not in order
  CHECK(wrong({"c", "bad/name"}, {"c"}) == errc::invalid_argument);
  auto unchanged = c->load();
  REQUIRE(unchanged.ok());
  CHECK(unchanged->shards[0].epoch == 2);
  CHECK(unchanged->shards[0].revision == seen->shards[0].revision);

  // set_shard keeps the replicas, owner first; a node that keeps no copy
  // cannot become the owner.
  auto moved = c->set_shard(unchanged->shards[0], "b", 3, "");
  REQUIRE(moved.ok());
  CHECK(moved->replicas == std::vector<std::string>{"b", "c", "a"});
  CHECK(moved->isr == std::vector<std::string>{"b", "c", "a"});
  CHECK(c->set_shard(*moved, "d", 4, "").code() == errc::invalid_argument);

  // An entry written inconsistently by someone else reads as data_corrupt.
  auto eps = cluster::etcd_client::parse_endpoints(etcd.url());
  REQUIRE(eps.ok());
  cluster::etcd_client::config ec;
  ec.endpoints = *eps;
  auto raw = cluster::etcd_client::make(ec);
  REQUIRE(raw.ok());
  auto put = (*raw)->txn({},
                         {{cluster::etcd_op::kind::put,
                           "/agentstate/rep/shards/00001",
                           R"({"owner":"a","epoch":1,"replicas":["b","a"],"isr":["a"]})",
                           0,
                           {}}},
                         {});
  REQUIRE(put.ok());
  CHECK(c->load().code() == errc::data_corrupt);
}

TEST_CASE("a node is live while its lease is, and one id cannot be live twice") {
  test::etcd_process etcd;
  auto c = coordinator_of(etcd, "live");
  CHECK(c->join("n1", "127.0.0.1:1", 5s).code() == errc::not_found); // no cluster yet
  REQUIRE(c->create(cluster::cluster_settings{}).ok());
  auto m1 = c->join("n1", "127.0.0.1:7001", 1s);
  REQUIRE(m1.ok());
  CHECK(c->join("n1", "127.0.0.1:7009", 5s).code() == errc::already_exists);
  auto m2 = c->join("n2", "127.0.0.1:7002", 30s);
  REQUIRE(m2.ok());
  auto v = c->load();
  REQUIRE(v.ok());
  REQUIRE(v->nodes.size() == 2);
  CHECK(v->node("n1")->alive);
  CHECK(v->node("n1")->address == "127.0.0.1:7001");
  CHECK(v->node("n2")->alive);
  // The controller role: the first to ask holds it; it ends with the lease.
  auto led = (*m2)->lead();
  REQUIRE(led.ok());
  CHECK(*led);
  auto led1 = (*m1)->lead();
  REQUIRE(led1.ok());
  CHECK_FALSE(*led1);
  CHECK(c->load()->controller == "n2");
  REQUIRE((*m2)->leave().ok());
  auto after = c->load();
  REQUIRE(after.ok());
  CHECK_FALSE(after->node("n2")->alive);
  CHECK(after->node("n2")->address == "127.0.0.1:7002"); // the registry keeps it
  CHECK(after->controller.empty());
  // n1 stops renewing: its 1 s lease expires (etcd checks leases on its own
  // clock; bounded poll of that other process, 10 s).
  CHECK(test::eventually([&] { return !c->load()->node("n1")->alive; }, 10s, 100ms));
  CHECK((*m1)->keepalive().code() == errc::not_found);
  // The id is free again.
  CHECK(c->join("n1", "127.0.0.1:7001", 5s).ok());
  CHECK(c->join("x y", "127.0.0.1:7001", 5s).code() == errc::invalid_argument);
}

TEST_CASE("the watch reports each change of the cluster's keys after a revision") {
  test::etcd_process etcd;
  auto c = coordinator_of(etcd, "w");
  cluster::cluster_settings s;
  s.shards = 2;
  REQUIRE(c->create(s).ok());
  auto v = c->load();
  REQUIRE(v.ok());
  std::atomic<bool> stop{false};
  std::atomic<std::int64_t> seen{0};
  std::thread t([&] {
    auto r = c->watch(
      v->revision,
      [&](std::int64_t rev) {
        seen.store(rev);
        return true;
      },
      stop);
    CHECK(r.ok());
  });
  auto changed = c->set_shard(v->shards[0], "n1", 1, "");
  REQUIRE(changed.ok());
  // The watch thread's view, bounded (10 s); the CHECK is of the revision.
  (void)test::eventually([&] { return seen.load() >= changed->revision; }, 10s, 10ms);
  CHECK(seen.load() == changed->revision);
  stop.store(true);
  t.join();
  // A key of another cluster is not this cluster's change.
  auto other = coordinator_of(etcd, "w2");
  REQUIRE(other->create(s).ok());
  std::atomic<bool> stop2{false};
  std::int64_t first = 0;
  auto r = c->watch(
    v->revision,
    [&](std::int64_t rev) {
      first = rev;
      return false;
    },
    stop2);
  CHECK(r.ok());
  CHECK(first == changed->revision);
}

TEST_CASE(
  "an unreachable etcd is unavailable, naming the endpoint; bad names and URLs are refused") {
  auto port = test::free_loopback_port();
  auto c = cluster::make_etcd_coordinator("http://127.0.0.1:" + std::to_string(port), "x");
  REQUIRE(c.ok());
  auto v = (*c)->load();
  CHECK(v.code() == errc::unavailable);
  CHECK(v.err().message.find("127.0.0.1:" + std::to_string(port)) != std::string::npos);
  CHECK(cluster::make_etcd_coordinator("ftp://h", "x").code() == errc::invalid_argument);
  CHECK(cluster::make_etcd_coordinator("http://h,", "x").code() == errc::invalid_argument);
  CHECK(cluster::make_etcd_coordinator("http://h", "").code() == errc::invalid_argument);
  CHECK(cluster::make_etcd_coordinator("http://h", "-x").code() == errc::invalid_argument);
  CHECK(cluster::make_etcd_coordinator("http://h", std::string(65, 'a')).code()
        == errc::invalid_argument);
  CHECK(cluster::prefix_end("/a/") == "/a0");
  CHECK(cluster::prefix_end(std::string("a\xff", 2)) == "b");
}

TEST_CASE("a second endpoint is used when the first cannot be reached") {
  test::etcd_process etcd;
  auto dead = "http://127.0.0.1:" + std::to_string(test::free_loopback_port());
  auto c = cluster::make_etcd_coordinator(dead + "," + etcd.url(), "two");
  REQUIRE(c.ok());
  REQUIRE((*c)->create(cluster::cluster_settings{}).ok());
  CHECK((*c)->load().ok());
}
