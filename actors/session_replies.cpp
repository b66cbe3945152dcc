// SPDX-License-Identifier: Apache-2.0
// The session actor's reply queue: commands answer strictly in arrival
// order, writes pipeline to the store writer, a failed write dooms its
// in-flight followers and re-reads the record (actors/session_actor.hpp).
#include "actors/session_actor.hpp"

#include <caf/all.hpp>

#include "store/reads.hpp"

namespace agentstate::detail {

result<std::optional<store::session_record>> load_record(session_actor_t self) {
  auto& st = self->state;
  st.loaded = false;
  // Read before the snapshot: a fence committed after it moves the epoch
  // again, and the next command reloads.
  st.fence_epoch = st.core->fence_epoch.load();
  auto rec = store::read_record_unless_deleted(*st.core->kv, st.skey);
  if (!rec) {
    auto e = std::move(rec).err();
    e.message = "cannot read the session record: " + e.message;
    return e;
  }
  st.exists = rec->has_value();
  st.version = *rec ? (**rec).version : 0;
  st.expires = *rec ? (**rec).expires : 0;
  st.refresh = *rec ? (**rec).refresh : 0;
  st.loaded = true;
  return std::move(*rec);
}

result<void> load(session_actor_t self) {
  auto r = load_record(self);
  if (!r)
    return std::move(r).err();
  return {};
}

void drain(session_actor_t self) {
  auto& st = self->state;
  do {
    st.drain_due = false;
    while (!st.queue.empty() && st.queue.front()->ready) {
      auto p = std::move(st.queue.front());
      st.queue.pop_front();
      p->finish();
    }
    if (st.queue.empty() && (st.stale || st.hold)) {
      if (st.stale) {
        st.loaded = false; // re-read the record before the next command
        st.ids.reset();
      }
      st.stale = false;
      st.hold = false;
      // A replayed read may hold again; the rest then waits for the next drain.
      while (!st.stash.empty() && !st.hold && !st.remote) {
        auto f = std::move(st.stash.front());
        st.stash.pop_front();
        f();
      }
    }
  } while (st.drain_due); // a command replayed above committed inline
  maybe_finish(self);
}

void maybe_finish(session_actor_t self) {
  auto& st = self->state;
  if (st.stopping && st.queue.empty() && st.stash.empty()) {
    st.core->sessions.remove(st.registry_key, self->address());
    self->quit();
  }
}

void enter(session_actor_t self, std::function<void()> fn) {
  auto& st = self->state;
  if (entry_waits(st)) {
    st.stash.push_back(std::move(fn));
    return;
  }
  fn();
}

void answer(session_actor_t self, std::function<void()> fn) {
  auto& st = self->state;
  if (st.queue.empty()) {
    fn();
    return;
  }
  auto p = std::make_shared<pending>();
  p->ready = true;
  p->run = std::move(fn);
  st.queue.push_back(std::move(p));
}

void submit(session_actor_t self, write_plan plan, write_done done) {
  auto& st = self->state;
  auto p = std::make_shared<pending>();
  p->done = std::move(done);
  st.queue.push_back(p);
  std::optional<write_reply> now;
  // Inline only for the last command in the mailbox: commands pipelined
  // behind it are prepared here while the writer commits this one.
  if (st.core->inline_commits && st.with_writer == 0 && self->mailbox().empty()
      && st.core->writer_backlog.load(std::memory_order_relaxed) == 0)
    now = try_commit_inline(*st.core, plan);
  // The verdict waits in the entry (the spent write set is freed here).
  auto settle = [](pending& q, write_reply& r) {
    q.code = r.code;
    q.message = std::move(r.message);
    q.late = std::move(r.late);
    q.seq = r.seq;
    q.ready = true;
  };
  if (now) {
    if (now->code != errc::ok)
      st.stale = true;
    settle(*p, *now);
    st.drain_due = true;
    return;
  }
  ++st.with_writer;
  sent_to_writer(*st.core);
  auto finish = [self, p, settle](write_reply& r) {
    --self->state.with_writer;
    if (r.code != errc::ok)
      self->state.stale = true;
    settle(*p, r);
    drain(self);
  };
  self->request(st.core->writer, caf::infinite, write_cmd{std::move(plan)})
    .then([finish](write_reply& r) { finish(r); },
          [finish](caf::error& e) {
            write_reply r;
            r.code = errc::unavailable;
            r.message = "store writer unreachable: " + to_string(e);
            finish(r);
          });
}

} // namespace agentstate::detail
