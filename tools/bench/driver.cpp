// SPDX-License-Identifier: Apache-2.0
// tools/bench/driver.cpp: the `agentstate bench` command: its flags and
// usage, and the run of the chosen workloads (workloads.hpp), one JSON line
// each on stdout.
//
// Exit codes: 0 every workload ran and every correctness check held (missed
// performance targets are reported, not failures); 1 an engine call failed or
// a correctness check failed; 2 bad usage.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <iostream>
#include <optional>
#include <string>

#include "tools/bench/peer.hpp"
#include "tools/bench/temp_store.hpp"
#include "tools/bench/via_workloads.hpp"
#include "tools/bench/workloads.hpp"
#include "tools/cli.hpp"
#include "tools/commands.hpp"

namespace agentstate::tools::bench {

namespace {

const char* bench_description =
  R"(Runs a workload in-process against a fresh store in a temp directory under
DIR (default $TMPDIR or /tmp; removed afterwards, also on SIGINT/SIGTERM)
and prints one JSON object per workload on one line of stdout. Progress of
long phases goes to stderr when it is a terminal.)";

const char* bench_footer =
  "Workloads (sizes at --scale 1; the scaled quantity is marked *):\n"
  "  a  one session, 20,000* sequential appends, each awaited (blocking API);\n"
  "     then as many blocking get_app_state calls, the engine's bare round\n"
  "     trip (host -> actor -> host), reported under \"round_trip\"\n"
  "  b  1,000* sessions over 100 users, 20 events each, 64 appends in flight\n"
  "     (async API: 64 callback chains); also the same with 64 threads on the\n"
  "     blocking API, reported under \"blocking\"\n"
  "  c  one session of 10,000* events; get_session full (200 reads) and with\n"
  "     num_recent_events=10 (1,000 reads)\n"
  "  d  1,000* sessions x 100 events; RSS growth over the pre-run baseline\n"
  "  e  1,000,000* sessions of one event each (256 in flight, idle_timeout 1 s),\n"
  "     10,000* random full reads, peak RSS, close and reopen time\n"
  "  f  100,000* sessions in one app; list_sessions first page and a deep page\n"
  "     (90% of the way through) by token, page_size 100, 300 reads each\n"
  "  g  100* sessions of 10 users, 50 events each, all writing one user: key\n"
  "     per user and one app: key; checks the final values are the last\n"
  "     acknowledged writes (\"correct\")\n"
  "  h  the change feed: 5,000* appends awaited one at a time under a watch of\n"
  "     everything (p50_us: call to callback, beside ack_p50_us);\n"
  "     workload b's appends with 0 and with 100 session watches\n"
  "     (b_ratio_100_watches); catch-up reads of the log (changes/s)\n"
  "  i  a session's past: sessions of 1,000* and 10,000* events (five per\n"
  "     invocation); 30 rewind_plan and rewind_session calls on each (back to\n"
  "     the first invocation of its second half), and 30 get_session\n"
  "     as_of_version half way (all its events; num_recent_events=10)\n"
  "  j  a session of 1,000,000* events, then 1,000 other sessions x 20 appends\n"
  "     (64 in flight) before and while it is deleted and purged: their ack\n"
  "     p99 in both\n"
  "  k  a cluster's overhead (only when named; needs etcd on PATH): b's\n"
  "     appends (1,000* sessions x 20, 64 chains) through the C++ client\n"
  "     against one serve (one_node), three serve --cluster nodes with their\n"
  "     own etcd, all through node 1 which forwards (forwarded), and each\n"
  "     session sent to its shard's owner (smart); ratio_to_one_node and\n"
  "     forward_hop_p50_us. Target: forwarded >= 0.6, smart >= 0.8, hop <= 200\n"
  "\n"
  "Through the protocol (--via): a, b, c and h run against `agentstate serve`, a\n"
  "child process (this binary, or --serve-bin PATH) on a fresh store with the\n"
  "same durability and --threads, driven by one client thread over its\n"
  "stdin/stdout pipes (stdio) or loopback TCP (tcp, serve --listen\n"
  "127.0.0.1:0); each line also holds the same shape run in-process in the\n"
  "same run (\"in_process\") and \"ratio_to_in_process\" (not h). all = a,b,c,h.\n"
  "  a  one session, 20,000* appends pipelined, 256 in flight; in-process: the\n"
  "     same on the async API from one thread. Target: sync >= 12,000/s,\n"
  "     memory >= 50,000/s\n"
  "  b  as b's async phase: 1,000* sessions x 20 appends, 64 chains in flight;\n"
  "     over tcp on 8 connections of 8 chains. Target: ratio >= 0.7\n"
  "  c  one session of 10,000* events loaded as a; get_session awaited one at\n"
  "     a time, num_recent_events=10 (1,000) and full (200); in-process:\n"
  "     get_session_json. ratio = in-process p50 / through-serve p50\n"
  "  h  one stream watches everything, then 2,000* appends awaited one at a\n"
  "     time: p50_us from an append's request written to its change's\n"
  "     notification read (ack_p50_us: to its answer). Target: p50 <= 1 ms\n"
  "  Also: server_cpu_us_per_event and client_cpu_us_per_event (a, b), and\n"
  "  serve_stats (the stats method: commits, mean_batch, ...). --scheduler,\n"
  "  --spin-us, --write-map, --max-store-mb and --max-resident-mb do not apply\n"
  "  (serve runs with the engine's defaults).\n"
  "\n"
  "With --peer SCRIPT, a and b (in process) also run on another framework's\n"
  "in-memory session service, `node SCRIPT --workload a|b --scale FACTOR`\n"
  "(tools/bench/peers/iqai_adk.mjs: @iqai/adk, after npm ci there), right\n"
  "after the bench's own run; its JSON line goes under \"peer\" and\n"
  "\"ratio_to_peer\" is events_per_s over the peer's. A peer that cannot run\n"
  "gives \"peer\": {\"error\", \"output\"} and changes nothing else.\n"
  "\n"
  "Each line has workload, durability, scale, events_per_s (null where no\n"
  "events are written), p50_us/p99_us (the latency named by latency_of),\n"
  "rss_growth_mb, peak_rss_mb, seconds, settings (scheduler, threads, batch\n"
  "caps, idle_timeout_ms, spin_wait_us, workers_poll, write_map), stats (commits,\n"
  "batched_writes, max_batch, mean_batch, ...), target and meets_target.\n"
  "Targets are set for --scale 1 on a 2-core machine; they are reported, not\n"
  "enforced.";

/// The workloads, in the order of their names 'a'..'k'.
using workload_fn = ojson (*)(const config&);
constexpr workload_fn workloads_by_name[] = {workload_a, workload_b, workload_c, workload_d,
                                             workload_e, workload_f, workload_g, workload_h,
                                             workload_i, workload_j, workload_k};

/// `v` as a whole decimal number in lo..hi; nullopt for anything else
/// (empty, a sign, trailing characters, out of range).
std::optional<std::uint64_t> whole_number(const std::string& v, std::uint64_t lo,
                                          std::uint64_t hi) {
  if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos || v.size() > 19)
    return std::nullopt;
  auto n = std::strtoull(v.c_str(), nullptr, 10);
  if (n < lo || n > hi)
    return std::nullopt;
  return n;
}

/// A flag that takes a whole number in lo..hi, where it goes, and its help.
struct number_flag {
  const char* name;
  std::uint64_t lo, hi;
  void (*set)(config&, std::uint64_t);
  const char* help;
};

const number_flag number_flags[] = {
  {"--threads", 0, 256, [](config& c, std::uint64_t n) { c.threads = static_cast<std::size_t>(n); },
   "CAF worker threads (default 0 = one per core)"},
  {"--max-store-mb", 1, std::uint64_t{1} << 24,
   [](config& c, std::uint64_t n) { c.max_store_mb = n; },
   "options.max_store_bytes in MiB (default: the engine's,\n"
   "64 GiB; lower it to run under valgrind)"},
  {"--max-resident-mb", 0, std::uint64_t{1} << 24,
   [](config& c, std::uint64_t n) { c.max_resident_mb = n; },
   "options.max_resident_store_bytes in MiB (default: the\n"
   "engine's, 128; 0 = never drop mapped store pages)"},
  {"--spin-us", 0, 10000, [](config& c, std::uint64_t n) { c.spin_us = static_cast<long>(n); },
   "options.spin_wait in microseconds (default: the engine's,\n"
   "50; 0 = waiting threads sleep at once)"},
};

int usage_error(const std::string& msg) {
  return tools::usage_error("bench", msg);
}

/// What the command line gave, as text; checked by run_bench.
struct bench_args {
  std::string workload, durability, scale, via, serve_bin, dir, scheduler, peer;
  bool write_map = false;
  std::string numbers[std::size(number_flags)];
  cli_option* number_given[std::size(number_flags)] = {};
  cli_option *scale_opt = nullptr, *via_opt = nullptr, *serve_bin_opt = nullptr, *dir_opt = nullptr,
             *scheduler_opt = nullptr, *durability_opt = nullptr, *peer_opt = nullptr;
};

int run_bench(bench_args& a);

runner define_bench(command_line& cl) {
  auto a = std::make_shared<bench_args>();
  cl.usage = "agentstate bench --workload LIST [--durability sync|nosync|memory]\n"
             "                 [--scale FACTOR] [--dir DIR] [--threads N]\n"
             "                 [--scheduler sharing|stealing] [--max-store-mb N]\n"
             "                 [--max-resident-mb N] [--spin-us N] [--write-map]\n"
             "                 [--peer SCRIPT]\n"
             "agentstate bench --workload a|b|c|h|LIST|all --via stdio|tcp\n"
             "                 [--durability MODE] [--scale FACTOR] [--dir DIR]\n"
             "                 [--threads N] [--serve-bin PATH]";
  cl.description = bench_description;
  cl.footer = bench_footer;
  cl.exit_status(exit_ok,
                 "every workload ran and every correctness check held (a missed "
                 "performance target is reported, not a failure)");
  cl.exit_status(exit_failed,
                 "an engine call or a correctness check failed (stderr names the "
                 "workload)");
  cl.environment = {{"TMPDIR",
                     "where the temporary store directories are made when --dir is "
                     "not given (default /tmp)"}};
  auto& app = cl.app;
  app.add_option("--workload", a->workload, "a..k, a comma-separated list (a,c,f), or all")
    ->type_name("LIST");
  a->durability_opt = app
                        .add_option("--durability", a->durability,
                                    "sync (default: fsync per group commit), nosync, memory")
                        ->type_name("MODE");
  a->scale_opt =
    app.add_option("--scale", a->scale, "multiplies the sizes below (default 1; 0 < FACTOR <= 10)")
      ->type_name("FACTOR");
  a->dir_opt =
    app.add_option("--dir", a->dir, "where the temp store directories are made")->type_name("DIR");
  for (std::size_t i = 0; i < std::size(number_flags); ++i) {
    a->number_given[i] =
      app.add_option(number_flags[i].name, a->numbers[i], number_flags[i].help)->type_name("N");
    if (i == 0)
      a->scheduler_opt =
        app.add_option("--scheduler", a->scheduler, "CAF scheduler policy (default sharing)")
          ->type_name("POLICY");
  }
  app.add_flag("--write-map", a->write_map,
               "options.write_map: LMDB writes through a writable map\n"
               "(nosync only; see the option's costs in options.hpp)");
  a->peer_opt = app
                  .add_option("--peer", a->peer,
                              "a node script that runs a and b on another framework\n"
                              "(tools/bench/peers/iqai_adk.mjs)")
                  ->type_name("SCRIPT");
  const std::string through = "through the protocol";
  a->via_opt = app.add_option("--via", a->via, "stdio or tcp")->type_name("MODE")->group(through);
  a->serve_bin_opt = app
                       .add_option("--serve-bin", a->serve_bin,
                                   "the agentstate binary to run serve from (e.g. an older\n"
                                   "build, for a before/after comparison in one run)")
                       ->type_name("PATH")
                       ->group(through);
  return [a] { return run_bench(*a); };
}

int run_bench(bench_args& a) {
  config cfg;
  if (const char* t = std::getenv("TMPDIR"); t && *t)
    cfg.base_dir = t;
  else
    cfg.base_dir = "/tmp";
  cfg.workloads = a.workload;
  cfg.write_map = a.write_map;
  for (std::size_t i = 0; i < std::size(number_flags); ++i) {
    if (a.number_given[i]->count() == 0)
      continue;
    auto& f = number_flags[i];
    auto n = whole_number(a.numbers[i], f.lo, f.hi);
    if (!n)
      return usage_error(std::string(f.name) + " takes a whole number " + std::to_string(f.lo)
                         + ".." + std::to_string(f.hi) + ", not '" + a.numbers[i] + "'");
    f.set(cfg, *n);
  }
  if (a.durability_opt->count()) {
    const auto& v = a.durability;
    if (v == "sync")
      cfg.mode = durability::sync;
    else if (v == "nosync")
      cfg.mode = durability::nosync;
    else if (v == "memory")
      cfg.mode = durability::memory;
    else
      return usage_error("--durability takes sync, nosync or memory");
  }
  if (a.scale_opt->count()) {
    const auto& v = a.scale;
    char* end = nullptr;
    cfg.scale = std::strtod(v.c_str(), &end);
    if (end == v.c_str() || *end != '\0' || !(cfg.scale > 0) || cfg.scale > 10)
      return usage_error("--scale takes a number, 0 < FACTOR <= 10, not '" + v + "'");
  }
  if (a.via_opt->count()) {
    if (a.via != "stdio" && a.via != "tcp")
      return usage_error("--via takes stdio or tcp");
    cfg.via = a.via;
  }
  if (a.serve_bin_opt->count()) {
    if (a.serve_bin.empty())
      return usage_error("--serve-bin needs a path");
    cfg.serve_bin = a.serve_bin;
  }
  if (a.dir_opt->count())
    cfg.base_dir = a.dir;
  if (a.peer_opt->count()) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(a.peer, ec))
      return usage_error("--peer '" + a.peer + "' is not a file");
  }
  if (a.scheduler_opt->count()) {
    if (a.scheduler != "sharing" && a.scheduler != "stealing")
      return usage_error("--scheduler takes sharing or stealing");
    cfg.scheduler = a.scheduler;
  }
  if (cfg.workloads.empty())
    return usage_error("--workload is required");
  if (cfg.write_map && cfg.mode != durability::nosync)
    return usage_error("--write-map needs --durability nosync");
  const bool via = !cfg.via.empty();
  if (!via && !cfg.serve_bin.empty())
    return usage_error("--serve-bin needs --via");
  if (via && a.peer_opt->count())
    return usage_error("--peer compares the in-process figures: not with --via");
  if (via
      && (cfg.scheduler != "sharing" || cfg.spin_us || cfg.write_map || cfg.max_store_mb
          || cfg.max_resident_mb))
    return usage_error("--via runs serve with the engine's defaults: --scheduler, --spin-us, "
                       "--write-map, --max-store-mb and --max-resident-mb do not apply");
  const std::string known = via ? "abch" : "abcdefghijk";
  std::string todo;
  if (cfg.workloads == "all") {
    todo = via ? known : "abcdefghij"; // k (a cluster, etcd) only when named
  } else {
    for (std::size_t p = 0; p < cfg.workloads.size(); ++p) {
      char c = cfg.workloads[p];
      if (c == ',')
        continue;
      bool alone = (p + 1 == cfg.workloads.size() || cfg.workloads[p + 1] == ',');
      if (known.find(c) == std::string::npos || !alone)
        return usage_error("unknown workload '" + cfg.workloads + "' ("
                           + (via ? "a, b, c or h with --via" : "a..k") + ", a list, or all)");
      todo += c;
    }
  }
  if (cfg.mode != durability::memory) {
    std::error_code ec;
    if (!std::filesystem::is_directory(cfg.base_dir, ec))
      return usage_error("--dir '" + cfg.base_dir + "' is not a directory");
  }
  install_interrupt_handler();
  bool failed = false;
  for (char w : todo) {
    ojson line = via ? via_workload(w, cfg) : workloads_by_name[w - 'a'](cfg);
    if (a.peer_opt->count() && (w == 'a' || w == 'b'))
      attach_peer(line, run_peer(a.peer, w, cfg.scale));
    std::cout << line.dump() << std::endl;
    if (line.value("errors", 0) != 0 || (line.contains("correct") && !line["correct"]))
      failed = true;
    if (line.value("errors", 0) != 0)
      say("bench", "workload %c: %s", w, line.value("first_error", std::string()).c_str());
    else if (line.contains("correct") && !line["correct"])
      say("bench", "workload %c: a correctness check failed (\"correct\": false)", w);
  }
  return failed ? exit_failed : exit_ok;
}

static const bool bench_registered = register_command(
  {"bench", "run the benchmark workloads a..k (in process or via serve)", define_bench});

} // namespace

} // namespace agentstate::tools::bench
