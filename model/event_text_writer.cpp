// SPDX-License-Identifier: Apache-2.0
// encode_event_text: the stored text of an event, written straight from the
// struct (model/event_text.hpp).
#include "model/event_text.hpp"

#include <algorithm>
#include <exception>
#include <utility>
#include <vector>

#include "model/json_encoder.hpp"
#include "model/json_text.hpp"
#include "model/json_writer.hpp"

namespace agentstate::model {

namespace {

// An event's state_remove as a JSON array. False when a key is not valid
// UTF-8.
bool append_removes(std::string& out, const std::vector<std::string>& removes) {
  out += '[';
  for (std::size_t i = 0; i < removes.size(); ++i) {
    if (i)
      out += ',';
    if (!append_escaped(out, removes[i]))
      return false;
  }
  out += ']';
  return true;
}

// One member of an object being written, in the order keys sort.
struct member {
  enum class kind { value, text, actions, removes };
  std::string_view key;
  kind how = kind::value;
  const json* value = nullptr;
  const std::string* text = nullptr;
};

bool key_less(const member& a, const member& b) {
  return a.key < b.key;
}

class writer {
public:
  explicit writer(json_encoder& enc) : out_(enc.buf) {}

  // False when a string is not valid UTF-8.
  bool object(std::vector<member>& members, const event& ev) {
    // Insertion sort (stable) for the usual handful of members: stable_sort
    // allocates a buffer.
    if (members.size() <= 16) {
      for (std::size_t i = 1; i < members.size(); ++i)
        for (std::size_t j = i; j > 0 && key_less(members[j], members[j - 1]); --j)
          std::swap(members[j], members[j - 1]);
    } else {
      std::stable_sort(members.begin(), members.end(), key_less);
    }
    out_ += '{';
    bool first = true;
    for (auto& m : members) {
      if (!first)
        out_ += ',';
      first = false;
      if (!string(m.key))
        return false;
      out_ += ':';
      switch (m.how) {
        case member::kind::value:
          if (!append_json(out_, *m.value))
            return false;
          break;
        case member::kind::text:
          if (!string(*m.text))
            return false;
          break;
        case member::kind::actions:
          if (!actions(ev))
            return false;
          break;
        case member::kind::removes:
          if (!append_removes(out_, ev.actions.state_remove))
            return false;
          break;
      }
    }
    out_ += '}';
    return true;
  }

private:
  bool string(std::string_view s) { return append_escaped(out_, s); }

  // "actions": its unknown members, then state_delta, state_remove (when not
  // empty) and artifact_delta, which take precedence over unknown members of
  // the same name (as in to_json(event)).
  bool actions(const event& ev) {
    const auto& a = ev.actions;
    std::vector<member> m;
    m.reserve(3 + (a.extra.is_object() ? a.extra.size() : 0));
    m.push_back({"state_delta", member::kind::value, &a.state_delta});
    if (!a.state_remove.empty())
      m.push_back({"state_remove", member::kind::removes});
    m.push_back({"artifact_delta", member::kind::value, &a.artifact_delta});
    if (a.extra.is_object())
      for (auto it = a.extra.begin(); it != a.extra.end(); ++it)
        if (it.key() != "state_delta" && it.key() != "artifact_delta"
            && !(it.key() == "state_remove" && !a.state_remove.empty()))
          m.push_back({it.key(), member::kind::value, &it.value()});
    return object(m, ev);
  }

  std::string& out_;
};

bool has_members(const json& extra) {
  return extra.is_object() && !extra.empty();
}

// The event without unknown members, in key order with the names written as
// they are (none needs escaping): what `writer` writes for it, without
// gathering and sorting the members. False as for writer::object.
bool known_only(json_encoder& enc, const event& ev) {
  std::string& out = enc.buf;
  const auto& a = ev.actions;
  out += R"({"actions":{"artifact_delta":)";
  if (!append_json(out, a.artifact_delta))
    return false;
  out += R"(,"state_delta":)";
  if (!append_json(out, a.state_delta))
    return false;
  if (!a.state_remove.empty()) {
    out += R"(,"state_remove":)";
    if (!append_removes(out, a.state_remove))
      return false;
  }
  out += R"(},"author":)";
  if (!append_escaped(out, ev.author))
    return false;
  if (ev.content) {
    out += R"(,"content":)";
    if (!append_json(out, *ev.content))
      return false;
  }
  out += R"(,"id":)";
  if (!append_escaped(out, ev.id))
    return false;
  out += R"(,"invocation_id":)";
  if (!append_escaped(out, ev.invocation_id))
    return false;
  if (ev.partial)
    out += *ev.partial ? R"(,"partial":true)" : R"(,"partial":false)";
  if (ev.timestamp) {
    out += R"(,"timestamp":)";
    append_double(out, *ev.timestamp);
  }
  out += '}';
  return true;
}

// An event with unknown members: every member gathered, sorted and written
// by `writer`. False as for writer::object.
bool with_unknown(json_encoder& enc, const event& ev) {
  writer w(enc);
  // Top level: the known members, then unknown ones that do not collide
  // with a known name (known members win, as in to_json(event)).
  std::vector<member> m;
  m.reserve(7 + (ev.extra.is_object() ? ev.extra.size() : 0));
  m.push_back({"id", member::kind::text, nullptr, &ev.id});
  m.push_back({"invocation_id", member::kind::text, nullptr, &ev.invocation_id});
  m.push_back({"author", member::kind::text, nullptr, &ev.author});
  json timestamp, partial;
  if (ev.timestamp) {
    timestamp = *ev.timestamp;
    m.push_back({"timestamp", member::kind::value, &timestamp});
  }
  if (ev.partial) {
    partial = *ev.partial;
    m.push_back({"partial", member::kind::value, &partial});
  }
  if (ev.content)
    m.push_back({"content", member::kind::value, &*ev.content});
  m.push_back({"actions", member::kind::actions});
  if (ev.extra.is_object()) {
    const std::size_t known = m.size();
    for (auto it = ev.extra.begin(); it != ev.extra.end(); ++it) {
      bool taken = false;
      for (std::size_t k = 0; k < known && !taken; ++k)
        taken = m[k].key == it.key();
      if (!taken)
        m.push_back({it.key(), member::kind::value, &it.value()});
    }
  }
  return w.object(m, ev);
}

} // namespace

result<std::string> encode_event_text(const event& ev) {
  thread_local json_encoder enc;
  enc.buf.clear();
  try {
    const bool ok = has_members(ev.extra) || has_members(ev.actions.extra) ? with_unknown(enc, ev)
                                                                           : known_only(enc, ev);
    if (!ok)
      return error{errc::invalid_argument,
                   "event: cannot encode value: a string is not valid UTF-8"};
  } catch (const std::exception& e) {
    return error{errc::internal, std::string("event: JSON encoder: ") + e.what()};
  }
  return enc.take();
}

} // namespace agentstate::model
