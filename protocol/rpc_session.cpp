// SPDX-License-Identifier: Apache-2.0
#include "protocol/rpc_session.hpp"

#include <exception>
#include <utility>

#include "protocol/dispatcher.hpp"
#include "protocol/request.hpp"

namespace agentstate::protocol {

struct rpc_session::observers {
  std::function<json()> server_stats;
  std::function<void(std::string_view)> on_error;
  std::function<void(bool)> on_authenticate;
  std::function<void()> on_complete;

  void error(std::string_view kind) const noexcept {
    if (on_error)
      try {
        on_error(kind);
      } catch (...) {
      }
  }
};

rpc_session::rpc_session(engine& eng, std::function<void(std::string)> write, rpc_config cfg)
  : dispatch_(std::make_shared<detail::dispatcher>(eng, std::move(write), cfg.max_in_flight)),
    max_line_depth_(cfg.max_line_depth),
    gate_(cfg.tokens ? access_gate(cfg.tokens) : access_gate()) {
  if (cfg.server_stats || cfg.on_error || cfg.on_authenticate || cfg.on_complete)
    observers_ = std::make_shared<const observers>(
      observers{std::move(cfg.server_stats), std::move(cfg.on_error),
                std::move(cfg.on_authenticate), std::move(cfg.on_complete)});
}

rpc_session::~rpc_session() {
  drain();
}

void rpc_session::refuse(const detail::decoded_request& d, int code, const std::string& message,
                         std::string_view kind) {
  if (d.notification)
    return;
  detail::rpc_failure f;
  f.code = code;
  f.message = message;
  f.kind = std::string(kind);
  if (observers_)
    observers_->error(f.kind);
  dispatch_->answer(d.id, f);
}

void rpc_session::authenticate(detail::decoded_request& d) {
  auto r = gate_.authenticate(*d.token);
  if (observers_ && observers_->on_authenticate)
    try {
      observers_->on_authenticate(r.ok());
    } catch (...) {
    }
  if (!r)
    return refuse(d, rpc_code::access_error, r.err().message, to_string(r.err().code));
  if (d.notification)
    return;
  json apps = json::array();
  if (r->all_apps)
    apps = "*";
  else
    for (const auto& a : r->apps)
      apps.push_back(a);
  dispatch_->answer(d.id, detail::outcome{json{{"apps", std::move(apps)}}});
}

void rpc_session::handle_line(std::string_view line) {
  try {
    auto d = detail::decode_request(line, max_line_depth_);
    if (d.token)
      return authenticate(d);
    if (!d.method.empty() && (d.run || d.refusal))
      if (auto denied = gate_.check(d.method, d.app_name, !d.run))
        return refuse(d, rpc_code::access_error, denied->message, to_string(denied->code));
    if (d.run) {
      if (observers_) {
        // Watch the outcome: count errors, add the server's counters to
        // stats' result, and tell the reader once the dispatcher (inside
        // `reply`) has counted the request out.
        bool stats = d.method == "stats" && observers_->server_stats;
        bool note = d.notification;
        d.run->op = [inner = std::move(d.run->op), obs = observers_, stats,
                     note](engine& e, const detail::reply_fn& reply) {
          inner(e, [reply, obs, stats, note](detail::outcome o) {
            if (auto f = std::get_if<detail::rpc_failure>(&o); f && !note)
              obs->error(f->kind);
            else if (auto j = std::get_if<json>(&o); j && stats && j->is_object())
              try {
                (*j)["server"] = obs->server_stats();
              } catch (...) {
              }
            reply(std::move(o));
            if (obs->on_complete)
              try {
                obs->on_complete();
              } catch (...) {
              }
          });
        };
      }
      dispatch_->submit(std::move(d.id), d.notification, std::move(*d.run));
    } else if (d.refusal) {
      if (observers_)
        observers_->error(d.refusal->kind);
      dispatch_->answer(d.id, *d.refusal);
    }
  } catch (const std::exception& e) {
    if (observers_)
      observers_->error("internal");
    dispatch_->answer(nullptr, detail::internal_failure("request handling", e.what()));
  } catch (...) {
    if (observers_)
      observers_->error("internal");
    dispatch_->answer(nullptr, detail::internal_failure("request handling", "unknown exception"));
  }
}

void rpc_session::handle_oversized_line(std::uint64_t bytes, std::uint64_t limit) {
  if (observers_)
    observers_->error(to_string(errc::too_large));
  dispatch_->answer(nullptr,
                    detail::make_failure(rpc_code::parse_error,
                                         "line of " + std::to_string(bytes)
                                           + " bytes exceeds the limit of " + std::to_string(limit)
                                           + " bytes; it was discarded unread",
                                         errc::too_large));
}

void rpc_session::drain() {
  dispatch_->wait_idle();
}

std::size_t rpc_session::in_flight() const {
  return dispatch_->in_flight();
}

} // namespace agentstate::protocol
