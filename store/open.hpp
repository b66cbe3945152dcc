// SPDX-License-Identifier: Apache-2.0
// store/open.hpp: opening stores, and the whole-store operations of the
// tools, as results (the kv seam's implementations throw kv_failure; these
// never throw).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "agentstate/error.hpp"
#include "store/kv.hpp"

namespace agentstate::store {

/// open_lmdb_kv (kv.hpp) as a result. An internal failure of LMDB's open
/// comes back as io_error (the directory cannot hold a store).
result<std::unique_ptr<kv_store>> open_lmdb(const std::string& dir, bool sync,
                                            std::uint64_t map_size, resident_bound bound = {},
                                            bool write_map = false);

/// open_lmdb_kv_readonly (kv.hpp) as a result: not_found when `dir` holds
/// no store.
result<std::unique_ptr<kv_store>> open_lmdb_readonly(const std::string& dir,
                                                     bool allow_damage = false);

/// kv_store::info as a result.
result<kv_info> info(kv_store& kv);

/// kv_store::copy_to as a result.
result<void> copy_to(kv_store& kv, const std::string& dest, bool compact);

/// kv_store::copy_to_fd as a result.
result<void> copy_to_fd(kv_store& kv, int fd, bool compact);

} // namespace agentstate::store
