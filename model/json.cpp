// SPDX-License-Identifier: Apache-2.0
#include "agentstate/json.hpp"

#include <utility>
#include <vector>

#include "model/json_encoder.hpp"
#include "model/json_writer.hpp"

namespace agentstate {

namespace {

struct depth_exceeded {};

} // namespace

result<json> parse_json(std::string_view text, std::size_t max_depth) {
  // The callback sees each container start with the number of enclosing
  // containers; refusing there stops the parse before deep values exist.
  auto cb = [max_depth](int depth, json::parse_event_t ev, json&) -> bool {
    if ((ev == json::parse_event_t::object_start || ev == json::parse_event_t::array_start)
        && static_cast<std::size_t>(depth) >= max_depth)
      throw depth_exceeded{};
    return true;
  };
  // nlohmann stops at a raw NUL as at the end of input, which would accept
  // "{}\0garbage". Valid JSON text never holds a raw NUL (inside strings
  // control characters must be escaped), so refuse it here.
  if (auto nul = text.find('\0'); nul != std::string_view::npos)
    return error{errc::invalid_argument,
                 "invalid JSON: raw NUL byte at offset " + std::to_string(nul)};
  try {
    return json::parse(text.begin(), text.end(), cb, true, false);
  } catch (const depth_exceeded&) {
    return error{errc::too_large,
                 "JSON nesting deeper than " + std::to_string(max_depth) + " levels"};
  } catch (const json::exception& e) {
    return error{errc::invalid_argument, std::string("invalid JSON: ") + e.what()};
  } catch (const std::exception& e) {
    return error{errc::internal, std::string("JSON parser: ") + e.what()};
  }
}

std::size_t json_depth(const json& x, std::size_t limit) {
  if (!x.is_structured())
    return 0;
  // Level 1 is walked here, so a value without nested containers (the usual
  // state value) allocates nothing.
  std::size_t deepest = 1;
  if (deepest > limit)
    return deepest;
  std::vector<std::pair<const json*, std::size_t>> todo;
  for (const auto& child : x)
    if (child.is_structured())
      todo.emplace_back(&child, 1);
  while (!todo.empty()) {
    auto [node, d] = todo.back();
    todo.pop_back();
    if (!node->is_structured())
      continue;
    auto here = d + 1;
    if (here > deepest) {
      deepest = here;
      if (deepest > limit)
        return deepest;
    }
    for (const auto& child : *node)
      if (child.is_structured())
        todo.emplace_back(&child, here);
  }
  return deepest;
}

result<std::string> dump_json(const json& x) {
  thread_local model::json_encoder enc;
  enc.buf.clear();
  try {
    if (!model::append_json(enc.buf, x))
      return error{errc::invalid_argument, "cannot encode value: a string is not valid UTF-8"};
    return enc.take();
  } catch (const std::exception& e) {
    return error{errc::internal, std::string("JSON encoder: ") + e.what()};
  }
}

} // namespace agentstate
