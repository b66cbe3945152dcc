// The JSON-RPC line handler: parse, validate, sequence per session, run through
// the engine's async API, answer.
#include "tools/protocol.hpp"

#include "agentstate/template.hpp"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <limits>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>
#include <variant>

namespace agentstate::tools {

namespace {

// -- outcomes and response lines ----------------------------------------------

struct rpc_failure {
  int code = rpc_code::engine_error;
  std::string message;
  std::string kind;
  std::optional<std::uint64_t> current_version;
};

// A result that is already JSON text (get_session's stored events are sent
// as stored, never parsed and re-encoded).
struct raw_result {
  std::string text;
};

// A request's result (any JSON, null included) or its error.
using outcome = std::variant<json, raw_result, rpc_failure>;
using reply_fn = std::function<void(outcome)>;
// Starts one engine call; calls the reply exactly once, on any thread.
using operation = std::function<void(engine&, const reply_fn&)>;

rpc_failure make_failure(int code, std::string message, errc kind) {
  return rpc_failure{code, std::move(message), to_string(kind), std::nullopt};
}

rpc_failure from_engine(const error& e) {
  return rpc_failure{rpc_code::engine_error, e.message, to_string(e.code), e.current_version};
}

rpc_failure internal_failure(const char* where, const char* what) {
  return make_failure(rpc_code::engine_error, std::string("server error in ") + where + ": " + what,
                 errc::internal);
}

std::string dump_lossy(const json& x) {
  // Values came from the validating parser or the engine; `replace` only
  // guards against a message quoting bytes of a malformed line.
  return x.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string response_line(const json& id, const outcome& o) {
  std::string out = R"({"jsonrpc":"2.0","id":)";
  out += dump_lossy(id);
  if (auto r = std::get_if<json>(&o)) {
    out += R"(,"result":)";
    out += dump_lossy(*r);
  } else if (auto raw = std::get_if<raw_result>(&o)) {
    out += R"(,"result":)";
    out += raw->text;
  } else {
    const auto& f = std::get<rpc_failure>(o);
    json data{{"kind", f.kind}};
    if (f.current_version)
      data["current_version"] = *f.current_version;
    json err{{"code", f.code}, {"message", f.message}, {"data", std::move(data)}};
    out += R"(,"error":)";
    out += dump_lossy(err);
  }
  out += '}';
  return out;
}

// Turns an engine result into an outcome; conversion errors become internal.
template <class T, class F>
outcome to_outcome(result<T>& r, F&& convert) {
  try {
    if (!r)
      return from_engine(r.err());
    return outcome{convert(r.value())};
  } catch (const std::exception& e) {
    return internal_failure("result encoding", e.what());
  }
}

outcome to_outcome(result<void>& r) {
  if (!r)
    return from_engine(r.err());
  return outcome{json(nullptr)};
}

// -- params ----------------------------------------------------------------------

// Reads by-name params, recording the first problem. Absent and null are the
// same for optional params.
class param_reader {
public:
  explicit param_reader(const json& params) : params_(params) {}

  std::string required_string(const char* name) {
    auto v = find(name);
    if (!v) {
      fail(std::string("missing parameter '") + name + "' (a string)");
      return {};
    }
    return string_of(name, *v);
  }

  std::optional<std::string> optional_string(const char* name) {
    auto v = find(name);
    if (!v)
      return std::nullopt;
    return string_of(name, *v);
  }

  std::optional<std::int64_t> optional_int(const char* name) {
    auto v = find(name);
    if (!v)
      return std::nullopt;
    if (v->is_number_integer() && !v->is_number_unsigned())
      return v->get<std::int64_t>();
    if (v->is_number_unsigned()
        && v->get<std::uint64_t>()
             <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      return static_cast<std::int64_t>(v->get<std::uint64_t>());
    if (v->is_number_unsigned())
      fail(std::string("parameter '") + name + "' is out of range");
    else
      fail(std::string("parameter '") + name + "' must be an integer, not " + kind_of(*v));
    return std::nullopt;
  }

  std::optional<std::uint64_t> optional_uint(const char* name) {
    auto v = find(name);
    if (!v)
      return std::nullopt;
    if (v->is_number_unsigned())
      return v->get<std::uint64_t>();
    fail(std::string("parameter '") + name + "' must be a non-negative integer, not "
         + kind_of(*v));
    return std::nullopt;
  }

  std::optional<bool> optional_bool(const char* name) {
    auto v = find(name);
    if (!v)
      return std::nullopt;
    if (v->is_boolean())
      return v->get<bool>();
    fail(std::string("parameter '") + name + "' must be a boolean, not " + kind_of(*v));
    return std::nullopt;
  }

  std::optional<double> optional_number(const char* name) {
    auto v = find(name);
    if (!v)
      return std::nullopt;
    if (v->is_number())
      return v->get<double>();
    fail(std::string("parameter '") + name + "' must be a number, not " + kind_of(*v));
    return std::nullopt;
  }

  json optional_object(const char* name) {
    auto v = find(name);
    if (!v)
      return json::object();
    if (v->is_object())
      return *v;
    fail(std::string("parameter '") + name + "' must be an object, not " + kind_of(*v));
    return json::object();
  }

  const json* required_object(const char* name) {
    auto v = find(name);
    if (!v) {
      fail(std::string("missing parameter '") + name + "' (an object)");
      return nullptr;
    }
    if (!v->is_object()) {
      fail(std::string("parameter '") + name + "' must be an object, not " + kind_of(*v));
      return nullptr;
    }
    return v;
  }

  session_ref ref() {
    session_ref r;
    r.app_name = required_string("app_name");
    r.user_id = required_string("user_id");
    r.session_id = required_string("session_id");
    return r;
  }

  void fail(std::string message) {
    if (!failure_)
      failure_ = make_failure(rpc_code::invalid_params, std::move(message), errc::invalid_argument);
  }

  const std::optional<rpc_failure>& failure() const { return failure_; }

private:
  const json* find(const char* name) const {
    auto it = params_.find(name);
    if (it == params_.end() || it->is_null())
      return nullptr;
    return &*it;
  }

  std::string string_of(const char* name, const json& v) {
    if (v.is_string())
      return v.get<std::string>();
    fail(std::string("parameter '") + name + "' must be a string, not " + kind_of(v));
    return {};
  }

  static std::string kind_of(const json& v) {
    if (v.is_number_float())
      return "a non-integer number";
    if (v.is_number_unsigned())
      return "an integer";
    if (v.is_number())
      return "a negative integer";
    std::string t = v.type_name();
    return (t == "array" || t == "object" ? "an " : "a ") + t;
  }

  const json& params_;
  std::optional<rpc_failure> failure_;
};

std::string trim(const std::string& s) {
  auto b = s.find_first_not_of(" \t\r\n\f\v");
  if (b == std::string::npos)
    return {};
  auto e = s.find_last_not_of(" \t\r\n\f\v");
  return s.substr(b, e - b + 1);
}

// The sequencing key of a session: NUL cannot occur inside the engine's names
// (a name holding one is refused, so mixing it up in ordering is harmless).
std::string session_key(const std::string& app, const std::string& user,
                        const std::string& id) {
  std::string k;
  k.reserve(app.size() + user.size() + id.size() + 2);
  k += app;
  k += '\0';
  k += user;
  k += '\0';
  k += id;
  return k;
}

std::string session_key(const session_ref& r) {
  return session_key(r.app_name, r.user_id, r.session_id);
}

// -- methods -------------------------------------------------------------------

// How a request runs: alone, behind earlier requests of its session, or after
// every earlier request (flush).
enum class ordering { free, per_session, barrier };

struct prepared {
  operation op;
  ordering order = ordering::free;
  std::string key; ///< with ordering::per_session
};

using prepare_result = std::variant<prepared, rpc_failure>;

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
  prepared x;
  auto id = trim(r.session_id);
  if (!id.empty()) {
    x.order = ordering::per_session;
    x.key = session_key(r.app_name, r.user_id, id);
  }
  x.op = [r](engine& e, const reply_fn& reply) mutable {
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
  r.invocation_id = p.optional_string("invocation_id").value_or("");
  prepared x{{}, ordering::per_session, session_key(r.ref)};
  x.op = [r](engine& e, const reply_fn& reply) mutable {
    e.get_session_json(std::move(r), [reply](result<std::string> s) {
      if (!s)
        return reply(from_engine(s.err()));
      reply(raw_result{std::move(*s)});
    });
  };
  return checked(p, std::move(x));
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
  r.offset = p.optional_uint("offset").value_or(0);
  r.include_total = p.optional_bool("include_total").value_or(false);
  prepared x;
  x.op = [r](engine& e, const reply_fn& reply) mutable {
    e.list_sessions(std::move(r), [reply](result<session_page> page) {
      reply(to_outcome(page, [](const session_page& v) {
        json xs = json::array();
        for (const auto& m : v.sessions)
          xs.push_back(to_json(m));
        json out{{"sessions", std::move(xs)},
                 {"next_page_token",
                  v.next_page_token ? json(*v.next_page_token) : json(nullptr)}};
        if (v.total)
          out["total"] = *v.total;
        return out;
      }));
    });
  };
  return checked(p, std::move(x));
}

prepare_result prepare_delete(const json& params) {
  param_reader p(params);
  auto ref = p.ref();
  prepared x{{}, ordering::per_session, session_key(ref)};
  x.op = [ref](engine& e, const reply_fn& reply) mutable {
    e.delete_session(std::move(ref), [reply](result<void> r) { reply(to_outcome(r)); });
  };
  return checked(p, std::move(x));
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
  if (auto it = params.find("modify"); it != params.end() && !it->is_null()) {
    if (!it->is_array()) {
      p.fail("parameter 'modify' must be an array of operations");
    } else {
      for (const auto& op : *it) {
        auto m = state_modify_from_json(op);
        if (!m) {
          p.fail("parameter 'modify': " + m.err().message);
          break;
        }
        r.modify.push_back(std::move(*m));
      }
    }
  }
  prepared x{{}, ordering::per_session, session_key(r.ref)};
  x.op = [r](engine& e, const reply_fn& reply) mutable {
    e.append_event(std::move(r), [reply](result<append_result> a) {
      reply(to_outcome(a, [](const append_result& v) {
        return json{{"event", to_json(v.ev)}, {"version", v.version}};
      }));
    });
  };
  return checked(p, std::move(x));
}

prepare_result prepare_end_invocation(const json& params) {
  param_reader p(params);
  auto ref = p.ref();
  auto inv = p.required_string("invocation_id");
  prepared x{{}, ordering::per_session, session_key(ref)};
  x.op = [ref, inv](engine& e, const reply_fn& reply) mutable {
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
  r.invocation_id = p.optional_string("invocation_id").value_or("");
  auto tmpl = p.required_string("template");
  prepared x{{}, ordering::per_session, session_key(r.ref)};
  x.op = [r, tmpl](engine& e, const reply_fn& reply) mutable {
    auto id = r.ref.session_id;
    e.get_session(std::move(r), [reply, id = std::move(id),
                                 tmpl = std::move(tmpl)](result<std::optional<session>> s) {
      if (!s)
        return reply(from_engine(s.err()));
      if (!*s)
        return reply(from_engine(error{errc::not_found, "session '" + id + "' not found"}));
      auto text = inject_state(tmpl, (**s).state);
      reply(to_outcome(text, [](std::string& v) { return json(std::move(v)); }));
    });
  };
  return checked(p, std::move(x));
}

prepare_result prepare_app_state(const json& params) {
  param_reader p(params);
  auto app = p.required_string("app_name");
  prepared x;
  x.op = [app](engine& e, const reply_fn& reply) mutable {
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
  prepared x;
  x.op = [app, user](engine& e, const reply_fn& reply) mutable {
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
  return x;
}

struct method {
  std::string_view name;
  prepare_result (*prepare)(const json& params);
};

constexpr method methods[] = {
  {"create_session", prepare_create},
  {"get_session", prepare_get},
  {"list_sessions", prepare_list},
  {"delete_session", prepare_delete},
  {"append_event", prepare_append},
  {"end_invocation", prepare_end_invocation},
  {"inject_state", prepare_inject_state},
  {"get_app_state", prepare_app_state},
  {"get_user_state", prepare_user_state},
  {"flush", prepare_flush},
  {"stats", prepare_stats},
};

const method* find_method(std::string_view name) {
  for (const auto& m : methods)
    if (m.name == name)
      return &m;
  return nullptr;
}

} // namespace

// -- the session state ---------------------------------------------------------

namespace detail {

// Shared with every pending engine callback, so it outlives the rpc_session
// object if a callback is still returning when drain() wakes up.
struct rpc_state : std::enable_shared_from_this<rpc_state> {
  struct task {
    std::uint64_t seq = 0;
    json id;                   ///< null for notifications
    bool notification = false; ///< run, never answered
    operation op;
  };

  // A session with a request running; `waiting` are the later ones, in order.
  struct chain {
    std::deque<task> waiting;
  };

  rpc_state(engine& e, std::function<void(std::string)> w, rpc_config c)
    : eng(e), write(std::move(w)), cfg(c) {
    if (cfg.max_in_flight == 0)
      cfg.max_in_flight = 1;
  }

  engine& eng;
  std::function<void(std::string)> write;
  rpc_config cfg;

  std::mutex write_mtx;

  mutable std::mutex mtx;
  std::condition_variable cv;
  std::size_t in_flight = 0;          ///< admitted, not yet completed
  std::uint64_t next_seq = 0;
  std::set<std::uint64_t> unfinished; ///< seqs of admitted non-barrier requests
  std::deque<task> barriers;          ///< flushes waiting for earlier requests
  std::unordered_map<std::string, chain> chains;

  void answer(const json& id, const outcome& o) {
    try {
      auto line = response_line(id, o);
      std::lock_guard<std::mutex> guard(write_mtx);
      write(std::move(line));
    } catch (...) {
      // Nothing sensible left to do: the client sees no answer for this id.
    }
  }

  // Runs t.op; `then` runs after the reply has been answered. Returns true if
  // the reply arrived before t.op returned (inline completion).
  template <class Then>
  bool start(task& t, Then then) {
    auto done = std::make_shared<std::atomic<int>>(0); // 1st of {reply, return} sets 1
    auto replied = std::make_shared<std::atomic<bool>>(false);
    auto self = shared_from_this();
    reply_fn reply = [self, done, replied, id = t.id, note = t.notification,
                      then](outcome o) {
      if (replied->exchange(true))
        return;
      if (!note)
        self->answer(id, o);
      try {
        then(done->fetch_add(1) == 1);
      } catch (...) {
        // Only allocation can fail here. The request counts could no longer
        // reach zero and drain() would hang: fail loudly instead.
        std::terminate();
      }
    };
    try {
      t.op(eng, reply);
    } catch (const std::exception& e) {
      reply(internal_failure("dispatch", e.what()));
    } catch (...) {
      reply(internal_failure("dispatch", "unknown exception"));
    }
    return done->fetch_add(1) == 1;
  }

  // Runs `t` and then the requests queued behind it on the same session.
  // REQUIRES: the caller holds the session's turn (chains[key] exists and no
  // other request of it is running).
  void run_chain(const std::string& key, task t) {
    for (;;) {
      auto seq = t.seq;
      auto self = shared_from_this();
      // `late` is true when the reply came after start() returned: the
      // callback's thread then carries the chain on.
      bool inline_done = start(t, [self, key, seq](bool late) {
        if (late)
          if (auto next = self->next_in_chain(key))
            self->run_chain(key, std::move(*next));
        self->complete(seq, false);
      });
      if (!inline_done)
        return;
      auto next = next_in_chain(key);
      if (!next)
        return;
      t = std::move(*next);
    }
  }

  std::optional<task> next_in_chain(const std::string& key) {
    std::lock_guard<std::mutex> guard(mtx);
    auto it = chains.find(key);
    if (it == chains.end())
      return std::nullopt; // unreachable: the turn holder's entry stays
    if (it->second.waiting.empty()) {
      chains.erase(it);
      return std::nullopt;
    }
    auto t = std::move(it->second.waiting.front());
    it->second.waiting.pop_front();
    return t;
  }

  void run_free(task t) {
    auto self = shared_from_this();
    auto seq = t.seq;
    start(t, [self, seq](bool) { self->complete(seq, false); });
  }

  void run_barrier(task t) {
    auto self = shared_from_this();
    start(t, [self](bool) { self->complete(0, true); });
  }

  // Barriers whose earlier requests have all completed. REQUIRES: mtx held.
  std::vector<task> ready_barriers() {
    std::vector<task> out;
    while (!barriers.empty()
           && (unfinished.empty() || *unfinished.begin() > barriers.front().seq)) {
      out.push_back(std::move(barriers.front()));
      barriers.pop_front();
    }
    return out;
  }

  void complete(std::uint64_t seq, bool barrier) {
    std::vector<task> ready;
    {
      std::lock_guard<std::mutex> guard(mtx);
      if (!barrier)
        unfinished.erase(seq);
      ready = ready_barriers();
      --in_flight;
      cv.notify_all();
    }
    for (auto& b : ready)
      run_barrier(std::move(b));
  }

  void submit(json id, bool notification, prepared p) {
    task t;
    t.id = std::move(id);
    t.notification = notification;
    t.op = std::move(p.op);
    bool run_now = false;
    std::vector<task> ready;
    {
      std::unique_lock<std::mutex> lock(mtx);
      cv.wait(lock, [this] { return in_flight < cfg.max_in_flight; });
      ++in_flight;
      t.seq = next_seq++;
      switch (p.order) {
        case ordering::free:
          unfinished.insert(t.seq);
          run_now = true;
          break;
        case ordering::per_session: {
          unfinished.insert(t.seq);
          auto [it, fresh] = chains.try_emplace(p.key);
          if (fresh)
            run_now = true;
          else
            it->second.waiting.push_back(std::move(t));
          break;
        }
        case ordering::barrier:
          barriers.push_back(std::move(t));
          ready = ready_barriers();
          break;
      }
    }
    if (run_now) {
      if (p.order == ordering::per_session)
        run_chain(p.key, std::move(t));
      else
        run_free(std::move(t));
    }
    for (auto& b : ready)
      run_barrier(std::move(b));
  }

  void handle_line(std::string_view line) {
    if (!line.empty() && line.back() == '\r')
      line.remove_suffix(1);
    auto parsed = parse_json(line, cfg.max_line_depth);
    if (!parsed) {
      auto kind = parsed.code() == errc::too_large ? errc::too_large : errc::invalid_argument;
      answer(nullptr, make_failure(rpc_code::parse_error, parsed.err().message, kind));
      return;
    }
    json& req = *parsed;
    if (!req.is_object()) {
      answer(nullptr, make_failure(rpc_code::invalid_request,
                              req.is_array()
                                ? "batches (JSON arrays) are not supported: send one "
                                  "request object per line"
                                : std::string("a request must be a JSON object, not ")
                                    + req.type_name(),
                              errc::invalid_argument));
      return;
    }
    json id = nullptr;
    bool notification = true;
    if (auto it = req.find("id"); it != req.end()) {
      if (!it->is_string() && !it->is_number() && !it->is_null()) {
        answer(nullptr, make_failure(rpc_code::invalid_request,
                                "'id' must be a number or a string", errc::invalid_argument));
        return;
      }
      id = *it;
      notification = false;
    }
    if (auto it = req.find("jsonrpc"); it == req.end() || *it != "2.0") {
      answer(id, make_failure(rpc_code::invalid_request, R"('jsonrpc' must be "2.0")",
                         errc::invalid_argument));
      return;
    }
    auto m = req.find("method");
    if (m == req.end() || !m->is_string()) {
      answer(id, make_failure(rpc_code::invalid_request, "'method' must be a string",
                         errc::invalid_argument));
      return;
    }
    const auto& name = m->get_ref<const std::string&>();
    auto found = find_method(name);
    if (!found) {
      if (!notification)
        answer(id, make_failure(rpc_code::method_not_found, "unknown method '" + name + "'",
                           errc::invalid_argument));
      return;
    }
    json params = json::object();
    if (auto it = req.find("params"); it != req.end() && !it->is_null()) {
      if (!it->is_object()) {
        if (!notification)
          answer(id, make_failure(rpc_code::invalid_params,
                             "'params' must be an object (parameters by name)",
                             errc::invalid_argument));
        return;
      }
      params = std::move(*it);
    }
    auto p = found->prepare(params);
    if (auto f = std::get_if<rpc_failure>(&p)) {
      if (!notification)
        answer(id, *f);
      return;
    }
    submit(std::move(id), notification, std::move(std::get<prepared>(p)));
  }
};

} // namespace detail

// -- rpc_session -------------------------------------------------------------------

rpc_session::rpc_session(engine& eng, std::function<void(std::string)> write, rpc_config cfg)
  : state_(std::make_shared<detail::rpc_state>(eng, std::move(write), cfg)) {}

rpc_session::~rpc_session() {
  drain();
}

void rpc_session::handle_line(std::string_view line) {
  try {
    state_->handle_line(line);
  } catch (const std::exception& e) {
    state_->answer(nullptr, internal_failure("request handling", e.what()));
  } catch (...) {
    state_->answer(nullptr, internal_failure("request handling", "unknown exception"));
  }
}

void rpc_session::handle_oversized_line(std::uint64_t bytes, std::uint64_t limit) {
  state_->answer(nullptr,
                 make_failure(rpc_code::parse_error,
                         "line of " + std::to_string(bytes) + " bytes exceeds the limit of "
                           + std::to_string(limit) + " bytes; it was discarded unread",
                         errc::too_large));
}

void rpc_session::drain() {
  std::unique_lock<std::mutex> lock(state_->mtx);
  state_->cv.wait(lock, [this] { return state_->in_flight == 0; });
}

std::size_t rpc_session::in_flight() const {
  std::lock_guard<std::mutex> guard(state_->mtx);
  return state_->in_flight;
}

} // namespace agentstate::tools
