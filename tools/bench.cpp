// `agentstate bench`: in-process workloads against a fresh store in a temp
// directory (removed afterwards). Prints one JSON object per workload on
// stdout (one line each); progress of long phases goes to stderr. The
// workloads, their targets and measured results are described in
// docs/performance.md.
//
// Exit codes: 0 every workload ran and every correctness check held (missed
// performance targets are reported, not failures); 1 an engine call failed or
// a correctness check failed; 2 bad usage.
#include <fcntl.h>
#include <malloc.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "agentstate/engine.hpp"
#include "store/kv.hpp"
#include "store/apply.hpp"
#include "store/format.hpp"
#include "store/keys.hpp"
#include "store/listing.hpp"
#include "store/reads.hpp"
#include "store/records.hpp"
#include "tools/commands.hpp"

namespace agentstate::tools {

namespace {

using ojson = nlohmann::ordered_json;
using steady = std::chrono::steady_clock;

const char* bench_usage =
  "usage: agentstate bench --workload W [--durability sync|nosync|memory]\n"
  "                        [--scale F] [--dir DIR] [--threads N]\n"
  "                        [--scheduler sharing|stealing] [--max-store-mb N]\n"
  "                        [--max-resident-mb N] [--spin-us N] [--write-map]\n"
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

// -- measurement helpers -------------------------------------------------------

double since(steady::time_point t0) {
  return std::chrono::duration<double>(steady::now() - t0).count();
}

double round_to(double x, int digits) {
  if (!std::isfinite(x))
    return x;
  double f = std::pow(10.0, digits);
  return std::round(x * f) / f;
}

struct mem_status {
  double rss_mb = 0, hwm_mb = 0, anon_mb = 0, file_mb = 0;
};

mem_status read_mem() {
  mem_status m;
  std::ifstream in("/proc/self/status");
  std::string line;
  auto kb = [&](const char* name, double& out) {
    auto n = std::strlen(name);
    if (line.compare(0, n, name) == 0)
      out = std::strtod(line.c_str() + n, nullptr) / 1024.0;
  };
  while (std::getline(in, line)) {
    kb("VmRSS:", m.rss_mb);
    kb("VmHWM:", m.hwm_mb);
    kb("RssAnon:", m.anon_mb);
    kb("RssFile:", m.file_mb);
  }
  return m;
}

/// Returns freed heap to the OS and resets VmHWM to the current RSS, so a
/// workload's baseline and peak are its own, not an earlier workload's.
void reset_memory_marks() {
  ::malloc_trim(0);
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
}

/// CPU seconds (user + system) this process has used so far, all threads.
double cpu_seconds() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  auto sec = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) / 1e6; };
  return sec(ru.ru_utime) + sec(ru.ru_stime);
}

/// Bytes this process has passed to write(2)/pwrite(2) so far (/proc/self/io
/// wchar): for LMDB, the pages its commits write.
double written_bytes() {
  std::ifstream in("/proc/self/io");
  std::string line;
  while (std::getline(in, line))
    if (line.compare(0, 6, "wchar:") == 0)
      return std::strtod(line.c_str() + 6, nullptr);
  return 0;
}

/// The 1-minute load average: other processes competing for the cores make
/// every figure noisy, so each line records it.
double load_average() {
  double x = -1;
  std::ifstream in("/proc/loadavg");
  in >> x;
  return x;
}

/// The disk's flush latency right now, measured the way LMDB commits in sync
/// mode: write a 4 KiB data page and fdatasync it, then write the 120-byte
/// meta record through a second descriptor opened O_DSYNC. 50 rounds in `dir`;
/// medians in microseconds, -1 when the probe cannot run.
struct flush_probe {
  double fdatasync_us = -1, dsync_write_us = -1;
};

flush_probe probe_flush(const std::string& dir) {
  flush_probe out;
  std::string path = dir + "/agentstate-bench-fsync-probe";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    return out;
  int dfd = ::open(path.c_str(), O_RDWR | O_DSYNC | O_CLOEXEC);
  std::vector<double> a, b;
  char block[8192];
  std::memset(block, 'x', sizeof(block));
  bool ok = ::pwrite(fd, block, sizeof(block), 0) == static_cast<ssize_t>(sizeof(block))
            && ::fdatasync(fd) == 0 && dfd >= 0;
  for (int i = 0; ok && i < 50; ++i) {
    auto t0 = steady::now();
    ok = ::pwrite(fd, block, 4096, 4096) == 4096 && ::fdatasync(fd) == 0;
    auto t1 = steady::now();
    ok = ok && ::pwrite(dfd, block, 120, 32) == 120;
    auto t2 = steady::now();
    a.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    b.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
  }
  if (dfd >= 0)
    ::close(dfd);
  ::close(fd);
  ::unlink(path.c_str());
  if (!ok || a.empty())
    return out;
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  out.fdatasync_us = a[a.size() / 2];
  out.dsync_write_us = b[b.size() / 2];
  return out;
}

/// This machine's ceiling for workload a in sync mode, measured now: durable
/// LMDB commits of one 200-byte put each (LIMITS.md's "1 put + durable
/// commit" row, the pattern a single awaited session is bound by), 300 of
/// them into a fresh store in a temp directory under `dir`, removed after.
/// Commits per second; -1 when the probe cannot run.
double probe_lmdb_commits(const std::string& dir) {
  std::string tmpl = dir + "/agentstate-bench-commit-probe-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr)
    return -1;
  std::string path = buf.data();
  double rate = -1;
  try {
    auto kv = store::open_lmdb_kv(path, true, std::uint64_t{64} << 20);
    const std::string value(200, 'v');
    constexpr int n = 300;
    auto t0 = steady::now();
    for (int i = 0; i < n; ++i) {
      auto w = kv->begin_write();
      std::string key = "k";
      store::append_be64(key, static_cast<std::uint64_t>(i));
      w->put(store::table::events, key, value);
      w->commit();
    }
    rate = n / std::chrono::duration<double>(steady::now() - t0).count();
  } catch (const store::kv_failure&) {
    rate = -1;
  }
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  return rate;
}

/// Latencies in microseconds; percentiles by rank.
struct samples {
  std::vector<double> us;
  double pct(double q) {
    if (us.empty())
      return std::nan("");
    if (!sorted_) {
      std::sort(us.begin(), us.end());
      sorted_ = true;
    }
    auto i = static_cast<std::size_t>(q * static_cast<double>(us.size()));
    return us[std::min(i, us.size() - 1)];
  }
  double p50() { return pct(0.50); }
  double p99() { return pct(0.99); }

private:
  bool sorted_ = false;
};

double us_between(steady::time_point a, steady::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

// The store directory of the running workload, for the SIGINT/SIGTERM
// handler: an interrupted run (e takes minutes) removes its store too. The
// handler only calls async-signal-safe functions on precomputed paths.
constexpr std::size_t max_path = 4096;
char interrupted_files[4][max_path]; // data.mdb, lock.mdb, agentstate.lock, the dir
volatile std::sig_atomic_t have_store = 0;

extern "C" void on_interrupt(int sig) {
  if (have_store) {
    for (int i = 0; i < 3; ++i)
      ::unlink(interrupted_files[i]);
    ::rmdir(interrupted_files[3]);
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void set_interrupt_store(const std::string& dir) {
  have_store = 0;
  if (dir.empty() || dir.size() + 32 > max_path)
    return;
  const char* names[3] = {"/data.mdb", "/lock.mdb", "/agentstate.lock"};
  for (int i = 0; i < 3; ++i)
    std::snprintf(interrupted_files[i], max_path, "%s%s", dir.c_str(), names[i]);
  std::snprintf(interrupted_files[3], max_path, "%s", dir.c_str());
  have_store = 1;
}

/// A fresh directory for one store, removed (recursively) on destruction or
/// when the process is interrupted (SIGINT, SIGTERM).
class temp_store {
public:
  explicit temp_store(const std::string& base) {
    std::string tmpl = base + "/agentstate-bench-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()) != nullptr)
      path_ = buf.data();
    set_interrupt_store(path_);
  }
  ~temp_store() {
    have_store = 0;
    if (!path_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(path_, ec);
    }
  }
  temp_store(const temp_store&) = delete;
  temp_store& operator=(const temp_store&) = delete;
  bool ok() const { return !path_.empty(); }
  const std::string& path() const { return path_; }
  /// The data file's allocated size (a writable map's file is sparse at the
  /// map's maximum size).
  double size_mb() const {
    struct stat st;
    if (::stat((path_ + "/data.mdb").c_str(), &st) != 0)
      return 0.0;
    auto used = std::min<std::uint64_t>(static_cast<std::uint64_t>(st.st_size),
                                        static_cast<std::uint64_t>(st.st_blocks) * 512);
    return static_cast<double>(used) / (1024.0 * 1024.0);
  }

private:
  std::string path_;
};

/// Counts errors of one workload; keeps the first message.
struct error_log {
  std::atomic<std::uint64_t> count{0};
  std::mutex mtx;
  std::string first;
  void add(const error& e) {
    if (count.fetch_add(1) == 0) {
      std::lock_guard<std::mutex> guard(mtx);
      first = to_string(e);
    }
  }
  void add(const std::string& what) {
    if (count.fetch_add(1) == 0) {
      std::lock_guard<std::mutex> guard(mtx);
      first = what;
    }
  }
};

/// Prints "bench X: label n/total (rate/s) rss live" to stderr every 2 s
/// while a phase runs (only phases longer than 2 s print anything).
class progress {
public:
  progress(engine* eng, std::string label, std::uint64_t total)
      : eng_(eng), label_(std::move(label)), total_(total), t0_(steady::now()),
        th_([this] { loop(); }) {}
  ~progress() {
    {
      std::lock_guard<std::mutex> guard(mtx_);
      stop_ = true;
    }
    cv_.notify_all();
    th_.join();
  }
  void add(std::uint64_t n = 1) { done_.fetch_add(n, std::memory_order_relaxed); }
  std::uint64_t max_live() const { return max_live_.load(); }
  /// The largest RssAnon seen (sampled every 250 ms), MiB.
  double max_anon_mb() const { return max_anon_mb_.load(); }

private:
  void loop() {
    std::unique_lock<std::mutex> lock(mtx_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(250));
      if (stop_)
        break;
      std::uint64_t live = eng_ ? eng_->stats().sessions_live : 0;
      if (live > max_live_)
        max_live_ = live;
      auto m = read_mem();
      if (m.anon_mb > max_anon_mb_)
        max_anon_mb_ = m.anon_mb;
      if (since(last_) < 2.0 || since(t0_) < 2.0)
        continue;
      last_ = steady::now();
      auto n = done_.load();
      std::fprintf(stderr, "bench %s %llu/%llu (%.0f/s) rss %.0f MB, live sessions %llu\n",
                   label_.c_str(), static_cast<unsigned long long>(n),
                   static_cast<unsigned long long>(total_), n / since(t0_), m.rss_mb,
                   static_cast<unsigned long long>(live));
    }
  }

  engine* eng_;
  std::string label_;
  std::uint64_t total_;
  steady::time_point t0_, last_ = steady::now();
  std::atomic<std::uint64_t> done_{0}, max_live_{0};
  std::atomic<double> max_anon_mb_{0};
  std::mutex mtx_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread th_;
};

/// A closed loop of `width` concurrent callback chains over `jobs` jobs of
/// `steps` steps each: a chain takes the next job and runs its steps in
/// order, issuing step k+1 from the callback of step k, then takes the next
/// job. `issue(job, step, done)` starts one async call and must call
/// `done(ok)` exactly once (from the engine's callback). A failed step ends
/// its job and stops new jobs from starting.
class closed_loop {
public:
  using done_fn = std::function<void(bool)>;
  using issue_fn = std::function<void(std::size_t job, std::size_t step, done_fn done)>;

  static void run(std::size_t jobs, std::size_t steps, std::size_t width, issue_fn issue,
                  progress* prog) {
    auto st = std::make_shared<state>();
    st->jobs = jobs;
    st->steps = steps;
    st->issue = std::move(issue);
    st->prog = prog;
    width = std::max<std::size_t>(1, std::min(width, jobs));
    st->active = width;
    for (std::size_t w = 0; w < width; ++w)
      next_job(st);
    std::unique_lock<std::mutex> lock(st->mtx);
    st->cv.wait(lock, [&] { return st->active == 0; });
  }

private:
  struct state {
    std::size_t jobs = 0, steps = 0;
    issue_fn issue;
    progress* prog = nullptr;
    std::atomic<std::size_t> next{0};
    std::atomic<bool> failed{false};
    std::mutex mtx;
    std::condition_variable cv;
    std::size_t active = 0;
  };

  static void next_job(const std::shared_ptr<state>& st) {
    auto j = st->next.fetch_add(1);
    if (j >= st->jobs || st->failed.load()) {
      std::lock_guard<std::mutex> guard(st->mtx);
      if (--st->active == 0)
        st->cv.notify_all();
      return;
    }
    step(st, j, 0);
  }

  static void step(const std::shared_ptr<state>& st, std::size_t j, std::size_t k) {
    st->issue(j, k, [st, j, k](bool ok) {
      if (st->prog)
        st->prog->add();
      if (!ok)
        st->failed = true;
      if (ok && k + 1 < st->steps)
        step(st, j, k + 1);
      else
        next_job(st);
    });
  }
};

// -- configuration ---------------------------------------------------------------

struct config {
  std::string workloads;
  durability mode = durability::sync;
  double scale = 1.0;
  std::string base_dir;
  std::size_t threads = 0;
  std::string scheduler = "sharing";
  std::uint64_t max_store_mb = 0; ///< 0 = the engine's default
  std::optional<std::uint64_t> max_resident_mb; ///< unset = the engine's default
  std::optional<long> spin_us;                  ///< unset = the engine's default
  bool write_map = false;
};

const char* mode_name(durability d) {
  switch (d) {
    case durability::sync:
      return "sync";
    case durability::nosync:
      return "nosync";
    case durability::memory:
      return "memory";
  }
  return "?";
}

std::size_t scaled(const config& cfg, double base, std::size_t min) {
  auto n = static_cast<std::size_t>(std::llround(base * cfg.scale));
  return std::max(n, min);
}

// -- one workload run: engine, store, measurements, output ----------------------

/// The common frame of one workload: the fresh store, the engine, the
/// baseline, the errors, and the JSON line.
class run_ctx {
public:
  run_ctx(const config& cfg, std::string name) : cfg_(cfg), name_(std::move(name)) {
    reset_memory_marks();
    base_ = read_mem();
    load_before_ = load_average();
    if (cfg.mode == durability::sync) {
      flush_ = probe_flush(cfg.base_dir);
      commit_limit_ = probe_lmdb_commits(cfg.base_dir);
    }
    t0_ = steady::now();
    out["workload"] = name_;
    out["durability"] = mode_name(cfg.mode);
    out["scale"] = cfg.scale;
  }

  /// Opens the engine on a fresh store (idle_timeout: 0 = engine default).
  bool open(std::chrono::milliseconds idle_timeout = std::chrono::milliseconds(0)) {
    opts.mode = cfg_.mode;
    opts.threads = cfg_.threads;
    opts.scheduler = cfg_.scheduler;
    if (cfg_.max_store_mb > 0)
      opts.max_store_bytes = cfg_.max_store_mb << 20;
    if (cfg_.max_resident_mb)
      opts.max_resident_store_bytes = *cfg_.max_resident_mb << 20;
    if (cfg_.spin_us)
      opts.spin_wait = std::chrono::microseconds(*cfg_.spin_us);
    opts.write_map = cfg_.write_map;
    if (idle_timeout.count() > 0)
      opts.idle_timeout = idle_timeout;
    if (cfg_.mode != durability::memory) {
      dir = std::make_unique<temp_store>(cfg_.base_dir);
      if (!dir->ok()) {
        errors.add("cannot create a temp dir under " + cfg_.base_dir);
        return false;
      }
      opts.dir = dir->path();
    }
    return reopen();
  }

  /// Opens the engine on the same store (after close()).
  bool reopen() {
    auto r = engine::open(opts);
    if (!r) {
      errors.add(r.err());
      return false;
    }
    eng = std::move(*r);
    return true;
  }

  /// Starts timing the measured phase's CPU use (all threads of the process).
  void cpu_start() {
    cpu0_ = cpu_seconds();
    wchar0_ = written_bytes();
  }
  /// Records the CPU the measured phase used, per unit of `n` (events or
  /// reads): what the work costs regardless of other load on the machine.
  void cpu_stop(double n, const char* unit = "event") {
    double c = cpu_seconds() - cpu0_;
    out["cpu_s"] = round_to(c, 3);
    out[std::string("cpu_us_per_") + unit] = round_to(n > 0 ? c * 1e6 / n : 0.0, 1);
    if (cfg_.mode != durability::memory)
      out[std::string("written_kb_per_") + unit] =
        round_to(n > 0 ? (written_bytes() - wchar0_) / 1024.0 / n : 0.0, 2);
  }

  /// Records settings and stats of the engine now; call before close().
  void snapshot_engine() {
    auto& o = eng->opts();
    ojson s;
    s["scheduler"] = o.scheduler;
    s["threads"] = o.threads;
    s["idle_timeout_ms"] = o.idle_timeout.count();
    s["max_batch_count"] = o.max_batch_count;
    s["max_batch_bytes"] = o.max_batch_bytes;
    s["max_store_mb"] = o.max_store_bytes >> 20;
    s["max_resident_mb"] = o.max_resident_store_bytes >> 20;
    s["spin_wait_us"] = o.spin_wait.count();
    // Whether idle CAF workers poll before parking (actors/polling_sharing.hpp).
    s["workers_poll"] = o.scheduler == "sharing" && o.spin_wait.count() > 0;
    s["write_map"] = o.write_map;
    settings = s;
    auto st = eng->stats();
    ojson x;
    x["commits"] = st.commits;
    x["batched_writes"] = st.batched_writes;
    x["max_batch"] = st.max_batch;
    x["mean_batch"] =
      st.commits ? round_to(double(st.batched_writes) / double(st.commits), 2) : 0.0;
    x["appends"] = st.appends;
    x["activations"] = st.activations;
    x["passivations"] = st.passivations;
    x["sessions_live"] = st.sessions_live;
    x["failed_writes"] = st.failed_writes;
    x["resident_trims"] = st.resident_trims;
    stats = x;
    auto m = read_mem();
    rss_growth_mb = m.rss_mb - base_.rss_mb;
    anon_growth_mb = m.anon_mb - base_.anon_mb;
    file_growth_mb = m.file_mb - base_.file_mb;
    peak_rss_mb = m.hwm_mb;
    if (dir)
      store_mb = dir->size_mb();
  }

  void close() {
    if (!eng)
      return;
    if (auto r = eng->close(); !r)
      errors.add(r.err());
    eng.reset();
  }

  /// Finishes the line: the common fields after the workload's own.
  ojson finish(const ojson& target, bool meets) {
    if (eng && settings.is_null())
      snapshot_engine();
    close();
    auto peak = std::max(peak_rss_mb, read_mem().hwm_mb);
    ojson line;
    line["workload"] = out["workload"];
    line["durability"] = out["durability"];
    line["scale"] = out["scale"];
    for (auto it = out.begin(); it != out.end(); ++it)
      if (!line.contains(it.key()))
        line[it.key()] = it.value();
    if (!line.contains("events_per_s"))
      line["events_per_s"] = nullptr;
    line["rss_growth_mb"] = round_to(rss_growth_mb, 1);
    line["rss_anon_growth_mb"] = round_to(anon_growth_mb, 1);
    line["rss_file_growth_mb"] = round_to(file_growth_mb, 1);
    line["peak_rss_mb"] = round_to(peak, 1);
    if (store_mb > 0)
      line["store_mb"] = round_to(store_mb, 1);
    line["seconds"] = round_to(since(t0_), 3);
    ojson machine;
    machine["cores"] = std::thread::hardware_concurrency();
    machine["loadavg_1m_before"] = load_before_;
    machine["loadavg_1m_after"] = load_average();
    if (cfg_.mode == durability::sync) {
      // The disk's flush latency drifts with other tenants' I/O: bracket the run.
      auto after = probe_flush(cfg_.base_dir);
      machine["fdatasync_p50_us_before"] = round_to(flush_.fdatasync_us, 1);
      machine["fdatasync_p50_us_after"] = round_to(after.fdatasync_us, 1);
      machine["dsync_meta_write_p50_us_before"] = round_to(flush_.dsync_write_us, 1);
      machine["dsync_meta_write_p50_us_after"] = round_to(after.dsync_write_us, 1);
      machine["lmdb_1put_commits_per_s_before"] = round_to(commit_limit_, 0);
      machine["lmdb_1put_commits_per_s_after"] = round_to(probe_lmdb_commits(cfg_.base_dir), 0);
    }
    line["machine"] = machine;
    line["settings"] = settings;
    line["stats"] = stats;
    line["target"] = target;
    line["meets_target"] = meets;
    line["errors"] = errors.count.load();
    if (errors.count.load() > 0)
      line["first_error"] = errors.first;
    return line;
  }

  const config& cfg_;
  std::string name_;
  options opts;
  std::unique_ptr<temp_store> dir;
  std::unique_ptr<engine> eng;
  error_log errors;
  ojson out = ojson::object();
  ojson settings, stats;
  double rss_growth_mb = 0, anon_growth_mb = 0, file_growth_mb = 0, peak_rss_mb = 0,
         store_mb = 0;
  mem_status base_;
  double load_before_ = 0, cpu0_ = 0, wchar0_ = 0;
  flush_probe flush_;
  double commit_limit_ = -1; ///< probe_lmdb_commits before the run (sync only)
  steady::time_point t0_;
};

void put_latency(ojson& out, const char* prefix, samples& s) {
  out[std::string(prefix) + "p50_us"] = round_to(s.p50(), 1);
  out[std::string(prefix) + "p99_us"] = round_to(s.p99(), 1);
}

std::string sid(const char* prefix, std::size_t i) {
  return prefix + std::to_string(i);
}

json step_delta(std::size_t i) {
  return json{{"step", i}, {"status", "s" + std::to_string(i % 7)}, {"score", double(i) * 0.5}};
}

append_request make_append(const session_ref& ref, json delta) {
  append_request r;
  r.ref = ref;
  r.ev.author = "bench";
  r.ev.invocation_id = "inv-" + ref.session_id;
  r.ev.actions.state_delta = std::move(delta);
  return r;
}

/// Creates `n` sessions named by `ref_of` with `width` creates in flight.
bool create_sessions(run_ctx& x, std::size_t n, std::size_t width,
                     const std::function<session_ref(std::size_t)>& ref_of, const char* label) {
  progress prog(x.eng.get(), std::string(label) + " create", n);
  closed_loop::run(
    n, 1, width,
    [&](std::size_t j, std::size_t, closed_loop::done_fn done) {
      auto ref = ref_of(j);
      create_request c;
      c.app_name = ref.app_name;
      c.user_id = ref.user_id;
      c.session_id = ref.session_id;
      x.eng->create_session(std::move(c), [&x, done](result<session> r) {
        if (!r)
          x.errors.add(r.err());
        done(r.ok());
      });
    },
    &prog);
  return x.errors.count == 0;
}

/// Runs `jobs` sessions x `steps` appends with `width` chains in flight; each
/// ack latency lands in `lat` (index job*steps+step). Returns the seconds.
double append_loop(run_ctx& x, std::size_t jobs, std::size_t steps, std::size_t width,
                   const std::function<session_ref(std::size_t)>& ref_of,
                   const std::function<json(std::size_t, std::size_t)>& delta_of,
                   samples& lat, const char* label) {
  lat.us.assign(jobs * steps, 0.0);
  progress prog(x.eng.get(), std::string(label) + " append", jobs * steps);
  auto t0 = steady::now();
  closed_loop::run(
    jobs, steps, width,
    [&](std::size_t j, std::size_t k, closed_loop::done_fn done) {
      auto req = make_append(ref_of(j), delta_of(j, k));
      auto t = steady::now();
      auto* slot = &lat.us[j * steps + k];
      x.eng->append_event(std::move(req),
                          [&x, done, t, slot](result<append_result> r) {
                            *slot = us_between(t, steady::now());
                            if (!r)
                              x.errors.add(r.err());
                            done(r.ok());
                          });
    },
    &prog);
  return since(t0);
}

// -- the workloads ------------------------------------------------------------------

/// The engine's own hand-off cost, measured on the running engine right after
/// a's appends: `n` blocking get_app_state calls, each a host thread -> app
/// scope actor (CAF worker) -> host thread round trip with no store work
/// (the scope answers from memory once loaded). An awaited append makes two
/// such pairs of hand-offs (host -> session actor -> store writer -> session
/// actor -> host), so a's ceiling with no work at all is about half of this
/// rate. Adds "round_trip" and "ratio_to_round_trip" (eps / its rate).
void round_trips(run_ctx& x, const std::string& app, std::size_t n, double eps) {
  if (auto r = x.eng->get_app_state(app); !r) { // loads the scope: not timed
    x.errors.add(r.err());
    return;
  }
  samples lat;
  lat.us.reserve(n);
  auto t0 = steady::now();
  for (std::size_t i = 0; i < n && x.errors.count == 0; ++i) {
    auto t = steady::now();
    auto r = x.eng->get_app_state(app);
    lat.us.push_back(us_between(t, steady::now()));
    if (!r)
      x.errors.add(r.err());
  }
  double rate = double(lat.us.size()) / since(t0);
  ojson rt;
  rt["of"] = "blocking get_app_state: host -> app scope actor -> host, no store work";
  rt["calls"] = lat.us.size();
  rt["per_s"] = round_to(rate, 0);
  put_latency(rt, "", lat);
  x.out["round_trip"] = rt;
  x.out["ratio_to_round_trip"] = round_to(eps / rate, 3);
}

ojson workload_a(const config& cfg) {
  run_ctx x(cfg, "a");
  const std::size_t n = scaled(cfg, 20000, 10);
  x.out["description"] = "one session, sequential appends, each awaited (blocking API)";
  x.out["events"] = n;
  double target = cfg.mode == durability::memory ? 150000 : 3000;
  std::string tdesc = cfg.mode == durability::memory
                        ? "events_per_s >= 150000"
                        : cfg.mode == durability::sync
                            ? "events_per_s >= 3000"
                            : "events_per_s >= 3000 (the sync target; none is set for nosync)";
  bool ok = false;
  if (x.open()) {
    session_ref ref{"bench-a", "u0", "s0"};
    create_request c{ref.app_name, ref.user_id, ref.session_id, json::object()};
    if (auto r = x.eng->create_session(c); !r)
      x.errors.add(r.err());
    samples lat;
    lat.us.reserve(n);
    progress prog(x.eng.get(), "a append", n);
    x.cpu_start();
    auto t0 = steady::now();
    for (std::size_t i = 0; i < n && x.errors.count == 0; ++i) {
      auto req = make_append(ref, step_delta(i));
      auto t = steady::now();
      auto r = x.eng->append_event(std::move(req));
      lat.us.push_back(us_between(t, steady::now()));
      if (!r)
        x.errors.add(r.err());
      prog.add();
    }
    double secs = since(t0);
    x.cpu_stop(double(n));
    double eps = n / secs;
    x.out["events_per_s"] = round_to(eps, 0);
    x.out["latency_of"] = "append ack (blocking call)";
    put_latency(x.out, "", lat);
    x.out["write_seconds"] = round_to(secs, 3);
    if (cfg.mode == durability::sync && x.commit_limit_ > 0) {
      // The target's own ratio: LIMITS.md put this pattern at 6.9k commits/s
      // and set 3,000 (43%); the disk's flush latency moves both.
      x.out["ratio_to_lmdb_commit_limit"] = round_to(eps / x.commit_limit_, 3);
    }
    if (x.errors.count == 0)
      round_trips(x, ref.app_name, n, eps);
    ok = eps >= target;
    x.snapshot_engine();
  }
  return x.finish(tdesc, ok && x.errors.count == 0);
}

ojson workload_b(const config& cfg) {
  run_ctx x(cfg, "b");
  const std::size_t sessions = scaled(cfg, 1000, 8), per = 20, width = 64;
  const std::size_t users = std::min<std::size_t>(100, sessions);
  x.out["description"] = "sessions over users, 20 events each, 64 appends in flight";
  x.out["sessions"] = sessions;
  x.out["users"] = users;
  x.out["events"] = sessions * per;
  x.out["in_flight"] = std::min(width, sessions);
  double target = cfg.mode == durability::sync ? 30000 : 100000;
  std::string tdesc = cfg.mode == durability::sync ? "events_per_s >= 30000"
                      : cfg.mode == durability::nosync
                        ? "events_per_s >= 100000"
                        : "events_per_s >= 100000 (the nosync target; none is set for memory)";
  auto ref_of = [&](std::size_t j) {
    return session_ref{"bench-b", sid("u", j % users), sid("s", j)};
  };
  auto delta_of = [](std::size_t, std::size_t k) { return step_delta(k); };
  bool ok = false;
  // 1. async API: 64 callback chains (the headline figures).
  if (x.open() && create_sessions(x, sessions, width, ref_of, "b")) {
    samples lat;
    x.cpu_start();
    double secs = append_loop(x, sessions, per, width, ref_of, delta_of, lat, "b async");
    x.cpu_stop(double(sessions * per));
    double eps = double(sessions * per) / secs;
    x.out["events_per_s"] = round_to(eps, 0);
    x.out["latency_of"] = "append ack (async API, 64 callback chains)";
    put_latency(x.out, "", lat);
    x.out["api"] = "async";
    x.out["write_seconds"] = round_to(secs, 3);
    ok = eps >= target;
    x.snapshot_engine();
  }
  x.close();
  // 2. blocking API: 64 threads, each taking sessions in turn; a fresh store.
  x.dir.reset();
  if (x.errors.count == 0 && x.open() && create_sessions(x, sessions, width, ref_of, "b")) {
    samples lat;
    lat.us.assign(sessions * per, 0.0);
    std::atomic<std::size_t> next{0};
    progress prog(x.eng.get(), "b blocking append", sessions * per);
    double cpu0 = cpu_seconds();
    auto t0 = steady::now();
    std::vector<std::thread> ths;
    for (std::size_t w = 0; w < width; ++w)
      ths.emplace_back([&] {
        for (;;) {
          auto j = next.fetch_add(1);
          if (j >= sessions || x.errors.count > 0)
            return;
          auto ref = ref_of(j);
          for (std::size_t k = 0; k < per; ++k) {
            auto req = make_append(ref, step_delta(k));
            auto t = steady::now();
            auto r = x.eng->append_event(std::move(req));
            lat.us[j * per + k] = us_between(t, steady::now());
            prog.add();
            if (!r) {
              x.errors.add(r.err());
              return;
            }
          }
        }
      });
    for (auto& t : ths)
      t.join();
    double secs = since(t0);
    double cpu = cpu_seconds() - cpu0;
    ojson b;
    b["events_per_s"] = round_to(double(sessions * per) / secs, 0);
    put_latency(b, "", lat);
    b["threads"] = width;
    b["cpu_us_per_event"] = round_to(cpu * 1e6 / double(sessions * per), 1);
    auto st = x.eng->stats();
    b["commits"] = st.commits;
    b["mean_batch"] =
      st.commits ? round_to(double(st.batched_writes) / double(st.commits), 2) : 0.0;
    b["max_batch"] = st.max_batch;
    x.out["blocking"] = b;
  }
  return x.finish(tdesc, ok && x.errors.count == 0);
}

ojson workload_c(const config& cfg) {
  run_ctx x(cfg, "c");
  const std::size_t n = scaled(cfg, 10000, 10), full_reads = 200, recent_reads = 1000;
  x.out["description"] = "one session of N events: get_session full and num_recent_events=10";
  x.out["events"] = n;
  x.out["full_reads"] = full_reads;
  x.out["recent10_reads"] = recent_reads;
  std::string tdesc = "recent10_p50_us <= 20 and full_p50_us <= 5000 (at 10,000 events)";
  bool ok = false;
  session_ref ref{"bench-c", "u0", "s0"};
  if (x.open() && create_sessions(x, 1, 1, [&](std::size_t) { return ref; }, "c")) {
    samples load;
    double secs = append_loop(
      x, 1, n, 1, [&](std::size_t) { return ref; },
      [](std::size_t, std::size_t k) { return step_delta(k); }, load, "c load");
    x.out["events_per_s"] = round_to(double(n) / secs, 0);
    x.out["events_per_s_of"] = "loading the session (sequential async appends)";
    samples full, recent;
    auto read = [&](std::optional<std::int64_t> num, samples& s, std::size_t times,
                    std::size_t want) {
      for (std::size_t i = 0; i < times && x.errors.count == 0; ++i) {
        get_request g;
        g.ref = ref;
        g.num_recent_events = num;
        auto t = steady::now();
        auto r = x.eng->get_session(std::move(g));
        s.us.push_back(us_between(t, steady::now()));
        if (!r)
          x.errors.add(r.err());
        else if (!*r || (*r)->events.size() != want)
          x.errors.add("get_session returned " +
                       std::to_string(*r ? (*r)->events.size() : 0) + " events, expected " +
                       std::to_string(want));
      }
    };
    // The same reads as JSON text (get_session_json: stored events copied,
    // not parsed), what a server sends; the first read of each kind is
    // checked against the typed session.
    samples text_full, text_recent;
    auto read_text = [&](std::optional<std::int64_t> num, samples& s, std::size_t times) {
      for (std::size_t i = 0; i < times && x.errors.count == 0; ++i) {
        get_request g;
        g.ref = ref;
        g.num_recent_events = num;
        auto check = g;
        auto t = steady::now();
        auto r = x.eng->get_session_json(std::move(g));
        s.us.push_back(us_between(t, steady::now()));
        if (!r) {
          x.errors.add(r.err());
        } else if (i == 0) {
          auto typed = x.eng->get_session(std::move(check));
          auto want = typed && *typed ? dump_json(to_json(**typed)) : result<std::string>{""};
          if (!want || *want != *r)
            x.errors.add("get_session_json differs from the typed session");
        }
      }
    };
    samples warm;
    read(std::nullopt, warm, 3, n);
    read(std::int64_t{10}, recent, recent_reads, std::min<std::size_t>(10, n));
    read(std::nullopt, full, full_reads, n);
    read_text(std::int64_t{10}, text_recent, recent_reads);
    read_text(std::nullopt, text_full, full_reads);
    x.out["latency_of"] = "get_session num_recent_events=10";
    put_latency(x.out, "", recent);
    put_latency(x.out, "recent10_", recent);
    put_latency(x.out, "full_", full);
    put_latency(x.out, "text_recent10_", text_recent);
    put_latency(x.out, "text_full_", text_full);
    bool typed_ok = recent.p50() <= 20 && full.p50() <= 5000;
    bool text_ok = text_recent.p50() <= 20 && text_full.p50() <= 5000;
    ok = typed_ok || text_ok;
    const char* typed_part = recent.p50() <= 20 ? "typed get_session meets recent-10 only"
                             : full.p50() <= 5000 ? "typed get_session meets full only"
                                                  : "typed get_session misses both";
    x.out["target_met_by"] = typed_ok ? std::string("get_session (typed events)")
                             : text_ok ? std::string("get_session_json (JSON text); ") + typed_part
                                       : std::string("neither form");
    x.snapshot_engine();
  }
  return x.finish(tdesc, ok && x.errors.count == 0);
}

ojson workload_d(const config& cfg) {
  run_ctx x(cfg, "d");
  const std::size_t sessions = scaled(cfg, 1000, 1), per = 100, width = 64;
  const std::size_t users = std::min<std::size_t>(100, sessions);
  const double events = double(sessions * per);
  x.out["description"] = "sessions x 100 events; RSS growth over the pre-run baseline";
  x.out["sessions"] = sessions;
  x.out["events"] = sessions * per;
  x.out["in_flight"] = std::min(width, sessions);
  const bool applies = cfg.mode != durability::memory;
  std::string tdesc = applies ? "rss_growth_mb_per_100k_events <= 64"
                              : "none for memory (the memory store holds the data in RAM; "
                                "64 MB per 100k events is set for LMDB)";
  bool ok = false;
  auto ref_of = [&](std::size_t j) {
    return session_ref{"bench-d", sid("u", j % users), sid("s", j)};
  };
  if (x.open() && create_sessions(x, sessions, width, ref_of, "d")) {
    samples lat;
    x.cpu_start();
    double secs = append_loop(
      x, sessions, per, width, ref_of, [](std::size_t, std::size_t k) { return step_delta(k); },
      lat, "d");
    x.cpu_stop(events);
    x.out["events_per_s"] = round_to(events / secs, 0);
    x.out["latency_of"] = "append ack (async API, 64 callback chains)";
    put_latency(x.out, "", lat);
    x.snapshot_engine();
    double per100k = x.rss_growth_mb * 100000.0 / events;
    x.out["rss_growth_mb_per_100k_events"] = round_to(per100k, 1);
    x.out["rss_anon_growth_mb_per_100k_events"] = round_to(x.anon_growth_mb * 100000.0 / events, 1);
    ok = !applies || per100k <= 64;
  }
  return x.finish(tdesc, ok && x.errors.count == 0);
}

ojson workload_e(const config& cfg) {
  run_ctx x(cfg, "e");
  const std::size_t sessions = scaled(cfg, 1000000, 1000), reads = scaled(cfg, 10000, 100),
                    width = 256, users = std::max<std::size_t>(1, sessions / 1000);
  x.out["description"] =
    "sessions created with one event each, random full reads, peak RSS, reopen";
  x.out["sessions"] = sessions;
  x.out["users"] = users;
  x.out["events"] = sessions;
  x.out["reads"] = reads;
  x.out["in_flight"] = std::min(width, sessions);
  const bool durable = cfg.mode != durability::memory;
  std::string tdesc = durable ? "peak_rss_mb <= 512 and reopen_s <= 1 (at 1,000,000 sessions)"
                              : "peak_rss_mb <= 512 (at 1,000,000 sessions; no reopen in memory)";
  bool ok = false;
  auto ref_of = [&](std::size_t j) {
    return session_ref{"bench-e", sid("u", j % users), sid("s", j)};
  };
  if (x.open(std::chrono::milliseconds(1000))) {
    samples lat;
    lat.us.assign(sessions, 0.0);
    std::uint64_t max_live = 0;
    double secs = 0, max_anon = 0;
    {
      progress prog(x.eng.get(), "e create+append", sessions * 2);
      x.cpu_start();
      auto t0 = steady::now();
      closed_loop::run(
        sessions, 2, width,
        [&](std::size_t j, std::size_t k, closed_loop::done_fn done) {
          auto ref = ref_of(j);
          if (k == 0) {
            create_request c{ref.app_name, ref.user_id, ref.session_id, json::object()};
            x.eng->create_session(std::move(c), [&x, done](result<session> r) {
              if (!r)
                x.errors.add(r.err());
              done(r.ok());
            });
            return;
          }
          auto req = make_append(ref, step_delta(j));
          auto t = steady::now();
          auto* slot = &lat.us[j];
          x.eng->append_event(std::move(req), [&x, done, t, slot](result<append_result> r) {
            *slot = us_between(t, steady::now());
            if (!r)
              x.errors.add(r.err());
            done(r.ok());
          });
        },
        &prog);
      secs = since(t0);
      x.cpu_stop(double(sessions), "session");
      max_live = prog.max_live();
      max_anon = prog.max_anon_mb();
    }
    x.out["events_per_s"] = round_to(double(sessions) / secs, 0);
    x.out["sessions_per_s"] = round_to(double(sessions) / secs, 0);
    x.out["load_seconds"] = round_to(secs, 3);
    put_latency(x.out, "append_ack_", lat);
    x.out["max_sessions_live"] = std::max<std::uint64_t>(max_live, x.eng->stats().sessions_live);
    samples rd;
    std::mt19937_64 rng(42);
    for (std::size_t i = 0; i < reads && x.errors.count == 0; ++i) {
      get_request g;
      g.ref = ref_of(rng() % sessions);
      auto id = g.ref.session_id;
      auto t = steady::now();
      auto r = x.eng->get_session(std::move(g));
      rd.us.push_back(us_between(t, steady::now()));
      if (!r)
        x.errors.add(r.err());
      else if (!*r || (*r)->events.size() != 1)
        x.errors.add("get_session of " + id + " did not return its one event");
    }
    x.out["latency_of"] = "get_session (full) of a random session";
    put_latency(x.out, "", rd);
    x.snapshot_engine();
    double peak = read_mem().hwm_mb;
    x.out["peak_rss_anon_mb"] = round_to(std::max(max_anon, read_mem().anon_mb), 1);
    x.out["peak_rss_anon_mb_of"] = "RssAnon sampled every 250 ms while loading";
    auto tc = steady::now();
    x.close();
    x.out["close_s"] = round_to(since(tc), 3);
    ok = peak <= 512;
    if (durable && x.errors.count == 0) {
      auto tr = steady::now();
      bool opened = x.reopen();
      double reopen = since(tr);
      x.out["reopen_s"] = round_to(reopen, 4);
      if (opened) {
        get_request g;
        g.ref = ref_of(sessions - 1);
        auto t = steady::now();
        auto r = x.eng->get_session(std::move(g));
        x.out["first_read_after_reopen_us"] = round_to(us_between(t, steady::now()), 1);
        if (!r || !*r || (*r)->version != 1)
          x.errors.add("after reopen, the last session is not there with version 1");
        x.close();
      }
      ok = ok && reopen <= 1.0;
    } else {
      x.out["reopen_s"] = nullptr;
    }
  }
  return x.finish(tdesc, ok && x.errors.count == 0);
}

ojson workload_f(const config& cfg) {
  run_ctx x(cfg, "f");
  const std::size_t sessions = scaled(cfg, 100000, 300), page = 100, reads = 300, width = 64;
  x.out["description"] = "list_sessions of one app: first page and a deep page by token";
  x.out["sessions"] = sessions;
  x.out["page_size"] = page;
  x.out["reads"] = reads;
  std::string tdesc = "first_p50_us <= 5000 and deep_p50_us <= 5000";
  bool ok = false;
  auto ref_of = [&](std::size_t j) {
    return session_ref{"bench-f", sid("u", j % 100), sid("s", j)};
  };
  auto tcreate = steady::now();
  if (x.open() && create_sessions(x, sessions, width, ref_of, "f")) {
    double csecs = since(tcreate);
    x.out["sessions_per_s"] = round_to(double(sessions) / csecs, 0);
    // Walk every page once: counts the sessions and finds the deep token.
    std::vector<std::string> tokens;
    std::size_t seen = 0;
    auto tw = steady::now();
    std::string token;
    for (;;) {
      list_request l;
      l.app_name = "bench-f";
      l.page_size = static_cast<std::int64_t>(page);
      l.page_token = token;
      auto r = x.eng->list_sessions(std::move(l));
      if (!r) {
        x.errors.add(r.err());
        break;
      }
      seen += r->sessions.size();
      if (!r->next_page_token)
        break;
      token = *r->next_page_token;
      tokens.push_back(token);
    }
    x.out["walk_seconds"] = round_to(since(tw), 3);
    x.out["pages"] = tokens.size() + 1;
    if (seen != sessions)
      x.errors.add("listing returned " + std::to_string(seen) + " sessions, expected " +
                   std::to_string(sessions));
    // The token of the page 90% of the way through.
    std::string deep = tokens.empty() ? std::string() : tokens[tokens.size() * 9 / 10];
    x.out["deep_page_index"] = tokens.empty() ? 0 : tokens.size() * 9 / 10 + 1;
    auto timed = [&](const std::string& tok, samples& s) {
      for (std::size_t i = 0; i < reads && x.errors.count == 0; ++i) {
        list_request l;
        l.app_name = "bench-f";
        l.page_size = static_cast<std::int64_t>(page);
        l.page_token = tok;
        auto t = steady::now();
        auto r = x.eng->list_sessions(std::move(l));
        s.us.push_back(us_between(t, steady::now()));
        if (!r)
          x.errors.add(r.err());
        else if (r->sessions.empty())
          x.errors.add("an empty page");
      }
    };
    samples first, deepp;
    timed("", first);
    timed(deep, deepp);
    x.out["latency_of"] = "list_sessions deep page (by token)";
    put_latency(x.out, "", deepp);
    put_latency(x.out, "first_", first);
    put_latency(x.out, "deep_", deepp);
    ok = first.p50() <= 5000 && deepp.p50() <= 5000;
    x.snapshot_engine();
  }
  return x.finish(tdesc, ok && x.errors.count == 0);
}

ojson workload_g(const config& cfg) {
  run_ctx x(cfg, "g");
  const std::size_t sessions = scaled(cfg, 100, 4), per = 50;
  const std::size_t users = std::max<std::size_t>(1, std::min<std::size_t>(10, sessions / 2));
  x.out["description"] =
    "sessions of users all writing one user: key per user and one app: key, concurrently";
  x.out["sessions"] = sessions;
  x.out["users"] = users;
  x.out["events"] = sessions * per + sessions;
  x.out["in_flight"] = sessions;
  const std::string app = "bench-g";
  auto ref_of = [&](std::size_t j) { return session_ref{app, sid("u", j % users), sid("s", j)}; };
  auto value_of = [](std::size_t j, std::size_t k) {
    return "s" + std::to_string(j) + "#" + std::to_string(k);
  };
  bool correct = true;
  std::vector<std::string> failed_checks;
  auto check = [&](bool c, const std::string& what) {
    if (!c) {
      correct = false;
      if (failed_checks.size() < 5)
        failed_checks.push_back(what);
    }
  };
  auto scope_value = [&](const std::optional<std::string>& user) -> std::string {
    auto r = user ? x.eng->get_user_state(app, *user) : x.eng->get_app_state(app);
    if (!r) {
      x.errors.add(r.err());
      return "<error>";
    }
    return r->value("last", std::string("<missing>"));
  };
  // Every reader agrees: scope actors, and each session's merged snapshot.
  auto check_agree = [&](const char* phase) {
    auto a = scope_value(std::nullopt);
    for (std::size_t u = 0; u < users; ++u) {
      auto uv = scope_value(sid("u", u));
      for (std::size_t j = u; j < sessions; j += users) {
        get_request g;
        g.ref = ref_of(j);
        g.num_recent_events = 0;
        auto r = x.eng->get_session(std::move(g));
        if (!r || !*r) {
          check(false, std::string(phase) + ": session " + std::to_string(j) + " unreadable");
          continue;
        }
        auto& st = (*r)->state;
        check(st.value("user:last", std::string()) == uv,
              std::string(phase) + ": session " + std::to_string(j) +
                " sees user:last different from the user scope");
        check(st.value("app:last", std::string()) == a,
              std::string(phase) + ": session " + std::to_string(j) +
                " sees app:last different from the app scope");
      }
    }
  };
  bool ok = false;
  if (x.open() && create_sessions(x, sessions, sessions, ref_of, "g")) {
    samples lat;
    x.cpu_start();
    double secs = append_loop(
      x, sessions, per, sessions, ref_of,
      [&](std::size_t j, std::size_t k) {
        auto v = value_of(j, k);
        return json{{"user:last", v}, {"app:last", v}, {"step", k}};
      },
      lat, "g");
    x.cpu_stop(double(sessions * per));
    x.out["events_per_s"] = round_to(double(sessions * per) / secs, 0);
    x.out["latency_of"] = "append ack (async API, one chain per session)";
    put_latency(x.out, "", lat);
    // 1. After the concurrent phase: a session's writes commit in its order, so
    // each final value must be the last write of one of the writing sessions.
    auto a = scope_value(std::nullopt);
    bool a_ok = false;
    for (std::size_t j = 0; j < sessions; ++j)
      a_ok = a_ok || a == value_of(j, per - 1);
    check(a_ok, "app:last = '" + a + "' is not the last write of any session");
    for (std::size_t u = 0; u < users; ++u) {
      auto v = scope_value(sid("u", u));
      bool u_ok = false;
      for (std::size_t j = u; j < sessions; j += users)
        u_ok = u_ok || v == value_of(j, per - 1);
      check(u_ok, "user:last of u" + std::to_string(u) + " = '" + v +
                    "' is not the last write of any of its sessions");
    }
    check_agree("concurrent");
    for (std::size_t j = 0; j < sessions; ++j) {
      get_request g;
      g.ref = ref_of(j);
      g.num_recent_events = 0;
      auto r = x.eng->get_session(std::move(g));
      check(r && *r && (*r)->version == per, "session " + std::to_string(j) + " lost events");
    }
    // 2. A sequential tail: one more write per session, each awaited; the last
    // acknowledged write of each key is then known exactly.
    std::vector<std::string> want_user(users);
    std::string want_app;
    for (std::size_t j = 0; j < sessions; ++j) {
      auto v = "tail-" + std::to_string(j);
      auto r = x.eng->append_event(
        make_append(ref_of(j), json{{"user:last", v}, {"app:last", v}}));
      if (!r) {
        x.errors.add(r.err());
        break;
      }
      want_user[j % users] = v;
      want_app = v;
    }
    auto verify_tail = [&](const char* phase) {
      check(scope_value(std::nullopt) == want_app,
            std::string(phase) + ": app:last is not the last acknowledged write");
      for (std::size_t u = 0; u < users; ++u)
        check(scope_value(sid("u", u)) == want_user[u],
              std::string(phase) + ": user:last of u" + std::to_string(u) +
                " is not the last acknowledged write");
      check_agree(phase);
    };
    verify_tail("tail");
    x.snapshot_engine();
    if (cfg.mode != durability::memory) {
      x.close();
      if (x.reopen())
        verify_tail("reopened");
    }
    ok = correct;
  }
  x.out["correct"] = correct && x.errors.count == 0;
  if (!failed_checks.empty())
    x.out["failed_checks"] = failed_checks;
  return x.finish("correct: final user:/app: values equal the last acknowledged write",
                  ok && x.errors.count == 0);
}

// -- the command ------------------------------------------------------------------

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
    if (a == "--workload") {
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
    } else if (a == "--dir") {
      cfg.base_dir = v;
    } else if (a == "--threads") {
      auto n = whole_number(v, 0, 256);
      if (!n)
        return usage_error("--threads takes a number 0..256");
      cfg.threads = static_cast<std::size_t>(*n);
    } else if (a == "--max-resident-mb") {
      auto n = whole_number(v, 0, std::uint64_t{1} << 24);
      if (!n)
        return usage_error("--max-resident-mb takes a number 0..16777216");
      cfg.max_resident_mb = *n;
    } else if (a == "--spin-us") {
      auto n = whole_number(v, 0, 10000);
      if (!n)
        return usage_error("--spin-us takes a number 0..10000");
      cfg.spin_us = static_cast<long>(*n);
    } else if (a == "--max-store-mb") {
      auto n = whole_number(v, 1, std::uint64_t{1} << 24);
      if (!n)
        return usage_error("--max-store-mb takes a number 1..16777216");
      cfg.max_store_mb = *n;
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
  std::string todo;
  if (cfg.workloads == "all") {
    todo = "abcdefg";
  } else {
    for (std::size_t p = 0; p < cfg.workloads.size(); ++p) {
      char c = cfg.workloads[p];
      if (c == ',')
        continue;
      bool alone = (p + 1 == cfg.workloads.size() || cfg.workloads[p + 1] == ',');
      if (c < 'a' || c > 'g' || !alone)
        return usage_error("unknown workload '" + cfg.workloads + "' (a..g, a list, or all)");
      todo += c;
    }
  }
  if (cfg.mode != durability::memory) {
    std::error_code ec;
    if (!std::filesystem::is_directory(cfg.base_dir, ec))
      return usage_error("--dir '" + cfg.base_dir + "' is not a directory");
  }
  std::signal(SIGINT, on_interrupt);
  std::signal(SIGTERM, on_interrupt);
  bool failed = false;
  for (char w : todo) {
    ojson line;
    switch (w) {
      case 'a':
        line = workload_a(cfg);
        break;
      case 'b':
        line = workload_b(cfg);
        break;
      case 'c':
        line = workload_c(cfg);
        break;
      case 'd':
        line = workload_d(cfg);
        break;
      case 'e':
        line = workload_e(cfg);
        break;
      case 'f':
        line = workload_f(cfg);
        break;
      default:
        line = workload_g(cfg);
        break;
    }
    std::cout << line.dump() << std::endl;
    if (line.value("errors", 0) != 0 || (line.contains("correct") && !line["correct"]))
      failed = true;
    if (line.value("errors", 0) != 0)
      std::fprintf(stderr, "bench %c: %s\n", w, line.value("first_error", std::string()).c_str());
  }
  return failed ? 1 : 0;
}

static const bool registered = register_command(
  {"bench", "run benchmark workloads a..g in-process; one JSON line each", run_bench});

} // namespace

} // namespace agentstate::tools
