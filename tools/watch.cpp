// SPDX-License-Identifier: Apache-2.0
// `agentstate watch DIR|ADDR`: an operator's `tail -f` of a store's change
// feed. DIR: reads the store read-only (safe beside the engine or `serve` that
// owns it), a page at a time in short read transactions. ADDR: a client of a
// running `serve` (tools/watch_remote.cpp). Either way each change is one JSON
// line (docs/protocol.md, read_changes' Change) on stdout, the same bytes.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "agentstate/json.hpp"
#include "agentstate/watch.hpp"
#include "store/change_feed.hpp"
#include "store/change_log.hpp"
#include "tools/cli.hpp"
#include "tools/remote_flags.hpp"
#include "tools/commands.hpp"
#include "tools/fault_guard.hpp"
#include "tools/watch_remote.hpp"

namespace agentstate::tools {

namespace {

struct watch_options {
  std::string dir, key_prefix, from;
  scope_filter scope;
  bool include_sessions = false;
  bool once = false;
  bool from_start = false;
  unsigned poll_ms = 200;
  // The server form only.
  remote_flags remote;
  cli_option* poll_opt = nullptr;
};

const char* scope_name(watch_scope s) {
  switch (s) {
    case watch_scope::session: return "session";
    case watch_scope::user: return "user";
    case watch_scope::app: return "app";
    case watch_scope::all: break;
  }
  return "all";
}

// The params of watch/read_changes for `r` (without from and limit).
json filter_of(const watch_request& r) {
  json p{{"scope", scope_name(r.scope)}};
  if (!r.app_name.empty())
    p["app_name"] = r.app_name;
  if (!r.user_id.empty())
    p["user_id"] = r.user_id;
  if (!r.session_id.empty())
    p["session_id"] = r.session_id;
  if (r.include_sessions)
    p["include_sessions"] = true;
  if (!r.key_prefix.empty())
    p["key_prefix"] = r.key_prefix;
  return p;
}

int run_watch_remote(const watch_options& o, const server::listen_spec& at,
                     const watch_request& req) {
  if (o.poll_opt && o.poll_opt->count() > 0)
    return usage_error("watch", "--poll-ms is for a store directory, not a server");
  if (auto problem = o.remote.problem(); !problem.empty())
    return usage_error("watch", problem);
  auto made = client_options_of(o.remote);
  if (!made) {
    say("watch", "%s", made.err().message.c_str());
    return watch_unreachable;
  }
  remote_watch w;
  w.at = at;
  w.filter = filter_of(req);
  w.from = o.from;
  w.from_start = o.from_start;
  w.once = o.once;
  w.tls_ca = made->tls_ca;
  w.tls_cert = made->tls_cert;
  w.tls_key = made->tls_key;
  w.tls = made->tls;
  w.token = made->token;
  if (w.tls && at.type == server::listen_spec::kind::unix_socket)
    return usage_error("watch", "TLS is for TCP servers, not unix:PATH");
  return run_remote_watch(w);
}

// The feed filter the flags name: the narrowest scope given.
result<watch_request> request_of(const watch_options& o) {
  watch_request r;
  r.app_name = o.scope.app;
  r.user_id = o.scope.user;
  r.session_id = o.scope.session;
  r.include_sessions = o.include_sessions;
  r.key_prefix = o.key_prefix;
  if (!r.session_id.empty())
    r.scope = watch_scope::session;
  else if (!r.user_id.empty())
    r.scope = watch_scope::user;
  else if (!r.app_name.empty())
    r.scope = watch_scope::app;
  else
    r.scope = watch_scope::all;
  if (auto ok = store::check_watch_request(r); !ok)
    return std::move(ok).err();
  return r;
}

int run_watch(const watch_options& o) {
  if (auto problem = o.scope.problem(); !problem.empty())
    return usage_error("watch", problem);
  if (o.from_start && !o.from.empty())
    return usage_error("watch", "--from and --from-start exclude each other");
  auto req = request_of(o);
  if (!req)
    return usage_error("watch", req.err().message);
  if (auto at = server_address(o.dir))
    return run_watch_remote(o, *at, *req);
  if (o.remote.given())
    return usage_error("watch",
                       "--token-file and the --tls options need a server address, not "
                       "a store directory");
  auto kv = open_readonly(o.dir, "watch");
  if (!kv)
    return watch_unreachable;
  auto fail = [](const error& e) {
    if (e.oldest_cursor)
      say("watch", "%s; the oldest cursor the log serves is %s", to_string(e).c_str(),
          e.oldest_cursor->c_str());
    else
      say("watch", "%s", to_string(e).c_str());
    return watch_unreachable;
  };
  std::string epoch;
  std::uint64_t after = 0;
  if (auto g = guarded("watch",
                       [&] {
                         auto head = store::read_log_head(*kv);
                         if (!head)
                           throw store::kv_failure{head.code(), head.err().message};
                         epoch = head->epoch;
                         const auto& b = head->bounds;
                         // --from-start: just before the oldest change kept.
                         after = o.from_start && b.first != 0 ? b.first - 1 : b.last;
                       });
      !g)
    return fail(g.err());
  if (!o.from.empty()) {
    auto seq = store::parse_cursor(o.from, epoch);
    if (!seq)
      return fail(seq.err());
    after = *seq;
  }
  // SIGINT/SIGTERM end the watch between pages: exit 0 naming the cursor printed up to.
  if (!install_stop_handlers()) {
    say("watch", "cannot install the signal handlers");
    return watch_unreachable;
  }
  std::string cursor = store::format_cursor(epoch, after);
  auto stopped = [&] {
    say("watch", "stopped at %s", cursor.c_str());
    return 0;
  };
  for (;;) {
    if (wait_stop(0))
      return stopped();
    result<change_page> page = error{errc::internal, "not read"};
    std::uint64_t end_seq = after;
    if (auto g = guarded(
          "watch", [&] { page = store::read_change_page(*kv, *req, after, {}, epoch, &end_seq); });
        !g)
      page = std::move(g).err();
    if (!page)
      return fail(page.err());
    for (auto& c : page->changes)
      std::printf("%s\n", to_json(c).dump(-1, ' ', false, json::error_handler_t::replace).c_str());
    std::fflush(stdout);
    if (std::ferror(stdout)) {
      say("watch", "cannot write to standard output");
      return watch_unreachable;
    }
    after = end_seq;
    cursor = page->cursor;
    if (page->at_head) {
      if (o.once) {
        say("watch", "at %s", page->cursor.c_str());
        return 0;
      }
      if (wait_stop(o.poll_ms))
        return stopped();
    }
  }
}

runner define_watch(command_line& cl) {
  auto o = std::make_shared<watch_options>();
  cl.usage = "agentstate watch DIR [--app NAME [--user ID [--session ID]]]\n"
             "  [--from CURSOR | --from-start] [--once]\n"
             "agentstate watch ADDR [--token-file FILE] [--tls [--tls-ca FILE]]\n"
             "  [same filters]";
  cl.description = R"(Prints the store's change feed as JSON lines, one committed change (create,
append, delete, delete_user, delete_app) per line, in commit order (the
objects of read_changes in docs/protocol.md): every change of the store, or of
one app's `app:` keys, one user's `user:` keys or one session
(--include-sessions: every change of the app's or user's sessions). Starts
after the newest change, after --from, or (--from-start) at the oldest change
the store's change log keeps; then waits for new ones, like tail -f.

DIR: reads the store read-only, polling: safe beside the engine or `serve`
that owns it. ADDR: a running `agentstate serve --listen`, as `unix:PATH`,
`tcp://HOST:PORT` or `HOST:PORT` (a bare HOST:PORT names a server unless a
file or directory of that name exists; write ./NAME for such a directory);
the feed comes from its `watch` (--once: `read_changes` pages), the lines
are the same as the DIR form's. The token comes from --token-file or the
AGENTSTATE_TOKEN environment variable and is never printed. SIGINT or
SIGTERM unwatches and exits 0, naming the last cursor on stderr.)";
  cl.exit_status(watch_ok,
                 "--once reached the newest change, or SIGINT/SIGTERM stopped the "
                 "watch (stderr names the cursor)");
  cl.exit_status(watch_unreachable,
                 "the store cannot be read, or the cursor is of another store or older than "
                 "its retention; the server cannot be reached, TLS failed, or the token file "
                 "cannot be read");
  cl.exit_status(watch_refused,
                 "the server answered an error: unauthenticated, "
                 "permission_denied, cursor_expired (with the oldest cursor it "
                 "serves), a bad cursor");
  cl.exit_status(watch_ended,
                 "the server ended the watch (stderr names the reason and the "
                 "--from to resume with)");
  cl.exit_status(watch_lost,
                 "the connection was lost (stderr names the cursor printed up to, "
                 "to resume with --from)");
  cl.environment = remote_environment("ADDR: ");
  cl.app.add_option("DIR|ADDR", o->dir, "the store directory, or a server's address")->required();
  add_scope_filter(cl, o->scope, "one");
  cl.app.add_flag("--include-sessions", o->include_sessions,
                  "with --app or --user: every change of their sessions too");
  cl.app
    .add_option("--key-prefix", o->key_prefix,
                "only keys that start with PREFIX (\"user:cart\", \"app:\")")
    ->type_name("PREFIX");
  cl.app
    .add_option("--from", o->from,
                "start after this cursor (from an append, a page, a line, an exit message)")
    ->type_name("CURSOR");
  cl.app.add_flag("--from-start", o->from_start,
                  "start at the oldest change the change log keeps (a replay)");
  cl.app.add_flag("--once", o->once, "print what is there up to the newest change, then exit");
  o->poll_opt = cl.app
                  .add_option("--poll-ms", o->poll_ms,
                              "DIR: how often to look for new changes, in milliseconds (1..60000, "
                              "default 200)")
                  ->range(1, 60000);
  const std::string server = "server (ADDR)";
  add_remote_flags(cl, o->remote, server, "the server");
  return [o] { return run_watch(*o); };
}

const bool watch_registered = register_command(
  {"watch", "print a store's or a server's change feed as JSON lines", define_watch});

} // namespace

} // namespace agentstate::tools
