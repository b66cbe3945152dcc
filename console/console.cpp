// SPDX-License-Identifier: Apache-2.0
// Over 600 lines: the console's HTTP side whole: addresses, logins and CSRF,
// the JSON API over rpc_session, the live streams and the store samples.
// console/console.cpp: the web console's server (console/console.hpp).
#include "console/console.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "console/assets.hpp"
#include "model/text.hpp"
#include "protocol/rpc_session.hpp"
#include "server/address.hpp"

namespace agentstate::console {

namespace {

constexpr std::size_t max_page_size = 200; ///< sessions per listing page
constexpr std::size_t max_events = 500; ///< events per timeline page
constexpr std::size_t max_scan_pages = 10; ///< protocol pages a prefix filter reads
constexpr std::size_t max_body_bytes = 64 << 10;
constexpr std::size_t max_samples = 180;
constexpr std::size_t stream_backlog = std::size_t{8} << 20;

/// A failure answered as {"error": {kind, message, ...}} with an HTTP status.
struct api_error {
  int status = 500;
  std::string kind;
  std::string message;
  json data = json::object();
};

int status_of(std::string_view kind) {
  if (kind == "invalid_argument" || kind == "invalid_params" || kind == "parse_error"
      || kind == "invalid_request")
    return 400;
  if (kind == "unauthenticated")
    return 401;
  if (kind == "permission_denied" || kind == "csrf")
    return 403;
  if (kind == "not_found")
    return 404;
  if (kind == "already_exists" || kind == "version_conflict" || kind == "condition_failed")
    return 409;
  if (kind == "cursor_expired")
    return 410;
  if (kind == "too_large")
    return 413;
  if (kind == "unavailable")
    return 503;
  if (kind == "storage_full")
    return 507;
  return 500;
}

api_error bad(std::string message) {
  return {400, "invalid_argument", std::move(message)};
}

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_header("Cache-Control", "no-store");
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void send_error(httplib::Response& res, const api_error& e) {
  json err = e.data.is_object() ? e.data : json::object();
  err["kind"] = e.kind;
  err["message"] = e.message;
  send_json(res, e.status, {{"error", std::move(err)}});
}

bool valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : 9;
    if (n == 9 || s.size() - i <= n)
      return false;
    std::uint32_t cp = n == 0 ? c : c & (0x3F >> n);
    for (std::size_t k = 1; k <= n; ++k) {
      auto d = static_cast<unsigned char>(s[i + k]);
      if ((d >> 6) != 2)
        return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF
        || (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += n + 1;
  }
  return true;
}

/// Strict percent-decoding of one path segment or query value: every '%'
/// starts two hex digits, and the bytes are UTF-8. `plus_space`: '+' is a
/// space (query strings).
std::optional<std::string> percent_decode(std::string_view s, bool plus_space) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '%') {
      if (s.size() - i < 3)
        return std::nullopt;
      int h = model::hex_digit(s[i + 1]), l = model::hex_digit(s[i + 2]);
      if (h < 0 || l < 0)
        return std::nullopt;
      out.push_back(static_cast<char>(h * 16 + l));
      i += 2;
    } else if (c == '+' && plus_space) {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  if (!valid_utf8(out))
    return std::nullopt;
  return out;
}

/// A request's target split into decoded path segments and query values.
struct target {
  std::vector<std::string> segments;
  std::map<std::string, std::string> query;

  const std::string* param(const std::string& name) const {
    auto it = query.find(name);
    return it == query.end() ? nullptr : &it->second;
  }
};

std::optional<api_error> parse_target(const std::string& raw, target& t) {
  auto q = raw.find('?');
  std::string_view path(raw.data(), q == std::string::npos ? raw.size() : q);
  if (path.empty() || path[0] != '/')
    return bad("the path must start with '/'");
  std::size_t i = 1;
  while (i <= path.size()) {
    auto j = path.find('/', i);
    if (j == std::string_view::npos)
      j = path.size();
    auto seg = path.substr(i, j - i);
    if (!seg.empty() || j < path.size()) {
      auto d = percent_decode(seg, false);
      if (!d)
        return bad("a path segment is not valid percent-encoded UTF-8");
      t.segments.push_back(std::move(*d));
    }
    i = j + 1;
  }
  if (q == std::string::npos)
    return std::nullopt;
  std::string_view qs(raw.data() + q + 1, raw.size() - q - 1);
  while (!qs.empty()) {
    auto amp = qs.find('&');
    auto pair = qs.substr(0, amp);
    qs = amp == std::string_view::npos ? std::string_view() : qs.substr(amp + 1);
    if (pair.empty())
      continue;
    auto eq = pair.find('=');
    auto k = percent_decode(pair.substr(0, eq), true);
    auto v =
      percent_decode(eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1), true);
    if (!k || !v)
      return bad("a query parameter is not valid percent-encoded UTF-8");
    t.query[*k] = std::move(*v);
  }
  return std::nullopt;
}

/// A whole number in 0..max, or nullopt.
std::optional<std::uint64_t> parse_count(const std::string& s, std::uint64_t max) {
  if (s.empty() || s.size() > 19 || s.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  auto n = std::stoull(s);
  if (n > max)
    return std::nullopt;
  return n;
}

std::string random_hex(std::size_t bytes) {
  std::vector<unsigned char> b(bytes);
  if (RAND_bytes(b.data(), static_cast<int>(b.size())) != 1)
    throw std::runtime_error("no random bytes");
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (auto c : b) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

bool same_secret(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

/// Whether every address `host` resolves to is a loopback address.
bool host_is_loopback(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || !res)
    return false;
  bool all = true;
  for (auto* a = res; a; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      auto* in = reinterpret_cast<sockaddr_in*>(a->ai_addr);
      all = all && (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    } else if (a->ai_family == AF_INET6) {
      auto* in6 = reinterpret_cast<sockaddr_in6*>(a->ai_addr);
      all = all && IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
    } else {
      all = false;
    }
  }
  ::freeaddrinfo(res);
  return all;
}

/// One protocol answer: the result, or the error (kind, message, data).
struct answer {
  bool ok = false;
  json result;
  api_error err;
};

answer answer_of(const json& line) {
  answer a;
  if (line.contains("result")) {
    a.ok = true;
    a.result = line["result"];
    return a;
  }
  const auto& e = line.value("error", json::object());
  json data = e.value("data", json::object());
  std::string kind = data.is_object() ? data.value("kind", std::string("internal")) : "internal";
  if (e.value("code", 0) == protocol::rpc_code::method_not_found)
    kind = "not_found";
  a.err = {status_of(kind), kind, e.value("message", std::string("failed")),
           data.is_object() ? data : json::object()};
  a.err.data.erase("kind");
  return a;
}

json request_line(int id, const std::string& method, json params) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", std::move(params)}};
}

/// A live stream: one rpc_session with one watch, its notifications queued
/// for the HTTP worker that writes them as server-sent events.
struct stream_state {
  std::mutex mtx;
  std::condition_variable cv;
  std::deque<std::string> lines;
  std::size_t queued_bytes = 0;
  std::optional<json> watch_answer;
  std::unique_ptr<protocol::rpc_session> session; // destroyed first: it writes into the above
  std::atomic<std::size_t>* open_count = nullptr;

  ~stream_state() {
    if (session) {
      session->end_watches();
      session->drain();
      session.reset();
    }
    if (open_count)
      --*open_count;
  }
};

} // namespace

struct console_server::impl {
  console_config cfg;
  engine& eng;
  server::logger& log;
  std::unique_ptr<httplib::Server> http;
  std::string host, url;
  int port = 0;
  bool loopback = true;
  std::vector<std::string> allowed_hosts; ///< Host headers accepted on a loopback console
  std::string cookie_name;
  std::string open_csrf; ///< the CSRF token when there are no tokens
  std::thread thread;
  std::atomic<bool> stopping{false};
  std::atomic<std::size_t> streams_open{0};
  std::atomic<std::uint64_t> streams_total{0}, requests{0};

  struct login {
    std::string token, csrf;
    std::chrono::steady_clock::time_point at;
  };
  std::mutex logins_mtx;
  std::map<std::string, login> logins; ///< by cookie value

  struct sample {
    double t; ///< epoch seconds
    std::uint64_t commits, appends;
  };
  std::mutex samples_mtx;
  std::condition_variable samples_cv;
  std::deque<sample> samples;
  std::thread sampler;

  impl(console_config c, engine& e, server::logger& l) : cfg(std::move(c)), eng(e), log(l) {}

  // -- who is asking ----------------------------------------------------------

  /// The caller's token ("" without tokens) and CSRF token, or why not.
  std::optional<api_error> caller(const httplib::Request& req, std::string& token,
                                  std::string& csrf) {
    if (!cfg.tokens) {
      csrf = open_csrf;
      return std::nullopt;
    }
    auto sid = cookie(req);
    std::lock_guard<std::mutex> g(logins_mtx);
    auto it = sid.empty() ? logins.end() : logins.find(sid);
    if (it == logins.end()
        || std::chrono::steady_clock::now() - it->second.at > std::chrono::hours(12))
      return api_error{401, "unauthenticated", "log in with a token first"};
    token = it->second.token;
    csrf = it->second.csrf;
    return std::nullopt;
  }

  std::string cookie(const httplib::Request& req) const {
    auto header = req.get_header_value("Cookie");
    std::string_view h(header);
    while (!h.empty()) {
      auto semi = h.find(';');
      auto part = h.substr(0, semi);
      h = semi == std::string_view::npos ? std::string_view() : h.substr(semi + 1);
      while (!part.empty() && part.front() == ' ')
        part.remove_prefix(1);
      if (part.size() > cookie_name.size() && part.substr(0, cookie_name.size()) == cookie_name
          && part[cookie_name.size()] == '=')
        return std::string(part.substr(cookie_name.size() + 1));
    }
    return {};
  }

  /// A loopback console answers only Host headers naming it, so that a page
  /// of another site whose name was made to resolve to 127.0.0.1 (DNS
  /// rebinding) cannot read it.
  bool host_allowed(const httplib::Request& req) const {
    if (!loopback)
      return true;
    auto h = req.get_header_value("Host");
    return std::find(allowed_hosts.begin(), allowed_hosts.end(), h) != allowed_hosts.end();
  }

  /// A state-changing request comes from the console's own page: its Origin
  /// (when sent) is this console, and it is JSON (which a cross-site form
  /// cannot send without a preflight the console never grants).
  std::optional<api_error> same_origin(const httplib::Request& req) const {
    auto ct = req.get_header_value("Content-Type");
    if (ct.rfind("application/json", 0) != 0)
      return api_error{415, "invalid_argument", "the body must be application/json"};
    if (req.has_header("Origin")) {
      std::string expect =
        std::string(cfg.tls ? "https://" : "http://") + req.get_header_value("Host");
      if (req.get_header_value("Origin") != expect)
        return api_error{403, "csrf", "the request comes from another origin"};
    } else if (req.has_header("Sec-Fetch-Site")
               && req.get_header_value("Sec-Fetch-Site") != "same-origin") {
      return api_error{403, "csrf", "the request comes from another site"};
    }
    return std::nullopt;
  }

  // -- the protocol -----------------------------------------------------------

  protocol::rpc_config rpc_cfg() const {
    protocol::rpc_config c;
    c.tokens = cfg.tokens;
    c.max_line_depth = cfg.max_line_depth;
    c.max_in_flight = 4;
    c.max_watches = 1;
    c.server_stats = cfg.server_stats;
    return c;
  }

  /// Runs one request through a new rpc_session under `token`.
  answer call(const std::string& token, const std::string& method, json params) {
    std::mutex m;
    std::vector<std::string> lines;
    {
      protocol::rpc_session s(
        eng,
        [&](std::string line) {
          std::lock_guard<std::mutex> g(m);
          lines.push_back(std::move(line));
        },
        rpc_cfg());
      if (cfg.tokens)
        s.handle_line(request_line(0, "authenticate", {{"token", token}}).dump());
      s.handle_line(request_line(1, method, std::move(params)).dump());
      s.drain();
    }
    for (auto& l : lines) {
      auto j = json::parse(l, nullptr, false);
      if (j.is_object() && j.value("id", -1) == 1)
        return answer_of(j);
    }
    answer a;
    a.err = {500, "internal", "no answer from the protocol"};
    return a;
  }

  // -- handlers ---------------------------------------------------------------

  void handle(const httplib::Request& req, httplib::Response& res) {
    ++requests;
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_header("Referrer-Policy", "no-referrer");
    res.set_header("Content-Security-Policy",
                   "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                   "img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'");
    if (!host_allowed(req))
      return send_error(res, {403, "permission_denied", "this console does not answer that Host"});
    target t;
    if (auto e = parse_target(req.target, t))
      return send_error(res, *e);
    try {
      if (!t.segments.empty() && t.segments[0] == "api")
        return api(req, res, t);
      page(req, res, t);
    } catch (const std::bad_alloc&) {
      send_error(res, {503, "unavailable", "out of memory"});
    } catch (const std::exception& ex) {
      send_error(res, {500, "internal", ex.what()});
    }
  }

  void page(const httplib::Request& req, httplib::Response& res, const target& t) {
    if (req.method != "GET" && req.method != "HEAD")
      return send_error(res, {405, "invalid_argument", "pages are read with GET"});
    if (t.segments.size() == 1 && t.segments[0] == "console.js")
      return res.set_content(assets::console_js, "text/javascript; charset=utf-8");
    if (t.segments.size() == 1 && t.segments[0] == "console.css")
      return res.set_content(assets::console_css, "text/css; charset=utf-8");
    bool known = t.segments.empty() || (t.segments.size() == 1 && t.segments[0] == "store")
      || (!t.segments.empty() && t.segments[0] == "apps" && t.segments.size() <= 6);
    if (!known)
      return send_error(res, {404, "not_found", "no such page"});
    res.set_header("Cache-Control", "no-store");
    res.set_content(assets::index_html, "text/html; charset=utf-8");
  }

  void api(const httplib::Request& req, httplib::Response& res, const target& t) {
    const auto& s = t.segments;
    if (req.method == "POST") {
      if (s.size() == 2 && s[1] == "login")
        return do_login(req, res);
      if (s.size() == 2 && s[1] == "logout")
        return do_logout(req, res);
      if (s.size() == 2 && s[1] == "action")
        return do_action(req, res);
      return send_error(res, {404, "not_found", "no such API"});
    }
    if (req.method != "GET")
      return send_error(res, {405, "invalid_argument", "the API is read with GET"});
    if (s.size() == 2 && s[1] == "whoami")
      return whoami(req, res);
    std::string token, csrf;
    if (auto e = caller(req, token, csrf))
      return send_error(res, *e);
    if (s.size() == 2 && s[1] == "stats")
      return stats(res, token);
    if (s.size() == 2 && s[1] == "watch")
      return watch(req, res, t, token);
    if (s.size() >= 3 && s[1] == "apps") {
      const std::string& app = s[2];
      if (s.size() == 4 && s[3] == "sessions")
        return list(res, t, token, app, nullptr);
      if (s.size() == 4 && s[3] == "users")
        return users(res, t, token, app);
      if (s.size() == 4 && s[3] == "state")
        return reply(res, call(token, "get_app_state", {{"app_name", app}, {"with_cursor", true}}));
      if (s.size() >= 5 && s[3] == "users") {
        const std::string& user = s[4];
        if (s.size() == 6 && s[5] == "sessions")
          return list(res, t, token, app, &user);
        if (s.size() == 6 && s[5] == "state")
          return reply(res,
                       call(token, "get_user_state",
                            {{"app_name", app}, {"user_id", user}, {"with_cursor", true}}));
        if (s.size() >= 7 && s[5] == "sessions") {
          json ref = {{"app_name", app}, {"user_id", user}, {"session_id", s[6]}};
          if (s.size() == 7)
            return session(res, t, token, std::move(ref));
          if (s.size() == 8 && s[7] == "invocations")
            return reply(res, call(token, "list_invocations", std::move(ref)));
          if (s.size() == 8 && s[7] == "rewind_plan")
            return rewind_plan(res, t, token, std::move(ref));
        }
      }
    }
    send_error(res, {404, "not_found", "no such API"});
  }

  void reply(httplib::Response& res, const answer& a) {
    if (!a.ok)
      return send_error(res, a.err);
    send_json(res, 200, {{"result", a.result}});
  }

  void whoami(const httplib::Request& req, httplib::Response& res) {
    json out = {{"auth_required", cfg.tokens != nullptr}, {"actions", cfg.actions}};
    std::string token, csrf;
    if (caller(req, token, csrf)) {
      out["authenticated"] = false;
      return send_json(res, 200, out);
    }
    out["authenticated"] = true;
    out["csrf"] = csrf;
    if (!cfg.tokens) {
      out["all_apps"] = true;
      out["apps"] = json::array();
      return send_json(res, 200, out);
    }
    auto g = cfg.tokens->current()->find(token);
    if (!g) {
      out["authenticated"] = false;
      out.erase("csrf");
      return send_json(res, 200, out);
    }
    out["all_apps"] = g->all_apps;
    out["apps"] = g->apps;
    out["read_only"] = g->read_only;
    out["actions"] = cfg.actions && !g->read_only;
    send_json(res, 200, out);
  }

  void list(httplib::Response& res, const target& t, const std::string& token,
            const std::string& app, const std::string* user) {
    std::size_t page_size = 50;
    if (auto* v = t.param("page_size")) {
      auto n = parse_count(*v, max_page_size);
      if (!n || *n == 0)
        return send_error(
          res, bad("page_size must be a whole number 1.." + std::to_string(max_page_size)));
      page_size = *n;
    }
    json p = {{"app_name", app}, {"shared_state", "once"}, {"session_tokens", true}};
    if (user)
      p["user_id"] = *user;
    if (auto* v = t.param("order")) {
      if (*v != "asc" && *v != "desc")
        return send_error(res, bad("order must be asc or desc"));
      p["order"] = *v;
    } else {
      p["order"] = "desc";
    }
    if (auto* v = t.param("order_by")) {
      if (*v != "update_time" && *v != "created" && *v != "id")
        return send_error(res, bad("order_by must be update_time, created or id"));
      p["order_by"] = *v;
    }
    if (auto* v = t.param("page_token"); v && !v->empty())
      p["page_token"] = *v;
    std::string prefix;
    if (auto* v = t.param("prefix"))
      prefix = *v;
    if (auto* v = t.param("total"); v && *v == "1")
      p["include_total"] = true;
    json sessions = json::array();
    json next = nullptr;
    json total = nullptr;
    std::size_t pages = 0;
    for (;;) {
      // Without a filter one page answers; with one, pages are read (at most
      // max_scan_pages) until page_size sessions match.
      p["page_size"] = prefix.empty() ? page_size : std::size_t{100};
      auto a = call(token, "list_sessions", p);
      if (!a.ok)
        return send_error(res, a.err);
      if (a.result.contains("total"))
        total = a.result["total"];
      p.erase("include_total");
      ++pages;
      next = a.result.value("next_page_token", json(nullptr));
      bool full = false;
      for (auto& sj : a.result["sessions"]) {
        std::string id = sj.value("id", "");
        if (!prefix.empty() && id.compare(0, prefix.size(), prefix) != 0)
          continue;
        json meta = {{"id", id},
                     {"user_id", sj.value("user_id", "")},
                     {"version", sj.value("version", 0)},
                     {"last_update_time", sj.value("last_update_time", 0.0)},
                     {"state_keys", sj.value("state", json::object()).size()}};
        if (sj.contains("expires_at"))
          meta["expires_at"] = sj["expires_at"];
        sessions.push_back(std::move(meta));
        if (sessions.size() == page_size) {
          next = sj.value("page_token", json(nullptr));
          full = true;
          break;
        }
      }
      if (full || next.is_null() || prefix.empty() || pages == max_scan_pages)
        break;
      p["page_token"] = next;
    }
    json out = {{"sessions", std::move(sessions)}, {"next_page_token", next}};
    if (!total.is_null())
      out["total"] = total;
    if (!prefix.empty())
      out["scanned_pages"] = pages;
    send_json(res, 200, {{"result", std::move(out)}});
  }

  /// An app's users, in user id order, with each one's number of sessions:
  /// its sessions listed by id (user id, then session id), at most
  /// max_scan_pages protocol pages of 100 per request, then one counting
  /// list_sessions per user found. The page token continues after the last
  /// session read; a user whose sessions a scan stopped inside is listed again
  /// by the next page.
  void users(httplib::Response& res, const target& t, const std::string& token,
             const std::string& app) {
    std::size_t page_size = 20;
    if (auto* v = t.param("page_size")) {
      auto n = parse_count(*v, 100);
      if (!n || *n == 0)
        return send_error(res, bad("page_size must be a whole number 1..100"));
      page_size = *n;
    }
    json p = {{"app_name", app},        {"order_by", "id"},       {"order", "asc"},
              {"shared_state", "once"}, {"session_tokens", true}, {"page_size", 100}};
    if (auto* v = t.param("page_token"); v && !v->empty())
      p["page_token"] = *v;
    std::vector<std::string> found;
    json next = nullptr;
    bool full = false;
    for (std::size_t pages = 0; pages < max_scan_pages && !full; ++pages) {
      auto a = call(token, "list_sessions", p);
      if (!a.ok)
        return send_error(res, a.err);
      next = a.result.value("next_page_token", json(nullptr));
      for (auto& sj : a.result["sessions"]) {
        std::string user = sj.value("user_id", "");
        if (found.empty() || found.back() != user) {
          if (found.size() == page_size) {
            full = true; // `next` is the token after the previous session
            break;
          }
          found.push_back(user);
        }
        next = sj.value("page_token", json(nullptr));
      }
      if (!full && a.result.value("next_page_token", json(nullptr)).is_null()) {
        next = nullptr;
        break;
      }
      p["page_token"] = next;
    }
    json list = json::array();
    for (auto& user : found) {
      auto a = call(token, "list_sessions",
                    {{"app_name", app},
                     {"user_id", user},
                     {"page_size", 1},
                     {"include_total", true},
                     {"shared_state", "once"}});
      if (!a.ok)
        return send_error(res, a.err);
      list.push_back({{"user_id", user}, {"sessions", a.result.value("total", json(nullptr))}});
    }
    send_json(res, 200, {{"result", {{"users", std::move(list)}, {"next_page_token", next}}}});
  }

  void session(httplib::Response& res, const target& t, const std::string& token, json p) {
    std::uint64_t events = 50;
    if (auto* v = t.param("events")) {
      auto n = parse_count(*v, max_events);
      if (!n)
        return send_error(res,
                          bad("events must be a whole number 0.." + std::to_string(max_events)));
      events = *n;
    }
    p["num_recent_events"] = events;
    if (auto* v = t.param("version")) {
      auto n = parse_count(*v, std::uint64_t{1} << 53);
      if (!n)
        return send_error(res, bad("version must be a whole number, not '" + *v + "'"));
      p["as_of_version"] = *n;
    }
    auto a = call(token, "get_session", p);
    if (a.ok && a.result.is_null())
      return send_error(res, {404, "not_found", "no such session"});
    reply(res, a);
  }

  void rewind_plan(httplib::Response& res, const target& t, const std::string& token, json p) {
    if (auto* v = t.param("before_invocation_id"))
      p["before_invocation_id"] = *v;
    if (auto* v = t.param("before_version")) {
      auto n = parse_count(*v, std::uint64_t{1} << 53);
      if (!n)
        return send_error(res, bad("before_version must be a whole number"));
      p["before_version"] = *n;
    }
    reply(res, call(token, "rewind_plan", std::move(p)));
  }

  void stats(httplib::Response& res, const std::string& token) {
    auto a = call(token, "stats", json::object());
    if (!a.ok)
      return send_error(res, a.err);
    json out = a.result;
    out["console"] = {{"streams_open", streams_open.load()},
                      {"streams_total", streams_total.load()},
                      {"requests", requests.load()}};
    if (!cfg.store_dir.empty()) {
      std::uint64_t bytes = 0;
      for (const char* f : {"data.mdb", "lock.mdb"}) {
        struct stat st {};
        if (::stat((cfg.store_dir + "/" + f).c_str(), &st) == 0)
          bytes += static_cast<std::uint64_t>(st.st_blocks) * 512;
      }
      out["store_bytes_on_disk"] = bytes;
    }
    json series = json::array();
    {
      std::lock_guard<std::mutex> g(samples_mtx);
      for (auto& s : samples)
        series.push_back({s.t, s.commits, s.appends});
    }
    auto now = take_sample();
    series.push_back({now.t, now.commits, now.appends});
    out["samples"] = std::move(series);
    send_json(res, 200, {{"result", std::move(out)}});
  }

  // -- live streams -----------------------------------------------------------

  void watch(const httplib::Request& req, httplib::Response& res, const target& t,
             const std::string& token) {
    json p = json::object();
    std::string scope = t.param("scope") ? *t.param("scope") : "all";
    p["scope"] = scope;
    if (auto* v = t.param("app"))
      p["app_name"] = *v;
    if (auto* v = t.param("user"))
      p["user_id"] = *v;
    if (auto* v = t.param("session"))
      p["session_id"] = *v;
    if (scope == "app" || scope == "user")
      p["include_sessions"] = true;
    // A reconnecting EventSource names the last event it received.
    if (req.has_header("Last-Event-ID") && !req.get_header_value("Last-Event-ID").empty())
      p["from"] = req.get_header_value("Last-Event-ID");
    else if (auto* v = t.param("from"); v && !v->empty())
      p["from"] = *v;
    if (++streams_open > cfg.max_streams) {
      --streams_open;
      return send_error(res,
                        {503, "unavailable",
                         "the console has " + std::to_string(cfg.max_streams)
                           + " live streams open; try again later"});
    }
    auto st = std::make_shared<stream_state>();
    st->open_count = &streams_open;
    auto rc = rpc_cfg();
    auto* raw = st.get();
    rc.queued_output_bytes = [raw] {
      std::lock_guard<std::mutex> g(raw->mtx);
      return raw->queued_bytes;
    };
    rc.max_watch_backlog = stream_backlog;
    st->session = std::make_unique<protocol::rpc_session>(
      eng,
      [raw](std::string line) {
        auto j = json::parse(line, nullptr, false);
        std::lock_guard<std::mutex> g(raw->mtx);
        if (j.is_object() && j.contains("id")) {
          if (j["id"] == 1)
            raw->watch_answer = std::move(j);
        } else {
          raw->queued_bytes += line.size();
          raw->lines.push_back(std::move(line));
        }
        raw->cv.notify_all();
      },
      rc);
    if (cfg.tokens)
      st->session->handle_line(request_line(0, "authenticate", {{"token", token}}).dump());
    st->session->handle_line(request_line(1, "watch", p).dump());
    json ans;
    {
      std::unique_lock<std::mutex> g(st->mtx);
      if (!st->cv.wait_for(g, std::chrono::seconds(30),
                           [&] { return st->watch_answer.has_value(); }))
        return send_error(res, {503, "unavailable", "the watch did not start in time"});
      ans = *st->watch_answer;
    }
    auto a = answer_of(ans);
    if (!a.ok)
      return send_error(res, a.err);
    ++streams_total;
    std::string start = a.result.value("cursor", "");
    res.set_header("Cache-Control", "no-store");
    res.set_header("X-Accel-Buffering", "no");
    auto first = std::make_shared<bool>(true);
    auto last_write =
      std::make_shared<std::chrono::steady_clock::time_point>(std::chrono::steady_clock::now());
    res.set_chunked_content_provider(
      "text/event-stream",
      [this, st, start, first, last_write](std::size_t, httplib::DataSink& sink) {
        std::string out;
        if (*first) {
          *first = false;
          out = "retry: 1000\nid: " + start
            + "\nevent: ready\ndata: " + json{{"cursor", start}}.dump() + "\n\n";
        }
        std::deque<std::string> lines;
        {
          std::unique_lock<std::mutex> g(st->mtx);
          if (out.empty() && st->lines.empty())
            st->cv.wait_for(g, std::chrono::milliseconds(500),
                            [&] { return !st->lines.empty() || stopping.load(); });
          lines.swap(st->lines);
          st->queued_bytes = 0;
        }
        bool ended = false;
        for (auto& l : lines) {
          auto j = json::parse(l, nullptr, false);
          if (!j.is_object())
            continue;
          auto method = j.value("method", "");
          auto& params = j["params"];
          if (method == "changes") {
            out += "id: " + params.value("cursor", "") + "\nevent: changes\ndata: ";
            out += params.dump(-1, ' ', false, json::error_handler_t::replace);
            out += "\n\n";
          } else if (method == "watch_ended") {
            out += "event: ended\ndata: " + params.dump() + "\n\n";
            ended = true;
          }
        }
        auto now = std::chrono::steady_clock::now();
        // A comment every 5 s on a quiet stream: a page that went away is noticed at
        // the next write, and its slot freed.
        if (out.empty() && now - *last_write > std::chrono::seconds(5))
          out = ": keepalive\n\n";
        if (!out.empty()) {
          *last_write = now;
          if (!sink.write(out.data(), out.size()))
            return false;
        }
        if (!lines.empty())
          st->session->resume_watches();
        if (ended || stopping.load())
          sink.done();
        return true;
      });
  }

  // -- logins and actions -----------------------------------------------------

  void do_login(const httplib::Request& req, httplib::Response& res) {
    if (auto e = same_origin(req))
      return send_error(res, *e);
    if (!cfg.tokens)
      return send_error(res, bad("this console needs no login (it has no tokens)"));
    auto body = json::parse(req.body, nullptr, false);
    if (!body.is_object() || !body.contains("token") || !body["token"].is_string())
      return send_error(res, bad("the body must be {\"token\": TEXT}"));
    std::string token = body["token"];
    if (!cfg.tokens->current()->find(token))
      return send_error(res, {401, "unauthenticated", "the token is not valid"});
    std::string sid = random_hex(32);
    {
      std::lock_guard<std::mutex> g(logins_mtx);
      auto now = std::chrono::steady_clock::now();
      while (logins.size() >= cfg.max_logins) {
        auto oldest = std::min_element(logins.begin(), logins.end(),
                                       [](auto& a, auto& b) { return a.second.at < b.second.at; });
        logins.erase(oldest);
      }
      logins[sid] = login{token, random_hex(32), now};
    }
    res.set_header("Set-Cookie",
                   cookie_name + "=" + sid + "; Path=/; HttpOnly; SameSite=Strict"
                     + (cfg.tls ? "; Secure" : ""));
    send_json(res, 200, {{"result", true}});
  }

  void do_logout(const httplib::Request& req, httplib::Response& res) {
    if (auto e = same_origin(req))
      return send_error(res, *e);
    auto sid = cookie(req);
    {
      std::lock_guard<std::mutex> g(logins_mtx);
      logins.erase(sid);
    }
    res.set_header("Set-Cookie", cookie_name + "=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0");
    send_json(res, 200, {{"result", true}});
  }

  void do_action(const httplib::Request& req, httplib::Response& res) {
    if (auto e = same_origin(req))
      return send_error(res, *e);
    std::string token, csrf;
    if (auto e = caller(req, token, csrf))
      return send_error(res, *e);
    if (!same_secret(req.get_header_value("X-Console-CSRF"), csrf))
      return send_error(res, {403, "csrf", "the request lacks this page's CSRF token"});
    if (!cfg.actions)
      return send_error(
        res,
        {403, "permission_denied", "this console is read-only (started without --http-actions)"});
    auto body = json::parse(req.body, nullptr, false);
    if (!body.is_object() || !body.contains("action") || !body["action"].is_string())
      return send_error(res, bad("the body must be an object with an action"));
    std::string action = body["action"];
    static const std::map<std::string, std::pair<const char*, std::vector<const char*>>> table = {
      {"delete", {"delete_session", {}}},
      {"rewind",
       {"rewind_session", {"before_invocation_id", "before_version", "expected_version"}}},
      {"fork", {"fork_session", {"at_version", "new_session_id"}}},
    };
    auto it = table.find(action);
    if (it == table.end())
      return send_error(res, bad("action must be delete, rewind or fork"));
    // Only the action's own members go on, and only as strings or numbers.
    json p = json::object();
    std::vector<const char*> keys = {"app_name", "user_id", "session_id"};
    keys.insert(keys.end(), it->second.second.begin(), it->second.second.end());
    for (const char* k : keys) {
      if (!body.contains(k))
        continue;
      if (!body[k].is_string() && !body[k].is_number())
        return send_error(res, bad(std::string(k) + " must be a string or a number"));
      p[k] = body[k];
    }
    auto a = call(token, it->second.first, std::move(p));
    if (a.ok)
      log.info("console_action", "console " + action,
               {{"app_name", body.value("app_name", json(nullptr))}});
    reply(res, a);
  }

  // -- samples ----------------------------------------------------------------

  sample take_sample() const {
    auto s = eng.stats();
    double t =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    return {t, s.commits, s.appends};
  }

  void run_sampler() {
    std::unique_lock<std::mutex> g(samples_mtx);
    while (!stopping.load()) {
      samples.push_back(take_sample());
      if (samples.size() > max_samples)
        samples.pop_front();
      samples_cv.wait_for(g, cfg.sample_every, [&] { return stopping.load(); });
    }
  }
};

result<std::unique_ptr<console_server>> console_server::open(console_config cfg, engine& eng,
                                                             server::logger& log) {
  auto spec = server::parse_listen(cfg.http);
  if (!spec || spec->type != server::listen_spec::kind::tcp)
    return error{errc::invalid_argument, "--http needs [HOST:]PORT, not '" + cfg.http + "'"};
  auto p = std::make_unique<impl>(std::move(cfg), eng, log);
  p->host = spec->host;
  p->loopback = host_is_loopback(p->host);
  if (!p->loopback && !p->cfg.tokens && !p->cfg.insecure)
    return error{errc::invalid_argument,
                 "--http " + p->cfg.http
                   + " is beyond loopback: it needs --auth-file (or --insecure)"};
  if (p->cfg.tls) {
    auto& t = *p->cfg.tls;
    p->http = std::make_unique<httplib::SSLServer>(
      t.cert.c_str(), t.key.c_str(), t.client_ca.empty() ? nullptr : t.client_ca.c_str());
  } else {
    p->http = std::make_unique<httplib::Server>();
  }
  if (!p->http->is_valid())
    return error{errc::invalid_argument, "the console's TLS certificate or key cannot be loaded"};
  std::size_t workers = p->cfg.max_streams + 8;
  p->http->new_task_queue = [workers] { return new httplib::ThreadPool(workers); };
  // SO_REUSEADDR only: cpp-httplib's default also sets SO_REUSEPORT, which would let
  // a second console bind a port already taken and share its connections.
  p->http->set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  p->http->set_keep_alive_timeout(2);
  p->http->set_payload_max_length(max_body_bytes);
  auto* ip = p.get();
  p->http->set_pre_routing_handler([ip](const httplib::Request& req, httplib::Response& res) {
    if (req.method == "POST")
      return httplib::Server::HandlerResponse::Unhandled;
    ip->handle(req, res);
    return httplib::Server::HandlerResponse::Handled;
  });
  for (const char* path : {"/api/login", "/api/logout", "/api/action"})
    p->http->Post(
      path, [ip](const httplib::Request& req, httplib::Response& res) { ip->handle(req, res); });
  p->http->set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty())
      return;
    std::string kind = res.status == 404 ? "not_found"
      : res.status == 413                ? "too_large"
      : res.status >= 500                ? "internal"
                                         : "invalid_argument";
    send_error(res, {res.status, kind, "HTTP " + std::to_string(res.status)});
  });
  p->http->set_exception_handler(
    [](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
      send_error(res, {500, "internal", "the request failed"});
    });
  int port = 0;
  if (spec->port == "0") {
    port = p->http->bind_to_any_port(p->host);
    if (port <= 0)
      return error{errc::io_error, "cannot bind the console to " + server::describe(*spec)};
  } else {
    port = std::stoi(spec->port);
    if (!p->http->bind_to_port(p->host, port))
      return error{errc::io_error, "cannot bind the console to " + server::describe(*spec)};
  }
  p->port = port;
  bool v6 = p->host.find(':') != std::string::npos;
  std::string authority = (v6 ? "[" + p->host + "]" : p->host) + ":" + std::to_string(port);
  p->url = std::string(p->cfg.tls ? "https://" : "http://") + authority;
  p->allowed_hosts = {authority, "127.0.0.1:" + std::to_string(port),
                      "localhost:" + std::to_string(port), "[::1]:" + std::to_string(port)};
  p->cookie_name = "agentstate_console_" + std::to_string(port);
  p->open_csrf = random_hex(32);
  return std::unique_ptr<console_server>(new console_server(std::move(p)));
}

console_server::console_server(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

console_server::~console_server() {
  stop();
}

void console_server::start() {
  auto* p = impl_.get();
  p->sampler = std::thread([p] { p->run_sampler(); });
  p->thread = std::thread([p] { p->http->listen_after_bind(); });
  p->log.info("console", "console on " + p->url, {{"url", p->url}});
}

void console_server::stop() {
  auto* p = impl_.get();
  if (p->stopping.exchange(true))
    return;
  {
    std::lock_guard<std::mutex> g(p->samples_mtx);
    p->samples_cv.notify_all();
  }
  p->http->stop();
  if (p->thread.joinable())
    p->thread.join();
  if (p->sampler.joinable())
    p->sampler.join();
}

std::string console_server::url() const {
  return impl_->url;
}

} // namespace agentstate::console
