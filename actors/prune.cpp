// SPDX-License-Identifier: Apache-2.0
// engine::prune: a short-lived actor per call walks the store's update-time
// index one bounded page at a time, each page from a fresh snapshot, and
// sends each old session's actor a delete guarded by its record as the page
// read it (prune_delete_cmd): the actor, which orders the session's
// writes, deletes it only if nothing was written since, so a session written
// after its page was read stays, and no other actor's cached state is
// invalidated. The next page is read once the page's deletes are answered
// (dry run: at once, as a message to itself, so other actors run between
// pages).
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/block_on.hpp"
#include "actors/core.hpp"
#include "actors/messages.hpp"
#include "model/checks.hpp"
#include "store/keys.hpp"
#include "store/reads.hpp"
#include "store/records.hpp"

namespace agentstate::detail {
/// Read and handle the next page.
struct prune_step {};
/// A session actor's verdict on delete `i` of the page.
struct prune_answer {
  std::size_t i = 0;
  agentstate::errc code = agentstate::errc::ok;
  std::string message;
};
} // namespace agentstate::detail

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::detail::prune_step)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::detail::prune_answer)

namespace agentstate {

using namespace detail;

namespace {

/// Sessions one page holds at most, and index entries one page examines.
constexpr std::size_t page_sessions = 256;
constexpr std::size_t page_entries = 4096;
constexpr std::size_t max_sample = 10000;

/// An old session of a page, with its record as the page read it.
struct prune_target {
  session_ref ref;
  store::write_set::record_guard seen;
};

/// One page of the walk.
struct prune_page {
  std::vector<prune_target> targets;
  bool end = false; ///< nothing after it
};

/// The sessions (of `app`, or of every app) last updated before `cutoff`
/// whose by_update key is at or after `from`, up to page_sessions of them
/// and page_entries entries examined, each with its record; `from` moves
/// past what was examined. Each app's entries run from its oldest, so the
/// walk skips to the next app at the first entry that is not old. An entry
/// without a record is left (verify names it). Errors: data_corrupt (a
/// damaged record). Throws kv_failure.
result<prune_page> walk_page(store::kv_read& txn, double cutoff, const std::string& app,
                             std::string& from) {
  prune_page page;
  std::vector<session_ref> refs;
  const std::string prefix = app.empty() ? std::string() : app + '\0';
  if (from.empty())
    from = prefix;
  std::size_t examined = 0;
  while (refs.size() < page_sessions && examined < page_entries) {
    std::optional<std::string> next_app;
    bool limited = false;
    txn.scan(store::table::by_update, prefix, from, [&](std::string_view k, std::string_view) {
      ++examined;
      // app ‖ 0 ‖ ord64(t) ‖ id ‖ 0 ‖ user
      auto nul = k.find('\0');
      if (nul != std::string_view::npos && k.size() >= nul + 9) {
        double t = store::read_ordered_double(k.substr(nul + 1, 8));
        if (!(t < cutoff)) {
          next_app = std::string(k.substr(0, nul)) + '\x01';
          return false;
        }
        auto rest = store::split_key(k.substr(nul + 9), 2);
        if (rest.size() == 2)
          refs.push_back(
            session_ref{std::string(k.substr(0, nul)), std::string(rest[1]), std::string(rest[0])});
      } // else: a malformed entry (verify names it); prune leaves it
      from.assign(k.data(), k.size());
      from.push_back('\0'); // the next key after k
      limited = refs.size() >= page_sessions || examined >= page_entries;
      return !limited;
    });
    if (next_app) {
      if (!app.empty()) {
        page.end = true;
        break;
      }
      from = std::move(*next_app);
      continue;
    }
    if (!limited) {
      page.end = true;
      break;
    }
  }
  for (auto& ref : refs) {
    const auto skey = store::session_key(ref.app_name, ref.user_id, ref.session_id);
    auto raw = txn.get(store::table::sessions, skey);
    if (!raw)
      continue;
    auto rec = store::decode_record(skey, *raw);
    if (!rec)
      return error{errc::data_corrupt,
                   "the record of session '" + ref.session_id + "' of app '" + ref.app_name
                     + "' is damaged"};
    page.targets.push_back({std::move(ref), {rec->version, rec->created, rec->last_update_time}});
  }
  return page;
}

struct prune_state {
  engine_core* core = nullptr;
  prune_request req;
  callback<prune_result> cb;
  prune_result out;
  std::string from; ///< where the walk resumes in by_update
  bool end = false; ///< the last page has been read
  // The page's deletes in flight: their refs, and each one's outcome.
  std::vector<session_ref> refs;
  std::vector<char> deleted; ///< per ref: committed
  std::size_t left = 0; ///< not yet answered
  std::optional<error> first; ///< the first failure of the page

  static inline const char* name = "agentstate.prune";
};

using prune_actor = caf::stateful_actor<prune_state>;

void finish(prune_actor* self) {
  auto& st = self->state;
  st.out.truncated = st.out.sessions > st.out.sample.size();
  auto cb = std::move(st.cb);
  cb(std::move(st.out));
  self->quit();
}

void take(prune_state& st, const session_ref& ref) {
  ++st.out.sessions;
  if (st.out.sample.size() < st.req.sample_limit)
    st.out.sample.push_back(ref);
}

void page_done(prune_actor* self);

// The verdict on delete `i` of the page: committed, left (the session was
// written after the page read it, or is gone), or failed.
void answered(prune_actor* self, std::size_t i, errc code, std::string message) {
  auto& st = self->state;
  if (code == errc::ok) {
    st.deleted[i] = 1;
  } else if (code != errc::condition_failed) {
    ++st.out.failed;
    if (!st.first)
      st.first = error{code, std::move(message)};
  }
  if (--st.left == 0)
    page_done(self);
}

// Answers delete `i` as a message to itself (never inside step).
void answer_self(prune_actor* self, std::size_t i, errc code, std::string message) {
  prune_answer a;
  a.i = i;
  a.code = code;
  a.message = std::move(message);
  self->send(self, std::move(a));
}

void step(prune_actor* self) {
  auto& st = self->state;
  auto& core = *st.core;
  if (core.closed.load()) {
    st.out.stopped = error{errc::unavailable, "the engine is closing"};
    return finish(self);
  }
  prune_page page;
  try {
    auto txn = store::begin_read(*core.kv);
    if (!txn) {
      st.out.stopped = std::move(txn).err();
      return finish(self);
    }
    auto read = walk_page(**txn, st.out.cutoff, st.req.app_name, st.from);
    if (!read) {
      st.out.stopped = std::move(read).err();
      return finish(self);
    }
    page = std::move(*read);
  } catch (const store::kv_failure& f) {
    st.out.stopped = error{f.code, f.message};
    return finish(self);
  }
  st.end = page.end;
  if (st.req.dry_run || page.targets.empty()) {
    for (const auto& t : page.targets)
      take(st, t.ref);
    if (st.req.progress && !page.targets.empty())
      st.req.progress(st.out.sessions);
    if (st.end)
      return finish(self);
    self->send(self, prune_step{});
    return;
  }
  st.refs.clear();
  st.deleted.assign(page.targets.size(), 0);
  st.left = page.targets.size();
  st.first.reset();
  caf::actor me = caf::actor_cast<caf::actor>(self);
  for (std::size_t i = 0; i < page.targets.size(); ++i) {
    auto& t = page.targets[i];
    prune_delete_cmd cmd;
    cmd.only_if = t.seen;
    cmd.cb = [me, i](result<void> r) { // on the session actor's thread
      prune_answer a;
      a.i = i;
      if (!r) {
        a.code = r.code();
        a.message = std::move(r).err().message;
      }
      caf::anon_send(me, std::move(a));
    };
    auto key = session_registry_key(t.ref);
    auto make = [&core, &t] { return spawn_session_actor(core, t.ref); };
    if (!core.sessions.route(key, std::move(cmd), make))
      answer_self(self, i, errc::unavailable, "the engine is closing");
    st.refs.push_back(std::move(t.ref));
  }
}

void page_done(prune_actor* self) {
  auto& st = self->state;
  for (std::size_t i = 0; i < st.refs.size(); ++i)
    if (st.deleted[i])
      take(st, st.refs[i]);
  if (st.req.progress)
    st.req.progress(st.out.sessions);
  if (st.first) {
    // Stop: a later page would likely fail the same way.
    st.out.stopped = std::move(st.first);
    return finish(self);
  }
  if (st.end)
    return finish(self);
  self->send(self, prune_step{});
}

caf::behavior prune_behavior(prune_actor* self, engine_core* core, prune_request req,
                             callback<prune_result> cb) {
  auto& st = self->state;
  st.core = core;
  st.out.cutoff = wall_now(*core) - req.older_than_s;
  st.req = std::move(req);
  st.cb = std::move(cb);
  self->send(self, prune_step{});
  return {
    [self](prune_step&) { step(self); },
    [self](prune_answer& a) { answered(self, a.i, a.code, std::move(a.message)); },
  };
}

} // namespace

void engine::prune(prune_request req, callback<prune_result> cb) {
  if (!std::isfinite(req.older_than_s) || req.older_than_s <= 0)
    return cb(error{errc::invalid_argument, "'older_than_s' must be a finite number above 0"});
  if (!req.app_name.empty())
    if (auto r = model::check_name(req.app_name, "app_name"); !r)
      return cb(std::move(r).err());
  if (req.sample_limit > max_sample)
    return cb(error{errc::invalid_argument, "'sample_limit' must be 0..10000"});
  if (core_->closed.load())
    return cb(error{errc::unavailable, "the engine is closing"});
  core_->sys->spawn(prune_behavior, core_.get(), std::move(req), std::move(cb));
}

result<prune_result> engine::prune(prune_request req) {
  return block_on<prune_result>(*core_,
                                [&](callback<prune_result> cb) { prune(std::move(req), cb); });
}

} // namespace agentstate
