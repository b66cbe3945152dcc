// SPDX-License-Identifier: Apache-2.0
// protocol/auth.hpp: who may use a stream (docs/protocol.md, "Authentication").
// A server started with a token file requires each connection to send
// `authenticate {token}` first; a token opens every app (`*`) or a list of
// apps, to read and write or (`read-only`) to read only. Public part of
// agentstate_protocol; rpc_session applies it.
//
// Tokens are never kept: a table holds each token's SHA-256 digest, and a
// presented token is hashed and compared with every entry in constant time
// (no early exit, no branch on the bytes), so neither the table's contents
// nor how much of a token matched shows in the time a lookup takes. No
// function here puts a token into an error message.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agentstate/error.hpp"

namespace agentstate::protocol {

/// The apps one token opens, and how.
struct grant {
  bool all_apps = false;
  std::vector<std::string> apps; ///< sorted, no duplicates; empty with all_apps
  /// Reads only: every method that writes (method_writes) is refused.
  bool read_only = false;

  bool allows(std::string_view app) const;
};

/// A token file's contents. Immutable once built; share it freely.
class token_table {
public:
  using digest = std::array<unsigned char, 32>;

  /// Parses the token file format: one `TOKEN APP[,APP...]` or `TOKEN *` per
  /// line, optionally followed by `read-only`, fields separated by spaces or
  /// tabs; empty lines and lines whose first non-blank character is '#' are
  /// skipped. A token is 16 to 4096
  /// printable ASCII characters other than space; an app name is what the
  /// engine accepts (1..100 bytes, no NUL, no ','). Errors (invalid_argument)
  /// name the line number and what is wrong, never the token. An empty table
  /// is valid (nobody gets in).
  static result<token_table> parse(std::string_view text);

  /// Reads and parses the file at `path`. Only a regular file is read: a
  /// FIFO, socket, device or directory is refused (invalid_argument) after
  /// an open that does not wait for a writer, never read. io_error when it
  /// cannot be opened or read; too_large past 16 MiB. `mode`, when not null,
  /// receives the permission bits (st_mode & 07777) of the file read.
  static result<token_table> load(const std::string& path, unsigned* mode = nullptr);

  /// The grant of `token`, or nullopt. Cost: one SHA-256 and a constant-time
  /// compare with every entry, whatever matches.
  std::optional<grant> find(std::string_view token) const;

  /// As find(), by the token's digest.
  std::optional<grant> find_digest(const digest& d) const;

  static digest digest_of(std::string_view token);

  std::size_t size() const { return entries_.size(); }

private:
  struct entry {
    digest d;
    grant g;
  };
  std::vector<entry> entries_;
};

/// The table a server uses now, replaced whole on reload (SIGHUP): a stream
/// sees either the old table or the new one, never a mix.
/// Thread safety: every member may be called from any thread.
class token_source {
public:
  explicit token_source(token_table t);

  /// The current table; it stays valid as long as the pointer is held.
  std::shared_ptr<const token_table> current() const;
  /// 1 for the first table, then one more per replace().
  std::uint64_t generation() const;
  void replace(token_table t);

private:
  mutable std::mutex mtx_;
  std::shared_ptr<const token_table> table_;
  std::uint64_t generation_ = 1;
};

/// How a method relates to apps, for the access check.
enum class method_scope {
  open, ///< ping, authenticate: allowed before authentication
  authenticated, ///< flush: any authenticated connection
  app, ///< names one app in params.app_name: a token granting it
  every_app, ///< stats and any method not listed: a `*` token
};

/// The scope of `method`. Methods added to the protocol later fall under
/// every_app until listed here, so a scoped token never reaches them by
/// accident.
method_scope scope_of(std::string_view method);

/// Whether `method` is refused to a read-only token: every method but the
/// reads (ping, authenticate, flush, get_session, list_sessions,
/// get_app_state, get_user_state, read_changes, watch, unwatch,
/// rewind_plan, list_invocations, stats, cluster_map). `prune` writes, with
/// `dry_run` too. Methods added to the protocol later write until listed
/// here, so a read-only token never reaches them by accident.
bool method_writes(std::string_view method);

/// One stream's access state: every method allowed (no token source: stdio,
/// a server without a token file), or nothing but the open methods until
/// authenticate() succeeds. Revocation: when the token source's table is
/// replaced, the next check looks the stream's token up again, so a token
/// removed from the file stops working on connections already using it.
/// Not thread-safe: used by the stream's reader only.
class access_gate {
public:
  /// Everything allowed.
  access_gate() = default;
  /// Authentication required against `tokens` (non-null).
  explicit access_gate(std::shared_ptr<const token_source> tokens);

  /// True when a token is required.
  bool required() const { return tokens_ != nullptr; }

  /// Checks `token` and makes its grant the stream's. A refused token leaves
  /// the stream unauthenticated (error unauthenticated, naming no token).
  /// Without a token source every token is accepted with every app.
  result<grant> authenticate(std::string_view token);

  /// nullopt when a request for `method` naming `app` (nullopt: the request
  /// names no app, or not as a string) may run; else the error that answers
  /// it: unauthenticated, or permission_denied (an app the token does not
  /// grant; a method that writes, for a read-only token). `refused`: the request is
  /// already refused for its own reasons (bad params, unknown method), which
  /// then answer it once the stream is authenticated.
  std::optional<error> check(std::string_view method, const std::optional<std::string>& app,
                             bool refused);

private:
  /// The current grant (nullopt: not authenticated), refreshed when the
  /// source's generation moved on.
  const grant* current_grant();

  std::shared_ptr<const token_source> tokens_;
  std::optional<token_table::digest> digest_; ///< of the accepted token
  std::optional<grant> grant_;
  std::uint64_t generation_ = 0;
};

} // namespace agentstate::protocol
