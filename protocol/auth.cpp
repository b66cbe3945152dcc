// SPDX-License-Identifier: Apache-2.0
#include "protocol/auth.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace agentstate::protocol {

namespace {

constexpr std::size_t min_token_bytes = 16;
constexpr std::size_t max_token_bytes = 4096;
constexpr std::size_t max_app_bytes = 100;
constexpr std::size_t max_file_bytes = std::size_t{16} << 20;

bool blank(char c) {
  return c == ' ' || c == '\t' || c == '\r';
}

// Splits `line` at runs of blanks.
std::vector<std::string_view> fields_of(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && blank(line[i]))
      ++i;
    auto start = i;
    while (i < line.size() && !blank(line[i]))
      ++i;
    if (i > start)
      out.push_back(line.substr(start, i - start));
  }
  return out;
}

// What a file that is not a regular one is, for a message.
std::string file_kind(mode_t m) {
  if (S_ISFIFO(m))
    return "a FIFO";
  if (S_ISDIR(m))
    return "a directory";
  if (S_ISSOCK(m))
    return "a socket";
  if (S_ISCHR(m) || S_ISBLK(m))
    return "a device";
  return "another kind of file";
}

error bad_line(std::size_t n, const std::string& what) {
  return error{errc::invalid_argument, "token file line " + std::to_string(n) + ": " + what};
}

} // namespace

bool grant::allows(std::string_view app) const {
  return all_apps || std::binary_search(apps.begin(), apps.end(), app);
}

token_table::digest token_table::digest_of(std::string_view token) {
  digest d{};
  unsigned int len = 0;
  // EVP_Digest fails only when OpenSSL cannot allocate; the all-zero digest
  // then matches no entry a token could produce in practice.
  ::EVP_Digest(token.data(), token.size(), d.data(), &len, ::EVP_sha256(), nullptr);
  return d;
}

result<token_table> token_table::parse(std::string_view text) {
  token_table t;
  std::size_t line_no = 0;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    auto nl = text.find('\n', pos);
    auto line = text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() + 1 : nl + 1;
    ++line_no;
    auto fields = fields_of(line);
    if (fields.empty() || fields[0].front() == '#')
      continue;
    if (fields.size() != 2 && fields.size() != 3)
      return bad_line(line_no,
                      "expected 'TOKEN APP[,APP...]' or 'TOKEN *', then optionally "
                      "'read-only', found "
                        + std::to_string(fields.size()) + " field(s)");
    if (fields.size() == 3 && fields[2] != "read-only")
      return bad_line(line_no, "the field after the apps may only be 'read-only'");
    auto token = fields[0];
    if (token.size() < min_token_bytes || token.size() > max_token_bytes)
      return bad_line(line_no,
                      "a token must be " + std::to_string(min_token_bytes) + " to "
                        + std::to_string(max_token_bytes) + " characters, this one has "
                        + std::to_string(token.size()));
    for (char c : token)
      if (static_cast<unsigned char>(c) < 0x21 || static_cast<unsigned char>(c) > 0x7e)
        return bad_line(line_no, "a token must be printable ASCII without spaces");
    entry e;
    e.d = digest_of(token);
    e.g.read_only = fields.size() == 3;
    auto apps = fields[1];
    if (apps == "*") {
      e.g.all_apps = true;
    } else {
      std::size_t start = 0;
      for (;;) {
        auto comma = apps.find(',', start);
        auto app = apps.substr(
          start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
        if (app.empty())
          return bad_line(line_no, "an empty app name in the app list");
        if (app.size() > max_app_bytes)
          return bad_line(line_no, "an app name over " + std::to_string(max_app_bytes) + " bytes");
        if (app == "*")
          return bad_line(line_no, "'*' must stand alone (every app)");
        if (app.find('\0') != std::string_view::npos)
          return bad_line(line_no, "an app name holds a NUL byte");
        e.g.apps.emplace_back(app);
        if (comma == std::string_view::npos)
          break;
        start = comma + 1;
      }
      std::sort(e.g.apps.begin(), e.g.apps.end());
      e.g.apps.erase(std::unique(e.g.apps.begin(), e.g.apps.end()), e.g.apps.end());
    }
    for (const auto& other : t.entries_)
      if (other.d == e.d)
        return bad_line(line_no, "the token repeats an earlier line's token");
    t.entries_.push_back(std::move(e));
  }
  return t;
}

result<token_table> token_table::load(const std::string& path, unsigned* mode) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0)
    return error{errc::io_error,
                 "cannot open the token file '" + path + "': " + std::strerror(errno)};
  struct closer {
    int fd;
    ~closer() { ::close(fd); }
  } guard{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0)
    return error{errc::io_error,
                 "cannot read the token file '" + path + "': " + std::strerror(errno)};
  if (!S_ISREG(st.st_mode))
    return error{errc::invalid_argument,
                 "the token file '" + path + "' is not a regular file (it is "
                   + file_kind(st.st_mode) + ")"};
  if (mode)
    *mode = static_cast<unsigned>(st.st_mode & 07777);
  std::string text;
  char buf[65536];
  for (;;) {
    auto n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return error{errc::io_error,
                   "cannot read the token file '" + path + "': " + std::strerror(errno)};
    if (n == 0)
      break;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > max_file_bytes)
      return error{errc::too_large, "the token file '" + path + "' is over 16 MiB"};
  }
  auto t = parse(text);
  if (!t)
    return error{t.err().code, path + ": " + t.err().message};
  return t;
}

std::optional<grant> token_table::find(std::string_view token) const {
  return find_digest(digest_of(token));
}

std::optional<grant> token_table::find_digest(const digest& d) const {
  // Every entry is compared, and the match is picked without a branch on the
  // comparison, so the time depends on the table's size only.
  const entry* found = nullptr;
  for (const auto& e : entries_) {
    auto differs =
      static_cast<std::uintptr_t>(::CRYPTO_memcmp(e.d.data(), d.data(), d.size()) != 0);
    auto mask = differs - 1; // all ones when equal, zero otherwise
    found = reinterpret_cast<const entry*>((reinterpret_cast<std::uintptr_t>(&e) & mask)
                                           | (reinterpret_cast<std::uintptr_t>(found) & ~mask));
  }
  if (!found)
    return std::nullopt;
  return found->g;
}

// -- token_source -------------------------------------------------------------------

token_source::token_source(token_table t)
  : table_(std::make_shared<const token_table>(std::move(t))) {}

std::shared_ptr<const token_table> token_source::current() const {
  std::lock_guard<std::mutex> guard(mtx_);
  return table_;
}

std::uint64_t token_source::generation() const {
  std::lock_guard<std::mutex> guard(mtx_);
  return generation_;
}

void token_source::replace(token_table t) {
  auto next = std::make_shared<const token_table>(std::move(t));
  std::lock_guard<std::mutex> guard(mtx_);
  table_ = std::move(next);
  ++generation_;
}

// -- access --------------------------------------------------------------------------

method_scope scope_of(std::string_view method) {
  static constexpr std::string_view app_methods[] = {
    "create_session", "get_session",    "list_sessions", "delete_session",   "append_event",
    "end_invocation", "inject_state",   "get_app_state", "get_user_state",   "read_changes",
    "watch",          "rewind_session", "rewind_plan",   "list_invocations", "fork_session",
    "delete_user",    "delete_app",     "prune",
  };
  if (method == "ping" || method == "authenticate")
    return method_scope::open;
  // unwatch: the stream's own watches; cluster_map: the cluster's layout
  if (method == "flush" || method == "unwatch" || method == "cluster_map")
    return method_scope::authenticated;
  for (auto m : app_methods)
    if (m == method)
      return method_scope::app;
  return method_scope::every_app;
}

bool method_writes(std::string_view method) {
  static constexpr std::string_view reads[] = {
    "ping",          "authenticate",     "flush",        "get_session", "list_sessions",
    "get_app_state", "get_user_state",   "read_changes", "watch",       "unwatch",
    "rewind_plan",   "list_invocations", "stats",        "cluster_map",
  };
  for (auto m : reads)
    if (m == method)
      return false;
  return true;
}

access_gate::access_gate(std::shared_ptr<const token_source> tokens) : tokens_(std::move(tokens)) {}

result<grant> access_gate::authenticate(std::string_view token) {
  if (!tokens_) {
    grant all;
    all.all_apps = true;
    return all;
  }
  std::uint64_t gen = tokens_->generation();
  auto table = tokens_->current();
  auto d = token_table::digest_of(token);
  auto g = table->find_digest(d);
  if (!g) {
    digest_.reset();
    grant_.reset();
    return error{errc::unauthenticated, "the token is not valid"};
  }
  digest_ = d;
  grant_ = *g;
  generation_ = gen;
  return *g;
}

const grant* access_gate::current_grant() {
  if (!grant_)
    return nullptr;
  auto gen = tokens_->generation();
  if (gen != generation_) {
    auto table = tokens_->current();
    grant_ = table->find_digest(*digest_);
    generation_ = gen;
    if (!grant_) {
      digest_.reset();
      return nullptr;
    }
  }
  return &*grant_;
}

std::optional<error> access_gate::check(std::string_view method,
                                        const std::optional<std::string>& app, bool refused) {
  if (!tokens_)
    return std::nullopt;
  auto scope = scope_of(method);
  if (scope == method_scope::open)
    return std::nullopt;
  const grant* g = current_grant();
  if (!g)
    return error{errc::unauthenticated,
                 "authentication required: send 'authenticate' with a token first"};
  if (refused)
    return std::nullopt;
  if (g->read_only && method_writes(method))
    return error{errc::permission_denied,
                 "the token is read-only: '" + std::string(method) + "' writes"};
  if (scope == method_scope::authenticated)
    return std::nullopt;
  if (scope == method_scope::every_app) {
    if (g->all_apps)
      return std::nullopt;
    return error{errc::permission_denied,
                 "'" + std::string(method) + "' spans every app: it needs a token for '*'"};
  }
  // A request of an app method that names no app (read_changes over every
  // app) needs a token for every app.
  if (g->all_apps || (app && g->allows(*app)))
    return std::nullopt;
  if (app && app->size() <= max_app_bytes)
    return error{errc::permission_denied, "the token does not grant the app '" + *app + "'"};
  return error{errc::permission_denied, "the token does not grant this request's app"};
}

} // namespace agentstate::protocol
