// SPDX-License-Identifier: Apache-2.0
// client/transport.hpp: the byte stream under rpc_client (client/client.cpp):
// a TCP, Unix-socket or TLS connection made on an Asio io_context, or a pair
// of descriptors handed over by the caller. Internal to agentstate_client.
#pragma once

#include <asio.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "agentstate/client.hpp"
#include "server/address.hpp"

namespace agentstate::client_detail {

using io_handler = std::function<void(const asio::error_code&, std::size_t)>;

/// A connected stream. Every member runs on the io_context's thread; at most
/// one read and one write are outstanding at a time.
class stream {
public:
  virtual ~stream() = default;
  /// Reads some bytes into `b`.
  virtual void read_some(asio::mutable_buffer b, io_handler h) = 0;
  /// Writes all of `b` (the bytes must stay alive until `h` runs).
  virtual void write(asio::const_buffer b, io_handler h) = 0;
  /// Closes the socket: outstanding operations end with operation_aborted.
  virtual void close() = 0;
};

/// The server `address` names (client_options::address syntax), or
/// invalid_argument.
result<server::listen_spec> parse_address(const std::string& address);

/// True when `ec` is the end of the stream: the peer closed it (with or
/// without a TLS close_notify).
bool is_end_of_stream(const asio::error_code& ec);

/// Connects to `at` as `o` says (TLS when o.tls), on `io`; calls `done`
/// exactly once on the io_context's thread with the stream or an error
/// (rpc_client::connect's errors except the authenticate refusal). `timeout`
/// bounds the whole: past it the attempt is abandoned with unavailable.
/// Start it on the io_context's thread.
void connect_stream(asio::io_context& io, const server::listen_spec& at, const client_options& o,
                    std::chrono::milliseconds timeout,
                    std::function<void(result<std::unique_ptr<stream>>)> done);

/// A stream over duplicates of `read_fd` and `write_fd` (one duplicate when
/// they are the same descriptor, e.g. a socket), on `io`; the caller's
/// descriptors stay open and its own. invalid_argument when a descriptor
/// cannot be duplicated (not open).
result<std::unique_ptr<stream>> adopt_stream(asio::io_context& io, int read_fd, int write_fd);

} // namespace agentstate::client_detail
