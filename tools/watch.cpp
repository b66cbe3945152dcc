// SPDX-License-Identifier: Apache-2.0
// `agentstate watch DIR`: an operator's `tail -f` of a store's change feed.
// Reads the store read-only (safe beside the engine or `serve` that owns
// it), a page at a time in short read transactions, and prints each change
// as one JSON line (docs/protocol.md, read_changes' Change) on stdout.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "agentstate/json.hpp"
#include "agentstate/watch.hpp"
#include "store/change_feed.hpp"
#include "tools/cli.hpp"
#include "tools/commands.hpp"
#include "tools/fault_guard.hpp"

namespace agentstate::tools {

namespace {

struct watch_options {
  std::string dir, app, user, session, key_prefix, from;
  bool include_sessions = false;
  bool once = false;
  unsigned poll_ms = 200;
};

// The feed filter the flags name: the narrowest scope given.
result<watch_request> request_of(const watch_options& o) {
  watch_request r;
  r.app_name = o.app;
  r.user_id = o.user;
  r.session_id = o.session;
  r.include_sessions = o.include_sessions;
  r.key_prefix = o.key_prefix;
  if (!o.session.empty())
    r.scope = watch_scope::session;
  else if (!o.user.empty())
    r.scope = watch_scope::user;
  else if (!o.app.empty())
    r.scope = watch_scope::app;
  else
    r.scope = watch_scope::all;
  if ((!o.user.empty() || !o.session.empty()) && o.app.empty())
    return error{errc::invalid_argument, "--user and --session need --app"};
  if (!o.session.empty() && o.user.empty())
    return error{errc::invalid_argument, "--session needs --user"};
  if (auto ok = store::check_watch_request(r); !ok)
    return std::move(ok).err();
  return r;
}

int run_watch(const watch_options& o) {
  auto req = request_of(o);
  if (!req) {
    std::fprintf(stderr, "watch: %s\n", req.err().message.c_str());
    return 2;
  }
  auto kv = open_readonly(o.dir);
  if (!kv)
    return 1;
  auto fail = [](const error& e) {
    std::fprintf(stderr, "watch: %s\n", to_string(e).c_str());
    if (e.oldest_cursor)
      std::fprintf(stderr, "watch: the oldest cursor the log serves is %s\n",
                   e.oldest_cursor->c_str());
    return 1;
  };
  std::string epoch;
  std::uint64_t after = 0;
  if (auto g = guarded("watch",
                       [&] {
                         auto head = store::read_log_head(*kv);
                         if (!head)
                           throw store::kv_failure{head.code(), head.err().message};
                         epoch = head->epoch;
                         after = head->bounds.last;
                       });
      !g)
    return fail(g.err());
  if (!o.from.empty()) {
    auto seq = store::parse_cursor(o.from, epoch);
    if (!seq)
      return fail(seq.err());
    after = *seq;
  }
  for (;;) {
    result<change_page> page = error{errc::internal, "not read"};
    std::uint64_t end_seq = after;
    if (auto g = guarded(
          "watch",
          [&] { page = store::read_change_page(*kv, *req, after, 256, 65536, epoch, &end_seq); });
        !g)
      page = std::move(g).err();
    if (!page)
      return fail(page.err());
    for (auto& c : page->changes)
      std::printf("%s\n", to_json(c).dump(-1, ' ', false, json::error_handler_t::replace).c_str());
    std::fflush(stdout);
    if (std::ferror(stdout))
      return 1;
    after = end_seq;
    if (page->at_head) {
      if (o.once) {
        std::fprintf(stderr, "watch: at %s\n", page->cursor.c_str());
        return 0;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(o.poll_ms));
    }
  }
}

runner define_watch(command_line& cl) {
  auto o = std::make_shared<watch_options>();
  cl.usage = "agentstate watch DIR [--app A [--user U [--session S]]] [--from CURSOR] [--once]";
  cl.description = "Prints the store's change feed as JSON lines, one committed create, append\n"
                   "or delete per line, in commit order (the objects of read_changes in\n"
                   "docs/protocol.md): every change of the store, or of one app's `app:` keys,\n"
                   "one user's `user:` keys or one session (--include-sessions: every change of\n"
                   "the app's or user's sessions). Starts after the newest change, or after\n"
                   "--from; then polls for new ones, like tail -f. Reads the store read-only:\n"
                   "safe beside the engine or `serve` that owns it.";
  cl.footer = "Exit 0 (--once, at the head), 1 (cannot read the store, a cursor of\n"
              "another store or older than its retention), 2 (usage).";
  cl.app.add_option("DIR", o->dir, "the store directory")->required();
  cl.app.add_option("--app", o->app, "one app");
  cl.app.add_option("--user", o->user, "one user of the app (needs --app)");
  cl.app.add_option("--session", o->session, "one session of the user (needs --user)");
  cl.app.add_flag("--include-sessions", o->include_sessions,
                  "with --app or --user: every change of their sessions too");
  cl.app.add_option("--key-prefix", o->key_prefix,
                    "only keys that start with it (\"user:cart\", \"app:\")");
  cl.app.add_option("--from", o->from, "start after this cursor (from an append, a page, a line)");
  cl.app.add_flag("--once", o->once, "print what is there up to the newest change, then exit");
  cl.app.add_option("--poll-ms", o->poll_ms, "how often to look for new changes (default 200)")
    ->check(CLI::Range(1u, 60000u));
  return [o] { return run_watch(*o); };
}

const bool registered = register_command(
  {"watch", "print a store's change feed as JSON lines (tail -f of commits)", define_watch});

} // namespace

} // namespace agentstate::tools
