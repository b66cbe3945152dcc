// SPDX-License-Identifier: Apache-2.0
// tools/bench/measures.cpp: timers, samples and the /proc readings of
// measures.hpp.
#include "tools/bench/measures.hpp"

#include <malloc.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace agentstate::tools::bench {

double since(steady::time_point t0) {
  return std::chrono::duration<double>(steady::now() - t0).count();
}

double us_between(steady::time_point a, steady::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

double round_to(double x, int digits) {
  if (!std::isfinite(x))
    return x;
  double f = std::pow(10.0, digits);
  return std::round(x * f) / f;
}

double round_sig(double x, int significant) {
  if (!std::isfinite(x) || x == 0)
    return x;
  int magnitude = static_cast<int>(std::floor(std::log10(std::fabs(x))));
  return round_to(x, significant - 1 - magnitude);
}

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

void reset_memory_marks() {
  ::malloc_trim(0);
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
}

double cpu_seconds() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  auto sec = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) / 1e6; };
  return sec(ru.ru_utime) + sec(ru.ru_stime);
}

double written_bytes() {
  std::ifstream in("/proc/self/io");
  std::string line;
  while (std::getline(in, line))
    if (line.compare(0, 6, "wchar:") == 0)
      return std::strtod(line.c_str() + 6, nullptr);
  return 0;
}

double load_average() {
  double x = -1;
  std::ifstream in("/proc/loadavg");
  in >> x;
  return x;
}

double samples::pct(double q) {
  if (us.empty())
    return std::nan("");
  if (!sorted_) {
    std::sort(us.begin(), us.end());
    sorted_ = true;
  }
  auto i = static_cast<std::size_t>(q * static_cast<double>(us.size()));
  return us[std::min(i, us.size() - 1)];
}

void put_latency(ojson& out, const char* prefix, samples& s) {
  out[std::string(prefix) + "p50_us"] = round_to(s.p50(), 1);
  out[std::string(prefix) + "p99_us"] = round_to(s.p99(), 1);
}

void put_headline_latency(ojson& out, const char* of, samples& s) {
  out["latency_of"] = of;
  put_latency(out, "", s);
}

} // namespace agentstate::tools::bench
