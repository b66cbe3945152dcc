// SPDX-License-Identifier: Apache-2.0
// tests/crash/crash_child.cpp: the process the kill -9 loop (crash_loop.cpp)
// kills. Not a test by itself.
//
//   crash_child DIR sync|nosync|nosync-write-map THREADS WATCHFILE
//
// Opens the LMDB store DIR, makes sure every session of the fixed workload
// exists, then appends forever from THREADS threads (each thread owns some
// sessions and appends to them in turn, blocking calls). Event ids and values
// are deterministic, so the parent can check the store against the acks:
//
//   session (app, user, sid), its n-th event: id "<sid>#<n>", stored at
//   version n, delta {"n": n, "temp:t": n, "user:<sid>.n": n,
//                     "app:<user>.<sid>.n": n, "<sid>.hist": [..]?}
//
// The child re-derives n from the store at start (n = version + 1), so every
// run continues where the last one stopped. Before appending it re-sends the
// last stored event id of each session and checks the engine answers with the
// original version (A6: idempotent retries after a restart).
//
// Before the sessions, it starts the watcher: an engine::watch of every change
// after the cursor of WATCHFILE's last complete record (the file's torn last
// line, if a kill left one, is cut off first). Each change it delivers is
// processed by appending its record (crashload::change_record, one line, one
// write()) to WATCHFILE, in delivery order, so the last complete record names
// the persisted cursor (a kill leaves at most a torn last line); each batch
// is fdatasync()ed before the watch is handed the next one. Without any
// record yet it first processes the log's oldest change (read_changes from
// the beginning) and watches after it, so over all runs the file is meant to
// hold the whole log, in order, each change once. With CRASH_WATCHER_DROP=1
// it skips the record of the third change each run's watcher delivers (a
// broken watcher, for the parent's self-check).
//
// stdout (a pipe to the parent), one line per event, written with one
// write() (atomic: shorter than PIPE_BUF) after the append returned ok:
//   ack APP USER SID N VERSION
// and "ready" once the sessions exist. With CRASH_CHILD_LIE=1 in the
// environment it acks each append *before* making it (a broken engine, to
// show that the parent's checks catch lost acknowledged appends). Exit codes: 0 never (it is killed),
// 2 usage, 3 an engine call failed or answered wrongly (stderr says which).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "agentstate/engine.hpp"
#include "crash/workload.hpp"

using namespace agentstate;

namespace {

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "crash_child: %s\n", what.c_str());
  std::fflush(stderr);
  std::_Exit(3);
}

void say(const std::string& line) {
  auto s = line + "\n";
  std::size_t off = 0;
  while (off < s.size()) {
    auto n = ::write(1, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      std::_Exit(0); // parent gone
    off += static_cast<std::size_t>(n);
  }
}

void write_all(int fd, const std::string& s, const std::string& what) {
  std::size_t off = 0;
  while (off < s.size()) {
    auto n = ::write(fd, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      fail(what + ": write: " + std::strerror(errno));
    off += static_cast<std::size_t>(n);
  }
}

// WATCHFILE opened for appending records. Cuts a torn last line off and
// answers the cursor of the last complete record (empty: no record). Reads
// only the file's tail. Owned by the watch's thread once the watch starts.
struct watcher_file {
  int fd = -1;
  std::string last_cursor;

  explicit watcher_file(const std::string& path) {
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
      fail("open " + path + ": " + std::strerror(errno));
    off_t size = ::lseek(fd, 0, SEEK_END);
    if (size < 0)
      fail("lseek " + path + ": " + std::strerror(errno));
    std::string tail; // the file's bytes [pos, size)
    off_t pos = size, keep = 0;
    while (pos > 0) {
      auto n = std::min<off_t>(4096, pos);
      pos -= n;
      std::string chunk(static_cast<std::size_t>(n), '\0');
      if (::pread(fd, chunk.data(), chunk.size(), pos) != n)
        fail("pread " + path + ": " + std::strerror(errno));
      tail.insert(0, chunk);
      auto last_nl = tail.rfind('\n');
      if (last_nl == std::string::npos)
        continue;
      auto prev_nl = last_nl == 0 ? std::string::npos : tail.rfind('\n', last_nl - 1);
      if (prev_nl == std::string::npos && pos > 0)
        continue; // the last complete line starts further back
      auto begin = prev_nl == std::string::npos ? 0 : prev_nl + 1;
      last_cursor = crashload::record_cursor(tail.substr(begin, last_nl - begin));
      keep = pos + static_cast<off_t>(last_nl) + 1;
      break;
    }
    if (keep != size && ::ftruncate(fd, keep) != 0)
      fail("ftruncate " + path + ": " + std::strerror(errno));
  }

  // Processes one change: its record is in the file on return (one write:
  // it survives the process's kill; a kill inside the write can leave only a
  // torn line, never a record without its '\n').
  void process(const change& c) {
    write_all(fd, crashload::change_record(c) + "\n", "watcher file");
    last_cursor = c.cursor;
  }
  // Makes the records written so far durable against a machine crash too.
  void sync() {
    if (::fdatasync(fd) != 0)
      fail(std::string("watcher file: fdatasync: ") + std::strerror(errno));
  }
};

} // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: crash_child DIR sync|nosync|nosync-write-map THREADS WATCHFILE\n");
    return 2;
  }
  options o;
  o.dir = argv[1];
  o.mode = std::string(argv[2]) == "sync" ? durability::sync : durability::nosync;
  o.write_map = std::string(argv[2]) == "nosync-write-map";
  int threads = std::atoi(argv[3]);
  if (threads < 1)
    threads = 1;
  auto opened = engine::open(o);
  if (!opened)
    fail("open: " + to_string(opened.err()));
  auto& e = **opened;

  // The watcher (see the file comment); its handle lives until the kill.
  watcher_file wf(argv[4]);
  watch_request all;
  all.scope = watch_scope::all;
  if (wf.last_cursor.empty()) {
    auto first = e.read_changes(all, 1);
    if (!first)
      fail("read_changes from the log's start: " + to_string(first.err()));
    for (const auto& c : first->changes)
      wf.process(c);
    wf.sync();
    all.from = first->cursor;
  } else {
    all.from = wf.last_cursor;
  }
  const bool drop = std::getenv("CRASH_WATCHER_DROP") != nullptr;
  std::uint64_t delivered = 0;
  auto watch = e.watch(
    all,
    [&](change_page batch) {
      for (const auto& c : batch.changes)
        if (!(drop && ++delivered == 3))
          wf.process(c);
      if (!batch.changes.empty())
        wf.sync();
    },
    [](const watch_end& end) {
      fail(std::string("watch ended: ") + to_string(end.reason) + " "
           + (end.err ? to_string(*end.err) : std::string()));
    });
  if (!watch)
    fail("watch from " + *all.from + ": " + to_string(watch.err()));

  auto sessions = crashload::all_sessions();
  std::vector<std::uint64_t> next(sessions.size());
  for (std::size_t i = 0; i < sessions.size(); ++i) {
    const auto& ref = sessions[i];
    auto got = e.get_session(get_request{ref, 1, std::nullopt, {}});
    if (!got)
      fail("get_session: " + to_string(got.err()));
    if (!got.value()) {
      create_request c{ref.app_name, ref.user_id, ref.session_id, json::object()};
      auto r = e.create_session(c);
      if (!r && r.code() != errc::already_exists)
        fail("create_session: " + to_string(r.err()));
      next[i] = 1;
      continue;
    }
    auto version = got.value()->version;
    next[i] = version + 1;
    if (version > 0) {
      // A6 after restart: the last stored event again -> its original version.
      auto again =
        e.append_event(append_request{ref, crashload::make_event(ref, version), std::nullopt, {}});
      if (!again)
        fail("re-append " + crashload::event_id(ref, version) + ": " + to_string(again.err()));
      if (again->version != version)
        fail("re-append " + crashload::event_id(ref, version) + " answered version "
             + std::to_string(again->version) + ", stored at " + std::to_string(version));
    }
  }
  say("ready");

  const bool lie = std::getenv("CRASH_CHILD_LIE") != nullptr;
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (;;) {
        for (std::size_t i = static_cast<std::size_t>(t); i < sessions.size();
             i += static_cast<std::size_t>(threads)) {
          const auto& ref = sessions[i];
          auto n = next[i];
          if (lie)
            say("ack " + ref.app_name + " " + ref.user_id + " " + ref.session_id + " "
                + std::to_string(n) + " " + std::to_string(n));
          auto r =
            e.append_event(append_request{ref, crashload::make_event(ref, n), std::nullopt, {}});
          if (!r)
            fail("append " + crashload::event_id(ref, n) + ": " + to_string(r.err()));
          if (r->version != n)
            fail("append " + crashload::event_id(ref, n) + " got version "
                 + std::to_string(r->version));
          if (!lie)
            say("ack " + ref.app_name + " " + ref.user_id + " " + ref.session_id + " "
                + std::to_string(n) + " " + std::to_string(r->version));
          next[i] = n + 1;
        }
      }
    });
  }
  for (auto& w : workers)
    w.join();
  return 0;
}
