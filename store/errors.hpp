// SPDX-License-Identifier: Apache-2.0
// store/errors.hpp: the errors storage code reports (internal to store/).
#pragma once

#include <string>

#include "agentstate/error.hpp"
#include "store/kv.hpp"

namespace agentstate::store {

/// A row that does not decode: internal, "corrupt store: <what>".
inline error corrupt(std::string what) {
  return error{errc::internal, "corrupt store: " + std::move(what)};
}

/// A storage call's failure as an error value.
inline error from_failure(const kv_failure& f) {
  return error{f.code, f.message};
}

} // namespace agentstate::store
