// SPDX-License-Identifier: Apache-2.0
// engine::lead_range, apply_replica, range_position and options::replicator
// (actors/replication.cpp, writer.cpp) between two real LMDB stores: what a
// leader ships, applied at a follower, leaves the follower's range equal to
// the leader's; a write is answered only once the replicator confirms it, and
// a refused shipment answers it in doubt and stops the range; a follower
// refuses batches of a lower epoch, out of order, damaged, or that do not
// apply as they did at the leader, changing nothing; positions survive a
// restart and carry on under a new epoch. apply_replicas applies several
// shipments (of several ranges) in one commit with the outcome of applying
// them one at a time, and all or nothing on a storage failure.
#include <doctest/doctest.h>

#include <condition_variable>
#include <deque>
#include <mutex>

#include "actors/engine_factory.hpp"
#include "model/shard.hpp"
#include "store/replica.hpp"
#include "support/fault_kv.hpp"
#include "support/test_support.hpp"

namespace {

using namespace agentstate;
using namespace std::chrono_literals;

const hash_range everything{0, 0}; // [0, end of the hash space)

bool same(const replica_position& a, const replica_position& b) {
  return a.epoch == b.epoch && a.seq == b.seq;
}

/// A replicator whose shipments wait in a queue until the test confirms them.
struct held_replicator {
  struct held {
    replica_shipment s;
    std::function<void(result<void>)> done;
  };
  std::mutex mtx;
  std::condition_variable cv;
  std::deque<held> q;

  void operator()(replica_shipment s, std::function<void(result<void>)> done) {
    std::lock_guard<std::mutex> lk(mtx);
    q.push_back({std::move(s), std::move(done)});
    cv.notify_all();
  }
  /// The next shipment, waiting for it (bounded: 10 s).
  held next(const char* what) {
    INFO("waiting for the shipment of " << std::string(what));
    std::unique_lock<std::mutex> lk(mtx);
    REQUIRE(cv.wait_for(lk, 10s, [&] { return !q.empty(); }));
    auto h = std::move(q.front());
    q.pop_front();
    return h;
  }
};

/// A callback's answer, waited for (bounded: 10 s).
template <class T>
struct answer {
  std::mutex mtx;
  std::condition_variable cv;
  std::optional<result<T>> got;

  callback<T> cb() {
    return [this](result<T> r) {
      std::lock_guard<std::mutex> lk(mtx);
      got.emplace(std::move(r));
      cv.notify_all();
    };
  }
  bool arrived() {
    std::lock_guard<std::mutex> lk(mtx);
    return got.has_value();
  }
  result<T> wait() {
    std::unique_lock<std::mutex> lk(mtx);
    REQUIRE(cv.wait_for(lk, 10s, [&] { return got.has_value(); }));
    return std::move(*got);
  }
};

/// An engine on an LMDB store in `dir` with `replicator`.
std::unique_ptr<engine> open_with(
  const std::string& dir,
  std::function<void(replica_shipment, std::function<void(result<void>)>)> replicator = {}) {
  options o;
  o.dir = dir;
  o.mode = durability::nosync;
  o.replicator = std::move(replicator);
  auto r = engine::open(o);
  INFO(test::describe(r));
  REQUIRE(r.ok());
  return std::move(r).value();
}

/// A mix of writes: creates with state on all three scopes, appends with
/// deltas, a modify resolved at commit, a delete.
void write_mix(engine& e, int n) {
  for (int i = 0; i < n; ++i) {
    const std::string id = "s" + std::to_string(i);
    const std::string user = "u" + std::to_string(i % 3);
    MUST(e.create_session(test::create_req("chat", user, id, {{"k", i}, {"user:seen", true}})));
    test::append_ok(e, test::sref("chat", user, id),
                    test::make_event({{"step", 1}, {"app:last", id}, {"user:name", user}}));
    auto a = test::append_req(test::sref("chat", user, id), test::make_event());
    a.modify.push_back(modify_ops::increment("app:count", 1));
    MUST(e.append_event(std::move(a)));
  }
  MUST(e.delete_session(test::sref("chat", "u0", "s0")));
}

/// An engine on a store of kind `k` (in `dir` for LMDB) with `replicator`.
std::unique_ptr<engine> open_kind(
  test::store_kind k, const std::string& dir,
  std::function<void(replica_shipment, std::function<void(result<void>)>)> replicator = {}) {
  auto o = test::make_options(k, dir);
  o.replicator = std::move(replicator);
  auto r = engine::open(o);
  INFO(test::describe(r));
  REQUIRE(r.ok());
  return std::move(r).value();
}

/// A replicator that confirms every shipment at once and keeps it.
struct kept_shipments {
  std::mutex mtx;
  std::vector<replica_shipment> all;

  std::function<void(replica_shipment, std::function<void(result<void>)>)> replicator() {
    return [this](replica_shipment s, std::function<void(result<void>)> done) {
      {
        std::lock_guard<std::mutex> lk(mtx);
        all.push_back(std::move(s));
      }
      done({});
    };
  }
  /// The shipments kept so far whose writes come after `at`, in order. A
  /// shipment never straddles `at` when `at` is a position a snapshot saw.
  std::vector<replica_shipment> after(const replica_position& at) {
    std::lock_guard<std::mutex> lk(mtx);
    std::vector<replica_shipment> out;
    for (auto& s : all) {
      if (s.last.seq <= at.seq)
        continue;
      CHECK(s.prev.seq >= at.seq);
      out.push_back(s);
    }
    return out;
  }
};

/// The half of the hash space that holds app `app`, and the other half.
std::pair<hash_range, hash_range> halves_for(const std::string& app) {
  const hash_range low{0, std::uint64_t{1} << 63}, high{std::uint64_t{1} << 63, 0};
  if (model::hash_range{low.lo, low.hi}.contains(model::app_hash(app)))
    return {low, high};
  return {high, low};
}

/// `n` user ids of app `app` whose sessions are in `r` (inside) or not.
std::vector<std::string> users_of(const std::string& app, hash_range r, bool inside,
                                  std::size_t n) {
  std::vector<std::string> out;
  for (int i = 0; out.size() < n && i < 10000; ++i) {
    const std::string u = "u" + std::to_string(i);
    if (model::hash_range{r.lo, r.hi}.contains(model::user_hash(app, u)) == inside)
      out.push_back(u);
  }
  REQUIRE(out.size() == n);
  return out;
}

/// Every chunk of `snap`, from the start, `max_bytes` at a time.
std::vector<range_chunk> all_chunks(range_snapshot& snap, std::size_t max_bytes,
                                    std::string from = {}) {
  std::vector<range_chunk> out;
  for (int i = 0; i < 10000; ++i) {
    auto c = MUST(snap.read(from, max_bytes));
    from = c.next;
    out.push_back(std::move(c));
    if (from.empty())
      return out;
  }
  FAIL("the snapshot's chunks do not end");
  return out;
}

/// Copies `snap` to `follower`'s range `r`, `max_bytes` a chunk: the chunks
/// applied.
std::size_t copy_snapshot(engine& follower, hash_range r, range_snapshot& snap,
                          std::size_t max_bytes) {
  MUST(follower.begin_replica_copy(r));
  auto chunks = all_chunks(snap, max_bytes);
  for (auto& c : chunks)
    MUST(follower.write_range(r, c.bytes));
  MUST(follower.end_replica_copy(r, snap.position(), MUST(snap.digest())));
  return chunks.size();
}

/// Sessions in `r` with state in all three scopes: for each of `users`, a
/// create with user: state and two appends, one writing app: state, with a
/// long event so that a small chunk holds one session.
void write_scopes(engine& e, const std::vector<std::string>& users, const std::string& prefix) {
  for (std::size_t i = 0; i < users.size(); ++i) {
    const auto ref = test::sref("chat", users[i], prefix + std::to_string(i));
    MUST(e.create_session(test::create_req(ref, {{"k", i}, {"user:seen", prefix}})));
    test::append_ok(e, ref, test::make_event({{"note", test::bytes(2000)}}));
    test::append_ok(e, ref, test::make_event({{"app:last", ref.session_id}, {"user:n", i}}));
  }
}

/// The hash space in four equal ranges.
std::vector<hash_range> quarters() {
  const std::uint64_t q = std::uint64_t{1} << 62;
  return {{0, q}, {q, 2 * q}, {2 * q, 3 * q}, {3 * q, 0}};
}

/// For `n` users of app "chat" in `r`: a session `prefix`i created with
/// user: state and one append writing user: state (no app: state, which
/// lives in the app's home range).
void write_users(engine& e, hash_range r, std::size_t n, const std::string& prefix) {
  const auto users = users_of("chat", r, true, n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto ref = test::sref("chat", users[i], prefix + std::to_string(i));
    MUST(e.create_session(test::create_req(ref, {{"k", i}, {"user:seen", prefix}})));
    test::append_ok(e, ref, test::make_event({{"user:n", i}}));
  }
}

/// A leader at DIR/a, shipping into `shipped`, that leads the four
/// quarters() at epoch 1 and has written `per_range` users in each
/// (write_users, prefix "s").
std::unique_ptr<engine> quarters_leader(test::store_kind kind, const test::temp_dir& dir,
                                        kept_shipments& shipped, std::size_t per_range) {
  auto leader = open_kind(kind, dir.str() + "/a", shipped.replicator());
  for (auto& r : quarters())
    MUST(leader->lead_range(r, 1));
  for (auto& r : quarters())
    write_users(*leader, r, per_range, "s");
  return leader;
}

/// The shipments in `all` of range `r`, in order.
std::vector<replica_shipment> of_range(const std::vector<replica_shipment>& all, hash_range r) {
  std::vector<replica_shipment> out;
  for (auto& s : all)
    if (s.lo == r.lo && s.hi == r.hi)
      out.push_back(s);
  return out;
}

engine::replica_input input(const replica_shipment& s) {
  return {{s.lo, s.hi}, s.batch};
}

/// Applies `in` to `group` in one apply_replicas call and to `single` one
/// input at a time, checking that each input has the same outcome both
/// ways, that `group` committed once (none when nothing applied), and that
/// both followers end with the same positions and rows in `ranges`.
std::vector<result<replica_position>>
group_equals_single(engine& group, engine& single, const std::vector<engine::replica_input>& in,
                    const std::vector<hash_range>& ranges) {
  const auto commits = group.stats().commits;
  auto got = group.apply_replicas(in);
  REQUIRE(got.size() == in.size());
  bool applied = false;
  for (std::size_t i = 0; i < in.size(); ++i) {
    CAPTURE(i);
    auto one = single.apply_replica(in[i].range, in[i].batch);
    INFO("group: " << test::describe(got[i]) << "; one at a time: " << test::describe(one));
    CHECK(got[i].code() == one.code());
    if (got[i] && one)
      CHECK(same(*got[i], *one));
    applied = applied || got[i].ok();
  }
  CHECK(group.stats().commits - commits == (applied ? 1u : 0u));
  for (auto& r : ranges) {
    CHECK(same(MUST(group.range_position(r)), MUST(single.range_position(r))));
    CHECK(MUST(group.digest_range(r)) == MUST(single.digest_range(r)));
  }
  return got;
}

/// An engine on a store of kind `k` in `dir` whose store calls `plan` counts
/// (and fails as it says).
std::unique_ptr<engine> open_faulty(test::store_kind k, const std::string& dir,
                                    const std::shared_ptr<store::fault_plan>& plan) {
  auto r = detail::engine_factory::open(test::make_options(k, dir),
                                        [plan](std::unique_ptr<store::kv_store> kv) {
                                          return store::make_faulty_kv(std::move(kv), plan);
                                        });
  INFO(test::describe(r));
  REQUIRE(r.ok());
  return std::move(r).value();
}
} // namespace

TEST_CASE("a leader's shipments applied at a follower leave both ranges equal") {
  test::temp_dir dir;
  auto follower = open_with(dir.str() + "/b");
  auto leader = open_with(dir.str() + "/a", [&](replica_shipment s, auto done) {
    auto r = follower->apply_replica({s.lo, s.hi}, s.batch);
    if (!r) {
      done(std::move(r).err());
      return;
    }
    CHECK(same(*r, s.last));
    done({});
  });
  auto start = MUST(leader->lead_range(everything, 1));
  CHECK(same(start, {0, 0}));
  write_mix(*leader, 6);
  auto pa = MUST(leader->range_position(everything));
  auto pb = MUST(follower->range_position(everything));
  CHECK(pa.epoch == 1);
  CHECK(pa.seq == 6 * 3 + 1); // a create and two appends each, and the delete
  CHECK(same(pa, pb));
  auto da = MUST(leader->digest_range(everything));
  auto db = MUST(follower->digest_range(everything));
  CHECK(da.sessions == 5);
  CHECK(da.rows == db.rows);
  CHECK(da.crc == db.crc);
  // The modify was resolved at the leader; the follower holds its outcome.
  CHECK(test::app_state(*leader, "chat")["count"] == 6);
  // The follower fenced the range: it does not write it itself.
  auto own = follower->create_session(test::create_req("chat", "u1", "mine"));
  CHECK(own.code() == errc::unavailable);
}

TEST_CASE("a led range's write is answered only when its shipment is confirmed") {
  test::temp_dir dir;
  held_replicator held;
  auto leader = open_with(
    dir.str() + "/a", [&](replica_shipment s, auto done) { held(std::move(s), std::move(done)); });
  MUST(leader->lead_range(everything, 3));
  answer<session> created;
  leader->create_session(test::create_req("chat", "u", "s"), created.cb());
  auto h = held.next("the create");
  // The shipment was handed over after the write committed and its answer
  // was put aside: only `done` delivers it.
  CHECK_FALSE(created.arrived());
  CHECK(same(h.s.prev, {0, 0}));
  CHECK(same(h.s.last, {3, 1}));
  h.done({});
  MUST(created.wait());

  // A refused shipment answers its write in doubt and stops the range.
  answer<append_result> appended;
  leader->append_event(
    test::append_req(test::sref("chat", "u", "s"), test::make_event(json::object(), "e1")),
    appended.cb());
  auto refused = held.next("e1");
  CHECK(same(refused.s.prev, {3, 1}));
  refused.done(error{errc::unavailable, "a follower is out of reach"});
  auto r = appended.wait();
  CHECK(r.code() == errc::unavailable);
  CHECK(r.err().message.find("in doubt") != std::string::npos);
  auto next = leader->append_event(
    test::append_req(test::sref("chat", "u", "s"), test::make_event(json::object(), "e2")));
  CHECK(next.code() == errc::unavailable);
  // Nor is e1's retry acknowledged from the store while the range is fenced:
  // its replicas may lack it.
  auto retry = leader->append_event(
    test::append_req(test::sref("chat", "u", "s"), test::make_event(json::object(), "e1")));
  CHECK(retry.code() == errc::unavailable);
  // Led again (a new epoch), it carries on from the position it stored.
  auto at = MUST(leader->lead_range(everything, 4));
  CHECK(same(at, {3, 2}));
  answer<append_result> again;
  leader->append_event(
    test::append_req(test::sref("chat", "u", "s"), test::make_event(json::object(), "e3")),
    again.cb());
  auto third = held.next("e3");
  CHECK(same(third.s.prev, {3, 2}));
  CHECK(same(third.s.last, {4, 3}));
  third.done({});
  // e1 stayed committed here (in doubt), e2 was refused.
  CHECK(MUST(again.wait()).version == 2);
  auto s = test::get_existing(*leader, test::sref("chat", "u", "s"));
  CHECK(test::event_ids(s.events) == std::vector<std::string>{"e1", "e3"});
}

TEST_CASE("a follower refuses a batch of a lower epoch, out of order, damaged or diverged") {
  test::temp_dir dir;
  std::vector<replica_shipment> shipped;
  auto leader = open_with(dir.str() + "/a", [&](replica_shipment s, auto done) {
    shipped.push_back(std::move(s)); // on the writer thread, one at a time
    done({});
  });
  MUST(leader->lead_range(everything, 2));
  MUST(leader->create_session(test::create_req("chat", "u", "s")));
  test::append_ok(*leader, test::sref("chat", "u", "s"), test::make_event({{"x", 1}}));
  test::append_ok(*leader, test::sref("chat", "u", "s"), test::make_event({{"x", 2}}));
  MUST(leader->close());
  REQUIRE(shipped.size() == 3);

  auto follower = open_with(dir.str() + "/b");
  // Out of order: the second before the first.
  auto gap = follower->apply_replica(everything, shipped[1].batch);
  CHECK(gap.code() == errc::version_conflict);
  CHECK(gap.err().message.find("(epoch 0, seq 0)") != std::string::npos);
  // Not a batch, or one damaged in transit.
  CHECK(follower->apply_replica(everything, "nonsense").code() == errc::invalid_argument);
  auto damaged = shipped[0].batch;
  damaged[damaged.size() / 2] ^= 0x20;
  CHECK(follower->apply_replica(everything, damaged).code() == errc::invalid_argument);
  CHECK(same(MUST(follower->range_position(everything)), {0, 0}));
  MUST(follower->apply_replica(everything, shipped[0].batch));
  // The same batch twice does not follow where the follower is.
  CHECK(follower->apply_replica(everything, shipped[0].batch).code() == errc::version_conflict);
  MUST(follower->apply_replica(everything, shipped[1].batch));
  MUST(follower->apply_replica(everything, shipped[2].batch));
  CHECK(same(MUST(follower->range_position(everything)), {2, 3}));
  CHECK(test::get_existing(*follower, test::sref("chat", "u", "s")).state["x"] == 2);

  // A store that diverged: its copy already holds the session the first
  // write creates, so the create does not apply as it did at the leader.
  auto diverged = open_with(dir.str() + "/c");
  MUST(diverged->create_session(test::create_req("chat", "u", "s")));
  auto bad = diverged->apply_replica(everything, shipped[0].batch);
  CHECK(bad.code() == errc::data_corrupt);
  CHECK(same(MUST(diverged->range_position(everything)), {0, 0}));

  // A deposed leader's batch (a lower epoch than the follower's position).
  test::temp_dir dir2;
  std::vector<replica_shipment> newer;
  auto reopened = open_with(dir.str() + "/a", [&](replica_shipment s, auto done) {
    newer.push_back(std::move(s));
    done({});
  });
  CHECK(reopened->lead_range(everything, 1).code() == errc::invalid_argument); // below epoch 2
  CHECK(same(MUST(reopened->lead_range(everything, 5)), {2, 3}));
  test::append_ok(*reopened, test::sref("chat", "u", "s"), test::make_event({{"x", 3}}));
  REQUIRE(newer.size() == 1);
  MUST(follower->apply_replica(everything, newer[0].batch));
  CHECK(same(MUST(follower->range_position(everything)), {5, 4}));
  auto deposed = open_with(dir2.str() + "/old", [&](replica_shipment s, auto done) {
    newer.push_back(std::move(s));
    done({});
  });
  MUST(deposed->lead_range(everything, 4));
  MUST(deposed->create_session(test::create_req("chat", "v", "t")));
  REQUIRE(newer.size() == 2);
  auto stale = follower->apply_replica(everything, newer[1].batch);
  CHECK(stale.code() == errc::condition_failed);
  CHECK(same(MUST(follower->range_position(everything)), {5, 4}));
}

TEST_CASE("a follower's user and app state reads show the shipments it applies (stale cache)") {
  test::temp_dir dir;
  kept_shipments shipped;
  auto leader = open_kind(test::store_kind::lmdb, dir.str() + "/a", shipped.replicator());
  auto follower = open_kind(test::store_kind::lmdb, dir.str() + "/b");
  MUST(leader->lead_range(everything, 1));
  const auto ref = test::sref("chat", "u", "s");
  MUST(leader->create_session(test::create_req(ref, {{"user:seen", 1}})));
  test::append_ok(*leader, ref, test::make_event({{"app:x", 1}}));
  for (auto& s : shipped.after({0, 0}))
    MUST(follower->apply_replica(everything, s.batch));
  // The follower's scope actors load and keep the state.
  CHECK(test::user_state(*follower, "chat", "u") == json{{"seen", 1}});
  CHECK(test::app_state(*follower, "chat") == json{{"x", 1}});
  auto ev = test::make_event({{"user:seen", 2}, {"app:y", "text"}});
  ev.actions.state_remove = {"app:x"};
  test::append_ok(*leader, ref, std::move(ev));
  for (auto& s : shipped.after({1, 2}))
    MUST(follower->apply_replica(everything, s.batch));
  CHECK(test::user_state(*follower, "chat", "u") == json{{"seen", 2}});
  CHECK(test::app_state(*follower, "chat") == json{{"y", "text"}});
  CHECK(test::app_state(*follower, "chat") == test::app_state(*leader, "chat"));
  MUST(leader->delete_user("chat", "u"));
  for (auto& s : shipped.after({1, 3}))
    MUST(follower->apply_replica(everything, s.batch));
  CHECK(same(MUST(follower->range_position(everything)), {1, 4}));
  CHECK(test::user_state(*follower, "chat", "u") == json::object());
}

TEST_CASE_TEMPLATE("a follower copied from a leader's snapshot takes the shipments after it", S,
                   test::memory_store, test::lmdb_store) {
  const auto kind = S::kind;
  test::temp_dir dir;
  const auto [r, rest] = halves_for("chat");
  const auto in = users_of("chat", r, true, 4);
  const auto out = users_of("chat", r, false, 1);
  kept_shipments shipped, old_shipped;

  // The follower's copy diverged: it followed a leader of an earlier epoch
  // that wrote what the new leader never had, and it holds rows outside r.
  auto follower = open_kind(kind, dir.str() + "/b");
  const auto keep = test::sref("chat", out[0], "keep");
  MUST(follower->create_session(test::create_req(keep, {{"mine", true}, {"user:own", 1}})));
  test::append_ok(*follower, keep, test::make_event({{"step", 1}}));
  {
    auto old = open_kind(kind, dir.str() + "/c", old_shipped.replicator());
    MUST(old->lead_range(r, 1));
    write_scopes(*old, {in[0], in[1]}, "stale");
    for (auto& s : old_shipped.after({0, 0}))
      MUST(follower->apply_replica(r, s.batch));
    MUST(old->close());
  }
  CHECK(same(MUST(follower->range_position(r)), {1, 6}));
  CHECK(test::user_state(*follower, "chat", in[0])["seen"] == "stale"); // cached by its actor
  const auto rest_before = MUST(follower->digest_range(rest));
  const auto keep_before = test::get_existing(*follower, keep);

  auto leader = open_kind(kind, dir.str() + "/a", shipped.replicator());
  CHECK(same(MUST(leader->lead_range(r, 2)), {0, 0}));
  write_scopes(*leader, in, "s");
  const auto at_snapshot = MUST(leader->replica_state(r));
  auto snap = MUST(leader->snapshot_range(r));
  CHECK(same(snap->position(), at_snapshot.first));
  CHECK(same(snap->position(), {2, 12}));

  // Writes go on while the snapshot is held, between its chunks, and are
  // not in it.
  auto first = MUST(snap->read("", 1));
  REQUIRE_FALSE(first.next.empty());
  CHECK(first.sessions == 1);
  const auto late = test::sref("chat", in[2], "late");
  answer<session> created;
  leader->create_session(test::create_req(late, {{"user:seen", "late"}}), created.cb());
  MUST(created.wait());
  answer<append_result> appended;
  leader->append_event(
    test::append_req(test::sref("chat", in[0], "s0"), test::make_event({{"app:last", "late"}})),
    appended.cb());
  MUST(appended.wait());
  MUST(leader->delete_session(test::sref("chat", in[1], "s1")));
  auto chunks = all_chunks(*snap, 1, first.next);
  chunks.insert(chunks.begin(), first);
  CHECK(chunks.size() >= 4); // a session a chunk, then the scopes
  std::uint64_t sessions = 0;
  for (auto& c : chunks)
    sessions += c.sessions;
  CHECK(sessions == 4);
  const auto snap_digest = MUST(snap->digest());
  CHECK(snap_digest == at_snapshot.second);
  CHECK(snap_digest != MUST(leader->digest_range(r)));

  // The copy replaces the follower's rows of r, and only those.
  MUST(follower->begin_replica_copy(r));
  CHECK(same(MUST(follower->range_position(r)), {0, 0}));
  CHECK(MUST(follower->digest_range(r)).rows == 0);
  for (auto& c : chunks)
    MUST(follower->write_range(r, c.bytes));
  MUST(follower->end_replica_copy(r, snap->position(), snap_digest));
  CHECK(same(MUST(follower->range_position(r)), snap->position()));
  CHECK(MUST(follower->digest_range(r)) == snap_digest);
  CHECK_FALSE(test::get_maybe(*follower, test::sref("chat", in[0], "stale0")));
  CHECK_FALSE(test::get_maybe(*follower, late));
  CHECK(test::get_maybe(*follower, test::sref("chat", in[1], "s1")));
  CHECK(test::user_state(*follower, "chat", in[0])["seen"] == "s"); // read again
  CHECK(test::app_state(*follower, "chat")["last"] == "s3");
  CHECK(MUST(follower->digest_range(rest)) == rest_before);
  auto kept = test::get_existing(*follower, keep);
  CHECK(kept.version == keep_before.version);
  CHECK(kept.state["mine"] == true);
  CHECK(kept.state["user:own"] == 1);
  CHECK(kept.events.size() == keep_before.events.size());

  // The leader's shipments after the snapshot apply on top of it.
  CHECK(same(MUST(leader->range_position(r)), {2, 15}));
  const auto later = shipped.after(snap->position());
  for (auto& s : later)
    MUST(follower->apply_replica(r, s.batch));
  CHECK(same(MUST(follower->range_position(r)), MUST(leader->range_position(r))));
  CHECK(MUST(follower->digest_range(r)) == MUST(leader->digest_range(r)));
  CHECK(test::get_maybe(*follower, late));
  CHECK_FALSE(test::get_maybe(*follower, test::sref("chat", in[1], "s1")));
  CHECK(test::app_state(*follower, "chat") == test::app_state(*leader, "chat"));
  CHECK(test::user_state(*follower, "chat", in[2]) == test::user_state(*leader, "chat", in[2]));
  snap.reset(); // before the leader closes
}

TEST_CASE("a replica copy cut off part-way takes no shipment until it is copied again") {
  test::temp_dir dir;
  kept_shipments shipped;
  auto leader = open_kind(test::store_kind::lmdb, dir.str() + "/a", shipped.replicator());
  MUST(leader->lead_range(everything, 1));
  const std::vector<std::string> users{"a", "b", "c"};
  write_scopes(*leader, users, "s");
  auto follower = open_kind(test::store_kind::lmdb, dir.str() + "/b");
  for (auto& s : shipped.after({0, 0})) // the follower falls behind after the first three
    if (s.last.seq <= 3)
      MUST(follower->apply_replica(everything, s.batch));
  CHECK(same(MUST(follower->range_position(everything)), {1, 3}));
  write_scopes(*leader, users, "t");
  auto snap = MUST(leader->snapshot_range(everything));
  CHECK(same(snap->position(), {1, 18}));
  MUST(follower->begin_replica_copy(everything));
  auto first = MUST(snap->read("", 1));
  REQUIRE_FALSE(first.next.empty());
  MUST(follower->write_range(everything, first.bytes));
  MUST(follower->close());
  follower = open_kind(test::store_kind::lmdb, dir.str() + "/b");

  test::append_ok(*leader, test::sref("chat", "a", "s0"), test::make_event({{"x", 1}}));
  const auto next = shipped.after(snap->position());
  REQUIRE(next.size() == 1);
  CHECK(same(MUST(follower->range_position(everything)), {0, 0}));
  const auto cut = MUST(follower->digest_range(everything));
  CHECK(cut.sessions == 1);
  auto refused = follower->apply_replica(everything, next[0].batch);
  CHECK(refused.code() == errc::version_conflict);
  // Nor does the shipment it would have taken before the copy began.
  auto old = shipped.after({1, 3});
  REQUIRE_FALSE(old.empty());
  CHECK(follower->apply_replica(everything, old[0].batch).code() == errc::version_conflict);
  CHECK(same(MUST(follower->range_position(everything)), {0, 0}));
  CHECK(MUST(follower->digest_range(everything)) == cut);

  // Copied again, whole, it takes the shipment.
  CHECK(copy_snapshot(*follower, everything, *snap, 1) >= 6);
  MUST(follower->apply_replica(everything, next[0].batch));
  CHECK(same(MUST(follower->range_position(everything)), {1, 19}));
  CHECK(MUST(follower->digest_range(everything)) == MUST(leader->digest_range(everything)));
  snap.reset();
}

TEST_CASE("end_replica_copy refuses a copy whose rows have another digest") {
  kept_shipments shipped;
  auto leader = open_kind(test::store_kind::memory, {}, shipped.replicator());
  MUST(leader->lead_range(everything, 3));
  write_scopes(*leader, {"a", "b"}, "s");
  auto snap = MUST(leader->snapshot_range(everything));
  const auto want = MUST(snap->digest());
  auto follower = open_kind(test::store_kind::memory, {});
  MUST(follower->begin_replica_copy(everything));
  auto chunks = all_chunks(*snap, 1);
  REQUIRE(chunks.size() >= 2);
  for (std::size_t i = 0; i + 1 < chunks.size(); ++i) // all but the last
    MUST(follower->write_range(everything, chunks[i].bytes));
  auto partial = follower->end_replica_copy(everything, snap->position(), want);
  CHECK(partial.code() == errc::data_corrupt);
  CHECK(same(MUST(follower->range_position(everything)), {0, 0}));
  MUST(follower->write_range(everything, chunks.back().bytes));
  auto wrong = want;
  wrong.crc ^= 1;
  auto bad = follower->end_replica_copy(everything, snap->position(), wrong);
  CHECK(bad.code() == errc::data_corrupt);
  char crcs[2][16];
  std::snprintf(crcs[0], sizeof crcs[0], "%08x", static_cast<unsigned>(want.crc));
  std::snprintf(crcs[1], sizeof crcs[1], "%08x", static_cast<unsigned>(wrong.crc));
  CHECK(bad.err().message.find(crcs[0]) != std::string::npos);
  CHECK(bad.err().message.find(crcs[1]) != std::string::npos);
  CHECK(same(MUST(follower->range_position(everything)), {0, 0}));
  MUST(follower->end_replica_copy(everything, snap->position(), want));
  CHECK(same(MUST(follower->range_position(everything)), {3, 6}));
  CHECK(MUST(follower->digest_range(everything)) == want);
  // A memory store's snapshot is a copy of its own: it outlives its engine.
  MUST(leader->close());
  CHECK(MUST(snap->digest()) == want);
  CHECK(MUST(snap->read("", 1)).sessions == 1);
}

TEST_CASE("a led range takes no replica copy") {
  test::temp_dir dir;
  kept_shipments shipped;
  auto leader = open_kind(test::store_kind::lmdb, dir.str() + "/a", shipped.replicator());
  MUST(leader->lead_range(everything, 1));
  write_scopes(*leader, {"a"}, "s");
  const auto before = MUST(leader->replica_state(everything));
  auto begun = leader->begin_replica_copy(everything);
  CHECK(begun.code() == errc::condition_failed);
  auto ended = leader->end_replica_copy(everything, {1, 3}, before.second);
  CHECK(ended.code() == errc::condition_failed);
  const auto after = MUST(leader->replica_state(everything));
  CHECK(same(after.first, before.first));
  CHECK(after.second == before.second);
  // Nor was the range fenced: the leader writes it on.
  test::append_ok(*leader, test::sref("chat", "a", "s0"), test::make_event({{"x", 1}}));
  CHECK(same(MUST(leader->range_position(everything)), {1, 4}));
}

TEST_CASE_TEMPLATE("apply_replicas applies several ranges' shipments in one commit", S,
                   test::memory_store, test::lmdb_store) {
  const auto kind = S::kind;
  test::temp_dir dir;
  kept_shipments shipped;
  auto leader = quarters_leader(kind, dir, shipped, 2);
  const auto q = quarters();
  const auto all = shipped.after({0, 0});
  REQUIRE(all.size() == 16); // 4 ranges, 2 sessions each, a create and an append each
  std::vector<engine::replica_input> in;
  for (auto& s : all)
    in.push_back(input(s));
  auto group = open_kind(kind, dir.str() + "/b");
  auto single = open_kind(kind, dir.str() + "/c");
  const auto before = group->stats();
  const auto single_before = single->stats();
  auto got = group_equals_single(*group, *single, in, q);
  for (std::size_t i = 0; i < all.size(); ++i) {
    CAPTURE(i);
    INFO(test::describe(got[i]));
    REQUIRE(got[i].ok());
    CHECK(same(*got[i], all[i].last));
  }
  const auto after = group->stats();
  CHECK(after.commits - before.commits == 1);
  CHECK(after.batched_writes - before.batched_writes == 16);
  CHECK(after.max_batch >= 16);
  CHECK(single->stats().commits - single_before.commits == 16);
  for (auto& r : q) {
    CHECK(same(MUST(group->range_position(r)), {1, 4}));
    CHECK(same(MUST(group->range_position(r)), MUST(leader->range_position(r))));
    CHECK(MUST(group->digest_range(r)) == MUST(leader->digest_range(r)));
  }
  // Every range was fenced, and reads show the writes (the scope actors
  // were told).
  const auto u = users_of("chat", q[2], true, 1)[0];
  CHECK(test::user_state(*group, "chat", u) == test::user_state(*leader, "chat", u));
  auto own = group->create_session(test::create_req("chat", u, "mine"));
  CHECK(own.code() == errc::unavailable);
  // An empty call commits nothing.
  CHECK(group->apply_replicas({}).empty());
  CHECK(group->stats().commits == after.commits);
}

TEST_CASE_TEMPLATE("apply_replicas refuses a gap, a lower epoch or a damaged batch and applies "
                   "the rest",
                   S, test::memory_store, test::lmdb_store) {
  const auto kind = S::kind;
  test::temp_dir dir;
  const hash_range low{0, std::uint64_t{1} << 63}, high{std::uint64_t{1} << 63, 0};
  kept_shipments shipped;
  auto leader = open_kind(kind, dir.str() + "/a", shipped.replicator());
  MUST(leader->lead_range(low, 1));
  MUST(leader->lead_range(high, 1));
  write_users(*leader, low, 2, "s");
  write_users(*leader, high, 2, "s");
  MUST(leader->lead_range(low, 2));
  write_users(*leader, low, 1, "t");
  const auto a = of_range(shipped.after({0, 0}), low);
  const auto b = of_range(shipped.after({0, 0}), high);
  REQUIRE(a.size() == 6);
  REQUIRE(b.size() == 4);
  CHECK(same(a[4].prev, {1, 4}));
  CHECK(same(a[4].last, {2, 5}));
  // A deposed leader of low (epoch 1) writes on.
  kept_shipments old_shipped;
  auto deposed = open_kind(kind, dir.str() + "/d", old_shipped.replicator());
  MUST(deposed->lead_range(low, 1));
  write_users(*deposed, low, 1, "old");
  const auto d = old_shipped.after({0, 0});
  REQUIRE(d.size() == 2);
  auto damaged = b[0].batch;
  damaged[damaged.size() / 2] ^= 0x20;

  std::vector<engine::replica_input> in;
  std::vector<errc> want;
  auto add = [&](engine::replica_input x, errc code) {
    in.push_back(x);
    want.push_back(code);
  };
  add(input(a[0]), errc::ok);
  add(input(a[2]), errc::version_conflict); // a gap
  add({high, damaged}, errc::invalid_argument);
  add(input(b[0]), errc::ok);
  add(input(a[1]), errc::ok);
  add(input(a[2]), errc::ok);
  add(input(b[1]), errc::ok);
  add(input(a[3]), errc::ok);
  add(input(a[4]), errc::ok); // epoch 2
  add(input(d[1]), errc::condition_failed); // below low's epoch, now 2
  add(input(b[3]), errc::version_conflict); // a gap
  add(input(b[2]), errc::ok);
  add({high, "nonsense"}, errc::invalid_argument);
  add(input(a[5]), errc::ok);
  auto group = open_kind(kind, dir.str() + "/b");
  auto single = open_kind(kind, dir.str() + "/c");
  auto got = group_equals_single(*group, *single, in, {low, high});
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    CAPTURE(i);
    INFO(test::describe(got[i]));
    CHECK(got[i].code() == want[i]);
  }
  CHECK(same(*got[0], {1, 1}));
  CHECK(same(*got[5], {1, 3}));
  CHECK(same(*got[8], {2, 5}));
  CHECK(same(MUST(group->range_position(low)), {2, 6}));
  CHECK(same(MUST(group->range_position(high)), {1, 3}));
  CHECK(MUST(group->digest_range(low)) == MUST(leader->digest_range(low)));
  // The gap left out b[3]; it applies once it follows.
  CHECK(same(MUST(group->apply_replica(high, b[3].batch)), {1, 4}));
  CHECK(MUST(group->digest_range(high)) == MUST(leader->digest_range(high)));
}

TEST_CASE_TEMPLATE("apply_replicas refuses a diverged shipment and the later ones of its range, "
                   "and applies the rest",
                   S, test::memory_store, test::lmdb_store) {
  const auto kind = S::kind;
  test::temp_dir dir;
  const hash_range low{0, std::uint64_t{1} << 63}, high{std::uint64_t{1} << 63, 0};
  const auto hu = users_of("chat", high, true, 2);
  const auto x = test::sref("chat", hu[0], "x"), y = test::sref("chat", hu[1], "y");
  kept_shipments shipped;
  auto leader = open_kind(kind, dir.str() + "/a", shipped.replicator());
  MUST(leader->lead_range(low, 1));
  MUST(leader->lead_range(high, 1));
  MUST(leader->create_session(test::create_req(x, {{"user:seen", "x"}})));
  MUST(leader->create_session(test::create_req(y)));
  test::append_ok(*leader, x, test::make_event({{"n", 1}}));
  write_users(*leader, low, 2, "s");
  const auto a = of_range(shipped.after({0, 0}), low);
  const auto b = of_range(shipped.after({0, 0}), high);
  REQUIRE(a.size() == 4);
  REQUIRE(b.size() == 3);
  // One batch holding both creates: the first applies, the second finds
  // the follower's own session y (the stores diverged).
  auto b0 = MUST(store::decode_replica_batch(b[0].batch));
  auto b1 = MUST(store::decode_replica_batch(b[1].batch));
  store::replica_batch both{b0.prev, b0.epoch, b0.sets};
  both.sets.insert(both.sets.end(), b1.sets.begin(), b1.sets.end());
  const auto two = store::encode_replica_batch(both);

  auto group = open_kind(kind, dir.str() + "/b");
  auto single = open_kind(kind, dir.str() + "/c");
  for (auto* f : {group.get(), single.get()})
    MUST(f->create_session(test::create_req(y, {{"mine", true}})));
  const auto y_before = test::get_existing(*group, y);
  const std::vector<engine::replica_input> in{
    input(a[0]), {high, two}, input(a[1]), input(b[2]), input(a[2]), input(a[3]),
  };
  // (Each follower's own y has its own times: only low's rows compare.)
  auto got = group_equals_single(*group, *single, in, {low});
  CHECK(got[0].ok());
  CHECK(got[1].code() == errc::data_corrupt);
  CHECK(got[1].err().message.find("write 2 of the batch") != std::string::npos);
  CHECK(got[2].ok());
  CHECK(got[3].code() == errc::version_conflict);
  CHECK(got[3].err().message.find("input 1 of the same range in this call was refused")
        != std::string::npos);
  CHECK(got[4].ok());
  CHECK(same(*got[5], {1, 4}));
  CHECK(same(MUST(group->range_position(low)), MUST(leader->range_position(low))));
  CHECK(MUST(group->digest_range(low)) == MUST(leader->digest_range(low)));
  CHECK(same(MUST(group->range_position(high)), {0, 0}));
  CHECK(same(MUST(single->range_position(high)), {0, 0}));
  CHECK(MUST(group->digest_range(high)).sessions == 1);
  // The first write of the refused batch, applied before the second
  // failed, was taken back with it; the follower's own y is as it was.
  CHECK_FALSE(test::get_maybe(*group, x));
  auto y_after = test::get_existing(*group, y);
  CHECK(y_after.version == y_before.version);
  CHECK(y_after.state == y_before.state);
  // Only refusals: nothing commits.
  const auto commits = group->stats().commits;
  auto none = group->apply_replicas({{high, two}, input(b[2]), input(a[0])});
  CHECK(none[0].code() == errc::data_corrupt);
  CHECK(none[1].code() == errc::version_conflict);
  CHECK(none[2].code() == errc::version_conflict);
  CHECK(group->stats().commits == commits);
}

TEST_CASE_TEMPLATE("apply_replicas applies nothing when a write or the commit fails", S,
                   test::memory_store, test::lmdb_store) {
  const auto kind = S::kind;
  test::temp_dir dir;
  kept_shipments shipped;
  auto leader = quarters_leader(kind, dir, shipped, 1);
  const auto q = quarters();
  std::vector<engine::replica_input> in;
  const auto all = shipped.after({0, 0});
  for (auto& s : all)
    in.push_back(input(s));
  REQUIRE(in.size() == 8);

  // How many store calls the group makes, counted on a follower of its own.
  auto count_plan = std::make_shared<store::fault_plan>();
  auto counted = open_faulty(kind, dir.str() + "/c", count_plan);
  const auto calls_before = count_plan->calls.load();
  for (auto& r : counted->apply_replicas(in))
    CHECK(r.ok());
  const auto calls = count_plan->calls.load() - calls_before;
  REQUIRE(calls > 3); // begin_write, the writes, commit

  auto plan = std::make_shared<store::fault_plan>();
  auto follower = open_faulty(kind, dir.str() + "/b", plan);
  const auto empty = MUST(follower->digest_range(everything));
  // A write part-way through fails, then the commit (the group's last call).
  for (auto nth : {calls / 2, calls}) {
    CAPTURE(nth);
    const auto commits = follower->stats().commits;
    plan->fail_at = plan->calls.load() + nth;
    const auto injected = plan->injected.load();
    auto got = follower->apply_replicas(in);
    CHECK(plan->injected.load() == injected + 1);
    REQUIRE(got.size() == in.size());
    for (auto& r : got) {
      CHECK(r.code() == errc::io_error);
      CHECK(r.err().message.find("injected fault") != std::string::npos);
    }
    if (nth == calls)
      CHECK(got[0].err().message.find("commit") != std::string::npos);
    for (auto& r : q)
      CHECK(same(MUST(follower->range_position(r)), {0, 0}));
    CHECK(MUST(follower->digest_range(everything)) == empty);
    CHECK(follower->stats().commits == commits);
  }
  plan->disarmed = true;
  auto got = follower->apply_replicas(in);
  for (std::size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    INFO(test::describe(got[i]));
    REQUIRE(got[i].ok());
    CHECK(same(*got[i], all[i].last));
  }
  CHECK(MUST(follower->digest_range(everything)) == MUST(leader->digest_range(everything)));
  CHECK(MUST(follower->digest_range(everything)) == MUST(counted->digest_range(everything)));
}

TEST_CASE("a replica batch sent to its range's own leader is refused and fences the range") {
  test::temp_dir dir;
  kept_shipments shipped;
  auto leader = open_kind(test::store_kind::lmdb, dir.str() + "/a", shipped.replicator());
  MUST(leader->lead_range(everything, 1));
  const auto ref = test::sref("chat", "u", "s");
  MUST(leader->create_session(test::create_req(ref)));
  const auto first = shipped.after({0, 0});
  REQUIRE(first.size() == 1);
  auto group = leader->apply_replicas({input(first[0])});
  CHECK(group[0].code() == errc::condition_failed);
  CHECK(same(MUST(leader->range_position(everything)), {1, 1}));
  // A leader deposed that has not heard yet writes the range no more.
  auto next = leader->append_event(test::append_req(ref, test::make_event({{"x", 1}})));
  CHECK(next.code() == errc::unavailable);
  CHECK(same(MUST(leader->range_position(everything)), {1, 1}));
}
