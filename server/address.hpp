// SPDX-License-Identifier: Apache-2.0
// server/address.hpp: what `--listen` names: a TCP address or a Unix domain
// socket path.
#pragma once

#include <optional>
#include <string>

namespace agentstate::server {

struct listen_spec {
  enum class kind { tcp, unix_socket };
  kind type = kind::tcp;
  std::string host; ///< tcp: a name or numeric address, without brackets
  std::string port; ///< tcp: decimal 0..65535 (0: a free port)
  std::string path; ///< unix_socket: the socket's path
};

/// Parses `unix:PATH`, `[HOST]:PORT`, `HOST:PORT`, `:PORT` or `PORT`; the
/// host defaults to 127.0.0.1. nullopt when malformed (an empty path, a port
/// that is not 0..65535).
std::optional<listen_spec> parse_listen(const std::string& s);

/// "unix:PATH" or "HOST:PORT" ("[HOST]:PORT" for IPv6), for messages.
std::string describe(const listen_spec& l);

} // namespace agentstate::server
