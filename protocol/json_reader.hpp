// SPDX-License-Identifier: Apache-2.0
// protocol/json_reader.hpp: the request line's JSON parser. A direct
// recursive reader for well-formed text, which builds the same value as
// agentstate::parse_json (nlohmann's parser behind a depth callback) at a
// fraction of its cost, and hands everything it does not read to
// parse_json, so values and error messages are parse_json's for every
// input. Internal to agentstate_protocol.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "agentstate/error.hpp"
#include "agentstate/json.hpp"

namespace agentstate::protocol::detail {

/// A cursor over the text of one request line, for readers that take a
/// line's known members straight into their own structures (request.cpp).
/// Each read_* reads the item at the cursor (after any whitespace) and
/// returns false, leaving the cursor unspecified, when the text there is
/// outside read_json_fast's form; the reader then gives up on the line and
/// the general path (parse_request_json) decides what it is. Borrows `text`.
class json_cursor {
public:
  /// `max_depth` as for parse_json: a container that `max_depth` containers
  /// enclose is outside the form.
  json_cursor(std::string_view text, std::size_t max_depth);

  /// Skips whitespace; true (and steps over it) when `c` is next.
  bool take(char c);
  /// Skips whitespace; true when `c` is next (not taken).
  bool next_is(char c);
  /// True when a container that `depth` containers enclose may start.
  bool may_open(std::size_t depth) const { return depth < max_depth_; }
  /// A string (the next item must be one), appended to `out`.
  bool read_string(std::string& out);
  /// A member name: `out` views the text when the name has no escapes, else
  /// `scratch`, which holds it decoded. Valid until the next read.
  bool read_key(std::string_view& out, std::string& scratch);
  /// A number, as parse_json types it.
  bool read_number(json& out);
  /// Any value that `depth` containers enclose.
  bool read_value(json& out, std::size_t depth);
  /// The literal null, taken when next.
  bool take_null();
  /// Skips whitespace; true at the end of the text.
  bool at_end();

private:
  void ws();
  bool hex4(unsigned& out);
  bool escape(std::string& out);
  bool literal(std::string_view word);

  std::string_view text_;
  const char* p_;
  const char* end_;
  std::size_t max_depth_;
};

/// The members of an object whose '{' was taken, up to and with its '}':
/// for each, `member(name)` reads the value after the colon (the name views
/// the text or a scratch buffer, valid until the next read). False when the
/// text is not such an object or `member` returns false.
template <class F>
bool read_members(json_cursor& c, F&& member) {
  if (c.take('}'))
    return true;
  std::string scratch;
  for (;;) {
    std::string_view name;
    if (!c.read_key(name, scratch) || !c.take(':') || !member(name))
      return false;
    if (c.take('}'))
      return true;
    if (!c.take(','))
      return false;
  }
}

/// The items of an array whose '[' was taken, up to and with its ']', each
/// read by `item()`. False when the text is not such an array or `item`
/// returns false.
template <class F>
bool read_items(json_cursor& c, F&& item) {
  if (c.take(']'))
    return true;
  for (;;) {
    if (!item())
      return false;
    if (c.take(']'))
      return true;
    if (!c.take(','))
      return false;
  }
}

/// Reads `text` into `out` when it is one JSON value in the form this reader
/// takes: no byte order mark, no member name twice in one object, nesting at
/// most `max_depth` deep, integers within int64/uint64, finite doubles that
/// need no rounding to zero or infinity. Whenever it returns true, `out`
/// equals (number types included) what parse_json(text, max_depth) returns;
/// it returns false, `out` unspecified, for every other text, malformed ones
/// included. Cost: one pass; an allocation per container, per member and per
/// string longer than the small-string buffer; recursion, ~200 bytes of stack
/// per level. Throws only std::bad_alloc.
bool read_json_fast(std::string_view text, std::size_t max_depth, json& out);

/// parse_json(text, max_depth), through read_json_fast when it reads the
/// text. Same contract as parse_json: never throws.
result<json> parse_request_json(std::string_view text, std::size_t max_depth);

} // namespace agentstate::protocol::detail
