// SPDX-License-Identifier: Apache-2.0
#include "store/app_writes.hpp"

#include "store/errors.hpp"
#include "store/keys.hpp"
#include "store/records.hpp"

namespace agentstate::store {

std::string app_write_key(std::string_view app, std::string_view write_id) {
  return sub_key(app, write_id);
}

result<std::optional<std::string>> read_app_write(kv_read& txn, std::string_view app,
                                                  std::string_view write_id) {
  try {
    auto key = app_write_key(app, write_id);
    auto raw = txn.get(table::app_writes, key);
    if (!raw)
      return std::optional<std::string>{};
    auto body = open_row(table::app_writes, key, *raw, false);
    if (!body)
      return damaged(table::app_writes, key);
    return std::optional<std::string>{std::string(*body)};
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

void put_app_write(kv_write& txn, std::string_view app, std::string_view write_id,
                   std::string_view outcome) {
  auto key = app_write_key(app, write_id);
  txn.put(table::app_writes, key, seal(key, outcome));
}

void forget_app_write(kv_write& txn, std::string_view app, std::string_view write_id) {
  txn.del(table::app_writes, app_write_key(app, write_id));
}

} // namespace agentstate::store
