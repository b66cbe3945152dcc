// SPDX-License-Identifier: Apache-2.0
// cluster/span.hpp: the answers of requests across nodes made of the nodes'
// own answers (listing pages merged in order, change feeds merged under
// "nodes:" cursors), on crafted answers; tests/cluster/serve_cluster_test.cpp
// runs them across real nodes.
#include <doctest/doctest.h>

#include "cluster/span.hpp"
#include "support/test_support.hpp"

namespace {

using namespace agentstate;
using protocol::span_answer;

/// A page token of position `pos` (format, shape, position, a CRC the merge
/// does not read).
std::string token(const std::string& pos) {
  return "0100" + test::hex(pos) + "deadbeef";
}

json session(const std::string& user, const std::string& pos) {
  return json{{"app_name", "app"}, {"user_id", user}, {"id", pos}, {"page_token", token(pos)}};
}

/// A part's page: sessions at `positions` (user "u" + position), with a
/// next page token when it has more.
span_answer page(const std::vector<std::string>& positions, bool more, std::uint64_t total = 0) {
  json sessions = json::array();
  for (auto& p : positions)
    sessions.push_back(session("u" + p, p));
  json r{{"sessions", sessions},
         {"next_page_token", more ? json(token(positions.back())) : json(nullptr)},
         {"total", total}};
  return {r, nullptr};
}

std::vector<std::string> ids_of(const json& result) {
  std::vector<std::string> out;
  for (auto& s : result["sessions"])
    out.push_back(s["id"]);
  return out;
}

span_answer changes(const std::string& store, int first, int count, bool at_head) {
  json cs = json::array();
  for (int i = first; i < first + count; ++i)
    cs.push_back({{"cursor", store + "-" + std::to_string(i)}, {"kind", "append"}});
  // The part's cursor is past what it examined: beyond its last change.
  return {json{{"changes", cs},
               {"cursor", store + "-" + std::to_string(first + count + 5)},
               {"at_head", at_head}},
          nullptr};
}

} // namespace

TEST_CASE("cluster span: a listing's pages merge in order, bounded by a part that has more") {
  std::vector<span_answer> parts{page({"1", "3", "5"}, true, 7),
                                 page({"2", "4", "6", "7"}, false, 4)};
  auto r = cluster::merge_pages(json{{"app_name", "app"}, {"include_total", true}}, parts, 1 << 20);
  REQUIRE(r.error.is_null());
  // Part 0 has more after "5": "6" and "7" wait for the next page.
  CHECK(ids_of(r.result) == std::vector<std::string>{"1", "2", "3", "4", "5"});
  CHECK(r.result["next_page_token"] == token("5"));
  CHECK(r.result["total"] == 11);
  for (auto& s : r.result["sessions"])
    CHECK(!s.contains("page_token")); // not asked for
  // page_size cuts it; the token is the last listed session's own.
  auto small = cluster::merge_pages(
    json{{"app_name", "app"}, {"page_size", 2}, {"session_tokens", true}}, parts, 1 << 20);
  CHECK(ids_of(small.result) == std::vector<std::string>{"1", "2"});
  CHECK(small.result["next_page_token"] == token("2"));
  CHECK(small.result["sessions"][1]["page_token"] == token("2"));
  CHECK(!small.result.contains("total"));
  // Every part at its end: the last page.
  auto last = cluster::merge_pages(json{{"app_name", "app"}},
                                   {page({"6"}, false), page({"7"}, false)}, 1 << 20);
  CHECK(ids_of(last.result) == std::vector<std::string>{"6", "7"});
  CHECK(last.result["next_page_token"].is_null());
}

TEST_CASE("cluster span: a descending listing merges from the largest position") {
  std::vector<span_answer> parts{page({"9", "5"}, true), page({"8", "7", "6", "1"}, false)};
  auto r = cluster::merge_pages(json{{"app_name", "app"}, {"order", "desc"}}, parts, 1 << 20);
  CHECK(ids_of(r.result) == std::vector<std::string>{"9", "8", "7", "6", "5"});
  CHECK(r.result["next_page_token"] == token("5"));
}

TEST_CASE("cluster span: a merged page keeps to the byte limit, one session at least") {
  std::vector<span_answer> parts{page({"1", "3"}, false), page({"2"}, false)};
  auto r = cluster::merge_pages(json{{"app_name", "app"}}, parts, 10);
  CHECK(ids_of(r.result) == std::vector<std::string>{"1"});
  CHECK(r.result["next_page_token"] == token("1"));
}

TEST_CASE("cluster span: a listing across nodes refuses offset and answers a part's error") {
  std::vector<span_answer> parts{page({"1"}, false), page({"2"}, false)};
  auto r = cluster::merge_pages(json{{"app_name", "app"}, {"offset", 1}}, parts, 1 << 20);
  CHECK(r.error["data"]["kind"] == "invalid_argument");
  CHECK(r.error["code"] == protocol::rpc_code::invalid_params);
  parts[1] = cluster::span_error("unavailable", "node b is down");
  auto e = cluster::merge_pages(json{{"app_name", "app"}}, parts, 1 << 20);
  CHECK(e.result.is_null());
  CHECK(e.error["data"]["kind"] == "unavailable");
  CHECK(e.error["message"] == "node b is down");
}

TEST_CASE("cluster span: merged cursors round-trip and malformed ones are refused") {
  std::map<std::string, std::string> at{{"b", "s2-7"}, {"a", "s1-3"}};
  auto text = cluster::merged_cursor(at);
  CHECK(text == "nodes:a=s1-3,b=s2-7");
  CHECK(cluster::parse_merged_cursor(text) == at);
  CHECK(cluster::parse_merged_cursor("nodes:") == std::map<std::string, std::string>{});
  for (const char* bad : {"s1-3", "nodes:a", "nodes:a=", "nodes:=1", "nodes:a=1,a=2",
                          "nodes:a=1,,b=2", "nodes:-a=1", "nodes:a=1=2"})
    CHECK_MESSAGE(!cluster::parse_merged_cursor(bad), bad);
}

TEST_CASE("cluster span: change feeds merge one change from each node in turn, each change "
          "carrying the merged cursor that resumes after it") {
  std::vector<std::string> ids{"a", "b"};
  std::vector<span_answer> parts{changes("s1", 1, 3, false), changes("s2", 10, 1, true)};
  auto r = cluster::merge_changes(json{{"scope", "all"}, {"limit", 3}}, parts, ids);
  REQUIRE(r.error.is_null());
  auto& cs = r.result["changes"];
  REQUIRE(cs.size() == 3);
  // a's first, b's only (all of b taken: b's entry is its part's cursor), a's second.
  CHECK(cs[0]["cursor"] == "nodes:a=s1-1");
  CHECK(cs[1]["cursor"] == "nodes:a=s1-1,b=s2-16");
  CHECK(cs[2]["cursor"] == "nodes:a=s1-2,b=s2-16");
  CHECK(r.result["cursor"] == "nodes:a=s1-2,b=s2-16");
  CHECK(r.result["at_head"] == false);
  // Resuming: entries of nodes with nothing new stay; all taken and at head.
  std::vector<span_answer> next{changes("s1", 3, 1, true), changes("s2", 17, 0, true)};
  auto r2 = cluster::merge_changes(json{{"scope", "all"}, {"from", r.result["cursor"]}}, next, ids);
  REQUIRE(r2.error.is_null());
  CHECK(r2.result["changes"].size() == 1);
  CHECK(r2.result["cursor"] == "nodes:a=s1-9,b=s2-22");
  CHECK(r2.result["at_head"] == true);
}

TEST_CASE("cluster span: a change feed across nodes refuses a node's own cursor and rewrites a "
          "part's oldest cursor") {
  std::vector<std::string> ids{"a", "b"};
  std::vector<span_answer> parts{changes("s1", 1, 1, true), changes("s2", 1, 1, true)};
  auto bad = cluster::merge_changes(json{{"scope", "all"}, {"from", "s1-1"}}, parts, ids);
  CHECK(bad.error["data"]["kind"] == "invalid_argument");
  parts[1] = {nullptr,
              json{{"code", -32000},
                   {"message", "cursor expired"},
                   {"data", {{"kind", "cursor_expired"}, {"oldest", "s2-40"}}}}};
  auto expired =
    cluster::merge_changes(json{{"scope", "all"}, {"from", "nodes:a=s1-1,b=s2-2"}}, parts, ids);
  CHECK(expired.error["data"]["kind"] == "cursor_expired");
  CHECK(expired.error["data"]["oldest"] == "nodes:a=s1-1,b=s2-40");
}

TEST_CASE("cluster span: with_node_cursor moves one node's entry and keeps the others") {
  CHECK(cluster::with_node_cursor("", "b", "s2-4") == "nodes:b=s2-4");
  CHECK(cluster::with_node_cursor("nodes:", "a", "s1-1") == "nodes:a=s1-1");
  auto both = cluster::with_node_cursor("nodes:b=s2-4", "a", "s1-9");
  CHECK(both == "nodes:a=s1-9,b=s2-4");
  auto moved = cluster::with_node_cursor(both, "b", "s2-5");
  CHECK(moved == "nodes:a=s1-9,b=s2-5");
  auto parsed = cluster::parse_merged_cursor(moved);
  REQUIRE(parsed);
  CHECK(parsed->at("a") == "s1-9");
  CHECK(parsed->at("b") == "s2-5");
  // Not a merged cursor (a node's own): taken as naming no node.
  CHECK(cluster::with_node_cursor("s1-3", "c", "s3-1") == "nodes:c=s3-1");
}
