// SPDX-License-Identifier: Apache-2.0
// The JSON codec of the public types, the bounded parser, and scope helpers.
#include <doctest/doctest.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <string>

#include "agentstate/scope.hpp"
#include "agentstate/types.hpp"
#include "model/event_text.hpp"
#include "store/apply.hpp"
#include "store/format.hpp"
#include "store/keys.hpp"
#include "store/listing.hpp"
#include "store/reads.hpp"
#include "store/records.hpp"
#include "fuzz/stored_text_check.hpp"

using namespace agentstate;

TEST_CASE("codec: unknown members at the top level and in actions round-trip verbatim") {
  json in = json::parse(R"({
    "id": "e1", "invocation_id": "i1", "author": "bot", "timestamp": 12.5,
    "partial": false, "content": {"parts": [{"text": "hi"}]},
    "branch": "a.b", "custom": {"x": [1, 2, {"y": null}]},
    "actions": {"state_delta": {"k": 1}, "artifact_delta": {"f": 2},
                "transfer_to_agent": "other", "escalate": true}
  })");
  auto ev = event_from_json(in);
  REQUIRE(ev);
  CHECK(ev->extra.at("branch") == "a.b");
  CHECK(ev->actions.extra.at("transfer_to_agent") == "other");
  CHECK(to_json(*ev) == in);
}

TEST_CASE("codec: wrong member types are invalid_argument naming the member") {
  auto bad = [](const char* text) { return event_from_json(json::parse(text)); };
  auto r = bad(R"({"id": 5})");
  CHECK(r.code() == errc::invalid_argument);
  CHECK(r.err().message.find("'id'") != std::string::npos);
  CHECK(bad(R"({"timestamp": "now"})").code() == errc::invalid_argument);
  CHECK(bad(R"({"partial": 1})").code() == errc::invalid_argument);
  CHECK(bad(R"({"actions": []})").code() == errc::invalid_argument);
  CHECK(bad(R"({"actions": {"state_delta": [1]}})").code() == errc::invalid_argument);
  CHECK(event_from_json(json::array()).code() == errc::invalid_argument);
  // null for an optional member means absent.
  auto ok = bad(R"({"id": null, "timestamp": null, "actions": null})");
  REQUIRE(ok);
  CHECK(ok->id.empty());
  CHECK_FALSE(ok->timestamp);
}

TEST_CASE("codec: sessions round-trip through JSON") {
  session s;
  s.app_name = "a";
  s.user_id = "u";
  s.id = "s";
  s.state = json{{"k", 1}};
  s.version = 2;
  s.last_update_time = 3.5;
  event e;
  e.id = "e";
  e.timestamp = 1;
  s.events.push_back(e);
  auto back = session_from_json(to_json(s));
  REQUIRE(back);
  CHECK(to_json(*back) == to_json(s));
}

TEST_CASE("parse_json refuses deep nesting without recursing, and bad text") {
  std::string deep(200000, '[');
  deep += std::string(200000, ']');
  auto r = parse_json(deep, 64);
  CHECK(r.code() == errc::too_large);
  std::string ok64 = std::string(64, '[') + std::string(64, ']');
  CHECK(parse_json(ok64, 64).ok());
  std::string over = std::string(65, '[') + std::string(65, ']');
  CHECK(parse_json(over, 64).code() == errc::too_large);
  CHECK(parse_json("{\"a\":1} trailing", 64).code() == errc::invalid_argument);
  CHECK(parse_json("{\"a\":", 64).code() == errc::invalid_argument);
  CHECK(parse_json("\"\xff\"", 64).code() == errc::invalid_argument);
  CHECK(json_depth(json::parse("[[1],{\"a\":{}}]"), 100) == 3);
  CHECK(json_depth(json(5), 100) == 0);
}

TEST_CASE("dump_json reports invalid UTF-8 instead of throwing") {
  json bad = std::string("\xc3\x28");
  CHECK(dump_json(bad).code() == errc::invalid_argument);
  CHECK(dump_json(json{{"k", "v"}}).value() == R"({"k":"v"})");
  // dump_json reuses one buffer per thread: a failure part-way through an
  // object, or a large value, leaves nothing behind for the next value.
  CHECK(dump_json(json{{"a", "ok"}, {"b", bad}}).code() == errc::invalid_argument);
  CHECK(dump_json(json{{"k", 1}}).value() == R"({"k":1})");
  std::string big(100000, 'x');
  CHECK(dump_json(json(big)).value() == '"' + big + '"');
  CHECK(dump_json(json(2.5)).value() == "2.5");
}

TEST_CASE("S1 scope_of: prefixes are case-sensitive and the first match wins") {
  CHECK(scope_of("app:x") == scope::app);
  CHECK(scope_of("app:") == scope::app);
  CHECK(scope_of("user:x") == scope::user);
  CHECK(scope_of("temp:x") == scope::temp);
  CHECK(scope_of("App:x") == scope::session);
  CHECK(scope_of("x") == scope::session);
  CHECK(scope_of("") == scope::session);
  CHECK(scope_of("app:user:x") == scope::app);
  // N1: turn: lives like temp:; session:, bg: and derived: are session keys.
  CHECK(scope_of("turn:x") == scope::temp);
  CHECK(unprefixed("turn:x") == "x");
  CHECK(scope_of("session:x") == scope::session);
  CHECK(scope_of("bg:x") == scope::session);
  CHECK(scope_of("derived:x") == scope::session);
  CHECK(is_derived("derived:x"));
  CHECK_FALSE(is_derived("x"));
  CHECK(unprefixed("user:x") == "x");
  CHECK(unprefixed("plain") == "plain");
}

TEST_CASE("S2 partition_delta and merge_state split and merge by scope") {
  auto d = partition_delta(json{{"app:a", 1}, {"user:u", 2}, {"temp:t", 3}, {"s", 4}});
  CHECK(d.app == json{{"a", 1}});
  CHECK(d.user == json{{"u", 2}});
  CHECK(d.temp == json{{"temp:t", 3}});
  CHECK(d.session == json{{"s", 4}});
  CHECK(strip_temp(json{{"temp:t", 3}, {"s", 4}}) == json{{"s", 4}});
  auto m = merge_state(json{{"s", 1}}, json{{"u", 2}}, json{{"a", 3}});
  CHECK(m == json{{"s", 1}, {"user:u", 2}, {"app:a", 3}});
}

// -- the stored event text ---------------------------------------------------
// The append path writes encode_event_text(ev) and the text read path splices
// it unparsed, so it must stay byte-identical to dump_json(to_json(ev)).

namespace {

void check_same_text(const event& ev) {
  auto want = dump_json(to_json(ev));
  auto got = model::encode_event_text(ev);
  REQUIRE(static_cast<bool>(want) == static_cast<bool>(got));
  if (want)
    CHECK(*got == *want);
  else
    CHECK(got.code() == errc::invalid_argument);
}

} // namespace

TEST_CASE("encode_event_text: same bytes as dump_json(to_json(ev)) for every member shape") {
  std::string controls;
  for (int c = 1; c < 0x20; ++c)
    controls += static_cast<char>(c);
  controls += "\x7f\"\\/ é中😀";

  event ev;
  ev.id = "e-" + controls;
  ev.invocation_id = "";
  ev.author = "Bot";
  check_same_text(ev); // no timestamp, partial or content; empty actions

  ev.timestamp = 1700000000.123456;
  ev.partial = false;
  ev.content = json{{"parts", {{{"text", controls}}}}, {"role", "model"}};
  ev.actions.state_delta = {{"step", 3},
                            {"score", 1.5},
                            {"user:Z", nullptr},
                            {"app:\xc3\xa9", {1, "two", 3.25}},
                            {"", true}};
  ev.actions.state_remove = {"gone", "user:old"};
  ev.actions.artifact_delta = {{"f.txt", 2}};
  check_same_text(ev); // every known member, no unknown one
  ev.actions.extra = {{"escalate", true}, {"Transfer", "x"}, {"_z", {}}, {"\xc3\xa9t\xc3\xa9", 1}};
  ev.extra = {
    {"branch", "a.b"}, {"Custom", {{"x", {1, 2, nullptr}}}}, {"zz", -0.0}, {"\xe4\xb8\xad", "mid"}};
  check_same_text(ev);

  // Unknown members named like known ones: known members win, except where
  // the known member is absent (no timestamp/partial/content, empty removes).
  ev.extra["actions"] = "shadowed";
  ev.extra["id"] = "shadowed";
  ev.extra["author"] = 7;
  ev.actions.extra["state_delta"] = "shadowed";
  ev.actions.extra["artifact_delta"] = "shadowed";
  ev.actions.extra["state_remove"] = "shadowed while removes exist";
  check_same_text(ev);
  ev.actions.state_remove.clear();
  check_same_text(ev);
  ev.timestamp.reset();
  ev.partial.reset();
  ev.content.reset();
  ev.extra["timestamp"] = "unknown while absent";
  ev.extra["partial"] = 1;
  ev.extra["content"] = nullptr;
  check_same_text(ev);
  ev.content = json(); // a present null content
  ev.partial = true;
  check_same_text(ev);

  for (double t : {0.0, -0.0, 1.0, 0.1, 1e300, -1e-300, 5e-324, 123456789012345678.0,
                   1.7976931348623157e308, 2.5e-5})
    ev.timestamp = t, check_same_text(ev);

  // Non-object extras are ignored by both.
  ev.extra = json();
  ev.actions.extra = json::array();
  check_same_text(ev);
}

namespace {

// Random events of every member shape: strings of escapes, controls and
// multi-byte characters, integers of both signs and beyond 18 digits,
// doubles across the exponent range, nesting.
struct random_events {
  std::mt19937 rng;
  std::vector<std::string> atoms = {
    "a",    "B",    "z",    "_", ":",  "user:", "app:", "temp:", "\"", "\\",     "\n",
    "\x01", "\x1f", "\x7f", "é", "中", "😀",     " ",    "0",     "id", "actions"};

  explicit random_events(unsigned seed) : rng(seed) {}

  std::string word(int max) {
    std::string s;
    int n = static_cast<int>(rng() % (max + 1));
    for (int i = 0; i < n; ++i)
      s += atoms[rng() % atoms.size()];
    return s;
  }

  json value(int depth) {
    switch (rng() % (depth > 2 ? 6 : 8)) {
      case 0: return nullptr;
      case 1: return static_cast<bool>(rng() % 2);
      case 2: return static_cast<std::int64_t>(rng()) - (1LL << 31);
      case 3:
        return std::ldexp(static_cast<double>(rng()) - 2e9, static_cast<int>(rng() % 80) - 40);
      case 4: return word(6);
      case 5: return static_cast<std::uint64_t>(rng()) << 32;
      case 6: {
        json a = json::array();
        for (int i = static_cast<int>(rng() % 4); i > 0; --i)
          a.push_back(value(depth + 1));
        return a;
      }
      default: {
        json o = json::object();
        for (int i = static_cast<int>(rng() % 4); i > 0; --i)
          o[word(3)] = value(depth + 1);
        return o;
      }
    }
  }

  json object(int n) {
    json o = json::object();
    for (int i = static_cast<int>(rng() % (n + 1)); i > 0; --i)
      o[word(3)] = value(0);
    return o;
  }

  event next() {
    event ev;
    ev.id = word(8);
    ev.invocation_id = word(4);
    ev.author = word(4);
    if (rng() % 2)
      ev.timestamp = static_cast<double>(rng()) / (1 + rng() % 1000);
    if (rng() % 4 == 0)
      ev.partial = rng() % 2 == 0;
    if (rng() % 2)
      ev.content = value(0);
    ev.actions.state_delta = object(4);
    for (int k = static_cast<int>(rng() % 3); k > 0; --k)
      ev.actions.state_remove.push_back(word(3));
    ev.actions.artifact_delta = object(2);
    ev.actions.extra = object(3);
    ev.extra = object(4);
    return ev;
  }
};

} // namespace

TEST_CASE("encode_event_text: same bytes as dump_json(to_json(ev)) for random events") {
  random_events gen(20261122);
  for (int i = 0; i < 2000; ++i) {
    INFO("event ", i);
    check_same_text(gen.next());
  }
}

TEST_CASE("encode_event_text: invalid UTF-8 is invalid_argument, like dump_json") {
  for (const char* bad : {"\xff", "\xc0\xaf", "\xed\xa0\x80", "ok\xe4\xb8"}) {
    event ev;
    ev.author = bad;
    check_same_text(ev);
    CHECK(model::encode_event_text(ev).code() == errc::invalid_argument);
    event in_delta;
    in_delta.actions.state_delta[bad] = 1;
    check_same_text(in_delta);
    event in_value;
    in_value.extra["k"] = bad;
    check_same_text(in_value);
  }
}

// -- reading the stored text -------------------------------------------------------
// decode_event_body reads rows with decode_event_text and falls back on
// nlohmann + event_from_json for texts outside the stored form; either way
// the result must be what that general path gives, number types included.

namespace {

using stored_text_check::general_decode;
using stored_text_check::same_event;

// Checks decode_event_body and parse_stored_text against the general path
// for `text`; returns whether the fast path took it.
bool check_decode(const std::string& text) {
  INFO("text: ", text);
  auto row = store::encode_event_row("k", 0, text);
  auto body = store::open_row(store::table::events, "k", row, false);
  REQUIRE(body);
  auto want = general_decode(text);
  auto got = store::decode_event_body(*body);
  REQUIRE(static_cast<bool>(got) == want.has_value());
  if (want)
    CHECK(same_event(*got, *want));
  else
    CHECK(got.code() == errc::internal);
  bool took = false;
  CHECK(stored_text_check::check(text, &took) == "");
  return took;
}

} // namespace

TEST_CASE("decode_event_text: every event the engine writes reads back identically") {
  random_events gen(20261123);
  int fast = 0, big = 0;
  for (int i = 0; i < 3000; ++i) {
    INFO("event ", i);
    auto ev = gen.next();
    auto text = model::encode_event_text(ev);
    if (!text)
      continue;
    bool took = check_decode(*text);
    // Integers of 19-20 digits are the one shape written but left to nlohmann.
    bool has_big = false;
    for (std::size_t p = 0, run = 0; p < text->size(); ++p) {
      run = std::isdigit(static_cast<unsigned char>((*text)[p])) ? run + 1 : 0;
      has_big = has_big || run > 18;
    }
    big += has_big;
    if (!has_big) {
      CHECK(took);
      fast += took;
    }
    // And the event read writes the same text again.
    if (took) {
      event back;
      REQUIRE(model::decode_event_text(*text, back));
      CHECK(*model::encode_event_text(back) == *text);
    }
  }
  CHECK(fast > 500);
  CHECK(big > 100);
}

TEST_CASE("decode_event_text: texts outside the stored form read as nlohmann reads them") {
  struct example {
    std::string text;
    bool fast; // whether the fast path takes it
  };
  std::string deep = "{\"x\":" + std::string(200, '[') + std::string(200, ']') + "}";
  // The fast path reads 64 levels (the top-level object is level 0).
  std::string shallow = "{\"x\":" + std::string(63, '[') + std::string(63, ']') + "}";
  std::string past = "{\"x\":" + std::string(64, '[') + std::string(64, ']') + "}";
  std::vector<example> cases = {
    // In the form, with every number and escape shape.
    {R"({"author":"a","id":"b","invocation_id":"c","timestamp":1.5})", true},
    {R"({"x":-0,"y":-0.0,"z":0,"zz":1E5})", true},
    {R"({"x":123456789012345678,"y":-123456789012345678,"z":2.5e-5,"zz":1e+300})", true},
    {R"({"x":"\u00e9\u0000\u4e2d\/\b\f\n\r\t\"\\"})", true},
    {R"({"content":null,"partial":null,"timestamp":null,"actions":null})", false},
    {R"({"actions":null,"content":null,"partial":null,"timestamp":null})", true},
    {R"({"actions":{"artifact_delta":null,"state_delta":null,"state_remove":null}})", true},
    {R"({"actions":{"a":1,"state_remove":["k","user:k"],"z":[]},"partial":false,"timestamp":7})",
     true},
    {R"({"id":null,"x":[1,[2,{"a":{}}],"s",true,false,null]})", true},
    {"{\"id\":\"é中😀\"}", true},
    {shallow, true},
    {past, false},
    // Outside it, but valid: nlohmann decides.
    {R"({ "id": "a" })", false},
    {R"({"id":"a","id":"b"})", false}, // duplicate: the last wins
    {R"({"id":"a","author":"b"})", false}, // keys out of order
    {R"({"id":"\ud83d\ude00"})", false}, // surrogate pair
    {R"({"x":12345678901234567890})", false}, // 20 digits, fits in u64
    {R"({"x":-9223372036854775808})", false}, // i64 min
    {R"({"x":123456789012345678901234})", false}, // beyond u64: a double
    {R"({"x":1e400})", false}, // out of range
    {R"({"x":1e-400})", false},
    {"{\"x\":\"\\u00E9\"}", true}, // upper-case hex
    // Escaped member names: ordered by their unescaped bytes.
    {R"({"\u0061":1,"b":{"\n":2,"\u000b":3},"b\"":4})", true},
    {R"({"actions":{"state_delta":{"\u0061\u0062":1,"ac":2}},"i\u0064":"x"})", true},
    {R"({"b":1,"\u0061":2})", false}, // out of order once unescaped
    {R"({"\u0061":1,"a":2})", false}, // the same name twice
    {deep, false},
    // Corrupt: nlohmann refuses them, or event_from_json does.
    {R"({"id":"\ud800"})", false},
    {"{\"id\":\"\xff\"}", false},
    {"{\"id\":\"\xc0\xaf\"}", false},
    {"{\"id\":\"a\x01\"}", false},
    {R"({"id":"a")", false},
    {R"({"id":"a"}x)", false},
    {R"({"id":"a"},)", false},
    {R"({"timestamp":"x"})", false},
    {R"({"timestamp":1e400})", false},
    {R"({"partial":1})", false},
    {R"({"id":5})", false},
    {R"({"actions":[]})", false},
    {R"({"actions":{"state_delta":[]}})", false},
    {R"({"actions":{"state_remove":[1]}})", false},
    {R"({"actions":{"state_remove":"k"}})", false},
    {R"({"x":01})", false},
    {R"({"x":1.})", false},
    {R"({"x":.5})", false},
    {R"({"x":+1})", false},
    {R"({"x":-})", false},
    {R"({"x":1e})", false},
    {R"({"x":tru})", false},
    {R"({"x":"\x"})", false},
    {R"({"x":"\u12"})", false},
    {R"([])", false},
    {R"("id")", false},
    {"", false},
    {"{", false},
    {R"({"a":1,})", false},
    {R"({"a" :1})", false},
  };
  for (auto& c : cases) {
    INFO("text: ", c.text);
    CHECK(check_decode(c.text) == c.fast);
  }
}

TEST_CASE("parse_stored_text: decimals read bit for bit as nlohmann reads them") {
  auto same = [](const std::string& number) {
    INFO("number: ", number);
    const std::string text = "{\"x\":" + number + "}";
    json got;
    REQUIRE(model::parse_stored_text(text, got));
    const json want = json::parse(text);
    REQUIRE(got["x"].is_number_float());
    const double a = got["x"].get<double>(), b = want["x"].get<double>();
    CHECK(std::memcmp(&a, &b, sizeof a) == 0);
  };
  // Around the fast path's bounds: 16 digits, 2^53, 16 places, signs, zeros.
  for (const char* n :
       {"0.0", "-0.0", "0.1", "-0.5", "1764194321.123456", "9007199254740.992", "9007199254740.993",
        "900719925474099.2", "9999999999999999.0", "0.0000000000000001", "0.00000000000000001",
        "1.7976931348623157", "123456789012345.67", "5.0e-324", "2.5e-5", "1.0E22"})
    same(n);
  std::mt19937_64 rng(20261126);
  auto digits = [&](int n, bool lead) {
    std::string s;
    for (int i = 0; i < n; ++i)
      s += static_cast<char>('0' + (i == 0 && lead && n > 1 ? 1 + rng() % 9 : rng() % 10));
    return s;
  };
  for (int i = 0; i < 100000; ++i) {
    std::string n = rng() % 4 == 0 ? "-" : "";
    n += digits(1 + static_cast<int>(rng() % 12), true) + "."
      + digits(1 + static_cast<int>(rng() % 10), false);
    same(n);
  }
}

TEST_CASE("decode_event_text: a string's special bytes are found at every offset") {
  // The reader skips plain bytes eight at a time and the rest one by one: a
  // byte that ends a plain run must be seen wherever it falls in a word,
  // and wherever the string ends.
  struct special {
    std::string text; // as it appears inside the JSON string
    bool fast;
  };
  const std::vector<special> specials = {
    {"\\\"", true},  {"\\\\", true},     {"\\n", true},          {"\\u0001", true},
    {"\x7f", true},  {"\xc3\xa9", true}, {"\xe4\xb8\xad", true}, {"\xf0\x9f\x98\x80", true},
    {"\x01", false}, {"\x1f", false},    {"\xff", false},        {"\xc3", false},
  };
  for (std::size_t len = 0; len <= 24; ++len)
    for (std::size_t at = 0; at <= len; ++at)
      for (auto& sp : specials) {
        std::string inside = std::string(at, 'a') + sp.text + std::string(len - at, 'b');
        std::string text = "{\"id\":\"" + inside + "\",\"x\":\"" + std::string(len, 'c') + "\"}";
        CHECK(check_decode(text) == sp.fast);
      }
}

TEST_CASE("decode_event_text: the stored-text fuzzer's seeds and crashers agree with nlohmann") {
  std::size_t files = 0;
  for (auto& e : std::filesystem::directory_iterator(AGENTSTATE_STORED_TEXT_DIR)) {
    if (!e.is_regular_file())
      continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    INFO("input: ", e.path().string());
    check_decode(text);
    ++files;
  }
  CHECK(files >= 4);
}
