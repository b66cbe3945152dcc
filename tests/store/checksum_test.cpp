// SPDX-License-Identifier: Apache-2.0
// Checksums (store format 4): every value of a real LMDB store carries a
// CRC-32C over its key and body, checked on every read. A byte flipped in
// any kind of row makes every read of that session data_corrupt naming it
// (app/user/id and the row), never a value; other sessions are still
// served; nothing else changes. A format-3 store written by the code before
// checksums (tests/fixtures/format3) is read as it is by the read-only
// tools and upgraded to the current format when the engine opens it, exporting the
// same bytes before and after.
#include <doctest/doctest.h>

#include <lmdb.h>

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "store/crc32c.hpp"
#include "store/exchange.hpp"
#include "store/format.hpp"
#include "store/keys.hpp"
#include "store/kv.hpp"
#include "store/records.hpp"
#include "store/verify.hpp"
#include "support/files.hpp"
#include "support/legacy_store.hpp"
#include "support/test_support.hpp"

using namespace agentstate;
using namespace agentstate::store;

namespace {

namespace fs = std::filesystem;

const session_ref target = test::sref("app", "u", "s1"); // the damaged session
const session_ref same_app = test::sref("app", "v", "s2"); // another user of its app
const session_ref other_app = test::sref("other", "u", "s1");

// Three sessions with events and state in every scope, written by the engine.
void fill(const std::string& dir) {
  auto e = test::open_store_dir(dir);
  for (auto& ref : {target, same_app, other_app}) {
    MUST(e->create_session(test::create_req(ref, json{{"k0", "v"}})));
    for (int i = 0; i < 3; ++i)
      test::append_ok(*e, ref,
                      test::make_event(json{{"n", i}, {"user:seen", i}, {"app:last", i}},
                                       ref.user_id + "-e" + std::to_string(i)));
  }
  MUST(e->close());
}

using rows_t = std::map<std::pair<int, std::string>, std::string>;

rows_t all_rows(kv_store& kv) {
  rows_t out;
  auto r = kv.begin_read();
  for (std::size_t t = 0; t < table_count; ++t)
    r->scan(static_cast<table>(t), {}, {}, [&](std::string_view k, std::string_view v) {
      out[{static_cast<int>(t), std::string(k)}] = std::string(v);
      return true;
    });
  return out;
}

// The key of the target session's row of kind `t` (any one).
std::string target_key(kv_store& kv, table t) {
  auto skey = session_key(target.app_name, target.user_id, target.session_id);
  switch (t) {
    case table::sessions: return skey;
    case table::events: return event_key(skey, 2);
    case table::session_state: return sub_key(skey, "n");
    case table::user_state: return sub_key(user_scope_key("app", "u"), "seen");
    case table::app_state: return sub_key("app", "last");
    default: break;
  }
  std::string found;
  auto r = kv.begin_read();
  std::string prefix =
    t == table::by_user ? user_scope_key("app", "u") + '\0' : "app" + std::string(1, '\0');
  r->scan(t, prefix, {}, [&](std::string_view k, std::string_view) {
    if (k.find("s1") != std::string_view::npos) {
      found = std::string(k);
      return false;
    }
    return true;
  });
  REQUIRE(!found.empty());
  return found;
}

bool names_target(const error& e) {
  return e.message.find("app/u/s1") != std::string::npos;
}

std::string export_text(const std::string& dir) {
  auto kv = open_lmdb_kv_readonly(dir);
  auto txn = kv->begin_read();
  std::string out;
  auto n = export_store(*txn, {}, [&](const std::string& line) { out += line + "\n"; });
  INFO(test::describe(n));
  REQUIRE(n.ok());
  return out;
}

} // namespace

TEST_CASE("crc32c: known values; the SSE4.2 and table paths agree") {
  CHECK(crc32c_extend(0, std::string_view("123456789")) == 0xe3069283u);
  CHECK(crc32c_extend(0, std::string_view("")) == 0u);
  CHECK(crc32c_extend_portable(0, "123456789", 9) == 0xe3069283u);
  std::string zeros(32, '\0');
  CHECK(crc32c_extend(0, zeros) == 0x8a9136aau); // RFC 3720 B.4
  std::mt19937 rng(7);
  std::string buf(4096, '\0');
  for (auto& c : buf)
    c = static_cast<char>(rng());
  for (std::size_t n : {1u, 7u, 8u, 9u, 63u, 64u, 65u, 1000u, 4096u}) {
    for (std::size_t off : {0u, 1u, 3u}) {
      if (off + n > buf.size())
        continue;
      auto a = crc32c_extend(0, buf.data() + off, n);
      CHECK(a == crc32c_extend_portable(0, buf.data() + off, n));
      // Extending in two parts gives the whole.
      auto half = n / 2;
      CHECK(
        crc32c_extend(crc32c_extend(0, buf.data() + off, half), buf.data() + off + half, n - half)
        == a);
    }
  }
  // Three at once equal each alone, whatever their lengths.
  for (std::size_t n0 : {0u, 5u, 24u, 200u, 1000u})
    for (std::size_t n1 : {0u, 8u, 31u, 200u})
      for (std::size_t n2 : {3u, 200u, 4000u}) {
        std::uint32_t crc[3] = {1, 2, 3};
        const void* p[3] = {buf.data(), buf.data() + 5, buf.data() + 77};
        const std::size_t n[3] = {n0, n1, n2};
        crc32c_extend3(crc, p, n);
        for (int i = 0; i < 3; ++i)
          CHECK(crc[i] == crc32c_extend_portable(static_cast<std::uint32_t>(i + 1), p[i], n[i]));
      }
  MESSAGE("crc32c uses SSE4.2: ", crc32c_hardware());
}

TEST_CASE("checksums: open_rows finds the first damaged row as open_row does") {
  std::mt19937 rng(11);
  for (int round = 0; round < 50; ++round) {
    std::size_t n = rng() % 12;
    std::vector<std::string> keys, values;
    for (std::size_t i = 0; i < n; ++i) {
      keys.push_back(event_key(session_key("a", "u", "s"), i + 1));
      values.push_back(encode_event_row(keys.back(), 1.0 * i, std::string(rng() % 300, 'x')));
      if (rng() % 8 == 0)
        values.back()[rng() % values.back().size()] ^= 0x04;
    }
    std::vector<std::string_view> kv(keys.begin(), keys.end()), vv(values.begin(), values.end());
    std::size_t want = n;
    for (std::size_t i = 0; i < n && want == n; ++i)
      if (!open_row(table::events, kv[i], vv[i], false))
        want = i;
    std::vector<std::string_view> bodies(n);
    CHECK(open_rows(table::events, n, kv.data(), vv.data(), false, bodies.data()) == want);
    for (std::size_t i = 0; i < want; ++i)
      CHECK(bodies[i] == *open_row(table::events, kv[i], vv[i], false));
  }
}

TEST_CASE("checksums: a byte flipped in each kind of row is data_corrupt naming the session; "
          "other sessions are served; nothing else changes") {
  for (auto t : {table::sessions, table::events, table::session_state, table::user_state,
                 table::app_state, table::by_update, table::by_user}) {
    CAPTURE(table_name(t));
    test::temp_dir dir;
    fill(dir.str());
    json same_before, other_before;
    {
      auto e = test::open_store_dir(dir.str());
      same_before = json::parse(MUST(e->get_session_json(test::get_req(same_app))));
      other_before = json::parse(MUST(e->get_session_json(test::get_req(other_app))));
      MUST(e->close());
    }
    rows_t expected;
    {
      auto kv = open_lmdb_kv(dir.str(), false, std::uint64_t{1} << 30);
      auto key = target_key(*kv, t);
      expected = all_rows(*kv);
      auto& value = expected.at({static_cast<int>(t), key});
      REQUIRE(value.size() >= seal_bytes);
      // A bit of the body (the checksum itself for an index entry's empty body).
      value[value.size() > seal_bytes ? value.size() - 2 : 2] ^= 0x10;
      auto w = kv->begin_write();
      w->put(t, key, value);
      w->commit();
    }
    {
      auto e = test::open_store_dir(dir.str());
      // A get reads the record, the state rows and the events, not the
      // list indexes.
      const bool index = t == table::by_update || t == table::by_user;
      auto got = e->get_session(test::get_req(target));
      CHECK(got.code() == (index ? errc::ok : errc::data_corrupt));
      CHECK((index || names_target(got.err())));
      auto text = e->get_session_json(test::get_req(target));
      CHECK(text.code() == (index ? errc::ok : errc::data_corrupt));
      CHECK((index || names_target(text.err())));
      if (t != table::user_state && t != table::app_state)
        CHECK(json::parse(MUST(e->get_session_json(test::get_req(same_app)))) == same_before);
      if (t != table::app_state)
        CHECK(json::parse(MUST(e->get_session_json(test::get_req(same_app)))).is_object());
      CHECK(json::parse(MUST(e->get_session_json(test::get_req(other_app)))) == other_before);
      // Listing reads records, own and shared state and the list indexes.
      bool listed = t != table::events;
      auto lreq = test::list_req("app");
      if (t == table::by_user)
        lreq.user_id = "u";
      auto page = e->list_sessions(lreq);
      if (listed) {
        CHECK(page.code() == errc::data_corrupt);
        if (t != table::app_state)
          CHECK(names_target(page.err()));
      } else {
        CHECK(page.ok());
      }
      CHECK(e->list_sessions(test::list_req("other")).ok());
      // An append reads the record, and the session's event ids when the
      // event comes with an id of the client's.
      if (t == table::sessions || t == table::events) {
        auto app =
          e->append_event(test::append_req(target, test::make_event(json{{"x", 1}}, "client-id")));
        CHECK(app.code() == errc::data_corrupt);
        CHECK(names_target(app.err()));
      }
      CHECK(test::append_ok(*e, other_app, test::make_event(json{{"x", 1}})).version == 4);
      MUST(e->close());
    }
    {
      auto kv = open_lmdb_kv_readonly(dir.str());
      auto txn = kv->begin_read();
      auto report = verify_store(*txn);
      CHECK(report.faults >= 1);
      bool named = false;
      for (auto& m : report.messages)
        named = named || m.find(row_name(t, target_key(*kv, t))) != std::string::npos;
      INFO((report.messages.empty() ? std::string() : report.messages.front()));
      CHECK(named);
    }
    // Nothing changed but the flipped row and the other app's one append
    // (with its change log row).
    auto kv = open_lmdb_kv(dir.str(), false, std::uint64_t{1} << 30);
    auto after = all_rows(*kv);
    std::size_t differ = 0;
    for (auto& [k, v] : expected) {
      auto it = after.find(k);
      if (it == after.end() || it->second != v) {
        CHECK(k.second.rfind("other", 0) == 0);
        ++differ;
      }
    }
    for (auto& [k, v] : after)
      if (!expected.count(k)) // the append's rows, and its change log row
        CHECK((k.second.rfind("other", 0) == 0 || k.first == static_cast<int>(table::changes)));
    CHECK(differ > 0); // the other app's record, state and indexes moved
  }
}

TEST_CASE("checksums: a damaged record key hides the record, and the session reads as "
          "data_corrupt, not as missing") {
  test::temp_dir dir;
  fill(dir.str());
  {
    auto kv = open_lmdb_kv(dir.str(), false, std::uint64_t{1} << 30);
    auto skey = session_key("app", "u", "s1");
    auto w = kv->begin_write();
    std::string value(*w->get(table::sessions, skey));
    w->del(table::sessions, skey);
    auto bent = skey;
    bent.back() ^= 0x01; // "s0"
    w->put(table::sessions, bent, value);
    w->commit();
  }
  auto e = test::open_store_dir(dir.str());
  auto got = e->get_session(test::get_req(target));
  CHECK(got.code() == errc::data_corrupt);
  CHECK(names_target(got.err()));
  CHECK(e->get_session(test::get_req(test::sref("app", "u", "s0"))).code() == errc::data_corrupt);
  CHECK(e->list_sessions(test::list_req("app")).code() == errc::data_corrupt);
  CHECK(test::get_existing(*e, other_app).version == 3);
  MUST(e->close());
}

TEST_CASE("checksums: export and dump leave a damaged session out, report it and go on") {
  test::temp_dir dir;
  fill(dir.str());
  {
    auto kv = open_lmdb_kv(dir.str(), false, std::uint64_t{1} << 30);
    auto key = event_key(session_key("app", "u", "s1"), 1);
    auto w = kv->begin_write();
    std::string value(*w->get(table::events, key));
    value[seal_bytes + 10] = '\xff'; // invalid UTF-8 inside the event's text
    w->put(table::events, key, value);
    w->commit();
  }
  auto kv = open_lmdb_kv_readonly(dir.str());
  auto txn = kv->begin_read();
  std::vector<error> reported;
  std::string out;
  auto n = export_store(
    *txn, {}, [&](const std::string& line) { out += line + "\n"; },
    [&](const error& e) { reported.push_back(e); });
  REQUIRE(n.ok());
  REQUIRE(reported.size() == 1);
  CHECK(reported[0].code == errc::data_corrupt);
  CHECK(reported[0].message.find("session 'app/u/s1' event v1") != std::string::npos);
  CHECK(out.find("\"id\":\"s2\"") != std::string::npos);
  CHECK(out.find("\"app_name\":\"other\"") != std::string::npos);
  // None of the damaged session's lines; the other sessions' all there.
  std::istringstream lines(out);
  std::map<std::string, int> per_session;
  for (std::string line; std::getline(lines, line);) {
    auto j = json::parse(line);
    if (j["type"] == "session" || j["type"] == "event")
      ++per_session[j["app_name"].get<std::string>() + "/" + j["user_id"].get<std::string>() + "/"
                    + j.value("session_id", j.value("id", std::string()))];
  }
  CHECK(per_session.count("app/u/s1") == 0);
  CHECK(per_session["app/v/s2"] == 4);
  CHECK(per_session["other/u/s1"] == 4);
  // Without a reporter the export stops at the damage.
  CHECK(export_store(*txn, {}, [](const std::string&) {}).code() == errc::data_corrupt);
}

TEST_CASE("checksums: a format-3 store written by the code before checksums is read as it "
          "is, then upgraded to the current format with every session's export byte-identical") {
  test::temp_dir dir;
  fs::path fixture = AGENTSTATE_FORMAT3_FIXTURE;
  fs::copy_file(fixture / "data.mdb", fs::path(dir.str()) / "data.mdb");
  auto want = test::file_text(fixture / "export.jsonl");
  REQUIRE(!want.empty());
  {
    auto kv = open_lmdb_kv_readonly(dir.str());
    auto txn = kv->begin_read();
    CHECK(txn->legacy_values());
    auto report = verify_store(*txn);
    INFO((report.messages.empty() ? std::string() : report.messages.front()));
    CHECK(report.ok());
    CHECK(report.events == 13);
  }
  CHECK(export_text(dir.str()) == want);
  std::string before_get;
  {
    auto e = test::open_store_dir(dir.str());
    before_get = MUST(e->get_session_json(test::get_req(test::sref("app", "ü2", "sé3"))));
    CHECK(json::parse(before_get)["events"].size() == 3);
    MUST(e->close());
  }
  auto kv = open_lmdb_kv_readonly(dir.str());
  {
    auto txn = kv->begin_read();
    CHECK(txn->get(table::meta, "format").value() == std::to_string(store::format_version));
    CHECK_FALSE(txn->legacy_values());
    auto report = verify_store(*txn);
    INFO((report.messages.empty() ? std::string() : report.messages.front()));
    CHECK(report.ok());
    // Every value is sealed.
    for (std::size_t t = 1; t < table_count; ++t)
      txn->scan(static_cast<table>(t), {}, {}, [&](std::string_view k, std::string_view v) {
        CHECK(open_row(static_cast<table>(t), k, v, false).has_value());
        return true;
      });
  }
  CHECK(export_text(dir.str()) == want);
  {
    auto e = test::open_store_dir(dir.str());
    CHECK(MUST(e->get_session_json(test::get_req(test::sref("app", "ü2", "sé3")))) == before_get);
    MUST(e->close());
  }
}

TEST_CASE("checksums: a format-3 row that does not decode is sealed as damaged by the upgrade") {
  test::temp_dir dir;
  fill(dir.str());
  {
    MDB_env* env = nullptr;
    REQUIRE(mdb_env_create(&env) == 0);
    REQUIRE(mdb_env_set_maxdbs(env, 16) == 0);
    REQUIRE(mdb_env_set_mapsize(env, std::size_t{1} << 30) == 0);
    REQUIRE(mdb_env_open(env, dir.str().c_str(), MDB_NOTLS, 0644) == 0);
    MDB_txn* txn = nullptr;
    REQUIRE(mdb_txn_begin(env, nullptr, 0, &txn) == 0);
    test::drop_tallies(txn);
    test::unseal_store(txn);
    // The target's state row "n" as format 3 would hold a damaged one.
    MDB_dbi rows;
    REQUIRE(mdb_dbi_open(txn, "rows", 0, &rows) == 0);
    std::string k = std::string(1, static_cast<char>(table::session_state))
      + sub_key(session_key("app", "u", "s1"), "n");
    std::string v = "{\"a\":\"\xff\"}";
    MDB_val mk{k.size(), k.data()}, mv{v.size(), v.data()};
    REQUIRE(mdb_put(txn, rows, &mk, &mv, 0) == 0);
    REQUIRE(mdb_txn_commit(txn) == 0);
    mdb_env_close(env);
  }
  {
    auto kv = open_lmdb_kv_readonly(dir.str());
    auto txn = kv->begin_read();
    CHECK(txn->legacy_values());
    auto report = verify_store(*txn);
    CHECK(report.faults == 1);
  }
  auto e = test::open_store_dir(dir.str());
  auto got = e->get_session(test::get_req(target));
  CHECK(got.code() == errc::data_corrupt);
  CHECK(names_target(got.err()));
  CHECK(test::get_existing(*e, same_app).version == 3);
  MUST(e->close());
  auto kv = open_lmdb_kv_readonly(dir.str());
  auto txn = kv->begin_read();
  auto report = verify_store(*txn);
  CHECK(report.faults == 1);
  REQUIRE(!report.messages.empty());
  CHECK(report.messages[0].find("session 'app/u/s1' state row 'n' is damaged")
        != std::string::npos);
}

TEST_CASE("checksums: the tools name damaged rows and go on with the other sessions") {
  test::temp_dir dir;
  fill(dir.str());
  {
    auto kv = open_lmdb_kv(dir.str(), false, std::uint64_t{1} << 30);
    auto skey = session_key("app", "u", "s1");
    auto key = event_key(skey, 1);
    auto w = kv->begin_write();
    std::string value(*w->get(table::events, key));
    value.back() ^= 0x01;
    w->put(table::events, key, value);
    std::string rec(*w->get(table::sessions, skey));
    rec.back() ^= 0x01;
    w->put(table::sessions, skey, rec);
    w->commit();
  }
  auto run = [&](const std::string& args, std::string& err) {
    auto err_path = dir.str() + "/stderr.txt";
    std::string cmd = std::string(AGENTSTATE_BIN) + " " + args + " 2> " + err_path;
    std::string out;
    FILE* p = ::popen(cmd.c_str(), "r");
    REQUIRE(p != nullptr);
    char buf[4096];
    while (auto n = std::fread(buf, 1, sizeof buf, p))
      out.append(buf, n);
    int status = ::pclose(p);
    err = test::file_text(err_path);
    return std::make_pair(WIFEXITED(status) ? WEXITSTATUS(status) : -1, out);
  };
  std::string err;
  auto [vcode, vout] = run("verify " + dir.str(), err);
  CHECK(vcode == 1);
  CHECK(vout.find("session 'app/u/s1' event v1 is damaged") != std::string::npos);
  CHECK(vout.find("session 'app/u/s1' record is damaged") != std::string::npos);
  auto [xcode, xout] = run("export " + dir.str(), err);
  CHECK(xcode == 1);
  CHECK(err.find("data_corrupt: session 'app/u/s1' record is damaged") != std::string::npos);
  CHECK(xout.find("\"id\":\"s2\"") != std::string::npos);
  auto [dcode, dout] = run("dump " + dir.str() + " --app other", err);
  CHECK(dcode == 0);
  CHECK(dout.find("\"app_name\":\"other\"") != std::string::npos);
  auto [icode, iout] = run("inspect " + dir.str() + " --json", err);
  CHECK(icode == 1);
  CHECK(err.find("data_corrupt: session 'app/u/s1' record is damaged") != std::string::npos);
  CHECK(json::parse(iout)["damaged_records"] == 1);
  CHECK(json::parse(iout)["sessions"] == 3);
  // State rows are counted without the scopes' tallies (k0 and n of three
  // sessions, user:seen of three users, app:last of two apps), which are
  // counted apart, as are the apps' and users' session counts.
  auto inspected = json::parse(iout);
  CHECK(inspected["session_state_rows"] == 6);
  CHECK(inspected["user_state_rows"] == 3);
  CHECK(inspected["app_state_rows"] == 2);
  CHECK(inspected["state_tallies"] == 8);
  CHECK(inspected["session_counts"] == 5);
}

TEST_CASE("checksums: LMDB readers check every checksum; the in-memory store's readers check "
          "tags and sizes only") {
  test::temp_dir dir;
  auto lmdb = open_lmdb_kv(dir.str(), false, std::uint64_t{1} << 30);
  auto memory = make_memory_kv();
  CHECK(lmdb->begin_read()->checksums_needed());
  CHECK_FALSE(memory->begin_read()->checksums_needed());
  CHECK_FALSE(memory->begin_write()->checksums_needed());
  // Rows as select_event_rows opens them: a good one, one whose checksum is
  // wrong, one whose tag is wrong.
  std::string good = encode_event_row("k", 1.5, R"({"id":"e1"})");
  std::string bad_sum = good;
  bad_sum[1] = static_cast<char>(bad_sum[1] ^ 1);
  std::string bad_tag = good;
  bad_tag[0] = 9;
  std::string_view keys[] = {"k", "k", "k"};
  for (bool checksums : {true, false}) {
    INFO("checksums: ", checksums);
    std::string_view values[] = {good, bad_sum, good}, bodies[3];
    CHECK(open_rows(table::events, 3, keys, values, false, bodies, checksums)
          == (checksums ? 1u : 3u));
    std::string_view tagged[] = {good, good, bad_tag};
    CHECK(open_rows(table::events, 3, keys, tagged, false, bodies, checksums) == 2);
  }
}

TEST_CASE("checksums: a row sealed in place equals the row seal copies, and opens") {
  for (int len : {0, 1, 7, 300, 70000}) {
    const auto n = static_cast<std::size_t>(len);
    std::string body(n, 'b');
    for (std::size_t i = 0; i < n; ++i)
      body[i] = static_cast<char>(i * 31);
    std::string key = std::string("k\0", 2) + std::to_string(n);
    std::string row(seal_bytes, 'x');
    row += body;
    seal_in_place(row, key);
    CHECK(row == seal(key, body));
    auto opened = open_row(table::changes, key, row, false);
    REQUIRE(opened);
    CHECK(*opened == body);
    row.back() ^= 1; // the body's last byte, or the checksum's
    CHECK_FALSE(open_row(table::changes, key, row, false));
  }
}
