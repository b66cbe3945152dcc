// SPDX-License-Identifier: Apache-2.0
// model::append_json writes what json::dump() writes, byte for byte: doubles
// (random bit patterns, subnormals, every binary exponent, the layout
// thresholds), integers at their limits, nested values, unicode, control
// characters, and strings that are not UTF-8 under both policies (strict
// refuses where dump() throws type_error 316; replace matches
// error_handler_t::replace).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "agentstate/json.hpp"
#include "model/event_text.hpp"
#include "model/json_writer.hpp"

using namespace agentstate;

namespace {

std::string written(const json& x, model::utf8_policy p = model::utf8_policy::strict) {
  std::string out;
  REQUIRE(model::append_json(out, x, p));
  return out;
}

std::string double_text(double v) {
  std::string out;
  model::append_double(out, v);
  return out;
}

double from_bits(std::uint64_t b) {
  double v;
  std::memcpy(&v, &b, sizeof v);
  return v;
}

// Checks one double both ways (append_double and inside append_json);
// returns whether they matched so that loops report a count.
bool same_double(double v) {
  const auto want = json(v).dump();
  const auto got = double_text(v);
  if (got != want) {
    char hex[64];
    std::snprintf(hex, sizeof hex, "%a", v);
    INFO("value " << hex);
    CHECK(got == want);
    return false;
  }
  return true;
}

// Bytes that make near-valid UTF-8: pieces of valid sequences, lead bytes
// without their tails, continuation bytes alone, overlong and surrogate
// leads, bytes never valid, controls, quotes and backslashes.
std::string random_bytes(std::mt19937_64& rng, std::size_t max_len) {
  static const std::vector<std::string> pieces = {"a",
                                                  "Z",
                                                  " ",
                                                  "\"",
                                                  "\\",
                                                  "/",
                                                  "\n",
                                                  "\t",
                                                  "\b",
                                                  "\f",
                                                  "\r",
                                                  std::string(1, '\0'),
                                                  "\x01",
                                                  "\x1f",
                                                  "\x7f",
                                                  "\xc3\xa9",
                                                  "\xe2\x82\xac",
                                                  "\xf0\x9f\x98\x80",
                                                  "\xf4\x8f\xbf\xbf",
                                                  "\xc3",
                                                  "\xe2\x82",
                                                  "\xf0\x9f\x98",
                                                  "\x80",
                                                  "\xbf",
                                                  "\xc0\xaf",
                                                  "\xc1\xbf",
                                                  "\xe0\x80\xaf",
                                                  "\xe0\x9f\xbf",
                                                  "\xed\xa0\x80",
                                                  "\xed\xbf\xbf",
                                                  "\xf0\x8f\xbf\xbf",
                                                  "\xf4\x90\x80\x80",
                                                  "\xf5\x80\x80\x80",
                                                  "\xf8",
                                                  "\xfe",
                                                  "\xff",
                                                  "\xe0",
                                                  "\xed",
                                                  "\xf4"};
  std::string s;
  const auto n = rng() % (max_len + 1);
  for (std::size_t i = 0; i < n; ++i) {
    if (rng() % 4 == 0)
      s += static_cast<char>(rng() & 0xff);
    else
      s += pieces[rng() % pieces.size()];
  }
  return s;
}

// A random value of at most `depth` levels whose strings are valid UTF-8
// (keys and strings from a fixed set with unicode and control characters).
json random_value(std::mt19937_64& rng, int depth) {
  static const std::vector<std::string> words = {
    "",         "a",           "state_delta",
    "k\"q",     "back\\slash", "tab\tnew\nline",
    "\x01\x1f", "caf\xc3\xa9", "\xe2\x82\xac\xf0\x9f\x98\x80",
    "/slash/",  "\x7f"};
  switch (rng() % (depth > 0 ? 10 : 8)) {
    case 0: return nullptr;
    case 1: return rng() % 2 == 0;
    case 2: return static_cast<std::int64_t>(rng());
    case 3: return static_cast<std::uint64_t>(rng());
    case 4: return from_bits(rng());
    case 5: return static_cast<double>(static_cast<std::int64_t>(rng() >> (rng() % 64))) / 1000.0;
    case 6:
    case 7: return words[rng() % words.size()];
    case 8: {
      json a = json::array();
      for (auto n = rng() % 5; n > 0; --n)
        a.push_back(random_value(rng, depth - 1));
      return a;
    }
    default: {
      json o = json::object();
      for (auto n = rng() % 5; n > 0; --n)
        o[words[rng() % words.size()] + std::to_string(rng() % 3)] = random_value(rng, depth - 1);
      return o;
    }
  }
}

} // namespace

TEST_CASE("json writer: doubles of random bit patterns match dump()") {
  std::mt19937_64 rng(20261127);
  int mismatches = 0;
  for (int i = 0; i < 300000; ++i)
    mismatches += !same_double(from_bits(rng()));
  CHECK(mismatches == 0);
}

TEST_CASE("json writer: subnormal, power-of-two and threshold doubles match dump()") {
  std::mt19937_64 rng(45);
  int mismatches = 0;
  // Subnormals: random fractions with a zero exponent, short and long.
  for (int i = 0; i < 50000; ++i)
    mismatches += !same_double(from_bits((rng() & ((std::uint64_t{1} << 52) - 1)) >> (rng() % 52)));
  // Every binary exponent: the power of two (its lower neighbour is nearer)
  // and the doubles either side of it.
  for (std::uint64_t e = 0; e < 2047; ++e) {
    const std::uint64_t bits = e << 52;
    for (std::uint64_t b : {bits, bits + 1, bits + 2, bits - (e > 0 ? 1 : 0)})
      for (double v : {from_bits(b), -from_bits(b)})
        mismatches += !same_double(v);
  }
  // Around the layout's thresholds: 1e-5 .. 1e-4 and 1e15 .. 1e17, and
  // short decimals at every scale.
  for (int p = -330; p <= 310; ++p)
    for (double m : {1.0, 1.5, 9.999, 1.25, 3.0, 7.0e-1, 123456789.0})
      for (double v : {m * std::pow(10.0, p), std::nextafter(m * std::pow(10.0, p), 0.0)})
        mismatches += !same_double(v);
  for (int i = 0; i < 50000; ++i) {
    const auto n = static_cast<std::int64_t>(rng() >> (rng() % 64));
    mismatches += !same_double(static_cast<double>(n));
    mismatches +=
      !same_double(static_cast<double>(n) / std::pow(10.0, static_cast<int>(rng() % 24)));
  }
  const double specials[] = {0.0,
                             -0.0,
                             std::numeric_limits<double>::denorm_min(),
                             -std::numeric_limits<double>::denorm_min(),
                             std::numeric_limits<double>::min(),
                             std::numeric_limits<double>::max(),
                             std::numeric_limits<double>::lowest(),
                             std::numeric_limits<double>::infinity(),
                             -std::numeric_limits<double>::infinity(),
                             std::numeric_limits<double>::quiet_NaN(),
                             1e15,
                             1e16,
                             999999999999999.0,
                             9007199254740993.0,
                             1e-4,
                             1e-5,
                             0.00012345,
                             0.1,
                             1e21,
                             1e100,
                             1e-100,
                             1746000000.123456};
  for (double v : specials)
    mismatches += !same_double(v);
  CHECK(mismatches == 0);
  CHECK(double_text(std::numeric_limits<double>::quiet_NaN()) == "null");
  CHECK(double_text(-0.0) == "-0.0");
  CHECK(double_text(1e15) == "1e+15");
  CHECK(double_text(123456789012345.0) == "123456789012345.0");
  CHECK(double_text(0.0001) == "0.0001");
  CHECK(double_text(0.00001) == "1e-05");
  CHECK(double_text(1.5e300) == "1.5e+300");
}

TEST_CASE("json writer: integers at the int64 and uint64 limits match dump()") {
  const std::int64_t ints[] = {0,
                               -1,
                               1,
                               std::numeric_limits<std::int64_t>::min(),
                               std::numeric_limits<std::int64_t>::min() + 1,
                               std::numeric_limits<std::int64_t>::max(),
                               std::numeric_limits<std::int32_t>::min(),
                               std::numeric_limits<std::int32_t>::max()};
  for (auto v : ints)
    CHECK(written(json(v)) == json(v).dump());
  const std::uint64_t uints[] = {0, 1, std::numeric_limits<std::uint64_t>::max(),
                                 std::numeric_limits<std::uint64_t>::max() - 1,
                                 std::uint64_t{1} << 63};
  for (auto v : uints)
    CHECK(written(json(v)) == json(v).dump());
  // As parsed: a number beyond int64 is unsigned, beyond uint64 a double.
  for (const char* text : {"18446744073709551615", "-9223372036854775808", "18446744073709551616",
                           "-9223372036854775809", "-0", "0.0", "1E2", "5e-324"}) {
    const auto x = json::parse(text);
    CHECK(written(x) == x.dump());
  }
}

TEST_CASE("json writer: nested values with unicode and control characters match dump()") {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 20000; ++i) {
    const auto x = random_value(rng, 4);
    CHECK(written(x) == x.dump());
    CHECK(written(x, model::utf8_policy::replace)
          == x.dump(-1, ' ', false, json::error_handler_t::replace));
  }
  // Every single byte below 0x80 inside a string and as a key.
  for (int c = 0; c < 0x80; ++c) {
    const std::string s = "x" + std::string(1, static_cast<char>(c)) + "y";
    const json x = {{s, s}, {"list", {s, json::array(), json::object()}}};
    CHECK(written(x) == x.dump());
  }
  const json empty_things = {json::object(), json::array(), "", nullptr, true, false};
  CHECK(written(empty_things) == empty_things.dump());
}

TEST_CASE("json writer: binary and discarded values match dump()") {
  const json bin = json::binary({1, 2, 255});
  CHECK(written(bin) == bin.dump());
  const json typed = json::binary({0, 7}, 42);
  CHECK(written(typed) == typed.dump());
  const json empty = json::binary({});
  CHECK(written(empty) == empty.dump());
  const json discarded(json::value_t::discarded);
  CHECK(written(discarded) == discarded.dump());
}

TEST_CASE("json writer: strings that are not UTF-8, strict and replace, match dump()") {
  std::mt19937_64 rng(316);
  int refused = 0;
  for (int i = 0; i < 100000; ++i) {
    const auto s = random_bytes(rng, 8);
    // As a value and as a key, each inside a container.
    for (const json& x : {json(s), json::array({1, s}), json{{s, 1}}}) {
      std::string want_strict;
      bool dump_refused = false;
      try {
        want_strict = x.dump();
      } catch (const json::type_error& e) {
        CHECK(e.id == 316);
        dump_refused = true;
      }
      std::string got;
      const bool ok = model::append_json(got, x);
      CHECK(ok == !dump_refused);
      if (ok && !dump_refused)
        CHECK(got == want_strict);
      refused += dump_refused;
      CHECK(written(x, model::utf8_policy::replace)
            == x.dump(-1, ' ', false, json::error_handler_t::replace));
    }
  }
  // The generator makes both kinds often.
  CHECK(refused > 50000);
  CHECK(refused < 250000);
  // Each lone byte.
  for (int c = 0; c < 256; ++c) {
    const json x = std::string(1, static_cast<char>(c));
    CHECK(written(x, model::utf8_policy::replace)
          == x.dump(-1, ' ', false, json::error_handler_t::replace));
  }
}

TEST_CASE("json writer: an event's stored text is the dump() of its JSON") {
  std::mt19937_64 rng(11);
  for (int i = 0; i < 2000; ++i) {
    event ev;
    ev.id = "e" + std::to_string(i);
    ev.invocation_id = "inv-\xc3\xa9";
    ev.author = "agent\t1";
    ev.timestamp =
      i % 3 == 0 ? from_bits(rng()) : 1746000000.0 + static_cast<double>(rng() % 1000000) / 1000.0;
    if (i % 2)
      ev.content = random_value(rng, 3);
    ev.actions.state_delta = {{"n", from_bits(rng())}, {"s", "caf\xc3\xa9\n"}};
    if (i % 5 == 0)
      ev.extra = {{"custom", random_value(rng, 2)}};
    auto text = model::encode_event_text(ev);
    REQUIRE(text);
    CHECK(*text == to_json(ev).dump());
  }
}

TEST_CASE("json writer: dump_json and encode_event_text refuse invalid UTF-8 as invalid_argument") {
  for (const char* bad : {"a\xff", "\xc3", "\xed\xa0\x80", "ok\xc3\x28"}) {
    auto as_value = dump_json(json{{"k", {1, bad}}});
    REQUIRE_FALSE(as_value);
    CHECK(as_value.err().code == errc::invalid_argument);
    auto as_key = dump_json(json{{bad, 1}});
    REQUIRE_FALSE(as_key);
    CHECK(as_key.err().code == errc::invalid_argument);
    event ev;
    ev.id = "e1";
    ev.author = "a";
    ev.content = json{{"text", bad}};
    auto text = model::encode_event_text(ev);
    REQUIRE_FALSE(text);
    CHECK(text.err().code == errc::invalid_argument);
  }
}
