// SPDX-License-Identifier: Apache-2.0
// agentstate prune: deletes the sessions of a store not updated for a given
// time through engine::prune (each delete in the change feed, a large
// session's rows purged in steps).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agentstate/engine.hpp"
#include "agentstate/json.hpp"
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
  options o;
  o.dir = a.dir;
  o.mode = durability::sync;
  auto opened = engine::open(o);
  if (!opened) {
    std::fprintf(stderr, "prune: %s\n", to_string(opened.err()).c_str());
    return 1;
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
    std::fprintf(stderr, "prune: close: %s\n", to_string(c.err()).c_str());
    return 1;
  }
  if (!r) {
    std::fprintf(stderr, "prune: %s\n", to_string(r.err()).c_str());
    return 1;
  }
  print_outcome(a, r->sessions, r->failed, r->cutoff, sample_json(r->sample), r->truncated);
  if (r->stopped) {
    std::fprintf(stderr, "prune: stopped: %llu deletes failed; first: %s\n",
                 static_cast<unsigned long long>(r->failed), to_string(*r->stopped).c_str());
    return 1;
  }
  return 0;
}

int run_prune(const prune_args& a) {
  auto age = parse_duration(a.older_than);
  if (!age)
    return usage_error("prune",
                       "--older-than takes a positive duration: N, Ns, Nm, Nh or Nd, not '"
                         + a.older_than + "'");
  return run_local(a, *age);
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
delete and deletes nothing. With --json the output also names the first 100
sessions (app, user, session) under "sessions", with "truncated" true when
there were more. Progress goes to stderr when it is a terminal.)";
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
