// SPDX-License-Identifier: Apache-2.0
// List entries lost from a real LMDB store (issue 44): an app's or user's
// list-index entry whose key was damaged into one that sorts past the
// listing's range, still in key order, is never reached by the listing's
// scan and fails no order check. A listing that walks the whole range
// (from its start to its end, or include_total's count) compares what it
// walked with the app's or user's session count (store format 9) and says
// data_corrupt naming the scope, never a shorter listing; and a page that
// reaches an end of its range checks the seal of the key just past it (the
// damaged key, whose seal covers the key it was written under).
#include <doctest/doctest.h>

#include <string>

#include "store/keys.hpp"
#include "store/kv.hpp"
#include "store/verify.hpp"
#include "support/lost_rows.hpp"
#include "support/test_support.hpp"

using namespace agentstate;
using namespace agentstate::store;

namespace {

// App "a": users u and v, three sessions each; app "b" after it, so a key
// damaged past a's range still sorts before b's first entry.
void fill(const std::string& dir) {
  auto e = test::open_store_dir(dir);
  for (auto* app : {"a", "b"})
    for (auto* user : {"u", "v"})
      for (int i = 0; i < 3; ++i)
        MUST(e->create_session(
          test::create_req(test::sref(app, user, "s" + std::to_string(i)), json{{"k", i}})));
  MUST(e->close());
}

// The last key of table `t` under `prefix`.
std::string last_key(const std::string& dir, table t, const std::string& prefix) {
  auto kv = open_lmdb_kv_readonly(dir);
  auto r = kv->begin_read();
  std::string last;
  r->scan(t, prefix, {}, [&](std::string_view k, std::string_view) {
    last = std::string(k);
    return true;
  });
  REQUIRE_FALSE(last.empty());
  return last;
}

// Damages the last entry of `t` under `prefix` (its app's or user's range):
// the byte of the prefix's trailing NUL becomes 1, so the key sorts just
// past the range and before the next one.
void push_past_range(const std::string& dir, table t, const std::string& prefix) {
  auto key = last_key(dir, t, prefix);
  auto moved = key;
  moved[prefix.size() - 1] = '\x01';
  test::damage_key(dir, t, key, moved);
}

bool mentions(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

void corrupt_naming(const result<session_page>& r, const std::string& scope) {
  INFO(test::describe(r));
  REQUIRE_FALSE(r.ok());
  CHECK(r.code() == errc::data_corrupt);
  CHECK(mentions(r.err().message, scope));
}

list_request request(const std::string& app, std::optional<std::string> user, list_order order,
                     bool descending = false) {
  auto q = test::list_req(app, std::move(user));
  q.order_by = order;
  q.descending = descending;
  return q;
}

} // namespace

TEST_CASE("a list-index key damaged past its app's range is data_corrupt, not a shorter listing") {
  struct damage {
    table t;
    list_order order;
  };
  for (auto d : {damage{table::by_update, list_order::update_time},
                 damage{table::by_created, list_order::created}}) {
    CAPTURE(table_name(d.t));
    test::temp_dir dir;
    fill(dir.str());
    push_past_range(dir.str(), d.t, std::string("a") + '\0');
    auto e = test::open_store_dir(dir.str());
    // A listing from the start to the end of the app, either way.
    corrupt_naming(e->list_sessions(request("a", std::nullopt, d.order)), "app 'a'");
    corrupt_naming(e->list_sessions(request("a", std::nullopt, d.order, true)), "app 'a'");
    // A first page that stops before the end does not walk the whole app,
    // but include_total does.
    auto q = request("a", std::nullopt, d.order);
    q.page_size = 2;
    auto first = e->list_sessions(q);
    REQUIRE(first.ok());
    CHECK(first->sessions.size() == 2);
    q.include_total = true;
    corrupt_naming(e->list_sessions(q), "app 'a'");
    // Paged to its end, without include_total: the page that reaches the
    // end checks the key just past it.
    q.include_total = false;
    auto page = e->list_sessions(q);
    int pages = 0;
    while (page.ok() && page->next_page_token && ++pages < 10) {
      q.page_token = *page->next_page_token;
      page = e->list_sessions(q);
    }
    CHECK(pages == 2);
    corrupt_naming(page, "app 'a'");
    // The users' own listings (their index is intact) read as before. The
    // damaged key lies just before app b's range, and could be one of b's:
    // b's listings that reach their start are data_corrupt too.
    corrupt_naming(e->list_sessions(request("b", std::nullopt, d.order)), "app 'b'");
    CHECK(test::list_all(*e, "a", std::string("u")).size() == 3);
    CHECK(test::list_all(*e, "a", std::string("v")).size() == 3);
    MUST(e->close());
  }
}

TEST_CASE("a list-index key damaged past its user's range is data_corrupt, not a shorter listing") {
  for (auto [t, order] : {std::pair{table::by_user, list_order::update_time},
                          std::pair{table::by_user_created, list_order::created}}) {
    CAPTURE(table_name(t));
    test::temp_dir dir;
    fill(dir.str());
    // User u's last entry sorts past u's range, before v's first.
    const std::string prefix = user_scope_key("a", "u") + '\0';
    push_past_range(dir.str(), t, prefix);
    auto e = test::open_store_dir(dir.str());
    corrupt_naming(e->list_sessions(request("a", std::string("u"), order)), "user 'a/u'");
    corrupt_naming(e->list_sessions(request("a", std::string("u"), order, true)), "user 'a/u'");
    auto q = request("a", std::string("u"), order);
    q.page_size = 1;
    q.include_total = true;
    corrupt_naming(e->list_sessions(q), "user 'a/u'");
    // The app's own listing (its index is intact) reads as before; user v's
    // range starts just after the damaged key.
    CHECK(test::list_all(*e, "a", std::nullopt, 2).size() == 6);
    corrupt_naming(e->list_sessions(request("a", std::string("v"), order)), "user 'a/v'");
    MUST(e->close());
  }
}

TEST_CASE("a session record key damaged past its app's range is data_corrupt in a listing by id") {
  test::temp_dir dir;
  fill(dir.str());
  push_past_range(dir.str(), table::sessions, std::string("a") + '\0');
  auto e = test::open_store_dir(dir.str());
  corrupt_naming(e->list_sessions(request("a", std::nullopt, list_order::id)), "app 'a'");
  MUST(e->close());
}

TEST_CASE("session counts follow creates, deletes, forks and user deletes, and verify clean") {
  test::temp_dir dir;
  fill(dir.str());
  {
    auto e = test::open_store_dir(dir.str());
    MUST(e->delete_session(test::sref("a", "u", "s0")));
    fork_request f;
    f.ref = test::sref("a", "v", "s1");
    f.new_session_id = "forked";
    MUST(e->fork_session(f));
    MUST(e->delete_user("b", "u"));
    CHECK(test::list_all(*e, "a").size() == 6);
    CHECK(test::list_all(*e, "a", std::string("u")).size() == 2);
    CHECK(test::list_all(*e, "a", std::string("v")).size() == 4);
    CHECK(test::list_all(*e, "b").size() == 3);
    MUST(e->close());
  }
  auto kv = open_lmdb_kv_readonly(dir.str());
  auto r = kv->begin_read();
  auto report = verify_store(*r);
  INFO((report.messages.empty() ? std::string() : report.messages.front()));
  CHECK(report.ok());
}
