// SPDX-License-Identifier: Apache-2.0
#include "store/outbox.hpp"

#include "store/errors.hpp"
#include "store/keys.hpp"
#include "store/records.hpp"

namespace agentstate::store {

std::string outbox_key(std::string_view skey, std::uint64_t version) {
  return event_key(skey, version);
}

result<std::optional<outbox_row>> read_outbox(kv_read& txn, std::string_view skey) {
  try {
    std::string prefix(skey);
    prefix.push_back('\0');
    std::optional<outbox_row> out;
    std::optional<error> bad;
    txn.scan(table::outbox, prefix, {}, [&](std::string_view k, std::string_view v) {
      auto body = open_row(table::outbox, k, v, false);
      if (!body || k.size() != prefix.size() + 8) {
        bad = damaged(table::outbox, k);
        return false;
      }
      out = outbox_row{read_be64(k.substr(prefix.size())), std::string(*body)};
      return false;
    });
    if (bad)
      return *bad;
    return out;
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

result<std::vector<std::string>> outbox_sessions(kv_read& txn) {
  try {
    std::vector<std::string> out;
    std::optional<error> bad;
    txn.scan(table::outbox, {}, {}, [&](std::string_view k, std::string_view) {
      if (k.size() < 9 || k[k.size() - 9] != '\0') {
        bad = damaged(table::outbox, k);
        return false;
      }
      out.emplace_back(k.substr(0, k.size() - 9));
      return true;
    });
    if (bad)
      return *bad;
    return out;
  } catch (const kv_failure& f) {
    return from_failure(f);
  }
}

void put_outbox(kv_write& txn, std::string_view skey, std::uint64_t version,
                std::string_view body) {
  auto key = outbox_key(skey, version);
  txn.put(table::outbox, key, seal(key, body));
}

void drop_outbox(kv_write& txn, std::string_view skey, std::uint64_t version) {
  txn.del(table::outbox, outbox_key(skey, version));
}

} // namespace agentstate::store
