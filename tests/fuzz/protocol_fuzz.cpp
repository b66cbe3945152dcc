// SPDX-License-Identifier: Apache-2.0
// tests/fuzz/protocol_fuzz.cpp: libFuzzer target over the JSON-RPC line
// handler (protocol/rpc_session.hpp, rpc_session::handle_line) on an in-memory
// engine, the change feed's methods (watch, unwatch, read_changes) included.
// Built only with -DAGENTSTATE_FUZZ=ON and clang (docs/testing.md, tier
// "fuzz"). Aborts when a response or notification is malformed, a watch
// breaks its order, or an error is internal; ASan/UBSan abort on memory
// errors. A crasher goes to
// tests/fuzz/regressions/ (replayed by the quick test fuzz_regressions_test).
#include <cstdio>
#include <cstdlib>

#include "fuzz/fuzz_common.hpp"

using namespace agentstate;

namespace {

// The engine lives for the whole run; each input gets streams of its own, so
// the watches it starts end with it (as a connection's do) instead of piling
// up across inputs.
struct harness {
  std::unique_ptr<engine> eng;
  std::string epoch; ///< of eng's change-feed cursors (fuzz_common.hpp)
  fuzzcheck::sink out;

  harness() {
    auto o = fuzzcheck::fuzz_options();
    o.threads = 2;
    auto r = engine::open(o);
    if (!r) {
      std::fprintf(stderr, "engine::open: %s\n", to_string(r.err()).c_str());
      std::abort();
    }
    eng = std::move(r).value();
    epoch = fuzzcheck::store_epoch(*eng);
    if (epoch.empty()) {
      std::fprintf(stderr, "protocol_fuzz: the change feed gave no cursor\n");
      std::abort();
    }
  }
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static harness* h = new harness; // lives for the whole run
  static const auto tokens = fuzzcheck::fuzz_tokens();
  std::string_view input(reinterpret_cast<const char*>(data), size);
  {
    protocol::rpc_session open(*h->eng, [](std::string line) { h->out(line); });
    fuzzcheck::replay(open, input, h->epoch);
  }
  h->out.new_stream();
  {
    // A fresh stream that must authenticate: the input decides whether it does.
    agentstate::protocol::rpc_config cfg;
    cfg.tokens = tokens;
    agentstate::protocol::rpc_session gated(
      *h->eng, [](std::string line) { h->out(line); }, cfg);
    fuzzcheck::replay(gated, input, h->epoch);
  }
  h->out.new_stream();
  std::lock_guard<std::mutex> guard(h->out.mtx);
  if (!h->out.problem.empty()) {
    std::fprintf(stderr, "protocol_fuzz: %s\nresponse: %s\n", h->out.problem.c_str(),
                 h->out.problem_line.c_str());
    std::abort();
  }
  return 0;
}
