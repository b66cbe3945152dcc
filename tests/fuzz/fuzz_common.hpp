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
// a known data.kind, never "internal" (internal means a bug). A line without
// an id must be a watch's notification (`changes`, `watch_ended`) of the
// documented shape, and a stream's watches must keep their contract: changes
// in commit order with each once (cursor sequences rising across a watch's
// notifications), nothing after its watch_ended. A violation is returned as
// text (the fuzzer aborts on it, the replay test fails).
//
// Change-feed cursors name their store (an epoch drawn when the store is
// made), so a seed cannot spell a cursor of the engine it runs on: replay()
// replaces every "@EPOCH@" in a line with that engine's epoch, so
// "@EPOCH@-3" is the store's own cursor 3 (valid, ahead or expired: the
// engines keep a short change log, fuzz_options()). A line "@DRAIN@" waits
// for the answers to every line before it.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
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

/// The error kinds a client may see (agentstate::errc names, less "ok",
/// "internal" and "data_corrupt": neither is expected of a memory store).
inline const std::set<std::string>& known_kinds() {
  static const std::set<std::string> kinds{
    "already_exists",  "not_found",         "invalid_argument", "version_conflict",
    "too_large",       "storage_full",      "io_error",         "unavailable",
    "unauthenticated", "permission_denied", "condition_failed", "cursor_expired"};
  return kinds;
}

/// A change-feed cursor's sequence (the digits after its last '-'), or
/// nullopt when it has none.
inline std::optional<std::uint64_t> cursor_seq(const json& c) {
  if (!c.is_string())
    return std::nullopt;
  const auto& s = c.get_ref<const std::string&>();
  auto dash = s.rfind('-');
  if (dash == std::string::npos || dash + 1 == s.size() || s.size() - dash > 21)
    return std::nullopt;
  std::uint64_t v = 0;
  for (auto i = dash + 1; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9')
      return std::nullopt;
    v = v * 10 + static_cast<std::uint64_t>(s[i] - '0');
  }
  return v;
}

/// "" when `n` is a well-formed notification (a parsed line without an id),
/// else what is wrong with it. Only its shape: see watch_tracker for order.
inline std::string check_notification(const json& n) {
  const auto method = n.value("method", json());
  if (method != "changes" && method != "watch_ended")
    return "notification of unknown method " + method.dump();
  if (!n.contains("params") || !n["params"].is_object())
    return "notification without params";
  const auto& p = n["params"];
  if (!p.contains("watch_id") || !p["watch_id"].is_string())
    return "notification without watch_id";
  if (method == "watch_ended") {
    static const std::set<std::string> reasons{"cancelled", "closing", "cursor_expired", "failed"};
    if (!p.contains("reason") || !p["reason"].is_string()
        || reasons.count(p["reason"].get<std::string>()) == 0)
      return "watch_ended with an unknown reason";
    if (!p.contains("resume_from") || !cursor_seq(p["resume_from"]))
      return "watch_ended without a resume_from cursor";
    const bool with_error = p["reason"] == "cursor_expired" || p["reason"] == "failed";
    if (with_error != p.contains("error"))
      return "watch_ended: error present iff cursor_expired or failed";
    if (with_error) {
      const auto& e = p["error"];
      if (!e.is_object() || !e.contains("kind") || !e["kind"].is_string()
          || known_kinds().count(e["kind"].get<std::string>()) == 0)
        return "watch_ended with an unknown error kind";
    }
    return {};
  }
  if (!p.contains("cursor") || !cursor_seq(p["cursor"]))
    return "changes without a cursor";
  if (!p.contains("changes") || !p["changes"].is_array() || p["changes"].size() > 256)
    return "changes without an array of at most 256 changes";
  static const std::set<std::string> change_kinds{"create", "append", "delete", "delete_user",
                                                  "delete_app"};
  for (const auto& c : p["changes"]) {
    if (!c.is_object() || !cursor_seq(c.value("cursor", json())))
      return "a change without a cursor";
    if (!c.contains("kind") || !c["kind"].is_string()
        || change_kinds.count(c["kind"].get<std::string>()) == 0)
      return "a change of unknown kind";
    for (const char* k : {"app_name", "user_id", "session_id"})
      if (!c.contains(k) || !c[k].is_string())
        return std::string("a change without ") + k;
    if (!c.contains("version") || !c["version"].is_number_unsigned())
      return "a change without a version";
    if (!c.contains("state_delta") || !c["state_delta"].is_object())
      return "a change without a state_delta object";
    if (!c.contains("state_remove") || !c["state_remove"].is_array())
      return "a change without a state_remove array";
    for (auto it = c["state_delta"].begin(); it != c["state_delta"].end(); ++it)
      if (it.key().rfind("temp:", 0) == 0 || it.key().rfind("turn:", 0) == 0)
        return "a change carries a temp: or turn: key";
  }
  return {};
}

/// One stream's watches as its notifications show them: each watch's
/// cursor sequence must rise (a change once, in commit order) and nothing
/// may follow its watch_ended. Not thread-safe (the sink locks).
struct watch_tracker {
  std::map<std::string, std::uint64_t> last; ///< by watch_id: the newest sequence seen
  std::set<std::string> ended;

  std::string see(const json& n) {
    const auto id = n["params"]["watch_id"].get<std::string>();
    if (ended.count(id))
      return "notification for watch " + id + " after its watch_ended";
    if (n["method"] == "watch_ended") {
      ended.insert(id);
      return {};
    }
    auto& seq = last[id]; // 0 until the first: every cursor of a change is past 0
    for (const auto& c : n["params"]["changes"]) {
      auto s = *cursor_seq(c["cursor"]);
      if (s <= seq)
        return "watch " + id + ": change " + std::to_string(s) + " after " + std::to_string(seq)
          + " (repeated or out of order)";
      seq = s;
    }
    auto page = *cursor_seq(n["params"]["cursor"]);
    if (page < seq)
      return "watch " + id + ": page cursor behind its last change";
    seq = page;
    return {};
  }
};

/// "" when `line` is a well-formed response, else what is wrong with it;
/// an error's data.kind goes to `kind` when given.
inline std::string check_response(const std::string& line, std::string* kind_out = nullptr) {
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
    if (!e.contains("data") || !e["data"].is_object() || !e["data"].contains("kind")
        || !e["data"]["kind"].is_string())
      return "error without data.kind";
    auto kind = e["data"]["kind"].get<std::string>();
    if (kind_out)
      *kind_out = kind;
    if (known_kinds().count(kind) == 0)
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

/// "" when `line` is a well-formed response or notification, else what is
/// wrong with it; a notification also goes through `watches`.
inline std::string check_line(const std::string& line, watch_tracker& watches,
                              bool* notification = nullptr, std::string* kind = nullptr) {
  auto parsed = agentstate::parse_json(line, 1024);
  if (parsed && parsed->is_object() && !parsed->contains("id") && parsed->contains("method")) {
    if (notification)
      *notification = true;
    if (parsed->value("jsonrpc", json()) != "2.0")
      return "notification lacks jsonrpc 2.0";
    auto p = check_notification(*parsed);
    return p.empty() ? watches.see(*parsed) : p;
  }
  return check_response(line, kind);
}

/// The engine options of the fuzzer and its replay: a memory store whose
/// change log keeps 32 changes, so a seed reaches cursor_expired in a few
/// dozen appends.
inline agentstate::options fuzz_options() {
  agentstate::options o;
  o.mode = agentstate::durability::memory;
  o.change_retention.max_entries = 32;
  return o;
}

/// The epoch of `eng`'s change-feed cursors (what precedes the last '-'),
/// which replay() puts in place of "@EPOCH@"; "" if the feed does not answer.
inline std::string store_epoch(agentstate::engine& eng) {
  agentstate::watch_request all;
  all.scope = agentstate::watch_scope::all;
  auto page = eng.read_changes(all, 1);
  if (!page)
    return {};
  auto dash = page->cursor.rfind('-');
  return dash == std::string::npos ? std::string() : page->cursor.substr(0, dash);
}

/// Collects responses and notifications and the first problem seen.
struct sink {
  std::mutex mtx;
  std::size_t responses = 0;
  std::size_t notifications = 0;
  std::map<std::string, std::size_t> kinds; ///< errors answered, by data.kind
  std::string problem;
  std::string problem_line;
  watch_tracker watches; ///< of the current stream

  void operator()(const std::string& line) {
    std::lock_guard<std::mutex> guard(mtx);
    bool notification = false;
    std::string kind;
    auto p = check_line(line, watches, &notification, &kind);
    ++(notification ? notifications : responses);
    if (!kind.empty())
      ++kinds[kind];
    if (!p.empty() && problem.empty()) {
      problem = p;
      problem_line = line.substr(0, 400);
    }
  }

  /// Forgets the watches of the stream before (watch ids restart with each
  /// stream). REQUIRES: that stream's rpc_session is destroyed.
  void new_stream() {
    std::lock_guard<std::mutex> guard(mtx);
    watches = watch_tracker{};
  }
};

/// Feeds `input` line by line, "@EPOCH@" replaced by `epoch`, and waits for
/// every answer; a line "@DRAIN@" is not handed in but waits for every
/// answer so far (requests of different sessions otherwise run
/// concurrently, and a seed could not name a cursor its appends make).
inline void replay(agentstate::protocol::rpc_session& rpc, std::string_view input,
                   const std::string& epoch) {
  std::string buf;
  auto feed = [&](std::string_view line) {
    if (line == "@DRAIN@")
      return rpc.drain();
    static constexpr std::string_view mark = "@EPOCH@";
    if (line.find(mark) == std::string_view::npos)
      return rpc.handle_line(line);
    buf.assign(line);
    for (auto at = buf.find(mark); at != std::string::npos; at = buf.find(mark, at + epoch.size()))
      buf.replace(at, mark.size(), epoch);
    rpc.handle_line(buf);
  };
  std::size_t start = 0;
  while (start <= input.size()) {
    auto nl = input.find('\n', start);
    if (nl == std::string_view::npos) {
      if (start < input.size())
        feed(input.substr(start));
      break;
    }
    feed(input.substr(start, nl - start));
    start = nl + 1;
  }
  rpc.drain();
}

} // namespace fuzzcheck
