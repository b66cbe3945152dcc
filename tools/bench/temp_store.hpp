// SPDX-License-Identifier: Apache-2.0
// tools/bench/temp_store.hpp: the fresh store directory each workload runs
// on, and its removal: on destruction, and when the process is interrupted
// (SIGINT, SIGTERM) once install_interrupt_handler() has run.
#pragma once

#include <string>

namespace agentstate::tools::bench {

/// Makes a new directory named `prefix` plus six random characters
/// (mkdtemp(3)); returns its path, or "" when it cannot be made.
std::string make_temp_dir(const std::string& prefix);

/// Installs the SIGINT/SIGTERM handler: it removes the store of the live
/// temp_store, if any (its LMDB files, its lock file, then the directory),
/// and re-raises the signal with the default action. Call once, from the
/// main thread.
void install_interrupt_handler();

/// A fresh directory for one store under `base`, removed (recursively) on
/// destruction. The interrupt handler removes the newest one made; destroying
/// any one disarms it, so hold one at a time. Made and destroyed on the main
/// thread.
class temp_store {
public:
  explicit temp_store(const std::string& base);
  ~temp_store();
  temp_store(const temp_store&) = delete;
  temp_store& operator=(const temp_store&) = delete;

  /// False when the directory could not be made (path() is then empty).
  bool ok() const { return !path_.empty(); }
  const std::string& path() const { return path_; }
  /// The data file's allocated size in MiB (a writable map's file is sparse
  /// at the map's maximum size); 0 when it does not exist.
  double size_mb() const;

private:
  std::string path_;
};

} // namespace agentstate::tools::bench
