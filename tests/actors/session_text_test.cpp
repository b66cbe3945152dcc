// SPDX-License-Identifier: Apache-2.0
// engine::get_session_json: the Session as JSON text without parsing stored
// events must equal dump_json(to_json(get_session)) for every window (G3/G4),
// with and without the live invocation's temp: keys, and be "null" when the
// session is missing. append_result::text is the text an append stored.
#include <doctest/doctest.h>

#include "support/test_support.hpp"

using namespace agentstate;

namespace {

std::string typed_text(engine& e, const get_request& req) {
  auto s = e.get_session(req);
  REQUIRE(s.ok());
  if (!*s)
    return "null";
  auto text = dump_json(to_json(**s));
  REQUIRE(text.ok());
  return *text;
}

} // namespace

TEST_CASE_TEMPLATE("G1-G6: get_session_json equals the typed session, encoded", S,
                   test::memory_store, test::lmdb_store) {
  test::test_engine t = test::open_engine(S::kind);
  engine& e = *t;
  auto ref = test::sref("app", "u\xc3\xa9", "s \"quoted\"");
  MUST(e.create_session(
    test::create_req(ref, json{{"k", "v\n"}, {"user:lang", "en"}, {"app:pi", 3.141592653589793}})));
  for (int i = 0; i < 30; ++i) {
    auto ev = test::make_event(json{{"step", i}, {"temp:t", i}, {"score", i * 0.1}},
                               "e" + std::to_string(i), 1000.0 + i * 0.25, "inv");
    ev.content = json{{"parts", json::array({json{{"text", "caf\xc3\xa9 " + std::to_string(i)}}})}};
    ev.extra["custom"] = json{{"nested", json::array({1, 2.5, nullptr, true})}};
    if (i % 5 == 0)
      ev.actions.state_remove = {"gone" + std::to_string(i)};
    MUST(e.append_event(test::append_req(ref, std::move(ev))));
  }
  std::vector<get_request> reqs;
  reqs.push_back(test::get_req(ref));
  reqs.push_back(test::get_req(ref, 0));
  reqs.push_back(test::get_req(ref, 10));
  reqs.push_back(test::get_req(ref, 100));
  reqs.push_back(test::get_req(ref, std::nullopt, 1005.0));
  reqs.push_back(test::get_req(ref, 3, 1002.0));
  reqs.push_back(test::get_req(ref, std::nullopt, 99999.0));
  reqs.push_back(test::get_req(ref, 5, std::nullopt, "inv")); // with temp: keys
  reqs.push_back(test::get_req(ref, 5, std::nullopt, "other")); // not the live one
  reqs.push_back(test::get_req(test::sref("app", "u", "missing")));
  reqs.push_back(test::get_req(test::sref("app", "u", "missing"), 1, std::nullopt, "inv"));
  for (auto& req : reqs) {
    INFO("num_recent=", req.num_recent_events.value_or(-1),
         " after=", req.after_timestamp.value_or(-1), " inv=", req.invocation_id);
    auto text = e.get_session_json(req);
    REQUIRE(text.ok());
    CHECK(*text == typed_text(e, req));
  }
  auto with_temp = e.get_session_json(test::get_req(ref, 0, std::nullopt, "inv"));
  CHECK(json::parse(*with_temp)["state"]["temp:t"] == 29);
  CHECK(*e.get_session_json(test::get_req(test::sref("app", "u", "missing"))) == "null");
  CHECK_ERR(e.get_session_json(test::get_req(ref, -1)), errc::invalid_argument);
  CHECK_ERR(e.get_session_json(test::get_req(test::sref("", "u", "s"))), errc::invalid_argument);
}

TEST_CASE_TEMPLATE("append_result::text is the stored event's text, or empty when not encoded", S,
                   test::memory_store, test::lmdb_store) {
  test::test_engine t = test::open_engine(S::kind);
  engine& e = *t;
  auto ref = test::sref("app", "u", "s");
  MUST(e.create_session(test::create_req(ref)));
  auto stored_text = [&](std::size_t i) {
    auto whole = json::parse(MUST(e.get_session_json(test::get_req(ref))));
    return whole["events"].at(i).dump();
  };

  // An ordinary append: the text the row holds, temp: keys stripped.
  auto ev = test::make_event(json{{"k", "caf\xc3\xa9\n"}, {"temp:t", 1}, {"user:n", 2.5}});
  ev.content = json{{"parts", json::array({json{{"text", "hi \"there\""}}})}};
  ev.extra["custom"] = json::array({1, nullptr, true});
  auto r = MUST(e.append_event(test::append_req(ref, std::move(ev))));
  REQUIRE_FALSE(r.text.empty());
  CHECK(r.text == MUST(dump_json(to_json(r.ev))));
  CHECK(json::parse(r.text) == json::parse(stored_text(0)));
  CHECK(r.text.find("temp:t") == std::string::npos);

  // Not encoded by the call: a re-appended id, a partial event, a modify.
  auto again = MUST(e.append_event(test::append_req(ref, r.ev)));
  CHECK(again.text.empty());
  CHECK(again.ev.id == r.ev.id);
  auto partial = test::make_event(json{{"p", 1}});
  partial.partial = true;
  CHECK(MUST(e.append_event(test::append_req(ref, std::move(partial)))).text.empty());
  auto counted = test::append_req(ref, test::make_event());
  counted.modify.push_back(modify_ops::increment("n", 1));
  auto m = MUST(e.append_event(std::move(counted)));
  CHECK(m.text.empty());
  CHECK(m.ev.actions.state_delta["n"] == 1);
  CHECK(MUST(e.get_session(test::get_req(ref)))->events.size() == 2);

  // A rewind appends its event through the same path: it carries the text.
  rewind_request back;
  back.ref = ref;
  back.before_version = 1;
  auto rw = MUST(e.rewind_session(std::move(back)));
  REQUIRE_FALSE(rw.text.empty());
  CHECK(rw.text == MUST(dump_json(to_json(rw.ev))));
  CHECK(json::parse(rw.text) == json::parse(stored_text(2)));
}
