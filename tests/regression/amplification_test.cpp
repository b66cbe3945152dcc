// SPDX-License-Identifier: Apache-2.0
// Regression for two amplification findings: "inject_state: a 1 KB request
// produced a 300 MB answer" and "list_sessions copies the app's app: state into
// every listed session: a 103-byte request produced 166 MB". Both answers are
// now bounded by limits::max_response_bytes, without being built past it.
#include <doctest/doctest.h>

#include <set>

#include "agentstate/template.hpp"
#include "support/test_support.hpp"

using namespace agentstate;

TEST_CASE("regression: inject_state's output is bounded (a 1 KB request produced 300 MB)") {
  json state{{"big", std::string(100 * 1024, 'x')}, {"a", "0123456789"}};
  std::string tmpl;
  for (int i = 0; i < 1000; ++i)
    tmpl += "{big}"; // 5 KB of template, 100 MB of output
  auto r = inject_state(tmpl, state);
  CHECK(r.code() == errc::too_large);

  // At the boundary: exactly the bound renders, one byte more does not.
  CHECK(MUST(inject_state("{a}", state, {}, 10)) == "0123456789");
  CHECK(inject_state("{a}!", state, {}, 10).code() == errc::too_large);
  CHECK(inject_state("0123456789!", state, {}, 10).code() == errc::too_large);
  CHECK(inject_state("{app:x?}{a}", state, {}, 10).ok());
}

TEST_CASE("regression: a list_sessions page is bounded (a 103-byte request produced 166 MB)") {
  for (auto kind : {test::store_kind::memory, test::store_kind::lmdb}) {
    CAPTURE(test::to_string(kind));
    auto eng = test::open_engine(kind, [](options& o) {
      o.limits.max_response_bytes = std::size_t{2} << 20; // 2 MiB
    });
    auto& e = *eng;
    // 400 KB of app: state, merged into every listed session (rule L2).
    MUST(e.create_session(
      test::create_req("app", "u", "s0", json{{"app:big", std::string(400 * 1024, 'a')}})));
    for (int i = 1; i < 30; ++i)
      MUST(e.create_session(test::create_req("app", "u", "s" + std::to_string(i))));

    std::set<std::string> seen;
    std::string token;
    int pages = 0;
    do {
      auto page = MUST(e.list_sessions(test::list_req("app", std::nullopt, 100, token)));
      ++pages;
      CHECK(!page.sessions.empty());
      CHECK(page.sessions.size() <= 5); // 5 × 400 KB fill 2 MiB
      std::size_t bytes = 0;
      for (auto& m : page.sessions) {
        CHECK(m.state["app:big"].get_ref<const std::string&>().size() == 400 * 1024);
        CHECK(seen.insert(m.id).second); // listed once
        bytes += m.state.dump().size();
      }
      CHECK(bytes <= (std::size_t{2} << 20));
      token = page.next_page_token.value_or("");
    } while (!token.empty() && pages < 100);
    CHECK(seen.size() == 30);
    CHECK(pages >= 6);
  }
}

TEST_CASE("regression: one session larger than the response limit is too_large, not a page "
          "over the limit") {
  auto eng = test::open_engine(test::store_kind::lmdb, [](options& o) {
    o.limits.max_response_bytes = std::size_t{64} << 10; // the smallest allowed
  });
  auto& e = *eng;
  MUST(
    e.create_session(test::create_req("app", "u", "s", json{{"k", std::string(100 * 1024, 'k')}})));
  auto page = e.list_sessions(test::list_req("app"));
  CHECK(page.code() == errc::too_large);
  // The session itself is intact and readable.
  CHECK(MUST(e.get_session(test::get_req(test::sref("app", "u", "s"))))
          ->state["k"]
          .get_ref<const std::string&>()
          .size()
        == 100 * 1024);
}
