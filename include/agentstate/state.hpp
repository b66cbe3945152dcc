// SPDX-License-Identifier: Apache-2.0
// agentstate/state.hpp: the delta-aware state view (docs/semantics.md I1, N1, N2).
// A value type over a merged state snapshot plus a pending change: reads see
// pending writes; writes, removes and modifies are recorded in the pending
// change, which the next appended event carries (invocation.hpp does that).
// No I/O; usable on its own over any snapshot (e.g. session::state).
//
//   state st{sess.state};
//   int n = st.get<int>("user:visits", 0);
//   st.set("user:visits", n + 1);           // pending; st.get sees it
//   st.user().keys();                       // names without "user:"
//   state_change c = st.commit();           // what an event would carry
//
// Not thread-safe: one thread (or actor) uses a state at a time. No member
// throws; errors are result values.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "agentstate/error.hpp"
#include "agentstate/json.hpp"
#include "agentstate/types.hpp"

namespace agentstate {

/// A change to state, as one event carries it: sets (state_delta), removes
/// (state_remove) and atomic modifies (append_request::modify).
struct state_change {
  json set = json::object(); ///< prefixed key -> new value
  std::vector<std::string> remove; ///< prefixed keys deleted (sorted, unique)
  std::vector<state_modify> modify; ///< in call order
  bool empty() const { return set.empty() && remove.empty() && modify.empty(); }
};

/// A typed key: its full (prefixed) name and the value reads give when the
/// key is missing or holds another type.
template <class T>
struct state_key {
  std::string name;
  T fallback{};
};

class state;

/// The keys of one namespace of a state ("app:", "user:", "temp:", "turn:",
/// "session:", "bg:"): `st.app().get("x")` is `st.get("app:x")` (N2).
/// A view borrows its state; it must not outlive it.
class scoped_state {
public:
  scoped_state(state& st, std::string prefix) : st_(&st), prefix_(std::move(prefix)) {}
  const std::string& prefix() const { return prefix_; }
  bool contains(std::string_view name) const;
  const json* find(std::string_view name) const;
  json get(std::string_view name, json fallback = nullptr) const;
  template <class T>
  T get(std::string_view name, T fallback) const;
  std::string get(std::string_view name, const char* fallback) const {
    return get<std::string>(name, std::string(fallback));
  }
  result<void> set(std::string_view name, json value);
  result<void> remove(std::string_view name);
  /// Names present in this namespace, without the prefix, sorted.
  std::vector<std::string> keys() const;
  /// This namespace as an object, names without the prefix.
  json all() const;

private:
  state* st_;
  std::string prefix_;
};

/// The read-only "derived:" namespace (values the engine computes).
class derived_view {
public:
  explicit derived_view(const state& st) : st_(&st) {}
  bool contains(std::string_view name) const;
  const json* find(std::string_view name) const;
  json get(std::string_view name, json fallback = nullptr) const;
  std::vector<std::string> keys() const;
  json all() const;

private:
  const state* st_;
};

class state {
public:
  /// An empty state.
  state() = default;
  /// A view over `merged` (a merged state object as get_session returns it;
  /// a non-object gives an empty state). Nothing is pending.
  explicit state(json merged);

  // -- reads: the snapshot with the pending change applied ---------------------

  /// The value of `key`, or nullptr when missing. An unprefixed key that is
  /// missing falls back to "derived:"+key (a direct key wins; N1). The
  /// pointer is valid until the next write to this state.
  const json* find(std::string_view key) const;
  bool contains(std::string_view key) const { return find(key) != nullptr; }
  /// The value, or `fallback` when missing.
  json get(std::string_view key, json fallback = nullptr) const;
  /// The value converted to T; `fallback` when missing or not convertible
  /// (as get_as decides).
  template <class T>
  T get(std::string_view key, T fallback) const;
  /// A string with a string-literal fallback: get("name", "anon").
  std::string get(std::string_view key, const char* fallback) const {
    return get<std::string>(key, std::string(fallback));
  }
  template <class T>
  T get(const state_key<T>& k) const {
    return get<T>(k.name, k.fallback);
  }
  /// The value converted to T, without lossy conversions (a bool is not a
  /// number, a non-integer is not an integral T). Errors: not_found
  /// (missing, naming the key), invalid_argument (another type; names the
  /// key and the stored type).
  template <class T>
  result<T> get_as(std::string_view key) const;
  /// The whole view as one object (prefixed keys).
  json all() const;
  /// Present keys (prefixed), sorted.
  std::vector<std::string> keys() const;

  // -- writes: recorded in the pending change ----------------------------------
  // Errors (nothing recorded): invalid_argument for an empty key or a
  // "derived:" key (the engine computes those).

  result<void> set(std::string_view key, json value);
  template <class T>
  result<void> set(const state_key<T>& k, T value) {
    return set(k.name, json(std::move(value)));
  }
  /// Deletes `key` (recorded even when it is missing here, since another
  /// writer may have set it). Reads then miss it.
  result<void> remove(std::string_view key);
  /// Atomic read-modify-write (state_modify): applied here at once to the
  /// current value (or `fallback`) so reads see it, and recorded so the store
  /// writer re-applies `fn` to the committed value in commit order. For
  /// temp:/turn: keys, and for a key this change already set or removed,
  /// the local result is recorded as a plain set instead. Returns the local
  /// result. Errors: as set, plus invalid_argument when fn throws or
  /// `fn` is empty.
  result<json> modify(std::string_view key, json fallback, std::function<json(const json&)> fn);
  /// set() of every member of `values` (an object). All or nothing.
  result<void> merge(const json& values);
  /// Moves the value of `from` to `to` (a set of `to` and a remove of
  /// `from`). Errors: not_found when `from` is missing; as set.
  result<void> rename(std::string_view from, std::string_view to);
  /// Removes every present key that starts with `prefix`; returns how many.
  /// Errors: invalid_argument for "derived:" (or a prefix of it, like "d").
  result<std::size_t> clear_prefix(std::string_view prefix);
  /// The present keys among `keys`, as an object (missing keys are absent).
  json pick(const std::vector<std::string>& keys) const;

  // -- delta tracking -------------------------------------------------------------

  /// True when a change is pending.
  bool dirty() const { return !pending_.empty(); }
  /// The pending change (what commit() would return).
  const state_change& pending() const { return pending_; }
  /// Returns the pending change and makes it part of the snapshot; nothing
  /// is pending afterwards.
  state_change commit();
  /// Drops the pending change: set keys revert, removed keys come back.
  void rollback();
  /// Folds a change that is already committed elsewhere into the snapshot
  /// (e.g. a stored event's state_delta and state_remove, with modify results
  /// resolved). Pending writes still win for reads.
  void apply_committed(const json& delta, const std::vector<std::string>& removed);
  /// Drops every temp: and turn: key, snapshot and pending (an invocation's end).
  void drop_invocation_keys();

  // -- scoped accessors (N2) ---------------------------------------------------------
  scoped_state app() { return {*this, "app:"}; }
  scoped_state user() { return {*this, "user:"}; }
  scoped_state session() { return {*this, "session:"}; }
  scoped_state temp() { return {*this, "temp:"}; }
  scoped_state turn() { return {*this, "turn:"}; }
  scoped_state bg() { return {*this, "bg:"}; }
  derived_view derived() const { return derived_view{*this}; }

private:
  json base_ = json::object(); ///< the snapshot (committed values)
  json overlay_ = json::object(); ///< pending values (sets and modify previews)
  std::set<std::string, std::less<>> removed_; ///< pending removes
  state_change pending_;
};

/// The values of `keys` in `st` (all keys when `keys` is empty), as an object.
json snapshot_values(const state& st, const std::vector<std::string>& keys = {});
/// The change that turns snapshot `before` into `after` (both objects):
/// set = keys added or changed, remove = keys gone. No modifies.
state_change diff_values(const json& before, const json& after);

// -- template members ------------------------------------------------------------

template <class T>
T state::get(std::string_view key, T fallback) const {
  auto r = get_as<T>(key);
  return r ? std::move(*r) : std::move(fallback);
}

template <class T>
result<T> state::get_as(std::string_view key) const {
  const json* v = find(key);
  if (!v)
    return error{errc::not_found, "state key '" + std::string(key) + "' is missing"};
  // No lossy conversions: a bool is not a number, 3.7 is not an integer.
  bool fits = true;
  if constexpr (std::is_same_v<T, bool>)
    fits = v->is_boolean();
  else if constexpr (std::is_integral_v<T>)
    fits = v->is_number_integer();
  else if constexpr (std::is_floating_point_v<T>)
    fits = v->is_number();
  if (fits) {
    try {
      return v->get<T>();
    } catch (const json::exception&) {
    }
  }
  return error{errc::invalid_argument,
               "state key '" + std::string(key) + "' holds " + std::string(v->type_name())
                 + ", which does not convert to the requested type"};
}

template <class T>
T scoped_state::get(std::string_view name, T fallback) const {
  return st_->get<T>(prefix_ + std::string(name), std::move(fallback));
}

} // namespace agentstate
