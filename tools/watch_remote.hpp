// SPDX-License-Identifier: Apache-2.0
// tools/watch_remote.hpp: `agentstate watch ADDR`, the change feed of a running
// `serve` (TCP, TLS or a Unix socket) printed as the same JSON lines as
// `agentstate watch DIR` (tools/watch.cpp).
#pragma once

#include <optional>
#include <string>

#include "agentstate/json.hpp"
#include "server/address.hpp"

namespace agentstate::tools {

/// Exit statuses of `agentstate watch` (both forms; documented in its --help).
enum watch_exit : int {
  watch_ok = 0,
  watch_unreachable = 1, ///< the store cannot be read; the server cannot be reached
  watch_usage = 2,
  watch_refused = 3, ///< the server answered an error (unauthenticated, cursor_expired, ...)
  watch_ended = 4, ///< the server ended the watch (watch_ended: closing, cursor_expired, failed)
  watch_lost = 5, ///< the connection was lost or closed by the server mid-feed
};

/// The server `arg` names, or nullopt when it names a store directory. The
/// rule: `unix:PATH` and `tcp://HOST:PORT` always name a server; a bare
/// `HOST:PORT` or `[HOST]:PORT` (PORT decimal) names one unless a file or
/// directory of that name exists; anything else is a store directory.
std::optional<server::listen_spec> server_address(const std::string& arg);

struct remote_watch {
  server::listen_spec at;
  json filter; ///< the scope params of watch/read_changes (no from, no limit)
  std::string from; ///< "" : from the newest change now
  /// From the oldest change the server's log keeps (`from` empty): live, a
  /// watch from "start" (a server that refuses it: its read_changes pages up
  /// to the head, then a watch from there); --once, read_changes pages.
  bool from_start = false;
  bool once = false;
  std::string token; ///< "" : no authenticate request
  bool tls = false;
  std::string tls_ca, tls_cert, tls_key; ///< "" : system CAs; no client certificate
};

/// The token in `path`: the first word of its first line that is neither
/// empty nor a `#` comment. Errors name the file, never its content.
result<std::string> read_token_file(const std::string& path);

/// Installs the SIGINT/SIGTERM handlers of `agentstate watch` (both forms; once
/// per process, later calls do nothing): a signal no longer ends the process but
/// wakes stop_fd() and wait_stop. False when the wake-up pipe cannot be made.
bool install_stop_handlers();
/// The read end that a SIGINT/SIGTERM makes readable (-1 before
/// install_stop_handlers); it stays readable once a signal came.
int stop_fd();
/// Waits up to `ms` milliseconds for SIGINT/SIGTERM; true once one has come.
bool wait_stop(unsigned ms);

/// Connects, authenticates when `w.token` is set, then prints the feed on
/// stdout one change per line (to_json of the change, compact, as the DIR
/// form prints it) and diagnostics on stderr; returns a watch_exit. Live
/// (not `once`), SIGINT and SIGTERM end it with an unwatch and exit 0.
/// Runs on the calling thread over an rpc_client (agentstate/client.hpp),
/// whose I/O thread hands it the feed; installs SIGINT/SIGTERM handlers and
/// ignores SIGPIPE for the rest of the process.
int run_remote_watch(const remote_watch& w);

} // namespace agentstate::tools
