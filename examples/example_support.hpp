// SPDX-License-Identifier: Apache-2.0
// examples/example_support.hpp: what the larger examples share around their
// point, so each file shows only the engine use it is about: the --dir,
// --memory and numeric arguments, a temporary store removed at exit, a fresh
// app name, and the checked claims and the last line they print.
#pragma once

#include <stdlib.h> // mkdtemp

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>

#include "agentstate/options.hpp"

namespace agentstate::examples {

/// Parses --help/-h, --dir DIR, --memory and `--NAME N` (N > 0) for each
/// (name, target) of `numbers`. Returns the exit code when main should stop
/// here (0 after printing `usage` for --help, 2 after a usage error on
/// stderr), or nullopt to go on.
inline std::optional<int> parse_args(int argc, char** argv, const char* prog, const char* usage,
                                     std::string& dir, bool& memory,
                                     std::initializer_list<std::pair<const char*, int*>> numbers) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    try {
      if (a == "--help" || a == "-h") {
        std::fputs(usage, stdout);
        return 0;
      }
      if (a == "--dir" && i + 1 < argc) {
        dir = argv[++i];
        continue;
      }
      if (a == "--memory") {
        memory = true;
        continue;
      }
      int* target = nullptr;
      for (auto& [name, out] : numbers)
        if (a == name)
          target = out;
      if (!target)
        throw std::invalid_argument("unknown or incomplete argument '" + a + "'");
      if (i + 1 >= argc || (*target = std::atoi(argv[++i])) <= 0)
        throw std::invalid_argument(a + " needs a positive number");
    } catch (const std::invalid_argument& e) {
      std::fprintf(stderr, "%s: %s\n%s", prog, e.what(), usage);
      return 2;
    }
  }
  return std::nullopt;
}

/// The store an example runs on: `dir` when given (kept), memory when asked,
/// otherwise a new directory under /tmp that this object removes when
/// destroyed. Declare it before the engine, so the engine closes first.
class example_store {
public:
  example_store(const char* prog, std::string dir, bool memory) : memory_(memory) {
    if (!memory && dir.empty()) {
      std::string tmpl = std::string("/tmp/agentstate-") + prog + "-XXXXXX";
      if (!::mkdtemp(tmpl.data())) {
        std::fprintf(stderr, "%s: mkdtemp: cannot make a temporary store directory\n", prog);
        return;
      }
      dir = tmpl;
      remove_ = true;
    }
    dir_ = std::move(dir);
    ok_ = true;
  }
  example_store(const example_store&) = delete;
  example_store& operator=(const example_store&) = delete;
  ~example_store() {
    std::error_code ec;
    if (remove_)
      std::filesystem::remove_all(dir_, ec);
  }

  /// False when the temporary directory could not be made (already printed).
  bool ok() const { return ok_; }
  const std::string& dir() const { return dir_; }
  /// True for a temporary directory (removed by the destructor).
  bool temporary() const { return remove_; }

  /// True for a store in memory (--memory).
  bool memory() const { return memory_; }

  /// Options for engine::open: this store, durable (sync) unless memory.
  options opts() const {
    options o;
    o.dir = dir_;
    o.mode = memory_ ? durability::memory : durability::sync;
    return o;
  }

private:
  std::string dir_;
  bool memory_ = false, remove_ = false, ok_ = false;
};

/// `prefix`, '-' and a random number below 1,000,000: an app name a kept
/// --dir has most likely not seen, so earlier runs' data stays apart.
inline std::string fresh_app_name(const char* prefix) {
  return std::string(prefix) + "-" + std::to_string(std::random_device{}() % 1000000);
}

/// The claims an example checks, each printed as it is checked ("  ok   WHAT"
/// or "  FAIL WHAT"); `failed` counts the false ones.
struct checklist {
  int failed = 0;
  void operator()(bool ok, const std::string& what) {
    std::printf("  %s %s\n", ok ? "ok  " : "FAIL", what.c_str());
    failed += !ok;
  }
};

/// Prints an example's last line, "PROG: app APP, store WHERE: all checks
/// passed" (FAILED when `failed`), and returns main's exit code (1 when
/// `failed`).
inline int report(const char* prog, const std::string& app, const example_store& store,
                  bool failed) {
  std::printf("%s: app %s, store %s%s: %s\n", prog, app.c_str(),
              store.memory() ? "in memory" : store.dir().c_str(),
              store.temporary() ? " (removed)" : "", failed ? "FAILED" : "all checks passed");
  return failed ? 1 : 0;
}

} // namespace agentstate::examples
