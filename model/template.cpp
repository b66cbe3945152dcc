// SPDX-License-Identifier: Apache-2.0
#include "agentstate/template.hpp"

#include <algorithm>

#include "model/text.hpp"

namespace agentstate {

namespace {

bool is_identifier(std::string_view s) {
  if (s.empty())
    return false;
  auto head = [](char c) { return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
  if (!head(s[0]))
    return false;
  for (char c : s.substr(1))
    if (!head(c) && !(c >= '0' && c <= '9'))
      return false;
  return true;
}

// A state reference: an identifier with at most one scope prefix.
bool is_state_name(std::string_view s) {
  for (std::string_view p : {"app:", "user:", "temp:"})
    if (s.size() > p.size() && s.compare(0, p.size(), p) == 0)
      return is_identifier(s.substr(p.size()));
  return is_identifier(s);
}

} // namespace

result<std::string> inject_state(std::string_view tmpl, const json& state,
                                 const artifact_lookup& artifacts, std::size_t max_output_bytes) {
  std::string out;
  out.reserve(std::min(tmpl.size(), max_output_bytes));
  auto too_large = [max_output_bytes] {
    return error{errc::too_large,
                 "the rendered template would be larger than " + std::to_string(max_output_bytes)
                   + " bytes"};
  };
  // Appends `x` unless the output would pass the bound.
  auto add = [&out, max_output_bytes](std::string_view x) {
    if (x.size() > max_output_bytes - out.size())
      return false;
    out.append(x);
    return true;
  };
  std::size_t pos = 0;
  while (pos < tmpl.size()) {
    auto open = tmpl.find('{', pos);
    if (open == std::string_view::npos) {
      if (!add(tmpl.substr(pos)))
        return too_large();
      break;
    }
    // The nearest '}' with no '{' between: an innermost brace pair.
    auto close = tmpl.find_first_of("{}", open + 1);
    if (close == std::string_view::npos || tmpl[close] == '{') {
      auto upto = close == std::string_view::npos ? tmpl.size() : close;
      if (!add(tmpl.substr(pos, upto - pos)))
        return too_large();
      pos = upto;
      continue;
    }
    if (!add(tmpl.substr(pos, open - pos)))
      return too_large();
    auto inner = model::trim(tmpl.substr(open + 1, close - open - 1), " \t");
    bool optional = !inner.empty() && inner.back() == '?';
    if (optional)
      inner = model::trim(inner.substr(0, inner.size() - 1), " \t");
    constexpr std::string_view artifact_prefix = "artifact.";
    if (inner.size() > artifact_prefix.size()
        && inner.compare(0, artifact_prefix.size(), artifact_prefix) == 0) {
      auto name = inner.substr(artifact_prefix.size());
      std::optional<std::string> text;
      if (artifacts)
        text = artifacts(name);
      if (!text && !optional)
        return error{errc::not_found, "artifact '" + std::string(name) + "' not found"};
      if (text && !add(*text))
        return too_large();
    } else if (is_state_name(inner)) {
      auto it = state.is_object() ? state.find(std::string(inner)) : state.end();
      if (it == state.end()) {
        if (!optional)
          return error{errc::not_found,
                       "state key '" + std::string(inner) + "' is missing (write {"
                         + std::string(inner) + "?} if it is optional)"};
      } else if (it->is_string()) {
        if (!add(it->get_ref<const std::string&>()))
          return too_large();
      } else if (!it->is_null()) {
        auto text = dump_json(*it);
        if (!text)
          return std::move(text).err();
        if (!add(*text))
          return too_large();
      }
    } else {
      if (!add(tmpl.substr(open, close - open + 1))) // not ours: verbatim
        return too_large();
    }
    pos = close + 1;
  }
  return out;
}

} // namespace agentstate
