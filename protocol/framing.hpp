// SPDX-License-Identifier: Apache-2.0
// protocol/framing.hpp: newline-delimited framing of the protocol over file
// descriptors (a pipe, a terminal, a socket), and serve_stream(), which runs
// one rpc_session over one such stream. Public part of agentstate_protocol.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "agentstate/engine.hpp"
#include "protocol/idle_hook.hpp"
#include "protocol/rpc_session.hpp"

namespace agentstate::protocol {

/// Reads `fd` line by line until end of input, or until `stop_fd` (when >= 0)
/// becomes readable. Calls `on_line` with each line of at most `max_line_bytes`
/// bytes, without its '\n' (a last line without '\n' counts too), and
/// `on_oversized` with the length of each longer line, whose bytes are
/// discarded as they arrive: memory stays O(max_line_bytes) whatever the
/// input. Callbacks run on the calling thread. Blocking.
/// Returns ok at end of input or stop (a reset connection counts as end of
/// input); io_error naming the cause when read() or poll() fails otherwise.
result<void> read_lines(int fd, int stop_fd, std::uint64_t max_line_bytes,
                        const std::function<void(std::string_view)>& on_line,
                        const std::function<void(std::uint64_t)>& on_oversized);

/// How a non-blocking write ended: everything written, the descriptor full
/// (EAGAIN), no non-blocking writes of this kind on it, or failed (EPIPE,
/// ECONNRESET, ...: the reader is gone).
enum class nowait_result { all, blocked, unsupported, failed };

/// Writes data[off..] to `fd` without blocking (send(MSG_DONTWAIT |
/// MSG_NOSIGNAL) on a socket, pwritev2(RWF_NOWAIT) otherwise), retrying on
/// EINTR; advances `off` past what was written.
nowait_result write_nowait(int fd, bool socket, std::string_view data, std::size_t& off);

/// Puts the unwritten part of `batch` (from `off`) back in front of
/// `pending` (what was queued meanwhile). `batch` is left holding garbage.
void put_back(std::string& pending, std::string& batch, std::size_t off);

/// Queues `line` and its '\n' at the end of `pending`. When `pending` is
/// empty it starts in `spare`'s buffer (left by keep_spare) if that has room,
/// else in the line's own buffer if that has room for the '\n', so a batch
/// of lines costs no allocation once the writer runs steadily.
void queue_line(std::string& pending, std::string& spare, std::string&& line);

/// Keeps the buffer of a batch just written (`batch`, emptied) as `spare`
/// for the next queue_line, when it is at most max_spare_bytes: a stream
/// whose writer keeps up reuses two buffers, and an idle one keeps little.
void keep_spare(std::string& spare, std::string& batch);
inline constexpr std::size_t max_spare_bytes = std::size_t{8} << 10;

/// Bounds on the writing a producer (an engine thread) does for the others
/// in one go before the stream's own writer takes over: rounds of taking
/// what was queued, and bytes.
inline constexpr int max_direct_rounds = 8;
inline constexpr std::size_t max_direct_bytes = std::size_t{256} << 10;

/// How a producer's direct write (write_rounds) ended.
enum class direct_end {
  drained, ///< everything queued is written
  more, ///< what was taken is written; more is queued, and a bound or `stop` ended it
  blocked, ///< the descriptor is full
  unsupported, ///< no non-blocking writes of this kind on the descriptor
  failed ///< the reader is gone
};

/// The direct write of line_writer and of the server's connections: takes
/// `pending` (starting in `spare`'s buffer) and writes it to `fd` with
/// write_nowait, `lock` released meanwhile, taking along what was queued
/// since, for at most max_direct_rounds rounds and max_direct_bytes bytes,
/// or until `stop()` is true after a round. `taken(n)` runs with the size of
/// each batch taken, `written(n)` with the bytes each round wrote (possibly
/// 0), `stop()` between rounds; all three with `lock` held. What the
/// descriptor did not take is put back in front of `pending`, and the
/// batch's buffer kept as `spare` (keep_spare). `lock` holds its mutex, the
/// one guarding `pending` and `spare`, on entry and on return. The caller
/// makes sure nobody else writes `fd` meanwhile.
template <class Taken, class Written, class Stop>
direct_end write_rounds(int fd, bool socket, std::string& pending, std::string& spare,
                        std::unique_lock<std::mutex>& lock, Taken&& taken, Written&& written,
                        Stop&& stop) {
  std::string batch = std::move(spare);
  std::size_t total = 0;
  direct_end end = direct_end::drained;
  for (int round = 1;; ++round) {
    batch.clear();
    batch.swap(pending);
    taken(batch.size());
    lock.unlock();
    std::size_t off = 0;
    const auto r = write_nowait(fd, socket, batch, off);
    lock.lock();
    written(off);
    total += off;
    if (r != nowait_result::all) {
      put_back(pending, batch, off);
      end = r == nowait_result::blocked   ? direct_end::blocked
        : r == nowait_result::unsupported ? direct_end::unsupported
                                          : direct_end::failed;
      break;
    }
    if (pending.empty())
      break;
    if (stop() || round >= max_direct_rounds || total >= max_direct_bytes) {
      end = direct_end::more;
      break;
    }
  }
  keep_spare(spare, batch);
  return end;
}

/// Writes lines to a file descriptor without making producers (engine
/// callbacks) wait for a slow reader. A producer that finds nothing being
/// written writes itself, without blocking (send(MSG_DONTWAIT) on a socket,
/// pwritev2(RWF_NOWAIT) on a pipe), taking along what others queue
/// meanwhile; what the descriptor does not take at once goes to the
/// writer's own thread, which writes with blocking calls until it has caught
/// up. So a reader that keeps up costs no thread hand-off per response, and
/// one that does not costs producers only a queue append. A producer on an
/// engine worker thread leaves that write to its thread through the idle
/// hook it was given (protocol/idle_hook.hpp; the engine's writes after the
/// producing job, when no other job is queued, else within 32 jobs or 1 ms),
/// so the lines of jobs that run back to back leave in one write; close()
/// writes what such a write left. Each
/// line is written whole: lines never interleave, and they go out in push
/// order. Does not own the descriptor.
/// Thread safety: push() and wait_below() may be called from any thread.
class line_writer {
public:
  /// Starts the writing thread. `fd` must stay open until close() returns.
  /// `idle`: where a producer leaves its write for its thread's next idle
  /// point (null: producers write at once).
  explicit line_writer(int fd, idle_hook idle = nullptr);
  /// Closes as close() does.
  ~line_writer();
  line_writer(const line_writer&) = delete;
  line_writer& operator=(const line_writer&) = delete;

  /// Queues `line` followed by '\n', and writes it (with whatever else is
  /// queued) when nobody else is writing and the descriptor takes it without
  /// blocking: at once, or at the producing thread's next idle point (the
  /// idle hook). Never blocks beyond that non-blocking write (at most a few
  /// batches, ~256 KiB, before the thread takes over) and a short lock. After
  /// a write has failed (the reader went away) lines are dropped.
  void push(std::string line);

  /// Blocks until fewer than `bytes` bytes wait to be written, or writing has
  /// failed or been closed. The reader of a stream calls this before taking
  /// more requests, so a client that does not read its responses stops being
  /// read instead of growing the queue.
  void wait_below(std::size_t bytes);

  /// Writes everything queued, then stops the thread. Idempotent. Blocking.
  void close();

  /// False once a write has failed.
  bool ok() const;

  /// Bytes queued or being written (0 once writing failed or closed).
  std::size_t queued() const;

private:
  void run();
  /// Writes pending_ without blocking, as the producer that found nobody
  /// writing, or wakes the thread when it has taken over (or the
  /// descriptor has no non-blocking writes); `lock` holds mtx_ on entry and
  /// on return.
  void write_direct(std::unique_lock<std::mutex>& lock);
  /// The write a producer on a worker deferred (runs on that worker).
  void write_deferred();
  void notify_room();

  int fd_;
  idle_hook idle_;
  bool socket_ = false;
  mutable std::mutex mtx_;
  std::condition_variable work_cv_; ///< the thread waits for work
  std::condition_variable room_cv_; ///< wait_below() and close() wait
  std::string pending_; ///< queued bytes, not yet taken by a writer
  std::string spare_; ///< see keep_spare
  std::size_t writing_ = 0; ///< bytes a writer has taken and is writing
  bool busy_ = false; ///< a producer or the thread is writing
  bool handed_off_ = false; ///< the thread writes until the queue is empty
  bool direct_ = true; ///< non-blocking writes work on this descriptor
  std::size_t room_waiters_ = 0;
  bool closing_ = false;
  bool failed_ = false;
  bool deferred_ = false; ///< a worker's idle point will write pending_
  /// What a deferred write holds: it outlives the writer, and finds
  /// `writer` null once the writer is destroyed.
  struct deferral {
    std::mutex mtx;
    line_writer* writer;
  };
  std::shared_ptr<deferral> deferral_;
  std::thread thread_;
};

struct stream_config {
  /// Longer request lines are answered with too_large and discarded.
  std::uint64_t max_line_bytes = std::uint64_t{16} << 20;
  /// Responses queued for a slow reader before the stream stops taking
  /// requests (see line_writer::wait_below).
  std::size_t max_queued_bytes = std::size_t{64} << 20;
  rpc_config rpc;
  /// The engine's idle hook (line_writer); null: none.
  idle_hook idle = nullptr;
};

/// Serves the protocol on one stream: request lines from `in_fd`, responses to
/// `out_fd` (they may be the same socket), until end of input or until
/// `stop_fd` (when >= 0) becomes readable; then finishes the requests in
/// flight and writes their responses before returning. Does not close the
/// descriptors or flush the engine. Blocking.
/// Returns the read error, if reading failed; a failed write (the client went
/// away) is not an error.
result<void> serve_stream(engine& eng, int in_fd, int out_fd, int stop_fd,
                          const stream_config& cfg);

} // namespace agentstate::protocol
