// SPDX-License-Identifier: Apache-2.0
// Over 600 lines: one class, a connection's whole state machine (read, admit, write, close).
#include "server/connection.hpp"

#include <sys/ioctl.h>
#include <sys/socket.h>
#ifdef __linux__
#include <linux/sockios.h>
#endif

#include <algorithm>
#include <cstring>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "protocol/framing.hpp"

namespace agentstate::server::detail {

std::string connection_error_line(const std::string& message) {
  json r{{"jsonrpc", "2.0"},
         {"id", nullptr},
         {"error",
          {{"code", protocol::rpc_code::engine_error},
           {"message", message},
           {"data", {{"kind", "unavailable"}}}}}};
  return r.dump() + "\n";
}

namespace {

/// Responses waiting to be written. Shared with the write callback and the
/// direct writes it defers; every member is guarded by `mtx`.
struct outbox {
  std::mutex mtx;
  std::string pending; ///< lines not yet taken by a write
  std::string spare; ///< see protocol::keep_spare
  std::size_t bytes = 0; ///< pending plus the write in progress
  std::size_t estimate = 0; ///< reservation per request in flight (connection.hpp)
  bool wake_posted = false;
  bool closed = false; ///< the socket is gone: drop what comes
  /// The socket for direct writes from engine workers; -1 for none (TLS,
  /// or once the strand has begun to close the socket).
  int fd = -1;
  bool busy = false; ///< a writer (the strand or a worker) holds the output
  bool direct = false; ///< with busy: the writer is a worker (fd in use)
  bool deferred = false; ///< a worker's idle point will write pending
  /// A watch waits for room (rpc_session::resume_watches): a writer that
  /// takes `bytes` to `watch_room` or below wakes the strand.
  bool watch_waits = false;
  std::size_t watch_room = 0;
  /// The strand waits for completed requests or written output (its reader
  /// is paused, or it is closing): each one posts a wake-up. Written by the
  /// strand under `mtx`; a completion reads it without `mtx` first. That
  /// read misses no wait: a completion is counted under the dispatcher's
  /// lock before it is read, and the strand, once it has set the flag,
  /// checks the counts under that same lock (may_admit, finish_if_idle), so
  /// either the strand sees the completion or the completion sees the flag.
  std::atomic<bool> strand_waits{false};
  std::uint64_t direct_bytes = 0; ///< written by workers, not yet counted by the strand
  clock::time_point direct_progress; ///< the last direct write that wrote bytes
};

/// A worker's direct write (see the head of connection.hpp): writes
/// `out.pending` to `out.fd` without blocking (protocol::write_rounds, as
/// the stdio line writer does), counting what it writes, and stops taking
/// more once the strand has begun to close the socket. `lock` holds out.mtx
/// on entry and on return;
/// REQUIRES: out.busy is false and out.fd is valid. Returns true when the
/// strand must be woken: bytes are left (the socket is full or failed; the
/// strand's own write then waits or reports the failure) or it waits.
bool write_direct(outbox& out, std::unique_lock<std::mutex>& lock, counters& stats) {
  out.busy = true;
  out.direct = true;
  // Full or failed alike leave bytes: the strand's own write waits for room
  // or reports the failure.
  const auto end = protocol::write_rounds(
    out.fd, true, out.pending, out.spare, lock, [](std::size_t) {},
    [&](std::size_t n) {
      if (n == 0)
        return;
      out.bytes -= n;
      out.direct_bytes += n;
      out.direct_progress = clock::now();
      stats.add(stats.bytes_out, n);
      stats.sub(stats.queued_output_bytes, n);
    },
    [&] { return out.fd < 0; }); // the strand is closing the socket and waits for this write
  out.busy = false;
  out.direct = false;
  return end != protocol::direct_end::drained || out.strand_waits
    || (out.watch_waits && out.bytes <= out.watch_room);
}

template <class Stream>
class connection final : public connection_base {
  static constexpr bool is_tls = std::is_same_v<Stream, tls_stream>;
  static constexpr bool is_unix = std::is_same_v<Stream, unix_socket>;
  static constexpr std::size_t read_chunk = 64 * 1024;
  /// How often a lingering close asks whether the peer has everything.
  static constexpr auto linger_poll = std::chrono::milliseconds(5);
  /// Fallback re-check while requests are in flight and the connection is
  /// paused or closing (completions normally wake it through on_complete).
  static constexpr auto poll_interval = std::chrono::milliseconds(50);

public:
  connection(std::shared_ptr<shared_state> sh, Stream stream, std::uint64_t id, std::string peer)
    : sh_(std::move(sh)), stream_(std::move(stream)), strand_(stream_.get_executor()),
      timer_(strand_), id_(id), peer_(std::move(peer)), out_(std::make_shared<outbox>()),
      opened_(clock::now()), last_progress_(opened_) {
    out_->estimate = std::max(std::size_t{1} << 20, floor_estimate());
  }

  ~connection() override { drop_partial(); }

  void displace() override {
    asio::post(strand_, [self = self()] {
      if (!self->unauth_ || self->closing_ || self->closed_)
        return; // authenticated meanwhile: it keeps its place
      self->sh_->stats.add(self->sh_->stats.auth_timeouts);
      self->fail("unauthenticated_displaced",
                 "not authenticated, and displaced by a newer connection (the server's share for "
                 "connections not authenticated is full); closing the connection");
    });
  }

  void start() override {
    asio::post(strand_, [self = self()] { self->begin(); });
  }

  void shutdown() override {
    asio::post(strand_, [self = self()] { self->begin_close("shutdown"); });
  }

  void drop() override {
    asio::post(strand_, [self = self()] { self->close_now("dropped at shutdown"); });
  }

  void access_changed() override {
    asio::post(strand_, [self = self()] {
      if (!self->closed_)
        self->rpc_->check_watch_access();
    });
  }

  std::size_t in_flight() const override {
    return (rpc_ ? rpc_->in_flight() : 0) + (decoding_.load() ? 1 : 0);
  }

private:
  std::shared_ptr<connection> self() {
    return std::static_pointer_cast<connection>(shared_from_this());
  }

  auto& socket() {
    if constexpr (is_tls)
      return stream_.next_layer();
    else
      return stream_;
  }

  std::size_t floor_estimate() const {
    return std::max<std::size_t>(
      1, sh_->lim.max_output_bytes / std::max<std::size_t>(1, sh_->lim.max_in_flight));
  }

  // -- start ---------------------------------------------------------------------

  void begin() {
    if constexpr (is_tls) {
      handshaking_ = true;
      tls_buf_.resize(16 * 1024);
      stream_.async_handshake(
        asio::ssl::stream_base::server,
        [self = self()](const asio::error_code& ec) { self->on_handshake(ec); });
      schedule();
    } else {
      socket().non_blocking(true);
      pump();
    }
  }

public:
  /// Creates the rpc_session. Call once, after construction and before the
  /// connection is published to other threads.
  void init() {
    protocol::rpc_config rc;
    rc.max_line_depth = sh_->max_line_depth;
    rc.max_in_flight = sh_->lim.max_in_flight;
    rc.max_in_flight_bytes = sh_->lim.max_in_flight_bytes;
    rc.server_in_flight_bytes = sh_->in_flight_bytes;
    rc.tokens = sh_->tokens;
    rc.server_stats = sh_->server_stats;
    auto sh = sh_;
    rc.on_error = [sh](std::string_view kind) { sh->stats.error(kind); };
    if (sh_->tokens) {
      unauth_ = true;
      unauth_since_ = opened_;
      sh_->on_auth_state(id_, true);
    }
    // Runs on the strand, inside handle_line: the connection outlives its
    // rpc_session.
    rc.on_authenticate = [this, sh, id = id_, peer = peer_](bool ok) {
      auth_changed(ok);
      if (ok) {
        sh->log->info("authenticated", "", {{"conn", id}, {"peer", peer}});
      } else {
        sh->stats.add(sh->stats.auth_failures);
        sh->log->warn("auth_failed", "a token was refused", {{"conn", id}, {"peer", peer}});
      }
    };
    if constexpr (!is_tls)
      out_->fd = socket().native_handle(); // not yet shared: no lock needed
    std::weak_ptr<connection> weak = self();
    auto out = out_;
    // Runs on_output on the strand (the outbox's one wake-up: wake_posted).
    auto wake = [weak, strand = strand_] {
      asio::post(strand, [weak] {
        if (auto c = weak.lock())
          c->on_output();
      });
    };
    // A completed request may let the reader take more lines.
    rc.queued_output_bytes = [out] {
      std::lock_guard<std::mutex> guard(out->mtx);
      return out->closed ? std::size_t{0} : out->bytes;
    };
    rc.max_watch_backlog = sh_->lim.max_output_bytes / 2;
    out_->watch_room = rc.max_watch_backlog / 2;
    rc.on_watch_paused = [out, wake] {
      bool post = false;
      {
        std::lock_guard<std::mutex> guard(out->mtx);
        out->watch_waits = true;
        if (!out->closed && !out->wake_posted) {
          out->wake_posted = true;
          post = true;
        }
      }
      if (post)
        wake();
    };
    rc.max_watches = sh_->lim.max_watches;
    rc.route = sh_->route;
    rc.cluster_map = sh_->cluster_map;
    rc.node_call = sh_->node_call;
    rc.forward = sh_->forward;
    rc.server_watches = sh_->watches;
    rc.max_server_watches = sh_->lim.max_server_watches;
    rc.on_complete = [out, wake] {
      if (!out->strand_waits.load(std::memory_order_acquire))
        return; // the usual case: nothing to wake, no lock taken
      bool post = false;
      {
        std::lock_guard<std::mutex> guard(out->mtx);
        if (out->strand_waits && !out->wake_posted) {
          out->wake_posted = true;
          post = true;
        }
      }
      if (post)
        wake();
    };
    rpc_ = std::make_unique<protocol::rpc_session>(
      *sh_->eng,
      [out, sh, wake, idle = sh_->idle](std::string line) {
        auto n = line.size() + 1;
        bool post = false;
        {
          std::lock_guard<std::mutex> guard(out->mtx);
          if (out->closed)
            return;
          protocol::queue_line(out->pending, out->spare, std::move(line));
          out->bytes += n;
          // Counted before the lock is released: from then on an I/O thread
          // may write these bytes and subtract them from the count.
          sh->stats.add(sh->stats.queued_output_bytes, n);
          out->estimate = std::max(out->estimate, n);
          if (out->busy)
            return; // the writer at work takes it along
          if (out->fd >= 0 && idle) {
            if (out->deferred)
              return; // the deferred write takes it along
            if (idle([out, sh, wake] {
                  bool post = false;
                  {
                    std::unique_lock<std::mutex> lock(out->mtx);
                    out->deferred = false;
                    if (out->busy || out->closed || out->fd < 0 || out->pending.empty())
                      return; // a writer at work, or the strand, takes it
                    if (write_direct(*out, lock, sh->stats) && !out->wake_posted) {
                      out->wake_posted = true;
                      post = true;
                    }
                  }
                  if (post)
                    wake();
                })) {
              out->deferred = true;
              return;
            }
          }
          if (!out->wake_posted) {
            out->wake_posted = true;
            post = true;
          }
        }
        if (post && !(idle && idle(wake)))
          wake();
      },
      rc);
  }

private:
  void on_handshake(const asio::error_code& ec) {
    handshaking_ = false;
    if (closed_)
      return finish_if_idle();
    if (ec) {
      sh_->stats.add(sh_->stats.tls_handshake_failures);
      sh_->log->warn("tls_handshake_failed", ec.message(), {{"conn", id_}, {"peer", peer_}});
      return close_now("tls handshake failed");
    }
    last_progress_ = clock::now();
    pump();
  }

  // A token was accepted (`ok`) or refused: the stream's access changed.
  void auth_changed(bool ok) {
    if (ok != unauth_)
      return; // no change: already authenticated, or still not
    unauth_ = !ok;
    if (!ok)
      unauth_since_ = clock::now();
    sh_->on_auth_state(id_, unauth_);
  }

  std::uint64_t line_limit() const {
    const auto& lim = sh_->lim;
    return unauth_ ? std::min(lim.max_line_bytes, lim.max_unauthenticated_line_bytes)
                   : lim.max_line_bytes;
  }

  // -- reading -------------------------------------------------------------------

  // Whether a line of `line_bytes` bytes (0: the next line, size not yet
  // known) may be handed to the rpc_session now: the in-flight bounds (count,
  // this connection's and the server's request bytes; one line is always
  // admitted when nothing is in flight, as rpc_session admits it) and the
  // output reservation. Admission is only ever checked by the strand, and
  // what it reads can only fall meanwhile, so handle_line never blocks.
  bool may_admit(std::uint64_t line_bytes = 0) {
    if (closing_ || closed_ || decoding_)
      return false;
    auto inflight = rpc_->in_flight();
    if (inflight >= sh_->lim.max_in_flight)
      return false;
    if (inflight > 0) {
      const auto need = std::max<std::uint64_t>(line_bytes, 1);
      if (rpc_->in_flight_bytes() + need > sh_->lim.max_in_flight_bytes)
        return false;
      if (sh_->in_flight_bytes->load(std::memory_order_relaxed) + need
          > sh_->lim.max_server_in_flight_bytes)
        return false;
    }
    std::size_t bytes, est;
    {
      std::lock_guard<std::mutex> guard(out_->mtx);
      bytes = out_->bytes;
      est = out_->estimate;
    }
    auto cap = sh_->lim.max_output_bytes;
    if (bytes >= cap)
      return false;
    return inflight == 0 || bytes + (inflight + 1) * est <= cap;
  }

  void arm_read() {
    reading_ = true;
    if constexpr (is_tls) {
      stream_.async_read_some(
        asio::buffer(tls_buf_),
        [self = self()](const asio::error_code& ec, std::size_t n) { self->on_read(ec, n); });
    } else {
      stream_.async_wait(Stream::wait_read,
                         [self = self()](const asio::error_code& ec) { self->on_readable(ec); });
    }
  }

  // Plain sockets: wait until readable, then read into the I/O thread's
  // buffer, so an idle connection holds no read buffer.
  void on_readable(const asio::error_code& ec) {
    reading_ = false;
    if (lingering_ && !closed_)
      return discard_input(ec);
    if (closing_ || closed_)
      return finish_if_idle();
    if (ec)
      return close_now("read failed: " + ec.message());
    thread_local std::vector<char> buf(read_chunk);
    asio::error_code rec;
    auto n = stream_.read_some(asio::buffer(buf), rec);
    if (rec == asio::error::would_block || rec == asio::error::try_again)
      return pump();
    on_read_data(rec, buf.data(), n);
  }

  void on_read(const asio::error_code& ec, std::size_t n) {
    reading_ = false;
    if (closing_ || closed_)
      return finish_if_idle();
    on_read_data(ec, tls_buf_.data(), n);
  }

  void on_read_data(const asio::error_code& ec, const char* data, std::size_t n) {
    if (n > 0) {
      bytes_in_ += n;
      sh_->stats.add(sh_->stats.bytes_in, n);
      last_progress_ = clock::now();
      auto used = process_input(std::string_view(data, n));
      if (used < n)
        backlog_.assign(data + used, n - used);
    }
    if (ec) {
      bool end = ec == asio::error::eof || ec == asio::error::connection_reset;
      if constexpr (is_tls)
        end = end || ec == asio::ssl::error::stream_truncated;
      if (!end)
        return close_now("read failed: " + ec.message());
      eof_ = true;
    }
    pump();
  }

  // Hands complete lines to the rpc_session while they may be admitted and
  // keeps a trailing partial line. Returns the bytes used; the rest waits.
  std::size_t process_input(std::string_view data) {
    auto max_line = line_limit();
    std::size_t pos = 0;
    while (pos < data.size() && !decoding_) {
      auto nl = static_cast<const char*>(std::memchr(data.data() + pos, '\n', data.size() - pos));
      if (!nl) {
        add_partial(data.substr(pos));
        return data.size();
      }
      auto seg = static_cast<std::size_t>(nl - (data.data() + pos));
      if (discarding_ || partial_bytes_ + seg > max_line) {
        auto total = discarding_ ? discarded_ + seg : partial_bytes_ + seg;
        const bool budget = over_budget_;
        drop_partial();
        ++requests_;
        sh_->stats.add(sh_->stats.requests);
        answer_discarded(total, max_line, budget);
        pos += seg + 1;
        continue;
      }
      if (!may_admit(partial_bytes_ + seg))
        break;
      ++requests_;
      sh_->stats.add(sh_->stats.requests);
      if (parts_.empty()) {
        hand_in(data.substr(pos, seg), nullptr);
      } else {
        std::string line;
        line.reserve(partial_bytes_ + seg);
        for (auto& p : parts_)
          line += p;
        line.append(data.data() + pos, seg);
        drop_partial();
        hand_in(line, &line);
      }
      pos += seg + 1;
      max_line = line_limit(); // an authenticate may have changed it
    }
    return pos;
  }

  // Hands an admitted line to the rpc_session: at once, or, when it is long
  // (shared_state::decode_off_thread_bytes), decoded on the server's
  // decoding threads first and handed in by take_decoded; meanwhile
  // (decoding_) nothing more is read or handed in. `owned`, when not null,
  // holds the line's bytes (`line` views them) and may be taken.
  void hand_in(std::string_view line, std::string* owned) {
    if (!sh_->decoders || line.size() < sh_->decode_off_thread_bytes) {
      rpc_->handle_line(line);
      note_in_flight_bytes();
      return;
    }
    if (owned)
      decode_text_ = std::move(*owned);
    else
      decode_text_.assign(line.data(), line.size());
    std::function<void()> job = [self = self()] { decode_job(self); };
    // Its bytes are in flight from here on, for the server's bound: the
    // reservation becomes the rpc_session's own count when it is handed in.
    decoding_bytes_ = decode_text_.size();
    sh_->in_flight_bytes->fetch_add(decoding_bytes_, std::memory_order_relaxed);
    decoding_ = true;
    if (sh_->decoders->post(job)) {
      note_in_flight_bytes();
      return;
    }
    // No decoding thread: decoded here after all.
    decoding_ = false;
    sh_->in_flight_bytes->fetch_sub(decoding_bytes_, std::memory_order_relaxed);
    decoding_bytes_ = 0;
    rpc_->handle_line(decode_text_);
    std::string().swap(decode_text_);
    note_in_flight_bytes();
  }

  // On a decoding thread: decodes decode_text_ (the strand leaves it alone
  // while decoding_ is set), leaves the result for the strand and wakes it.
  // Should the wake-up fail (no memory), the strand's poll finds the result
  // (schedule).
  static void decode_job(const std::shared_ptr<connection>& self) noexcept {
    auto d = self->rpc_->decode(std::move(self->decode_text_));
    {
      std::lock_guard<std::mutex> lk(self->decoded_mtx_);
      self->decoded_ = std::move(d);
    }
    try {
      asio::post(self->strand_, [self] { self->pump(); });
    } catch (...) {
    }
  }

  // Hands in the line decoded off the strand once its decoding is done (a
  // closed connection drops it: nothing could be answered).
  void take_decoded() {
    if (!decoding_)
      return;
    std::optional<protocol::decoded_line> d;
    {
      std::lock_guard<std::mutex> lk(decoded_mtx_);
      if (!decoded_)
        return; // still decoding
      d.swap(decoded_);
    }
    decoding_ = false;
    sh_->in_flight_bytes->fetch_sub(decoding_bytes_, std::memory_order_relaxed);
    decoding_bytes_ = 0;
    if (closed_)
      return;
    rpc_->handle_decoded(std::move(*d));
    note_in_flight_bytes();
    if (closing_)
      rpc_->end_watches(); // a watch it started ends with the connection
  }

  // Only admissions raise the bytes in flight: the peak is taken after each.
  void note_in_flight_bytes() {
    sh_->stats.raise(sh_->stats.in_flight_bytes_peak,
                     sh_->in_flight_bytes->load(std::memory_order_relaxed));
  }

  // Answers a discarded line of `total` bytes: over the connection's line
  // limit, or (`budget`) over the server's budget for partial lines.
  void answer_discarded(std::uint64_t total, std::uint64_t limit, bool budget) {
    if (budget)
      rpc_->handle_oversized_line(
        total, limit,
        "unfinished request lines of all connections reached --max-partial-bytes ("
          + std::to_string(sh_->lim.max_partial_bytes) + " bytes)");
    else if (unauth_ && limit < sh_->lim.max_line_bytes)
      rpc_->handle_oversized_line(total, limit, "before authentication");
    else
      rpc_->handle_oversized_line(total, limit);
  }

  void add_partial(std::string_view piece) {
    if (!in_line())
      line_started_ = clock::now();
    if (discarding_) {
      discarded_ += piece.size();
      return;
    }
    const bool over_line = partial_bytes_ + piece.size() > line_limit();
    const bool over_budget = !over_line
      && sh_->partial_bytes.fetch_add(piece.size()) + piece.size() > sh_->lim.max_partial_bytes;
    if (over_line || over_budget) {
      if (over_budget)
        sh_->partial_bytes.fetch_sub(piece.size());
      auto total = partial_bytes_ + piece.size();
      drop_partial();
      discarding_ = true;
      over_budget_ = over_budget;
      discarded_ = total;
      return;
    }
    partial_bytes_ += piece.size();
    // Small pieces are joined, so a line sent a byte at a time costs no more
    // than its bytes and a little.
    if (!parts_.empty() && parts_.back().size() < 4096)
      parts_.back().append(piece.data(), piece.size());
    else
      parts_.emplace_back(piece);
  }

  void drop_partial() {
    std::vector<std::string>().swap(parts_);
    if (partial_bytes_ > 0)
      sh_->partial_bytes.fetch_sub(partial_bytes_);
    over_budget_ = false;
    partial_bytes_ = 0;
    discarding_ = false;
    discarded_ = 0;
  }

  bool in_line() const { return discarding_ || !parts_.empty(); }

  // -- the state machine -------------------------------------------------------

  // Decides what to do next: admit waiting lines, read, or finish.
  void pump() {
    take_decoded();
    if (closed_)
      return finish_if_idle();
    if (!closing_ && !backlog_.empty()) {
      auto used = process_input(backlog_);
      backlog_.erase(0, used);
      if (backlog_.empty())
        std::string().swap(backlog_);
    }
    if (decoding_) {
      // The line being decoded comes first; its decoding pumps again.
      if (closing_)
        return finish_if_idle();
      schedule();
      return;
    }
    if (!closing_ && eof_ && backlog_.empty()) {
      // End of input: a last line without '\n' counts.
      if (in_line()) {
        if (!may_admit(partial_bytes_)) {
          schedule();
          return;
        }
        ++requests_;
        sh_->stats.add(sh_->stats.requests);
        if (discarding_) {
          auto total = discarded_;
          const bool budget = over_budget_;
          drop_partial();
          answer_discarded(total, line_limit(), budget);
        } else {
          std::string line;
          line.reserve(partial_bytes_);
          for (auto& p : parts_)
            line += p;
          drop_partial();
          hand_in(line, &line);
          if (decoding_) {
            schedule(); // closes once the line is handed in (its decoding pumps again)
            return;
          }
        }
      }
      begin_close("end of input");
      return;
    }
    if (!closing_ && !handshaking_ && !reading_ && !eof_) {
      if (backlog_.empty() && may_admit()) {
        if (paused_ && in_line())
          line_started_ = clock::now(); // the line's time runs while it is read
        paused_ = false;
        arm_read();
      } else if (!paused_) {
        paused_ = true;
        sh_->stats.add(sh_->stats.paused_reads);
      }
    }
    update_waits();
    if (closing_)
      return finish_if_idle();
    schedule();
  }

  // Tells completions and direct writers whether the strand waits for them
  // (outbox::strand_waits). On starting to wait, checks again whether a
  // request may be admitted: a completion between the strand's check and
  // the flag did not wake it.
  // The strand alone writes the flag, so it locks only when it changes.
  void update_waits() {
    const bool waits = closing_ || paused_ || eof_ || !backlog_.empty();
    if (waits == waits_)
      return;
    waits_ = waits;
    {
      std::lock_guard<std::mutex> guard(out_->mtx);
      out_->strand_waits.store(waits, std::memory_order_release);
    }
    if (waits && !closing_ && !closed_ && may_admit())
      asio::post(strand_, [self = self()] { self->pump(); });
  }

  // Stops direct writes (the strand is about to close the socket): no
  // worker starts one from here on, and one under way is waited for. A
  // direct write is one non-blocking send per round, so the wait is short.
  void stop_direct_writes() {
    std::unique_lock<std::mutex> lock(out_->mtx);
    out_->fd = -1;
    while (out_->direct) {
      lock.unlock();
      std::this_thread::yield();
      lock.lock();
    }
  }

  // Takes the progress of direct writes into the strand's own counts.
  void sync_direct_progress() {
    std::lock_guard<std::mutex> guard(out_->mtx);
    if (out_->direct_bytes == 0)
      return;
    bytes_out_ += out_->direct_bytes;
    out_->direct_bytes = 0;
    last_progress_ = std::max(last_progress_, out_->direct_progress);
  }

  void on_output() {
    {
      std::lock_guard<std::mutex> guard(out_->mtx);
      out_->wake_posted = false;
    }
    last_progress_ = clock::now();
    start_write();
    resume_watches();
    pump();
  }

  // Restarts the watches paused for room once the output has drained to
  // outbox::watch_room.
  void resume_watches() {
    if (closing_ || closed_ || !rpc_->watches_paused())
      return;
    {
      std::lock_guard<std::mutex> guard(out_->mtx);
      if (out_->bytes > out_->watch_room) {
        out_->watch_waits = true;
        return;
      }
    }
    rpc_->resume_watches();
    // A watch that paused meanwhile set the flag itself (and posted a wake).
    std::lock_guard<std::mutex> guard(out_->mtx);
    out_->watch_waits = rpc_->watches_paused();
  }

  // Writes what the outbox holds, unless a worker is writing it (that
  // worker wakes the strand if it leaves bytes). The strand holds the outbox
  // (owns_output_) from taking a batch until the outbox is empty.
  void start_write() {
    if (writing_ || closed_ || handshaking_)
      return;
    if (write_off_ >= write_buf_.size()) {
      std::lock_guard<std::mutex> guard(out_->mtx);
      if (out_->busy && !owns_output_)
        return;
      if (out_->pending.empty()) {
        if (owns_output_)
          out_->busy = owns_output_ = false;
        return;
      }
      write_buf_ = std::move(out_->pending);
      out_->pending = std::string();
      write_off_ = 0;
      out_->busy = owns_output_ = true;
    }
    writing_ = true;
    stream_.async_write_some(
      asio::buffer(write_buf_.data() + write_off_, write_buf_.size() - write_off_),
      [self = self()](const asio::error_code& ec, std::size_t n) { self->on_written(ec, n); });
  }

  void on_written(const asio::error_code& ec, std::size_t n) {
    writing_ = false;
    if (n > 0) {
      write_off_ += n;
      bytes_out_ += n;
      sh_->stats.add(sh_->stats.bytes_out, n);
      sh_->stats.sub(sh_->stats.queued_output_bytes, n);
      {
        std::lock_guard<std::mutex> guard(out_->mtx);
        out_->bytes -= n;
      }
      last_progress_ = clock::now();
    }
    if (closed_)
      return finish_if_idle();
    if (ec && ec != asio::error::would_block && ec != asio::error::try_again)
      return close_now("write failed: " + ec.message());
    if (write_off_ >= write_buf_.size()) {
      write_off_ = 0;
      if (write_buf_.capacity() > read_chunk)
        std::string().swap(write_buf_);
      else
        write_buf_.clear();
    }
    start_write();
    resume_watches();
    pump();
  }

  // Stops reading; the connection closes once nothing is in flight and every
  // response is written.
  void begin_close(const std::string& reason) {
    if (closing_ || closed_)
      return;
    closing_ = true;
    close_reason_ = reason;
    closing_since_ = clock::now();
    drop_partial();
    std::string().swap(backlog_);
    update_waits(); // completions and direct writes wake the strand from here on
    rpc_->end_watches(); // each watch_ended (closing) is queued before the close
    finish_if_idle();
  }

  // Sends a connection-level error line, then closes gracefully.
  void fail(const std::string& event, const std::string& message) {
    if (closing_ || closed_)
      return;
    sh_->log->warn(event, message, {{"conn", id_}, {"peer", peer_}});
    auto line = connection_error_line(message);
    {
      std::lock_guard<std::mutex> guard(out_->mtx);
      out_->pending += line;
      out_->bytes += line.size();
      sh_->stats.add(sh_->stats.queued_output_bytes, line.size());
    }
    begin_close(event);
    start_write();
  }

  // Closes the socket at once; responses still owed are dropped.
  void close_now(const std::string& reason) {
    if (closed_)
      return finish_if_idle();
    if (close_reason_.empty() || !closing_)
      close_reason_ = reason;
    closing_ = true;
    closed_ = true;
    stop_direct_writes();
    std::size_t unwritten;
    {
      std::lock_guard<std::mutex> guard(out_->mtx);
      out_->closed = true;
      out_->busy = owns_output_ = false;
      unwritten = out_->bytes;
      out_->bytes = 0;
      std::string().swap(out_->pending);
      std::string().swap(out_->spare);
    }
    sh_->stats.sub(sh_->stats.queued_output_bytes, unwritten);
    rpc_->end_watches(); // their lines are dropped; the engine watches end
    std::string().swap(write_buf_);
    write_off_ = 0;
    drop_partial();
    std::string().swap(backlog_);
    asio::error_code ignored;
    socket().close(ignored);
    finish_if_idle();
  }

  // The last step: once nothing is in flight and all is written, close the
  // socket (if still open) and leave the registry.
  void finish_if_idle() {
    if (finished_)
      return;
    if (rpc_->in_flight() > 0 || (decoding_ && !closed_)) {
      schedule();
      return;
    }
    if (!closed_) {
      bool output;
      {
        std::lock_guard<std::mutex> guard(out_->mtx);
        output = out_->bytes > 0;
      }
      if (output || writing_) {
        start_write();
        schedule();
        return;
      }
      if constexpr (is_tls) {
        if (!handshaking_ && !tls_shutdown_started_) {
          if (reading_) {
            // The read must end before the shutdown runs; it ends aborted.
            asio::error_code ignored;
            socket().cancel(ignored);
            return;
          }
          tls_shutdown_started_ = true;
          tls_shutdown_deadline_ = clock::now() + std::chrono::seconds(1);
          stream_.async_shutdown([self = self()](const asio::error_code&) {
            self->tls_shutdown_done_ = true;
            self->finish_if_idle();
          });
          schedule();
          return;
        }
        if (tls_shutdown_started_ && !tls_shutdown_done_) {
          schedule();
          return;
        }
      }
      if (!linger_checked_) {
        linger_checked_ = true;
        stop_direct_writes();
        begin_linger();
      }
      if (lingering_ && !peer_eof_ && unacked_bytes() > 0) {
        schedule();
        return;
      }
      asio::error_code ignored;
      socket().shutdown(asio::socket_base::shutdown_both, ignored);
      socket().close(ignored);
      closed_ = true;
      std::lock_guard<std::mutex> guard(out_->mtx);
      out_->closed = true;
    }
    if (reading_ || writing_ || handshaking_) {
      // The socket is closed: the pending operations complete (aborted) soon.
      return;
    }
    finished_ = true;
    if (unauth_) {
      unauth_ = false;
      sh_->on_auth_state(id_, false);
    }
    sync_direct_progress();
    asio::error_code ignored;
    timer_.cancel();
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - opened_);
    sh_->log->info("connection_closed", close_reason_.empty() ? "closed" : close_reason_,
                   {{"conn", id_},
                    {"peer", peer_},
                    {"requests", requests_},
                    {"bytes_in", bytes_in_},
                    {"bytes_out", bytes_out_},
                    {"duration_ms", ms.count()}});
    sh_->on_finished(id_);
  }

  // -- lingering close --------------------------------------------------------------

  // Closing a TCP socket with input still unread makes the kernel answer with
  // a reset, which drops whatever it has not yet sent: responses written but
  // still in the send queue would never reach the client. So when the client
  // may still send (no end of input) and has not yet acknowledged every byte,
  // the connection closes its sending side (the FIN follows the last
  // response), reads and discards input, and closes once the peer has
  // acknowledged everything, the peer ends its input, or the closing grace
  // runs out (on_timer: a client not taking its responses).
  void begin_linger() {
    if (eof_ || unacked_bytes() == 0)
      return;
    lingering_ = true;
    asio::error_code ignored;
    socket().shutdown(asio::socket_base::shutdown_send, ignored);
    if constexpr (!is_tls)
      arm_read(); // on_readable discards while lingering
  }

  // Lingering: input is read and dropped; nothing of it is taken.
  void discard_input(const asio::error_code& ec) {
    if (!ec) {
      thread_local std::vector<char> buf(read_chunk);
      for (int i = 0; i < 16; ++i) { // then the strand's other work runs
        asio::error_code rec;
        auto n = stream_.read_some(asio::buffer(buf), rec);
        if (rec == asio::error::would_block || rec == asio::error::try_again)
          break;
        if (rec || n == 0) {
          peer_eof_ = true; // end of input, or the peer is gone: nothing more to wait for
          break;
        }
      }
    } else {
      peer_eof_ = true;
    }
    if (!peer_eof_)
      arm_read();
    finish_if_idle();
  }

  // The bytes sent that the peer has not acknowledged (the FIN counts one);
  // 0 for a Unix socket (what was sent is in the peer's queue) and where the
  // platform cannot tell.
  std::size_t unacked_bytes() {
#if defined(__linux__) && defined(SIOCOUTQ)
    if constexpr (!is_unix) {
      int n = 0;
      if (::ioctl(socket().native_handle(), SIOCOUTQ, &n) == 0 && n > 0)
        return static_cast<std::size_t>(n);
    }
#endif
    return 0;
  }

  // -- timers -------------------------------------------------------------------

  // Arms the timer for the earliest deadline that applies now.
  void schedule() {
    if (finished_)
      return;
    auto now = clock::now();
    auto next = clock::time_point::max();
    auto consider = [&](clock::time_point t) { next = std::min(next, t); };
    const auto& lim = sh_->lim;
    bool inflight = rpc_->in_flight() > 0;
    if (decoding_)
      consider(now + poll_interval); // in case the decoding's wake-up was lost
    if (closed_) {
      if (inflight)
        consider(now + poll_interval);
    } else {
      if (handshaking_ && lim.line_timeout.count() > 0)
        consider(opened_ + lim.line_timeout);
      if (tls_shutdown_started_ && !tls_shutdown_done_)
        consider(tls_shutdown_deadline_);
      if (lingering_ && !peer_eof_)
        consider(now + linger_poll);
      if (!closing_ && reading_ && in_line() && lim.line_timeout.count() > 0)
        consider(line_started_ + lim.line_timeout);
      if (lim.idle_timeout.count() > 0 && !closing_)
        consider(last_progress_ + lim.idle_timeout);
      if (unauth_ && lim.auth_timeout.count() > 0 && !closing_)
        consider(unauth_since_ + lim.auth_timeout);
      if (closing_)
        consider(std::max(last_progress_, closing_since_)
                 + std::max(lim.shutdown_grace, std::chrono::seconds(1)));
      if (paused_ && inflight)
        consider(now + poll_interval);
    }
    if (next == clock::time_point::max())
      return;
    if (timer_armed_ && timer_at_ <= next)
      return;
    timer_armed_ = true;
    timer_at_ = next;
    auto gen = ++timer_gen_;
    timer_.expires_at(next);
    timer_.async_wait([self = self(), gen](const asio::error_code&) { self->on_timer(gen); });
  }

  void on_timer(std::uint64_t gen) {
    if (gen != timer_gen_)
      return; // superseded by a re-arm
    timer_armed_ = false;
    if (finished_)
      return;
    sync_direct_progress();
    auto now = clock::now();
    const auto& lim = sh_->lim;
    if (!closed_) {
      if (handshaking_ && lim.line_timeout.count() > 0 && now >= opened_ + lim.line_timeout) {
        sh_->stats.add(sh_->stats.tls_handshake_failures);
        sh_->log->warn("tls_handshake_failed", "handshake not completed in time",
                       {{"conn", id_}, {"peer", peer_}});
        return close_now("tls handshake timed out");
      }
      if (tls_shutdown_started_ && !tls_shutdown_done_ && now >= tls_shutdown_deadline_) {
        tls_shutdown_done_ = true; // the peer did not answer close_notify
        return finish_if_idle();
      }
      if (!closing_ && reading_ && in_line() && lim.line_timeout.count() > 0
          && now >= line_started_ + lim.line_timeout) {
        sh_->stats.add(sh_->stats.line_timeouts);
        return fail("line_timeout",
                    "request line not completed within " + std::to_string(lim.line_timeout.count())
                      + " s; closing the connection");
      }
      if (!closing_ && unauth_ && lim.auth_timeout.count() > 0
          && now >= unauth_since_ + lim.auth_timeout) {
        sh_->stats.add(sh_->stats.auth_timeouts);
        return fail("auth_timeout",
                    "not authenticated within " + std::to_string(lim.auth_timeout.count())
                      + " s; closing the connection");
      }
      if (!closing_ && lim.idle_timeout.count() > 0 && now >= last_progress_ + lim.idle_timeout
          && rpc_->in_flight() == 0 && !decoding_) {
        sh_->stats.add(sh_->stats.idle_timeouts);
        bool stalled;
        {
          std::lock_guard<std::mutex> guard(out_->mtx);
          stalled = out_->bytes > 0;
        }
        if (stalled) {
          sh_->log->warn("idle_timeout",
                         "the client has not read its responses for "
                           + std::to_string(lim.idle_timeout.count()) + " s; dropping them",
                         {{"conn", id_}, {"peer", peer_}});
          return close_now("output not read");
        }
        if (rpc_->watching()) {
          // Waiting for changes is not idleness: the watch's client reads
          // what it is sent (else `stalled` above), so the timeout restarts.
          last_progress_ = now;
          return schedule();
        }
        return fail("idle_timeout",
                    "idle for " + std::to_string(lim.idle_timeout.count())
                      + " s; closing the connection");
      }
      if (closing_
          && now >= std::max(last_progress_, closing_since_)
              + std::max(lim.shutdown_grace, std::chrono::seconds(1))
          && rpc_->in_flight() == 0) {
        // Closing, and the client takes no more of its responses: the log
        // line says so (close_now keeps the reason a close began with).
        close_reason_ += "; the client is not reading its responses";
        return close_now(close_reason_);
      }
    }
    pump();
  }

  std::shared_ptr<shared_state> sh_;
  Stream stream_;
  strand_t strand_;
  timer_t timer_;
  std::uint64_t id_;
  std::string peer_;
  std::unique_ptr<protocol::rpc_session> rpc_;
  std::shared_ptr<outbox> out_;

  // input
  std::string backlog_; ///< read, not yet admitted (at most one read)
  std::vector<std::string> parts_; ///< the partial line's pieces
  std::uint64_t partial_bytes_ = 0;
  bool discarding_ = false; ///< the current line is over the limit
  bool over_budget_ = false; ///< ... over the server's partial-line budget
  std::uint64_t discarded_ = 0;
  clock::time_point line_started_;
  std::vector<char> tls_buf_;

  // a long line decoded off the strand (hand_in)
  /// Set by the strand when it posts the decoding, cleared by the strand
  /// when it takes the result; read by in_flight() from any thread.
  std::atomic<bool> decoding_{false};
  std::uint64_t decoding_bytes_ = 0; ///< its bytes, reserved in sh_->in_flight_bytes
  std::string decode_text_; ///< the line, the decoding thread's while decoding_
  std::mutex decoded_mtx_;
  std::optional<protocol::decoded_line> decoded_; ///< the result (under decoded_mtx_)

  // output (strand)
  std::string write_buf_;
  std::size_t write_off_ = 0;
  bool owns_output_ = false; ///< the strand holds outbox::busy
  bool waits_ = false; ///< what it last stored in outbox::strand_waits

  // state (strand)
  bool handshaking_ = false;
  bool reading_ = false; ///< a read or wait is pending
  bool writing_ = false; ///< a write is pending
  bool paused_ = false; ///< not read because nothing more may be admitted
  bool eof_ = false; ///< the client finished sending
  bool closing_ = false; ///< no more reading; finishing
  bool closed_ = false; ///< socket closed
  bool finished_ = false; ///< left the registry
  bool linger_checked_ = false; ///< finish_if_idle decided whether to linger
  bool lingering_ = false; ///< sending side closed; waiting for the peer's acknowledgement
  bool peer_eof_ = false; ///< lingering, and the peer ended its input (or is gone)
  bool tls_shutdown_started_ = false;
  bool tls_shutdown_done_ = false;
  clock::time_point tls_shutdown_deadline_;
  std::string close_reason_;
  clock::time_point closing_since_;

  clock::time_point opened_;
  clock::time_point last_progress_;
  bool unauth_ = false; ///< authentication required and not (now) given
  clock::time_point unauth_since_; ///< when it became so
  bool timer_armed_ = false;
  clock::time_point timer_at_;
  std::uint64_t timer_gen_ = 0;

  std::uint64_t requests_ = 0;
  std::uint64_t bytes_in_ = 0;
  std::uint64_t bytes_out_ = 0;
};

template <class Stream>
std::shared_ptr<connection_base> make(std::shared_ptr<shared_state> sh, Stream stream,
                                      std::uint64_t id, std::string peer) {
  auto c =
    std::make_shared<connection<Stream>>(std::move(sh), std::move(stream), id, std::move(peer));
  c->init();
  return c;
}

} // namespace

std::shared_ptr<connection_base> make_connection(std::shared_ptr<shared_state> sh,
                                                 tcp_socket stream, std::uint64_t id,
                                                 std::string peer) {
  return make(std::move(sh), std::move(stream), id, std::move(peer));
}

std::shared_ptr<connection_base> make_connection(std::shared_ptr<shared_state> sh,
                                                 unix_socket stream, std::uint64_t id,
                                                 std::string peer) {
  return make(std::move(sh), std::move(stream), id, std::move(peer));
}

std::shared_ptr<connection_base> make_connection(std::shared_ptr<shared_state> sh,
                                                 tls_stream stream, std::uint64_t id,
                                                 std::string peer) {
  return make(std::move(sh), std::move(stream), id, std::move(peer));
}

} // namespace agentstate::server::detail
