// SPDX-License-Identifier: Apache-2.0
// tests/fuzz/stored_text_check.hpp: the differential check of the stored-text
// readers (store/event_text.hpp) against nlohmann's parser, shared by the
// libFuzzer target (stored_text_fuzz.cpp, clang) and the doctest suites
// (store/codec_test.cpp replays tests/fuzz/stored_text/ and its own cases).
//
// Whenever parse_stored_text or decode_event_text accepts a text, the result
// must be identical, number types and -0.0 included, to what json::parse
// (and event_from_json) make of it; they may refuse any text.
#pragma once

#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "agentstate/json.hpp"
#include "agentstate/types.hpp"
#include "model/event_text.hpp"

namespace stored_text_check {

using agentstate::event;
using agentstate::json;

/// Equality that tells number types apart (nlohmann's == does not: 1u == 1)
/// and -0.0 from 0.0.
inline bool same(const json& a, const json& b) {
  if (a.type() != b.type())
    return false;
  switch (a.type()) {
    case json::value_t::object: {
      if (a.size() != b.size())
        return false;
      for (auto i = a.begin(), k = b.begin(); i != a.end(); ++i, ++k)
        if (i.key() != k.key() || !same(*i, *k))
          return false;
      return true;
    }
    case json::value_t::array: {
      if (a.size() != b.size())
        return false;
      for (std::size_t i = 0; i < a.size(); ++i)
        if (!same(a[i], b[i]))
          return false;
      return true;
    }
    case json::value_t::number_float: {
      auto x = a.get<double>(), y = b.get<double>();
      return std::memcmp(&x, &y, sizeof x) == 0;
    }
    default: return a == b;
  }
}

inline bool same_double(const std::optional<double>& a, const std::optional<double>& b) {
  return a.has_value() == b.has_value() && (!a || std::memcmp(&*a, &*b, sizeof(double)) == 0);
}

inline bool same_event(const event& a, const event& b) {
  return a.id == b.id && a.invocation_id == b.invocation_id && a.author == b.author
    && same_double(a.timestamp, b.timestamp) && a.partial == b.partial
    && a.content.has_value() == b.content.has_value()
    && (!a.content || same(*a.content, *b.content))
    && same(a.actions.state_delta, b.actions.state_delta)
    && a.actions.state_remove == b.actions.state_remove
    && same(a.actions.artifact_delta, b.actions.artifact_delta)
    && same(a.actions.extra, b.actions.extra) && same(a.extra, b.extra);
}

/// What the general path makes of `text`: the event, or nullopt when it is
/// corrupt (does not parse, or does not decode).
inline std::optional<event> general_decode(std::string_view text) {
  auto j = json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded())
    return std::nullopt;
  auto ev = agentstate::event_from_json(std::move(j));
  if (!ev)
    return std::nullopt;
  return std::move(*ev);
}

/// "" when both readers agree with nlohmann on `text`, else what differs.
/// `took` (optional) is set to whether decode_event_text accepted it.
inline std::string check(std::string_view text, bool* took = nullptr) {
  json fast;
  if (agentstate::model::parse_stored_text(text, fast)) {
    auto j = json::parse(text.begin(), text.end(), nullptr, false);
    if (j.is_discarded())
      return "parse_stored_text accepted a text nlohmann refuses";
    if (!same(fast, j))
      return "parse_stored_text differs from json::parse";
  }
  event ev;
  bool accepted = agentstate::model::decode_event_text(text, ev);
  if (took)
    *took = accepted;
  if (accepted) {
    auto want = general_decode(text);
    if (!want)
      return "decode_event_text accepted a text the general path refuses";
    if (!same_event(ev, *want))
      return "decode_event_text differs from event_from_json(json::parse)";
  }
  return "";
}

} // namespace stored_text_check
