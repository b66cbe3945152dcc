// SPDX-License-Identifier: Apache-2.0
// Listing in creation order (list_order::created, store format 5) and the
// compact form of a page (list_state::once), on both stores: the order
// ignores appends, pages of it list every session that exists for the whole
// scan exactly once while real threads append, create and delete, and a
// format-4 store (tests/fixtures/format4) gets the indexes when the engine
// upgrades it.
#include <doctest/doctest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "agentstate/scope.hpp"
#include "store/exchange.hpp"
#include "store/format.hpp"
#include "store/kv.hpp"
#include "store/verify.hpp"
#include "support/files.hpp"
#include "support/test_support.hpp"

using namespace agentstate;
namespace fs = std::filesystem;

namespace {

list_request by_created(std::optional<std::string> user, std::int64_t page_size,
                        std::string token = {}) {
  auto r = test::list_req("app", std::move(user), page_size, std::move(token));
  r.order_by = list_order::created;
  return r;
}

// Every page of `req`, following the tokens.
std::vector<std::string> all_pages(engine& e, list_request req, int* pages = nullptr) {
  std::vector<std::string> out;
  int n = 0;
  for (;;) {
    auto page = MUST(e.list_sessions(req));
    ++n;
    REQUIRE(n < 100000);
    for (auto& m : page.sessions)
      out.push_back(m.user_id + "/" + m.id);
    if (!page.next_page_token)
      break;
    req.page_token = *page.next_page_token;
  }
  if (pages)
    *pages = n;
  return out;
}

} // namespace

TEST_CASE_TEMPLATE("list_sessions by creation time: appends never move a session", S,
                   test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind);
  engine& e = *t;
  // c0..c5, users u0/u1 alternately, created in that order; then appended in
  // reverse, so the update order is the creation order reversed.
  std::vector<std::string> created;
  for (int i = 0; i < 6; ++i) {
    auto user = "u" + std::to_string(i % 2);
    MUST(e.create_session(test::create_req("app", user, "c" + std::to_string(i))));
    created.push_back(user + "/c" + std::to_string(i));
  }
  for (int i = 5; i >= 0; --i)
    test::append_ok(e, test::sref("app", "u" + std::to_string(i % 2), "c" + std::to_string(i)),
                    test::make_event(json{{"n", i}}));
  auto by_update = all_pages(e, test::list_req("app", std::nullopt, 4));
  CHECK(by_update == std::vector<std::string>(created.rbegin(), created.rend()));

  int pages = 0;
  CHECK(all_pages(e, by_created(std::nullopt, 4), &pages) == created);
  CHECK(pages == 2);
  CHECK(all_pages(e, by_created(std::nullopt, 1)) == created);
  auto desc = by_created(std::nullopt, 4);
  desc.descending = true;
  CHECK(all_pages(e, desc) == std::vector<std::string>(created.rbegin(), created.rend()));
  CHECK(all_pages(e, by_created(std::string("u1"), 2))
        == std::vector<std::string>{"u1/c1", "u1/c3", "u1/c5"});
  auto off = by_created(std::string("u0"), 10);
  off.offset = 1;
  off.include_total = true;
  auto p = MUST(e.list_sessions(off));
  CHECK(test::session_ids(p.sessions) == std::vector<std::string>{"c2", "c4"});
  CHECK(p.total == 3);

  // A page token of another order is refused.
  auto first = MUST(e.list_sessions(test::list_req("app", std::string("u0"), 1)));
  REQUIRE(first.next_page_token);
  auto wrong = by_created(std::string("u1"), 1, *first.next_page_token);
  CHECK(e.list_sessions(wrong).code() == errc::invalid_argument);

  // A delete takes the session out of the order; a re-create puts it last.
  MUST(e.delete_session(test::sref("app", "u0", "c2")));
  MUST(e.create_session(test::create_req("app", "u0", "c2")));
  CHECK(all_pages(e, by_created(std::nullopt, 4))
        == std::vector<std::string>{"u0/c0", "u1/c1", "u1/c3", "u0/c4", "u1/c5", "u0/c2"});
  CHECK(all_pages(e, by_created(std::string("u0"), 4))
        == std::vector<std::string>{"u0/c0", "u0/c4", "u0/c2"});
}

TEST_CASE_TEMPLATE("list_sessions by creation time: every session that exists for the whole "
                   "scan is listed exactly once while threads append, create and delete",
                   S, test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind);
  engine& e = *t;
  constexpr int stable = 300;
  std::set<std::string> expected;
  for (int i = 0; i < stable; ++i) {
    auto user = "u" + std::to_string(i % 3);
    MUST(e.create_session(test::create_req("app", user, "s" + std::to_string(i))));
    expected.insert(user + "/s" + std::to_string(i));
  }
  std::atomic<bool> stop{false};
  std::atomic<int> writes{0};
  std::vector<std::thread> writers;
  for (int w = 0; w < 4; ++w)
    writers.emplace_back([&, w] {
      std::uint32_t x = 12345u + static_cast<std::uint32_t>(w);
      int n = 0;
      while (!stop.load()) {
        x = x * 1103515245u + 12345u;
        int i = static_cast<int>((x >> 8) % stable);
        auto ref = test::sref("app", "u" + std::to_string(i % 3), "s" + std::to_string(i));
        // Appends move the session in update order; creates and deletes of
        // other sessions change the set around it.
        (void)e.append_event(test::append_req(ref, test::make_event(json{{"n", n}})));
        auto extra = test::sref("app", "u" + std::to_string(w % 3),
                                "x" + std::to_string(w) + "-" + std::to_string(n));
        (void)e.create_session(test::create_req(extra));
        if (n % 2 == 0)
          (void)e.delete_session(extra);
        ++n;
        writes.fetch_add(1);
      }
    });
  // Scan while they write: several full scans, app-wide and per user, each
  // begun once the writers have made progress since the last.
  for (int round = 0; round < 6; ++round) {
    const int before = writes.load();
    REQUIRE(test::eventually([&] { return writes.load() >= before + 20; }));
    std::optional<std::string> user;
    if (round % 2 == 1)
      user = "u" + std::to_string(round % 3);
    auto listed = all_pages(e, by_created(user, 7));
    std::map<std::string, int> seen;
    for (auto& name : listed)
      ++seen[name];
    for (auto& name : expected) {
      if (user && name.rfind(*user + "/", 0) != 0)
        continue;
      INFO("round ", round, ": ", name);
      CHECK(seen[name] == 1);
    }
    for (auto& [name, n] : seen) {
      INFO("round ", round, ": ", name);
      CHECK(n == 1); // nothing, stable or not, is listed twice
    }
  }
  stop = true;
  for (auto& w : writers)
    w.join();
  CHECK(writes.load() > 0);
}

TEST_CASE_TEMPLATE("list_sessions shared_state once: each scope's state once per page, the "
                   "sessions' own state beside it",
                   S, test::memory_store, test::lmdb_store) {
  auto t = test::open_engine(S::kind);
  engine& e = *t;
  MUST(e.create_session(
    test::create_req("app", "alice", "a1", json{{"own", 1}, {"user:lang", "en"}, {"app:m", "x"}})));
  MUST(e.create_session(test::create_req("app", "alice", "a2", json{{"own", 2}})));
  MUST(e.create_session(test::create_req("app", "bob", "b1", json{{"user:lang", "fr"}})));
  MUST(e.create_session(test::create_req("other", "bob", "o1", json{{"app:m", "other"}})));

  auto merged = MUST(e.list_sessions(test::list_req("app")));
  auto once_req = test::list_req("app");
  once_req.shared_state = list_state::once;
  auto once = MUST(e.list_sessions(once_req));
  REQUIRE(once.sessions.size() == 3);
  REQUIRE(merged.sessions.size() == 3);
  CHECK(merged.app_state == json::object());
  CHECK(merged.user_states.empty());
  CHECK(once.app_state == json{{"app:m", "x"}});
  REQUIRE(once.user_states.size() == 2);
  CHECK(once.user_states["alice"] == json{{"user:lang", "en"}});
  CHECK(once.user_states["bob"] == json{{"user:lang", "fr"}});
  for (std::size_t i = 0; i < 3; ++i) {
    auto& m = once.sessions[i];
    INFO(m.id);
    CHECK(m.id == merged.sessions[i].id);
    for (auto& [k, v] : m.state.items())
      CHECK(scope_of(k) == scope::session);
    // Merging the three parts gives the merged form.
    json full = m.state;
    full.update(once.app_state);
    full.update(once.user_states[m.user_id]);
    CHECK(full == merged.sessions[i].state);
  }

  // Per page: a user's state comes with the page that lists one of its
  // sessions; the app's state with every page.
  auto paged = test::list_req("app", std::nullopt, 1);
  paged.shared_state = list_state::once;
  paged.order_by = list_order::id;
  std::vector<std::size_t> users_per_page;
  for (;;) {
    auto p = MUST(e.list_sessions(paged));
    CHECK(p.app_state == json{{"app:m", "x"}});
    REQUIRE(p.sessions.size() == 1);
    CHECK(p.user_states.size() == 1);
    CHECK(p.user_states.count(p.sessions[0].user_id) == 1);
    users_per_page.push_back(p.user_states.size());
    if (!p.next_page_token)
      break;
    paged.page_token = *p.next_page_token;
  }
  CHECK(users_per_page.size() == 3);
}

TEST_CASE("list_sessions shared_state once: a large shared scope is sent once, where the "
          "merged form repeats it in every session and pays for it in pages") {
  auto t = test::open_engine(test::store_kind::lmdb,
                             [](options& o) { o.limits.max_response_bytes = 256 * 1024; });
  engine& e = *t;
  std::string big(60 * 1024, 'x');
  MUST(e.create_session(test::create_req("app", "u", "s0", json{{"app:big", big}})));
  for (int i = 1; i < 20; ++i)
    MUST(e.create_session(test::create_req("app", "u", "s" + std::to_string(i))));
  int merged_pages = 0, once_pages = 0;
  CHECK(all_pages(e, test::list_req("app"), &merged_pages).size() == 20);
  auto once = test::list_req("app");
  once.shared_state = list_state::once;
  CHECK(all_pages(e, once, &once_pages).size() == 20);
  CHECK(once_pages == 1);
  CHECK(merged_pages >= 5); // 20 copies of 60 KiB under a 256 KiB budget
}

TEST_CASE("format upgrade: a format-4 store gets its creation-order indexes when the engine "
          "opens it, exporting the same bytes") {
  test::temp_dir dir;
  fs::path fixture = AGENTSTATE_FORMAT4_FIXTURE;
  fs::copy_file(fixture / "data.mdb", fs::path(dir.str()) / "data.mdb");
  auto want = test::file_text(fixture / "export.jsonl");
  REQUIRE(!want.empty());
  auto export_text = [&] {
    auto kv = store::open_lmdb_kv_readonly(dir.str());
    auto txn = kv->begin_read();
    std::string out;
    REQUIRE(
      store::export_store(*txn, {}, [&](const std::string& line) { out += line + "\n"; }).ok());
    auto report = store::verify_store(*txn);
    INFO((report.messages.empty() ? std::string() : report.messages.front()));
    CHECK(report.ok());
    CHECK(report.events == 13);
    return std::make_pair(out, std::string(txn->get(store::table::meta, "format").value()));
  };
  auto before = export_text();
  CHECK(before.first == want);
  CHECK(before.second == "4");
  {
    options o;
    o.dir = dir.str();
    o.mode = durability::nosync;
    auto e = MUST(engine::open(o));
    CHECK(all_pages(*e, by_created(std::nullopt, 1))
          == std::vector<std::string>{"u1/s1", "u1/s2", "ü2/sé3"});
    auto per_user = by_created(std::string("u1"), 10);
    per_user.descending = true;
    CHECK(all_pages(*e, per_user) == std::vector<std::string>{"u1/s2", "u1/s1"});
    MUST(e->close());
  }
  auto after = export_text();
  CHECK(after.first == want);
  CHECK(after.second == std::to_string(store::format_version));
}
