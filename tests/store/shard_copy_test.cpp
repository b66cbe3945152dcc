// SPDX-License-Identifier: Apache-2.0
// store/shard_copy.hpp: a range of the shard hash copied between two real
// LMDB stores, each written and read back by a real engine. The copy leaves
// the target's range exactly as the source holds it and nothing else
// changed, however it is cut into chunks; a damaged chunk is refused and
// leaves the target as it was.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <tuple>

#include "model/shard.hpp"
#include "store/keys.hpp"
#include "store/kv.hpp"
#include "store/scope_delete.hpp"
#include "store/shard_copy.hpp"
#include "store/verify.hpp"
#include "support/test_support.hpp"

using namespace agentstate;
using store::table;

namespace {

constexpr std::uint32_t shard_count = 4;
const std::vector<std::string> apps = {"chat", "mail", "web", "docs", "gone"};

std::string user_name(int u) {
  return "u" + std::to_string(u);
}

// The source: five apps of twelve users each with sessions, events, user:
// and app: state; sessions that expire, forks, invocations, app writes kept
// at their home; a deleted session, a user deleted outright, a user whose
// sessions are all deleted (its user: state stays), an app deleted.
void build_source(const std::string& dir) {
  auto e = test::open_store_dir(dir);
  for (auto& app : apps)
    for (int u = 0; u < 12; ++u) {
      const auto user = user_name(u);
      for (int s = 0; s < 2; ++s) {
        auto ref = test::sref(app, user, "s" + std::to_string(s));
        auto req = test::create_req(ref, json{{"own", s}, {"user:seen", u}});
        if (s == 1 && u % 3 == 0)
          req.ttl_s = 36000; // expires, ten hours on
        MUST(e->create_session(req));
        for (int i = 0; i < 3; ++i)
          test::append_ok(
            *e, ref,
            test::make_event(json{{"n", i}, {"user:last", app + user}, {"app:count", u * 10 + i}},
                             "e" + std::to_string(i)));
      }
      MUST(e->begin_invocation(test::sref(app, user, "s0"), "inv-" + user));
      fork_request f;
      f.ref = test::sref(app, user, "s0");
      f.at_version = 2;
      f.new_session_id = "fork";
      MUST(e->fork_session(f));
    }
  for (auto& app : apps) {
    app_write_request w;
    w.app_name = app;
    w.write_id = "w-" + app;
    w.state_delta = json{{"app:home", app}};
    MUST(e->apply_app_write(w));
  }
  MUST(e->delete_session(test::sref("chat", "u1", "s1")));
  MUST(e->delete_user("mail", "u2"));
  for (auto* id : {"s0", "s1", "fork"}) // u4 keeps its user: state, no session
    MUST(e->delete_session(test::sref("web", "u4", id)));
  MUST(e->delete_app("gone"));
  MUST(e->flush());
  MUST(e->close());
}

// A target that already holds data: sessions of the same names with other
// contents and sessions the source lacks (in and out of every range), user:
// and app: state of their own.
void build_target(const std::string& dir) {
  auto e = test::open_store_dir(dir);
  for (auto* app : {"chat", "docs", "other"})
    for (int u = 0; u < 14; u += 3) {
      const auto user = user_name(u);
      for (auto* id : {"s0", "stale"}) {
        auto ref = test::sref(app, user, id);
        MUST(e->create_session(test::create_req(ref, json{{"target", id}})));
        test::append_ok(*e, ref,
                        test::make_event(json{{"user:target", 1}, {"app:target", 2}}, "t1"));
      }
    }
  MUST(e->close());
}

// Makes `dir` a copy of the closed store in `from` (the same bytes, so the
// same rows).
void clone_store(const std::string& from, const std::string& dir) {
  std::filesystem::copy_file(std::filesystem::path(from) / "data.mdb",
                             std::filesystem::path(dir) / "data.mdb");
}

// What a reader of one store sees of (app, user): each session (its JSON,
// without app: keys, which come from the app's home, and without the cursor,
// a position in the store's own change feed), its listing, its user: state.
struct user_view {
  std::vector<std::string> listed;
  std::map<std::string, json> sessions;
  json user_state;
  bool operator==(const user_view& o) const {
    return listed == o.listed && sessions == o.sessions && user_state == o.user_state;
  }
};

user_view view_of(engine& e, const std::string& app, const std::string& user) {
  user_view v;
  for (auto& m : test::list_all(e, app, user, 3)) {
    v.listed.push_back(m.id);
    auto text = MUST(e.get_session_json(test::get_req(test::sref(app, user, m.id))));
    auto j = json::parse(text);
    j.erase("cursor"); // the store's own change feed position
    if (j.contains("state"))
      for (auto it = j["state"].begin(); it != j["state"].end();)
        it = it.key().rfind("app:", 0) == 0 ? j["state"].erase(it) : std::next(it);
    v.sessions[m.id] = std::move(j);
  }
  v.user_state = test::user_state(e, app, user);
  return v;
}

struct store_view {
  std::map<std::pair<std::string, std::string>, user_view> users;
  std::map<std::string, json> app_states;
};

std::vector<std::string> all_apps() {
  auto out = apps;
  out.push_back("other");
  return out;
}

store_view view_of(const std::string& dir) {
  store_view v;
  auto e = test::open_store_dir(dir);
  for (auto& app : all_apps()) {
    for (int u = 0; u < 14; ++u)
      v.users[{app, user_name(u)}] = view_of(*e, app, user_name(u));
    v.app_states[app] = test::app_state(*e, app);
  }
  MUST(e->close());
  return v;
}

// Every row of every table but meta and changes (each store's own).
using rows_t = std::map<std::tuple<int, std::string>, std::string>;
rows_t all_rows(const std::string& dir) {
  rows_t out;
  auto kv = store::open_lmdb_kv_readonly(dir);
  auto r = kv->begin_read();
  for (std::size_t t = 0; t < store::table_count; ++t) {
    if (static_cast<table>(t) == table::meta || static_cast<table>(t) == table::changes)
      continue;
    r->scan(static_cast<table>(t), {}, {}, [&](std::string_view k, std::string_view v) {
      out[{static_cast<int>(t), std::string(k)}] = std::string(v);
      return true;
    });
  }
  return out;
}

void verify_clean(const std::string& dir) {
  auto kv = store::open_lmdb_kv_readonly(dir);
  auto txn = kv->begin_read();
  auto report = store::verify_store(*txn);
  INFO((report.messages.empty() ? std::string() : report.messages.front()));
  CHECK(report.ok());
}

std::unique_ptr<store::kv_store> open_kv(const std::string& dir) {
  return store::open_lmdb_kv(dir, false, std::uint64_t{1} << 30);
}

store::shard_copy_stats copy(const std::string& from, const std::string& to,
                             model::hash_range range, store::shard_limits limits = {}) {
  auto a = open_kv(from);
  auto b = open_kv(to);
  auto r = store::copy_shard(*a, *b, range, limits);
  INFO(test::describe(r));
  REQUIRE(r.ok());
  return *r;
}

// After copying `range` from `source` into a target that held `before`, the
// target (`after`) reads as the source inside the range and as before
// outside it.
void check_copied(const store_view& source, const store_view& before, const store_view& after,
                  model::hash_range range) {
  std::size_t in = 0, sessions = 0;
  for (auto& [key, v] : after.users) {
    CAPTURE(key.first);
    CAPTURE(key.second);
    if (range.contains(model::user_hash(key.first, key.second))) {
      ++in;
      sessions += v.sessions.size();
      CHECK(v == source.users.at(key));
    } else {
      CHECK(v == before.users.at(key));
    }
  }
  for (auto& [app, state] : after.app_states) {
    CAPTURE(app);
    CHECK(state == (range.contains(model::app_hash(app)) ? source : before).app_states.at(app));
  }
  // The range held something to copy.
  CHECK(in > 0);
  CHECK(sessions > 0);
}

// A chunk of `range` of the store in `dir` that carries rows, and its bytes.
std::string some_chunk_bytes(const std::string& dir, model::hash_range range) {
  auto kv = open_kv(dir);
  auto reader = MUST(store::shard_reader::open(*kv, range));
  auto chunk = MUST(reader->next({}, {2, std::size_t{1} << 20}));
  REQUIRE(!chunk.spans.empty());
  REQUIRE(!chunk.spans.front().rows.empty());
  return store::encode_chunk(chunk);
}

} // namespace

TEST_CASE("shard copy: each shard's range copied to an empty store reads as the source") {
  test::temp_dir src;
  build_source(src.str());
  verify_clean(src.str());
  const auto source = view_of(src.str());
  const auto source_rows = all_rows(src.str());
  std::size_t copied_sessions = 0;
  for (std::uint32_t s = 0; s < shard_count; ++s) {
    CAPTURE(s);
    const auto range = model::shard_range(s, shard_count);
    test::temp_dir dst;
    { // an empty store of the current format
      auto e = test::open_store_dir(dst.str());
      MUST(e->close());
    }
    const auto before = view_of(dst.str());
    auto stats = copy(src.str(), dst.str(), range);
    copied_sessions += stats.sessions;
    verify_clean(dst.str());
    check_copied(source, before, view_of(dst.str()), range);
    // The source is as it was.
    CHECK(all_rows(src.str()) == source_rows);
  }
  // Every live session was copied to exactly one shard's store.
  std::size_t live = 0;
  for (auto& [key, v] : source.users)
    live += v.sessions.size();
  CHECK(copied_sessions == live);
}

TEST_CASE("shard copy: a target holding other and stale data in the range ends as the source "
          "there and unchanged elsewhere") {
  test::temp_dir src;
  build_source(src.str());
  const auto source = view_of(src.str());
  for (std::uint32_t s = 0; s < shard_count; ++s) {
    CAPTURE(s);
    const auto range = model::shard_range(s, shard_count);
    test::temp_dir dst;
    build_target(dst.str());
    const auto before = view_of(dst.str());
    copy(src.str(), dst.str(), range);
    verify_clean(dst.str());
    const auto after = view_of(dst.str());
    check_copied(source, before, after, range);
    // The target's own data outside the range is still there.
    std::size_t kept = 0;
    for (auto& [key, v] : after.users)
      if (!range.contains(model::user_hash(key.first, key.second)))
        kept += v.sessions.count("stale");
    CHECK(kept > 0);
    // A second copy of the same range changes nothing.
    const auto rows = all_rows(dst.str());
    copy(src.str(), dst.str(), range);
    CHECK(all_rows(dst.str()) == rows);
  }
}

TEST_CASE("shard copy: a copy in chunks of one session or scope equals a one-shot copy") {
  test::temp_dir src, target;
  build_source(src.str());
  build_target(target.str());
  for (std::uint32_t s = 0; s < shard_count; ++s) {
    CAPTURE(s);
    const auto range = model::shard_range(s, shard_count);
    test::temp_dir one, many;
    clone_store(target.str(), one.str());
    clone_store(target.str(), many.str());
    auto whole = copy(src.str(), one.str(), range, {std::size_t{1} << 30, std::size_t{1} << 30});
    CHECK(whole.chunks == 1);
    auto chunked = copy(src.str(), many.str(), range, {1, 1});
    CHECK(chunked.chunks > whole.chunks);
    CHECK(chunked.sessions == whole.sessions);
    CHECK(chunked.rows == whole.rows);
    CHECK(all_rows(many.str()) == all_rows(one.str()));
    // Chunks of a few sessions and a byte bound between give the same rows too.
    test::temp_dir some;
    clone_store(target.str(), some.str());
    copy(src.str(), some.str(), range, {5, 2048});
    CHECK(all_rows(some.str()) == all_rows(one.str()));
  }
}

TEST_CASE("shard copy: a chunk resumes from its position in a new read transaction") {
  test::temp_dir src, one, resumed;
  build_source(src.str());
  build_target(one.str());
  clone_store(one.str(), resumed.str());
  const auto range = model::shard_range(1, shard_count);
  copy(src.str(), one.str(), range);
  auto a = open_kv(src.str());
  auto b = open_kv(resumed.str());
  store::shard_position at;
  int chunks = 0;
  while (at.phase != store::shard_phase::done) {
    REQUIRE(++chunks < 10000);
    auto reader = MUST(store::shard_reader::open(*a, range)); // a reader per chunk
    auto chunk = MUST(reader->next(at, {3, std::size_t{1} << 20}));
    MUST(store::shard_writer::apply(*b, chunk));
    at = chunk.next;
  }
  CHECK(chunks > 1);
  b.reset();
  CHECK(all_rows(resumed.str()) == all_rows(one.str()));
  auto reader = MUST(store::shard_reader::open(*a, range));
  CHECK(reader->next(at).code() == errc::invalid_argument);
}

TEST_CASE("shard copy: truncated or damaged chunk bytes are refused and the target is unchanged") {
  test::temp_dir src, dst;
  build_source(src.str());
  build_target(dst.str());
  const auto range = model::shard_range(2, shard_count);
  const auto bytes = some_chunk_bytes(src.str(), range);
  REQUIRE(store::decode_chunk(bytes).ok());
  const auto rows = all_rows(dst.str());
  // Every truncation: data_corrupt (the checksum, or too short to hold one).
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    auto r = store::decode_chunk(std::string_view(bytes).substr(0, n));
    CAPTURE(n);
    REQUIRE_FALSE(r.ok());
    CHECK(r.code() == errc::data_corrupt);
  }
  // Every byte flipped: data_corrupt.
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    auto bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    auto r = store::decode_chunk(bad);
    CAPTURE(i);
    REQUIRE_FALSE(r.ok());
    CHECK(r.code() == errc::data_corrupt);
  }
  // Bytes appended after the checksum: refused.
  CHECK_FALSE(store::decode_chunk(bytes + "x").ok());
  CHECK(all_rows(dst.str()) == rows);
}

TEST_CASE("shard copy: a chunk whose checksum holds but whose contents are wrong is refused "
          "and the target is unchanged") {
  test::temp_dir src, dst;
  build_source(src.str());
  build_target(dst.str());
  const auto range = model::shard_range(2, shard_count);
  auto chunk = MUST(store::decode_chunk(some_chunk_bytes(src.str(), range)));
  const auto rows = all_rows(dst.str());
  auto refused = [&](const store::shard_chunk& c, errc code) {
    // Through the serialised form, as a node receives it.
    auto parsed = store::decode_chunk(store::encode_chunk(c));
    REQUIRE(parsed.ok());
    auto b = open_kv(dst.str());
    auto r = store::shard_writer::apply(*b, *parsed);
    REQUIRE_FALSE(r.ok());
    CHECK(r.code() == code);
  };
  auto& first = chunk.spans.front().rows.front();
  REQUIRE(first.t == table::sessions);
  SUBCASE("a row whose seal fails") {
    auto c = chunk;
    c.spans.front().rows.back().value.back() ^= 1;
    refused(c, errc::data_corrupt);
  }
  SUBCASE("a session of another range") {
    auto c = chunk;
    c.range = model::shard_range(3, shard_count);
    refused(c, errc::invalid_argument);
  }
  SUBCASE("a session's row before its record") {
    auto c = chunk;
    auto& r = c.spans.front().rows;
    std::swap(r[0], r[1]);
    refused(c, errc::invalid_argument);
  }
  SUBCASE("a row of a table a sessions span does not carry") {
    auto c = chunk;
    c.spans.front().rows.push_back({table::app_state, "chat", "x"});
    refused(c, errc::invalid_argument);
  }
  SUBCASE("a row of another session after a record") {
    auto c = chunk;
    auto k = store::session_key("zzz", "zzz", "zzz") + '\0' + "k";
    c.spans.front().rows.push_back({table::session_state, k, "x"});
    refused(c, errc::invalid_argument);
  }
  SUBCASE("a span that overlaps the one before") {
    auto c = chunk;
    c.spans.insert(c.spans.begin() + 1, c.spans.front());
    refused(c, errc::invalid_argument);
  }
  SUBCASE("an exact span whose key the span before covers") {
    auto c = chunk;
    auto again = c.spans.front();
    REQUIRE_FALSE(again.to_end);
    again.after = again.last;
    again.rows.clear();
    c.spans.insert(c.spans.begin() + 1, again);
    refused(c, errc::invalid_argument);
  }
  CHECK(all_rows(dst.str()) == rows);
  verify_clean(dst.str());
}

TEST_CASE("shard copy: a user being deleted in the source is not copied; a target's delete "
          "fence refuses the copy and leaves the target unchanged") {
  test::temp_dir src, dst;
  build_source(src.str());
  build_target(dst.str());
  const std::string user = "u5";
  const auto range = model::shard_range(model::shard_of("chat", user, shard_count), shard_count);
  auto fence = [](const std::string& dir, const std::string& app, const std::string& u) {
    auto kv = open_kv(dir);
    auto w = kv->begin_write();
    store::put_fence(*w, store::fence_key(app, &u));
    w->commit();
  };
  SUBCASE("the source's fence: the user's sessions and user: state are gone, as for its readers") {
    fence(src.str(), "chat", user);
    const auto source = view_of(src.str());
    REQUIRE(source.users.at({"chat", user}).sessions.empty());
    const auto before = view_of(dst.str());
    auto stats = copy(src.str(), dst.str(), range);
    CHECK(stats.sessions > 0);
    check_copied(source, before, view_of(dst.str()), range);
    CHECK(view_of(dst.str()).users.at({"chat", user}).user_state == json::object());
    verify_clean(dst.str());
  }
  SUBCASE("the target's fence on a user the copy writes: unavailable") {
    fence(dst.str(), "chat", user);
    const auto rows = all_rows(dst.str());
    auto a = open_kv(src.str());
    auto b = open_kv(dst.str());
    auto r = store::copy_shard(*a, *b, range, {std::size_t{1} << 30, std::size_t{1} << 30});
    REQUIRE_FALSE(r.ok());
    CHECK(r.code() == errc::unavailable);
    CHECK(r.err().message.find("being deleted") != std::string::npos);
    b.reset();
    CHECK(all_rows(dst.str()) == rows);
  }
}
