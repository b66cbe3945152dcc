// SPDX-License-Identifier: Apache-2.0
// tests/support/test_support.hpp: shared helpers of the engine test suite.
// Header-only. Uses the public headers only (include/agentstate/).
//
// What is here:
//   * temp_dir: an RAII directory under /tmp, removed recursively on scope exit.
//   * store_kind, memory_store / lmdb_store tags (for TEST_CASE_TEMPLATE) and
//     open_engine(): an engine on the in-memory store or on LMDB (nosync, in a
//     fresh temp dir).
//   * request/event builders and REQUIRE_OK / CHECK_OK / REQUIRE_ERR /
//     CHECK_ERR / MUST, which print the engine's error message on failure.
//
// Doctest assertions throw on REQUIRE failure: use them only on the test's own
// thread. Worker threads record what they saw and the test checks it after
// join().
#pragma once

#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "agentstate/engine.hpp"
#include "agentstate/error.hpp"
#include "agentstate/json.hpp"
#include "agentstate/options.hpp"
#include "agentstate/types.hpp"

namespace agentstate::test {

// -- temp directory -----------------------------------------------------------

/// A fresh directory /tmp/agentstate-test-XXXXXX, removed with everything in
/// it when this object is destroyed. Not copyable, not movable.
class temp_dir {
public:
  temp_dir() {
    std::string tmpl = "/tmp/agentstate-test-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()) == nullptr)
      throw std::runtime_error(std::string("mkdtemp failed: ") + std::strerror(errno));
    path_ = buf.data();
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }

private:
  std::filesystem::path path_;
};

// -- stores -------------------------------------------------------------------

enum class store_kind { memory, lmdb };

inline const char* to_string(store_kind k) {
  return k == store_kind::memory ? "memory" : "lmdb";
}

/// Tag types for TEST_CASE_TEMPLATE(name, S, memory_store, lmdb_store).
struct memory_store {
  static constexpr store_kind kind = store_kind::memory;
};
struct lmdb_store {
  static constexpr store_kind kind = store_kind::lmdb;
};

/// Options for `k`: durability::memory, or durability::nosync (fast) in `dir`,
/// with options::write_map when the environment sets
/// AGENTSTATE_TEST_WRITE_MAP=1 (the `*_write_map` CTest entries).
inline options make_options(store_kind k, const std::string& dir) {
  options o;
  if (k == store_kind::memory) {
    o.mode = durability::memory;
  } else {
    o.mode = durability::nosync;
    o.dir = dir;
    const char* wm = std::getenv("AGENTSTATE_TEST_WRITE_MAP");
    o.write_map = wm && std::string(wm) == "1";
  }
  return o;
}

// -- result assertions ----------------------------------------------------------

template <class T>
std::string describe(const result<T>& r) {
  return r.ok() ? std::string("ok") : ::agentstate::to_string(r.err());
}

/// An engine on the LMDB store in `dir` (durability::nosync), REQUIRE'd to
/// open.
inline std::unique_ptr<engine> open_store_dir(const std::string& dir) {
  options o;
  o.dir = dir;
  o.mode = durability::nosync;
  auto r = engine::open(o);
  INFO(describe(r));
  REQUIRE(r.ok());
  return std::move(r).value();
}

inline std::string code_name(errc c) {
  return ::agentstate::to_string(c);
}

} // namespace agentstate::test

DOCTEST_TYPE_TO_STRING_AS("memory", agentstate::test::memory_store);
DOCTEST_TYPE_TO_STRING_AS("lmdb", agentstate::test::lmdb_store);

/// Asserts that a result is ok; prints "kind: message" of the error otherwise.
#define REQUIRE_OK(expr)                                                                           \
  do {                                                                                             \
    const auto& as_ok_r_ = (expr);                                                                 \
    INFO("result of `" #expr "`: ", ::agentstate::test::describe(as_ok_r_));                       \
    REQUIRE(as_ok_r_.ok());                                                                        \
  } while (false)

#define CHECK_OK(expr)                                                                             \
  do {                                                                                             \
    const auto& as_ok_r_ = (expr);                                                                 \
    INFO("result of `" #expr "`: ", ::agentstate::test::describe(as_ok_r_));                       \
    CHECK(as_ok_r_.ok());                                                                          \
  } while (false)

/// Asserts that a result failed with errc `code`; prints what it was instead.
#define REQUIRE_ERR(expr, want_code)                                                               \
  do {                                                                                             \
    const auto& as_err_r_ = (expr);                                                                \
    INFO("result of `" #expr "`: ", ::agentstate::test::describe(as_err_r_));                      \
    REQUIRE(::agentstate::test::code_name(as_err_r_.code())                                        \
            == ::agentstate::test::code_name(want_code));                                          \
  } while (false)

#define CHECK_ERR(expr, want_code)                                                                 \
  do {                                                                                             \
    const auto& as_err_r_ = (expr);                                                                \
    INFO("result of `" #expr "`: ", ::agentstate::test::describe(as_err_r_));                      \
    CHECK(::agentstate::test::code_name(as_err_r_.code())                                          \
          == ::agentstate::test::code_name(want_code));                                            \
  } while (false)

/// The value of a result that must be ok (REQUIRE, with file:line and the
/// error message on failure). MUST(x) on a result<void> just asserts.
#define MUST(expr) ::agentstate::test::must_impl((expr), #expr, __FILE__, __LINE__)

namespace agentstate::test {

// (const char* goes through std::string: doctest prints a char* as a pointer.)
template <class T>
T must_impl(result<T> r, const char* what, const char* file, int line) {
  INFO(std::string(file), ":", line, ": `", std::string(what), "` -> ", describe(r));
  REQUIRE(r.ok());
  return std::move(r).value();
}

inline void must_impl(result<void> r, const char* what, const char* file, int line) {
  INFO(std::string(file), ":", line, ": `", std::string(what), "` -> ", describe(r));
  REQUIRE(r.ok());
}

// -- engines ------------------------------------------------------------------

/// An engine with the temp directory it lives in. The engine is destroyed
/// (closed) before the directory is removed.
struct test_engine {
  std::unique_ptr<temp_dir> dir; // destroyed last
  options opts;
  std::unique_ptr<engine> eng;

  engine* operator->() const { return eng.get(); }
  engine& operator*() const { return *eng; }
};

/// Opens an engine on store `k` in a fresh temp dir; `tweak` may change the
/// options (limits, durability) before the open.
inline test_engine open_engine(store_kind k, const std::function<void(options&)>& tweak = {}) {
  test_engine t;
  t.dir = std::make_unique<temp_dir>();
  t.opts = make_options(k, t.dir->str());
  if (tweak)
    tweak(t.opts);
  auto r = engine::open(t.opts);
  INFO("engine::open(", to_string(k), ") -> ", describe(r));
  REQUIRE(r.ok());
  t.eng = std::move(r).value();
  REQUIRE(t.eng != nullptr);
  return t;
}

// -- builders -----------------------------------------------------------------

inline session_ref sref(std::string app, std::string user, std::string id) {
  session_ref r;
  r.app_name = std::move(app);
  r.user_id = std::move(user);
  r.session_id = std::move(id);
  return r;
}

inline create_request create_req(std::string app, std::string user, std::string id,
                                 json state = json::object()) {
  create_request r;
  r.app_name = std::move(app);
  r.user_id = std::move(user);
  r.session_id = std::move(id);
  r.state = std::move(state);
  return r;
}

inline create_request create_req(const session_ref& ref, json state = json::object()) {
  return create_req(ref.app_name, ref.user_id, ref.session_id, std::move(state));
}

/// An event carrying `delta` as its state_delta.
inline event make_event(json delta = json::object(), std::string id = {},
                        std::optional<double> timestamp = std::nullopt,
                        std::string invocation_id = "inv-1", std::string author = "agent") {
  event e;
  e.id = std::move(id);
  e.invocation_id = std::move(invocation_id);
  e.author = std::move(author);
  e.timestamp = timestamp;
  e.actions.state_delta = std::move(delta);
  return e;
}

inline append_request append_req(session_ref ref, event ev,
                                 std::optional<std::uint64_t> expected = {}) {
  append_request r;
  r.ref = std::move(ref);
  r.ev = std::move(ev);
  r.expected_version = expected;
  return r;
}

inline get_request get_req(session_ref ref, std::optional<std::int64_t> num_recent = {},
                           std::optional<double> after = {}, std::string invocation_id = {}) {
  get_request r;
  r.ref = std::move(ref);
  r.num_recent_events = num_recent;
  r.after_timestamp = after;
  r.invocation_id = std::move(invocation_id);
  return r;
}

inline list_request list_req(std::string app, std::optional<std::string> user = {},
                             std::optional<std::int64_t> page_size = {}, std::string token = {}) {
  list_request r;
  r.app_name = std::move(app);
  r.user_id = std::move(user);
  r.page_size = page_size;
  r.page_token = std::move(token);
  return r;
}

/// Applies a stored event's state_delta and state_remove to `state` (a
/// model of what an append does to the keys it names).
inline void apply_event(json& state, const event& ev) {
  for (auto it = ev.actions.state_delta.begin(); it != ev.actions.state_delta.end(); ++it)
    state[it.key()] = it.value();
  for (auto& k : ev.actions.state_remove)
    state.erase(k);
}

// -- convenience calls ------------------------------------------------------------

/// Polls `pred` every `every` (5 ms unless told) until it holds; false if it
/// still does not after `limit` (asked once more then). The tests' one wait
/// for a condition another thread or process sets: their other waiters call it.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = std::chrono::seconds(10),
                std::chrono::microseconds every = std::chrono::milliseconds(5)) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (pred())
      return true;
    // eventually(): a bounded poll for what another thread or process does.
    std::this_thread::sleep_for(every);
  }
  return pred();
}

/// Reaps child `pid` once it has exited, waiting up to `limit` (a bounded
/// poll: waitpid has no timeout); true with its wait status in `status`,
/// false when it still runs then (not reaped).
inline bool reaped_within(pid_t pid, int& status, std::chrono::milliseconds limit) {
  return eventually([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, limit);
}

/// get_session that must succeed and find the session.
inline session get_existing(engine& e, const get_request& req) {
  auto r = e.get_session(req);
  INFO("get_session(", req.ref.app_name, "/", req.ref.user_id, "/", req.ref.session_id, ") -> ",
       describe(r));
  REQUIRE(r.ok());
  REQUIRE(r.value().has_value());
  return std::move(*r.value());
}

inline session get_existing(engine& e, const session_ref& ref) {
  return get_existing(e, get_req(ref));
}

/// get_session that must succeed; nullopt when the session is missing.
inline std::optional<session> get_maybe(engine& e, const session_ref& ref) {
  auto r = e.get_session(get_req(ref));
  INFO("get_session -> ", describe(r));
  REQUIRE(r.ok());
  return std::move(r).value();
}

inline append_result append_ok(engine& e, const session_ref& ref, event ev,
                               std::optional<std::uint64_t> expected = {}) {
  auto r = e.append_event(append_req(ref, std::move(ev), expected));
  INFO("append_event(", ref.app_name, "/", ref.user_id, "/", ref.session_id, ") -> ", describe(r));
  REQUIRE(r.ok());
  return std::move(r).value();
}

inline json app_state(engine& e, const std::string& app) {
  auto r = e.get_app_state(app);
  INFO("get_app_state(", app, ") -> ", describe(r));
  REQUIRE(r.ok());
  return std::move(r).value();
}

inline json user_state(engine& e, const std::string& app, const std::string& user) {
  auto r = e.get_user_state(app, user);
  INFO("get_user_state(", app, ", ", user, ") -> ", describe(r));
  REQUIRE(r.ok());
  return std::move(r).value();
}

/// Every page of list_sessions, concatenated, with `page_size` per page.
inline std::vector<session_meta> list_all(engine& e, const std::string& app,
                                          std::optional<std::string> user = {},
                                          std::optional<std::int64_t> page_size = {},
                                          int* pages = nullptr) {
  std::vector<session_meta> out;
  std::string token;
  int n = 0;
  for (;;) {
    auto r = e.list_sessions(list_req(app, user, page_size, token));
    INFO("list_sessions(", app, ", page ", n, ") -> ", describe(r));
    REQUIRE(r.ok());
    ++n;
    REQUIRE(n < 100000); // no endless paging
    auto& page = r.value();
    for (auto& m : page.sessions)
      out.push_back(std::move(m));
    if (!page.next_page_token)
      break;
    REQUIRE(!page.next_page_token->empty());
    token = *page.next_page_token;
  }
  if (pages)
    *pages = n;
  return out;
}

// -- inspection ---------------------------------------------------------------

inline std::vector<std::string> event_ids(const std::vector<event>& evs) {
  std::vector<std::string> out;
  out.reserve(evs.size());
  for (const auto& e : evs)
    out.push_back(e.id);
  return out;
}

inline std::vector<std::string> session_ids(const std::vector<session_meta>& xs) {
  std::vector<std::string> out;
  for (const auto& x : xs)
    out.push_back(x.id);
  return out;
}

/// Epoch seconds now, as the engine stores timestamps (D4).
inline double now_epoch() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

/// True when `key` is a member of JSON object `obj`.
inline bool has_key(const json& obj, const std::string& key) {
  return obj.is_object() && obj.contains(key);
}

/// True when no key of `obj` (an object) starts with "temp:".
inline bool has_no_temp_keys(const json& obj) {
  if (!obj.is_object())
    return true;
  for (auto it = obj.begin(); it != obj.end(); ++it)
    if (it.key().rfind("temp:", 0) == 0)
      return false;
  return true;
}

/// True when some regular file under `dir` contains the bytes `needle`.
inline bool any_file_contains(const std::filesystem::path& dir, const std::string& needle) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file(ec))
      continue;
    // Only the file's data segments are read (SEEK_DATA/SEEK_HOLE), in 1 MiB
    // chunks that overlap by the needle's length: a store on a writable map
    // is a sparse file as large as its maximum size (64 GiB by default).
    int fd = ::open(it->path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      continue;
    std::string buf;
    const off_t chunk = off_t{1} << 20;
    off_t pos = 0;
    bool found = false;
    while (!found) {
      off_t data = ::lseek(fd, pos, SEEK_DATA);
      if (data < 0)
        break; // ENXIO: no data after pos
      off_t hole = ::lseek(fd, data, SEEK_HOLE);
      if (hole < 0)
        break;
      for (off_t at = data; at < hole && !found; at += chunk) {
        const off_t span = chunk + static_cast<off_t>(needle.size());
        auto want = static_cast<std::size_t>(std::min<off_t>(span, hole - at));
        buf.resize(want);
        auto got = ::pread(fd, buf.data(), want, at);
        if (got <= 0)
          break;
        buf.resize(static_cast<std::size_t>(got));
        found = buf.find(needle) != std::string::npos;
      }
      pos = hole;
    }
    ::close(fd);
    if (found)
      return true;
  }
  return false;
}

/// `x` as lowercase hex, two digits a byte (as page tokens are written).
inline std::string hex(std::string_view x) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : x) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

/// A string of `n` bytes of `c`.
inline std::string bytes(std::size_t n, char c = 'x') {
  return std::string(n, c);
}

} // namespace agentstate::test
