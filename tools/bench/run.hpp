// SPDX-License-Identifier: Apache-2.0
// tools/bench/run.hpp: the configuration of a bench run and the frame every
// workload runs in (run_ctx): its fresh store, the engine on it, the memory
// baseline, the errors, and the common fields of its JSON line.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "agentstate/engine.hpp"
#include "tools/bench/measures.hpp"
#include "tools/bench/probes.hpp"
#include "tools/bench/temp_store.hpp"

namespace agentstate::tools::bench {

/// What `agentstate bench`'s flags set (its --help explains each).
struct config {
  std::string workloads;
  durability mode = durability::sync;
  double scale = 1.0;
  std::string base_dir;
  std::size_t threads = 0;
  std::string scheduler = "sharing";
  std::uint64_t max_store_mb = 0; ///< 0 = the engine's default
  std::optional<std::uint64_t> max_resident_mb; ///< unset = the engine's default
  std::optional<long> spin_us; ///< unset = the engine's default
  bool write_map = false;
  /// "stdio" or "tcp": run a, b, c through `serve` (via_workloads.hpp); ""
  /// runs in-process.
  std::string via;
  /// The binary whose `serve` --via drives; "" = this one (/proc/self/exe).
  std::string serve_bin;
};

/// "sync", "nosync" or "memory".
const char* mode_name(durability d);

/// `base` times --scale, rounded, and at least `min`.
std::size_t scaled(const config& cfg, double base, std::size_t min);

/// The engine counters `keys` of `all` (to_json(engine_stats), or serve's
/// "stats" result), in that order; a counter `all` lacks is 0. The key
/// "mean_batch" is batched_writes per commit, rounded to 0.01 (0 before the
/// first commit).
ojson pick_stats(const ojson& all, std::initializer_list<const char*> keys);

/// Counts the errors of one workload and keeps the first message. add() may
/// be called from any thread.
struct error_log {
  std::atomic<std::uint64_t> count{0};
  std::mutex mtx;
  std::string first;
  void add(const error& e);
  void add(const std::string& what);
};

/// The frame of one workload, used from the workload's thread (errors may
/// be added from any). Construction resets the memory marks and takes the
/// baseline (and, in sync mode, runs the disk probes); finish() closes the
/// engine and returns the line. The workload writes its own fields into
/// `out` in between.
class run_ctx {
public:
  run_ctx(const config& cfg, std::string name);

  /// Starts the workload's own fields: "description", then `sizes` in order.
  void describe(const char* description,
                std::initializer_list<std::pair<const char*, ojson>> sizes);

  /// Opens the engine on a fresh store (none in memory mode) with the
  /// configured options; idle_timeout 0 keeps the engine's default. False
  /// (and an error logged) when the store or the engine cannot be made.
  bool open(std::chrono::milliseconds idle_timeout = std::chrono::milliseconds(0));

  /// Opens the engine again with the same options and store (after close()).
  bool reopen();

  /// Starts counting the measured phase's CPU time (all threads of the
  /// process) and written bytes.
  void cpu_start();
  /// Records `cpu_s`, `cpu_us_per_<unit>` and (not in memory mode)
  /// `written_kb_per_<unit>` since cpu_start(), per `n` units (events or
  /// sessions): what the work costs regardless of other load on the machine.
  void cpu_stop(double n, const char* unit = "event");

  /// Records the engine's settings and stats and the memory and store sizes
  /// now; call before close().
  void snapshot_engine();

  /// Closes the engine (if open); a failed close is logged.
  void close();

  /// Closes the engine and returns the line: workload, durability, scale,
  /// the workload's own fields, then the memory, time, machine, settings,
  /// stats, target and error fields.
  ojson finish(const ojson& target, bool meets);

  const config& cfg_;
  std::string name_;
  options opts; ///< what open() and reopen() pass to the engine
  std::unique_ptr<temp_store> dir; ///< the store (null in memory mode); reset = a fresh one
  std::unique_ptr<engine> eng; ///< null while closed
  error_log errors;
  ojson out = ojson::object(); ///< the workload's own fields, in line order
  ojson settings, stats; ///< set by snapshot_engine()
  /// Set by snapshot_engine(): MiB over the baseline, the VmHWM, the data file.
  double rss_growth_mb = 0, anon_growth_mb = 0, file_growth_mb = 0, peak_rss_mb = 0, store_mb = 0;
  mem_status base_; ///< memory at construction
  double load_before_ = 0, cpu0_ = 0, wchar0_ = 0;
  flush_probe flush_; ///< probe_flush before the run (sync only)
  double commit_limit_ = -1; ///< probe_lmdb_commits before the run (sync only)
  steady::time_point t0_; ///< construction time; "seconds" counts from it
};

} // namespace agentstate::tools::bench
