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
#include <iostream>
#include <optional>
#include <string>

#include "tools/bench/temp_store.hpp"
#include "tools/bench/via_workloads.hpp"
#include "tools/bench/workloads.hpp"
#include "tools/commands.hpp"

namespace agentstate::tools::bench {

namespace {

const char* bench_usage =
  "usage: agentstate bench --workload W [--durability sync|nosync|memory]\n"
  "                        [--scale F] [--dir DIR] [--threads N]\n"
  "                        [--scheduler sharing|stealing] [--max-store-mb N]\n"
  "                        [--max-resident-mb N] [--spin-us N] [--write-map]\n"
  "       agentstate bench --workload a|b|c|LIST|all --via stdio|tcp\n"
  "                        [--durability D] [--scale F] [--dir DIR] [--threads N]\n"
  "                        [--serve-bin PATH]\n"
  "\n"
  "Runs a workload in-process against a fresh store in a temp directory under\n"
  "DIR (default $TMPDIR or /tmp; removed afterwards, also on SIGINT/SIGTERM)\n"
  "and prints one JSON object per workload on one line of stdout. Progress of\n"
  "long phases goes to stderr.\n"
  "\n"
  "  --workload W     a..g, a comma-separated list (a,c,f), or all\n"
  "  --durability D   sync (default: fsync per group commit), nosync, memory\n"
  "  --scale F        multiplies the sizes below (default 1; 0 < F <= 10)\n"
  "  --dir DIR        where the temp store directories are made\n"
  "  --threads N      CAF worker threads (default 0 = one per core)\n"
  "  --scheduler P    CAF scheduler policy (default sharing)\n"
  "  --max-store-mb N options.max_store_bytes in MiB (default: the engine's,\n"
  "                   64 GiB; lower it to run under valgrind)\n"
  "  --max-resident-mb N options.max_resident_store_bytes in MiB (default: the\n"
  "                   engine's, 128; 0 = never drop mapped store pages)\n"
  "  --spin-us N      options.spin_wait in microseconds (default: the engine's,\n"
  "                   50; 0 = waiting threads sleep at once)\n"
  "  --write-map      options.write_map: LMDB writes through a writable map\n"
  "                   (nosync only; see the option's costs in options.hpp)\n"
  "\n"
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
  "\n"
  "Through the protocol (--via): a, b and c run against `agentstate serve`, a\n"
  "child process (this binary, or --serve-bin PATH) on a fresh store with the\n"
  "same durability and --threads, driven by one client thread over its\n"
  "stdin/stdout pipes (stdio) or loopback TCP (tcp, serve --listen\n"
  "127.0.0.1:0); each line also holds the same shape run in-process in the\n"
  "same run (\"in_process\") and \"ratio_to_in_process\". all = a,b,c.\n"
  "  a  one session, 20,000* appends pipelined, 256 in flight; in-process: the\n"
  "     same on the async API from one thread. Target: sync >= 12,000/s,\n"
  "     memory >= 50,000/s\n"
  "  b  as b's async phase: 1,000* sessions x 20 appends, 64 chains in flight;\n"
  "     over tcp on 8 connections of 8 chains. Target: ratio >= 0.7\n"
  "  c  one session of 10,000* events loaded as a; get_session awaited one at\n"
  "     a time, num_recent_events=10 (1,000) and full (200); in-process:\n"
  "     get_session_json. ratio = in-process p50 / through-serve p50\n"
  "  Also: server_cpu_us_per_event and client_cpu_us_per_event (a, b), and\n"
  "  serve_stats (the stats method: commits, mean_batch, ...). --scheduler,\n"
  "  --spin-us, --write-map, --max-store-mb and --max-resident-mb do not apply\n"
  "  (serve runs with the engine's defaults).\n"
  "  --via M          stdio or tcp\n"
  "  --serve-bin PATH the agentstate binary to run serve from (e.g. an older\n"
  "                   build, for a before/after comparison in one run)\n"
  "\n"
  "Each line has workload, durability, scale, events_per_s (null where no\n"
  "events are written), p50_us/p99_us (the latency named by latency_of),\n"
  "rss_growth_mb, peak_rss_mb, seconds, settings (scheduler, threads, batch\n"
  "caps, idle_timeout_ms, spin_wait_us, workers_poll, write_map), stats (commits,\n"
  "batched_writes, max_batch, mean_batch, ...), target and meets_target.\n"
  "Targets are set for --scale 1 on a 2-core machine; they are reported, not\n"
  "enforced.\n"
  "\n"
  "Exit codes: 0 ran and every correctness check held; 1 an engine call or a\n"
  "correctness check failed; 2 bad usage.\n";

/// The workloads, in the order of their names 'a'..'g'.
using workload_fn = ojson (*)(const config&);
constexpr workload_fn workloads_by_name[] = {workload_a, workload_b, workload_c, workload_d,
                                              workload_e, workload_f, workload_g};

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

/// A flag that takes a whole number in lo..hi, and where it goes.
struct number_flag {
  const char* name;
  std::uint64_t lo, hi;
  void (*set)(config&, std::uint64_t);
};

const number_flag number_flags[] = {
  {"--threads", 0, 256,
   [](config& c, std::uint64_t n) { c.threads = static_cast<std::size_t>(n); }},
  {"--max-resident-mb", 0, std::uint64_t{1} << 24,
   [](config& c, std::uint64_t n) { c.max_resident_mb = n; }},
  {"--spin-us", 0, 10000, [](config& c, std::uint64_t n) { c.spin_us = static_cast<long>(n); }},
  {"--max-store-mb", 1, std::uint64_t{1} << 24,
   [](config& c, std::uint64_t n) { c.max_store_mb = n; }},
};

/// The number flag named `name`; null for any other argument.
const number_flag* number_flag_named(const std::string& name) {
  for (auto& f : number_flags)
    if (name == f.name)
      return &f;
  return nullptr;
}

int usage_error(const std::string& msg) {
  std::fprintf(stderr, "bench: %s\n\n%s", msg.c_str(), bench_usage);
  return 2;
}

int run_bench(const args& argv) {
  config cfg;
  if (const char* t = std::getenv("TMPDIR"); t && *t)
    cfg.base_dir = t;
  else
    cfg.base_dir = "/tmp";
  for (std::size_t i = 0; i < argv.size(); ++i) {
    const auto& a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(bench_usage, stdout);
      return 0;
    }
    if (a == "--write-map") { // the one option without a value
      cfg.write_map = true;
      continue;
    }
    if (i + 1 >= argv.size())
      return usage_error(a.rfind("--", 0) == 0 ? a + " needs a value"
                                               : "unknown argument '" + a + "'");
    const auto& v = argv[++i];
    if (auto* f = number_flag_named(a)) {
      auto n = whole_number(v, f->lo, f->hi);
      if (!n)
        return usage_error(a + " takes a number " + std::to_string(f->lo) + ".." +
                           std::to_string(f->hi));
      f->set(cfg, *n);
    } else if (a == "--workload") {
      cfg.workloads = v;
    } else if (a == "--durability") {
      if (v == "sync")
        cfg.mode = durability::sync;
      else if (v == "nosync")
        cfg.mode = durability::nosync;
      else if (v == "memory")
        cfg.mode = durability::memory;
      else
        return usage_error("--durability takes sync, nosync or memory");
    } else if (a == "--scale") {
      char* end = nullptr;
      cfg.scale = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end != '\0' || !(cfg.scale > 0) || cfg.scale > 10)
        return usage_error("--scale takes a number, 0 < F <= 10");
    } else if (a == "--via") {
      if (v != "stdio" && v != "tcp")
        return usage_error("--via takes stdio or tcp");
      cfg.via = v;
    } else if (a == "--serve-bin") {
      if (v.empty())
        return usage_error("--serve-bin needs a path");
      cfg.serve_bin = v;
    } else if (a == "--dir") {
      cfg.base_dir = v;
    } else if (a == "--scheduler") {
      if (v != "sharing" && v != "stealing")
        return usage_error("--scheduler takes sharing or stealing");
      cfg.scheduler = v;
    } else {
      return usage_error("unknown option '" + a + "'");
    }
  }
  if (cfg.workloads.empty())
    return usage_error("--workload is required");
  if (cfg.write_map && cfg.mode != durability::nosync)
    return usage_error("--write-map needs --durability nosync");
  const bool via = !cfg.via.empty();
  if (!via && !cfg.serve_bin.empty())
    return usage_error("--serve-bin needs --via");
  if (via && (cfg.scheduler != "sharing" || cfg.spin_us || cfg.write_map || cfg.max_store_mb
              || cfg.max_resident_mb))
    return usage_error("--via runs serve with the engine's defaults: --scheduler, --spin-us, "
                       "--write-map, --max-store-mb and --max-resident-mb do not apply");
  const char last = via ? 'c' : 'g';
  std::string todo;
  if (cfg.workloads == "all") {
    todo = via ? "abc" : "abcdefg";
  } else {
    for (std::size_t p = 0; p < cfg.workloads.size(); ++p) {
      char c = cfg.workloads[p];
      if (c == ',')
        continue;
      bool alone = (p + 1 == cfg.workloads.size() || cfg.workloads[p + 1] == ',');
      if (c < 'a' || c > last || !alone)
        return usage_error("unknown workload '" + cfg.workloads + "' ("
                           + (via ? "a..c with --via" : "a..g") + ", a list, or all)");
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
    std::cout << line.dump() << std::endl;
    if (line.value("errors", 0) != 0 || (line.contains("correct") && !line["correct"]))
      failed = true;
    if (line.value("errors", 0) != 0)
      std::fprintf(stderr, "bench %c: %s\n", w, line.value("first_error", std::string()).c_str());
  }
  return failed ? 1 : 0;
}

static const bool registered = register_command(
  {"bench", "run benchmark workloads a..g in-process (a..c through serve with --via); "
   "one JSON line each", run_bench});

} // namespace

} // namespace agentstate::tools::bench
