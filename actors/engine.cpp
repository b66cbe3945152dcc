// SPDX-License-Identifier: Apache-2.0
// agentstate::engine's calls: argument checks, routing of commands to the
// session and scope actors, and the reads served from a snapshot on the
// calling thread.
#include "agentstate/engine.hpp"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include <caf/all.hpp>

#include "actors/core.hpp"
#include "actors/engine_factory.hpp"
#include "actors/messages.hpp"
#include "actors/polling_sharing.hpp"
#include "actors/spin.hpp"
#include "model/checks.hpp"
#include "model/ids.hpp"
#include "model/text.hpp"
#include "store/change_feed.hpp"
#include "store/commit.hpp"
#include "store/format.hpp"
#include "store/history.hpp"
#include "store/keys.hpp"
#include "store/listing.hpp"
#include "store/open.hpp"
#include "store/reads.hpp"

namespace agentstate {

using namespace detail;

namespace {

error closing_error() {
  return error{errc::unavailable, "the engine is closing"};
}

} // namespace

namespace {

// Routes a command to the session actor of `ref`, spawning it if needed.
template <class Cmd, class T>
void to_session(engine_core& core, const session_ref& ref, Cmd&& cmd, callback<T>& cb) {
  auto key = session_registry_key(ref);
  auto make = [&core, &ref] { return spawn_session_actor(core, ref); };
  if (!core.sessions.route(key, std::forward<Cmd>(cmd), make))
    cb(closing_error());
}

} // namespace

void engine::create_session(create_request req, callback<session> cb) {
  if (auto r = model::check_name(req.app_name, "app_name"); !r)
    return cb(std::move(r).err());
  if (auto r = model::check_name(req.user_id, "user_id"); !r)
    return cb(std::move(r).err());
  req.session_id = std::string(model::trim(req.session_id));
  if (req.session_id.empty())
    req.session_id = model::make_secure_uuid(); // ADK puts session ids in URLs
  if (auto r = model::check_name(req.session_id, "session_id"); !r)
    return cb(std::move(r).err());
  session_ref ref{req.app_name, req.user_id, req.session_id};
  create_cmd cmd{std::move(req), std::move(cb)};
  to_session(*core_, ref, std::move(cmd), cmd.cb);
}

namespace {

result<void> check_get(get_request& req) {
  if (auto r = model::normalize_ref(req.ref); !r)
    return r;
  if (req.num_recent_events && *req.num_recent_events < 0)
    return error{errc::invalid_argument, "'num_recent_events' must not be negative"};
  if (req.after_timestamp && !std::isfinite(*req.after_timestamp))
    return error{errc::invalid_argument, "'after_timestamp' must be finite"};
  return model::check_invocation_id(req.invocation_id, "invocation_id");
}

} // namespace

void engine::get_session_json(get_request req, callback<std::string> cb) {
  if (auto r = check_get(req); !r)
    return cb(std::move(r).err());
  if (!req.invocation_id.empty()) {
    auto ref = req.ref;
    get_cmd cmd{std::move(req), {}, std::move(cb)};
    to_session(*core_, ref, std::move(cmd), cmd.text_cb);
    return;
  }
  if (core_->closed.load())
    return cb(closing_error());
  cb(store::read_session_text(*core_->kv, req, nullptr, core_->opts.limits.max_response_bytes,
                              wall_now(*core_), core_->epoch));
}

void engine::get_session(get_request req, callback<std::optional<session>> cb) {
  if (auto r = check_get(req); !r)
    return cb(std::move(r).err());
  if (!req.invocation_id.empty()) {
    auto ref = req.ref;
    get_cmd cmd{std::move(req), std::move(cb), {}};
    to_session(*core_, ref, std::move(cmd), cmd.cb);
    return;
  }
  if (core_->closed.load())
    return cb(closing_error());
  cb(store::read_session(*core_->kv, req, core_->opts.limits.max_response_bytes, wall_now(*core_),
                         core_->epoch));
}

void engine::list_sessions(list_request req, callback<session_page> cb) {
  if (auto r = model::check_name(req.app_name, "app_name"); !r)
    return cb(std::move(r).err());
  if (req.user_id)
    if (auto r = model::check_name(*req.user_id, "user_id"); !r)
      return cb(std::move(r).err());
  auto size = req.page_size.value_or(100);
  if (size < 1 || size > 1000)
    return cb(error{errc::invalid_argument, "'page_size' must be 1..1000"});
  if (core_->closed.load())
    return cb(closing_error());
  auto txn = store::begin_read(*core_->kv);
  if (!txn)
    return cb(std::move(txn).err());
  cb(store::list_sessions(**txn, req, static_cast<std::size_t>(size),
                          core_->opts.limits.max_response_bytes, wall_now(*core_)));
}

void engine::read_changes(watch_request req, std::size_t limit, callback<change_page> cb) {
  if (auto r = store::check_watch_request(req); !r)
    return cb(std::move(r).err());
  if (limit < 1 || limit > 10000)
    return cb(error{errc::invalid_argument, "'limit' must be 1..10000"});
  std::optional<std::uint64_t> after; // unset: from the oldest change kept
  if (req.from && *req.from != from_start) {
    auto seq = store::parse_cursor(*req.from, core_->epoch);
    if (!seq)
      return cb(std::move(seq).err());
    after = *seq;
  }
  if (core_->closed.load())
    return cb(closing_error());
  store::page_bounds bounds;
  bounds.changes = limit;
  bounds.bytes = core_->opts.limits.max_response_bytes / 2; // room for the JSON around it
  cb(store::read_change_page(*core_->kv, req, after, bounds, core_->epoch));
}

result<std::string> engine::head_cursor() {
  if (core_->closed.load())
    return closing_error();
  auto head = store::read_log_head(*core_->kv);
  if (!head)
    return std::move(head).err();
  return store::format_cursor(core_->epoch, head->bounds.last);
}

result<std::unique_ptr<watch_handle>> engine::watch(watch_request req, change_handler on_changes,
                                                    end_handler on_end) {
  if (auto r = store::check_watch_request(req); !r)
    return std::move(r).err();
  if (!on_changes)
    return error{errc::invalid_argument, "a watch needs an on_changes callback"};
  const bool oldest = req.from && *req.from == from_start;
  std::optional<std::uint64_t> from;
  if (req.from && !oldest) {
    auto seq = store::parse_cursor(*req.from, core_->epoch);
    if (!seq)
      return std::move(seq).err();
    from = *seq;
  }
  if (core_->closed.load())
    return closing_error();
  auto head = store::read_log_head(*core_->kv);
  if (!head)
    return std::move(head).err();
  const auto& b = head->bounds;
  if (from)
    if (auto ok = store::check_cursor(b, *from, core_->epoch); !ok)
      return std::move(ok).err();
  // From the start: just before the oldest change kept now (the head of an
  // empty log).
  if (oldest)
    from = b.first != 0 ? b.first - 1 : b.last;
  return core_->hub->start(std::move(req), from.value_or(b.last), b.last, oldest,
                           std::move(on_changes), std::move(on_end));
}

void engine::delete_session(session_ref ref, callback<void> cb) {
  if (auto r = model::normalize_ref(ref); !r)
    return cb(std::move(r).err());
  delete_cmd cmd{std::move(cb)};
  to_session(*core_, ref, std::move(cmd), cmd.cb);
}

namespace {

result<void> check_rewind(rewind_request& req) {
  if (auto r = model::normalize_ref(req.ref); !r)
    return r;
  if (req.before_invocation_id.empty() == (req.before_version == 0))
    return error{errc::invalid_argument,
                 "a rewind names exactly one of before_invocation_id and before_version"};
  if (auto r = model::check_invocation_id(req.before_invocation_id, "before_invocation_id"); !r)
    return r;
  return model::check_invocation_id(req.event_id, "event_id");
}

} // namespace

void engine::rewind_session(rewind_request req, callback<append_result> cb) {
  if (auto r = check_rewind(req); !r)
    return cb(std::move(r).err());
  auto ref = req.ref;
  rewind_cmd cmd{std::move(req), false, std::move(cb), {}};
  to_session(*core_, ref, std::move(cmd), cmd.cb);
}

void engine::rewind_plan(rewind_request req, callback<rewind_changes> cb) {
  if (auto r = check_rewind(req); !r)
    return cb(std::move(r).err());
  auto ref = req.ref;
  rewind_cmd cmd{std::move(req), true, {}, std::move(cb)};
  to_session(*core_, ref, std::move(cmd), cmd.plan_cb);
}

void engine::list_invocations(session_ref ref, callback<std::vector<invocation_info>> cb) {
  if (auto r = model::normalize_ref(ref); !r)
    return cb(std::move(r).err());
  if (core_->closed.load())
    return cb(closing_error());
  auto txn = store::begin_read(*core_->kv);
  if (!txn)
    return cb(std::move(txn).err());
  auto skey = store::session_key(ref.app_name, ref.user_id, ref.session_id);
  auto rec = store::read_live_record(**txn, skey, wall_now(*core_));
  if (!rec)
    return cb(std::move(rec).err());
  if (!*rec)
    return cb(error{errc::not_found, "session '" + ref.session_id + "' not found"});
  auto outline = store::read_outline(**txn, skey, (**rec).version);
  if (!outline)
    return cb(std::move(outline).err());
  cb(store::invocation_spans(*outline));
}

void engine::fork_session(fork_request req, callback<session> cb) {
  if (auto r = model::normalize_ref(req.ref); !r)
    return cb(std::move(r).err());
  req.new_session_id = std::string(model::trim(req.new_session_id));
  if (req.new_session_id.empty())
    req.new_session_id = model::make_secure_uuid();
  if (auto r = model::check_name(req.new_session_id, "new_session_id"); !r)
    return cb(std::move(r).err());
  session_ref to{req.ref.app_name, req.ref.user_id, req.new_session_id};
  fork_cmd cmd{std::move(req), std::move(cb)};
  to_session(*core_, to, std::move(cmd), cmd.cb);
}

void engine::append_event(append_request req, callback<append_result> cb) {
  if (auto r = model::normalize_ref(req.ref); !r)
    return cb(std::move(r).err());
  auto ref = req.ref;
  append_cmd cmd{std::move(req), std::move(cb)};
  to_session(*core_, ref, std::move(cmd), cmd.cb);
}

void engine::begin_invocation(session_ref ref, std::string invocation_id, callback<session> cb) {
  if (auto r = model::normalize_ref(ref); !r)
    return cb(std::move(r).err());
  if (invocation_id.empty())
    invocation_id = model::make_uuid();
  if (auto r = model::check_name(invocation_id, "invocation_id"); !r)
    return cb(std::move(r).err());
  if (invocation_id.size() > max_event_id_bytes)
    return cb(
      error{errc::too_large,
            "'invocation_id' is longer than " + std::to_string(max_event_id_bytes) + " bytes"});
  begin_invocation_cmd cmd{std::move(invocation_id), std::move(cb)};
  to_session(*core_, ref, std::move(cmd), cmd.cb);
}

void engine::end_invocation(session_ref ref, std::string invocation_id, callback<void> cb) {
  if (auto r = model::normalize_ref(ref); !r)
    return cb(std::move(r).err());
  if (auto r = model::check_invocation_id(invocation_id, "invocation_id"); !r)
    return cb(std::move(r).err());
  // Only a live actor can hold temp: state; a passivated session has none.
  end_invocation_cmd cmd{std::move(invocation_id), std::move(cb)};
  if (!core_->sessions.route(session_registry_key(ref), std::move(cmd), nullptr)) {
    if (core_->closed.load())
      cmd.cb(closing_error());
    else
      cmd.cb(result<void>{});
  }
}

namespace {

// Routes `cmd` to the app's scope actor (a user's, when `user` is set),
// spawning it when needed; answers an error when a name is bad or the
// engine is closing.
void to_scope(engine_core& core, std::string app_name, const std::string* user, scope_get_cmd cmd) {
  if (auto r = model::check_name(app_name, "app_name"); !r)
    return cmd.fail(std::move(r).err());
  if (user)
    if (auto r = model::check_name(*user, "user_id"); !r)
      return cmd.fail(std::move(r).err());
  auto make = [&core, &app_name, user] {
    return spawn_scope_actor(core, app_name,
                             user ? std::optional<std::string>(*user) : std::nullopt);
  };
  auto key = user ? user_registry_key(app_name, *user) : app_registry_key(app_name);
  if (!core.scopes.route(key, std::move(cmd), make))
    cmd.fail(closing_error());
}

} // namespace

void engine::get_app_state(std::string app_name, callback<json> cb) {
  to_scope(*core_, std::move(app_name), nullptr, scope_get_cmd{std::move(cb), {}});
}

void engine::get_user_state(std::string app_name, std::string user_id, callback<json> cb) {
  to_scope(*core_, std::move(app_name), &user_id, scope_get_cmd{std::move(cb), {}});
}

void engine::get_app_state_with_cursor(std::string app_name, callback<scope_snapshot> cb) {
  to_scope(*core_, std::move(app_name), nullptr, scope_get_cmd{{}, std::move(cb)});
}

void engine::get_user_state_with_cursor(std::string app_name, std::string user_id,
                                        callback<scope_snapshot> cb) {
  to_scope(*core_, std::move(app_name), &user_id, scope_get_cmd{{}, std::move(cb)});
}

namespace {

// Sends `msg` (write_cmd or flush_cmd) to the store writer from outside any
// actor; `cb` gets the writer's verdict. The writer is a spawn argument, not
// a capture: CAF 0.17's init_fun_factory binds a null args tuple to a
// reference when a function actor has none (UBSan: "reference binding to
// null pointer"; docs/testing.md, Sanitizers).
template <class Msg>
void ask_writer(engine_core& core, Msg msg, callback<void> cb) {
  core.sys->spawn(
    [cb](caf::event_based_actor* self, writer_hdl writer, std::shared_ptr<Msg> m) {
      self->request(writer, caf::infinite, std::move(*m))
        .then(
          [self, cb](write_reply& r) {
            if (r.code == errc::ok)
              cb(result<void>{});
            else
              cb(error{r.code, std::move(r.message)});
            self->quit();
          },
          [self, cb](caf::error& e) {
            cb(error{errc::unavailable, "store writer unreachable: " + to_string(e)});
            self->quit();
          });
    },
    core.writer, std::make_shared<Msg>(std::move(msg)));
}

} // namespace

namespace {

// X2/X3: one fence write set for the user (`user` set) or the app.
void delete_scope(engine_core& core, std::string app, std::optional<std::string> user,
                  callback<void> cb) {
  if (auto r = model::check_name(app, "app_name"); !r)
    return cb(std::move(r).err());
  if (user)
    if (auto r = model::check_name(*user, "user_id"); !r)
      return cb(std::move(r).err());
  if (core.closed.load())
    return cb(closing_error());
  write_plan plan;
  plan.ws.op = user ? store::write_set::kind::remove_user : store::write_set::kind::remove_app;
  plan.ws.app = std::move(app);
  plan.ws.user = user.value_or("");
  sent_to_writer(core);
  ask_writer(core, write_cmd{std::move(plan)}, std::move(cb));
}

} // namespace

void engine::delete_user(std::string app_name, std::string user_id, callback<void> cb) {
  delete_scope(*core_, std::move(app_name), std::move(user_id), std::move(cb));
}

void engine::delete_app(std::string app_name, callback<void> cb) {
  delete_scope(*core_, std::move(app_name), std::nullopt, std::move(cb));
}

void engine::flush(callback<void> cb) {
  if (core_->closed.load())
    return cb(closing_error());
  ask_writer(*core_, flush_cmd{}, std::move(cb));
}

} // namespace agentstate
