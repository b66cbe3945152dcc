// SPDX-License-Identifier: Apache-2.0
// Replays every file of tests/fuzz/regressions/ (inputs that once crashed or
// misbehaved under the fuzzer) and tests/fuzz/corpus/ (the seeds) through
// rpc_session::handle_line, without libFuzzer, with the fuzzer's checks
// (fuzz/fuzz_common.hpp): every response well-formed, no internal error, and
// the engine still serves afterwards. Quick tier; built by any compiler.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "fuzz/fuzz_common.hpp"
#include "support/test_support.hpp"

using namespace agentstate;
namespace fs = std::filesystem;

namespace {

std::vector<fs::path> inputs_in(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file() && e.path().filename().string().rfind("README", 0) != 0)
      out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

} // namespace

TEST_CASE("fuzz regressions and seeds replay cleanly through rpc_session") {
  std::size_t files = 0;
  for (auto sub : {"regressions", "corpus"}) {
    for (const auto& path : inputs_in(fs::path(AGENTSTATE_FUZZ_DIR) / sub)) {
      INFO("input: ", path.string());
      std::ifstream in(path, std::ios::binary);
      std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      options o;
      o.mode = durability::memory;
      auto eng = MUST(engine::open(o));
      fuzzcheck::sink out;
      {
        protocol::rpc_session rpc(*eng, [&](std::string line) { out(line); });
        fuzzcheck::replay(rpc, data);
        // Still serving after the input.
        rpc.handle_line(R"({"jsonrpc":"2.0","id":"alive","method":"stats"})");
        rpc.drain();
      }
      {
        // Again on a stream that must authenticate first.
        protocol::rpc_config cfg;
        cfg.tokens = fuzzcheck::fuzz_tokens();
        protocol::rpc_session rpc(
          *eng, [&](std::string line) { out(line); }, cfg);
        fuzzcheck::replay(rpc, data);
        rpc.handle_line(R"({"jsonrpc":"2.0","id":"alive","method":"ping"})");
        rpc.drain();
      }
      INFO("response: ", out.problem_line);
      CHECK(out.problem == "");
      CHECK(out.responses >= 1);
      MUST(eng->close());
      ++files;
    }
  }
  MESSAGE(files, " fuzz inputs replayed");
  CHECK(files >= 6);
}
