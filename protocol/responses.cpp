// SPDX-License-Identifier: Apache-2.0
#include "protocol/responses.hpp"

#include <algorithm>
#include <charconv>
#include <string_view>
#include <utility>

#include "model/event_text.hpp"
#include "model/json_text.hpp"
#include "model/json_writer.hpp"

namespace agentstate::protocol::detail {

namespace {

// Bytes that are not UTF-8 are replaced: values came from the validating
// parser or the engine; `replace` only guards against a message quoting
// bytes of a malformed line.
void append_lossy(std::string& out, const json& x) {
  (void)model::append_json(out, x, model::utf8_policy::replace);
}

template <class Int>
void append_int(std::string& out, Int v) {
  char digits[24];
  auto end = std::to_chars(digits, digits + sizeof digits, v).ptr;
  out.append(digits, end);
}

// An id as json::dump() writes it: integers and strings of plain bytes
// directly, anything else through the writer.
void append_id(std::string& out, const json& id) {
  if (id.is_number_unsigned())
    return append_int(out, id.get<std::uint64_t>());
  if (id.is_number_integer())
    return append_int(out, id.get<std::int64_t>());
  if (id.is_string()) {
    const auto& s = id.get_ref<const std::string&>();
    bool plain = true;
    for (unsigned char c : s)
      plain = plain && model::plain_bytes[c];
    if (plain) {
      out += '"';
      out += s;
      out += '"';
      return;
    }
  }
  append_lossy(out, id);
}

// An error message is for people: at most this many bytes of it are sent,
// so a message that quotes a malformed line (a parser's "last read", an
// unknown method's name) never echoes the line whole.
constexpr std::size_t max_message_bytes = 1024;

std::string bounded_message(const std::string& m) {
  if (m.size() <= max_message_bytes)
    return m;
  auto cut = max_message_bytes;
  while (cut > 0 && (static_cast<unsigned char>(m[cut]) & 0xc0) == 0x80)
    --cut; // not inside a UTF-8 sequence
  return m.substr(0, cut) + "... (" + std::to_string(m.size()) + " bytes in all)";
}

} // namespace

rpc_failure make_failure(int code, std::string message, errc kind) {
  return rpc_failure{code, std::move(message), to_string(kind), std::nullopt, std::nullopt, json()};
}

rpc_failure from_engine(const error& e) {
  return rpc_failure{rpc_code::engine_error, e.message,       to_string(e.code),
                     e.current_version,      e.oldest_cursor, json()};
}

rpc_failure internal_failure(const char* where, const char* what) {
  return make_failure(rpc_code::engine_error, std::string("server error in ") + where + ": " + what,
                      errc::internal);
}

std::string response_line(const json& id, const outcome& o) {
  std::string out;
  auto raw = std::get_if<raw_result>(&o);
  out.reserve(64 + (raw ? raw->text.size() : 0));
  out += R"({"jsonrpc":"2.0","id":)";
  append_id(out, id);
  if (auto r = std::get_if<json>(&o)) {
    out += R"(,"result":)";
    append_lossy(out, *r);
  } else if (raw) {
    out += R"(,"result":)";
    out += raw->text;
  } else {
    out += R"(,"error":)";
    append_lossy(out, error_object(std::get<rpc_failure>(o)));
  }
  out += '}';
  return out;
}

json error_object(const rpc_failure& f) {
  json data{{"kind", f.kind}};
  if (f.current_version)
    data["current_version"] = *f.current_version;
  if (f.oldest)
    data["oldest"] = *f.oldest;
  if (f.data.is_object())
    for (auto it = f.data.begin(); it != f.data.end(); ++it)
      data[it.key()] = it.value();
  return json{{"code", f.code}, {"message", bounded_message(f.message)}, {"data", std::move(data)}};
}

std::string response_line(const json& id, outcome&& o) {
  auto raw = std::get_if<raw_result>(&o);
  if (!raw || !(id.is_number_unsigned() || id.is_number_integer()))
    return response_line(id, static_cast<const outcome&>(o));
  // The head goes in front of the result's own text: no second buffer.
  static constexpr std::string_view open = R"({"jsonrpc":"2.0","id":)";
  static constexpr std::string_view result = R"(,"result":)";
  char head[open.size() + 24 + result.size()];
  char* end = std::copy(open.begin(), open.end(), head);
  end = id.is_number_unsigned() ? std::to_chars(end, end + 24, id.get<std::uint64_t>()).ptr
                                : std::to_chars(end, end + 24, id.get<std::int64_t>()).ptr;
  end = std::copy(result.begin(), result.end(), end);
  raw->text.insert(0, head, static_cast<std::size_t>(end - head));
  raw->text += '}';
  return std::move(raw->text);
}

outcome to_outcome(result<void>& r) {
  if (!r)
    return from_engine(r.err());
  return outcome{json(nullptr)};
}

outcome append_outcome(result<append_result>& r) {
  if (!r)
    return from_engine(r.err());
  try {
    // The engine's own encoding of the stored event, when it kept one.
    std::string encoded;
    std::string_view text = r->text;
    if (text.empty()) {
      auto e = model::encode_event_text(r->ev);
      if (!e) // a string that is not UTF-8: the general encoder replaces it
        return outcome{
          json{{"event", to_json(r->ev)}, {"version", r->version}, {"cursor", r->cursor}}};
      encoded = std::move(*e);
      text = encoded;
    }
    raw_result out;
    // Room for the response's head too (response_line(id, outcome&&)).
    out.text.reserve(text.size() + 128 + r->cursor.size());
    out.text += R"({"cursor":)";
    model::append_escaped(out.text, r->cursor);
    out.text += R"(,"event":)";
    out.text += text;
    out.text += R"(,"version":)";
    append_int(out.text, r->version);
    out.text += '}';
    return outcome{std::move(out)};
  } catch (const std::exception& e) {
    return internal_failure("result encoding", e.what());
  }
}

} // namespace agentstate::protocol::detail
