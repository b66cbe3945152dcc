// SPDX-License-Identifier: Apache-2.0
#include "server/address.hpp"

#include <cstdint>

namespace agentstate::server {

namespace {

std::optional<std::uint32_t> parse_port(const std::string& s) {
  if (s.empty() || s.size() > 5 || s.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  auto n = static_cast<std::uint32_t>(std::stoul(s));
  if (n > 65535)
    return std::nullopt;
  return n;
}

} // namespace

std::optional<listen_spec> parse_listen(const std::string& s) {
  listen_spec a;
  if (s.rfind("unix:", 0) == 0) {
    a.type = listen_spec::kind::unix_socket;
    a.path = s.substr(5);
    if (a.path.empty() || a.path.find('\0') != std::string::npos)
      return std::nullopt;
    return a;
  }
  std::string port;
  if (!s.empty() && s.front() == '[') {
    auto close = s.find(']');
    if (close == std::string::npos || close + 1 >= s.size() || s[close + 1] != ':')
      return std::nullopt;
    a.host = s.substr(1, close - 1);
    port = s.substr(close + 2);
  } else if (auto colon = s.rfind(':'); colon != std::string::npos) {
    a.host = s.substr(0, colon);
    port = s.substr(colon + 1);
  } else {
    port = s;
  }
  if (a.host.empty())
    a.host = "127.0.0.1";
  if (!parse_port(port))
    return std::nullopt;
  a.port = port;
  return a;
}

std::string describe(const listen_spec& l) {
  if (l.type == listen_spec::kind::unix_socket)
    return "unix:" + l.path;
  if (l.host.find(':') != std::string::npos)
    return "[" + l.host + "]:" + l.port;
  return l.host + ":" + l.port;
}

} // namespace agentstate::server
