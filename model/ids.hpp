// SPDX-License-Identifier: Apache-2.0
// model/ids.hpp: generated identifiers and the wall clock.
#pragma once

#include <string>

namespace agentstate::model {

/// A random UUID (version 4) in 8-4-4-4-12 lowercase hex. From a per-thread
/// generator seeded with 256 bits from the OS: unique in practice, fast
/// (~100 ns), not unpredictable. For event and invocation ids.
std::string make_uuid();

/// A random UUID (version 4) from the OS's secure random source
/// (getrandom(2), ~0.5 µs): unpredictable, for ids that end up in URLs and
/// must not be guessable (session ids). Falls back to make_uuid only where
/// the kernel has no getrandom.
std::string make_secure_uuid();

/// The system clock now, epoch seconds: what tools that open a store
/// without an engine read. An engine reads options::wall_clock instead
/// (detail::wall_now), which falls back to this.
double now_seconds();

} // namespace agentstate::model
