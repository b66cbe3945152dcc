// agentstate::engine: option checks, store ownership (lock file and the
// in-process registry), routing of commands to actors, direct snapshot reads,
// and the blocking forms of every call.
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
#include "actors/validate.hpp"
#include "model/ids.hpp"
#include "model/text.hpp"
#include "store/commit.hpp"
#include "store/format.hpp"
#include "store/keys.hpp"
#include "store/listing.hpp"
#include "store/open.hpp"
#include "store/reads.hpp"

namespace agentstate {

namespace detail {

namespace {


// One blocking call's answer slot. Shared with the callback, which may be
// destroyed on an actor's thread after the caller has returned.
template <class T>
struct answer_slot {
  std::mutex m;
  std::condition_variable cv;
  std::atomic<bool> done{false};
  std::optional<result<T>> value;
};

// Runs `start(callback)` and waits for the callback's result. The first
// waiter of the engine polls for up to opts.spin_wait (commit_poll while the
// writer is committing) before it sleeps; any other waiter sleeps at once
// (64 polling threads on 2 cores would starve the actors they wait for).
template <class T, class Start>
result<T> block_on(engine_core& core, Start&& start) {
  auto slot = std::make_shared<answer_slot<T>>();
  start([slot](result<T> r) {
    std::lock_guard<std::mutex> g(slot->m);
    slot->value.emplace(std::move(r));
    slot->done.store(true, std::memory_order_release);
    slot->cv.notify_one();
  });
  auto ready = [&slot] { return slot->done.load(std::memory_order_acquire); };
  if (!ready() && core.opts.spin_wait.count() > 0) {
    if (core.spinners.fetch_add(1, std::memory_order_acq_rel) == 0)
      spin_until(
        ready, core.opts.spin_wait,
        [&core] { return core.committing.load(std::memory_order_relaxed); },
        commit_poll(core.opts));
    core.spinners.fetch_sub(1, std::memory_order_acq_rel);
  }
  std::unique_lock<std::mutex> g(slot->m);
  slot->cv.wait(g, ready);
  return std::move(*slot->value);
}

error closing_error() {
  return error{errc::unavailable, "the engine is closing"};
}

result<void> check_options(const options& o) {
  auto bad = [](std::string m) { return error{errc::invalid_argument, std::move(m)}; };
  if (o.mode != durability::memory && o.dir.empty())
    return bad("options.dir is required unless durability is memory");
  if (o.limit.max_json_depth == 0 || o.limit.max_json_depth > store::stored_json_depth)
    return bad("options.limit.max_json_depth must be 1.."
               + std::to_string(store::stored_json_depth));
  if (o.max_batch_count == 0 || o.max_batch_bytes == 0)
    return bad("options.max_batch_count and max_batch_bytes must be positive");
  if (o.idle_timeout.count() <= 0)
    return bad("options.idle_timeout must be positive");
  if (o.spin_wait.count() < 0 || o.spin_wait > std::chrono::milliseconds(10))
    return bad("options.spin_wait must be 0..10 ms");
  if (o.scheduler != "sharing" && o.scheduler != "stealing")
    return bad("options.scheduler must be \"sharing\" or \"stealing\"");
  if (o.write_map && o.mode != durability::nosync)
    return bad("options.write_map needs durability nosync");
  if (o.max_store_bytes < (std::uint64_t{1} << 20))
    return bad("options.max_store_bytes must be at least 1 MiB");
  return check_derived(o.derived);
}


} // namespace

std::string session_dir_key(const session_ref& r) {
  return 's' + store::session_key(r.app_name, r.user_id, r.session_id);
}

std::string user_dir_key(const std::string& app, const std::string& user) {
  return 'u' + store::user_scope_key(app, user);
}

std::string app_dir_key(const std::string& app) {
  return 'a' + app;
}

std::chrono::microseconds commit_poll(const options& o) {
  if (o.spin_wait.count() <= 0 || o.mode != durability::sync)
    return o.spin_wait;
  return std::max<std::chrono::microseconds>(o.spin_wait, std::chrono::milliseconds(1));
}

} // namespace detail

using namespace detail;

json to_json(const engine_stats& x) {
  return json{{"sessions_live", x.sessions_live},   {"users_live", x.users_live},
              {"apps_live", x.apps_live},           {"activations", x.activations},
              {"passivations", x.passivations},     {"appends", x.appends},
              {"deduplicated", x.deduplicated},     {"commits", x.commits},
              {"batched_writes", x.batched_writes}, {"max_batch", x.max_batch},
              {"failed_writes", x.failed_writes},   {"resident_trims", x.resident_trims}};
}

engine::engine(std::unique_ptr<engine_core> core) : core_(std::move(core)) {}

engine::~engine() {
  close();
}

result<std::unique_ptr<engine>> engine::open(const options& opts) {
  return engine_factory::open(opts, nullptr);
}

result<std::unique_ptr<engine>> engine_factory::open(const options& opts,
                                                     const store_wrapper& wrap) {
  if (auto r = check_options(opts); !r)
    return std::move(r).err();
  auto core = std::make_unique<engine_core>();
  core->opts = opts;
  for (auto& d : opts.derived)
    core->derived_inputs.insert(d.inputs.begin(), d.inputs.end());
  if (core->opts.threads == 0)
    core->opts.threads = std::max(1u, std::thread::hardware_concurrency());
  if (opts.mode == durability::memory) {
    core->kv = store::make_memory_kv();
  } else {
    std::error_code ec;
    std::filesystem::create_directories(opts.dir, ec);
    if (ec)
      return error{errc::io_error,
                   "cannot create store directory '" + opts.dir + "': " + ec.message()};
    auto dir = std::filesystem::canonical(opts.dir, ec).string();
    if (ec)
      return error{errc::io_error, "cannot resolve '" + opts.dir + "': " + ec.message()};
    if (auto r = core->lock.acquire(dir); !r)
      return std::move(r).err();
    auto kv = store::open_lmdb(dir, opts.mode == durability::sync, opts.max_store_bytes,
                               {opts.max_resident_store_bytes, std::chrono::milliseconds(250)},
                               opts.write_map);
    if (!kv)
      return std::move(kv).err();
    core->kv = std::move(*kv);
  }
  if (auto r = store::init_meta(*core->kv, "0.1.0"); !r)
    return std::move(r).err();
  if (wrap)
    core->kv = wrap(std::move(core->kv));
  core->cfg = std::make_unique<caf::actor_system_config>();
  core->cfg->set("scheduler.policy", caf::atom_from_string(core->opts.scheduler));
  core->cfg->set("scheduler.max-threads", core->opts.threads);
  // "sharing" with polling: CAF builds no scheduler of its own when a module
  // factory supplies one.
  if (core->opts.scheduler == "sharing" && core->opts.spin_wait.count() > 0) {
    auto* shared = core.get();
    core->cfg->module_factories.push_back([shared](caf::actor_system& sys) {
      auto* c = new caf::scheduler::coordinator<polling_sharing>(sys);
      c->data().spin = shared->opts.spin_wait;
      c->data().committing = &shared->committing;
      c->data().commit_poll = commit_poll(shared->opts);
      return static_cast<caf::actor_system::module*>(c);
    });
  }
  core->sys = std::make_unique<caf::actor_system>(*core->cfg);
  core->writer = spawn_writer(*core);
  return std::unique_ptr<engine>(new engine(std::move(core)));
}

result<void> engine::close() {
  if (!core_ || core_->closed.exchange(true))
    return {};
  for (auto& key : core_->sessions.close())
    core_->sessions.route(key, shutdown_cmd{}, nullptr, true);
  for (auto& key : core_->scopes.close())
    core_->scopes.route(key, shutdown_cmd{}, nullptr, true);
  while (core_->sessions.live() + core_->scopes.live() > 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  caf::anon_send(core_->writer, stop_writer_cmd{});
  core_->writer = nullptr;
  core_->sys->await_all_actors_done();
  auto out = store::sync(*core_->kv);
  core_->sys.reset();
  core_->kv.reset();
  core_->lock.release();
  return out;
}

const options& engine::opts() const {
  return core_->opts;
}

engine_stats engine::stats() const {
  auto& c = core_->stats;
  auto ld = [](const std::atomic<std::uint64_t>& x) { return x.load(std::memory_order_relaxed); };
  engine_stats s;
  s.sessions_live = ld(c.sessions_live);
  s.users_live = ld(c.users_live);
  s.apps_live = ld(c.apps_live);
  s.activations = ld(c.activations);
  s.passivations = ld(c.passivations);
  s.appends = ld(c.appends);
  s.deduplicated = ld(c.deduplicated);
  s.commits = ld(c.commits);
  s.batched_writes = ld(c.batched_writes);
  s.max_batch = ld(c.max_batch);
  s.failed_writes = ld(c.failed_writes);
  s.resident_trims = core_->kv ? core_->kv->resident_trims() : 0;
  return s;
}

namespace {

// Routes a command to the session actor of `ref`, spawning it if needed.
template <class Cmd, class T>
void to_session(engine_core& core, const session_ref& ref, Cmd&& cmd, callback<T>& cb) {
  auto key = session_dir_key(ref);
  auto make = [&core, &ref] { return spawn_session_actor(core, ref); };
  if (!core.sessions.route(key, std::forward<Cmd>(cmd), make))
    cb(closing_error());
}

} // namespace

void engine::create_session(create_request req, callback<session> cb) {
  if (auto r = check_name(req.app_name, "app_name"); !r)
    return cb(std::move(r).err());
  if (auto r = check_name(req.user_id, "user_id"); !r)
    return cb(std::move(r).err());
  req.session_id = std::string(model::trim(req.session_id));
  if (req.session_id.empty())
    req.session_id = model::make_uuid();
  if (auto r = check_name(req.session_id, "session_id"); !r)
    return cb(std::move(r).err());
  session_ref ref{req.app_name, req.user_id, req.session_id};
  create_cmd cmd{std::move(req), std::move(cb)};
  to_session(*core_, ref, std::move(cmd), cmd.cb);
}

namespace {

result<void> check_get(const get_request& req) {
  if (auto r = check_ref(req.ref); !r)
    return r;
  if (req.num_recent_events && *req.num_recent_events < 0)
    return error{errc::invalid_argument, "'num_recent_events' must not be negative"};
  if (req.after_timestamp && !std::isfinite(*req.after_timestamp))
    return error{errc::invalid_argument, "'after_timestamp' must be finite"};
  return {};
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
  cb(store::read_session_text(*core_->kv, req, nullptr));
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
  cb(store::read_session(*core_->kv, req));
}

void engine::list_sessions(list_request req, callback<session_page> cb) {
  if (auto r = check_name(req.app_name, "app_name"); !r)
    return cb(std::move(r).err());
  if (req.user_id)
    if (auto r = check_name(*req.user_id, "user_id"); !r)
      return cb(std::move(r).err());
  auto size = req.page_size.value_or(100);
  if (size < 1 || size > 1000)
    return cb(error{errc::invalid_argument, "'page_size' must be 1..1000"});
  if (core_->closed.load())
    return cb(closing_error());
  auto txn = store::begin_read(*core_->kv);
  if (!txn)
    return cb(std::move(txn).err());
  cb(store::list_sessions(**txn, req, static_cast<std::size_t>(size)));
}

void engine::delete_session(session_ref ref, callback<void> cb) {
  if (auto r = check_ref(ref); !r)
    return cb(std::move(r).err());
  delete_cmd cmd{std::move(cb)};
  to_session(*core_, ref, std::move(cmd), cmd.cb);
}

void engine::append_event(append_request req, callback<append_result> cb) {
  if (auto r = check_ref(req.ref); !r)
    return cb(std::move(r).err());
  auto ref = req.ref;
  append_cmd cmd{std::move(req), std::move(cb)};
  to_session(*core_, ref, std::move(cmd), cmd.cb);
}

void engine::begin_invocation(session_ref ref, std::string invocation_id,
                              callback<session> cb) {
  if (auto r = check_ref(ref); !r)
    return cb(std::move(r).err());
  if (invocation_id.empty())
    invocation_id = model::make_uuid();
  if (auto r = check_name(invocation_id, "invocation_id"); !r)
    return cb(std::move(r).err());
  if (invocation_id.size() > max_event_id_bytes)
    return cb(error{errc::too_large, "'invocation_id' is longer than "
                                       + std::to_string(max_event_id_bytes) + " bytes"});
  begin_invocation_cmd cmd{std::move(invocation_id), std::move(cb)};
  to_session(*core_, ref, std::move(cmd), cmd.cb);
}

void engine::end_invocation(session_ref ref, std::string invocation_id, callback<void> cb) {
  if (auto r = check_ref(ref); !r)
    return cb(std::move(r).err());
  // Only a live actor can hold temp: state; a passivated session has none.
  end_invocation_cmd cmd{std::move(invocation_id), std::move(cb)};
  if (!core_->sessions.route(session_dir_key(ref), std::move(cmd), nullptr)) {
    if (core_->closed.load())
      cmd.cb(closing_error());
    else
      cmd.cb(result<void>{});
  }
}

void engine::get_app_state(std::string app_name, callback<json> cb) {
  if (auto r = check_name(app_name, "app_name"); !r)
    return cb(std::move(r).err());
  auto& core = *core_;
  scope_get_cmd cmd{std::move(cb)};
  auto make = [&core, &app_name] { return spawn_scope_actor(core, app_name, std::nullopt); };
  if (!core.scopes.route(app_dir_key(app_name), std::move(cmd), make))
    cmd.cb(closing_error());
}

void engine::get_user_state(std::string app_name, std::string user_id, callback<json> cb) {
  if (auto r = check_name(app_name, "app_name"); !r)
    return cb(std::move(r).err());
  if (auto r = check_name(user_id, "user_id"); !r)
    return cb(std::move(r).err());
  auto& core = *core_;
  scope_get_cmd cmd{std::move(cb)};
  auto make = [&core, &app_name, &user_id] {
    return spawn_scope_actor(core, app_name, user_id);
  };
  if (!core.scopes.route(user_dir_key(app_name, user_id), std::move(cmd), make))
    cmd.cb(closing_error());
}

void engine::flush(callback<void> cb) {
  if (core_->closed.load())
    return cb(closing_error());
  // The writer is a spawn argument, not a capture: CAF 0.17's init_fun_factory
  // binds a null args tuple to a reference when a function actor has none
  // (UBSan: "reference binding to null pointer"; docs/testing.md, Sanitizers).
  core_->sys->spawn([cb](caf::event_based_actor* self, writer_hdl writer) {
    self->request(writer, caf::infinite, flush_cmd{})
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
  }, core_->writer);
}

// -- blocking forms ------------------------------------------------------------

result<session> engine::create_session(create_request req) {
  return block_on<session>(*core_,
                           [&](callback<session> cb) { create_session(std::move(req), cb); });
}
result<std::optional<session>> engine::get_session(get_request req) {
  return block_on<std::optional<session>>(
    *core_, [&](callback<std::optional<session>> cb) { get_session(std::move(req), cb); });
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
  return block_on<void>(*core_,
                        [&](callback<void> cb) { delete_session(std::move(ref), cb); });
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
result<json> engine::get_app_state(std::string app_name) {
  return block_on<json>(*core_,
                        [&](callback<json> cb) { get_app_state(std::move(app_name), cb); });
}
result<json> engine::get_user_state(std::string app_name, std::string user_id) {
  return block_on<json>(*core_, [&](callback<json> cb) {
    get_user_state(std::move(app_name), std::move(user_id), cb);
  });
}
result<void> engine::flush() {
  return block_on<void>(*core_, [&](callback<void> cb) { flush(cb); });
}

} // namespace agentstate
