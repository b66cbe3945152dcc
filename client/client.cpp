// SPDX-License-Identifier: Apache-2.0
// Over 600 lines: rpc_client's one impl (send queue, calls by id, deadlines, line reader,
// watches, the end of a connection) and the JSON text check its raw calls use.
// client/client.cpp: rpc_client (agentstate/client.hpp): the send queue, the
// table of calls in flight by id, deadlines, the line reader, watch routing,
// and the end of a connection completing every call exactly once.
#include "agentstate/client.hpp"

#include <array>
#include <csignal>
#include <cstring>
#include <future>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>

#include <pthread.h>

#include "client/transport.hpp"
#include "model/text.hpp"

namespace agentstate {

namespace {

using clock_type = std::chrono::steady_clock;

/// Reply bytes read per read_some.
constexpr std::size_t read_chunk = 256 * 1024;
/// Bytes of a discarded (too long) line kept to find its id.
constexpr std::size_t head_bytes = 64;
/// Nesting accepted in a server line: a client value (64 levels) inside the
/// response's own objects.
constexpr std::size_t max_reply_depth = 256;

rpc_reply failed(errc code, std::string why) {
  return rpc_reply(error{code, std::move(why)});
}

/// Runs a caller's handler; an exception it throws is dropped so the I/O
/// thread goes on.
template <class F, class... A>
void run_handler(F& f, A&&... a) noexcept {
  if (!f)
    return;
  try {
    f(std::forward<A>(a)...);
  } catch (...) {
  }
}

errc kind_code(const std::string& kind) {
  for (int i = 1; i <= static_cast<int>(errc::cursor_expired); ++i)
    if (kind == to_string(static_cast<errc>(i)))
      return static_cast<errc>(i);
  return errc::internal;
}

std::string text_of(const json& j, const char* key) {
  auto it = j.is_object() ? j.find(key) : j.end();
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

/// The reply a response object `msg` carries, or nullopt when it has
/// neither a `result` nor an `error` object.
std::optional<rpc_reply> reply_of(json& msg) {
  if (auto r = msg.find("result"); r != msg.end()) {
    rpc_reply out(result<json>(std::move(*r)));
    out.answered = true;
    return out;
  }
  auto e = msg.find("error");
  if (e == msg.end() || !e->is_object())
    return std::nullopt;
  const json& data = e->contains("data") ? (*e)["data"] : json::object();
  error x(kind_code(text_of(data, "kind")), text_of(*e, "message"));
  if (auto v = data.find("current_version"); v != data.end() && v->is_number_unsigned())
    x.current_version = v->get<std::uint64_t>();
  if (auto o = text_of(data, "oldest"); !o.empty())
    x.oldest_cursor = o;
  rpc_reply out{result<json>(std::move(x))};
  out.answered = true;
  out.error_object = std::move(*e);
  return out;
}

/// The id of a response line from its first bytes, in the server's compact
/// form ({"jsonrpc":"2.0","id":N,...}); nullopt when it is not there.
std::optional<std::uint64_t> id_in_head(std::string_view head) {
  static constexpr std::string_view prefix = R"({"jsonrpc":"2.0","id":)";
  if (head.compare(0, prefix.size(), prefix) != 0)
    return std::nullopt;
  std::uint64_t id = 0;
  std::size_t p = prefix.size(), digits = 0;
  for (; p < head.size() && head[p] >= '0' && head[p] <= '9' && digits < 19; ++p, ++digits)
    id = id * 10 + std::uint64_t(head[p] - '0');
  if (digits == 0 || p >= head.size() || head[p] != ',')
    return std::nullopt;
  return id;
}

/// Checks JSON text without building a value: one pass, no allocation
/// below 64 levels of nesting. Accepts exactly the texts
/// `json::accept` does (RFC 8259: UTF-8 checked, surrogate escapes
/// paired, numbers within a double's range), except a leading byte order
/// mark. With `max_depth`, a text nested deeper is refused too.
class json_checker {
public:
  explicit json_checker(std::string_view t, std::size_t max_depth = std::size_t(-1))
    : p_(t.data()), end_(t.data() + t.size()), max_depth_(max_depth) {}

  /// True when the whole text is one JSON value.
  bool one_value() {
    ws();
    if (!value())
      return false;
    ws();
    return p_ == end_;
  }

private:
  const char* p_;
  const char* end_;
  std::size_t max_depth_;
  /// The open containers, innermost last: '{' or '['.
  std::string open_;
  /// plain_[b]: byte b stands for itself in a string (printable ASCII but
  /// the quote and the backslash).
  static constexpr std::array<bool, 256> plain_ = [] {
    std::array<bool, 256> t{};
    for (int b = 0x20; b < 0x80; ++b)
      t[static_cast<std::size_t>(b)] = b != '"' && b != '\\';
    return t;
  }();

  void ws() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\n' || *p_ == '\r'))
      ++p_;
  }

  bool take(char c) {
    ws();
    if (p_ < end_ && *p_ == c)
      return ++p_, true;
    return false;
  }

  /// One value; containers are walked with open_, not recursion.
  bool value() {
    for (;;) {
      // A value starts here.
      if (p_ >= end_)
        return false;
      char c = *p_;
      if (c == '{' || c == '[') {
        ++p_;
        if (open_.size() >= max_depth_)
          return false;
        open_.push_back(c);
        if (take(c == '{' ? '}' : ']')) {
          open_.pop_back();
        } else {
          if (c == '{' && !key())
            return false;
          ws();
          continue; // the first member's or item's value
        }
      } else if (c == '"') {
        if (!string())
          return false;
      } else if (c == '-' || (c >= '0' && c <= '9')) {
        if (!number())
          return false;
      } else if (!literal("true") && !literal("false") && !literal("null")) {
        return false;
      }
      // After a value: close containers or go on to the next member or item.
      for (;;) {
        if (open_.empty())
          return true;
        const char in = open_.back();
        if (take(',')) {
          if (in == '{' && !key())
            return false;
          ws();
          break;
        }
        if (!take(in == '{' ? '}' : ']'))
          return false;
        open_.pop_back();
      }
    }
  }

  /// A member's name and colon.
  bool key() {
    ws();
    if (p_ >= end_ || *p_ != '"' || !string())
      return false;
    return take(':');
  }

  bool literal(std::string_view word) {
    if (static_cast<std::size_t>(end_ - p_) < word.size()
        || std::string_view(p_, word.size()) != word)
      return false;
    p_ += word.size();
    return true;
  }

  /// \uXXXX after the backslash and 'u' were taken; its code unit.
  bool unit(unsigned& out) {
    if (end_ - p_ < 4)
      return false;
    out = 0;
    for (int i = 0; i < 4; ++i) {
      int h = model::hex_digit(*p_++);
      if (h < 0)
        return false;
      out = out * 16 + static_cast<unsigned>(h);
    }
    return true;
  }

  /// A string, at its opening quote.
  bool string() {
    ++p_;
    while (p_ < end_) {
      // Printable ASCII other than the quote and the backslash, at a
      // table's lookup a byte.
      while (p_ < end_ && plain_[static_cast<unsigned char>(*p_)])
        ++p_;
      if (p_ >= end_)
        return false;
      auto c = static_cast<unsigned char>(*p_);
      if (c == '"')
        return ++p_, true;
      if (c < 0x20)
        return false;
      if (c == '\\') {
        if (++p_ >= end_)
          return false;
        char e = *p_++;
        if (e == 'u') {
          unsigned u = 0;
          if (!unit(u))
            return false;
          if (u >= 0xDC00 && u <= 0xDFFF)
            return false; // a low surrogate first
          if (u >= 0xD800 && u <= 0xDBFF) {
            unsigned low = 0;
            if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u')
              return false;
            p_ += 2;
            if (!unit(low) || low < 0xDC00 || low > 0xDFFF)
              return false;
          }
        } else if (e != '"' && e != '\\' && e != '/' && e != 'b' && e != 'f' && e != 'n' && e != 'r'
                   && e != 't') {
          return false;
        }
        continue;
      }
      if (c < 0x80) {
        ++p_;
        continue;
      }
      // UTF-8 (RFC 3629): the lead byte fixes the length and the range of
      // the byte after it.
      unsigned char lo = 0x80, hi = 0xBF;
      int more = 0;
      if (c >= 0xC2 && c <= 0xDF)
        more = 1;
      else if (c == 0xE0)
        more = 2, lo = 0xA0;
      else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF)
        more = 2;
      else if (c == 0xED)
        more = 2, hi = 0x9F;
      else if (c == 0xF0)
        more = 3, lo = 0x90;
      else if (c >= 0xF1 && c <= 0xF3)
        more = 3;
      else if (c == 0xF4)
        more = 3, hi = 0x8F;
      else
        return false;
      ++p_;
      for (int i = 0; i < more; ++i, ++p_) {
        if (p_ >= end_)
          return false;
        auto b = static_cast<unsigned char>(*p_);
        if (b < (i == 0 ? lo : 0x80) || b > (i == 0 ? hi : 0xBF))
          return false;
      }
    }
    return false;
  }

  /// A number; one with an exponent or a long one is read as a double by
  /// json::accept too, which refuses one too large for a double.
  bool number() {
    const char* from = p_;
    auto digits = [&] {
      const char* d = p_;
      while (p_ < end_ && *p_ >= '0' && *p_ <= '9')
        ++p_;
      return p_ > d;
    };
    if (*p_ == '-')
      ++p_;
    if (p_ < end_ && *p_ == '0')
      ++p_;
    else if (!digits())
      return false;
    if (p_ < end_ && *p_ == '.') {
      ++p_;
      if (!digits())
        return false;
    }
    bool exponent = false;
    if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
      exponent = true;
      ++p_;
      if (p_ < end_ && (*p_ == '+' || *p_ == '-'))
        ++p_;
      if (!digits())
        return false;
    }
    if (exponent || p_ - from > 300)
      return json::accept(from, p_);
    return true;
  }
};

/// True when `text` is one JSON value (json_checker).
bool is_one_json_value(std::string_view text) {
  return json_checker(text).one_value();
}

/// The JSON object `text` holds, or nullopt when it is not one JSON object
/// nested at most `max_depth` deep: checked first, so the parser needs no
/// per-token callback.
std::optional<json> parse_object(std::string_view text, std::size_t max_depth) {
  if (!json_checker(text, max_depth).one_value())
    return std::nullopt;
  auto v = json::parse(text.begin(), text.end(), nullptr, false);
  if (!v.is_object())
    return std::nullopt;
  return v;
}

/// `name` written as a JSON string: quoted as it is when it needs no escape
/// (a method's name), else by the JSON writer; an error when it is not UTF-8.
result<std::string> json_name(const std::string& name) {
  bool plain = true;
  for (unsigned char c : name)
    plain = plain && c >= 0x20 && c < 0x80 && c != '"' && c != '\\';
  if (!plain)
    return dump_json(json(name));
  std::string out;
  out.reserve(name.size() + 2);
  out += '"';
  out += name;
  out += '"';
  return out;
}

} // namespace

struct rpc_client::impl {
  struct pending {
    reply_handler done;
    watch_handler on_watch; ///< set for a watch call
    raw_reply_handler raw_done; ///< set (and `done` not) for call_raw_async
    std::optional<clock_type::time_point> deadline;
    duration allowed{0};
  };

  client_options opts;
  std::string name;
  asio::io_context io{1};
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::thread thread;
  std::thread::id io_thread;

  // Guarded by mtx.
  mutable std::mutex mtx;
  bool open = false; ///< calls are taken
  std::uint64_t next_id = 1;
  std::string out; ///< request bytes queued, not yet handed to a write
  std::size_t in_write = 0; ///< bytes of the write in progress
  bool flushing = false; ///< a flush is posted or a write is in progress
  std::unordered_map<std::uint64_t, pending> calls;
  std::set<std::pair<clock_type::time_point, std::uint64_t>> deadlines;
  clock_type::time_point armed = clock_type::time_point::max();
  std::string notice; ///< "KIND: MESSAGE" of the last null-id error line

  // The I/O thread's own.
  std::unique_ptr<client_detail::stream> conn;
  bool ended = false;
  std::string writing;
  std::string rbuf = std::string(read_chunk, '\0');
  std::string line; ///< the unfinished line
  bool discarding = false; ///< inside a line over max_line_bytes
  std::string discard_head;
  std::unordered_map<std::string, watch_handler> watches;
  asio::steady_timer timer{io};

  explicit impl(client_options o) : opts(std::move(o)) {}

  ~impl() {
    close("the client closed the connection");
    work.reset();
    if (thread.joinable())
      thread.join();
  }

  void start_thread() {
    work.emplace(io.get_executor());
    thread = std::thread([this] {
      // A write to a pipe whose reader is gone fails with EPIPE here
      // instead of raising SIGPIPE in the process (sockets use
      // MSG_NOSIGNAL).
      sigset_t pipe_signal;
      sigemptyset(&pipe_signal);
      sigaddset(&pipe_signal, SIGPIPE);
      pthread_sigmask(SIG_BLOCK, &pipe_signal, nullptr);
      io.run();
    });
    io_thread = thread.get_id();
  }

  /// Takes the connected stream `s` and starts reading. I/O thread.
  void begin(std::unique_ptr<client_detail::stream> s) {
    conn = std::move(s);
    {
      std::lock_guard<std::mutex> g(mtx);
      open = true;
    }
    start_read();
  }

  // -- calls -------------------------------------------------------------------

  /// Ends call `p` with `r`: a raw call gets the result as JSON text.
  static void finish(pending& p, rpc_reply r) {
    if (!p.raw_done)
      return run_handler(p.done, std::move(r));
    std::optional<rpc_raw_reply> out;
    if (r.value) {
      auto text = dump_json(*r.value);
      if (text)
        out.emplace(std::move(*text));
      else
        out.emplace(error{errc::internal,
                          "cannot write the server's result as JSON text: " + text.err().message});
    } else {
      out.emplace(std::move(r.value).err());
    }
    out->answered = r.answered;
    out->error_object = std::move(r.error_object);
    run_handler(p.raw_done, std::move(*out));
  }

  std::uint64_t take_id() {
    std::lock_guard<std::mutex> g(mtx);
    return next_id++;
  }

  void submit(const std::string& method, json params, reply_handler done, watch_handler on_watch,
              duration deadline) {
    pending p{std::move(done), std::move(on_watch), nullptr, std::nullopt, deadline};
    const std::uint64_t id = take_id();
    json req{{"jsonrpc", "2.0"}, {"id", id}, {"method", method}};
    if (!params.is_null())
      req["params"] = std::move(params);
    auto text = dump_json(req);
    if (!text)
      return finish(
        p, failed(errc::invalid_argument, "cannot write the request: " + text.err().message));
    text->push_back('\n');
    enqueue(id, std::move(*text), std::move(p));
  }

  void submit_raw(const std::string& method, std::string_view params_text, raw_reply_handler done,
                  duration deadline) {
    pending p{nullptr, nullptr, std::move(done), std::nullopt, deadline};
    auto name_text = json_name(method);
    if (!name_text)
      return finish(
        p, failed(errc::invalid_argument, "cannot write the request: " + name_text.err().message));
    if (!params_text.empty() && !is_one_json_value(params_text))
      return finish(p, failed(errc::invalid_argument, "the params text is not one JSON value"));
    const std::uint64_t id = take_id();
    std::string bytes;
    bytes.reserve(48 + name_text->size() + params_text.size());
    bytes += R"({"jsonrpc":"2.0","id":)";
    bytes += std::to_string(id);
    bytes += R"(,"method":)";
    bytes += *name_text;
    if (!params_text.empty()) {
      bytes += R"(,"params":)";
      const std::size_t at = bytes.size();
      bytes += params_text;
      // Valid JSON has a newline only as whitespace: a space keeps the line.
      for (std::size_t i = bytes.find('\n', at); i != std::string::npos; i = bytes.find('\n', i))
        bytes[i] = ' ';
    }
    bytes += "}\n";
    enqueue(id, std::move(bytes), std::move(p));
  }

  /// Queues request `id`'s line `bytes` (newline included) for call `p`, or
  /// ends `p` at once when it is refused.
  void enqueue(std::uint64_t id, std::string bytes, pending p) {
    if (bytes.size() > opts.max_send_queue_bytes)
      return finish(p,
                    failed(errc::too_large,
                           "the request line of " + std::to_string(bytes.size())
                             + " bytes passes max_send_queue_bytes ("
                             + std::to_string(opts.max_send_queue_bytes) + ")"));
    std::optional<rpc_reply> refused;
    bool post_flush = false, post_rearm = false;
    {
      std::lock_guard<std::mutex> g(mtx);
      std::size_t queued = out.size() + in_write;
      if (!open)
        refused = failed(errc::unavailable, "the connection to " + name + " is closed");
      else if (queued + bytes.size() > opts.max_send_queue_bytes)
        refused =
          failed(errc::unavailable,
                 "send queue full: " + std::to_string(queued) + " bytes wait to be sent to " + name
                   + " (max_send_queue_bytes " + std::to_string(opts.max_send_queue_bytes) + ")");
      else {
        if (p.allowed > duration::zero()) {
          p.deadline = clock_type::now() + p.allowed;
          deadlines.emplace(*p.deadline, id);
          if (*p.deadline < armed) {
            armed = *p.deadline;
            post_rearm = true;
          }
        }
        calls.emplace(id, std::move(p));
        out += bytes;
        if (!flushing)
          flushing = post_flush = true;
      }
    }
    if (refused)
      return finish(p, std::move(*refused));
    if (post_flush)
      asio::post(io, [this] { flush(); });
    if (post_rearm)
      asio::post(io, [this] { rearm(); });
  }

  rpc_reply wait_for(const std::function<void(reply_handler)>& start) {
    if (std::this_thread::get_id() == io_thread)
      return failed(errc::invalid_argument,
                    "a blocking call from the client's own I/O thread (a handler) would never end");
    std::promise<rpc_reply> got;
    auto f = got.get_future();
    start([&got](rpc_reply r) { got.set_value(std::move(r)); });
    return f.get();
  }

  /// The pending call `id`, removed; nullopt when it already ended, or,
  /// with `raw_only`, when it is not a raw call (which then stays).
  std::optional<pending> take(std::uint64_t id, bool raw_only = false) {
    std::lock_guard<std::mutex> g(mtx);
    auto it = calls.find(id);
    if (it == calls.end() || (raw_only && !it->second.raw_done))
      return std::nullopt;
    pending p = std::move(it->second);
    calls.erase(it);
    if (p.deadline)
      deadlines.erase({*p.deadline, id});
    return p;
  }

  // -- the I/O thread ----------------------------------------------------------

  void flush() {
    if (ended)
      return;
    {
      std::lock_guard<std::mutex> g(mtx);
      writing.swap(out);
      out.clear();
      in_write = writing.size();
      if (writing.empty()) {
        flushing = false;
        return;
      }
    }
    conn->write(asio::buffer(writing), [this](const asio::error_code& ec, std::size_t) {
      if (ended)
        return;
      if (ec)
        return lose("write: " + ec.message());
      {
        std::lock_guard<std::mutex> g(mtx);
        in_write = 0;
      }
      flush();
    });
  }

  void rearm() {
    if (ended)
      return;
    clock_type::time_point next;
    {
      std::lock_guard<std::mutex> g(mtx);
      next = deadlines.empty() ? clock_type::time_point::max() : deadlines.begin()->first;
      armed = next;
    }
    if (next == clock_type::time_point::max()) {
      timer.cancel();
      return;
    }
    timer.expires_at(next);
    timer.async_wait([this](const asio::error_code& ec) {
      if (!ec)
        expire();
    });
  }

  void expire() {
    if (ended)
      return;
    std::vector<pending> late;
    {
      std::lock_guard<std::mutex> g(mtx);
      auto now = clock_type::now();
      while (!deadlines.empty() && deadlines.begin()->first <= now) {
        auto id = deadlines.begin()->second;
        deadlines.erase(deadlines.begin());
        auto it = calls.find(id);
        if (it == calls.end())
          continue;
        late.push_back(std::move(it->second));
        calls.erase(it);
      }
    }
    rearm();
    for (auto& p : late)
      finish(
        p,
        failed(errc::unavailable,
               "no answer from " + name + " within " + std::to_string(p.allowed.count()) + " ms"));
  }

  void start_read() {
    conn->read_some(asio::buffer(rbuf), [this](const asio::error_code& ec, std::size_t n) {
      if (ended)
        return;
      if (ec) {
        if (client_detail::is_end_of_stream(ec))
          return lose(closed_message());
        if (ec == asio::error::connection_reset)
          return lose("connection reset");
        return lose("read: " + ec.message());
      }
      take_bytes(rbuf.data(), n);
      if (!ended)
        start_read();
    });
  }

  std::string closed_message() {
    std::lock_guard<std::mutex> g(mtx);
    return notice.empty() ? "the server closed the connection"
                          : "the server closed the connection (" + notice + ")";
  }

  /// Splits `n` bytes at `p` into lines, holding at most max_line_bytes of
  /// an unfinished one.
  void take_bytes(const char* p, std::size_t n) {
    while (n > 0 && !ended) {
      auto nl = static_cast<const char*>(std::memchr(p, '\n', n));
      std::size_t piece = nl ? static_cast<std::size_t>(nl - p) : n;
      if (discarding) {
        if (discard_head.size() < head_bytes)
          discard_head.append(p, std::min(piece, head_bytes - discard_head.size()));
      } else if (line.size() + piece > opts.max_line_bytes) {
        discarding = true;
        discard_head.assign(line, 0, std::min(line.size(), head_bytes));
        if (discard_head.size() < head_bytes)
          discard_head.append(p, std::min(piece, head_bytes - discard_head.size()));
        std::string().swap(line);
      } else if (nl && line.empty()) {
        // A whole line inside the buffer: no copy.
        handle_line(std::string_view(p, piece));
      } else {
        line.append(p, piece);
      }
      if (!nl)
        return;
      if (discarding) {
        discarding = false;
        oversize_line();
        discard_head.clear();
      } else if (!line.empty()) {
        std::string whole;
        whole.swap(line);
        handle_line(whole);
      }
      p += piece + 1;
      n -= piece + 1;
    }
  }

  void oversize_line() {
    auto id = id_in_head(discard_head);
    std::optional<pending> p;
    if (id)
      p = take(*id);
    if (!p)
      return lose("the server sent a line over max_line_bytes ("
                  + std::to_string(opts.max_line_bytes) + ") that answers no call in flight");
    finish(*p,
           failed(errc::too_large,
                  "the response is a line over max_line_bytes ("
                    + std::to_string(opts.max_line_bytes) + "); it was discarded"));
  }

  void handle_line(std::string_view text) {
    if (!text.empty() && text.back() == '\r')
      text.remove_suffix(1);
    if (text.empty())
      return;
    std::uint64_t id = 0;
    if (auto value = result_in_place(text, id)) {
      if (auto p = take(id, true)) {
        if (is_one_json_value(*value)) {
          rpc_raw_reply r{std::string(*value)};
          r.answered = true;
          return run_handler(p->raw_done, std::move(r));
        }
        return handle_parsed(text, std::move(p));
      }
    }
    handle_parsed(text, std::nullopt);
  }

  /// The `result` member's text of a response line in the server's compact
  /// form ({"jsonrpc":"2.0","id":N,"result":VALUE}), with `id` set to N;
  /// nullopt for any other line. VALUE is not checked here.
  static std::optional<std::string_view> result_in_place(std::string_view text, std::uint64_t& id) {
    static constexpr std::string_view member = R"("result":)";
    auto n = id_in_head(text);
    if (!n)
      return std::nullopt;
    auto at = text.find(',', 22); // after {"jsonrpc":"2.0","id":N
    if (at == std::string_view::npos || text.compare(at + 1, member.size(), member) != 0
        || text.back() != '}')
      return std::nullopt;
    id = *n;
    auto from = at + 1 + member.size();
    if (from >= text.size() - 1)
      return std::nullopt;
    return text.substr(from, text.size() - 1 - from);
  }

  /// Handles a line through its parsed value; `taken` is the call it answers
  /// when that was already removed from the table.
  void handle_parsed(std::string_view text, std::optional<pending> taken) {
    auto parsed = parse_object(text, max_reply_depth);
    if (!parsed) {
      if (taken)
        finish(*taken,
               failed(errc::unavailable, "the server sent a line that is not a JSON object"));
      return lose("the server sent a line that is not a JSON object");
    }
    json& msg = *parsed;
    std::optional<pending> p = std::move(taken);
    if (!p) {
      if (auto m = msg.find("method"); m != msg.end() && m->is_string())
        return notification(m->get<std::string>(), msg);
      auto idp = msg.find("id");
      if (idp == msg.end())
        return;
      if (idp->is_null()) {
        if (auto e = msg.find("error"); e != msg.end() && e->is_object()) {
          {
            std::lock_guard<std::mutex> g(mtx);
            notice = text_of(e->contains("data") ? (*e)["data"] : json(), "kind") + ": "
              + text_of(*e, "message");
          }
          run_handler(opts.on_server_error, *e);
        }
        return;
      }
      if (!idp->is_number_unsigned())
        return; // not an id of this client
      p = take(idp->get<std::uint64_t>());
      if (!p)
        return; // a call that already ended (its deadline passed)
    }
    auto reply = reply_of(msg);
    if (!reply) {
      finish(*p, failed(errc::internal, "the server's response holds neither result nor error"));
      return;
    }
    if (p->on_watch && reply->value.ok()) {
      auto w = text_of(*reply->value, "watch_id");
      if (!w.empty())
        watches[w] = std::move(p->on_watch);
    }
    finish(*p, std::move(*reply));
  }

  void notification(const std::string& method, json& msg) {
    bool ended_watch = method == "watch_ended";
    if (!ended_watch && method != "changes")
      return;
    auto params = msg.find("params");
    if (params == msg.end())
      return;
    auto it = watches.find(text_of(*params, "watch_id"));
    if (it == watches.end())
      return;
    watch_event ev;
    ev.what = ended_watch ? watch_event::kind::ended : watch_event::kind::changes;
    ev.params = std::move(*params);
    if (ended_watch) {
      auto h = std::move(it->second);
      watches.erase(it);
      run_handler(h, ev);
    } else {
      run_handler(it->second, ev);
    }
  }

  /// Ends the connection: every call in flight ends with unavailable (`why`)
  /// and every watch with `lost`, once. I/O thread.
  void lose(const std::string& why) {
    if (ended)
      return;
    ended = true;
    if (conn)
      conn->close();
    std::unordered_map<std::uint64_t, pending> all;
    {
      std::lock_guard<std::mutex> g(mtx);
      open = false;
      all.swap(calls);
      deadlines.clear();
      std::string().swap(out);
      in_write = 0;
    }
    timer.cancel();
    // `writing` stays: the aborted write may still name its bytes.
    std::string().swap(line);
    for (auto& [id, p] : all)
      finish(p, failed(errc::unavailable, why));
    watch_event lost;
    lost.what = watch_event::kind::lost;
    lost.params = nullptr;
    lost.why = error{errc::unavailable, why};
    auto ws = std::move(watches);
    watches.clear();
    for (auto& [id, h] : ws)
      run_handler(h, lost);
  }

  /// close() from any thread.
  void close(const std::string& why) {
    {
      std::lock_guard<std::mutex> g(mtx);
      open = false;
    }
    if (work)
      asio::post(io, [this, why] { lose(why); });
  }
};

result<std::unique_ptr<rpc_client>> rpc_client::connect(const client_options& o) {
  auto at = client_detail::parse_address(o.address);
  if (!at)
    return std::move(at).err();
  auto p = std::make_shared<impl>(o);
  p->opts.max_line_bytes = std::max<std::size_t>(o.max_line_bytes, 1024);
  p->opts.max_send_queue_bytes = std::max<std::size_t>(o.max_send_queue_bytes, 1024);
  p->name = server::describe(*at);
  p->start_thread();
  auto deadline = clock_type::now() + o.connect_timeout;
  std::promise<result<void>> connected;
  auto f = connected.get_future();
  impl* raw = p.get();
  asio::post(p->io, [raw, &at, &connected] {
    client_detail::connect_stream(
      raw->io, *at, raw->opts, raw->opts.connect_timeout,
      [raw, &connected](result<std::unique_ptr<client_detail::stream>> s) {
        if (!s) {
          raw->ended = true;
          return connected.set_value(std::move(s).err());
        }
        raw->begin(std::move(*s));
        connected.set_value(result<void>());
      });
  });
  auto r = f.get();
  if (!r)
    return std::move(r).err();
  return authenticated(std::unique_ptr<rpc_client>(new rpc_client(p)), o.token, deadline);
}

result<std::unique_ptr<rpc_client>> rpc_client::adopt(int read_fd, int write_fd,
                                                      const client_options& o) {
  if (o.tls)
    return error{errc::invalid_argument, "TLS is for TCP addresses, not descriptors"};
  auto deadline = clock_type::now() + o.connect_timeout;
  auto p = std::make_shared<impl>(o);
  p->opts.max_line_bytes = std::max<std::size_t>(o.max_line_bytes, 1024);
  p->opts.max_send_queue_bytes = std::max<std::size_t>(o.max_send_queue_bytes, 1024);
  p->name = "fd:" + std::to_string(read_fd) + "/" + std::to_string(write_fd);
  auto s = client_detail::adopt_stream(p->io, read_fd, write_fd);
  if (!s)
    return std::move(s).err();
  p->start_thread();
  impl* raw = p.get();
  std::promise<void> started;
  asio::post(p->io, [raw, &s, &started] {
    raw->begin(std::move(*s));
    started.set_value();
  });
  started.get_future().get();
  return authenticated(std::unique_ptr<rpc_client>(new rpc_client(p)), o.token, deadline);
}

result<std::unique_ptr<rpc_client>>
rpc_client::authenticated(std::unique_ptr<rpc_client> c, const std::string& token,
                          std::chrono::steady_clock::time_point deadline) {
  if (token.empty())
    return c;
  auto left = std::chrono::duration_cast<duration>(deadline - clock_type::now());
  auto reply = c->call("authenticate", json{{"token", token}}, std::max(left, duration(1)));
  if (!reply.value)
    return std::move(reply.value).err();
  return c;
}

rpc_client::rpc_client(std::shared_ptr<impl> p) : p_(std::move(p)) {}

rpc_client::~rpc_client() = default;

void rpc_client::call_async(const std::string& method, json params, reply_handler done,
                            duration deadline) {
  p_->submit(method, std::move(params), std::move(done), nullptr, deadline);
}

rpc_reply rpc_client::call(const std::string& method, json params, duration deadline) {
  return p_->wait_for([&](reply_handler done) {
    p_->submit(method, std::move(params), std::move(done), nullptr, deadline);
  });
}

void rpc_client::call_raw_async(const std::string& method, std::string_view params_text,
                                raw_reply_handler done, duration deadline) {
  p_->submit_raw(method, params_text, std::move(done), deadline);
}

void rpc_client::watch_async(json params, watch_handler on_event, reply_handler done,
                             duration deadline) {
  p_->submit("watch", std::move(params), std::move(done), std::move(on_event), deadline);
}

rpc_reply rpc_client::watch(json params, watch_handler on_event, duration deadline) {
  return p_->wait_for([&](reply_handler done) {
    p_->submit("watch", std::move(params), std::move(done), std::move(on_event), deadline);
  });
}

void rpc_client::unwatch_async(const std::string& watch_id, reply_handler done, duration deadline) {
  p_->submit("unwatch", json{{"watch_id", watch_id}}, std::move(done), nullptr, deadline);
}

void rpc_client::close() {
  p_->close("the client closed the connection");
}

bool rpc_client::connected() const {
  std::lock_guard<std::mutex> g(p_->mtx);
  return p_->open;
}

const std::string& rpc_client::server() const {
  return p_->name;
}

std::size_t rpc_client::queued_bytes() const {
  std::lock_guard<std::mutex> g(p_->mtx);
  return p_->out.size() + p_->in_write;
}

std::size_t rpc_client::outstanding() const {
  std::lock_guard<std::mutex> g(p_->mtx);
  return p_->calls.size();
}

} // namespace agentstate
