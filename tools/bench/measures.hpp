// SPDX-License-Identifier: Apache-2.0
// tools/bench/measures.hpp: what `agentstate bench` measures with: wall-clock
// intervals, latency samples and their percentiles, this process's memory,
// CPU time and written bytes, the machine's load, and rounding of figures for
// the JSON lines. Every function here may be called from any thread; a
// `samples` object belongs to one thread at a time.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace agentstate::tools::bench {

using ojson = nlohmann::ordered_json;
using steady = std::chrono::steady_clock;

/// Seconds from `t0` to now.
double since(steady::time_point t0);

/// Microseconds from `a` to `b`.
double us_between(steady::time_point a, steady::time_point b);

/// `x` rounded to `digits` decimals; NaN and infinities unchanged.
double round_to(double x, int digits);

/// `x` rounded to `significant` significant digits (a ratio of 0.000213
/// stays 0.000213 where round_to(x, 3) would make it 0); zero, NaN and
/// infinities unchanged.
double round_sig(double x, int significant);

/// This process's memory from /proc/self/status, MiB: resident (VmRSS), its
/// high-water mark (VmHWM), and the anonymous and file-backed parts of RSS.
/// Zero where the kernel does not report a field.
struct mem_status {
  double rss_mb = 0, hwm_mb = 0, anon_mb = 0, file_mb = 0;
};

mem_status read_mem();

/// Returns freed heap to the OS and resets VmHWM to the current RSS, so a
/// workload's baseline and peak are its own, not an earlier workload's.
void reset_memory_marks();

/// CPU seconds (user + system) this process has used so far, all threads.
double cpu_seconds();

/// Bytes this process has passed to write(2)/pwrite(2) so far (/proc/self/io
/// wchar): for LMDB, the pages its commits write. 0 when unreadable.
double written_bytes();

/// The 1-minute load average (/proc/loadavg); -1 when unreadable. Other
/// processes competing for the cores make every figure noisy, so each line
/// records it.
double load_average();

/// Latencies in microseconds; percentiles by rank (the sample at index
/// q * size, sorted ascending). pct() sorts `us` in place on first use: add
/// no samples after it. NaN when empty.
struct samples {
  std::vector<double> us;
  double pct(double q);
  double p50() { return pct(0.50); }
  double p99() { return pct(0.99); }

private:
  bool sorted_ = false;
};

/// Runs `call()`, adds its wall time in microseconds to `s`, and returns
/// what it returned. The timer brackets the call alone.
template <class F>
auto timed_call(samples& s, F&& call) {
  auto t = steady::now();
  auto r = call();
  s.us.push_back(us_between(t, steady::now()));
  return r;
}

/// Sets `<prefix>p50_us` and `<prefix>p99_us` of `out` to those of `s`,
/// rounded to 0.1 µs.
void put_latency(ojson& out, const char* prefix, samples& s);

/// Sets `latency_of` of `out` to `of`, then the line's headline `p50_us` and
/// `p99_us` to those of `s` (put_latency with no prefix).
void put_headline_latency(ojson& out, const char* of, samples& s);

} // namespace agentstate::tools::bench
