// SPDX-License-Identifier: Apache-2.0
// Rows lost from a real LMDB store (issue 44): a row that LMDB can no longer
// reach has no checksum to fail, so a read that gathered fewer rows than the
// session's record names must say data_corrupt instead of answering a
// shorter success; a leaf page whose entry count was damaged is found by
// the page's own layout; verify agrees with every reader.
#include <doctest/doctest.h>

#include <lmdb.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "store/change_log.hpp"
#include "store/exchange.hpp"
#include "store/keys.hpp"
#include "store/kv.hpp"
#include "store/lmdb_handle.hpp"
#include "store/reads.hpp"
#include "store/verify.hpp"
#include "support/lost_rows.hpp"
#include "support/test_support.hpp"

using namespace agentstate;
using namespace agentstate::store;

namespace {

const session_ref lossy = test::sref("app", "u", "s1");
const session_ref intact = test::sref("app", "u", "s2");

// Two sessions of 5 events each (two invocations), state in every scope.
void fill(const std::string& dir) {
  auto e = test::open_store_dir(dir);
  for (auto& ref : {lossy, intact}) {
    MUST(e->create_session(test::create_req(ref, json{{"k0", "v"}, {"user:u0", 1}})));
    for (int i = 0; i < 5; ++i) {
      auto ev =
        test::make_event(json{{"n", i}, {"app:a", i}}, ref.session_id + "-e" + std::to_string(i));
      ev.invocation_id = i < 3 ? "inv-1" : "inv-2";
      test::append_ok(*e, ref, ev);
    }
  }
  MUST(e->close());
}

std::string event_row(const session_ref& ref, std::uint64_t v) {
  return event_key(session_key(ref.app_name, ref.user_id, ref.session_id), v);
}

bool names(const error& e, const session_ref& ref) {
  return e.message.find(ref.app_name + "/" + ref.user_id + "/" + ref.session_id)
    != std::string::npos;
}

get_request recent(const session_ref& ref, std::int64_t n) {
  return test::get_req(ref, n);
}

std::uint64_t verify_faults(const std::string& dir) {
  auto kv = open_lmdb_kv_readonly(dir);
  auto txn = kv->begin_read();
  return verify_store(*txn).faults;
}

} // namespace

TEST_CASE("get_session with a lost event row is data_corrupt, not a shorter success") {
  test::temp_dir dir;
  fill(dir.str());
  std::string before_intact, before_recent2;
  {
    auto e = test::open_store_dir(dir.str());
    before_intact = MUST(e->get_session_json(test::get_req(intact)));
    before_recent2 = MUST(e->get_session_json(recent(lossy, 2)));
    MUST(e->close());
  }
  test::lose_row(dir.str(), table::events, event_row(lossy, 3));
  auto e = test::open_store_dir(dir.str());
  for (auto req : {test::get_req(lossy), recent(lossy, 3), recent(lossy, 10)}) {
    CAPTURE(req.num_recent_events.value_or(-1));
    auto text = e->get_session_json(req);
    REQUIRE(!text.ok());
    CHECK(text.code() == errc::data_corrupt);
    CHECK(names(text.err(), lossy));
    CHECK(text.err().message.find("v3") != std::string::npos);
    auto typed = e->get_session(req);
    REQUIRE(!typed.ok());
    CHECK(typed.code() == errc::data_corrupt);
  }
  // The newest two events do not reach the lost row: the answer is the
  // undamaged one.
  CHECK(MUST(e->get_session_json(recent(lossy, 2))) == before_recent2);
  // As-of reads and rewound reads replay the lost version.
  auto as_of = test::get_req(lossy);
  as_of.as_of_version = 4;
  CHECK(e->get_session_json(as_of).code() == errc::data_corrupt);
  auto rewound = test::get_req(lossy);
  rewound.apply_rewinds = true;
  CHECK(e->get_session_json(rewound).code() == errc::data_corrupt);
  // Other sessions are served as before.
  CHECK(MUST(e->get_session_json(test::get_req(intact))) == before_intact);
  MUST(e->close());
  CHECK(verify_faults(dir.str()) > 0);
}

TEST_CASE("get_session with its newest event row lost is data_corrupt, not the version before") {
  test::temp_dir dir;
  fill(dir.str());
  test::lose_row(dir.str(), table::events, event_row(lossy, 5));
  auto e = test::open_store_dir(dir.str());
  for (auto req : {test::get_req(lossy), recent(lossy, 1)}) {
    auto r = e->get_session_json(req);
    REQUIRE(!r.ok());
    CHECK(r.code() == errc::data_corrupt);
    CHECK(names(r.err(), lossy));
  }
  MUST(e->close());
}

TEST_CASE("list_invocations with a lost event row is data_corrupt, not an invocation short") {
  test::temp_dir dir;
  fill(dir.str());
  test::lose_row(dir.str(), table::events, event_row(lossy, 4));
  auto e = test::open_store_dir(dir.str());
  auto r = e->list_invocations(lossy);
  REQUIRE(!r.ok());
  CHECK(r.code() == errc::data_corrupt);
  CHECK(names(r.err(), lossy));
  CHECK(MUST(e->list_invocations(intact)).size() == 2);
  MUST(e->close());
}

TEST_CASE("export with a lost event row leaves the session out and says so, not 0 with it short") {
  test::temp_dir dir;
  fill(dir.str());
  test::lose_row(dir.str(), table::events, event_row(lossy, 1));
  auto kv = open_lmdb_kv_readonly(dir.str());
  auto txn = kv->begin_read();
  std::string out;
  std::vector<error> reported;
  auto n = export_store(
    *txn, {}, [&](const std::string& line) { out += line + "\n"; },
    [&](const error& err) { reported.push_back(err); });
  REQUIRE(n.ok());
  REQUIRE(reported.size() == 1);
  CHECK(reported[0].code == errc::data_corrupt);
  CHECK(names(reported[0], lossy));
  CHECK(out.find("\"s2\"") != std::string::npos);
  CHECK(out.find("\"s1\"") == std::string::npos);
  CHECK(verify_store(*txn).faults > 0);
}

TEST_CASE("a leaf page that lost its last entry is data_corrupt for every read of it, not a row "
          "short") {
  test::temp_dir dir;
  fill(dir.str());
  std::string before;
  {
    auto e = test::open_store_dir(dir.str());
    before = MUST(e->get_session_json(test::get_req(lossy)));
    MUST(e->close());
  }
  // The leaf page holding the session's state row 'k0', found through
  // LMDB itself (the page the value lies in), then its entry count lowered
  // by one: LMDB's own walk would skip the page's last row.
  std::uint64_t page = 0;
  {
    MDB_env* env = nullptr;
    REQUIRE(::mdb_env_create(&env) == 0);
    REQUIRE(::mdb_env_set_maxdbs(env, 16) == 0);
    REQUIRE(::mdb_env_open(env, dir.str().c_str(), MDB_RDONLY | MDB_NOTLS, 0644) == 0);
    MDB_txn* txn = nullptr;
    REQUIRE(::mdb_txn_begin(env, nullptr, MDB_RDONLY, &txn) == 0);
    MDB_dbi rows;
    REQUIRE(::mdb_dbi_open(txn, "rows", 0, &rows) == 0);
    std::string key(1, static_cast<char>(table::session_state));
    key += sub_key(session_key("app", "u", "s1"), "k0");
    MDB_val k{key.size(), key.data()}, v;
    REQUIRE(::mdb_get(txn, rows, &k, &v) == 0);
    const char* base = lmdb_detail::find_mapping(dir.str() + "/data.mdb");
    REQUIRE(base != nullptr);
    page = static_cast<std::uint64_t>(static_cast<const char*>(v.mv_data) - base) / 4096;
    ::mdb_txn_abort(txn);
    ::mdb_env_close(env);
  }
  {
    int fd = ::open((dir.str() + "/data.mdb").c_str(), O_RDWR);
    REQUIRE(fd >= 0);
    std::uint16_t lower = 0;
    REQUIRE(::pread(fd, &lower, 2, static_cast<off_t>(page * 4096 + 12)) == 2);
    REQUIRE(lower > 18);
    lower = static_cast<std::uint16_t>(lower - 2);
    REQUIRE(::pwrite(fd, &lower, 2, static_cast<off_t>(page * 4096 + 12)) == 2);
    ::close(fd);
  }
  // The store is one leaf page of rows: the engine's own reads at open
  // reach it, so it refuses to open rather than serve a row short.
  options o;
  o.dir = dir.str();
  auto e = engine::open(o);
  INFO(test::describe(e));
  CHECK(e.code() == errc::data_corrupt);
  // A read-only snapshot's session read says so too.
  auto kv = open_lmdb_kv_readonly(dir.str());
  auto txn = kv->begin_read();
  auto r = read_session(*txn, test::get_req(lossy), std::size_t{1} << 30, {});
  INFO(test::describe(r));
  CHECK(r.code() == errc::data_corrupt);
  CHECK(verify_store(*txn).faults > 0);
}

TEST_CASE("a store whose rows table lost its name: the engine silently starts it empty") {
  test::temp_dir dir;
  fill(dir.str());
  // The main database names each table; damage every copy of the name
  // `rows` in the file (the live main page and any stale copy of it).
  auto path = dir.str() + "/data.mdb";
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    bytes = s.str();
  }
  std::size_t renamed = 0;
  for (auto at = bytes.find("rows"); at != std::string::npos; at = bytes.find("rows", at + 4)) {
    bytes[at + 3] = 'z';
    ++renamed;
  }
  REQUIRE(renamed > 0);
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << bytes;
  }
  options o;
  o.dir = dir.str();
  auto e = engine::open(o);
  INFO(test::describe(e));
  REQUIRE(!e.ok());
  CHECK(e.code() == errc::data_corrupt);
  CHECK(e.err().message.find("rows") != std::string::npos);
  // Nothing was created in its place: the read-only tools refuse it too.
  try {
    open_lmdb_kv_readonly(dir.str());
    FAIL("a store without its rows table opened");
  } catch (const kv_failure& f) {
    CHECK(f.code == errc::data_corrupt);
  }
}

// Regression (the no-lie oracle, seed 243): a flipped byte in the change
// log's last key gave every read the cursor of a sequence that was never
// written (e.g. 343597383932), so a watch resumed from it would skip changes.
TEST_CASE("a change row whose key was damaged is data_corrupt, not the cursor of a sequence "
          "never written") {
  test::temp_dir dir;
  fill(dir.str());
  std::uint64_t last = 0;
  std::string last_value;
  const auto moved = [&] { return change_key(last + (std::uint64_t{0x50} << 32)); };
  {
    auto kv = open_lmdb_kv(dir.str(), false, std::uint64_t{1} << 30);
    auto head = MUST(read_log_head(*kv));
    last = head.bounds.last;
    REQUIRE(last > 1);
    // The last row, under a key one of whose bytes changed: its seal (which
    // covers the key) no longer matches.
    auto w = kv->begin_write();
    last_value = std::string(w->get(table::changes, change_key(last)).value());
    REQUIRE(w->del(table::changes, change_key(last)));
    w->put(table::changes, moved(), last_value);
    w->commit();
    auto damaged_head = read_log_head(*kv);
    REQUIRE(!damaged_head.ok());
    CHECK(damaged_head.code() == errc::data_corrupt);
  }
  // The first row likewise (the log's other end), with the last one put back.
  {
    auto kv = open_lmdb_kv(dir.str(), false, std::uint64_t{1} << 30);
    auto w = kv->begin_write();
    REQUIRE(w->del(table::changes, moved()));
    w->put(table::changes, change_key(last), last_value);
    std::uint64_t first = 0;
    w->scan(table::changes, {}, {}, [&](std::string_view k, std::string_view) {
      first = read_be64(k);
      return false;
    });
    REQUIRE(first == 1);
    auto value = std::string(w->get(table::changes, change_key(first)).value());
    REQUIRE(w->del(table::changes, change_key(first)));
    // Still before every other row, so the scan lands on it first.
    w->put(table::changes, std::string(7, '\0') + '\0', value);
    w->commit();
    auto txn = kv->begin_read();
    auto bounds = read_log_bounds(*txn);
    REQUIRE(!bounds.ok());
    CHECK(bounds.code() == errc::data_corrupt);
  }
}
