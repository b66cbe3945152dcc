// SPDX-License-Identifier: Apache-2.0
// tests/support/history.hpp: a JSONL history of a cluster test's operations,
// judged by the history checker (tools/history_check.py, whose header gives
// the record format). REQUIRES: the including target defines
// AGENTSTATE_SOURCE_DIR; doctest is included.
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "agentstate/json.hpp"
#include "server/net_support.hpp"

namespace agentstate::test {

/// The history, in the real-time order its lines were added. Thread-safe.
class history_log {
public:
  void add(json line) {
    std::lock_guard<std::mutex> lock(mtx_);
    lines_.push_back(line.dump());
  }
  std::string text() {
    std::lock_guard<std::mutex> lock(mtx_);
    std::string out;
    for (auto& l : lines_)
      out += l + "\n";
    return out;
  }
  /// Writes the history to `path` and CHECKs that the checker accepts it.
  void check(const std::string& path) {
    net::write_text(path, text());
    auto checked = net::shell("/usr/bin/python3 " + std::string(AGENTSTATE_SOURCE_DIR)
                              + "/tools/history_check.py " + path);
    MESSAGE("history_check: ", checked.second);
    CHECK(checked.first == 0);
    CHECK(checked.second.find("\"ok\":true") != std::string::npos);
  }

private:
  std::mutex mtx_;
  std::vector<std::string> lines_;
};

} // namespace agentstate::test
