// SPDX-License-Identifier: Apache-2.0
#include "store/records.hpp"

#include "model/event_text.hpp"
#include "store/errors.hpp"
#include "store/keys.hpp"

namespace agentstate::store {

namespace {

constexpr char record_tag = 1;
constexpr char event_tag = 1;
constexpr std::size_t record_size = 1 + 8 + 8 + 8;

void append_le64(std::string& out, std::uint64_t x) {
  for (int i = 0; i < 8; ++i)
    out.push_back(static_cast<char>((x >> (8 * i)) & 0xff));
}

std::uint64_t read_le64(const char* p) {
  std::uint64_t x = 0;
  for (int i = 7; i >= 0; --i)
    x = (x << 8) | static_cast<unsigned char>(p[i]);
  return x;
}

} // namespace

result<json> parse_stored(std::string_view text) {
  json fast;
  if (model::parse_stored_text(text, fast))
    return fast;
  // Stored JSON was depth-checked when it was written, so the plain parser
  // (no per-value callback: about twice as fast) is safe here.
  auto v = json::parse(text.begin(), text.end(), nullptr, false);
  if (v.is_discarded())
    return error{errc::internal, "corrupt store: a stored JSON text does not parse"};
  return v;
}

std::string encode_record(const session_record& x) {
  std::string out;
  out.reserve(record_size);
  out.push_back(record_tag);
  append_le64(out, x.version);
  append_le64(out, bits_of(x.last_update_time));
  append_le64(out, bits_of(x.created));
  return out;
}

std::optional<session_record> decode_record(std::string_view x) {
  if (x.size() != record_size || x[0] != record_tag)
    return std::nullopt;
  session_record r;
  r.version = read_le64(x.data() + 1);
  r.last_update_time = double_of(read_le64(x.data() + 9));
  r.created = double_of(read_le64(x.data() + 17));
  return r;
}

std::string encode_event_row(double timestamp, std::string_view json_text) {
  std::string out;
  out.reserve(9 + json_text.size());
  out.push_back(event_tag);
  append_le64(out, bits_of(timestamp));
  out.append(json_text);
  return out;
}

std::optional<double> event_row_timestamp(std::string_view row) {
  if (row.size() < 9 || row[0] != event_tag)
    return std::nullopt;
  return double_of(read_le64(row.data() + 1));
}

result<void> decode_event_row(std::string_view row, event& out) {
  if (row.size() < 9 || row[0] != event_tag)
    return corrupt("event row with unknown tag");
  if (model::decode_event_text(event_row_text(row), out))
    return {};
  auto j = parse_stored(event_row_text(row));
  if (!j)
    return std::move(j).err();
  auto ev = event_from_json(std::move(*j));
  if (!ev)
    return corrupt("event: " + ev.err().message);
  out = std::move(*ev);
  return {};
}

result<event> decode_event_row(std::string_view row) {
  event ev;
  if (auto r = decode_event_row(row, ev); !r)
    return std::move(r).err();
  return ev;
}

} // namespace agentstate::store
