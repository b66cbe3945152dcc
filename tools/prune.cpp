// SPDX-License-Identifier: Apache-2.0
// agentstate prune: deletes the sessions of a store not updated for a given
// time through engine::prune (each delete in the change feed, a large
// session's rows purged in steps), on a store it opens or (--address) through
// a running server's `prune` method.
#include <signal.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agentstate/client.hpp"
#include "agentstate/engine.hpp"
#include "agentstate/json.hpp"
#include "tools/cli.hpp"
#include "tools/remote_flags.hpp"
#include "tools/commands.hpp"

namespace agentstate::tools {

namespace {

struct prune_args {
  std::string dir;
  std::string older_than;
  std::string app;
  bool dry_run = false;
  bool json = false;
  // --address: a running server.
  std::string address;
  remote_flags remote;
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

json sample_json(const std::vector<session_ref>& xs) {
  json out = json::array();
  for (const auto& s : xs)
    out.push_back(
      json{{"app_name", s.app_name}, {"user_id", s.user_id}, {"session_id", s.session_id}});
  return out;
}

/// Prints the outcome as text, or one JSON object with --json.
void print_outcome(const prune_args& a, std::uint64_t n, std::uint64_t failed, double cutoff,
                   const json& sample, bool truncated) {
  if (a.json) {
    std::puts(json{{"deleted", n},
                   {"failed", failed},
                   {"dry_run", a.dry_run},
                   {"cutoff", cutoff},
                   {"app", a.app.empty() ? json(nullptr) : json(a.app)},
                   {"sessions", sample},
                   {"truncated", truncated}}
                .dump(-1, ' ', false, json::error_handler_t::replace)
                .c_str());
  } else {
    std::printf("%s %llu sessions last updated before %.3f%s\n",
                a.dry_run ? "would delete" : "deleted", static_cast<unsigned long long>(n), cutoff,
                a.app.empty() ? "" : (" in app '" + a.app + "'").c_str());
  }
}

int run_local(const prune_args& a, double age) {
  if (a.remote.given())
    return usage_error("prune", "--token-file and the --tls options need --address");
  options o;
  o.dir = a.dir;
  o.mode = durability::sync;
  auto opened = engine::open(o);
  if (!opened) {
    say("prune", "%s", to_string(opened.err()).c_str());
    return exit_failed;
  }
  auto& e = **opened;
  progress_line prog;
  prune_request req;
  req.older_than_s = age;
  req.app_name = a.app;
  req.dry_run = a.dry_run;
  const char* what = a.dry_run ? "sessions to delete" : "sessions deleted";
  req.progress = [&prog, what](std::uint64_t n) { prog(what, n); };
  auto r = e.prune(std::move(req));
  prog.done();
  if (auto c = e.close(); !c) {
    say("prune", "close: %s", to_string(c.err()).c_str());
    return exit_failed;
  }
  if (!r) {
    say("prune", "%s", to_string(r.err()).c_str());
    return exit_failed;
  }
  print_outcome(a, r->sessions, r->failed, r->cutoff, sample_json(r->sample), r->truncated);
  if (r->stopped) {
    say("prune", "stopped: %llu deletes failed; first: %s",
        static_cast<unsigned long long>(r->failed), to_string(*r->stopped).c_str());
    return exit_failed;
  }
  return exit_ok;
}

// --address: the server's `prune` method over one connection.
int run_prune_remote(const prune_args& a, double age) {
  if (auto problem = a.remote.problem(); !problem.empty())
    return usage_error("prune", problem);
  auto made = client_options_of(a.remote);
  if (!made) {
    say("prune", "%s", made.err().message.c_str());
    return exit_failed;
  }
  client_options o = std::move(*made);
  o.address = a.address;
  o.connect_timeout = std::chrono::milliseconds(10000);
  ::signal(SIGPIPE, SIG_IGN);
  auto c = rpc_client::connect(o);
  if (!c) {
    say("prune", "cannot reach %s: %s", a.address.c_str(), c.err().message.c_str());
    return exit_failed;
  }
  json params{{"older_than_s", age}};
  if (!a.app.empty())
    params["app_name"] = a.app;
  if (a.dry_run)
    params["dry_run"] = true;
  // No deadline: a long prune answers when it is done (or the connection ends).
  auto reply = (*c)->call("prune", std::move(params));
  if (!reply.value) {
    say("prune", "%s: %s", a.address.c_str(), to_string(reply.value.err()).c_str());
    return exit_failed;
  }
  const json& v = *reply.value;
  const char* count_key = a.dry_run ? "would_delete" : "deleted";
  if (!v.is_object() || !v.contains(count_key) || !v[count_key].is_number_unsigned()) {
    say("prune", "%s answered without '%s'", a.address.c_str(), count_key);
    return exit_failed;
  }
  print_outcome(a, v[count_key].get<std::uint64_t>(), 0, v.value("cutoff", 0.0),
                v.value("sessions", json::array()), v.value("truncated", false));
  return exit_ok;
}

int run_prune(const prune_args& a) {
  auto age = parse_duration(a.older_than);
  if (!age)
    return usage_error("prune",
                       "--older-than takes a positive duration: N, Ns, Nm, Nh or Nd, not '"
                         + a.older_than + "'");
  if (a.dir.empty() == a.address.empty())
    return usage_error("prune", "give a store directory DIR or --address ADDR (one of them)");
  return a.address.empty() ? run_local(a, *age) : run_prune_remote(a, *age);
}

runner define_prune(command_line& cl) {
  auto a = std::make_shared<prune_args>();
  cl.environment.push_back(progress_environment());
  cl.usage = "agentstate prune DIR --older-than DURATION [--app NAME] [--dry-run]\n"
             "  [--json]\n"
             "agentstate prune --address ADDR --older-than DURATION\n"
             "  [--token-file FILE] [--tls [--tls-ca FILE]] [--app NAME] [--dry-run]\n"
             "  [--json]";
  cl.description =
    R"(Deletes every session (of app NAME, or of every app) whose last update is
older than DURATION (N or Ns seconds, Nm minutes, Nh hours, Nd days) before
now. The deletes go through the engine: each is in the change feed, and a
large session is gone at once and its rows purged in steps. App and user
state stay.
--dry-run counts the sessions it would delete and deletes nothing. The
output names the count and, with --json, the first 100 sessions (app, user,
session) under "sessions", with "truncated" true when there were more.

DIR: opens the store with durability sync (the engine finishes a purge this
run leaves when it next opens the store); the store must not be open
elsewhere (another process's engine or serve: exit 1). Progress goes to
stderr when it is a terminal.

--address ADDR: asks a running `agentstate serve --listen` (`unix:PATH`,
`tcp://HOST:PORT` or `HOST:PORT`) through its `prune` method, which deletes in
bounded steps beside its clients' traffic; the time is the server's clock.
The token comes from --token-file or the AGENTSTATE_TOKEN environment
variable and must grant app NAME (without --app: every app, `*`). A cluster
node prunes its own store (with --app, only a node that owns every shard).)";
  cl.exit_status(exit_ok, "done (or, with --dry-run, counted)");
  cl.exit_status(exit_failed,
                 "the store cannot be opened (or is open elsewhere), a delete "
                 "failed, the server cannot be reached or answered an error");
  for (auto& e : remote_environment("--address: "))
    cl.environment.push_back(e);
  cl.app.add_option("DIR", a->dir, "the store directory (or --address)");
  cl.app
    .add_option("--older-than", a->older_than,
                "delete sessions not updated for this long: N or Ns seconds, Nm minutes, Nh "
                "hours, Nd days")
    ->type_name("DURATION")
    ->required();
  cl.app.add_option("--app", a->app, "only this app's sessions")->type_name("NAME");
  cl.app.add_flag("--dry-run", a->dry_run, "count, delete nothing");
  add_json_flag(cl, a->json);
  const std::string server = "server (--address)";
  cl.app.add_option("--address", a->address, "a running server instead of DIR")
    ->type_name("ADDR")
    ->group(server);
  add_remote_flags(cl, a->remote, server, "the server");
  return [a] { return run_prune(*a); };
}

} // namespace

static const bool prune_registered = register_command(
  {"prune", "delete the sessions of a store not updated for a given time", define_prune});

} // namespace agentstate::tools
