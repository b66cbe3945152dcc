// SPDX-License-Identifier: Apache-2.0
// Over 600 lines: the method table, one short prepare function per method; they share the
// param readers and the sequencing rules of methods.hpp.
#include "protocol/methods.hpp"

#include <cmath>
#include <optional>
#include <utility>
#include <vector>

#include "agentstate/scope.hpp"
#include "agentstate/template.hpp"
#include "protocol/params.hpp"
#include "model/checks.hpp"
#include "model/text.hpp"
#include "store/keys.hpp"

namespace agentstate::protocol::detail {

namespace {

// The sequencing key of a session: the store's key of it, whose components
// cannot hold the NUL that separates them (a name holding one is refused, so
// mixing it up in ordering is harmless).
std::string session_key(const session_ref& r) {
  // The engine trims session ids in every call, so " s " and "s" are one
  // session and one sequence.
  return store::session_key(r.app_name, r.user_id, model::trim(r.session_id));
}

prepare_result checked(param_reader& p, prepared x) {
  if (p.failure())
    return *p.failure();
  return x;
}

prepare_result prepare_create(const json& params) {
  param_reader p(params);
  create_request r;
  r.app_name = p.required_string("app_name");
  r.user_id = p.required_string("user_id");
  r.session_id = p.optional_string("session_id").value_or("");
  r.state = p.optional_object("state");
  r.ttl_s = p.optional_number("ttl_s");
  r.refresh_ttl = p.optional_bool("refresh_ttl");
  prepared x;
  auto id = model::trim(r.session_id);
  if (!id.empty()) {
    x.order = ordering::pipelined;
    x.key = store::session_key(r.app_name, r.user_id, id);
  }
  x.op = [r = std::move(r)](engine& e, const reply_fn& reply) mutable {
    e.create_session(std::move(r), [reply](result<session> s) {
      reply(to_outcome(s, [](const session& v) { return to_json(v); }));
    });
  };
  return checked(p, std::move(x));
}

prepare_result prepare_get(const json& params) {
  param_reader p(params);
  get_request r;
  r.ref = p.ref();
  r.num_recent_events = p.optional_int("num_recent_events");
  r.after_timestamp = p.optional_number("after_timestamp");
  r.invocation_id = p.invocation_id("invocation_id", false);
  r.as_of_version = p.optional_uint("as_of_version");
  r.apply_rewinds = p.optional_bool("apply_rewinds").value_or(false);
  prepared x{{}, ordering::per_session, session_key(r.ref)};
  x.op = [r = std::move(r)](engine& e, const reply_fn& reply) mutable {
    e.get_session_json(std::move(r), [reply](result<std::string> s) {
      if (!s)
        return reply(from_engine(s.err()));
      reply(raw_result{std::move(*s)});
    });
  };
  return checked(p, std::move(x));
}

// list_sessions' `shards` and `shard_count` (both, or neither) into `r`.
void read_shard_filter(param_reader& p, const json& params, list_request& r) {
  auto count = p.optional_uint("shard_count");
  auto it = params.find("shards");
  const bool listed = it != params.end() && !it->is_null();
  if (!count && !listed)
    return;
  if (!count || !listed || !it->is_array())
    return p.fail("parameters 'shards' (an array of shard numbers) and 'shard_count' go together");
  if (*count == 0 || *count > 65536)
    return p.fail("parameter 'shard_count' must be 1 to 65536, not " + std::to_string(*count));
  r.shard_count = static_cast<std::uint32_t>(*count);
  for (const auto& s : *it) {
    if (!s.is_number_unsigned() || s.get<std::uint64_t>() >= *count)
      return p.fail("parameter 'shards' must hold shard numbers below 'shard_count' ("
                    + std::to_string(*count) + ")");
    r.shards.push_back(s.get<std::uint32_t>());
  }
}

prepare_result prepare_list(const json& params) {
  param_reader p(params);
  list_request r;
  r.app_name = p.required_string("app_name");
  r.user_id = p.optional_string("user_id");
  r.page_size = p.optional_int("page_size");
  r.page_token = p.optional_string("page_token").value_or("");
  if (auto order = p.optional_string("order")) {
    if (*order == "desc")
      r.descending = true;
    else if (*order != "asc")
      p.fail("parameter 'order' must be \"asc\" or \"desc\", not \"" + *order + "\"");
  }
  if (auto by = p.optional_string("order_by")) {
    if (*by == "id")
      r.order_by = list_order::id;
    else if (*by == "created")
      r.order_by = list_order::created;
    else if (*by != "update_time")
      p.fail("parameter 'order_by' must be \"update_time\", \"created\" or \"id\", not \"" + *by
             + "\"");
  }
  r.offset = p.optional_uint("offset").value_or(0);
  r.include_total = p.optional_bool("include_total").value_or(false);
  r.session_tokens = p.optional_bool("session_tokens").value_or(false);
  read_shard_filter(p, params, r);
  if (auto form = p.optional_string("shared_state")) {
    if (*form == "once")
      r.shared_state = list_state::once;
    else if (*form != "merged")
      p.fail("parameter 'shared_state' must be \"merged\" or \"once\", not \"" + *form + "\"");
  }
  prepared x;
  x.op = [r = std::move(r)](engine& e, const reply_fn& reply) mutable {
    const bool once = r.shared_state == list_state::once;
    e.list_sessions(std::move(r), [reply, once](result<session_page> page) {
      reply(to_outcome(page, [once](const session_page& v) {
        json xs = json::array();
        for (std::size_t i = 0; i < v.sessions.size(); ++i) {
          xs.push_back(to_json(v.sessions[i]));
          if (i < v.session_tokens.size())
            xs.back()["page_token"] = v.session_tokens[i];
        }
        json out{{"sessions", std::move(xs)},
                 {"next_page_token", v.next_page_token ? json(*v.next_page_token) : json(nullptr)}};
        if (v.total)
          out["total"] = *v.total;
        if (once) {
          out["app_state"] = v.app_state;
          json users = json::object();
          for (const auto& [user, st] : v.user_states)
            users[user] = st;
          out["user_states"] = std::move(users);
        }
        return out;
      }));
    });
  };
  return checked(p, std::move(x));
}

prepare_result prepare_delete(const json& params) {
  param_reader p(params);
  auto ref = p.ref();
  prepared x{{}, ordering::pipelined, session_key(ref)};
  x.op = [ref = std::move(ref)](engine& e, const reply_fn& reply) mutable {
    e.delete_session(std::move(ref), [reply](result<void> r) { reply(to_outcome(r)); });
  };
  return checked(p, std::move(x));
}

// X2/X3: a barrier, so it comes after every request sent before it on the
// stream and before every one sent after it.
prepare_result prepare_delete_user(const json& params) {
  param_reader p(params);
  auto app = p.required_string("app_name");
  auto user = p.required_string("user_id");
  prepared x;
  x.order = ordering::barrier;
  x.op = [app = std::move(app), user = std::move(user)](engine& e, const reply_fn& reply) mutable {
    e.delete_user(std::move(app), std::move(user),
                  [reply](result<void> r) { reply(to_outcome(r)); });
  };
  return checked(p, std::move(x));
}

prepare_result prepare_delete_app(const json& params) {
  param_reader p(params);
  auto app = p.required_string("app_name");
  prepared x;
  x.order = ordering::barrier;
  x.op = [app = std::move(app)](engine& e, const reply_fn& reply) mutable {
    e.delete_app(std::move(app), [reply](result<void> r) { reply(to_outcome(r)); });
  };
  return checked(p, std::move(x));
}

// Maintenance: a barrier on its stream (after every request sent before it,
// before every one sent after it), and bounded steps beside other streams'
// traffic (engine::prune).
prepare_result prepare_prune(const json& params) {
  param_reader p(params);
  prune_request r;
  auto age = p.optional_number("older_than_s");
  if (!age && !p.failure())
    p.fail("missing parameter 'older_than_s' (a number of seconds above 0)");
  if (age && !p.failure() && !(std::isfinite(*age) && *age > 0))
    p.fail("parameter 'older_than_s' must be a number of seconds above 0");
  r.older_than_s = age.value_or(0);
  r.dry_run = p.optional_bool("dry_run").value_or(false);
  r.app_name = p.optional_string("app_name").value_or("");
  if (auto it = params.find("app_name"); it != params.end() && it->is_string())
    p.check(model::check_name(r.app_name, "app_name"));
  prepared x;
  x.order = ordering::barrier;
  x.op = [r = std::move(r)](engine& e, const reply_fn& reply) mutable {
    const bool dry = r.dry_run;
    e.prune(std::move(r), [reply, dry](result<prune_result> pr) {
      if (pr && pr->stopped) {
        error e = *pr->stopped;
        e.message = "prune stopped after " + std::string(dry ? "finding " : "deleting ")
          + std::to_string(pr->sessions) + " sessions: " + e.message;
        return reply(from_engine(e));
      }
      reply(to_outcome(pr, [dry](const prune_result& v) {
        json sample = json::array();
        for (const auto& s : v.sample)
          sample.push_back(
            json{{"app_name", s.app_name}, {"user_id", s.user_id}, {"session_id", s.session_id}});
        return json{{dry ? "would_delete" : "deleted", v.sessions},
                    {"sessions", std::move(sample)},
                    {"truncated", v.truncated},
                    {"cutoff", v.cutoff}};
      }));
    });
  };
  return checked(p, std::move(x));
}

} // namespace

prepared append_call(append_request r) {
  // A modify can fail at commit, which would fail the appends pipelined
  // behind it (unavailable): such an append runs alone.
  prepared x{
    {}, r.modify.empty() ? ordering::pipelined : ordering::per_session, session_key(r.ref)};
  x.op = [r = std::move(r)](engine& e, const reply_fn& reply) mutable {
    e.append_event(std::move(r), [reply](result<append_result> a) { reply(append_outcome(a)); });
  };
  return x;
}

namespace {

// append_event's optional `modify`: an array of state operations
// (state_modify_from_json), checked before the event is written.
void read_modify(const json& params, param_reader& p, std::vector<state_modify>& out) {
  auto it = params.find("modify");
  if (it == params.end() || it->is_null())
    return;
  if (!it->is_array()) {
    p.fail("parameter 'modify' must be an array of operations");
    return;
  }
  for (const auto& op : *it) {
    auto m = state_modify_from_json(op);
    if (!m) {
      p.fail("parameter 'modify': " + m.err().message);
      return;
    }
    out.push_back(std::move(*m));
  }
}

prepare_result prepare_append(const json& params) {
  param_reader p(params);
  append_request r;
  r.ref = p.ref();
  if (auto ev = p.required_object("event")) {
    auto decoded = event_from_json(*ev);
    if (decoded)
      r.ev = std::move(*decoded);
    else
      p.fail("parameter 'event': " + decoded.err().message);
  }
  r.expected_version = p.optional_uint("expected_version");
  read_modify(params, p, r.modify);
  if (p.failure())
    return *p.failure();
  return append_call(std::move(r));
}

prepare_result prepare_end_invocation(const json& params) {
  param_reader p(params);
  auto ref = p.ref();
  auto inv = p.invocation_id("invocation_id", true);
  prepared x{{}, ordering::pipelined, session_key(ref)};
  x.op = [ref = std::move(ref), inv = std::move(inv)](engine& e, const reply_fn& reply) mutable {
    e.end_invocation(std::move(ref), std::move(inv),
                     [reply](result<void> r) { reply(to_outcome(r)); });
  };
  return checked(p, std::move(x));
}

// I2 over the session's merged state (with the live invocation's temp: keys
// when `invocation_id` names it). The server has no artifact store, so an
// {artifact.x} placeholder is missing (an error unless optional).
prepare_result prepare_inject_state(const json& params) {
  param_reader p(params);
  get_request r;
  r.ref = p.ref();
  r.num_recent_events = 0;
  r.invocation_id = p.invocation_id("invocation_id", false);
  auto tmpl = p.required_string("template");
  std::optional<json> home_app;
  if (auto it = params.find("home_app_state"); it != params.end()) {
    if (it->is_object())
      home_app = *it;
    else
      p.fail("parameter 'home_app_state' must be an object");
  }
  prepared x{{}, ordering::per_session, session_key(r.ref)};
  x.op = [r = std::move(r), tmpl = std::move(tmpl),
          home_app = std::move(home_app)](engine& e, const reply_fn& reply) mutable {
    auto id = r.ref.session_id;
    const std::size_t max_bytes = e.opts().limits.max_response_bytes;
    e.get_session(
      std::move(r),
      [reply, id = std::move(id), tmpl = std::move(tmpl), home_app = std::move(home_app),
       max_bytes](result<std::optional<session>> s) {
        if (!s)
          return reply(from_engine(s.err()));
        if (!*s)
          return reply(from_engine(error{errc::not_found, "session '" + id + "' not found"}));
        auto& state = (**s).state;
        if (home_app) { // the app: state as read at the app's home (a cluster node)
          for (auto it = state.begin(); it != state.end();)
            it = agentstate::scope_of(it.key()) == agentstate::scope::app ? state.erase(it)
                                                                          : std::next(it);
          for (auto it = home_app->begin(); it != home_app->end(); ++it)
            state[std::string(app_prefix) + it.key()] = it.value();
        }
        auto text = inject_state(tmpl, state, {}, max_bytes);
        reply(to_outcome(text, [](std::string& v) { return json(std::move(v)); }));
      });
  };
  return checked(p, std::move(x));
}

// The answer of get_app_state / get_user_state with `with_cursor: true`.
json snapshot_json(scope_snapshot& v) {
  return json{{"state", std::move(v.state)}, {"cursor", std::move(v.cursor)}};
}

prepare_result prepare_app_state(const json& params) {
  param_reader p(params);
  auto app = p.required_string("app_name");
  bool with_cursor = p.optional_bool("with_cursor").value_or(false);
  prepared x;
  x.op = [app, with_cursor](engine& e, const reply_fn& reply) mutable {
    if (with_cursor)
      return e.get_app_state_with_cursor(std::move(app), [reply](result<scope_snapshot> r) {
        reply(to_outcome(r, [](scope_snapshot& v) { return snapshot_json(v); }));
      });
    e.get_app_state(std::move(app), [reply](result<json> r) {
      reply(to_outcome(r, [](json& v) { return std::move(v); }));
    });
  };
  return checked(p, std::move(x));
}

prepare_result prepare_user_state(const json& params) {
  param_reader p(params);
  auto app = p.required_string("app_name");
  auto user = p.required_string("user_id");
  bool with_cursor = p.optional_bool("with_cursor").value_or(false);
  prepared x;
  x.op = [app, user, with_cursor](engine& e, const reply_fn& reply) mutable {
    if (with_cursor)
      return e.get_user_state_with_cursor(
        std::move(app), std::move(user), [reply](result<scope_snapshot> r) {
          reply(to_outcome(r, [](scope_snapshot& v) { return snapshot_json(v); }));
        });
    e.get_user_state(std::move(app), std::move(user), [reply](result<json> r) {
      reply(to_outcome(r, [](json& v) { return std::move(v); }));
    });
  };
  return checked(p, std::move(x));
}

prepare_result prepare_flush(const json&) {
  prepared x;
  x.order = ordering::barrier;
  x.op = [](engine& e, const reply_fn& reply) {
    e.flush([reply](result<void> r) { reply(to_outcome(r)); });
  };
  return x;
}

prepare_result prepare_stats(const json&) {
  prepared x;
  x.op = [](engine& e, const reply_fn& reply) { reply(outcome{to_json(e.stats())}); };
  x.server_stats = true;
  return x;
}

} // namespace

watch_request read_watch_request(param_reader& p) {
  watch_request r;
  auto scope = p.required_string("scope");
  if (scope == "session")
    r.scope = watch_scope::session;
  else if (scope == "user")
    r.scope = watch_scope::user;
  else if (scope == "app")
    r.scope = watch_scope::app;
  else if (scope == "all")
    r.scope = watch_scope::all;
  else if (!p.failure())
    p.fail("parameter 'scope' must be \"session\", \"user\", \"app\" or \"all\", not \"" + scope
           + "\"");
  auto app = p.optional_string("app_name");
  if (r.scope == watch_scope::all && app && !p.failure())
    p.fail("scope \"all\" takes no app_name (it spans every app)");
  r.app_name = app.value_or("");
  r.user_id = p.optional_string("user_id").value_or("");
  r.session_id = p.optional_string("session_id").value_or("");
  r.include_sessions = p.optional_bool("include_sessions").value_or(false);
  r.key_prefix = p.optional_string("key_prefix").value_or("");
  r.from = p.optional_string("from");
  return r;
}

namespace {

prepare_result prepare_read_changes(const json& params) {
  param_reader p(params);
  auto r = read_watch_request(p); // `from` "start": the engine's from_start
  auto limit = p.optional_uint("limit").value_or(100);
  prepared x;
  x.op = [r = std::move(r), limit](engine& e, const reply_fn& reply) mutable {
    e.read_changes(std::move(r), static_cast<std::size_t>(std::min<std::uint64_t>(limit, 1u << 20)),
                   [reply](result<change_page> page) {
                     reply(to_outcome(page, [](const change_page& v) { return to_json(v); }));
                   });
  };
  return checked(p, std::move(x));
}

// rewind_session's and rewind_plan's params: the session, then exactly one
// of before_invocation_id and before_version.
rewind_request read_rewind(param_reader& p) {
  rewind_request r;
  r.ref = p.ref();
  auto inv = p.optional_string("before_invocation_id");
  auto v = p.optional_uint("before_version");
  if (!p.failure() && inv.has_value() == v.has_value())
    p.fail("give exactly one of 'before_invocation_id' and 'before_version'");
  if (!p.failure() && v && *v == 0)
    p.fail("parameter 'before_version' must be at least 1");
  if (!p.failure() && inv && inv->empty())
    p.fail("parameter 'before_invocation_id' must not be empty");
  if (inv)
    p.check(model::check_invocation_id(*inv, "before_invocation_id"));
  r.before_invocation_id = inv.value_or("");
  r.before_version = v.value_or(0);
  r.event_id = p.invocation_id("event_id", false);
  r.expected_version = p.optional_uint("expected_version");
  return r;
}

// Runs alone in its session's sequence (per_session): a rewind may wait for
// the invocation lease, and requests after it on the stream must not pass it.
prepare_result prepare_rewind(const json& params) {
  param_reader p(params);
  auto r = read_rewind(p);
  prepared x{{}, ordering::per_session, session_key(r.ref)};
  x.op = [r = std::move(r)](engine& e, const reply_fn& reply) mutable {
    e.rewind_session(std::move(r), [reply](result<append_result> a) { reply(append_outcome(a)); });
  };
  return checked(p, std::move(x));
}

prepare_result prepare_rewind_plan(const json& params) {
  param_reader p(params);
  auto r = read_rewind(p);
  if (!r.event_id.empty() && !p.failure())
    p.fail("rewind_plan writes nothing: 'event_id' is for rewind_session");
  prepared x{{}, ordering::per_session, session_key(r.ref)};
  x.op = [r = std::move(r)](engine& e, const reply_fn& reply) mutable {
    e.rewind_plan(std::move(r), [reply](result<rewind_changes> c) {
      reply(to_outcome(c, [](const rewind_changes& v) { return to_json(v); }));
    });
  };
  return checked(p, std::move(x));
}

prepare_result prepare_list_invocations(const json& params) {
  param_reader p(params);
  auto ref = p.ref();
  prepared x{{}, ordering::per_session, session_key(ref)};
  x.op = [ref = std::move(ref)](engine& e, const reply_fn& reply) mutable {
    e.list_invocations(std::move(ref), [reply](result<std::vector<invocation_info>> r) {
      reply(to_outcome(r, [](const std::vector<invocation_info>& v) {
        json out = json::array();
        for (const auto& i : v)
          out.push_back(to_json(i));
        return out;
      }));
    });
  };
  return checked(p, std::move(x));
}

// Sequenced under the source: it sees every write to the source sent before
// it on the stream.
prepare_result prepare_fork(const json& params) {
  param_reader p(params);
  fork_request r;
  r.ref = p.ref();
  auto at = p.optional_uint("at_version");
  if (!at && !p.failure())
    p.fail("missing parameter 'at_version'");
  r.at_version = at.value_or(0);
  r.new_session_id = p.optional_string("new_session_id").value_or("");
  prepared x{{}, ordering::per_session, session_key(r.ref)};
  x.op = [r = std::move(r)](engine& e, const reply_fn& reply) mutable {
    e.fork_session(std::move(r), [reply](result<session> s) {
      reply(to_outcome(s, [](const session& v) { return to_json(v); }));
    });
  };
  return checked(p, std::move(x));
}

// A string array parameter (absent: empty).
std::vector<std::string> string_array(const json& params, param_reader& p, const char* name) {
  std::vector<std::string> out;
  auto it = params.find(name);
  if (it == params.end() || it->is_null())
    return out;
  if (!it->is_array()) {
    p.fail(std::string("parameter '") + name + "' must be an array of strings");
    return out;
  }
  for (const auto& x : *it) {
    if (!x.is_string()) {
      p.fail(std::string("parameter '") + name + "' must be an array of strings");
      return out;
    }
    out.push_back(x.get<std::string>());
  }
  return out;
}

// A cluster node's app: write at the app's home (engine::apply_app_write).
prepare_result prepare_apply_app_write(const json& params) {
  param_reader p(params);
  app_write_request r;
  r.app_name = p.required_string("app_name");
  r.write_id = p.required_string("write_id");
  r.state_delta = p.optional_object("state_delta");
  r.state_remove = string_array(params, p, "state_remove");
  r.forget = string_array(params, p, "forget");
  read_modify(params, p, r.modify);
  prepared x;
  x.op = [r = std::move(r)](engine& e, const reply_fn& reply) mutable {
    e.apply_app_write(std::move(r), [reply](result<app_write_result> a) {
      reply(to_outcome(a, [](const app_write_result& v) {
        return json{{"values", v.values}, {"removed", v.removed}, {"duplicate", v.duplicate}};
      }));
    });
  };
  return checked(p, std::move(x));
}

// For health checks: answered at once, allowed before authentication.
prepare_result prepare_ping(const json&) {
  prepared x;
  x.op = [](engine&, const reply_fn& reply) { reply(outcome{json("pong")}); };
  return x;
}

/// Which session a method's request is sequenced under.
enum class names {
  nothing, ///< free or barrier
  session, ///< app_name, user_id, session_id as given
  created, ///< create_session: its trimmed session_id, when not empty
};

struct method {
  std::string_view name;
  prepare_fn prepare;
  names keyed;
};

constexpr method methods[] = {
  {"create_session", prepare_create, names::created},
  {"get_session", prepare_get, names::session},
  {"list_sessions", prepare_list, names::nothing},
  {"delete_session", prepare_delete, names::session},
  {"delete_user", prepare_delete_user, names::nothing},
  {"delete_app", prepare_delete_app, names::nothing},
  {"prune", prepare_prune, names::nothing},
  {"append_event", prepare_append, names::session},
  {"end_invocation", prepare_end_invocation, names::session},
  {"inject_state", prepare_inject_state, names::session},
  {"get_app_state", prepare_app_state, names::nothing},
  {"get_user_state", prepare_user_state, names::nothing},
  {"flush", prepare_flush, names::nothing},
  {"stats", prepare_stats, names::nothing},
  {"ping", prepare_ping, names::nothing},
  {"read_changes", prepare_read_changes, names::nothing},
  {"rewind_session", prepare_rewind, names::session},
  {"rewind_plan", prepare_rewind_plan, names::session},
  {"list_invocations", prepare_list_invocations, names::session},
  {"fork_session", prepare_fork, names::session},
  {"apply_app_write", prepare_apply_app_write, names::nothing},
};

const method* lookup(std::string_view name) {
  for (const auto& m : methods)
    if (m.name == name)
      return &m;
  return nullptr;
}

const std::string* string_member(const json& params, const char* name) {
  auto it = params.find(name);
  return it != params.end() && it->is_string() ? it->get_ptr<const std::string*>() : nullptr;
}

} // namespace

prepare_fn find_method(std::string_view name) {
  auto m = lookup(name);
  return m ? m->prepare : nullptr;
}

std::optional<std::string> named_session_key(std::string_view name, const json& params) {
  auto m = lookup(name);
  if (!m || m->keyed == names::nothing || !params.is_object())
    return std::nullopt;
  auto app = string_member(params, "app_name");
  auto user = string_member(params, "user_id");
  auto id = string_member(params, "session_id");
  if (!app || !user || !id)
    return std::nullopt;
  auto trimmed = model::trim(*id);
  if (m->keyed == names::session)
    return store::session_key(*app, *user, trimmed);
  if (trimmed.empty())
    return std::nullopt;
  return store::session_key(*app, *user, trimmed);
}

prepared refusal_call(rpc_failure f, std::string key) {
  prepared x{{}, ordering::pipelined, std::move(key)};
  x.op = [f = std::move(f)](engine&, const reply_fn& reply) { reply(outcome{f}); };
  return x;
}

} // namespace agentstate::protocol::detail
