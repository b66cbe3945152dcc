// SPDX-License-Identifier: Apache-2.0
// The built-in modifies (types.hpp, modify_ops) and their protocol form.
#include "agentstate/types.hpp"

#include <cstdint>
#include <stdexcept>

namespace agentstate {

namespace {

error bad_op(const std::string& what) {
  return error{errc::invalid_argument, what};
}

} // namespace

namespace modify_ops {

state_modify increment(std::string key, json by) {
  state_modify m;
  m.key = std::move(key);
  m.fallback = 0;
  m.fn = [by = std::move(by)](const json& cur) -> json {
    if (!cur.is_number())
      throw std::invalid_argument(std::string("increment needs a number; the key holds ")
                                  + (cur.is_object() || cur.is_array() ? "an " : "a ")
                                  + cur.type_name());
    if (cur.is_number_integer() && by.is_number_integer()) {
      // Unsigned values beyond int64 count as doubles.
      if ((!cur.is_number_unsigned() || cur.get<std::uint64_t>() <= INT64_MAX)
          && (!by.is_number_unsigned() || by.get<std::uint64_t>() <= INT64_MAX)) {
        std::int64_t sum;
        if (__builtin_add_overflow(cur.get<std::int64_t>(), by.get<std::int64_t>(), &sum))
          throw std::invalid_argument("increment overflows a 64-bit integer");
        return sum;
      }
    }
    return cur.get<double>() + by.get<double>();
  };
  return m;
}

state_modify append(std::string key, json value) {
  state_modify m;
  m.key = std::move(key);
  m.fallback = json::array();
  m.fn = [value = std::move(value)](const json& cur) -> json {
    if (!cur.is_array())
      throw std::invalid_argument(std::string("append needs an array; the key holds ")
                                  + (cur.is_object() ? "an " : "a ") + cur.type_name());
    json out = cur;
    out.push_back(value);
    return out;
  };
  return m;
}

state_modify merge(std::string key, json value) {
  state_modify m;
  m.key = std::move(key);
  m.fallback = json::object();
  m.fn = [value = std::move(value)](const json& cur) -> json {
    if (!cur.is_object())
      throw std::invalid_argument(std::string("merge needs an object; the key holds ")
                                  + (cur.is_array() ? "an " : "a ") + cur.type_name());
    json out = cur;
    for (auto it = value.begin(); it != value.end(); ++it)
      out[it.key()] = it.value();
    return out;
  };
  return m;
}

state_modify set_if_absent(std::string key, json value) {
  state_modify m;
  m.key = std::move(key);
  m.fallback = std::move(value);
  m.fn = [](const json& cur) { return cur; };
  return m;
}

state_modify compare_and_set(std::string key, json expected, json value) {
  state_modify m;
  m.key = std::move(key);
  m.expected = std::move(expected);
  m.fn = [value = std::move(value)](const json&) { return value; };
  return m;
}

} // namespace modify_ops

namespace {

result<state_modify> modify_from_json(const json& x);

} // namespace

result<state_modify> state_modify_from_json(const json& x) {
  auto m = modify_from_json(x);
  if (m)
    m.value().spec = x;
  return m;
}

namespace {

result<state_modify> modify_from_json(const json& x) {
  if (!x.is_object())
    return bad_op("a modify operation must be an object {\"key\", \"op\", ...}");
  auto key = x.find("key");
  if (key == x.end() || !key->is_string())
    return bad_op("a modify operation needs 'key' (a string)");
  auto op = x.find("op");
  if (op == x.end() || !op->is_string())
    return bad_op("modify of '" + key->get<std::string>() + "' needs 'op' (a string)");
  const auto& name = op->get_ref<const std::string&>();
  auto member = [&](const char* m) -> const json* {
    auto it = x.find(m);
    return it == x.end() ? nullptr : &*it;
  };
  auto missing = [&](const char* m) {
    return bad_op("modify of '" + key->get<std::string>() + "': '" + name + "' needs '" + m + "'");
  };
  std::string k = key->get<std::string>();
  if (name == "increment") {
    auto by = member("by");
    if (!by || !by->is_number())
      return bad_op("modify of '" + k + "': 'increment' needs 'by' (a number)");
    return modify_ops::increment(std::move(k), *by);
  }
  if (name == "append" || name == "set_if_absent" || name == "merge") {
    auto v = member("value");
    if (!v)
      return missing("value");
    if (name == "append")
      return modify_ops::append(std::move(k), *v);
    if (name == "set_if_absent")
      return modify_ops::set_if_absent(std::move(k), *v);
    if (!v->is_object())
      return bad_op("modify of '" + k + "': 'merge' needs 'value' (an object)");
    return modify_ops::merge(std::move(k), *v);
  }
  if (name == "compare_and_set") {
    auto e = member("expected");
    auto v = member("value");
    if (!e)
      return missing("expected");
    if (!v)
      return missing("value");
    return modify_ops::compare_and_set(std::move(k), *e, *v);
  }
  return bad_op("modify of '" + k + "': unknown op '" + name
                + "' (increment, append, merge, set_if_absent, compare_and_set)");
}

} // namespace

} // namespace agentstate
