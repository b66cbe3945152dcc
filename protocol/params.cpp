// SPDX-License-Identifier: Apache-2.0
#include "protocol/params.hpp"

#include <limits>
#include <utility>

#include "model/checks.hpp"

namespace agentstate::protocol::detail {

namespace {

// How a wrong value is named in a message: "a string", "a negative integer"...
std::string kind_of(const json& v) {
  if (v.is_number_float())
    return "a non-integer number";
  if (v.is_number_unsigned())
    return "an integer";
  if (v.is_number())
    return "a negative integer";
  std::string t = v.type_name();
  return (t == "array" || t == "object" ? "an " : "a ") + t;
}

std::string must_be(const char* name, const char* what, const json& v) {
  return std::string("parameter '") + name + "' must be " + what + ", not " + kind_of(v);
}

} // namespace

std::string param_reader::required_string(const char* name) {
  auto v = find(name);
  if (!v) {
    fail(std::string("missing parameter '") + name + "' (a string)");
    return {};
  }
  return string_of(name, *v);
}

std::optional<std::string> param_reader::optional_string(const char* name) {
  auto v = find(name);
  if (!v)
    return std::nullopt;
  return string_of(name, *v);
}

std::optional<std::int64_t> param_reader::optional_int(const char* name) {
  auto v = find(name);
  if (!v)
    return std::nullopt;
  if (v->is_number_integer() && !v->is_number_unsigned())
    return v->get<std::int64_t>();
  if (v->is_number_unsigned()
      && v->get<std::uint64_t>()
        <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
    return static_cast<std::int64_t>(v->get<std::uint64_t>());
  if (v->is_number_unsigned())
    fail(std::string("parameter '") + name + "' is out of range");
  else
    fail(must_be(name, "an integer", *v));
  return std::nullopt;
}

template <class T>
std::optional<T> param_reader::typed(const char* name, bool (json::*is)() const noexcept,
                                     const char* what) {
  auto v = find(name);
  if (!v)
    return std::nullopt;
  if (((*v).*is)())
    return v->get<T>();
  fail(must_be(name, what, *v));
  return std::nullopt;
}

std::optional<std::uint64_t> param_reader::optional_uint(const char* name) {
  return typed<std::uint64_t>(name, &json::is_number_unsigned, "a non-negative integer");
}

std::optional<bool> param_reader::optional_bool(const char* name) {
  return typed<bool>(name, &json::is_boolean, "a boolean");
}

std::optional<double> param_reader::optional_number(const char* name) {
  return typed<double>(name, &json::is_number, "a number");
}

json param_reader::optional_object(const char* name) {
  auto v = object_of(name);
  return v ? *v : json::object();
}

const json* param_reader::required_object(const char* name) {
  if (!find(name)) {
    fail(std::string("missing parameter '") + name + "' (an object)");
    return nullptr;
  }
  return object_of(name);
}

session_ref param_reader::ref() {
  session_ref r;
  r.app_name = required_string("app_name");
  r.user_id = required_string("user_id");
  r.session_id = required_string("session_id");
  return r;
}

void param_reader::fail(std::string message) {
  if (!failure_)
    failure_ = make_failure(rpc_code::invalid_params, std::move(message), errc::invalid_argument);
}

void param_reader::check(const result<void>& r) {
  if (!r && !failure_)
    failure_ = make_failure(rpc_code::invalid_params, "parameter " + r.err().message, r.err().code);
}

std::string param_reader::invocation_id(const char* name, bool required) {
  auto v = required ? required_string(name) : optional_string(name).value_or("");
  if (required && v.empty() && !failure_)
    fail(std::string("parameter '") + name + "' must not be empty");
  check(model::check_invocation_id(v, name));
  return v;
}

const json* param_reader::find(const char* name) const {
  auto it = params_.find(name);
  if (it == params_.end() || it->is_null())
    return nullptr;
  return &*it;
}

const json* param_reader::object_of(const char* name) {
  auto v = find(name);
  if (v && !v->is_object()) {
    fail(must_be(name, "an object", *v));
    return nullptr;
  }
  return v;
}

std::string param_reader::string_of(const char* name, const json& v) {
  if (v.is_string())
    return v.get<std::string>();
  fail(must_be(name, "a string", v));
  return {};
}

} // namespace agentstate::protocol::detail
