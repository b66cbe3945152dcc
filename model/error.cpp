// SPDX-License-Identifier: Apache-2.0
#include "agentstate/error.hpp"

#include <cstdio>
#include <cstdlib>

namespace agentstate {

const char* to_string(errc x) noexcept {
  switch (x) {
    case errc::ok: return "ok";
    case errc::already_exists: return "already_exists";
    case errc::not_found: return "not_found";
    case errc::invalid_argument: return "invalid_argument";
    case errc::version_conflict: return "version_conflict";
    case errc::too_large: return "too_large";
    case errc::storage_full: return "storage_full";
    case errc::io_error: return "io_error";
    case errc::unavailable: return "unavailable";
    case errc::internal: return "internal";
    case errc::data_corrupt: return "data_corrupt";
    case errc::unauthenticated: return "unauthenticated";
    case errc::permission_denied: return "permission_denied";
    case errc::condition_failed: return "condition_failed";
    case errc::cursor_expired: return "cursor_expired";
  }
  return "internal";
}

bool is_retryable(errc x) noexcept {
  return x == errc::io_error || x == errc::unavailable;
}

namespace detail {

void result_misuse(const char* what) noexcept {
  std::fprintf(stderr, "agentstate: precondition violated: %s\n", what);
  std::abort();
}

const error& no_error() noexcept {
  static const error none{errc::ok, ""};
  return none;
}

} // namespace detail

std::string to_string(const error& x) {
  std::string out = to_string(x.code);
  out += ": ";
  out += x.message;
  return out;
}

} // namespace agentstate
