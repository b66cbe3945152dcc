// SPDX-License-Identifier: Apache-2.0
// tests/fuzz/fuzz_common.hpp: what the protocol fuzzer (protocol_fuzz.cpp,
// libFuzzer, clang) and its regression replay (regressions_test.cpp, doctest,
// any compiler) share: feeding bytes through rpc_session::handle_line and the
// checks every response must pass.
//
// An input is split at '\n' into lines; each line goes to handle_line, then
// drain() waits for every answer. Each input is replayed twice: on a stream
// with every app open (stdio) and on one that must authenticate first
// (fuzz_tokens()), so `authenticate` and the access checks are fuzzed too.
// Every response must be one JSON object with "jsonrpc":"2.0", an "id", and
// exactly one of "result" / "error"; an error must carry an integer code and
// a known data.kind, never "internal" (internal means a bug). A violation is
// returned as text (the fuzzer aborts on it, the replay test fails).
#pragma once

#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "agentstate/engine.hpp"
#include "agentstate/json.hpp"
#include "protocol/auth.hpp"
#include "protocol/rpc_session.hpp"

namespace fuzzcheck {

using agentstate::json;

/// "" when `line` is a well-formed response, else what is wrong with it.
inline std::string check_response(const std::string& line) {
  auto parsed = agentstate::parse_json(line, 1024);
  if (!parsed)
    return "response is not JSON: " + parsed.err().message;
  const json& r = *parsed;
  if (!r.is_object())
    return "response is not an object";
  if (r.value("jsonrpc", json()) != "2.0")
    return "response lacks jsonrpc 2.0";
  if (!r.contains("id"))
    return "response lacks id";
  if (r.contains("result") == r.contains("error"))
    return "response needs exactly one of result and error";
  if (r.contains("error")) {
    const auto& e = r["error"];
    if (!e.is_object() || !e.contains("code") || !e["code"].is_number_integer()
        || !e.contains("message") || !e["message"].is_string())
      return "malformed error member";
    static const std::set<std::string> kinds{
      "already_exists",  "not_found",         "invalid_argument", "version_conflict",
      "too_large",       "storage_full",      "io_error",         "unavailable",
      "unauthenticated", "permission_denied", "condition_failed"};
    if (!e.contains("data") || !e["data"].is_object() || !e["data"].contains("kind")
        || !e["data"]["kind"].is_string())
      return "error without data.kind";
    auto kind = e["data"]["kind"].get<std::string>();
    if (kinds.count(kind) == 0)
      return "error kind '" + kind + "' (" + e["message"].dump() + ")";
  }
  return {};
}

/// The token table inputs are also replayed against (a stream that must
/// authenticate first, as over `serve --auth-file`): one token for every app,
/// one for the apps "app" and "chat". The seed corpus/authenticate.jsonl uses
/// them.
inline std::shared_ptr<const agentstate::protocol::token_source> fuzz_tokens() {
  auto t = agentstate::protocol::token_table::parse(
    "fuzz-all-token-0123456789 *\nfuzz-app-token-0123456789 app,chat\n");
  return std::make_shared<agentstate::protocol::token_source>(std::move(t).value());
}

/// Collects responses and the first problem seen.
struct sink {
  std::mutex mtx;
  std::size_t responses = 0;
  std::string problem;
  std::string problem_line;

  void operator()(const std::string& line) {
    auto p = check_response(line);
    std::lock_guard<std::mutex> guard(mtx);
    ++responses;
    if (!p.empty() && problem.empty()) {
      problem = p;
      problem_line = line.substr(0, 400);
    }
  }
};

/// Feeds `input` line by line and waits for every answer.
inline void replay(agentstate::protocol::rpc_session& rpc, std::string_view input) {
  std::size_t start = 0;
  while (start <= input.size()) {
    auto nl = input.find('\n', start);
    if (nl == std::string_view::npos) {
      if (start < input.size())
        rpc.handle_line(input.substr(start));
      break;
    }
    rpc.handle_line(input.substr(start, nl - start));
    start = nl + 1;
  }
  rpc.drain();
}

} // namespace fuzzcheck
