// SPDX-License-Identifier: Apache-2.0
// agentstate::engine's lifecycle: option checks, store ownership (the lock
// file and the in-process registry), the actor system, close, stats.
#include "agentstate/engine.hpp"
#include "agentstate/version.hpp"

#include <unistd.h>

#include <algorithm>
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
#include <caf/scheduler/test_coordinator.hpp>

#include "actors/core.hpp"
#include "actors/engine_factory.hpp"
#include "actors/heap_trimmer.hpp"
#include "actors/idle_sweeper.hpp"
#include "actors/reaper.hpp"
#include "actors/messages.hpp"
#include "actors/polling_sharing.hpp"
#include "actors/spin.hpp"
#include "model/checks.hpp"
#include "model/ids.hpp"
#include "model/text.hpp"
#include "store/file_check.hpp"
#include "store/commit.hpp"
#include "store/errors.hpp"
#include "store/format.hpp"
#include "store/keys.hpp"
#include "store/listing.hpp"
#include "store/outbox.hpp"
#include "store/open.hpp"
#include "store/purge.hpp"
#include "store/reads.hpp"

namespace agentstate {

namespace detail {

namespace {

result<void> check_options(const options& o) {
  auto bad = [](std::string m) { return error{errc::invalid_argument, std::move(m)}; };
  if (o.mode != durability::memory && o.dir.empty())
    return bad("options.dir is required unless durability is memory");
  if (o.limits.max_json_depth == 0 || o.limits.max_json_depth > store::stored_json_depth)
    return bad("options.limits.max_json_depth must be 1.."
               + std::to_string(store::stored_json_depth));
  if (o.limits.max_response_bytes < (std::size_t{1} << 16))
    return bad("options.limits.max_response_bytes must be at least 64 KiB");
  if (o.max_batch_count == 0 || o.max_batch_bytes == 0)
    return bad("options.max_batch_count and max_batch_bytes must be positive");
  if (o.idle_timeout.count() <= 0)
    return bad("options.idle_timeout must be positive");
  if (o.spin_wait.count() < 0 || o.spin_wait > std::chrono::milliseconds(10))
    return bad("options.spin_wait must be 0..10 ms");
  if (o.reap_interval < std::chrono::milliseconds(1))
    return bad("options.reap_interval must be at least 1 ms");
  if (o.default_session_ttl.count() < 0)
    return bad("options.default_session_ttl must not be negative");
  if (o.scheduler != scheduler_policy::sharing && o.scheduler != scheduler_policy::stealing)
    return bad("options.scheduler must be sharing or stealing");
  if (o.write_map && o.mode != durability::nosync)
    return bad("options.write_map needs durability nosync");
  if (o.max_store_bytes < (std::uint64_t{1} << 20))
    return bad("options.max_store_bytes must be at least 1 MiB");
  return model::check_derived(o.derived);
}

// Reads the store's epoch and the change log's bounds into core.log (the
// writer takes it over once spawned).
result<void> load_log(engine_core& core) {
  auto head = store::read_log_head(*core.kv);
  if (!head)
    return std::move(head).err();
  core.epoch = std::move(head->epoch);
  core.log.oldest = head->bounds.first;
  core.log.next = head->bounds.last + 1;
  core.log.keep.max_entries = std::max<std::uint64_t>(1, core.opts.change_retention.max_entries);
  core.log.keep.max_age_seconds = double(core.opts.change_retention.max_age.count());
  // A purge a crash interrupted resumes.
  auto left = store::purge_left(*core.kv);
  if (!left)
    return std::move(left).err();
  core.purge_pending.store(*left);
  return {};
}

} // namespace

std::string session_registry_key(const session_ref& r) {
  return 's' + store::session_key(r.app_name, r.user_id, r.session_id);
}

std::string user_registry_key(const std::string& app, const std::string& user) {
  return 'u' + store::user_scope_key(app, user);
}

std::string app_registry_key(const std::string& app) {
  return 'a' + app;
}

std::chrono::microseconds commit_poll(const options& o) {
  if (o.spin_wait.count() <= 0 || o.mode != durability::sync)
    return o.spin_wait;
  return std::max<std::chrono::microseconds>(o.spin_wait, std::chrono::milliseconds(1));
}

/// options::max_live_sessions with 0 resolved from physical memory.
std::size_t resolved_max_live_sessions(std::size_t asked) {
  if (asked != 0)
    return asked;
  long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  std::uint64_t bytes = pages > 0 && page > 0 ? std::uint64_t(pages) * std::uint64_t(page) : 0;
  return std::max<std::size_t>(10000, static_cast<std::size_t>(bytes / 8 / 4096));
}

} // namespace detail

using namespace detail;

json to_json(const engine_stats& x) {
  return json{{"sessions_live", x.sessions_live},   {"users_live", x.users_live},
              {"apps_live", x.apps_live},           {"activations", x.activations},
              {"passivations", x.passivations},     {"appends", x.appends},
              {"deduplicated", x.deduplicated},     {"commits", x.commits},
              {"batched_writes", x.batched_writes}, {"max_batch", x.max_batch},
              {"failed_writes", x.failed_writes},   {"resident_trims", x.resident_trims},
              {"evictions", x.evictions},           {"heap_trims", x.heap_trims}};
}

engine::engine(std::unique_ptr<engine_core> core) : core_(std::move(core)) {}

engine::~engine() {
  close();
}

result<std::unique_ptr<engine>> engine::open(const options& opts) {
  return engine_factory::open(opts, nullptr);
}

result<std::unique_ptr<engine>> engine_factory::open(const options& opts, const store_wrapper& wrap,
                                                     bool deterministic) {
  if (auto r = check_options(opts); !r)
    return std::move(r).err();
  auto core = std::make_unique<engine_core>();
  core->opts = opts;
  for (auto& d : opts.derived)
    core->derived_inputs.insert(d.inputs.begin(), d.inputs.end());
  if (core->opts.threads == 0)
    core->opts.threads = std::max(1u, std::thread::hardware_concurrency());
  std::string made; // the directory of a store this open makes
  if (opts.mode == durability::memory) {
    core->kv = store::make_memory_kv();
  } else {
    std::error_code ec;
    if (opts.create == create_policy::never && !std::filesystem::is_directory(opts.dir, ec))
      return error{errc::not_found, "no store directory '" + opts.dir + "'"};
    std::filesystem::create_directories(opts.dir, ec);
    if (ec)
      return error{errc::io_error,
                   "cannot create store directory '" + opts.dir + "': " + ec.message()};
    auto dir = std::filesystem::canonical(opts.dir, ec).string();
    if (ec)
      return error{errc::io_error, "cannot resolve '" + opts.dir + "': " + ec.message()};
    // Before the lock: taking it creates agentstate.lock, one of the files
    // that mark a store that was there.
    auto rule = opts.create == create_policy::always ? store::create_rule::always
      : opts.create == create_policy::never          ? store::create_rule::never
                                                     : store::create_rule::if_new;
    // Held while this process decides, marks a new store and takes its lock.
    auto held = store::dir_flock::take(dir);
    if (!held)
      return std::move(held).err();
    if (auto r = store::check_store_dir(dir, rule); !r) {
      // A store another engine owns answers unavailable, whatever its file
      // looked like to a reader beside its writer.
      if (r.code() == errc::data_corrupt)
        if (auto owned = core->lock.acquire(dir); !owned && owned.code() == errc::unavailable)
          return std::move(owned).err();
      return std::move(r).err();
    }
    // A new store is marked before any file of it is made (its lock
    // included), until its first commit is durable: a creation cut off
    // leaves a directory that is made again, not one refused as a store
    // whose data is gone.
    auto data = store::check_data_file(dir);
    const bool fresh = store::creating(dir) || (data && *data != store::data_file_state::present);
    if (fresh)
      if (auto r = store::mark_creating(dir); !r)
        return std::move(r).err();
    if (auto r = core->lock.acquire(dir); !r)
      return std::move(r).err();
    if (fresh) {
      if (auto r = store::discard_cut_creation(dir); !r)
        return std::move(r).err();
      made = dir;
    }
    auto kv = store::open_lmdb(dir, opts.mode == durability::sync, opts.max_store_bytes,
                               {opts.max_resident_store_bytes, std::chrono::milliseconds(250)},
                               opts.write_map);
    if (!kv)
      return std::move(kv).err();
    core->kv = std::move(*kv);
  }
  if (auto r = store::init_meta(*core->kv, AGENTSTATE_VERSION_STRING, wall_now(*core)); !r)
    return std::move(r).err();
  if (!made.empty()) {
    try {
      core->kv->sync(); // the first commit, durable under nosync too
    } catch (const store::kv_failure& f) {
      return error{f.code, f.message};
    }
    auto held = store::dir_flock::take(made);
    if (!held)
      return std::move(held).err();
    if (auto r = store::unmark_creating(made); !r)
      return std::move(r).err();
  }
  if (auto r = load_log(*core); !r)
    return std::move(r).err();
  std::vector<std::string> waiting; // sessions with an append in the outbox
  {
    auto txn = core->kv->begin_read();
    auto got = store::outbox_sessions(*txn);
    if (!got)
      return std::move(got).err();
    waiting = std::move(*got);
  }
  if (!waiting.empty() && (!opts.app_home.here || !opts.app_home.send))
    return error{errc::invalid_argument,
                 std::to_string(waiting.size())
                   + " appends in this store wait for their app: part to be applied at the "
                     "app's home: it is a cluster node's store, to be opened as that node "
                     "(options::app_home, docs/cluster.md)"};
  core->hub = std::make_unique<watch_hub>(*core);
  if (wrap)
    core->kv = wrap(std::move(core->kv));
  core->cfg = std::make_unique<caf::actor_system_config>();
  core->deterministic = deterministic;
  core->inline_commits = opts.mode == durability::memory && !deterministic;
  if (deterministic) {
    core->cfg->set("scheduler.policy", caf::atom("testing"));
  } else {
    core->cfg->set("scheduler.policy",
                   core->opts.scheduler == scheduler_policy::sharing ? caf::atom("sharing")
                                                                     : caf::atom("stealing"));
    core->cfg->set("scheduler.max-threads", core->opts.threads);
  }
  // "sharing" with polling: CAF builds no scheduler of its own when a module
  // factory supplies one.
  if (!deterministic && core->opts.scheduler == scheduler_policy::sharing
      && core->opts.spin_wait.count() > 0) {
    auto* shared = core.get();
    core->cfg->module_factories.push_back([shared](caf::actor_system& sys) {
      auto* c = new caf::scheduler::coordinator<polling_sharing>(sys);
      c->data().spin = shared->opts.spin_wait;
      c->data().committing = &shared->committing;
      c->data().commit_poll = commit_poll(shared->opts);
      shared->jobs = &c->data();
      return static_cast<caf::actor_system::module*>(c);
    });
  }
  core->sys = std::make_unique<caf::actor_system>(*core->cfg);
  core->writer = spawn_writer(*core);
  auto capacity = resolved_max_live_sessions(core->opts.max_live_sessions);
  core->opts.max_live_sessions = capacity;
  core->sessions.set_capacity(capacity);
  core->scopes.set_capacity(capacity);
  if (!deterministic)
    core->heap_trimmer = spawn_heap_trimmer(*core);
  core->reaper = spawn_reaper(*core);
  core->idle_sweeper = spawn_idle_sweeper(*core);
  wake_sessions(*core, waiting);
  return std::unique_ptr<engine>(new engine(std::move(core)));
}

void detail::wake_sessions(engine_core& core, const std::vector<std::string>& skeys) {
  // Each such session's actor finishes its append when it starts
  // (resume_remote_append): a read starts it.
  for (auto& skey : skeys) {
    auto parts = store::split_key(skey, 3);
    if (parts.size() != 3)
      continue;
    session_ref ref{std::string(parts[0]), std::string(parts[1]), std::string(parts[2])};
    get_cmd wake;
    wake.req.ref = ref;
    wake.req.num_recent_events = 0;
    wake.cb = [](result<std::optional<session>>) {};
    auto* c = &core;
    core.sessions.route(session_registry_key(ref), std::move(wake),
                        [c, ref] { return spawn_session_actor(*c, ref); });
  }
}

store::kv_store& engine_factory::store_of(engine& e) {
  return *e.core_->kv;
}

caf::actor_system& engine_factory::system_of(engine& e) {
  return *e.core_->sys;
}

std::size_t engine_factory::writer_backlog_of(engine& e) {
  return e.core_->writer_backlog.load();
}

std::size_t engine_factory::parked_workers(engine& e) {
  auto* q = e.core_->jobs;
  if (!q)
    return 0;
  std::lock_guard<std::mutex> guard(q->lock);
  return q->parked;
}

std::size_t engine_factory::passivate_all(engine& e) {
  return e.core_->sessions.send_all(evict_cmd{}) + e.core_->scopes.send_all(evict_cmd{});
}

result<void> engine::close() {
  if (!core_ || core_->closed.exchange(true))
    return {};
  core_->hub->close();
  for (auto& key : core_->sessions.close())
    core_->sessions.route(key, shutdown_cmd{}, nullptr, true);
  for (auto& key : core_->scopes.close())
    core_->scopes.route(key, shutdown_cmd{}, nullptr, true);
  auto actors_gone = [this] { return core_->sessions.live() + core_->scopes.live() == 0; };
  if (core_->deterministic) {
    // Nothing runs unless run here: the actors finish their work, then the
    // writer stops.
    auto& sched = dynamic_cast<caf::scheduler::test_coordinator&>(core_->sys->scheduler());
    while (!actors_gone())
      if (sched.run() == 0 && sched.trigger_timeouts() == 0)
        std::this_thread::yield(); // a reply from the store is on its way
    caf::anon_send(core_->writer, stop_writer_cmd{});
    for (auto* a : {&core_->reaper, &core_->idle_sweeper})
      if (*a)
        caf::anon_send_exit(*a, caf::exit_reason::user_shutdown);
    sched.run();
  } else {
    while (!actors_gone())
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    caf::anon_send(core_->writer, stop_writer_cmd{});
  }
  for (auto* a : {&core_->heap_trimmer, &core_->reaper, &core_->idle_sweeper}) {
    if (*a)
      caf::anon_send_exit(*a, caf::exit_reason::user_shutdown);
    *a = nullptr;
  }
  core_->writer = nullptr;
  core_->sys->await_all_actors_done();
  auto out = store::sync(*core_->kv);
  // A blocking call's helper may still be inside the job queue; no new one
  // starts once `closed` is set (begin_helping).
  while (core_->helping.load(std::memory_order_seq_cst) != 0)
    std::this_thread::yield();
  core_->sys.reset();
  core_->jobs = nullptr;
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
  s.evictions = core_->sessions.evictions() + core_->scopes.evictions();
  s.heap_trims = ld(c.heap_trims);
  s.resident_trims = core_->kv ? core_->kv->resident_trims() : 0;
  return s;
}

} // namespace agentstate
