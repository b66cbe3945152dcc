// SPDX-License-Identifier: Apache-2.0
// "No request can exhaust the server": the amplification requests an
// independent probe found (a 1 KB inject_state answered with 300 MB, a
// 103-byte list_sessions with 166 MB, a 15 MiB malformed line echoed whole),
// and a get_session of a session larger than the response limit, sent to a
// real `agentstate serve` on a real LMDB store. Each is answered within
// --max-response-bytes (or refused with too_large before the answer is
// built), and the server's peak memory grows by a bounded amount.
#include "server/net_support.hpp"

using namespace agentstate;
using namespace agentstate::test;
using namespace agentstate::test::net;

namespace {

constexpr std::size_t limit = std::size_t{4} << 20; // --max-response-bytes

} // namespace

TEST_CASE("exhaustion: amplifying requests are answered within --max-response-bytes or "
          "refused, and serve's peak memory stays bounded") {
  temp_dir dir;
  server_process srv({"--listen", "0", "--store", (dir.path() / "store").string(), "--durability",
                      "nosync", "--io-threads", "2", "--max-response-bytes", std::to_string(limit)},
                     (dir.path() / "log.txt").string());
  client c(srv.port());
  const std::string half_mib(512 * 1024, 'a');
  // 1 MiB of app: state, 200 sessions of one user, and one session holding
  // 40 events of 256 KiB (10 MiB of events).
  REQUIRE(ok(c.call(
    "create_session",
    with(sref_params("app", "s0"), "state", json{{"app:a", half_mib}, {"app:b", half_mib}}))));
  for (int i = 1; i < 200; ++i)
    REQUIRE(ok(c.call("create_session", sref_params("app", "s" + std::to_string(i)))));
  REQUIRE(ok(c.call("create_session", sref_params("app", "long"))));
  for (int i = 0; i < 40; ++i) {
    json ev{{"author", "agent"},
            {"content", {{"parts", json::array({{{"text", std::string(256 * 1024, 'e')}}})}}}};
    REQUIRE(ok(c.call("append_event", with(sref_params("app", "long"), "event", ev))));
  }
  REQUIRE(ok(c.call("get_app_state", json{{"app_name", "app"}})));
  const long base_hwm = srv.status("VmHWM");
  REQUIRE(base_hwm > 0);

  // The probe's inject_state: a 1 KB template rendering 512 KiB per
  // placeholder (100 MB in all) is too_large, never built.
  std::string tmpl;
  for (int i = 0; i < 200; ++i)
    tmpl += "{app:a}";
  auto inj = c.call("inject_state", with(sref_params("app", "s1"), "template", tmpl));
  CHECK(kind_of(inj) == "too_large");
  auto small = c.call("inject_state", with(sref_params("app", "s1"), "template", "[{app:a}]"));
  REQUIRE(ok(small));
  CHECK((*small)["result"].get<std::string>().size() == half_mib.size() + 2);

  // The probe's list_sessions: 1 MiB of app: state in each of 201 listed
  // sessions would be 201 MiB; a page stops at the limit, with a token.
  auto page = c.call("list_sessions", json{{"app_name", "app"}, {"page_size", 1000}});
  REQUIRE(ok(page));
  auto n = (*page)["result"]["sessions"].size();
  CHECK(n >= 1);
  CHECK(n <= 4);
  CHECK((*page)["result"]["next_page_token"].is_string());
  CHECK((*page)["result"].dump().size() <= limit);
  // The compact form carries the app's state once: every session in one page.
  auto once = c.call("list_sessions",
                     json{{"app_name", "app"}, {"page_size", 1000}, {"shared_state", "once"}});
  REQUIRE(ok(once));
  CHECK((*once)["result"]["sessions"].size() == 201);
  CHECK((*once)["result"]["next_page_token"].is_null());
  CHECK((*once)["result"]["app_state"]["app:a"] == half_mib);

  // A session whose events pass the limit: too_large, and the last few read.
  auto whole = c.call("get_session", sref_params("app", "long"));
  CHECK(kind_of(whole) == "too_large");
  auto recent = c.call("get_session", with(sref_params("app", "long"), "num_recent_events", 2));
  REQUIRE(ok(recent));
  CHECK((*recent)["result"]["events"].size() == 2);
  CHECK((*recent)["result"]["version"] == 40);

  // The probe's 15 MiB malformed line (raw: no client sends one): its error
  // quotes a short prefix.
  raw_socket raw(srv.port());
  REQUIRE(raw.send(std::string(15u << 20, '{') + "\n"));
  auto bad = raw.next_raw(30s * slowdown);
  REQUIRE(bad);
  CHECK(bad->size() <= 2048);
  CHECK(kind_of(parse_json(*bad, 16).value()) != "");

  // Still serving, and the peak grew by a bounded amount: a few answers of at
  // most 4 MiB and a 15 MiB line, not the 100-200 MB the answers would be.
  REQUIRE(ok(raw.call("ping")));
  REQUIRE(ok(c.call("ping")));
  const long grown_kib = srv.status("VmHWM") - base_hwm;
  MESSAGE("serve's peak RSS grew by ", grown_kib / 1024, " MiB over the probe's requests");
  if (!sanitized_build)
    CHECK(grown_kib < 96 * 1024);
}
