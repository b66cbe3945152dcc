#include "protocol/dispatcher.hpp"

#include <exception>
#include <utility>

namespace agentstate::protocol::detail {

dispatcher::dispatcher(engine& e, std::function<void(std::string)> write,
                       std::size_t max_in_flight)
  : eng_(e), write_(std::move(write)), max_in_flight_(max_in_flight == 0 ? 1 : max_in_flight) {}

dispatcher::~dispatcher() = default;

void dispatcher::answer(const json& id, const outcome& o) {
  try {
    auto line = response_line(id, o);
    std::lock_guard<std::mutex> guard(write_mtx_);
    write_(std::move(line));
  } catch (...) {
    // Nothing sensible left to do: the client sees no answer for this id.
  }
}

// Forgets an idle lane. REQUIRES: mtx_ held; nothing of it runs or waits.
void dispatcher::drop(lane* l) {
  lanes_.erase(lanes_.find(*l->key));
}

bool dispatcher::may_start(const lane& l, const record& r) {
  return !l.exclusive && (r.order == ordering::pipelined || l.running == 0);
}

// Runs r->op. The reply is handled by on_reply (possibly before op returns);
// the record goes once both have happened.
void dispatcher::start(record* r) {
  reply_fn reply = [r](outcome o) { r->owner->on_reply(r, std::move(o)); };
  try {
    r->op(eng_, reply);
  } catch (const std::exception& e) {
    reply(internal_failure("dispatch", e.what()));
  } catch (...) {
    reply(internal_failure("dispatch", "unknown exception"));
  }
  if (r->phase.fetch_add(1, std::memory_order_acq_rel) == 1)
    delete r; // may release the last reference to *this: nothing follows
}

void dispatcher::on_reply(record* r, outcome o) {
  if (r->replied.exchange(true, std::memory_order_acq_rel))
    return; // op threw after replying: the first reply stands
  if (!r->notification)
    answer(r->id, o);
  try {
    complete(r);
  } catch (...) {
    // Only allocation can fail here. The request counts could no longer
    // reach zero and wait_idle() would hang: fail loudly instead.
    std::terminate();
  }
  if (r->phase.fetch_add(1, std::memory_order_acq_rel) == 1)
    delete r; // may release the last reference to *this: nothing follows
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

void dispatcher::complete(record* r) {
  lane* to_run = nullptr;
  std::vector<record*> barriers;
  {
    std::lock_guard<std::mutex> guard(mtx_);
    if (r->order != ordering::barrier) {
      --epochs_[r->epoch - first_epoch_].pending;
      if (lane* l = r->l) {
        --l->running;
        if (r->order == ordering::per_session)
          l->exclusive = false;
        if (!l->starting) {
          if (l->head && may_start(*l, *l->head)) {
            l->starting = true;
            to_run = l;
          } else if (!l->head && l->running == 0) {
            drop(l);
          }
        }
      }
      ready_barriers(barriers);
    }
    --in_flight_;
    if (waiting_room_ || (idle_waiters_ > 0 && in_flight_ == 0))
      cv_.notify_all();
  }
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
      if (!l->head && l->running == 0)
        drop(l);
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
      // A lane nobody is starting has no startable head (run_lane and
      // complete keep that so), so `r` starts now only when nothing waits.
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
