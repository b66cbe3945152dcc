// SPDX-License-Identifier: Apache-2.0
// Regression (issue 18 probe): "serve sent response lines that are not JSON
// after a byte flip". A byte of a stored event's text turned into 0xff
// (invalid UTF-8) used to be spliced into get_session's answer, which the
// protocol writes through unparsed. With checksums the damaged session
// answers data_corrupt naming it, every response line is JSON, and the
// other sessions are served as before.
#include <doctest/doctest.h>

#include "store/keys.hpp"
#include "store/kv.hpp"
#include "store/records.hpp"
#include "support/serve_process.hpp"
#include "support/test_support.hpp"

using namespace agentstate;
using namespace agentstate::test;

TEST_CASE("regression: serve sent response lines that are not JSON after a byte flip") {
  temp_dir dir;
  auto store_dir = (dir.path() / "store").string();
  {
    options o;
    o.dir = store_dir;
    o.mode = durability::nosync;
    auto e = engine::open(o);
    REQUIRE(e.ok());
    for (const char* s : {"s1", "s2"}) {
      MUST((*e)->create_session(create_req("app", "u1", s)));
      for (int i = 0; i < 3; ++i)
        append_ok(**e, sref("app", "u1", s),
                  make_event(json{{"n", i}}, std::string(s) + "-e" + std::to_string(i)));
    }
    MUST((*e)->close());
  }
  std::string original;
  {
    auto kv = store::open_lmdb_kv(store_dir, false, std::uint64_t{1} << 30);
    auto key = store::event_key(store::session_key("app", "u1", "s1"), 2);
    auto w = kv->begin_write();
    std::string value(*w->get(store::table::events, key));
    original = value;
    auto at = value.find("s1-e1");
    REQUIRE(at != std::string::npos);
    value[at] = '\xff'; // the id's first byte: invalid UTF-8 inside a JSON string
    w->put(store::table::events, key, value);
    w->commit();
  }
  server srv({"--store", store_dir, "--durability", "nosync"},
             (dir.path() / "stderr.txt").string());
  auto get = [](int id, const char* s, json extra = json::object()) {
    auto p = session_params(s);
    for (auto it = extra.begin(); it != extra.end(); ++it)
      p[it.key()] = it.value();
    return rpc(id, "get_session", p);
  };
  srv.send_line(get(1, "s1"));
  srv.send_line(get(2, "s2"));
  srv.send_line(get(3, "s1", json{{"num_recent_events", 1}})); // skips the damaged row
  srv.send_line(get(4, "s1", json{{"num_recent_events", 2}}));
  srv.send_line(rpc(5, "list_sessions", json{{"app_name", "app"}}));
  srv.send_line(rpc(6, "append_event",
                    with(session_params("s1"), "event",
                         json{{"id", "new"}, {"author", "user"}}))); // reads the event ids
  srv.send_line(rpc(7, "append_event",
                    with(session_params("s2"), "event", json{{"id", "new"}, {"author", "user"}})));
  srv.send_line(get(8, "s1"));
  auto r = srv.collect(8); // each line parsed as JSON (collect REQUIREs it)
  auto kind = [&](int id) {
    auto& x = r[std::to_string(id)];
    INFO("response: ", x.dump());
    return x.contains("error") ? x["error"]["data"]["kind"].get<std::string>() : "ok";
  };
  auto message = [&](int id) {
    return r[std::to_string(id)]["error"]["message"].get<std::string>();
  };
  for (int id : {1, 4, 6, 8}) {
    CAPTURE(id);
    CHECK(kind(id) == "data_corrupt");
    CHECK(message(id).find("app/u1/s1") != std::string::npos);
  }
  CHECK(kind(2) == "ok");
  CHECK(r["2"]["result"]["events"].size() == 3);
  CHECK(kind(3) == "ok");
  CHECK(r["3"]["result"]["events"].size() == 1);
  CHECK(kind(5) == "ok"); // listing reads no event
  CHECK(r["5"]["result"]["sessions"].size() == 2);
  CHECK(kind(7) == "ok");
  CHECK(r["7"]["result"]["version"] == 4);
  srv.close_stdin();
  // The damaged row is as it was (no repair, no rewrite).
  auto kv = store::open_lmdb_kv_readonly(store_dir);
  auto txn = kv->begin_read();
  auto key = store::event_key(store::session_key("app", "u1", "s1"), 2);
  CHECK(txn->get(store::table::events, key).value() != original);
  CHECK(txn->get(store::table::events, store::event_key(store::session_key("app", "u1", "s1"), 4))
          .has_value()
        == false);
}
