// SPDX-License-Identifier: Apache-2.0
#include "tools/fault_guard.hpp"

#include <setjmp.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <cstring>

#include "store/kv.hpp"
#include "store/map_guard.hpp"
#include "store/open.hpp"
#include "tools/cli.hpp"

namespace agentstate::tools {

namespace {

std::atomic<std::uint64_t> caught{0};

} // namespace

void install_fault_guard() {
  store::map_guard::install();
}

result<void> guarded(const std::string& what, const std::function<void()>& fn) {
  store::map_guard::point here;
  store::map_guard::point* const outer = store::map_guard::armed();
  if (sigsetjmp(here.jump, 0) == 0) {
    store::map_guard::arm(&here);
    try {
      fn();
    } catch (const store::kv_failure& f) {
      store::map_guard::arm(outer);
      if (f.code == errc::data_corrupt)
        caught.fetch_add(1, std::memory_order_relaxed);
      return error{f.code, what + ": " + f.message};
    } catch (...) {
      store::map_guard::arm(outer);
      throw;
    }
    store::map_guard::arm(outer);
    return {};
  }
  store::map_guard::arm(outer);
  caught.fetch_add(1, std::memory_order_relaxed);
  return error{errc::data_corrupt, what + ": " + store::map_guard::describe(here)};
}

std::uint64_t faults_caught() {
  return caught.load(std::memory_order_relaxed);
}

std::unique_ptr<store::kv_store> open_readonly(const std::string& dir, const std::string& command) {
  install_fault_guard();
  auto kv = store::open_lmdb_readonly(dir);
  if (!kv) {
    say(command, "%s", to_string(kv.err()).c_str());
    return nullptr;
  }
  return std::move(*kv);
}

} // namespace agentstate::tools
