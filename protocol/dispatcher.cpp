// SPDX-License-Identifier: Apache-2.0
#include "protocol/dispatcher.hpp"

#include <exception>
#include <utility>

namespace agentstate::protocol::detail {

dispatcher::dispatcher(engine& e, std::function<void(std::string)> write, std::size_t max_in_flight)
  : eng_(e), write_(std::move(write)), max_in_flight_(max_in_flight == 0 ? 1 : max_in_flight) {}

dispatcher::~dispatcher() = default;

void dispatcher::write_line(std::string line) {
  std::lock_guard<std::mutex> guard(write_mtx_);
  try {
    write_(std::move(line));
  } catch (...) {
    // The writer refused the line: the client sees no answer for this id.
  }
}

void dispatcher::notify(std::string line) {
  write_line(std::move(line));
}

void dispatcher::answer(const json& id, const outcome& o) {
  try {
    write_line(response_line(id, o));
  } catch (...) {
    // Nothing sensible left to do: the client sees no answer for this id.
  }
}

// Forgets a lane with nothing admitted, started or being answered.
// REQUIRES: mtx_ held. Every admitted request stays on the lane's answer list
// until it is answered, and is settled while `answering` is set, so an empty
// list and no thread at work mean nothing runs or waits.
void dispatcher::drop_if_idle(lane* l) {
  if (!l->first && !l->starting && !l->answering)
    lanes_.erase(lanes_.find(*l->key));
}

bool dispatcher::may_start(const lane& l, const record& r) {
  return !l.exclusive && (r.order == ordering::pipelined || l.running == 0);
}

void dispatcher::release(record* r) {
  if (r->phase.fetch_add(1, std::memory_order_acq_rel) == 1)
    delete r; // may release the last reference to the dispatcher
}

// Runs r->op. The reply is handled by on_reply (possibly before op returns);
// the record goes once it is settled and op has returned.
void dispatcher::start(record* r) {
  reply_fn reply = [r](outcome o) { r->owner->on_reply(r, std::move(o)); };
  try {
    r->op(eng_, reply);
  } catch (const std::exception& e) {
    reply(internal_failure("dispatch", e.what()));
  } catch (...) {
    reply(internal_failure("dispatch", "unknown exception"));
  }
  release(r); // may release the last reference to *this: nothing follows
}

void dispatcher::on_reply(record* r, outcome o) {
  if (r->replied.exchange(true, std::memory_order_acq_rel))
    return; // op threw after replying: the first reply stands
  std::string line;
  bool has_line = false;
  if (!r->notification) {
    try {
      line = response_line(r->id, o);
      has_line = true;
    } catch (...) {
      // The line cannot be built: the client sees no answer for this id.
    }
  }
  try {
    if (lane* l = r->l) {
      record* batch;
      {
        std::lock_guard<std::mutex> guard(mtx_);
        r->line = std::move(line);
        r->has_line = has_line;
        r->ready = true;
        // An earlier request of the session is unanswered (it writes this
        // one after its own), or another thread is writing the session's
        // answers (it takes this one along). `r` may be gone once unlocked.
        if (l->answering || l->first != r)
          return;
        l->answering = true;
        batch = take_ready(l);
      }
      answer_lane(l, batch);
      return;
    }
    if (has_line)
      write_line(std::move(line));
    lane* to_run = nullptr;
    std::vector<record*> barriers;
    {
      std::lock_guard<std::mutex> guard(mtx_);
      settle(r, to_run, barriers);
    }
    after_settle(to_run, barriers);
  } catch (...) {
    // Only allocation can fail here. The request counts could no longer
    // reach zero and wait_idle() would hang: fail loudly instead.
    std::terminate();
  }
  release(r); // may release the last reference to *this: nothing follows
}

// Detaches the ready requests at the front of l's answer list, as a chain
// linked by `later`; nullptr when the front one is not ready. REQUIRES: mtx_.
dispatcher::record* dispatcher::take_ready(lane* l) {
  record* first = l->first;
  record* last = nullptr;
  for (record* p = first; p && p->ready; p = p->later)
    last = p;
  if (!last)
    return nullptr;
  l->first = last->later;
  if (!l->first)
    l->last = nullptr;
  last->later = nullptr;
  return first;
}

// Writes `batch` (ready answers of l, in order), settles them, and goes on
// with the answers that became ready meanwhile, until the front of l's list
// is not ready. REQUIRES: the caller set l->answering and detached `batch`.
// The records are released at the end, so *this lives until then.
void dispatcher::answer_lane(lane* l, record* batch) {
  record* done = nullptr; // settled, to release
  for (;;) {
    {
      std::lock_guard<std::mutex> guard(write_mtx_);
      for (record* p = batch; p; p = p->later) {
        if (!p->has_line)
          continue;
        try {
          write_(std::move(p->line));
        } catch (...) {
          // The writer refused the line: the client sees no answer for it.
        }
        std::string().swap(p->line);
      }
    }
    lane* to_run = nullptr;
    std::vector<record*> barriers;
    bool more;
    {
      std::lock_guard<std::mutex> guard(mtx_);
      record* tail = batch;
      for (record* p = batch; p; p = p->later) {
        settle(p, to_run, barriers);
        tail = p;
      }
      tail->later = done;
      done = batch;
      batch = take_ready(l);
      more = batch != nullptr;
      if (!more) {
        // Later replies answer themselves from here on. (If to_run is l,
        // `starting` keeps it.)
        l->answering = false;
        drop_if_idle(l);
      }
    }
    after_settle(to_run, barriers);
    if (!more)
      break;
  }
  while (done) {
    record* next = done->later;
    release(done);
    done = next;
  }
}

// Barriers whose earlier requests have all completed, in order. Every epoch
// but the newest is closed by a barrier. REQUIRES: mtx_ held.
void dispatcher::ready_barriers(std::vector<record*>& out) {
  while (epochs_.size() > 1 && epochs_.front().pending == 0) {
    out.push_back(epochs_.front().barrier);
    epochs_.pop_front();
    ++first_epoch_;
  }
}

// Counts r completed: its epoch, its lane (whose waiting requests may now
// start: to_run), the in-flight cap. Does not drop the lane (answer_lane
// does, once its answers are written). REQUIRES: mtx_ held; r's response,
// if any, has been written.
void dispatcher::settle(record* r, lane*& to_run, std::vector<record*>& barriers) {
  if (r->order != ordering::barrier) {
    --epochs_[r->epoch - first_epoch_].pending;
    if (lane* l = r->l) {
      --l->running;
      if (r->order == ordering::per_session)
        l->exclusive = false;
      if (!l->starting && l->head && may_start(*l, *l->head)) {
        l->starting = true;
        to_run = l;
      }
    }
    ready_barriers(barriers);
  }
  --in_flight_;
  if (waiting_room_ || (idle_waiters_ > 0 && in_flight_ == 0))
    cv_.notify_all();
}

void dispatcher::after_settle(lane* to_run, std::vector<record*>& barriers) {
  for (auto* b : barriers)
    start(b);
  if (to_run)
    run_lane(to_run);
}

// Starts l's waiting requests in order while they may start. REQUIRES: the
// caller set l->starting (so no other thread starts requests of l).
void dispatcher::run_lane(lane* l) {
  std::unique_lock<std::mutex> lock(mtx_);
  for (;;) {
    record* r = l->head;
    if (!r || !may_start(*l, *r)) {
      l->starting = false;
      drop_if_idle(l);
      return;
    }
    l->head = r->next;
    if (!l->head)
      l->tail = nullptr;
    r->next = nullptr;
    ++l->running;
    if (r->order == ordering::per_session)
      l->exclusive = true;
    lock.unlock();
    start(r); // a completion inside it sees l->starting and leaves l to us
    lock.lock();
  }
}

void dispatcher::submit(json id, bool notification, prepared p) {
  auto* r = new record;
  r->id = std::move(id);
  r->notification = notification;
  r->order = p.order;
  r->op = std::move(p.op);
  const bool keyed = p.order == ordering::pipelined || p.order == ordering::per_session;
  bool run_now = false;
  std::vector<record*> barriers;
  try {
    r->owner = shared_from_this();
    std::unique_lock<std::mutex> lock(mtx_);
    if (in_flight_ >= max_in_flight_) {
      waiting_room_ = true;
      cv_.wait(lock, [this] { return in_flight_ < max_in_flight_; });
      waiting_room_ = false;
    }
    // What can throw (allocation) comes before the request is counted.
    if (p.order == ordering::barrier) {
      epochs_.emplace_back();
      epochs_[epochs_.size() - 2].barrier = r;
      barriers.reserve(epochs_.size());
      ++in_flight_;
      ready_barriers(barriers);
    } else if (!keyed) {
      r->epoch = first_epoch_ + epochs_.size() - 1;
      ++epochs_.back().pending;
      ++in_flight_;
      run_now = true;
    } else {
      auto [it, fresh] = lanes_.try_emplace(std::move(p.key));
      lane& l = it->second;
      if (fresh)
        l.key = &it->first;
      r->l = &l;
      r->epoch = first_epoch_ + epochs_.size() - 1;
      ++epochs_.back().pending;
      ++in_flight_;
      if (l.last)
        l.last->later = r;
      else
        l.first = r;
      l.last = r;
      // A lane nobody is starting has no startable head (run_lane and
      // settle keep that so), so `r` starts now only when nothing waits.
      if (!l.head && !l.starting && may_start(l, *r)) {
        ++l.running;
        if (r->order == ordering::per_session)
          l.exclusive = true;
        run_now = true;
      } else if (l.tail) {
        l.tail->next = r;
        l.tail = r;
      } else {
        l.head = l.tail = r;
      }
    }
  } catch (...) {
    delete r;
    throw;
  }
  if (run_now)
    start(r);
  for (auto* b : barriers)
    start(b);
}

void dispatcher::wait_idle() {
  std::unique_lock<std::mutex> lock(mtx_);
  ++idle_waiters_;
  cv_.wait(lock, [this] { return in_flight_ == 0; });
  --idle_waiters_;
}

std::size_t dispatcher::in_flight() const {
  std::lock_guard<std::mutex> guard(mtx_);
  return in_flight_;
}

} // namespace agentstate::protocol::detail
