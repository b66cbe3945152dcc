// SPDX-License-Identifier: Apache-2.0
#include "protocol/dispatcher.hpp"

#include <exception>
#include <utility>

namespace agentstate::protocol::detail {

dispatcher::dispatcher(engine& e, std::function<void(std::string)> write, bounds b, hooks h)
  : eng_(e), write_(std::move(write)), max_in_flight_(b.requests == 0 ? 1 : b.requests),
    max_in_flight_bytes_(b.bytes == 0 ? 1 : b.bytes), shared_bytes_(std::move(b.shared_bytes)),
    hooks_(std::move(h)) {
  spare_.reserve(max_spare_lanes);
}

dispatcher::~dispatcher() = default;

// REQUIRES: mtx_ held (so write_ runs one call at a time).
void dispatcher::write_line(std::string line) {
  try {
    write_(std::move(line));
  } catch (...) {
    // The writer refused the line: the client sees no answer for this id.
  }
}

void dispatcher::notify(std::string line) {
  std::lock_guard<std::mutex> guard(mtx_);
  write_line(std::move(line));
}

void dispatcher::answer(const json& id, const outcome& o) {
  try {
    auto line = response_line(id, o);
    std::lock_guard<std::mutex> guard(mtx_);
    write_line(std::move(line));
  } catch (...) {
    // Nothing sensible left to do: the client sees no answer for this id.
  }
}

// Forgets a lane with nothing admitted or being started. REQUIRES: mtx_
// held. Every admitted request stays on the lane's answer list until it is
// answered and settled (under mtx_, together), so an empty list and no
// thread starting its requests mean nothing runs or waits.
void dispatcher::drop_if_idle(lane* l) {
  if (!l->first && !l->starting) {
    auto node = lanes_.extract(lanes_.find(*l->key));
    if (spare_.size() < max_spare_lanes)
      spare_.push_back(std::move(node)); // reserved: never allocates
  }
}

bool dispatcher::may_start(const lane& l, const record& r) {
  return !l.exclusive && (r.order == ordering::pipelined || l.running == 0);
}

void dispatcher::release(record* r) {
  if (r->phase.fetch_add(1, std::memory_order_acq_rel) == 1)
    delete r; // may release the last reference to the dispatcher
}

void dispatcher::reply_to(void* r, outcome o) {
  auto* rec = static_cast<record*>(r);
  rec->owner->on_reply(rec, std::move(o));
}

// Runs r->op. The reply is handled by on_reply (possibly before op returns);
// the record goes once it is settled and op has returned.
void dispatcher::start(record* r) {
  reply_fn reply(&dispatcher::reply_to, r);
  try {
    r->op(eng_, reply);
  } catch (const std::exception& e) {
    reply(internal_failure("dispatch", e.what()));
  } catch (...) {
    reply(internal_failure("dispatch", "unknown exception"));
  }
  release(r); // may release the last reference to *this: nothing follows
}

// The response line answering r with o (empty for a notification), after
// the hooks have seen it. Never throws: a line that cannot be built is left
// empty (the client sees no answer for this id).
std::string dispatcher::answer_line(record& r, outcome& o) {
  if (r.notification)
    return {};
  try {
    if (auto* f = std::get_if<rpc_failure>(&o)) {
      if (hooks_.on_error)
        hooks_.on_error(f->kind);
    } else if (auto* j = std::get_if<json>(&o);
               j && r.server_stats && hooks_.server_stats && j->is_object()) {
      (*j)["server"] = hooks_.server_stats();
    }
  } catch (...) {
    // A hook failed: the answer stands without it.
  }
  try {
    return response_line(r.id, std::move(o));
  } catch (...) {
    return {};
  }
}

void dispatcher::on_reply(record* r, outcome o) {
  if (r->replied.exchange(true, std::memory_order_acq_rel))
    return; // op threw after replying: the first reply stands
  std::string line = answer_line(*r, o);
  const bool has_line = !line.empty();
  record* done = nullptr; // settled, to release (via `later`)
  try {
    lane* to_run = nullptr;
    std::vector<record*> barriers;
    {
      std::lock_guard<std::mutex> guard(mtx_);
      if (lane* l = r->l) {
        r->line = std::move(line);
        r->has_line = has_line;
        r->ready = true;
        // An earlier request of the session is unanswered: its reply writes
        // this one after its own. `r` may be gone once unlocked.
        if (l->first != r)
          return;
        done = take_ready(l);
        for (record* p = done; p; p = p->later) {
          if (p->has_line)
            write_line(std::move(p->line));
          std::string().swap(p->line);
          settle(p, to_run, barriers);
        }
        drop_if_idle(l); // kept while to_run is l (`starting`)
      } else {
        if (has_line)
          write_line(std::move(line));
        settle(r, to_run, barriers);
        done = r;
      }
    }
    after_settle(to_run, barriers);
  } catch (...) {
    // Only allocation can fail here. The request counts could no longer
    // reach zero and wait_idle() would hang: fail loudly instead.
    std::terminate();
  }
  if (hooks_.on_complete)
    try {
      hooks_.on_complete();
    } catch (...) {
    }
  while (done) { // the last may release the last reference to *this
    record* next = done->later;
    release(done);
    done = next;
  }
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
// start: to_run), the in-flight cap. Does not drop the lane (on_reply does,
// once its answers are written). REQUIRES: mtx_ held; r's response, if any,
// has been written.
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
  in_flight_bytes_ -= r->bytes;
  if (shared_bytes_)
    shared_bytes_->fetch_sub(r->bytes, std::memory_order_relaxed);
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

void dispatcher::submit(json id, bool notification, prepared p, std::size_t bytes) {
  auto* r = new record;
  r->id = std::move(id);
  r->bytes = bytes;
  r->notification = notification;
  r->order = p.order;
  r->op = std::move(p.op);
  const bool keyed = p.order == ordering::pipelined || p.order == ordering::per_session;
  bool run_now = false;
  std::vector<record*> barriers;
  try {
    r->server_stats = p.server_stats;
    r->owner = shared_from_this();
    std::unique_lock<std::mutex> lock(mtx_);
    auto room = [this, bytes] {
      return in_flight_ == 0
        || (in_flight_ < max_in_flight_ && in_flight_bytes_ + bytes <= max_in_flight_bytes_);
    };
    if (!room()) {
      waiting_room_ = true;
      cv_.wait(lock, room);
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
      auto it = lanes_.find(p.key);
      if (it == lanes_.end()) {
        if (spare_.empty()) {
          it = lanes_.emplace(std::move(p.key), lane{}).first;
        } else {
          auto node = std::move(spare_.back());
          spare_.pop_back();
          node.key().assign(p.key); // in the buffer a key of its size had
          node.mapped() = lane{};
          it = lanes_.insert(std::move(node)).position;
        }
        it->second.key = &it->first;
      }
      lane& l = it->second;
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
    in_flight_bytes_ += bytes;
    if (shared_bytes_)
      shared_bytes_->fetch_add(bytes, std::memory_order_relaxed);
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

std::size_t dispatcher::in_flight_bytes() const {
  std::lock_guard<std::mutex> guard(mtx_);
  return in_flight_bytes_;
}

} // namespace agentstate::protocol::detail
