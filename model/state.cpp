// SPDX-License-Identifier: Apache-2.0
// The delta-aware state view (include/agentstate/state.hpp; docs/semantics.md I1,
// N1, N2). Pure: no I/O, no actors.
//
// Layout: base_ is the snapshot; overlay_ holds pending values (sets and
// modify previews); removed_ holds pending removes. overlay_ and removed_ are
// disjoint. Reads look at overlay_, then removed_ (hides), then base_.
// pending_ mirrors what an event would carry: pending_.set and pending_.remove
// are disjoint, pending_.modify never names a key that pending_.set or
// pending_.remove holds (a later set/remove supersedes earlier modifies, and a
// modify after a set/remove is recorded as a set).
//
// No member throws: nlohmann exceptions (json::exception) are caught and
// returned as errors; a throwing modify() fn becomes invalid_argument.
#include "agentstate/state.hpp"

#include <algorithm>
#include <exception>
#include <utility>

#include "agentstate/scope.hpp"

namespace agentstate {

namespace {

constexpr std::string_view session_ns = "session:";
constexpr std::string_view bg_ns = "bg:";

bool prefixed_by(std::string_view s, std::string_view p) noexcept {
  return s.size() >= p.size() && s.compare(0, p.size(), p) == 0;
}

// N1 derived fallback: only a key outside every namespace of N1 falls back,
// i.e. a key that starts with none of app:, user:, temp:, turn:, session:,
// bg:, derived:. So "x" falls back to "derived:x", but "session:x" and "bg:x"
// do not (nor "derived:x" itself). A key with another, unknown ':' prefix
// ("foo:x") is a plain session key and falls back to "derived:foo:x".
bool falls_back_to_derived(std::string_view key) noexcept {
  return scope_of(key) == scope::session && !is_derived(key) && !prefixed_by(key, session_ns)
    && !prefixed_by(key, bg_ns);
}

result<void> check_writable(std::string_view key) {
  if (key.empty())
    return error{errc::invalid_argument, "state key is empty"};
  if (is_derived(key))
    return error{errc::invalid_argument,
                 "state key '" + std::string(key)
                   + "' is read-only: derived: keys are computed by "
                     "the engine"};
  return {};
}

bool is_invocation_key(std::string_view key) noexcept {
  return scope_of(key) == scope::temp;
}

// Inserts `key` into the sorted, unique vector `v`.
void insert_sorted(std::vector<std::string>& v, std::string_view key) {
  auto it = std::lower_bound(v.begin(), v.end(), key,
                             [](const std::string& a, std::string_view b) { return a < b; });
  if (it == v.end() || *it != key)
    v.insert(it, std::string(key));
}

void erase_sorted(std::vector<std::string>& v, std::string_view key) {
  auto it = std::lower_bound(v.begin(), v.end(), key,
                             [](const std::string& a, std::string_view b) { return a < b; });
  if (it != v.end() && *it == key)
    v.erase(it);
}

bool contains_sorted(const std::vector<std::string>& v, std::string_view key) {
  return std::binary_search(v.begin(), v.end(), key,
                            [](std::string_view a, std::string_view b) { return a < b; });
}

void drop_modifies(std::vector<state_modify>& v, std::string_view key) {
  v.erase(std::remove_if(v.begin(), v.end(), [&](const state_modify& m) { return m.key == key; }),
          v.end());
}

// The entry of `key` in object `o`, or nullptr.
const json* member_of(const json& o, const std::string& key) {
  if (!o.is_object())
    return nullptr;
  auto it = o.find(key);
  return it == o.end() ? nullptr : &*it;
}

// The keys of `st` that start with `prefix`, without it, in st.keys() order.
std::vector<std::string> keys_under(const state& st, std::string_view prefix) {
  std::vector<std::string> out;
  for (auto& k : st.keys())
    if (prefixed_by(k, prefix))
      out.push_back(k.substr(prefix.size()));
  return out;
}

// The members of st.all() whose keys start with `prefix`, without it.
json all_under(const state& st, std::string_view prefix) {
  json out = json::object();
  json merged = st.all();
  for (auto it = merged.begin(); it != merged.end(); ++it)
    if (prefixed_by(it.key(), prefix))
      out[it.key().substr(prefix.size())] = it.value();
  return out;
}

error internal_error(std::string_view what, const json::exception& e) {
  return error{errc::internal, std::string(what) + ": " + e.what()};
}

} // namespace

// -- state: reads ---------------------------------------------------------------------

state::state(json merged) {
  if (merged.is_object())
    base_ = std::move(merged);
}

// The direct value of `key` (no derived fallback).
static const json* direct_find(const json& base, const json& overlay,
                               const std::set<std::string, std::less<>>& removed,
                               const std::string& key) {
  if (const json* v = member_of(overlay, key))
    return v;
  if (removed.find(key) != removed.end())
    return nullptr;
  return member_of(base, key);
}

const json* state::find(std::string_view key) const {
  std::string k(key);
  if (const json* v = direct_find(base_, overlay_, removed_, k))
    return v;
  if (!falls_back_to_derived(key))
    return nullptr;
  return direct_find(base_, overlay_, removed_, std::string(derived_prefix) + k);
}

json state::get(std::string_view key, json fallback) const {
  const json* v = find(key);
  return v ? *v : std::move(fallback);
}

json state::all() const {
  json out = base_;
  for (const auto& k : removed_)
    out.erase(k);
  for (auto it = overlay_.begin(); it != overlay_.end(); ++it)
    out[it.key()] = it.value();
  return out;
}

std::vector<std::string> state::keys() const {
  std::vector<std::string> out;
  json merged = all();
  out.reserve(merged.size());
  for (auto it = merged.begin(); it != merged.end(); ++it)
    out.push_back(it.key());
  return out; // json objects iterate in key order: already sorted
}

json state::pick(const std::vector<std::string>& keys) const {
  // Reads as find() does: an unprefixed key may be answered by its derived:
  // fallback, and appears under the name asked for.
  json out = json::object();
  for (const auto& k : keys)
    if (const json* v = find(k))
      out[k] = *v;
  return out;
}

// -- state: writes --------------------------------------------------------------------

result<void> state::set(std::string_view key, json value) {
  if (auto ok = check_writable(key); !ok)
    return ok;
  try {
    std::string k(key);
    removed_.erase(k);
    erase_sorted(pending_.remove, k);
    drop_modifies(pending_.modify, k);
    overlay_[k] = value;
    pending_.set[k] = std::move(value);
    return {};
  } catch (const json::exception& e) {
    return internal_error("state::set", e);
  }
}

result<void> state::remove(std::string_view key) {
  if (auto ok = check_writable(key); !ok)
    return ok;
  try {
    std::string k(key);
    overlay_.erase(k);
    pending_.set.erase(k);
    drop_modifies(pending_.modify, k);
    removed_.insert(k);
    insert_sorted(pending_.remove, k);
    return {};
  } catch (const json::exception& e) {
    return internal_error("state::remove", e);
  }
}

result<json> state::modify(std::string_view key, json fallback,
                           std::function<json(const json&)> fn) {
  if (auto ok = check_writable(key); !ok)
    return std::move(ok).err();
  if (!fn)
    return error{errc::invalid_argument,
                 "modify of state key '" + std::string(key) + "' has no function"};
  std::string k(key);
  // The direct value (no derived fallback): the store writer re-applies fn to
  // the committed value of this very key. Copied, since fn may touch *this.
  const json* cur = direct_find(base_, overlay_, removed_, k);
  json current = cur ? *cur : fallback;
  json out;
  try {
    out = fn(current);
  } catch (const std::exception& e) {
    return error{errc::invalid_argument,
                 "modify of state key '" + k + "': the function threw: " + e.what()};
  } catch (...) {
    return error{errc::invalid_argument, "modify of state key '" + k + "': the function threw"};
  }
  if (is_invocation_key(k) || pending_.set.contains(k) || contains_sorted(pending_.remove, k)) {
    if (auto ok = set(k, out); !ok)
      return std::move(ok).err();
    return out;
  }
  try {
    overlay_[k] = out;
    pending_.modify.push_back(state_modify{k, std::move(fallback), std::move(fn)});
    return out;
  } catch (const json::exception& e) {
    return internal_error("state::modify", e);
  }
}

result<void> state::merge(const json& values) {
  if (!values.is_object())
    return error{errc::invalid_argument,
                 std::string("merge needs an object, got ") + values.type_name()};
  for (auto it = values.begin(); it != values.end(); ++it)
    if (auto ok = check_writable(it.key()); !ok)
      return ok;
  for (auto it = values.begin(); it != values.end(); ++it)
    if (auto ok = set(it.key(), it.value()); !ok)
      return ok; // not reached: every key was checked above
  return {};
}

result<void> state::rename(std::string_view from, std::string_view to) {
  if (auto ok = check_writable(from); !ok)
    return ok;
  if (auto ok = check_writable(to); !ok)
    return ok;
  std::string f(from);
  // The direct value of `from`: a derived: fallback is not moved (removing
  // `from` would not remove it).
  const json* v = direct_find(base_, overlay_, removed_, f);
  if (!v)
    return error{errc::not_found, "rename: state key '" + f + "' is missing"};
  if (from == to)
    return {};
  json value = *v; // copied: set() may invalidate v
  if (auto ok = set(to, std::move(value)); !ok)
    return ok;
  return remove(from);
}

result<std::size_t> state::clear_prefix(std::string_view prefix) {
  // Refused when the prefix could match a derived: key: "derived:" itself, a
  // prefix of it ("", "d", "derived"), or a longer prefix inside it
  // ("derived:x"). Any other prefix matches no derived: key.
  if (prefixed_by(derived_prefix, prefix) || prefixed_by(prefix, derived_prefix))
    return error{errc::invalid_argument,
                 "clear_prefix: prefix '" + std::string(prefix)
                   + "' would match derived: keys, which are read-only"};
  std::size_t n = 0;
  for (const auto& k : keys()) {
    if (!prefixed_by(k, prefix))
      continue;
    if (auto ok = remove(k); !ok)
      return std::move(ok).err();
    ++n;
  }
  return n;
}

// -- state: delta tracking ------------------------------------------------------------

state_change state::commit() {
  for (const auto& k : removed_)
    base_.erase(k);
  for (auto it = overlay_.begin(); it != overlay_.end(); ++it)
    base_[it.key()] = std::move(it.value());
  overlay_ = json::object();
  removed_.clear();
  state_change out = std::move(pending_);
  pending_ = state_change{};
  return out;
}

void state::rollback() {
  overlay_ = json::object();
  removed_.clear();
  pending_ = state_change{};
}

void state::apply_committed(const json& delta, const std::vector<std::string>& removed) {
  // The delta's sets first, then its removes (a key in both ends up removed).
  if (delta.is_object())
    for (auto it = delta.begin(); it != delta.end(); ++it)
      base_[it.key()] = it.value();
  for (const auto& k : removed)
    base_.erase(k);
}

void state::drop_invocation_keys() {
  auto drop = [](json& o) {
    for (auto it = o.begin(); it != o.end();)
      it = is_invocation_key(it.key()) ? o.erase(it) : std::next(it);
  };
  drop(base_);
  drop(overlay_);
  drop(pending_.set);
  for (auto it = removed_.begin(); it != removed_.end();)
    it = is_invocation_key(*it) ? removed_.erase(it) : std::next(it);
  pending_.remove.erase(std::remove_if(pending_.remove.begin(), pending_.remove.end(),
                                       [](const std::string& k) { return is_invocation_key(k); }),
                        pending_.remove.end());
  pending_.modify.erase(
    std::remove_if(pending_.modify.begin(), pending_.modify.end(),
                   [](const state_modify& m) { return is_invocation_key(m.key); }),
    pending_.modify.end());
}

// -- scoped_state ---------------------------------------------------------------------

bool scoped_state::contains(std::string_view name) const {
  return find(name) != nullptr;
}

const json* scoped_state::find(std::string_view name) const {
  return st_->find(prefix_ + std::string(name));
}

json scoped_state::get(std::string_view name, json fallback) const {
  return st_->get(prefix_ + std::string(name), std::move(fallback));
}

result<void> scoped_state::set(std::string_view name, json value) {
  return st_->set(prefix_ + std::string(name), std::move(value));
}

result<void> scoped_state::remove(std::string_view name) {
  return st_->remove(prefix_ + std::string(name));
}

std::vector<std::string> scoped_state::keys() const {
  return keys_under(*st_, prefix_);
}

json scoped_state::all() const {
  return all_under(*st_, prefix_);
}

// -- derived_view ---------------------------------------------------------------------

bool derived_view::contains(std::string_view name) const {
  return find(name) != nullptr;
}

const json* derived_view::find(std::string_view name) const {
  return st_->find(std::string(derived_prefix) + std::string(name));
}

json derived_view::get(std::string_view name, json fallback) const {
  return st_->get(std::string(derived_prefix) + std::string(name), std::move(fallback));
}

std::vector<std::string> derived_view::keys() const {
  return keys_under(*st_, derived_prefix);
}

json derived_view::all() const {
  return all_under(*st_, derived_prefix);
}

// -- free functions -------------------------------------------------------------------

json snapshot_values(const state& st, const std::vector<std::string>& keys) {
  return keys.empty() ? st.all() : st.pick(keys);
}

state_change diff_values(const json& before, const json& after) {
  static const json empty = json::object();
  const json& b = before.is_object() ? before : empty;
  const json& a = after.is_object() ? after : empty;
  state_change out;
  for (auto it = a.begin(); it != a.end(); ++it) {
    const json* old = member_of(b, it.key());
    if (!old || *old != it.value())
      out.set[it.key()] = it.value();
  }
  for (auto it = b.begin(); it != b.end(); ++it)
    if (!a.contains(it.key()))
      out.remove.push_back(it.key()); // object order: sorted, unique
  return out;
}

} // namespace agentstate
