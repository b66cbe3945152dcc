// SPDX-License-Identifier: Apache-2.0
#include "store/open.hpp"

#include "store/errors.hpp"

namespace agentstate::store {

result<std::unique_ptr<kv_store>> open_lmdb(const std::string& dir, bool sync,
                                            std::uint64_t map_size, resident_bound bound,
                                            bool write_map) {
  try {
    return open_lmdb_kv(dir, sync, map_size, bound, write_map);
  } catch (const kv_failure& f) {
    return error{f.code == errc::internal ? errc::io_error : f.code,
                 "cannot open store '" + dir + "': " + f.message};
  }
}

result<std::unique_ptr<kv_store>> open_lmdb_readonly(const std::string& dir, bool allow_damage) {
  try {
    return open_lmdb_kv_readonly(dir, allow_damage);
  } catch (const kv_failure& f) {
    return error{f.code, "cannot open store '" + dir + "': " + f.message};
  }
}

result<kv_info> info(kv_store& kv) {
  try {
    return kv.info();
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

result<void> copy_to_fd(kv_store& kv, int fd, bool compact) {
  try {
    kv.copy_to_fd(fd, compact);
    return {};
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

result<void> copy_to(kv_store& kv, const std::string& dest, bool compact) {
  try {
    kv.copy_to(dest, compact);
    return {};
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

} // namespace agentstate::store
