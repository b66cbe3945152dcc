// SPDX-License-Identifier: Apache-2.0
// client/client.cpp: rpc_client (agentstate/client.hpp): the send queue, the
// table of calls in flight by id, deadlines, the line reader, watch routing,
// and the end of a connection completing every call exactly once.
#include "agentstate/client.hpp"

#include <cstring>
#include <future>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>

#include "client/transport.hpp"

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
std::optional<std::uint64_t> id_in_head(const std::string& head) {
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

} // namespace

struct rpc_client::impl {
  struct pending {
    reply_handler done;
    watch_handler on_watch; ///< set for a watch call
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
    thread = std::thread([this] { io.run(); });
    io_thread = thread.get_id();
  }

  // -- calls -------------------------------------------------------------------

  void submit(const std::string& method, json params, reply_handler done, watch_handler on_watch,
              duration deadline) {
    std::uint64_t id;
    {
      std::lock_guard<std::mutex> g(mtx);
      id = next_id++;
    }
    json req{{"jsonrpc", "2.0"}, {"id", id}, {"method", method}};
    if (!params.is_null())
      req["params"] = std::move(params);
    auto text = dump_json(req);
    if (!text) {
      auto r = failed(errc::invalid_argument, "cannot write the request: " + text.err().message);
      return run_handler(done, std::move(r));
    }
    std::string& bytes = *text;
    bytes.push_back('\n');
    if (bytes.size() > opts.max_send_queue_bytes) {
      auto r = failed(errc::too_large,
                      "the request line of " + std::to_string(bytes.size())
                        + " bytes passes max_send_queue_bytes ("
                        + std::to_string(opts.max_send_queue_bytes) + ")");
      return run_handler(done, std::move(r));
    }
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
        out += bytes;
        pending p{std::move(done), std::move(on_watch), std::nullopt, deadline};
        if (deadline > duration::zero()) {
          p.deadline = clock_type::now() + deadline;
          deadlines.emplace(*p.deadline, id);
          if (*p.deadline < armed) {
            armed = *p.deadline;
            post_rearm = true;
          }
        }
        calls.emplace(id, std::move(p));
        if (!flushing)
          flushing = post_flush = true;
      }
    }
    if (refused)
      return run_handler(done, std::move(*refused));
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

  /// The pending call `id`, removed; nullopt when it already ended.
  std::optional<pending> take(std::uint64_t id) {
    std::lock_guard<std::mutex> g(mtx);
    auto it = calls.find(id);
    if (it == calls.end())
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
      run_handler(
        p.done,
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
    run_handler(p->done,
                failed(errc::too_large,
                       "the response is a line over max_line_bytes ("
                         + std::to_string(opts.max_line_bytes) + "); it was discarded"));
  }

  void handle_line(std::string_view text) {
    if (!text.empty() && text.back() == '\r')
      text.remove_suffix(1);
    if (text.empty())
      return;
    auto parsed = parse_json(text, max_reply_depth);
    if (!parsed || !parsed->is_object())
      return lose("the server sent a line that is not a JSON object");
    json& msg = *parsed;
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
    auto p = take(idp->get<std::uint64_t>());
    if (!p)
      return; // a call that already ended (its deadline passed)
    auto reply = reply_of(msg);
    if (!reply) {
      run_handler(p->done,
                  failed(errc::internal, "the server's response holds neither result nor error"));
      return;
    }
    if (p->on_watch && reply->value.ok()) {
      auto w = text_of(*reply->value, "watch_id");
      if (!w.empty())
        watches[w] = std::move(p->on_watch);
    }
    run_handler(p->done, std::move(*reply));
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
      run_handler(p.done, failed(errc::unavailable, why));
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
        raw->conn = std::move(*s);
        {
          std::lock_guard<std::mutex> g(raw->mtx);
          raw->open = true;
        }
        raw->start_read();
        connected.set_value(result<void>());
      });
  });
  auto r = f.get();
  if (!r)
    return std::move(r).err();
  std::unique_ptr<rpc_client> c(new rpc_client(p));
  if (!o.token.empty()) {
    auto left = std::chrono::duration_cast<duration>(deadline - clock_type::now());
    auto reply = c->call("authenticate", json{{"token", o.token}}, std::max(left, duration(1)));
    if (!reply.value)
      return std::move(reply.value).err();
  }
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
