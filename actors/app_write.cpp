// SPDX-License-Identifier: Apache-2.0
// engine::apply_app_write: a cluster's app: write applied at the app's home
// (store/app_writes.hpp), checked here and committed by the store writer,
// which resolves its modifies and keeps its outcome in the same commit.
#include <algorithm>
#include <memory>

#include <caf/all.hpp>

#include "actors/core.hpp"
#include "actors/messages.hpp"
#include "actors/prepare.hpp"
#include "agentstate/engine.hpp"
#include "agentstate/scope.hpp"
#include "model/checks.hpp"
#include "store/app_writes.hpp"

namespace agentstate {

using namespace detail;

namespace {

result<void> check_write_id(const std::string& id, const char* what) {
  if (id.empty() || id.size() > store::max_write_id_bytes)
    return error{errc::invalid_argument,
                 std::string(what) + " must be 1 to " + std::to_string(store::max_write_id_bytes)
                   + " bytes"};
  return model::check_string(id, what, store::max_write_id_bytes);
}

result<void> check_app_key(const std::string& key, const char* where) {
  if (scope_of(key) != scope::app)
    return error{errc::invalid_argument,
                 std::string(where) + " key '" + key
                   + "' is not an app: key (an app write writes "
                     "only the app: scope)"};
  return model::check_key(key);
}

// The plan of `req`: its sets and removes as app rows, its modifies for the
// writer to resolve.
result<write_plan> plan_app_write(const engine_core& core, app_write_request& req) {
  if (auto r = model::check_name(req.app_name, "app_name"); !r)
    return std::move(r).err();
  if (auto r = check_write_id(req.write_id, "write_id"); !r)
    return std::move(r).err();
  if (req.forget.size() > 1024)
    return error{errc::invalid_argument, "an app write forgets at most 1,024 write ids"};
  for (auto& id : req.forget)
    if (auto r = check_write_id(id, "a forgotten write id"); !r)
      return std::move(r).err();
  if (!req.state_delta.is_object())
    return error{errc::invalid_argument, "state_delta must be an object"};
  const auto& lim = core.opts.limits;
  write_plan plan;
  plan.ws.op = store::write_set::kind::app_write;
  for (auto it = req.state_delta.begin(); it != req.state_delta.end(); ++it) {
    if (auto r = check_app_key(it.key(), "state_delta"); !r)
      return std::move(r).err();
    if (auto r = model::check_depth(lim, it.value(), "state value of '" + it.key() + "'"); !r)
      return std::move(r).err();
    auto w = encode_value(lim, std::string(unprefixed(it.key())), it.value());
    if (!w)
      return std::move(w).err();
    plan.ws.app_writes.push_back(std::move(*w));
  }
  for (auto& key : req.state_remove) {
    if (auto r = check_app_key(key, "state_remove"); !r)
      return std::move(r).err();
    if (req.state_delta.contains(key))
      return error{errc::invalid_argument,
                   "key '" + key + "' is both set and removed by one app write"};
    store::state_write w;
    w.key = std::string(unprefixed(key));
    w.erase = true;
    plan.ws.app_writes.push_back(std::move(w));
  }
  for (auto& m : req.modify) {
    if (auto r = check_app_key(m.key, "modify"); !r)
      return std::move(r).err();
    if (!m.fn)
      return error{errc::invalid_argument, "modify of '" + m.key + "' has no function"};
  }
  plan.ws.app = std::move(req.app_name);
  plan.ws.id = std::move(req.write_id);
  plan.ws.forget = std::move(req.forget);
  plan.late = std::make_shared<late_binding>();
  plan.late->modify = std::move(req.modify);
  return plan;
}

result<app_write_result> outcome_of(const std::string& text, bool duplicate) {
  auto o = json::parse(text, nullptr, false);
  if (o.is_discarded() || !o.is_object() || !o.contains("values") || !o["values"].is_object()
      || !o.contains("removed") || !o["removed"].is_array())
    return error{errc::data_corrupt, "the kept outcome of an app write does not decode"};
  app_write_result out;
  out.values = std::move(o["values"]);
  for (auto& k : o["removed"])
    if (k.is_string())
      out.removed.push_back(k.get<std::string>());
  out.duplicate = duplicate;
  return out;
}

} // namespace

void engine::apply_app_write(app_write_request req, callback<app_write_result> cb) {
  if (core_->closed.load())
    return cb(error{errc::unavailable, "the engine is closing"});
  auto plan = plan_app_write(*core_, req);
  if (!plan)
    return cb(std::move(plan).err());
  sent_to_writer(*core_);
  // The writer is a spawn argument, not a capture (engine.cpp's ask_writer
  // says why).
  core_->sys->spawn(
    [cb](caf::event_based_actor* self, writer_hdl writer, std::shared_ptr<write_plan> p) {
      self->request(writer, caf::infinite, write_cmd{std::move(*p)})
        .then(
          [self, cb](write_reply& r) {
            if (r.code == errc::ok && r.late)
              cb(outcome_of(r.late->outcome, false));
            else if (r.code == errc::already_exists && r.late && !r.late->outcome.empty())
              cb(outcome_of(r.late->outcome, true));
            else
              cb(error{r.code == errc::ok ? errc::internal : r.code, std::move(r.message)});
            self->quit();
          },
          [self, cb](caf::error& e) {
            cb(error{errc::unavailable, "store writer unreachable: " + to_string(e)});
            self->quit();
          });
    },
    core_->writer, std::make_shared<write_plan>(std::move(*plan)));
}

} // namespace agentstate
