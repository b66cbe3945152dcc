// SPDX-License-Identifier: Apache-2.0
#include "protocol/dispatcher.hpp"

#include <atomic>
#include <exception>
#include <utility>

namespace agentstate::protocol::detail {

dispatcher::dispatcher(engine& e, std::function<void(std::string)> write,
                       std::size_t max_in_flight)
  : eng_(e), write_(std::move(write)), max_in_flight_(max_in_flight == 0 ? 1 : max_in_flight) {}

void dispatcher::answer(const json& id, const outcome& o) {
  try {
    auto line = response_line(id, o);
    std::lock_guard<std::mutex> guard(write_mtx_);
    write_(std::move(line));
  } catch (...) {
    // Nothing sensible left to do: the client sees no answer for this id.
  }
}

// Runs t.op; `then` runs after the reply has been answered. Returns true if
// the reply arrived before t.op returned (inline completion).
template <class Then>
bool dispatcher::start(task& t, Then then) {
  auto done = std::make_shared<std::atomic<int>>(0); // 1st of {reply, return} sets 1
  auto replied = std::make_shared<std::atomic<bool>>(false);
  auto self = shared_from_this();
  reply_fn reply = [self, done, replied, id = t.id, note = t.notification, then](outcome o) {
    if (replied->exchange(true))
      return;
    if (!note)
      self->answer(id, o);
    try {
      then(done->fetch_add(1) == 1);
    } catch (...) {
      // Only allocation can fail here. The request counts could no longer
      // reach zero and wait_idle() would hang: fail loudly instead.
      std::terminate();
    }
  };
  try {
    t.op(eng_, reply);
  } catch (const std::exception& e) {
    reply(internal_failure("dispatch", e.what()));
  } catch (...) {
    reply(internal_failure("dispatch", "unknown exception"));
  }
  return done->fetch_add(1) == 1;
}

// Runs `t` and then the requests queued behind it on the same session.
// REQUIRES: the caller holds the session's turn (chains_[key] exists and no
// other request of it is running).
void dispatcher::run_chain(const std::string& key, task t) {
  for (;;) {
    auto seq = t.seq;
    auto self = shared_from_this();
    // `late` is true when the reply came after start() returned: the
    // callback's thread then carries the chain on.
    bool inline_done = start(t, [self, key, seq](bool late) {
      if (late)
        if (auto next = self->next_in_chain(key))
          self->run_chain(key, std::move(*next));
      self->complete(seq, false);
    });
    if (!inline_done)
      return;
    auto next = next_in_chain(key);
    if (!next)
      return;
    t = std::move(*next);
  }
}

// The next request of the session's chain, or nullopt (and the chain ends,
// giving up the session's turn) when none waits.
std::optional<dispatcher::task> dispatcher::next_in_chain(const std::string& key) {
  std::lock_guard<std::mutex> guard(mtx_);
  auto it = chains_.find(key);
  if (it == chains_.end())
    return std::nullopt; // unreachable: the turn holder's entry stays
  if (it->second.waiting.empty()) {
    chains_.erase(it);
    return std::nullopt;
  }
  auto t = std::move(it->second.waiting.front());
  it->second.waiting.pop_front();
  return t;
}

void dispatcher::run_free(task t) {
  auto self = shared_from_this();
  auto seq = t.seq;
  start(t, [self, seq](bool) { self->complete(seq, false); });
}

void dispatcher::run_barrier(task t) {
  auto self = shared_from_this();
  start(t, [self](bool) { self->complete(0, true); });
}

// Barriers whose earlier requests have all completed. REQUIRES: mtx_ held.
std::vector<dispatcher::task> dispatcher::ready_barriers() {
  std::vector<task> out;
  while (!barriers_.empty()
         && (unfinished_.empty() || *unfinished_.begin() > barriers_.front().seq)) {
    out.push_back(std::move(barriers_.front()));
    barriers_.pop_front();
  }
  return out;
}

void dispatcher::complete(std::uint64_t seq, bool barrier) {
  std::vector<task> ready;
  {
    std::lock_guard<std::mutex> guard(mtx_);
    if (!barrier)
      unfinished_.erase(seq);
    ready = ready_barriers();
    --in_flight_;
    cv_.notify_all();
  }
  for (auto& b : ready)
    run_barrier(std::move(b));
}

void dispatcher::submit(json id, bool notification, prepared p) {
  task t;
  t.id = std::move(id);
  t.notification = notification;
  t.op = std::move(p.op);
  bool run_now = false;
  std::vector<task> ready;
  {
    std::unique_lock<std::mutex> lock(mtx_);
    cv_.wait(lock, [this] { return in_flight_ < max_in_flight_; });
    ++in_flight_;
    t.seq = next_seq_++;
    switch (p.order) {
      case ordering::free:
        unfinished_.insert(t.seq);
        run_now = true;
        break;
      case ordering::per_session: {
        unfinished_.insert(t.seq);
        auto [it, fresh] = chains_.try_emplace(p.key);
        if (fresh)
          run_now = true;
        else
          it->second.waiting.push_back(std::move(t));
        break;
      }
      case ordering::barrier:
        barriers_.push_back(std::move(t));
        ready = ready_barriers();
        break;
    }
  }
  if (run_now) {
    if (p.order == ordering::per_session)
      run_chain(p.key, std::move(t));
    else
      run_free(std::move(t));
  }
  for (auto& b : ready)
    run_barrier(std::move(b));
}

void dispatcher::wait_idle() {
  std::unique_lock<std::mutex> lock(mtx_);
  cv_.wait(lock, [this] { return in_flight_ == 0; });
}

std::size_t dispatcher::in_flight() const {
  std::lock_guard<std::mutex> guard(mtx_);
  return in_flight_;
}

} // namespace agentstate::protocol::detail
