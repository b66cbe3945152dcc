// SPDX-License-Identifier: Apache-2.0
// store/replica.hpp: a write set survives its wire form member by member, and
// applying decoded write sets with store::apply on one real LMDB store writes
// exactly the rows the originals write on another; the decoders refuse every
// damaged input with data_corrupt (truncations, flipped bytes, hostile counts)
// and accept nothing the encoders would not make; the replica position rows
// of table meta round-trip per shard on a real LMDB store, a damaged one
// reads as data_corrupt, and verify checks them.
#include <doctest/doctest.h>

#include <limits>
#include <tuple>

#include "model/event_text.hpp"
#include "model/shard.hpp"
#include "store/apply.hpp"
#include "store/change_log.hpp"
#include "store/crc32c.hpp"
#include "store/keys.hpp"
#include "store/kv.hpp"
#include "store/records.hpp"
#include "store/replica.hpp"
#include "store/verify.hpp"
#include "support/test_support.hpp"

using namespace agentstate;
using store::replica_batch;
using store::replica_position;
using store::state_write;
using store::table;
using store::write_set;

namespace {

using kind = write_set::kind;

constexpr kind all_kinds[] = {kind::create,      kind::append,     kind::remove,
                              kind::remove_user, kind::remove_app, kind::app_write,
                              kind::outbox_put,  kind::outbox_drop};

void check_writes(const std::vector<state_write>& a, const std::vector<state_write>& b,
                  const char* what) {
  CAPTURE(what);
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    CAPTURE(i);
    CHECK(a[i].key == b[i].key);
    CHECK(a[i].text == b[i].text);
    CHECK(a[i].erase == b[i].erase);
    CHECK(b[i].value.is_null()); // never carried
  }
}

// `got` (decoded) holds every member of `want` that the wire form carries,
// doubles bit for bit.
void check_same(const write_set& want, const write_set& got) {
  using store::bits_of;
  CHECK(want.op == got.op);
  CHECK(want.app == got.app);
  CHECK(want.user == got.user);
  CHECK(want.id == got.id);
  CHECK(want.version == got.version);
  CHECK(bits_of(want.time) == bits_of(got.time));
  CHECK(want.event_row == got.event_row);
  check_writes(want.session_writes, got.session_writes, "session_writes");
  check_writes(want.user_writes, got.user_writes, "user_writes");
  check_writes(want.app_writes, got.app_writes, "app_writes");
  CHECK(want.origin_body == got.origin_body);
  CHECK(want.no_origin == got.no_origin);
  CHECK(want.fork_events == got.fork_events);
  CHECK(bits_of(want.expires) == bits_of(got.expires));
  CHECK(bits_of(want.refresh) == bits_of(got.refresh));
  CHECK(want.outcome == got.outcome);
  CHECK(want.forget == got.forget);
  REQUIRE(want.only_if.has_value() == got.only_if.has_value());
  if (want.only_if) {
    CHECK(want.only_if->version == got.only_if->version);
    CHECK(bits_of(want.only_if->created) == bits_of(got.only_if->created));
    CHECK(bits_of(want.only_if->last_update_time) == bits_of(got.only_if->last_update_time));
  }
  CHECK(want.app_elsewhere == got.app_elsewhere);
}

write_set decoded(const std::string& bytes) {
  auto r = store::decode_write_set(bytes);
  INFO(test::describe(r));
  REQUIRE(r.ok());
  return std::move(r).value();
}

// A write set of kind `k` with every optional member present, odd doubles,
// empty and large strings, strings holding NULs and bytes >= 0x80, lengths
// across the varint boundaries.
write_set rich(kind k) {
  write_set ws;
  ws.op = k;
  ws.app = std::string("app\0x", 5);
  ws.user = "";
  ws.id = std::string(127, 'i'); // one varint byte
  ws.version = (std::uint64_t{1} << 63) + 5; // ten varint bytes
  ws.time = 1e-300;
  ws.event_row = std::string(128, '\x04'); // two varint bytes
  ws.session_writes = {{"k", json(1), "1", false},
                       {"gone", json(), "", true},
                       {"", json(), std::string(70000, 'v'), false}};
  ws.user_writes = {{"\xc3\xa9t\xc3\xa9", json(), "\"summer\"", false}};
  ws.app_writes = {{"erased with text", json(), "left over", true}};
  ws.origin_body = std::string(16384, 'o');
  ws.no_origin = true;
  ws.fork_events = {"", std::string(1, '\0'), std::string(300, '\xff')};
  ws.expires = -0.0;
  ws.refresh = std::numeric_limits<double>::denorm_min();
  ws.outcome = R"({"ok":true})";
  ws.forget = {"w-1", "", "w-3"};
  ws.only_if = write_set::record_guard{std::numeric_limits<std::uint64_t>::max(),
                                       std::numeric_limits<double>::infinity(), -1.5e308};
  ws.app_elsewhere = true;
  return ws;
}

// A write set of kind `k` with every optional member absent and every string
// and list empty.
write_set bare(kind k) {
  write_set ws;
  ws.op = k;
  return ws;
}

// The same store-level varint as the codec, to build hostile inputs by hand.
void varint(std::string& out, std::uint64_t x) {
  while (x >= 0x80) {
    out.push_back(static_cast<char>((x & 0x7f) | 0x80));
    x >>= 7;
  }
  out.push_back(static_cast<char>(x));
}

// A write set's bytes up to its session_writes count: format, op append,
// no flags, empty app, user and id, version 0, three zero doubles, an empty
// event_row.
std::string header() {
  std::string out{'\x01', '\x01', '\x00', '\x00', '\x00', '\x00', '\x00'};
  out.append(24, '\0');
  out.push_back('\0');
  return out;
}

// A batch's `body` with its format byte and a correct checksum.
std::string sealed_batch(const std::string& body) {
  std::string out(1, '\x01');
  out += body;
  auto crc = store::crc32c_extend(0, out);
  for (int shift = 24; shift >= 0; shift -= 8)
    out.push_back(static_cast<char>((crc >> shift) & 0xff));
  return out;
}

bool says(const error& e, const std::string& what) {
  return e.message.find(what) != std::string::npos;
}

// Every prefix of `bytes` shorter than it is refused by `decode` with
// data_corrupt.
template <class Decode>
void check_truncations(const std::string& bytes, Decode decode) {
  std::size_t wrong = 0, first = 0;
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    auto r = decode(std::string_view(bytes).substr(0, n));
    if (r.ok() || r.code() != errc::data_corrupt) {
      if (wrong++ == 0)
        first = n;
    }
  }
  INFO("first wrong prefix length: " << first);
  CHECK(wrong == 0);
}

// Each byte of `bytes` flipped by each mask: `decode` either refuses it with
// data_corrupt or decodes something that `encode` turns back into exactly
// the damaged input (the decoder accepts only canonical forms).
template <class Decode, class Encode>
void check_flips(const std::string& bytes, Decode decode, Encode encode, std::size_t& accepted) {
  std::size_t wrong = 0, first = 0;
  for (std::size_t i = 0; i < bytes.size(); ++i)
    for (unsigned mask : {0x01u, 0x80u, 0xffu}) {
      auto damaged = bytes;
      damaged[i] = static_cast<char>(static_cast<unsigned char>(damaged[i]) ^ mask);
      auto r = decode(damaged);
      const bool fine = r.ok() ? encode(*r) == damaged : r.code() == errc::data_corrupt;
      accepted += r.ok();
      if (!fine && wrong++ == 0)
        first = i;
    }
  INFO("first wrong position: " << first);
  CHECK(wrong == 0);
}

} // namespace

TEST_CASE("replica: a write set of every kind round-trips member by member") {
  for (auto k : all_kinds) {
    CAPTURE(static_cast<int>(k));
    for (auto ws : {rich(k), bare(k)}) {
      const auto bytes = store::encode_write_set(ws);
      CHECK(static_cast<std::uint8_t>(bytes[0]) == store::write_set_format);
      auto back = decoded(bytes);
      check_same(ws, back);
      CHECK(store::encode_write_set(back) == bytes);
    }
  }
  // Each optional member alone.
  auto ws = bare(kind::create);
  ws.origin_body = "";
  check_same(ws, decoded(store::encode_write_set(ws)));
  ws = bare(kind::remove);
  ws.only_if = write_set::record_guard{};
  check_same(ws, decoded(store::encode_write_set(ws)));
  ws = bare(kind::append);
  ws.app_elsewhere = true;
  check_same(ws, decoded(store::encode_write_set(ws)));
  ws = bare(kind::create);
  ws.no_origin = true;
  check_same(ws, decoded(store::encode_write_set(ws)));
  // The bare form is small: three bytes of header, a byte per empty string,
  // list and varint, 8 per double.
  CHECK(store::encode_write_set(bare(kind::append)).size() == 3 + 3 + 1 + 24 + 1 + 3 + 1 + 1 + 1);
}

namespace {

const std::string chat = "chat";
constexpr double t0 = 1'700'000'000.125;

std::string event_row(const std::string& skey, std::uint64_t v, double ts, json delta,
                      const std::string& id) {
  auto text = model::encode_event_text(test::make_event(std::move(delta), id, ts));
  REQUIRE(text.ok());
  return store::encode_event_row(store::event_key(skey, v), ts, *text);
}

write_set session_ws(kind k, const std::string& user, const std::string& id, double time) {
  write_set ws;
  ws.op = k;
  ws.app = chat;
  ws.user = user;
  ws.id = id;
  ws.time = time;
  return ws;
}

// A history as the engine prepares it (actors/prepare.cpp): creates with
// state in every scope and an expiry, appends that set and erase keys of
// each scope and move the expiry, a fork with its events and its source's
// origin, a fork of a session without an origin, app writes kept at the
// app's home, an append whose app: part is out (its outbox row put, then
// dropped by the append), a guarded delete that holds and one that fails,
// a user's and an app's delete.
std::vector<write_set> history() {
  std::vector<write_set> out;
  const auto s1 = store::session_key(chat, "ann", "s1");
  const auto s2 = store::session_key(chat, "ann", "s2");
  const auto s3 = store::session_key(chat, "bob", "s3");

  auto c1 = session_ws(kind::create, "ann", "s1", t0);
  c1.session_writes = {{"topic", json("plans"), "\"plans\""}, {"n", json(0), "0"}};
  c1.user_writes = {{"lang", json("en"), "\"en\""}};
  c1.app_writes = {{"greeting", json("hi"), "\"hi\""}};
  c1.expires = t0 + 3600;
  c1.refresh = 600;
  out.push_back(c1);

  auto a1 = session_ws(kind::append, "ann", "s1", t0 + 1);
  a1.version = 1;
  a1.event_row =
    event_row(s1, 1, a1.time, json{{"n", 1}, {"user:lang", "fr"}, {"app:visits", 1}}, "e1");
  a1.session_writes = {{"n", json(1), "1"}};
  a1.user_writes = {{"lang", json("fr"), "\"fr\""}};
  a1.app_writes = {{"visits", json(1), "1"}};
  a1.expires = a1.time + 600;
  out.push_back(a1);

  auto a2 = session_ws(kind::append, "ann", "s1", t0 + 2);
  a2.version = 2;
  a2.event_row =
    event_row(s1, 2, a2.time, json{{"note", {{"deep", {1, 2, {{"x", nullptr}}}}}}}, "e2");
  a2.session_writes = {{"topic", json(), "", true},
                       {"note", json(), R"({"deep":[1,2,{"x":null}]})"}};
  a2.user_writes = {{"lang", json(), "", true}};
  a2.app_writes = {{"visits", json(2), "2"}, {"greeting", json(), "", true}};
  a2.expires = a2.time + 600;
  out.push_back(a2);

  auto fork = session_ws(kind::create, "ann", "s2", t0 + 3);
  fork.version = 2;
  fork.fork_events = {event_row(s2, 1, t0 + 1, json{{"n", 1}}, "e1"),
                      event_row(s2, 2, t0 + 2, json{{"note", 1}}, "e2")};
  fork.origin_body = R"({"topic":"plans","n":0})";
  fork.session_writes = {{"n", json(1), "1"}, {"note", json(1), "1"}};
  out.push_back(fork);

  auto bare_fork = session_ws(kind::create, "bob", "s3", t0 + 4);
  bare_fork.version = 1;
  bare_fork.no_origin = true;
  bare_fork.fork_events = {event_row(s3, 1, t0, json::object(), "b1")};
  out.push_back(bare_fork);

  auto put = session_ws(kind::outbox_put, "ann", "s2", 0);
  put.version = 3;
  put.outcome = R"({"app:visits":3})";
  out.push_back(put);

  auto a3 = session_ws(kind::append, "ann", "s2", t0 + 5);
  a3.version = 3;
  a3.event_row = event_row(s2, 3, a3.time, json{{"app:visits", 3}, {"m", "x"}}, "e3");
  a3.session_writes = {{"m", json("x"), "\"x\""}};
  a3.app_writes = {{"visits", json(3), "3"}}; // logged only: kept at the app's home
  a3.app_elsewhere = true;
  out.push_back(a3);

  auto aw = session_ws(kind::app_write, "", "w-2", 0);
  aw.user.clear();
  aw.app_writes = {{"visits", json(4), "4"}, {"home", json("here"), "\"here\""}};
  aw.outcome = R"({"ok":true,"state":{"app:visits":4}})";
  aw.forget = {"w-1", "w-2"};
  out.push_back(aw);

  auto put3 = session_ws(kind::outbox_put, "bob", "s3", 0);
  put3.version = 2;
  put3.outcome = "{}";
  out.push_back(put3);
  auto drop3 = put3;
  drop3.op = kind::outbox_drop;
  drop3.outcome.clear();
  out.push_back(drop3);

  auto rm = session_ws(kind::remove, "ann", "s1", 0);
  rm.only_if = write_set::record_guard{2, t0, t0 + 2};
  out.push_back(rm);

  auto stale = session_ws(kind::remove, "ann", "s2", 0);
  stale.only_if = write_set::record_guard{2, t0 + 3, t0 + 3}; // s2 is at version 3 now
  out.push_back(stale);

  auto mail = session_ws(kind::create, "cy", "m1", t0 + 6);
  mail.app = "mail";
  mail.session_writes = {{"k", json(1), "1"}};
  mail.user_writes = {{"u", json(1), "1"}};
  out.push_back(mail);

  auto rm_user = session_ws(kind::remove_user, "bob", "", 0);
  out.push_back(rm_user);
  auto rm_app = session_ws(kind::remove_app, "", "", 0);
  rm_app.app = "mail";
  out.push_back(rm_app);
  return out;
}

using rows_t = std::vector<std::tuple<int, std::string, std::string>>;

rows_t all_rows(store::kv_store& kv) {
  rows_t out;
  auto txn = kv.begin_read();
  for (std::size_t t = 0; t < store::table_count; ++t)
    txn->scan(static_cast<table>(t), {}, {}, [&](std::string_view k, std::string_view v) {
      out.emplace_back(static_cast<int>(t), std::string(k), std::string(v));
      return true;
    });
  return out;
}

// Applies `ws` in a write transaction of its own with `log`; the outcome as
// "ok <logged>" or the error's code.
std::string apply_one(store::kv_store& kv, const write_set& ws, store::change_log& log) {
  auto w = kv.begin_write();
  auto r = store::apply(*w, ws, &log);
  if (!r)
    return test::code_name(r.code());
  w->commit();
  return *r ? "ok logged" : "ok";
}

} // namespace

TEST_CASE("replica: decoded write sets applied on another store write exactly the same rows") {
  test::temp_dir da, db;
  auto a = store::open_lmdb_kv(da.str(), false, std::uint64_t{64} << 20);
  auto b = store::open_lmdb_kv(db.str(), false, std::uint64_t{64} << 20);
  store::change_log log_a, log_b;
  log_a.now = log_b.now = t0 + 10;
  std::vector<std::string> outcomes;
  for (auto& ws : history()) {
    const auto bytes = store::encode_write_set(ws);
    auto copy = decoded(bytes);
    check_same(ws, copy);
    auto on_a = apply_one(*a, ws, log_a);
    auto on_b = apply_one(*b, copy, log_b);
    CHECK(on_a == on_b);
    outcomes.push_back(on_a);
    // After every step, not just at the end: a difference is caught at the
    // write set that made it.
    CHECK(all_rows(*a) == all_rows(*b));
  }
  // The history did what it means to: each write set applied (the stale
  // guard refused), every scope written, a change row for each session
  // write.
  CHECK(outcomes
        == std::vector<std::string>{"ok logged", "ok logged", "ok logged", "ok logged", "ok logged",
                                    "ok", "ok logged", "ok", "ok", "ok", "ok logged",
                                    "condition_failed", "ok logged", "ok logged", "ok logged"});
  const auto rows = all_rows(*a);
  auto count = [&](table t) {
    return std::count_if(rows.begin(), rows.end(),
                         [&](auto& r) { return std::get<0>(r) == static_cast<int>(t); });
  };
  CHECK(count(table::changes) == 10);
  CHECK(count(table::events) == 3 + 1); // s2's three, s3's one (under bob's fence)
  CHECK(count(table::app_state) > 0);
  CHECK(count(table::app_writes) == 1);
  CHECK(count(table::fences) == 2);
  CHECK(count(table::outbox) == 0);
}

TEST_CASE("replica: every truncation of a write set is data_corrupt") {
  for (auto k : all_kinds)
    for (auto ws : {rich(k), bare(k)}) {
      CAPTURE(static_cast<int>(k));
      check_truncations(store::encode_write_set(ws), store::decode_write_set);
    }
}

TEST_CASE("replica: a write set with a flipped byte decodes to its own encoding or is "
          "data_corrupt") {
  std::size_t accepted = 0;
  for (auto& ws : history()) {
    CAPTURE(static_cast<int>(ws.op));
    check_flips(store::encode_write_set(ws), store::decode_write_set, store::encode_write_set,
                accepted);
  }
  auto ws = rich(kind::append);
  ws.session_writes[2].text.resize(300); // a short form of the large one
  ws.origin_body->resize(200);
  check_flips(store::encode_write_set(ws), store::decode_write_set, store::encode_write_set,
              accepted);
  CHECK(accepted > 0); // flips inside strings and doubles decode, to other write sets
}

TEST_CASE("replica: a write set whose counts or lengths exceed its bytes is data_corrupt") {
  auto corrupt_with = [](const std::string& bytes, const std::string& what) {
    auto r = store::decode_write_set(bytes);
    INFO(test::describe(r));
    REQUIRE_FALSE(r.ok());
    CHECK(r.code() == errc::data_corrupt);
    CHECK(says(r.err(), what));
  };
  // The header with empty lists after it decodes.
  std::string good = header() + std::string(6, '\0');
  REQUIRE(store::decode_write_set(good).ok());

  auto huge = header();
  varint(huge, 0xFFFFFFFF); // session_writes
  huge += std::string(16, '\0');
  corrupt_with(huge, "4294967295 session_writes cannot fit in the 16 bytes left");
  huge = header() + std::string(3, '\0'); // three empty state lists
  varint(huge, std::numeric_limits<std::uint64_t>::max()); // fork_events
  huge += "xy";
  corrupt_with(huge, "fork_events cannot fit");
  // A string length past the end (the app's).
  std::string longer{'\x01', '\x01', '\x00'};
  varint(longer, std::uint64_t{1} << 62);
  longer += "abc";
  corrupt_with(longer, "the length of app (4611686018427387904) runs past the end (3 bytes left)");

  auto with = [&](std::size_t at, char c) {
    auto x = good;
    x[at] = c;
    return x;
  };
  corrupt_with(with(0, '\x02'), "unknown format 2");
  corrupt_with(with(0, '\x00'), "unknown format 0");
  corrupt_with(with(1, '\x08'), "unknown op 8");
  corrupt_with(with(2, '\x10'), "unknown flags 16");
  corrupt_with(good + '\0', "1 bytes after the end");
  corrupt_with("", "truncated in the format byte");
  // A varint in a longer form than needed (0 as 0x80 0x00), and one past
  // 64 bits.
  auto x = good;
  x.insert(3, 1, '\x80');
  corrupt_with(x, "app is not in its shortest form");
  x = std::string{'\x01', '\x01', '\x00', '\x00', '\x00', '\x00'};
  x += std::string(9, '\xff') + '\x02';
  corrupt_with(x, "version is not a 64-bit number");
  // An erase flag other than 0 or 1.
  x = header();
  x += std::string{'\x01', '\x02', '\x00', '\x00'};
  x += std::string(5, '\0');
  corrupt_with(x, "an erase flag of session_writes is 2");
  // A flag promising an only_if the bytes do not hold.
  corrupt_with(with(2, '\x04'), "truncated in only_if.version");
}

TEST_CASE("replica: a batch round-trips and refuses what its encoder would not make") {
  replica_batch b;
  b.prev = {3, 41};
  b.epoch = 4;
  for (auto& ws : history())
    b.sets.push_back(store::encode_write_set(ws));
  const auto bytes = store::encode_replica_batch(b);
  CHECK(static_cast<std::uint8_t>(bytes[0]) == store::replica_batch_format);
  auto back = store::decode_replica_batch(bytes);
  INFO(test::describe(back));
  REQUIRE(back.ok());
  CHECK(back->prev == b.prev);
  CHECK_FALSE(back->prev != b.prev);
  CHECK(back->epoch == 4);
  CHECK(back->sets == b.sets);
  CHECK(store::encode_replica_batch(*back) == bytes);
  for (std::size_t i = 0; i < back->sets.size(); ++i)
    check_same(history()[i], decoded(back->sets[i]));

  check_truncations(bytes, store::decode_replica_batch);
  std::size_t accepted = 0;
  check_flips(bytes, store::decode_replica_batch, store::encode_replica_batch, accepted);
  CHECK(accepted == 0); // the checksum catches every one

  auto corrupt_with = [](const std::string& in, const std::string& what) {
    auto r = store::decode_replica_batch(in);
    INFO(test::describe(r));
    REQUIRE_FALSE(r.ok());
    CHECK(r.code() == errc::data_corrupt);
    CHECK(says(r.err(), what));
  };
  // Bodies with a correct checksum that the encoder would not make.
  std::string body = {'\x00', '\x00', '\x00'}; // prev {0, 0}, epoch 0
  varint(body, 0xFFFFFFFF);
  body += "abcd";
  corrupt_with(sealed_batch(body), "4294967295 sets cannot fit in the 4 bytes left");
  corrupt_with(sealed_batch({'\x05', '\x00', '\x04', '\x01', '\x00'}),
               "epoch 4 is below the epoch 5 of its previous position");
  corrupt_with(sealed_batch({'\x00', '\x00', '\x00', '\x00'}), "it holds no write set");
  body.clear();
  varint(body, 1);
  varint(body, std::numeric_limits<std::uint64_t>::max() - 1);
  body += std::string{'\x01', '\x02', '\x00', '\x00'};
  corrupt_with(sealed_batch(body), "its sequence numbers run past 2^64 - 1");
  corrupt_with(sealed_batch({'\x00', '\x00', '\x00', '\x01', '\x00', '\x00'}),
               "1 bytes after the end");
  corrupt_with(sealed_batch({'\x00', '\x00', '\x00', '\x01', '\x05', 'a'}),
               "the length of sets (5) runs past the end (1 bytes left)");
  auto other = sealed_batch({'\x00', '\x00', '\x00', '\x01', '\x00'});
  REQUIRE(store::decode_replica_batch(other).ok());
  other[0] = '\x02';
  corrupt_with(other, "unknown format 2");
  corrupt_with("", "truncated (0 bytes)");
}

namespace {

// A store made by a real engine (format, epoch, a session in every scope),
// opened at the kv level.
std::unique_ptr<store::kv_store> engine_store(test::temp_dir& dir) {
  {
    auto e = test::open_store_dir(dir.str());
    MUST(e->create_session(test::create_req("app", "u", "s1", json{{"k", 1}, {"user:v", 2}})));
    MUST(e->append_event(
      test::append_req(test::sref("app", "u", "s1"), test::make_event(json{{"n", 1}}, "e1"))));
    MUST(e->close());
  }
  return store::open_lmdb_kv(dir.str(), false, std::uint64_t{1} << 30);
}

std::optional<store::replica_position> position(store::kv_read& txn, model::hash_range r) {
  auto p = store::read_replica_position(txn, r.lo, r.hi);
  INFO(test::describe(p));
  REQUIRE(p.ok());
  return *p;
}

store::verify_report verified(store::kv_store& kv) {
  auto txn = kv.begin_read();
  return store::verify_store(*txn);
}

bool mentions(const store::verify_report& r, const std::string& what) {
  for (auto& m : r.messages)
    if (m.find(what) != std::string::npos)
      return true;
  return false;
}

} // namespace

TEST_CASE("replica: position rows round-trip per shard on LMDB and verify passes with them") {
  test::temp_dir dir;
  auto kv = engine_store(dir);
  const auto s0 = model::shard_range(0, 4), s1 = model::shard_range(1, 4),
             s3 = model::shard_range(3, 4);
  REQUIRE(s3.hi == 0); // the last shard runs to the end of the hash space
  {
    auto w = kv->begin_write();
    for (auto s : {s0, s1, s3})
      CHECK_FALSE(position(*w, s).has_value());
    store::put_replica_position(*w, s3.lo, s3.hi, {2, std::numeric_limits<std::uint64_t>::max()});
    store::put_replica_position(*w, s1.lo, s1.hi, {1, 7});
    store::put_replica_position(*w, s0.lo, s0.hi, {1, 9});
    w->commit();
  }
  {
    auto r = kv->begin_read();
    CHECK(position(*r, s0) == store::replica_position{1, 9});
    CHECK(position(*r, s1) == store::replica_position{1, 7});
    CHECK(position(*r, s3)
          == store::replica_position{2, std::numeric_limits<std::uint64_t>::max()});
    CHECK_FALSE(position(*r, model::shard_range(2, 4)).has_value());
    // A range that shares a bound with a stored one has none.
    CHECK_FALSE(position(*r, {s0.lo, s1.hi}).has_value());
    // The rows scan in shard order under their prefix; the other meta rows
    // are untouched.
    std::vector<std::string> keys;
    r->scan(table::meta, store::replica_key_prefix, {}, [&](std::string_view k, std::string_view) {
      keys.emplace_back(k);
      return true;
    });
    CHECK(keys
          == std::vector<std::string>{store::replica_key(s0.lo, s0.hi),
                                      store::replica_key(s1.lo, s1.hi),
                                      store::replica_key(s3.lo, s3.hi)});
    CHECK(keys[0].size() == 8 + 16);
    CHECK(keys[0].compare(0, 8, "replica/") == 0);
    CHECK(r->get(table::meta, "format").has_value());
    CHECK(r->get(table::meta, "epoch").has_value());
  }
  auto report = verified(*kv);
  INFO((report.messages.empty() ? std::string() : report.messages.front()));
  CHECK(report.ok());
  CHECK(report.sessions == 1);
  {
    auto w = kv->begin_write();
    store::put_replica_position(*w, s0.lo, s0.hi, {2, 10}); // moves on
    store::erase_replica_position(*w, s1.lo, s1.hi);
    store::erase_replica_position(*w, s1.lo, s1.hi); // none: nothing to do
    w->commit();
  }
  {
    auto r = kv->begin_read();
    CHECK(position(*r, s0) == store::replica_position{2, 10});
    CHECK_FALSE(position(*r, s1).has_value());
    CHECK(position(*r, s3)
          == store::replica_position{2, std::numeric_limits<std::uint64_t>::max()});
  }
  CHECK(verified(*kv).ok());
}

TEST_CASE("replica: a damaged position row reads as data_corrupt and verify names it") {
  test::temp_dir dir;
  auto kv = engine_store(dir);
  const auto s0 = model::shard_range(0, 2), s1 = model::shard_range(1, 2);
  const auto k0 = store::replica_key(s0.lo, s0.hi), k1 = store::replica_key(s1.lo, s1.hi);
  {
    auto w = kv->begin_write();
    store::put_replica_position(*w, s0.lo, s0.hi, {1, 1});
    store::put_replica_position(*w, s1.lo, s1.hi, {1, 2});
    w->commit();
  }
  REQUIRE(verified(*kv).ok());
  auto read_fails = [&](const std::string& value) {
    {
      auto w = kv->begin_write();
      w->put(table::meta, k0, value);
      w->commit();
    }
    {
      auto r = kv->begin_read();
      auto p = store::read_replica_position(*r, s0.lo, s0.hi);
      INFO(test::describe(p));
      REQUIRE_FALSE(p.ok());
      CHECK(p.code() == errc::data_corrupt);
      CHECK(says(p.err(),
                 "the replica position of shard [0x0000000000000000, "
                 "0x8000000000000000) is damaged"));
      // The other shard's row still reads.
      CHECK(position(*r, s1) == store::replica_position{1, 2});
    }
    auto report = verified(*kv);
    CHECK(report.faults == 1);
    CHECK(mentions(report, "replica position of shard [0x0000000000000000"));
  };
  std::string v1(*kv->begin_read()->get(table::meta, k1));
  read_fails("garbage");
  read_fails("");
  read_fails(v1); // shard 1's intact row under shard 0's key: its seal names its key
  std::string sealed_short = store::seal(k0, "12345678");
  read_fails(sealed_short); // sealed, but not the layout of a position
  auto flipped = store::seal(k0, std::string(16, '\1'));
  flipped.back() = static_cast<char>(flipped.back() ^ 1);
  read_fails(flipped);

  // A key under the prefix of another length is named as it is.
  {
    auto w = kv->begin_write();
    store::put_replica_position(*w, s0.lo, s0.hi, {1, 1});
    w->put(table::meta, "replica/short", store::seal("replica/short", std::string(16, '\0')));
    w->commit();
  }
  auto report = verified(*kv);
  CHECK(report.faults == 1);
  CHECK(mentions(report, "meta row 'replica/short' is damaged"));
  {
    auto w = kv->begin_write();
    w->del(table::meta, "replica/short");
    w->commit();
  }
  CHECK(verified(*kv).ok());
}
