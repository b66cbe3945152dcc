// SPDX-License-Identifier: Apache-2.0
// Replays every file of tests/fuzz/regressions/ (inputs that once crashed or
// misbehaved under the fuzzer) and tests/fuzz/corpus/ (the seeds) through
// rpc_session::handle_line, without libFuzzer, with the fuzzer's checks
// (fuzz/fuzz_common.hpp): every response and notification well-formed, each
// watch in order, no internal error, and the engine still serves afterwards;
// then that the change-feed seeds reach the paths they are for, and that the
// checks themselves catch what they claim to. Quick tier; built by any
// compiler.
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

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
      auto eng = MUST(engine::open(fuzzcheck::fuzz_options()));
      const auto epoch = fuzzcheck::store_epoch(*eng);
      REQUIRE(!epoch.empty());
      fuzzcheck::sink out;
      {
        protocol::rpc_session rpc(*eng, [&](std::string line) { out(line); });
        fuzzcheck::replay(rpc, data, epoch);
        // Still serving after the input.
        rpc.handle_line(R"({"jsonrpc":"2.0","id":"alive","method":"stats"})");
        rpc.drain();
      }
      out.new_stream();
      {
        // Again on a stream that must authenticate first.
        protocol::rpc_config cfg;
        cfg.tokens = fuzzcheck::fuzz_tokens();
        protocol::rpc_session rpc(
          *eng, [&](std::string line) { out(line); }, cfg);
        fuzzcheck::replay(rpc, data, epoch);
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
  CHECK(files >= 9);
}

namespace {

// Replays one seed of tests/fuzz/corpus on an open stream of a fresh engine
// and waits (bounded) until `until(sink)` holds, with the stream still open
// (a watch's notifications come from its own thread, after drain()).
template <class Pred>
void replay_seed(const std::string& name, fuzzcheck::sink& out, Pred until) {
  auto path = fs::path(AGENTSTATE_FUZZ_DIR) / "corpus" / name;
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto eng = MUST(engine::open(fuzzcheck::fuzz_options()));
  {
    protocol::rpc_session rpc(*eng, [&](std::string line) { out(line); });
    fuzzcheck::replay(rpc, data, fuzzcheck::store_epoch(*eng));
    auto seen = [&] {
      std::string text;
      std::lock_guard<std::mutex> guard(out.mtx);
      for (auto& [id, seq] : out.watches.last)
        text += " " + id + "@" + std::to_string(seq);
      for (auto& id : out.watches.ended)
        text += " ended:" + id;
      text += " problem: " + out.problem + " " + out.problem_line;
      return text;
    };
    INFO("seed ", name, ": watches seen:", seen());
    REQUIRE(test::eventually(
      [&] {
        std::lock_guard<std::mutex> guard(out.mtx);
        return until(out);
      },
      std::chrono::seconds(10), std::chrono::milliseconds(2)));
  }
  MUST(eng->close());
  INFO("line: ", out.problem_line);
  CHECK(out.problem == "");
}

} // namespace

TEST_CASE("the change-feed seeds reach the feed's paths: notifications of each kind of watch, "
          "unknown ids, foreign, ahead and expired cursors") {
  {
    fuzzcheck::sink out;
    // w1 (all) is unwatched by the seed; w2..w4 (session, user with
    // sessions, app with a prefix) each deliver, then end with the stream.
    replay_seed("change_feed.jsonl", out, [](const fuzzcheck::sink& s) {
      return s.watches.ended.count("w1") && s.watches.last.count("w2") && s.watches.last.count("w3")
        && s.watches.last.count("w4");
    });
    CHECK(out.notifications >= 4);
    CHECK(out.kinds["not_found"] >= 1); // the second unwatch of w1
  }
  {
    fuzzcheck::sink out;
    replay_seed("change_feed_malformed.jsonl", out, [](const fuzzcheck::sink&) { return true; });
    CHECK(out.kinds["invalid_argument"] >= 20);
    CHECK(out.kinds["not_found"] >= 2);
    CHECK(out.notifications == 0); // every watch there is refused
  }
  {
    fuzzcheck::sink out;
    // The log keeps 32 changes (fuzz_options): the seed's early cursors
    // expire (its first two watches are refused, w1 and w2 taken), its watch
    // from a kept cursor (w3) delivers.
    replay_seed("change_feed_expired.jsonl", out,
                [](const fuzzcheck::sink& s) { return s.watches.last.count("w3") > 0; });
    CHECK(out.kinds["cursor_expired"] >= 3);
  }
}

TEST_CASE("the fuzz checks refuse malformed notifications and broken watch order") {
  auto check = [](std::vector<std::string> lines) {
    fuzzcheck::watch_tracker t;
    for (auto& l : lines)
      if (auto p = fuzzcheck::check_line(l, t); !p.empty())
        return p;
    return std::string();
  };
  const std::string change =
    R"({"cursor":"e-%","kind":"append","app_name":"a","user_id":"u","session_id":"s","version":1,"state_delta":{"k":1},"state_remove":[]})";
  auto page = [&](std::vector<int> seqs, int cursor, const std::string& id = "w1") {
    std::string cs;
    for (auto q : seqs) {
      auto c = change;
      c.replace(c.find('%'), 1, std::to_string(q));
      cs += (cs.empty() ? "" : ",") + c;
    }
    return R"({"jsonrpc":"2.0","method":"changes","params":{"watch_id":")" + id + R"(","changes":[)"
      + cs + R"(],"cursor":"e-)" + std::to_string(cursor) + R"("}})";
  };
  const std::string ended =
    R"({"jsonrpc":"2.0","method":"watch_ended","params":{"watch_id":"w1","reason":"cancelled","resume_from":"e-9"}})";
  CHECK(check({page({1, 2}, 2), page({3}, 5), page({}, 6), ended}) == "");
  CHECK(check({page({1, 2}, 2), page({2}, 3)}) != ""); // repeated
  CHECK(check({page({2, 1}, 2)}) != ""); // out of order
  CHECK(check({page({1}, 1), ended, page({2}, 2)}) != ""); // after watch_ended
  CHECK(check({page({3}, 2)}) != ""); // page cursor behind its change
  CHECK(check({page({1}, 1), page({1}, 1, "w2")}) == ""); // watches are separate
  CHECK(
    check(
      {R"({"jsonrpc":"2.0","method":"changes","params":{"watch_id":"w1","changes":[{"cursor":"e-1"}],"cursor":"e-1"}})"})
    != "");
  CHECK(
    check(
      {R"({"jsonrpc":"2.0","method":"watch_ended","params":{"watch_id":"w1","reason":"bored","resume_from":"e-1"}})"})
    != "");
  CHECK(
    check(
      {R"({"jsonrpc":"2.0","method":"watch_ended","params":{"watch_id":"w1","reason":"failed","resume_from":"e-1","error":{"kind":"internal"}}})"})
    != "");
  CHECK(check({R"({"jsonrpc":"2.0","method":"other","params":{}})"}) != "");
  CHECK(
    check(
      {R"({"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"m","data":{"kind":"cursor_expired","oldest":"e-3"}}})"})
    == "");
}
