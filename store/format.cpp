// SPDX-License-Identifier: Apache-2.0
#include "store/format.hpp"

#include <chrono>
#include <string>

#include "store/errors.hpp"

namespace agentstate::store {

std::uint32_t known_format(std::string_view text) {
  for (auto v = oldest_format_version; v <= format_version; ++v)
    if (text == std::to_string(v))
      return v;
  return 0;
}

result<void> init_meta(kv_store& kv, std::string_view engine_version) {
  try {
    {
      auto r = kv.begin_read();
      if (auto fmt = r->get(table::meta, "format")) {
        auto from = known_format(*fmt);
        if (from == format_version)
          return {};
        if (from == 0)
          return error{errc::internal, "store format " + std::string(*fmt)
                                         + " is not readable by this build (format "
                                         + std::to_string(format_version) + ")"};
        r.reset();
        auto w = kv.begin_write();
        if (from == 1) // 1 -> 2: the dedup index is gone
          w->drop_table("event_ids");
        // 2 -> 3: the small tables move into the shared database (a no-op
        // for the tables that keep a database of their own).
        for (std::size_t i = 0; i < table_count; ++i)
          w->absorb_table(static_cast<table>(i));
        w->put(table::meta, "format", std::to_string(format_version));
        w->commit();
        return {};
      }
    }
    auto w = kv.begin_write();
    auto now = std::chrono::duration<double>(
                 std::chrono::system_clock::now().time_since_epoch())
                 .count();
    w->put(table::meta, "format", std::to_string(format_version));
    w->put(table::meta, "created", std::to_string(now));
    w->put(table::meta, "engine_version", engine_version);
    w->commit();
    return {};
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

} // namespace agentstate::store
