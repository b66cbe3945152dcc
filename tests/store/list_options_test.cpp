// SPDX-License-Identifier: Apache-2.0
// list_sessions beyond L1-L3: newest-first order, offsets and totals, alone
// and combined with page tokens, for one user and for the whole app.
#include <doctest/doctest.h>

#include <set>

#include "model/shard.hpp"
#include "support/test_support.hpp"

using namespace agentstate;

namespace {

// Sessions s0..s(n-1) of users u0/u1 alternately, each appended once at
// timestamp 1000+i, so the update order is s0 < s1 < ... < s(n-1).
void fill(engine& e, int n) {
  for (int i = 0; i < n; ++i) {
    auto ref = test::sref("app", "u" + std::to_string(i % 2), "s" + std::to_string(i));
    MUST(e.create_session(test::create_req(ref)));
    test::append_ok(e, ref, test::make_event(json::object(), {}, 1000.0 + i));
  }
}

std::vector<std::string> ids_of(const session_page& p) {
  return test::session_ids(p.sessions);
}

std::vector<std::string> names(std::initializer_list<int> xs) {
  std::vector<std::string> out;
  for (int x : xs)
    out.push_back("s" + std::to_string(x));
  return out;
}

} // namespace

TEST_CASE_TEMPLATE("list_sessions: descending order, pages of it, offsets and totals", S,
                   test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind);
  engine& e = *t;
  fill(e, 7);

  auto req = test::list_req("app", std::nullopt, 3);
  req.descending = true;
  req.include_total = true;
  auto p1 = MUST(e.list_sessions(req));
  CHECK(ids_of(p1) == names({6, 5, 4}));
  REQUIRE(p1.total);
  CHECK(*p1.total == 7);
  REQUIRE(p1.next_page_token);
  req.page_token = *p1.next_page_token;
  req.include_total = false;
  auto p2 = MUST(e.list_sessions(req));
  CHECK(ids_of(p2) == names({3, 2, 1}));
  CHECK_FALSE(p2.total);
  req.page_token = *p2.next_page_token;
  auto p3 = MUST(e.list_sessions(req));
  CHECK(ids_of(p3) == names({0}));
  CHECK_FALSE(p3.next_page_token);

  // Offsets skip matching sessions, in either order, after a token too.
  auto off = test::list_req("app", std::nullopt, 2);
  off.offset = 2;
  CHECK(ids_of(MUST(e.list_sessions(off))) == names({2, 3}));
  off.descending = true;
  CHECK(ids_of(MUST(e.list_sessions(off))) == names({4, 3}));
  off.page_token = *p1.next_page_token; // after s4, descending
  off.offset = 1;
  CHECK(ids_of(MUST(e.list_sessions(off))) == names({2, 1}));
  // An offset past the end gives an empty last page; the total still counts all.
  auto past = test::list_req("app");
  past.offset = 100;
  past.include_total = true;
  auto empty = MUST(e.list_sessions(past));
  CHECK(empty.sessions.empty());
  CHECK_FALSE(empty.next_page_token);
  CHECK(*empty.total == 7);

  // One user's sessions: u1 has s1, s3, s5.
  auto mine = test::list_req("app", std::string("u1"), 2);
  mine.descending = true;
  mine.include_total = true;
  auto m1 = MUST(e.list_sessions(mine));
  CHECK(ids_of(m1) == names({5, 3}));
  CHECK(*m1.total == 3);
  mine.page_token = *m1.next_page_token;
  CHECK(ids_of(MUST(e.list_sessions(mine))) == names({1}));

  // A session that moves to the front after a page was served is not
  // repeated by the descending continuation (it now sorts before the token).
  test::append_ok(e, test::sref("app", "u0", "s2"), test::make_event(json::object(), {}, 2000.0));
  auto again = test::list_req("app", std::nullopt, 3);
  again.descending = true;
  again.page_token = *p1.next_page_token;
  CHECK(ids_of(MUST(e.list_sessions(again))) == names({3, 1, 0}));
}

TEST_CASE_TEMPLATE("list_sessions: shards and shard_count list and count only those shards' "
                   "sessions (a cluster node's own, not the copies it holds)",
                   S, test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind);
  engine& e = *t;
  constexpr std::uint32_t count = 4;
  std::set<std::string> wanted;
  std::string outsider;
  for (int i = 0; i < 40; ++i) {
    const auto user = "u" + std::to_string(i);
    const auto id = "s" + std::to_string(i);
    auto ref = test::sref("app", user, id);
    MUST(e.create_session(test::create_req(ref)));
    test::append_ok(e, ref, test::make_event(json::object(), {}, 1000.0 + i));
    const auto shard = model::shard_of("app", user, count);
    if (shard == 1 || shard == 3)
      wanted.insert(id);
    else
      outsider = user;
  }
  REQUIRE(!wanted.empty());
  REQUIRE(wanted.size() < 40);
  for (auto order : {list_order::update_time, list_order::created, list_order::id}) {
    for (bool desc : {false, true}) {
      INFO("order ", static_cast<int>(order), desc ? " descending" : " ascending");
      auto req = test::list_req("app", std::nullopt, 3);
      req.order_by = order;
      req.descending = desc;
      req.shard_count = count;
      req.shards = {1, 3};
      req.include_total = true;
      std::multiset<std::string> seen;
      for (int page = 0; page < 40; ++page) {
        auto p = MUST(e.list_sessions(req));
        if (page == 0) {
          REQUIRE(p.total);
          CHECK(*p.total == wanted.size());
        }
        for (auto& s : p.sessions)
          seen.insert(s.id);
        if (!p.next_page_token)
          break;
        req.page_token = *p.next_page_token;
        req.include_total = false;
      }
      CHECK(seen == std::multiset<std::string>(wanted.begin(), wanted.end()));
    }
  }
  // One user's listing outside the shards is empty, its total 0.
  auto one = test::list_req("app", outsider);
  one.shard_count = count;
  one.shards = {1, 3};
  one.include_total = true;
  auto p = MUST(e.list_sessions(one));
  CHECK(p.sessions.empty());
  CHECK(*p.total == 0);
  // Without the filter every session is listed and counted.
  auto all = test::list_req("app");
  all.include_total = true;
  CHECK(*MUST(e.list_sessions(all)).total == 40);
}
