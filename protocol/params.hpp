// SPDX-License-Identifier: Apache-2.0
// protocol/params.hpp: reading a request's by-name params with typed errors.
// Internal to agentstate_protocol.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "agentstate/json.hpp"
#include "agentstate/types.hpp"
#include "protocol/responses.hpp"

namespace agentstate::protocol::detail {

/// Reads the members of a params object by name. Absent and null are the same
/// (an optional param is then nullopt, a required one is missing). A member of
/// the wrong type is recorded as the reader's failure (invalid_params, kind
/// invalid_argument, naming the param and what it was) and read as empty; only
/// the first problem is kept, so a method reads every param and then checks
/// failure() once. Unknown members are ignored.
/// Ownership: borrows `params`, which must outlive the reader. Not thread-safe.
class param_reader {
public:
  explicit param_reader(const json& params) : params_(params) {}

  /// A string; "" and a failure when absent.
  std::string required_string(const char* name);
  std::optional<std::string> optional_string(const char* name);
  /// Any integer that fits int64 (negative ones included).
  std::optional<std::int64_t> optional_int(const char* name);
  /// A non-negative integer.
  std::optional<std::uint64_t> optional_uint(const char* name);
  std::optional<bool> optional_bool(const char* name);
  /// Any number, integers included (converted to double).
  std::optional<double> optional_number(const char* name);
  /// An object (copied); {} when absent.
  json optional_object(const char* name);
  /// The object itself, or nullptr and a failure when absent or not one.
  const json* required_object(const char* name);
  /// app_name, user_id and session_id, each a required string.
  session_ref ref();

  /// Records `message` as the failure unless one is recorded already.
  void fail(std::string message);
  /// Records a check's error (its kind kept: invalid_argument, too_large)
  /// as the failure unless one is recorded already; nothing on success.
  void check(const result<void>& r);
  /// An optional invocation id (model::check_invocation_id); "" when
  /// absent. With `required`, absent or "" is a failure.
  std::string invocation_id(const char* name, bool required);

  /// The first problem met so far.
  const std::optional<rpc_failure>& failure() const { return failure_; }

private:
  const json* find(const char* name) const;
  std::string string_of(const char* name, const json& v);
  /// The object `name`; nullptr when absent, or (with a failure) not an object.
  const json* object_of(const char* name);
  /// `name`'s value as T when (v.*is)() holds; otherwise a failure saying it
  /// must be `what`.
  template <class T>
  std::optional<T> typed(const char* name, bool (json::*is)() const noexcept, const char* what);

  const json& params_;
  std::optional<rpc_failure> failure_;
};

} // namespace agentstate::protocol::detail
