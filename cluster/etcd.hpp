// SPDX-License-Identifier: Apache-2.0
// cluster/etcd.hpp: a client of etcd's v3 API through its JSON gateway
// (POST /v3/kv/range, /v3/kv/txn, /v3/lease/grant|keepalive|revoke, /v3/watch)
// over libcurl. Only what the coordinator (cluster/coordinator.hpp) needs:
// reads of a key or a range at one revision, compare-and-swap transactions,
// leases, and a watch of a range.
//
// Errors: an etcd that cannot be reached at any endpoint, a timeout, or an
// answer that is not the gateway's JSON is errc::unavailable (retryable); the
// message names the endpoint and what failed. A lease etcd no longer knows is
// errc::not_found. Nothing here throws.
//
// Threads: one etcd_client may be used from any number of threads; each call
// takes a connection of its own from a small pool (connections are reused).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "agentstate/error.hpp"

namespace agentstate::cluster {

/// `s` in base64 (RFC 4648, padded), as etcd's gateway carries bytes.
std::string b64(std::string_view s);
/// The bytes of base64 text `s` into `out`; false when it is not base64.
bool unb64(std::string_view s, std::string& out);

/// One key as etcd stores it. Revisions are etcd's (cluster-wide, increasing).
struct etcd_kv {
  std::string key;
  std::string value;
  std::int64_t create_revision = 0;
  std::int64_t mod_revision = 0;
  std::int64_t version = 0;
  std::int64_t lease = 0;
};

/// What a range read returns: the store's revision at the read, and the keys.
struct etcd_range {
  std::int64_t revision = 0;
  std::vector<etcd_kv> kvs;
};

/// One comparison of a transaction: `key`'s create revision, mod revision or
/// value equals `number` (or `value`). A key that does not exist has create
/// and mod revision 0.
struct etcd_compare {
  enum class target { create_revision, mod_revision, value };
  std::string key;
  target what = target::mod_revision;
  std::int64_t number = 0;
  std::string value;
};

/// One operation of a transaction.
struct etcd_op {
  enum class kind { put, del, range };
  kind what = kind::put;
  std::string key;
  std::string value; ///< put
  std::int64_t lease = 0; ///< put: 0 for none
  std::string range_end; ///< del, range: "" for the one key
};

struct etcd_txn_result {
  bool succeeded = false;
  std::int64_t revision = 0;
  /// The range operations' answers, in order (of the branch that ran).
  std::vector<etcd_range> ranges;
};

/// One change a watch reports.
struct etcd_event {
  bool deleted = false;
  etcd_kv kv; ///< a deleted key carries its key and mod revision only
};

/// The end of the range of every key that starts with `prefix` (etcd's
/// range_end): the prefix with its last byte below 0xff incremented.
std::string prefix_end(const std::string& prefix);

class etcd_client {
public:
  struct config {
    /// Client URLs ("http://127.0.0.1:2379"), tried in order; the one that
    /// answered last is tried first next time.
    std::vector<std::string> endpoints;
    /// The limit of one request (connect and answer), watches excepted.
    std::chrono::milliseconds timeout{3000};
  };

  /// A client of the etcd cluster at `c.endpoints`. invalid_argument when
  /// there is no endpoint or one is not an http:// or https:// URL. Contacts
  /// nobody.
  static result<std::unique_ptr<etcd_client>> make(config c);

  /// "http://a:2379,http://b:2379" as endpoints; invalid_argument for an
  /// empty list or an empty item.
  static result<std::vector<std::string>> parse_endpoints(const std::string& urls);

  ~etcd_client();
  etcd_client(const etcd_client&) = delete;
  etcd_client& operator=(const etcd_client&) = delete;

  /// The key `key`, or with `range_end` every key in [key, range_end).
  result<etcd_range> range(const std::string& key, const std::string& range_end = {});

  /// If every compare holds, runs `success`, else `failure`; atomically.
  result<etcd_txn_result> txn(const std::vector<etcd_compare>& compares,
                              const std::vector<etcd_op>& success,
                              const std::vector<etcd_op>& failure);

  /// A lease of `ttl_s` seconds; its id.
  result<std::int64_t> lease_grant(std::int64_t ttl_s);
  /// Renews lease `id`; the TTL it has now. not_found when it expired.
  result<std::int64_t> lease_keepalive(std::int64_t id);
  /// Ends lease `id` and deletes its keys (a lease already gone is success).
  result<void> lease_revoke(std::int64_t id);

  /// Reports every change of [key, range_end) from `start_revision` on, in
  /// revision order, to `on` (the revision of the batch's last event, and the
  /// events) until `on` returns false, `stop` becomes true (seen within `poll`
  /// of the change, whatever etcd sends), or the stream fails (unavailable; a
  /// watch of a revision etcd compacted away is errc::cursor_expired). Blocks
  /// the calling thread; a watch has a connection of its own.
  result<void> watch(const std::string& key, const std::string& range_end,
                     std::int64_t start_revision,
                     const std::function<bool(std::int64_t, std::vector<etcd_event>&)>& on,
                     const std::atomic<bool>& stop,
                     std::chrono::milliseconds poll = std::chrono::milliseconds(200));

  struct impl;

private:
  explicit etcd_client(std::unique_ptr<impl> p);
  std::unique_ptr<impl> p_;
};

} // namespace agentstate::cluster
