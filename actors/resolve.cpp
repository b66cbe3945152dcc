// SPDX-License-Identifier: Apache-2.0
#include "actors/resolve.hpp"

#include <algorithm>
#include <exception>
#include <set>

#include "actors/prepare.hpp"
#include "agentstate/scope.hpp"
#include "model/checks.hpp"
#include "store/app_writes.hpp"
#include "store/reads.hpp"

namespace agentstate::detail {

namespace {

// Runs a host function (a modify or a derived key) and checks its result
// like a client value. Exceptions become invalid_argument.
template <class Fn>
result<json> run_host_fn(const limits& lim, const std::string& what, Fn&& fn) {
  json v;
  try {
    v = fn();
  } catch (const std::exception& e) {
    return error{errc::invalid_argument, what + " threw: " + e.what()};
  } catch (...) {
    return error{errc::invalid_argument, what + " threw a non-standard exception"};
  }
  if (auto r = model::check_depth(lim, v, what + "'s result"); !r)
    return std::move(r).err();
  return v;
}

} // namespace

result<void> resolve_late(store::kv_read& txn, const engine_core& core, write_plan& plan) {
  const auto& lim = core.opts.limits;
  auto& ws = plan.ws;
  auto& late = *plan.late;
  const bool append = ws.op == store::write_set::kind::append;
  const bool app_write = ws.op == store::write_set::kind::app_write;
  if (app_write) {
    auto prior = store::read_app_write(txn, ws.app, ws.id);
    if (!prior)
      return std::move(prior).err();
    if (*prior) {
      late.outcome = std::move(**prior);
      return error{errc::already_exists, "app write '" + ws.id + "' was applied before"};
    }
  }
  const json& delta = late.ev.actions.state_delta;
  const auto& removes = late.ev.actions.state_remove;
  // The value `key` has once this write set's own rows and earlier resolved
  // values are applied.
  auto current = [&](const std::string& key) -> result<std::optional<json>> {
    if (auto it = late.added.find(key); it != late.added.end())
      return std::optional<json>{*it};
    if (append) {
      if (auto it = delta.find(key); it != delta.end())
        return std::optional<json>{*it};
      if (std::binary_search(removes.begin(), removes.end(), key))
        return std::optional<json>{};
    } else {
      const auto* rows = &ws.session_writes;
      auto s = scope_of(key);
      if (s == scope::user)
        rows = &ws.user_writes;
      else if (s == scope::app)
        rows = &ws.app_writes;
      auto name = s == scope::session ? std::string_view(key) : unprefixed(key);
      for (auto& w : *rows)
        if (w.key == name)
          return std::optional<json>{w.value};
    }
    return store::read_state_value(txn, ws.app, ws.user, ws.id, key);
  };
  std::set<std::string> changed;
  for (auto& m : late.modify) {
    auto cur = current(m.key);
    if (!cur)
      return std::move(cur).err();
    if (m.expected && (!*cur || **cur != *m.expected))
      return error{errc::condition_failed,
                   "compare_and_set of '" + m.key + "': the key "
                     + (*cur ? "holds another value" : "is missing") + "; nothing was stored"};
    const json& in = *cur ? **cur : m.fallback;
    auto v = run_host_fn(lim, "modify of '" + m.key + "'", [&] { return m.fn(in); });
    if (!v)
      return std::move(v).err();
    late.added[m.key] = std::move(*v);
    changed.insert(m.key);
  }
  if (late.derive) {
    if (append) {
      for (auto it = delta.begin(); it != delta.end(); ++it)
        changed.insert(it.key());
      changed.insert(removes.begin(), removes.end());
    } else {
      for (auto& w : ws.session_writes)
        changed.insert(w.key);
      for (auto& w : ws.user_writes)
        changed.insert(std::string(user_prefix) + w.key);
      for (auto& w : ws.app_writes)
        changed.insert(std::string(app_prefix) + w.key);
    }
    for (auto& d : core.opts.derived) {
      bool hit = false;
      for (auto& in : d.inputs)
        hit = hit || changed.count(in) > 0;
      if (!hit)
        continue;
      json inputs = json::object();
      for (auto& in : d.inputs) {
        auto cur = current(in);
        if (!cur)
          return std::move(cur).err();
        if (*cur)
          inputs[in] = std::move(**cur);
      }
      auto v = run_host_fn(lim, "derived key '" + d.name + "'", [&] { return d.fn(inputs); });
      if (!v)
        return std::move(v).err();
      late.added[std::string(derived_prefix) + d.name] = std::move(*v);
    }
  }
  for (auto it = late.added.begin(); it != late.added.end(); ++it)
    if (auto r = add_resolved_row(lim, ws, it.key(), it.value()); !r)
      return r;
  if (app_write) {
    // What the write left in each key it names, in the order its rows apply.
    json values = json::object(), removed = json::array();
    for (auto& w : ws.app_writes) {
      auto key = std::string(app_prefix) + w.key;
      if (w.erase)
        values.erase(key);
      else
        values[key] = w.value;
    }
    for (auto& w : ws.app_writes)
      if (w.erase) {
        auto key = std::string(app_prefix) + w.key;
        if (!values.contains(key)
            && std::find(removed.begin(), removed.end(), key) == removed.end())
          removed.push_back(std::move(key));
      }
    ws.outcome = json{{"values", std::move(values)}, {"removed", std::move(removed)}}.dump();
    late.outcome = ws.outcome;
    return {};
  }
  if (!append)
    return {};
  auto& ev = late.ev;
  for (auto it = late.added.begin(); it != late.added.end(); ++it) {
    ev.actions.state_delta[it.key()] = it.value();
    auto& rm = ev.actions.state_remove;
    if (auto p = std::lower_bound(rm.begin(), rm.end(), it.key()); p != rm.end() && *p == it.key())
      rm.erase(p);
  }
  if (auto text = encode_event(lim, ev, ws); !text)
    return std::move(text).err();
  return {};
}

} // namespace agentstate::detail
