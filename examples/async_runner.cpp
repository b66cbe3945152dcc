// SPDX-License-Identifier: Apache-2.0
// examples/async_runner.cpp: a CAF actor (event_based, CAF 0.17) that drives
// many invocations at once and never blocks. Built with the project and run as
// a CTest smoke test (example_async_runner).
//
// What it demonstrates:
//  * the typed engine actor (caf.hpp: spawn_engine_actor) for plain requests:
//    the runner creates its sessions and reads them back with
//    self->request(h, ...).then(...);
//  * the async invocation API: invocation::begin(eng, ref, id, callback) and
//    inv.append(ev, callback). Their callbacks run on engine threads, so they
//    only forward the result into the runner's mailbox (caf::anon_send); every
//    invocation object and all bookkeeping are touched by the runner alone, and
//    never while an async call on that invocation is in flight;
//  * many invocations on different sessions in flight at once, and two
//    invocations of one session serialised by the session's lease (the second
//    begin is granted only after the first invocation ends).
// Each invocation: set temp:draft, modify user:runs, append a tool event; then
// render a template, record the reply under output_key "answer", append; then
// end (dropping the invocation object ends it without waiting).
// Every line it prints is a checked claim; any failed check exits 1.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "agentstate/caf.hpp"
#include "agentstate/invocation.hpp"
#include "example_support.hpp"

using namespace agentstate;

namespace {

const char* usage =
  "usage: async_runner [--dir PATH] [--memory] [--sessions N] [--per-session N] [--users N]\n"
  "  --dir PATH        store directory, kept afterwards (default: a temp dir, removed)\n"
  "  --memory          durability::memory (nothing on disk)\n"
  "  --sessions N      sessions (default 12, at least 2), over --users N users (default 4)\n"
  "  --per-session N   invocations started at once on each session (default 2, at least 2)\n";

// Engine callbacks forward their results into the runner's mailbox as these.
struct begun {
  std::size_t job;
  std::shared_ptr<result<invocation>> r; // invocation is move-only
};
struct appended {
  std::size_t job;
  std::shared_ptr<result<append_result>> r;
};
using go_atom = caf::atom_constant<caf::atom("go")>;

} // namespace

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(begun)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(appended)

namespace {

struct run_config {
  std::string app;
  int sessions, per_session, users;
};

struct job {
  session_ref ref;
  std::string id;
  std::optional<invocation> inv; // held from begun until the job ends it
  int step = 0; // appends done
  std::uint64_t begin_version = 0, end_version = 0;
  json begin_state;
  std::string answer;
};

// All members are touched only by the actor itself (its handlers run one at a
// time); engine callbacks see nothing but the job index and the actor handle.
class runner : public caf::event_based_actor {
public:
  runner(caf::actor_config& ac, engine* eng, engine_actor h, run_config cfg, int* failed)
    : caf::event_based_actor(ac), eng_(eng), h_(std::move(h)), cfg_(std::move(cfg)),
      failed_(failed) {
    for (int s = 0; s < cfg_.sessions; ++s)
      for (int k = 0; k < cfg_.per_session; ++k) {
        job j;
        j.ref = {cfg_.app, "u" + std::to_string(s % cfg_.users), "s" + std::to_string(s)};
        j.id = j.ref.session_id + "-inv" + std::to_string(k);
        jobs_.push_back(std::move(j));
      }
  }

  caf::behavior make_behavior() override {
    return {
      [this](go_atom) { create_sessions(); },
      [this](begun& m) { on_begun(m.job, std::move(*m.r)); },
      [this](appended& m) { on_appended(m.job, std::move(*m.r)); },
    };
  }

private:
  // 1. Create every session through the typed engine actor, without blocking.
  void create_sessions() {
    pending_ = cfg_.sessions;
    for (int s = 0; s < cfg_.sessions; ++s) {
      const session_ref& ref = jobs_[s * cfg_.per_session].ref;
      create_request c{ref.app_name, ref.user_id, ref.session_id,
                       json{{"user:name", "user " + ref.user_id}}};
      request(h_, caf::infinite, std::move(c))
        .then([this](session&) { created(); },
              [this](caf::error& e) {
                fail("create: " + system().render(e));
                created();
              });
    }
  }

  // 2. Begin every invocation at once: those on different sessions are granted
  //    concurrently; those on one session wait for its lease, in arrival order.
  void created() {
    if (--pending_ > 0)
      return;
    pending_ = jobs_.size();
    caf::actor me = caf::actor_cast<caf::actor>(this);
    for (std::size_t i = 0; i < jobs_.size(); ++i)
      invocation::begin(*eng_, jobs_[i].ref, jobs_[i].id, [me, i](result<invocation> r) {
        caf::anon_send(me, begun{i, std::make_shared<result<invocation>>(std::move(r))});
      });
  }

  void on_begun(std::size_t i, result<invocation> r) {
    job& j = jobs_[i];
    if (!r) {
      fail(j.id + " begin: " + to_string(r.err()));
      return job_done(i);
    }
    // Causality check of the lease: no other job of this session may be
    // between its begin and its end now.
    if (!active_.emplace(j.ref.session_id, i).second)
      fail(j.id + " began while " + jobs_[active_[j.ref.session_id]].id + " was running");
    order_[j.ref.session_id].push_back(i);
    max_in_flight_ = std::max(max_in_flight_, ++in_flight_);
    j.inv = std::move(*r);
    j.begin_version = j.inv->version();
    j.begin_state = j.inv->state().all();
    step(i);
  }

  void on_appended(std::size_t i, result<append_result> r) {
    job& j = jobs_[i];
    if (!r)
      fail(j.id + " append: " + to_string(r.err()));
    else if (j.step == 1 && r->ev.actions.state_delta.value("answer", "") != j.answer)
      fail(j.id + ": the stored event does not carry the answer under output_key");
    ++j.step;
    if (!r)
      j.step = 2; // give up on this job, but still end it
    step(i);
  }

  // 3. A job's next step: the actor owns the invocation again (no call on it
  //    is in flight). The engine callback only sends the result back here.
  void step(std::size_t i) {
    job& j = jobs_[i];
    invocation& inv = *j.inv;
    caf::actor me = caf::actor_cast<caf::actor>(this);
    auto reply_here = [me, i](result<append_result> r) {
      caf::anon_send(me, appended{i, std::make_shared<result<append_result>>(std::move(r))});
    };
    if (j.step == 0) { // a tool call carries the pending temp: set and user: modify
      inv.state().set("temp:draft", "draft of " + j.id);
      if (!inv.state().modify("user:runs", 0, [](const json& n) { return n.get<int>() + 1; }))
        fail(j.id + ": modify refused");
      event ev;
      ev.author = "tool";
      ev.content = json{{"parts", {{{"text", "looked up " + j.ref.session_id}}}}};
      return inv.append(std::move(ev), reply_here);
    }
    if (j.step == 1) { // the agent's reply, rendered from the invocation's state
      auto text = inv.inject("{temp:draft} for {user:name}, run {user:runs}");
      event ev;
      ev.author = "agent";
      ev.content = json{{"parts", {{{"text", text ? *text : std::string()}}}}};
      // append_final has no async form: apply_output_key, then the async append.
      auto out = apply_output_key(ev, output_key{"answer"});
      if (!text || !out)
        fail(j.id + ": template or output_key failed");
      j.answer = text ? *text : "";
      return inv.append(std::move(ev), reply_here);
    }
    // Done. invocation::end() waits for its reply; dropping the object ends
    // the invocation without waiting, and the lease passes to the next begin.
    j.end_version = inv.version();
    active_.erase(j.ref.session_id);
    --in_flight_;
    j.inv.reset();
    job_done(i);
  }

  // 4. When every job is done, read every session back through the engine actor.
  void job_done(std::size_t) {
    if (--pending_ > 0)
      return;
    pending_ = cfg_.sessions;
    for (int s = 0; s < cfg_.sessions; ++s) {
      get_request g;
      g.ref = jobs_[s * cfg_.per_session].ref;
      request(h_, caf::infinite, std::move(g))
        .then(
          [this](std::optional<session>& x) {
            if (x)
              read_back_.push_back(std::move(*x));
            if (--pending_ == 0)
              finish();
          },
          [this](caf::error& e) {
            fail("get: " + system().render(e));
            if (--pending_ == 0)
              finish();
          });
    }
  }

  // 5. Check what was collected, print it, stop.
  void finish() {
    examples::checklist check;
    for (auto& f : failures_)
      std::fprintf(stderr, "async_runner: %s\n", f.c_str());
    check(failures_.empty(),
          std::to_string(jobs_.size()) + " invocations on " + std::to_string(cfg_.sessions)
            + " sessions, no errors");
    check(max_in_flight_ > 1,
          std::to_string(max_in_flight_)
            + " invocations (of different sessions) in flight at once");
    int unserialised = 0;
    for (auto& [sid, jobs] : order_)
      for (std::size_t n = 1; n < jobs.size(); ++n) {
        const job& prev = jobs_[jobs[n - 1]];
        const job& next = jobs_[jobs[n]];
        // The later one began at the earlier one's last version, saw its
        // answer and none of its temp: state.
        unserialised += next.begin_version != prev.end_version
          || next.begin_state.value("answer", "") != prev.answer
          || next.begin_state.contains("temp:draft");
      }
    check(unserialised == 0 && int(order_.size()) == cfg_.sessions,
          std::to_string(cfg_.per_session) + " invocations per session, one after the other");
    int bad_log = int(read_back_.size()) != cfg_.sessions, temp_stored = 0;
    std::map<std::string, int> runs_of_user;
    for (auto& s : read_back_) {
      auto& jobs = order_[s.id];
      bad_log += s.version != std::uint64_t(2 * cfg_.per_session)
        || s.events.size() != std::size_t(2 * cfg_.per_session)
        || jobs.size() != std::size_t(cfg_.per_session)
        || s.state.value("answer", "") != jobs_[jobs.back()].answer;
      for (std::size_t e = 0; e < s.events.size() && e / 2 < jobs.size(); ++e) {
        bad_log += s.events[e].invocation_id != jobs_[jobs[e / 2]].id;
        temp_stored += s.events[e].actions.state_delta.contains("temp:draft");
      }
      temp_stored += s.state.contains("temp:draft");
      runs_of_user[s.user_id] = s.state.value("user:runs", 0);
    }
    check(bad_log == 0,
          "every session: " + std::to_string(2 * cfg_.per_session)
            + " events grouped by invocation in lease order, last answer in state");
    for (auto& j : jobs_) // the reply template rendered the invocation's own temp:draft
      temp_stored += j.answer.rfind("draft of " + j.id + " for user " + j.ref.user_id, 0) != 0;
    check(temp_stored == 0, "temp:draft rendered into each reply, never stored");
    int bad_runs = int(runs_of_user.size()) != cfg_.users;
    for (auto& [user, runs] : runs_of_user) { // user u has sessions u, u+users, ...
      int u = std::stoi(user.substr(1));
      bad_runs += runs != cfg_.per_session * ((cfg_.sessions - 1 - u) / cfg_.users + 1);
    }
    check(bad_runs == 0, "user:runs counts every invocation of each user (atomic modify)");
    *failed_ = check.failed;
    send_exit(h_, caf::exit_reason::user_shutdown);
    quit();
  }

  void fail(std::string what) { failures_.push_back(std::move(what)); }

  engine* eng_;
  engine_actor h_;
  run_config cfg_;
  int* failed_;
  std::vector<job> jobs_;
  std::map<std::string, std::size_t> active_; // session -> running job
  std::map<std::string, std::vector<std::size_t>> order_; // session -> jobs by begin
  std::size_t pending_ = 0, in_flight_ = 0, max_in_flight_ = 0;
  std::vector<std::string> failures_;
  std::vector<session> read_back_;
};

} // namespace

int main(int argc, char** argv) {
  std::string dir;
  bool memory = false;
  run_config cfg{"", 12, 2, 4};
  if (auto stop = examples::parse_args(argc, argv, "async_runner", usage, dir, memory,
                                       {{"--sessions", &cfg.sessions},
                                        {"--per-session", &cfg.per_session},
                                        {"--users", &cfg.users}}))
    return *stop;
  if (cfg.sessions < 2 || cfg.per_session < 2) { // else there is nothing to show
    std::fprintf(stderr, "async_runner: --sessions and --per-session must be at least 2\n%s",
                 usage);
    return 2;
  }
  cfg.users = std::min(cfg.users, cfg.sessions);
  cfg.app = examples::fresh_app_name("runner");

  examples::example_store store("async_runner", dir, memory);
  if (!store.ok())
    return 1;
  options opts = store.opts();
  auto eng = engine::open(opts);
  if (!eng) {
    std::fprintf(stderr, "async_runner: open: %s\n", to_string(eng.err()).c_str());
    return 1;
  }
  int failed = 1; // until the runner reports
  {
    caf::actor_system_config cc;
    add_error_category(cc);
    caf::actor_system sys{cc};
    engine_actor h = spawn_engine_actor(sys, **eng);
    auto r = sys.spawn<runner>(eng->get(), h, cfg, &failed);
    caf::anon_send(r, go_atom::value);
    sys.await_all_actors_done(); // the runner quits after its checks
  }
  if (auto c = (*eng)->close(); !c) {
    std::fprintf(stderr, "async_runner: close: %s\n", to_string(c.err()).c_str());
    failed = 1;
  }
  return examples::report("async_runner", cfg.app, store, failed);
}
