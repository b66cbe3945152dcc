// SPDX-License-Identifier: Apache-2.0
// `agentstate serve`: list_sessions' page tokens (#44). A token names the
// listing it was issued for and carries a checksum: one over 1024 bytes, a
// made-up or damaged one, and one of another listing are refused with
// invalid_argument; one the server issued keeps working after a restart.
// The real binary over a real store, driven through pipes.
#include "support/serve_process.hpp"
#include "support/test_support.hpp"

namespace {

using namespace agentstate;
using namespace agentstate::test;

std::vector<std::string> ids_of(const json& page) {
  std::vector<std::string> out;
  for (const auto& m : page["sessions"])
    out.push_back(m["user_id"].get<std::string>() + "/" + m["id"].get<std::string>());
  return out;
}

void check_refused(server& s, json params, const std::string& says) {
  auto r = s.call("list_sessions", std::move(params));
  INFO("response: ", r.dump());
  REQUIRE(r.contains("error"));
  CHECK(r["error"]["data"]["kind"] == "invalid_argument");
  auto message = r["error"]["message"].get<std::string>();
  CHECK(message.find("page_token") != std::string::npos);
  CHECK(message.find(says) != std::string::npos);
}

json listing(const std::string& token) {
  return json{{"app_name", "app"}, {"page_size", 2}, {"page_token", token}};
}

} // namespace

TEST_CASE("serve: list_sessions accepted 1 MB, crafted and other listings' page tokens; issued "
          "ones survive a restart (#44)") {
  temp_dir dir;
  const auto store = (dir.path() / "store").string();
  const auto err = (dir.path() / "stderr.txt").string();
  std::string token;
  std::vector<std::string> second_page;
  {
    server s({"--store", store}, err);
    for (int i = 0; i < 5; ++i)
      s.ok("create_session", session_params("s" + std::to_string(i), i % 2 ? "u1" : "u2"));
    s.ok("create_session", session_params("s0", "u1", "other"));
    auto first = s.ok("list_sessions", json{{"app_name", "app"}, {"page_size", 2}});
    CHECK(ids_of(first) == std::vector<std::string>{"u2/s0", "u1/s1"});
    REQUIRE(first["next_page_token"].is_string());
    token = first["next_page_token"].get<std::string>();
    CHECK(token.size() <= 1024);
    auto second = s.ok("list_sessions", listing(token));
    second_page = ids_of(second);
    CHECK(second_page == std::vector<std::string>{"u2/s2", "u1/s3"});

    // Over the bound, unread: 1 MiB, and one byte past 1024.
    check_refused(s, listing(std::string(1 << 20, 'a')), "1048576 bytes; the limit is 1024");
    check_refused(s, listing(std::string(1025, '0')), "the limit is 1024");
    // Made up: the hex of an index key of this app (what tokens used to be),
    // not hex at all, and an issued token with one digit changed.
    check_refused(s, listing(hex(std::string("app\0", 4) + std::string(8, '\0') + "s9")),
                  "not a page token list_sessions issued");
    check_refused(s, listing("zz" + token), "not a page token list_sessions issued");
    auto flipped = token;
    flipped[token.size() / 2] = flipped[token.size() / 2] == '0' ? '1' : '0';
    check_refused(s, listing(flipped), "not a token of this listing");
    // Another listing: another app, one user, the other direction, another
    // order_by.
    check_refused(s, json{{"app_name", "other"}, {"page_token", token}},
                  "not a token of this listing");
    check_refused(s, json{{"app_name", "app"}, {"user_id", "u1"}, {"page_token", token}},
                  "not a token of this listing");
    check_refused(s, json{{"app_name", "app"}, {"order", "desc"}, {"page_token", token}},
                  "another order_by or order");
    check_refused(s, json{{"app_name", "app"}, {"order_by", "created"}, {"page_token", token}},
                  "another order_by or order");
    check_refused(s, json{{"app_name", "app"}, {"order_by", "id"}, {"page_token", token}},
                  "another order_by or order");
    // A user listing's token works for that listing only.
    auto mine =
      s.ok("list_sessions", json{{"app_name", "app"}, {"user_id", "u2"}, {"page_size", 1}});
    REQUIRE(mine["next_page_token"].is_string());
    auto next = s.ok("list_sessions",
                     json{{"app_name", "app"},
                          {"user_id", "u2"},
                          {"page_size", 1},
                          {"page_token", mine["next_page_token"]}});
    CHECK(ids_of(next) == std::vector<std::string>{"u2/s2"});
    check_refused(
      s, json{{"app_name", "app"}, {"user_id", "u1"}, {"page_token", mine["next_page_token"]}},
      "not a token of this listing");
    CHECK(s.wait_exit() == 0);
  }
  // The token issued before the restart still continues its listing.
  server s({"--store", store}, err);
  CHECK(ids_of(s.ok("list_sessions", listing(token))) == second_page);
  CHECK(s.wait_exit() == 0);
}

TEST_CASE("serve: list_sessions with session_tokens gives each session the token that continues "
          "the listing after it") {
  temp_dir dir;
  server s({"--store", (dir.path() / "store").string()}, (dir.path() / "stderr.txt").string());
  for (int i = 0; i < 6; ++i)
    s.ok("create_session", session_params("s" + std::to_string(i), i % 2 ? "u1" : "u2"));
  for (std::string order_by : {"id", "created", "update_time"})
    for (std::string order : {"asc", "desc"}) {
      INFO(order_by, " ", order);
      json base{{"app_name", "app"}, {"order_by", order_by}, {"order", order}};
      auto all = s.ok("list_sessions", base);
      auto plain = ids_of(all);
      REQUIRE(plain.size() == 6);
      for (const auto& m : all["sessions"])
        CHECK(!m.contains("page_token")); // only when asked for
      auto with = base;
      with["session_tokens"] = true;
      auto page = s.ok("list_sessions", with);
      CHECK(ids_of(page) == plain);
      REQUIRE(page["sessions"].size() == 6);
      for (std::size_t i = 0; i < 6; ++i) {
        auto rest = base;
        rest["page_token"] = page["sessions"][i]["page_token"];
        auto after = ids_of(s.ok("list_sessions", rest));
        CHECK(after
              == std::vector<std::string>(plain.begin() + static_cast<long>(i) + 1, plain.end()));
      }
      // The last session's token is the one a page ending there would carry.
      auto two = base;
      two["page_size"] = 2;
      two["session_tokens"] = true;
      auto first_two = s.ok("list_sessions", two);
      CHECK(first_two["next_page_token"] == first_two["sessions"][1]["page_token"]);
    }
  auto bad = s.call("list_sessions", json{{"app_name", "app"}, {"session_tokens", "yes"}});
  CHECK(bad["error"]["data"]["kind"] == "invalid_argument");
}
