// SPDX-License-Identifier: Apache-2.0
// tests/crash/crash_loop.cpp: the kill -9 loop (docs/testing.md, tier
// "crash"). README guarantees 1 (atomic append; after a crash an
// unacknowledged append is wholly present or wholly absent), 2 (versions
// contiguous), 5 (temp: never stored) and 6 (idempotent retry after restart).
//
//   crash_loop CHILD --iterations N [--seed S] [--dir DIR] [--threads T]
//              [--max-seconds X]
//
// Each iteration starts CHILD (crash_child.cpp) on one store that lives across
// all iterations, in sync or (every third iteration on average) nosync mode,
// half of those with options::write_map,
// and SIGKILLs it either after a random delay of 0-50 ms or after a random
// number (1-120) of acknowledged appends. It then reads every ack line the
// child wrote, reopens the store in this process and checks, per session:
//   * the version V never goes back and covers every acknowledged event
//     (V >= last acked n): nothing acknowledged is lost;
//   * V <= last acked n + 1: at most the one append in flight is extra;
//   * the events added since the last check are versions prev+1..V, each with
//     its own id and its own delta (no duplicates, no gaps, no temp: keys);
//   * the session's "n", the user scope's and the app scope's keys all equal V:
//     the last append (possibly the one in flight at the kill) is present in
//     every scope or in none;
//   * verify_store() finds no fault (every iteration for the first 100, then
//     every 20th, and the last).
// And the child's watcher (crash_child.cpp), whose records in WATCHFILE (the
// store's sibling watcher.log) live across all iterations; a torn last line
// is not read yet (the next child cuts it off). After every kill:
//   * the delivered records, in file order over all runs, have strictly
//     increasing cursors (no duplicate, nothing out of order);
//   * they are the log's first changes, each record equal to the change at
//     its position (no gap): the log is read once, incrementally, from its
//     start into this process, and whole again at the end;
//   * delivered + read_changes after the last delivered cursor up to the
//     head == the log;
//   * every session's appends in the log are versions 1..V, each once, with
//     its own event id, after one create: every acknowledged append is in the
//     log exactly once.
// At the end every session's whole log is read back once more.
// Prints "crash_loop: iterations=... acknowledged=... lost=0 ... delivered=..."; exit 0 when
// nothing was lost and every check held, 1 otherwise.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "actors/engine_factory.hpp"
#include "agentstate/engine.hpp"
#include "crash/workload.hpp"
#include "store/verify.hpp"

extern char** environ;

using namespace agentstate;
using clk = std::chrono::steady_clock;

namespace {

struct totals {
  std::uint64_t iterations = 0, acknowledged = 0, lost = 0, unacked_present = 0,
                nosync_iterations = 0, write_map_iterations = 0, killed_before_ready = 0,
                check_failures = 0, stored_events = 0, verified = 0, undelivered_at_end = 0;
};

int failures_printed = 0;
void report(totals& t, const std::string& what) {
  ++t.check_failures;
  if (failures_printed++ < 50)
    std::fprintf(stderr, "crash_loop: FAILED: %s\n", what.c_str());
}

std::string key_of(const session_ref& r) {
  return r.app_name + "/" + r.user_id + "/" + r.session_id;
}

struct child_run {
  std::map<std::string, std::uint64_t> last_acked; // session -> highest acked n
  std::uint64_t acks = 0;
  bool ready = false;
  bool exited_by_itself = false;
  int status = 0;
};

// Starts the child, kills it per plan, collects its ack lines.
child_run run_child(const std::string& child, const std::string& dir, std::string mode, int threads,
                    const std::string& watch_path, int delay_ms, int kill_after_acks,
                    const std::string& err_path) {
  child_run out;
  int pfd[2];
  if (::pipe2(pfd, O_CLOEXEC) != 0) {
    std::perror("pipe2");
    std::exit(1);
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
  posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  std::string th = std::to_string(threads);
  std::vector<char*> argv{const_cast<char*>(child.c_str()),
                          const_cast<char*>(dir.c_str()),
                          mode.data(),
                          th.data(),
                          const_cast<char*>(watch_path.c_str()),
                          nullptr};
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, child.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(pfd[1]);
  if (rc != 0) {
    std::fprintf(stderr, "crash_loop: cannot start %s: %s\n", child.c_str(), std::strerror(rc));
    std::exit(1);
  }
  std::string buf;
  auto consume = [&] {
    std::size_t start = 0;
    for (auto nl = buf.find('\n'); nl != std::string::npos; nl = buf.find('\n', start)) {
      std::string line = buf.substr(start, nl - start);
      start = nl + 1;
      if (line == "ready") {
        out.ready = true;
        continue;
      }
      std::istringstream in(line);
      std::string tag, app, user, sid;
      std::uint64_t n = 0, version = 0;
      if (in >> tag >> app >> user >> sid >> n >> version && tag == "ack") {
        auto& last = out.last_acked[app + "/" + user + "/" + sid];
        last = std::max(last, n);
        ++out.acks;
      }
    }
    buf.erase(0, start);
  };
  const auto start = clk::now();
  const auto hard_deadline = start + std::chrono::seconds(20);
  const auto delay_deadline = start + std::chrono::milliseconds(delay_ms);
  bool killed = false, eof = false;
  char chunk[8192];
  while (!eof) {
    auto now = clk::now();
    if (!killed) {
      bool due = kill_after_acks > 0
        ? (out.acks >= static_cast<std::uint64_t>(kill_after_acks) || now >= hard_deadline)
        : now >= delay_deadline;
      if (due) {
        ::kill(pid, SIGKILL);
        killed = true;
      }
    }
    int timeout = 100;
    if (!killed && kill_after_acks <= 0)
      timeout = static_cast<int>(std::max<long>(
        0, std::chrono::duration_cast<std::chrono::milliseconds>(delay_deadline - now).count()));
    pollfd p{pfd[0], POLLIN, 0};
    int pr = ::poll(&p, 1, timeout);
    if (pr < 0 && errno == EINTR)
      continue;
    if (pr > 0) {
      auto n = ::read(pfd[0], chunk, sizeof chunk);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0) {
        eof = true;
        break;
      }
      buf.append(chunk, static_cast<std::size_t>(n));
      consume();
    }
  }
  ::close(pfd[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  out.status = status;
  out.exited_by_itself = !(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  return out;
}

struct session_check {
  std::uint64_t version = 0; // last checked version
};

// Checks events (from, to] of one session and its scopes; returns V.
std::uint64_t check_session(engine& e, const session_ref& ref, std::uint64_t prev_v,
                            std::uint64_t acked, totals& t, bool whole_log) {
  const auto name = key_of(ref);
  auto floor_v = std::max(prev_v, acked);
  std::int64_t window = whole_log ? -1 : static_cast<std::int64_t>(floor_v - prev_v + 2);
  get_request req{ref, std::nullopt, std::nullopt, {}};
  if (window >= 0)
    req.num_recent_events = window;
  auto got = e.get_session(req);
  if (!got) {
    report(t, name + ": get_session: " + to_string(got.err()));
    return prev_v;
  }
  if (!got.value()) {
    if (floor_v > 0)
      report(t, name + ": session missing, " + std::to_string(floor_v) + " events acknowledged");
    t.lost += floor_v;
    return 0;
  }
  const auto& s = *got.value();
  const auto v = s.version;
  if (v < floor_v) {
    report(t,
           name + ": version " + std::to_string(v) + " < acknowledged " + std::to_string(floor_v)
             + " (prev check " + std::to_string(prev_v) + ")");
    t.lost += floor_v - v;
  }
  if (v > floor_v + 1)
    report(t,
           name + ": version " + std::to_string(v) + " > acknowledged + 1 ("
             + std::to_string(floor_v) + ")");
  if (v > floor_v)
    ++t.unacked_present;
  // The returned window ends at version v.
  const auto count = s.events.size();
  if (count > v) {
    report(t, name + ": " + std::to_string(count) + " events for version " + std::to_string(v));
    return v;
  }
  if (whole_log && count != v)
    report(t,
           name + ": whole log has " + std::to_string(count) + " events, version "
             + std::to_string(v));
  for (std::size_t i = 0; i < count; ++i) {
    std::uint64_t at = v - count + 1 + i;
    const auto& ev = s.events[i];
    const auto want = crashload::event_id(ref, at);
    if (ev.id != want)
      report(t,
             name + ": version " + std::to_string(at) + " holds event '" + ev.id + "', expected '"
               + want + "'");
    const auto& d = ev.actions.state_delta;
    if (!d.is_object() || d.value("n", json()) != json(at)
        || d.value("user:" + crashload::user_key(ref), json()) != json(at)
        || d.value("app:" + crashload::app_key(ref), json()) != json(at))
      report(t, name + ": event at version " + std::to_string(at) + " has delta " + d.dump());
    if (d.contains("temp:t"))
      report(t, name + ": a temp: key was stored in event " + ev.id);
  }
  if (whole_log)
    t.stored_events += count;
  // Atomicity across scopes: the session's, user's and app's key all name
  // the last stored event (or none exists and none is set).
  json want = v == 0 ? json() : json(v);
  json sess_n = s.state.value("n", json());
  json user_n = s.state.value("user:" + crashload::user_key(ref), json());
  json app_n = s.state.value("app:" + crashload::app_key(ref), json());
  if (sess_n != want || user_n != want || app_n != want)
    report(t,
           name + ": version " + std::to_string(v) + " but state n=" + sess_n.dump()
             + " user=" + user_n.dump() + " app=" + app_n.dump());
  if (s.state.contains("temp:t"))
    report(t, name + ": temp: key in state after reopen");
  // The scope reads agree with the merged view.
  auto us = e.get_user_state(ref.app_name, ref.user_id);
  auto as = e.get_app_state(ref.app_name);
  if (!us || !as)
    report(t, name + ": scope read failed");
  else if (us->value(crashload::user_key(ref), json()) != want
           || as->value(crashload::app_key(ref), json()) != want)
    report(t, name + ": scope reads disagree with version " + std::to_string(v));
  return v;
}

// The watcher's side of the checks (file comment). Keeps the log as read so
// far (one record per change) and the delivered records checked so far, so
// each iteration costs the new changes plus the watcher's lag.
struct watch_check {
  std::string path; // WATCHFILE
  std::vector<std::string> log; // the log's changes as records, from its start
  std::optional<std::string> log_cursor; // where `log` stops (none: not read yet)
  std::map<std::string, std::uint64_t> logged_version; // session -> last append version
  std::map<std::string, bool> created;
  std::uint64_t delivered = 0; // records checked: log[0..delivered) delivered
  std::string last_delivered; // the cursor of record delivered - 1
  off_t offset = 0; // file bytes of the checked records

  // Reads the log after `from` (none: its start) up to the head, as records.
  static bool read_log(engine& e, std::optional<std::string> from, std::vector<change>& out,
                       std::string& end_cursor, totals& t, const std::string& what) {
    watch_request all;
    all.scope = watch_scope::all;
    all.from = std::move(from);
    for (;;) {
      auto p = e.read_changes(all, 10000);
      if (!p) {
        report(t,
               "watcher: " + what + ": read_changes after "
                 + (all.from ? *all.from : std::string("the start")) + ": " + to_string(p.err()));
        return false;
      }
      for (auto& c : p->changes)
        out.push_back(std::move(c));
      end_cursor = p->cursor;
      all.from = p->cursor;
      if (p->at_head)
        return true;
    }
  }

  static std::uint64_t seq_of(const std::string& cursor) {
    auto dash = cursor.rfind('-');
    if (dash == std::string::npos)
      return 0;
    return std::strtoull(cursor.c_str() + dash + 1, nullptr, 10);
  }
  static std::string epoch_of(const std::string& cursor) {
    auto dash = cursor.rfind('-');
    return dash == std::string::npos ? cursor : cursor.substr(0, dash);
  }

  // Extends `log` with the changes committed since the last call and checks
  // each session's part of it: one create, then appends 1, 2, ... each with
  // its own event id.
  void extend_log(engine& e, totals& t, const std::string& when) {
    std::vector<change> fresh;
    std::string end;
    if (!read_log(e, log_cursor, fresh, end, t, when))
      return;
    log_cursor = end;
    for (const auto& c : fresh) {
      auto rec = crashload::change_record(c);
      log.push_back(rec);
      const session_ref ref{c.app_name, c.user_id, c.session_id};
      const auto k = key_of(ref);
      if (c.kind == change_kind::create) {
        if (created[k] || c.version != 0)
          report(t,
                 "watcher: " + when + ": log change '" + rec + "': a second create or version "
                   + std::to_string(c.version));
        created[k] = true;
      } else if (c.kind == change_kind::append) {
        auto& v = logged_version[k];
        if (!created[k] || c.version != v + 1 || !c.ev
            || c.ev->id != crashload::event_id(ref, c.version))
          report(t,
                 "watcher: " + when + ": log change '" + rec + "' after version "
                   + std::to_string(v) + (created[k] ? "" : " (no create before it)")
                   + ": not the session's next append");
        v = c.version;
      } else {
        report(t, "watcher: " + when + ": log change '" + rec + "': the workload deletes nothing");
      }
    }
  }

  // Checks the records the watcher added to the file since the last call.
  void check_delivered(totals& t, const std::string& when) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      if (errno != ENOENT)
        report(t, "watcher: " + when + ": open " + path + ": " + std::strerror(errno));
      return; // the first child died before creating it
    }
    std::string text;
    char chunk[65536];
    for (off_t at = offset;;) {
      auto n = ::pread(fd, chunk, sizeof chunk, at);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        break;
      text.append(chunk, static_cast<std::size_t>(n));
      at += n;
    }
    ::close(fd);
    // Only complete lines: a torn last record (a kill inside its write) was
    // never processed; the next child cuts it off.
    std::size_t start = 0;
    for (auto nl = text.find('\n'); nl != std::string::npos; nl = text.find('\n', start)) {
      std::string rec = text.substr(start, nl - start);
      offset += static_cast<off_t>(nl + 1 - start);
      start = nl + 1;
      const auto cur = crashload::record_cursor(rec);
      const auto at = "delivered record " + std::to_string(delivered + 1) + " (cursor " + cur + ")";
      if (!last_delivered.empty()
          && (epoch_of(cur) != epoch_of(last_delivered) || seq_of(cur) <= seq_of(last_delivered))) {
        report(t,
               "watcher: " + when + ": " + at + " is not after the previous delivered cursor "
                 + last_delivered + " (a duplicate or out of order)");
        return;
      }
      if (delivered >= log.size()) {
        report(t,
               "watcher: " + when + ": " + at + " is past the log's head ("
                 + std::to_string(log.size()) + " changes)");
        return;
      }
      if (rec != log[delivered]) {
        report(t,
               "watcher: " + when + ": " + at + " is '" + rec + "', but the log's change "
                 + std::to_string(delivered + 1) + " is '" + log[delivered]
                 + "' (a change skipped or altered)");
        return;
      }
      last_delivered = cur;
      ++delivered;
    }
  }

  // delivered + read_changes after the last delivered cursor == the log.
  void check_rest(engine& e, totals& t, const std::string& when) {
    std::vector<change> rest;
    std::string end;
    std::optional<std::string> from;
    if (!last_delivered.empty())
      from = last_delivered;
    if (!read_log(e, from, rest, end, t, when))
      return;
    if (delivered + rest.size() != log.size()) {
      report(t,
             "watcher: " + when + ": " + std::to_string(delivered) + " delivered + "
               + std::to_string(rest.size()) + " read after cursor "
               + (from ? *from : std::string("(start)")) + " != " + std::to_string(log.size())
               + " changes in the log");
      return;
    }
    for (std::size_t i = 0; i < rest.size(); ++i) {
      auto rec = crashload::change_record(rest[i]);
      if (rec != log[delivered + i]) {
        report(t,
               "watcher: " + when + ": after cursor " + (from ? *from : std::string("(start)"))
                 + " read_changes gives '" + rec + "' where the log has '" + log[delivered + i]
                 + "'");
        return;
      }
    }
    t.undelivered_at_end = rest.size();
  }

  // The whole log read again from its start equals the log read so far.
  void check_whole(engine& e, totals& t) {
    std::vector<change> whole;
    std::string end;
    if (!read_log(e, std::nullopt, whole, end, t, "final"))
      return;
    if (whole.size() != log.size())
      report(t,
             "watcher: final: the log read from its start has " + std::to_string(whole.size())
               + " changes, read incrementally " + std::to_string(log.size()));
    for (std::size_t i = 0; i < std::min(whole.size(), log.size()); ++i)
      if (crashload::change_record(whole[i]) != log[i]) {
        report(t,
               "watcher: final: change at cursor " + whole[i].cursor + " differs from '" + log[i]
                 + "'");
        break;
      }
  }

  // Every session's log has exactly its stored versions 1..V (so each
  // acknowledged append, V >= acked, is in it once).
  void check_sessions(const std::vector<session_ref>& sessions,
                      std::map<std::string, std::uint64_t>& checked, totals& t,
                      const std::string& when) {
    for (const auto& ref : sessions) {
      const auto k = key_of(ref);
      if (logged_version[k] != checked[k])
        report(t,
               "watcher: " + when + ": " + k + " is at version " + std::to_string(checked[k])
                 + " but its appends in the log end at version "
                 + std::to_string(logged_version[k]));
    }
  }
};

} // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: crash_loop CHILD --iterations N [--seed S] [--dir DIR] "
                 "[--threads T] [--max-seconds X]\n");
    return 2;
  }
  std::string child = argv[1];
  std::uint64_t iterations = 100, seed = 0;
  int threads = 4;
  double max_seconds = 0;
  std::string dir;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--iterations")
      iterations = std::stoull(v);
    else if (a == "--seed")
      seed = std::stoull(v);
    else if (a == "--dir")
      dir = v;
    else if (a == "--threads")
      threads = std::stoi(v);
    else if (a == "--max-seconds")
      max_seconds = std::stod(v);
    else {
      std::fprintf(stderr, "crash_loop: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (seed == 0)
    seed = std::random_device{}();
  bool own_dir = dir.empty();
  if (own_dir) {
    char tmpl[] = "/tmp/agentstate-crash-XXXXXX";
    if (!::mkdtemp(tmpl)) {
      std::perror("mkdtemp");
      return 1;
    }
    dir = tmpl;
  }
  const std::string store = dir + "/store";
  const std::string err_path = dir + "/child-stderr.txt";
  watch_check wc;
  wc.path = dir + "/watcher.log";
  std::printf("crash_loop: seed=%llu store=%s iterations=%llu\n",
              static_cast<unsigned long long>(seed), store.c_str(),
              static_cast<unsigned long long>(iterations));
  std::fflush(stdout);
  std::mt19937_64 rng(seed);
  totals t;
  auto sessions = crashload::all_sessions();
  std::map<std::string, std::uint64_t> checked; // session -> version at last check
  const auto t0 = clk::now();
  for (std::uint64_t it = 0; it < iterations; ++it) {
    if (max_seconds > 0 && std::chrono::duration<double>(clk::now() - t0).count() > max_seconds) {
      std::printf("crash_loop: stopping after %llu iterations (--max-seconds)\n",
                  static_cast<unsigned long long>(it));
      break;
    }
    bool sync = rng() % 3 != 0;
    bool write_map = !sync && rng() % 2 == 0;
    bool by_acks = rng() % 2 == 0;
    int delay_ms = static_cast<int>(rng() % 51);
    int kill_after = by_acks ? 1 + static_cast<int>(rng() % 120) : 0;
    auto run = run_child(child, store,
                         sync          ? "sync"
                           : write_map ? "nosync-write-map"
                                       : "nosync",
                         threads, wc.path, delay_ms, kill_after, err_path);
    ++t.iterations;
    if (!sync)
      ++t.nosync_iterations;
    if (write_map)
      ++t.write_map_iterations;
    if (!run.ready)
      ++t.killed_before_ready;
    if (run.exited_by_itself) {
      report(t,
             "iteration " + std::to_string(it) + ": child was not killed but ended with status "
               + std::to_string(run.status) + " (see " + err_path + ")");
      break;
    }
    t.acknowledged += run.acks;

    options o;
    o.dir = store;
    o.mode = durability::nosync;
    auto opened = engine::open(o);
    if (!opened) {
      report(t, "iteration " + std::to_string(it) + ": reopen failed: " + to_string(opened.err()));
      break;
    }
    auto& e = **opened;
    bool last = it + 1 == iterations;
    for (const auto& ref : sessions) {
      auto k = key_of(ref);
      auto acked = run.last_acked.count(k) ? run.last_acked[k] : 0;
      checked[k] = check_session(e, ref, checked[k], acked, t, last);
    }
    const auto when = "iteration " + std::to_string(it);
    wc.extend_log(e, t, when);
    wc.check_delivered(t, when);
    wc.check_rest(e, t, when);
    wc.check_sessions(sessions, checked, t, when);
    if (last)
      wc.check_whole(e, t);
    // verify_store reads the whole store (O(events)): every iteration for
    // the first 100, then every 20th and the last, so 2,000 iterations on an
    // ever-growing store stay linear. The per-session checks run every time.
    if (it < 100 || it % 20 == 0 || last) {
      ++t.verified;
      auto txn = detail::engine_factory::store_of(e).begin_read();
      auto rep = store::verify_store(*txn);
      if (!rep.ok())
        report(t,
               "iteration " + std::to_string(it) + ": verify_store: " + std::to_string(rep.faults)
                 + " faults, first: "
                 + (rep.messages.empty() ? std::string("?") : rep.messages.front()));
    }
    if (auto r = e.close(); !r)
      report(t, "close: " + to_string(r.err()));
    opened.value().reset();
    if (t.check_failures > 0)
      break;
  }
  // A final whole-log pass when the loop ended early.
  if (t.stored_events == 0 && t.check_failures == 0) {
    options o;
    o.dir = store;
    auto opened = engine::open(o);
    if (opened) {
      for (const auto& ref : sessions) {
        auto k = key_of(ref);
        check_session(**opened, ref, checked[k], 0, t, true);
      }
      wc.check_whole(**opened, t);
    }
  }
  double secs = std::chrono::duration<double>(clk::now() - t0).count();
  std::printf("crash_loop: iterations=%llu acknowledged=%llu lost=%llu unacked_present=%llu "
              "stored_events=%llu nosync_iterations=%llu write_map_iterations=%llu "
              "killed_before_ready=%llu "
              "verify_runs=%llu delivered=%llu logged_changes=%llu undelivered_at_end=%llu "
              "check_failures=%llu seconds=%.1f\n",
              (unsigned long long)t.iterations, (unsigned long long)t.acknowledged,
              (unsigned long long)t.lost, (unsigned long long)t.unacked_present,
              (unsigned long long)t.stored_events, (unsigned long long)t.nosync_iterations,
              (unsigned long long)t.write_map_iterations, (unsigned long long)t.killed_before_ready,
              (unsigned long long)t.verified, (unsigned long long)wc.delivered,
              (unsigned long long)wc.log.size(), (unsigned long long)t.undelivered_at_end,
              (unsigned long long)t.check_failures, secs);
  bool ok = t.lost == 0 && t.check_failures == 0;
  // A failing self-check run (CRASH_CHILD_LIE, CRASH_WATCHER_DROP) is
  // expected: do not keep it.
  const bool selfcheck =
    std::getenv("CRASH_CHILD_LIE") != nullptr || std::getenv("CRASH_WATCHER_DROP") != nullptr;
  if ((ok || selfcheck) && own_dir) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  } else if (!ok) {
    std::printf("crash_loop: store kept at %s\n", store.c_str());
  }
  return ok ? 0 : 1;
}
