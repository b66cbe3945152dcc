// SPDX-License-Identifier: Apache-2.0
#include "protocol/rpc_session.hpp"

#include <exception>
#include <utility>

#include "protocol/dispatcher.hpp"
#include "protocol/request.hpp"

namespace agentstate::protocol {

rpc_session::rpc_session(engine& eng, std::function<void(std::string)> write, rpc_config cfg)
  : dispatch_(std::make_shared<detail::dispatcher>(eng, std::move(write), cfg.max_in_flight)),
    max_line_depth_(cfg.max_line_depth) {}

rpc_session::~rpc_session() {
  drain();
}

void rpc_session::handle_line(std::string_view line) {
  try {
    auto d = detail::decode_request(line, max_line_depth_);
    if (d.run)
      dispatch_->submit(std::move(d.id), d.notification, std::move(*d.run));
    else if (d.refusal)
      dispatch_->answer(d.id, *d.refusal);
  } catch (const std::exception& e) {
    dispatch_->answer(nullptr, detail::internal_failure("request handling", e.what()));
  } catch (...) {
    dispatch_->answer(nullptr, detail::internal_failure("request handling", "unknown exception"));
  }
}

void rpc_session::handle_oversized_line(std::uint64_t bytes, std::uint64_t limit) {
  dispatch_->answer(nullptr, detail::make_failure(
                               rpc_code::parse_error,
                               "line of " + std::to_string(bytes) + " bytes exceeds the limit of "
                                 + std::to_string(limit) + " bytes; it was discarded unread",
                               errc::too_large));
}

void rpc_session::drain() {
  dispatch_->wait_idle();
}

std::size_t rpc_session::in_flight() const {
  return dispatch_->in_flight();
}

} // namespace agentstate::protocol
