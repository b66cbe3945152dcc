// SPDX-License-Identifier: Apache-2.0
// tools/bench/run.cpp: run_ctx and the configuration helpers of run.hpp.
#include "tools/bench/run.hpp"

#include <algorithm>
#include <cmath>
#include <string_view>
#include <thread>
#include <utility>

namespace agentstate::tools::bench {

const char* mode_name(durability d) {
  switch (d) {
    case durability::sync: return "sync";
    case durability::nosync: return "nosync";
    case durability::memory: return "memory";
  }
  return "?";
}

std::size_t scaled(const config& cfg, double base, std::size_t min) {
  auto n = static_cast<std::size_t>(std::llround(base * cfg.scale));
  return std::max(n, min);
}

ojson pick_stats(const ojson& all, std::initializer_list<const char*> keys) {
  ojson out;
  for (const char* k : keys) {
    if (std::string_view(k) == "mean_batch") {
      auto commits = all.value("commits", 0.0);
      out[k] = commits > 0 ? round_to(all.value("batched_writes", 0.0) / commits, 2) : 0.0;
    } else {
      out[k] = all.value(k, std::uint64_t{0});
    }
  }
  return out;
}

void error_log::add(const error& e) {
  if (count.fetch_add(1) == 0) {
    std::lock_guard<std::mutex> guard(mtx);
    first = to_string(e);
  }
}

void error_log::add(const std::string& what) {
  if (count.fetch_add(1) == 0) {
    std::lock_guard<std::mutex> guard(mtx);
    first = what;
  }
}

run_ctx::run_ctx(const config& cfg, std::string name) : cfg_(cfg), name_(std::move(name)) {
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

void run_ctx::describe(const char* description,
                       std::initializer_list<std::pair<const char*, ojson>> sizes) {
  out["description"] = description;
  for (auto& [key, value] : sizes)
    out[key] = value;
}

bool run_ctx::open(std::chrono::milliseconds idle_timeout) {
  opts.mode = cfg_.mode;
  opts.threads = cfg_.threads;
  opts.scheduler =
    cfg_.scheduler == "stealing" ? scheduler_policy::stealing : scheduler_policy::sharing;
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

bool run_ctx::reopen() {
  auto r = engine::open(opts);
  if (!r) {
    errors.add(r.err());
    return false;
  }
  eng = std::move(*r);
  return true;
}

void run_ctx::cpu_start() {
  cpu0_ = cpu_seconds();
  wchar0_ = written_bytes();
}

void run_ctx::cpu_stop(double n, const char* unit) {
  double c = cpu_seconds() - cpu0_;
  out["cpu_s"] = round_to(c, 3);
  out[std::string("cpu_us_per_") + unit] = round_to(n > 0 ? c * 1e6 / n : 0.0, 1);
  if (cfg_.mode != durability::memory)
    out[std::string("written_kb_per_") + unit] =
      round_to(n > 0 ? (written_bytes() - wchar0_) / 1024.0 / n : 0.0, 2);
}

void run_ctx::snapshot_engine() {
  auto& o = eng->opts();
  ojson s;
  s["scheduler"] = o.scheduler == scheduler_policy::sharing ? "sharing" : "stealing";
  s["threads"] = o.threads;
  s["idle_timeout_ms"] = o.idle_timeout.count();
  s["max_batch_count"] = o.max_batch_count;
  s["max_batch_bytes"] = o.max_batch_bytes;
  s["max_store_mb"] = o.max_store_bytes >> 20;
  s["max_resident_mb"] = o.max_resident_store_bytes >> 20;
  s["spin_wait_us"] = o.spin_wait.count();
  // Whether idle CAF workers poll before parking (actors/polling_sharing.hpp).
  s["workers_poll"] = o.scheduler == scheduler_policy::sharing && o.spin_wait.count() > 0;
  s["write_map"] = o.write_map;
  settings = s;
  stats =
    pick_stats(to_json(eng->stats()),
               {"commits", "batched_writes", "max_batch", "mean_batch", "appends", "activations",
                "passivations", "sessions_live", "failed_writes", "resident_trims"});
  auto m = read_mem();
  rss_growth_mb = m.rss_mb - base_.rss_mb;
  anon_growth_mb = m.anon_mb - base_.anon_mb;
  file_growth_mb = m.file_mb - base_.file_mb;
  peak_rss_mb = m.hwm_mb;
  if (dir)
    store_mb = dir->size_mb();
}

void run_ctx::close() {
  if (!eng)
    return;
  if (auto r = eng->close(); !r)
    errors.add(r.err());
  eng.reset();
}

ojson run_ctx::finish(const ojson& target, bool meets) {
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

} // namespace agentstate::tools::bench
