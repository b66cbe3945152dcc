// SPDX-License-Identifier: Apache-2.0
// tests/fuzz/protocol_fuzz.cpp: libFuzzer target over the JSON-RPC line
// handler (protocol/rpc_session.hpp, rpc_session::handle_line) on an in-memory
// engine. Built only with -DAGENTSTATE_FUZZ=ON and clang (docs/testing.md,
// tier "fuzz"). Aborts when a response is malformed or reports an internal
// error; ASan/UBSan abort on memory errors. A crasher goes to
// tests/fuzz/regressions/ (replayed by the quick test fuzz_regressions_test).
#include <cstdio>
#include <cstdlib>

#include "fuzz/fuzz_common.hpp"

using namespace agentstate;

namespace {

struct harness {
  std::unique_ptr<engine> eng;
  fuzzcheck::sink out;
  std::unique_ptr<protocol::rpc_session> rpc;

  harness() {
    options o;
    o.mode = durability::memory;
    o.threads = 2;
    auto r = engine::open(o);
    if (!r) {
      std::fprintf(stderr, "engine::open: %s\n", to_string(r.err()).c_str());
      std::abort();
    }
    eng = std::move(r).value();
    rpc = std::make_unique<protocol::rpc_session>(*eng, [this](std::string line) { out(line); });
  }
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static harness* h = new harness; // lives for the whole run
  static const auto tokens = fuzzcheck::fuzz_tokens();
  std::string_view input(reinterpret_cast<const char*>(data), size);
  fuzzcheck::replay(*h->rpc, input);
  {
    // A fresh stream that must authenticate: the input decides whether it does.
    agentstate::protocol::rpc_config cfg;
    cfg.tokens = tokens;
    agentstate::protocol::rpc_session gated(
      *h->eng, [](std::string line) { h->out(line); }, cfg);
    fuzzcheck::replay(gated, input);
  }
  std::lock_guard<std::mutex> guard(h->out.mtx);
  if (!h->out.problem.empty()) {
    std::fprintf(stderr, "protocol_fuzz: %s\nresponse: %s\n", h->out.problem.c_str(),
                 h->out.problem_line.c_str());
    std::abort();
  }
  return 0;
}
