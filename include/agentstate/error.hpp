// SPDX-License-Identifier: Apache-2.0
// agentstate/error.hpp: the one error vocabulary and the result type every
// call returns. No function of the public API throws; failures come back as
// `error` values inside `result<T>`.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace agentstate {

/// Error codes. The numbers are stable and append-only: they are persisted in
/// logs and mapped 1:1 to the wire protocol's `error.data.kind`.
enum class errc : std::uint8_t {
  ok = 0,
  already_exists = 1, ///< session id taken in that (app, user). Not retryable.
  not_found = 2, ///< no such session. Not retryable.
  invalid_argument = 3, ///< a parameter breaks a documented limit or type.
  version_conflict = 4, ///< expected_version mismatch; retry after re-reading.
  too_large = 5, ///< a key, id, value or event exceeds its limit.
  storage_full = 6, ///< the store reached its maximum size.
  io_error = 7, ///< the disk failed; nothing acknowledged. Retryable.
  /// Closing, overloaded, locked, or a create under a user or app still
  /// being deleted. Retryable.
  unavailable = 8,
  internal = 9, ///< a bug; the message says what.
  /// The store is damaged: a stored row failed its checksum (the message
  /// names the session, app/user/id, and the row; other sessions are still
  /// served), or the store's file does not hold what it claims (truncated,
  /// damaged pages, a lost data file; the message names the file). Not
  /// retryable: restore a backup or run `agentstate salvage`.
  data_corrupt = 10,
  /// The server requires authentication and the connection has none yet
  /// (`authenticate` not sent, or its token was refused). Not retryable
  /// unchanged: authenticate first.
  unauthenticated = 11,
  /// The connection's token does not grant the app the request names (or a
  /// request that spans every app, such as `stats`). Not retryable.
  permission_denied = 12,
  /// A compare_and_set (state_modify::expected) found another value; nothing
  /// was stored. Not retryable unchanged: re-read, then decide.
  condition_failed = 13,
  /// A change-feed cursor older than the change log's retention: changes
  /// after it are gone. error::oldest_cursor names the oldest cursor the log
  /// can resume from (a reader that accepts the gap resumes there; one that
  /// cannot re-reads the state it follows). Not retryable unchanged.
  cursor_expired = 14,
};

/// The protocol's name of `x` ("already_exists", ...); "ok" for `errc::ok`.
const char* to_string(errc x) noexcept;

/// True for the codes whose operation may be retried unchanged (with the same
/// event id): io_error and unavailable. version_conflict and storage_full are
/// retryable only after the caller changes something.
bool is_retryable(errc x) noexcept;

/// An error value: a code plus a human-readable message that carries the
/// context (which key, which limit, the storage layer's own message).
struct error {
  errc code = errc::internal;
  std::string message;
  /// Set with errc::version_conflict: the session's actual version.
  std::optional<std::uint64_t> current_version;
  /// Set with errc::cursor_expired: the oldest cursor the log still serves.
  std::optional<std::string> oldest_cursor;

  error() = default;
  error(errc c, std::string msg) : code(c), message(std::move(msg)) {}
};

/// "kind: message", for logs.
std::string to_string(const error& x);

namespace detail {
/// Reports a result accessed as the wrong alternative and aborts: a
/// precondition bug in the caller, never a condition to handle.
[[noreturn]] void result_misuse(const char* what) noexcept;
/// The error a successful result reports: code errc::ok, no message.
const error& no_error() noexcept;
} // namespace detail

/// Either a value or an error. Cheap to move. Nothing here throws:
/// value() on an error aborts the process (a precondition bug, like a null
/// dereference, reported with a message); err() on a success returns an
/// error whose code is errc::ok.
template <class T>
class result {
public:
  result(T x) : v_(std::in_place_index<0>, std::move(x)) {}
  result(error x) : v_(std::in_place_index<1>, std::move(x)) {}

  explicit operator bool() const noexcept { return v_.index() == 0; }
  bool ok() const noexcept { return v_.index() == 0; }

  /// REQUIRES: ok().
  T& value() & { return *checked(); }
  const T& value() const& { return *checked(); }
  T&& value() && { return std::move(*checked()); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return checked(); }
  const T* operator->() const { return checked(); }

  /// The error; errc::ok (and no message) on success.
  const error& err() const& noexcept {
    auto e = std::get_if<1>(&v_);
    return e ? *e : detail::no_error();
  }
  /// The error moved out. REQUIRES: !ok().
  error&& err() && {
    auto e = std::get_if<1>(&v_);
    if (!e)
      detail::result_misuse("result::err() on a success");
    return std::move(*e);
  }
  errc code() const noexcept { return err().code; }

private:
  T* checked() {
    auto x = std::get_if<0>(&v_);
    if (!x)
      detail::result_misuse("result::value() on an error");
    return x;
  }
  const T* checked() const {
    auto x = std::get_if<0>(&v_);
    if (!x)
      detail::result_misuse("result::value() on an error");
    return x;
  }

  std::variant<T, error> v_;
};

/// How the async API answers: called exactly once with the outcome.
template <class T>
using callback = std::function<void(result<T>)>;

/// A result without a value.
template <>
class result<void> {
public:
  result() = default;
  result(error x) : e_(std::move(x)) {}

  explicit operator bool() const noexcept { return !e_.has_value(); }
  bool ok() const noexcept { return !e_.has_value(); }
  /// The error; errc::ok (and no message) on success.
  const error& err() const& noexcept { return e_ ? *e_ : detail::no_error(); }
  /// The error moved out. REQUIRES: !ok().
  error&& err() && {
    if (!e_)
      detail::result_misuse("result::err() on a success");
    return std::move(*e_);
  }
  errc code() const noexcept { return e_ ? e_->code : errc::ok; }

private:
  std::optional<error> e_;
};

} // namespace agentstate
