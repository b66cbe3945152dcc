// SPDX-License-Identifier: Apache-2.0
// The blocking form of every engine call: the async form, awaited.
#include "agentstate/engine.hpp"

#include "actors/block_on.hpp"

namespace agentstate {

using namespace detail;

result<session> engine::create_session(create_request req) {
  return block_on<session>(*core_,
                           [&](callback<session> cb) { create_session(std::move(req), cb); });
}
result<std::optional<session>> engine::get_session(get_request req) {
  return block_on<std::optional<session>>(
    *core_, [&](callback<std::optional<session>> cb) { get_session(std::move(req), cb); });
}
result<change_page> engine::read_changes(watch_request req, std::size_t limit) {
  return block_on<change_page>(
    *core_, [&](callback<change_page> cb) { read_changes(std::move(req), limit, cb); });
}
result<session_page> engine::list_sessions(list_request req) {
  return block_on<session_page>(
    *core_, [&](callback<session_page> cb) { list_sessions(std::move(req), cb); });
}
result<std::string> engine::get_session_json(get_request req) {
  return block_on<std::string>(
    *core_, [&](callback<std::string> cb) { get_session_json(std::move(req), cb); });
}
result<void> engine::delete_session(session_ref ref) {
  return block_on<void>(*core_, [&](callback<void> cb) { delete_session(std::move(ref), cb); });
}
result<void> engine::delete_user(std::string app_name, std::string user_id) {
  return block_on<void>(
    *core_, [&](callback<void> cb) { delete_user(std::move(app_name), std::move(user_id), cb); });
}
result<void> engine::delete_app(std::string app_name) {
  return block_on<void>(*core_, [&](callback<void> cb) { delete_app(std::move(app_name), cb); });
}
result<app_write_result> engine::apply_app_write(app_write_request req) {
  return block_on<app_write_result>(
    *core_, [&](callback<app_write_result> cb) { apply_app_write(std::move(req), cb); });
}
result<append_result> engine::append_event(append_request req) {
  return block_on<append_result>(
    *core_, [&](callback<append_result> cb) { append_event(std::move(req), cb); });
}
result<session> engine::begin_invocation(session_ref ref, std::string invocation_id) {
  return block_on<session>(*core_, [&](callback<session> cb) {
    begin_invocation(std::move(ref), std::move(invocation_id), cb);
  });
}
result<void> engine::end_invocation(session_ref ref, std::string invocation_id) {
  return block_on<void>(*core_, [&](callback<void> cb) {
    end_invocation(std::move(ref), std::move(invocation_id), cb);
  });
}
result<append_result> engine::rewind_session(rewind_request req) {
  return block_on<append_result>(
    *core_, [&](callback<append_result> cb) { rewind_session(std::move(req), cb); });
}
result<rewind_changes> engine::rewind_plan(rewind_request req) {
  return block_on<rewind_changes>(
    *core_, [&](callback<rewind_changes> cb) { rewind_plan(std::move(req), cb); });
}
result<std::vector<invocation_info>> engine::list_invocations(session_ref ref) {
  return block_on<std::vector<invocation_info>>(
    *core_,
    [&](callback<std::vector<invocation_info>> cb) { list_invocations(std::move(ref), cb); });
}
result<session> engine::fork_session(fork_request req) {
  return block_on<session>(*core_, [&](callback<session> cb) { fork_session(std::move(req), cb); });
}
result<json> engine::get_app_state(std::string app_name) {
  return block_on<json>(*core_, [&](callback<json> cb) { get_app_state(std::move(app_name), cb); });
}
result<json> engine::get_user_state(std::string app_name, std::string user_id) {
  return block_on<json>(*core_, [&](callback<json> cb) {
    get_user_state(std::move(app_name), std::move(user_id), cb);
  });
}
result<scope_snapshot> engine::get_app_state_with_cursor(std::string app_name) {
  return block_on<scope_snapshot>(*core_, [&](callback<scope_snapshot> cb) {
    get_app_state_with_cursor(std::move(app_name), cb);
  });
}
result<scope_snapshot> engine::get_user_state_with_cursor(std::string app_name,
                                                          std::string user_id) {
  return block_on<scope_snapshot>(*core_, [&](callback<scope_snapshot> cb) {
    get_user_state_with_cursor(std::move(app_name), std::move(user_id), cb);
  });
}
result<void> engine::flush() {
  return block_on<void>(*core_, [&](callback<void> cb) { flush(cb); });
}

} // namespace agentstate
