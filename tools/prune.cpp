// SPDX-License-Identifier: Apache-2.0
// agentstate prune: deletes the sessions of a store not updated for a given
// time, through the engine (so each delete is in the change feed and a large
// session's rows are purged in steps).
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "actors/engine_factory.hpp"
#include "agentstate/engine.hpp"
#include "agentstate/json.hpp"
#include "model/ids.hpp"
#include "store/keys.hpp"
#include "store/kv.hpp"
#include "tools/cli.hpp"
#include "tools/commands.hpp"

namespace agentstate::tools {

namespace {

struct prune_args {
  std::string dir;
  std::string older_than;
  std::string app;
  bool dry_run = false;
  bool json = false;
};

/// "90", "90s", "15m", "12h", "7d" as seconds; nullopt for anything else or
/// for a duration that is not positive.
std::optional<double> parse_duration(const std::string& text) {
  if (text.empty())
    return std::nullopt;
  double unit = 1;
  std::string number = text;
  switch (text.back()) {
    case 's': unit = 1; break;
    case 'm': unit = 60; break;
    case 'h': unit = 3600; break;
    case 'd': unit = 86400; break;
    default: number.push_back('s'); break;
  }
  number.pop_back();
  if (number.empty() || number.find_first_not_of("0123456789.") != std::string::npos
      || number.find('.') != number.rfind('.'))
    return std::nullopt;
  double v = std::strtod(number.c_str(), nullptr);
  if (!std::isfinite(v) || v <= 0)
    return std::nullopt;
  return v * unit;
}

/// Calls `fn` with each session (of `app`, or of every app) whose last update
/// is before `cutoff`, while it returns true, from one snapshot of the
/// engine's store: a walk of the update-time index, each app's entries from
/// its oldest, skipping to the next app at the first entry not older than
/// the cutoff. Memory: one entry at a time.
void walk_older(engine& e, double cutoff, const std::string& app,
                const std::function<bool(session_ref)>& fn) {
  auto txn = detail::engine_factory::store_of(e).begin_read();
  std::string from;
  std::string prefix = app.empty() ? std::string() : app + '\0';
  for (;;) {
    std::optional<std::string> next_app;
    bool more = true;
    txn->scan(store::table::by_update, prefix, from, [&](std::string_view k, std::string_view) {
      // app ‖ 0 ‖ ord64(t) ‖ id ‖ 0 ‖ user
      auto nul = k.find('\0');
      if (nul == std::string_view::npos || k.size() < nul + 9)
        return true; // verify names a malformed entry; prune leaves it
      double t = store::read_ordered_double(k.substr(nul + 1, 8));
      if (!(t < cutoff)) {
        next_app = std::string(k.substr(0, nul)) + '\x01';
        return false;
      }
      auto rest = store::split_key(k.substr(nul + 9), 2);
      if (rest.size() == 2)
        more = fn(
          session_ref{std::string(k.substr(0, nul)), std::string(rest[1]), std::string(rest[0])});
      return more;
    });
    if (!more || !next_app || !app.empty())
      return;
    from = std::move(*next_app);
  }
}

int run_prune(const prune_args& a) {
  auto age = parse_duration(a.older_than);
  if (!age)
    return usage_error("prune",
                       "--older-than takes a positive duration: N, Ns, Nm, Nh or Nd, not '"
                         + a.older_than + "'");
  options o;
  o.dir = a.dir;
  o.mode = durability::sync;
  auto opened = engine::open(o);
  if (!opened) {
    std::fprintf(stderr, "prune: %s\n", to_string(opened.err()).c_str());
    return 1;
  }
  auto& e = **opened;
  const double cutoff = model::now_seconds() - *age;
  progress_line prog;
  std::uint64_t deleted = 0, failed = 0;
  std::string first_error;
  for (;;) {
    if (a.dry_run) {
      walk_older(e, cutoff, a.app, [&](session_ref) {
        prog("sessions to delete", ++deleted);
        return true;
      });
      break;
    }
    // Batches of 1,000 from a fresh snapshot each: the deletes remove their
    // sessions from the index, so the next walk starts past them.
    std::vector<session_ref> refs;
    walk_older(e, cutoff, a.app, [&](session_ref r) {
      refs.push_back(std::move(r));
      return refs.size() < 1000;
    });
    if (refs.empty())
      break;
    // 64 deletes in flight.
    std::mutex mtx;
    std::condition_variable cv;
    std::size_t running = 0, failures = 0;
    for (auto& ref : refs) {
      std::unique_lock<std::mutex> lock(mtx);
      cv.wait(lock, [&] { return running < 64; });
      ++running;
      lock.unlock();
      e.delete_session(ref, [&](result<void> r) {
        std::lock_guard<std::mutex> guard(mtx);
        if (!r) {
          ++failures;
          if (first_error.empty())
            first_error = to_string(r.err());
        }
        --running;
        cv.notify_all();
      });
    }
    std::unique_lock<std::mutex> lock(mtx);
    cv.wait(lock, [&] { return running == 0; });
    deleted += refs.size() - failures;
    failed += failures;
    prog("sessions deleted", deleted);
    if (failures) // the same sessions would come back: stop
      break;
  }
  prog.done();
  if (auto r = e.close(); !r) {
    std::fprintf(stderr, "prune: close: %s\n", to_string(r.err()).c_str());
    return 1;
  }
  if (a.json) {
    std::puts(json{{"deleted", deleted},
                   {"failed", failed},
                   {"dry_run", a.dry_run},
                   {"cutoff", cutoff},
                   {"app", a.app.empty() ? json(nullptr) : json(a.app)}}
                .dump()
                .c_str());
  } else {
    std::printf("%s %llu sessions last updated before %.3f%s\n",
                a.dry_run ? "would delete" : "deleted", static_cast<unsigned long long>(deleted),
                cutoff, a.app.empty() ? "" : (" in app '" + a.app + "'").c_str());
  }
  if (failed) {
    std::fprintf(stderr, "prune: %llu deletes failed; first: %s\n",
                 static_cast<unsigned long long>(failed), first_error.c_str());
    return 1;
  }
  return 0;
}

runner define_prune(command_line& cl) {
  auto a = std::make_shared<prune_args>();
  cl.usage = "agentstate prune DIR --older-than DURATION [--app APP] [--dry-run]\n"
             "  [--json]";
  cl.description =
    R"(Deletes every session (of APP, or of every app) whose last update is older
than DURATION (N or Ns seconds, Nm minutes, Nh hours, Nd days) before now. The
deletes go through the engine, opened on DIR with durability sync: each is in
the change feed, and a large session is gone at once and its rows purged in
steps (the engine finishes a purge this run leaves when it next opens the
store). App and user state stay. The store must not be open elsewhere (another
process's engine or serve: exit 1). --dry-run counts the sessions it would
delete and deletes nothing. Progress goes to stderr when it is a terminal.)";
  cl.footer = "Exit 0 done, 1 the store cannot be opened or a delete failed, 2 usage.";
  add_store_dir(cl, a->dir);
  cl.app.add_option("--older-than", a->older_than, "delete sessions not updated for this long")
    ->required();
  cl.app.add_option("--app", a->app, "only this app's sessions");
  cl.app.add_flag("--dry-run", a->dry_run, "count, delete nothing");
  add_json_flag(cl, a->json);
  return [a] { return run_prune(*a); };
}

} // namespace

static const bool registered = register_command(
  {"prune", "delete the sessions of a store not updated for a given time", define_prune});

} // namespace agentstate::tools
