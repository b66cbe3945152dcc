// SPDX-License-Identifier: Apache-2.0
// engine::prune: a short-lived actor per call walks the store's update-time
// index one bounded page at a time, each page from a fresh snapshot, and
// sends each old session's actor an ordinary delete; the next page is read
// once the page's deletes are answered (dry run: at once, as a message to
// itself, so other actors run between pages).
#include <atomic>
#include <cmath>
#include <memory>
#include <mutex>
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

namespace agentstate::detail {
/// Read and handle the next page.
struct prune_step {};
/// Every delete of the page in flight is answered.
struct prune_page_done {};
} // namespace agentstate::detail

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::detail::prune_step)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::detail::prune_page_done)

namespace agentstate {

using namespace detail;

namespace {

/// Sessions one page holds at most, and index entries one page examines.
constexpr std::size_t page_sessions = 256;
constexpr std::size_t page_entries = 4096;
constexpr std::size_t max_sample = 10000;

/// One page of the walk.
struct prune_page {
  std::vector<session_ref> refs;
  bool end = false; ///< nothing after it
};

/// The sessions (of `app`, or of every app) last updated before `cutoff`
/// whose by_update key is at or after `from`, up to page_sessions of them
/// and page_entries entries examined; `from` moves past what was examined.
/// Each app's entries run from its oldest, so the walk skips to the next app
/// at the first entry that is not old. Throws kv_failure.
prune_page walk_page(store::kv_read& txn, double cutoff, const std::string& app,
                     std::string& from) {
  prune_page page;
  const std::string prefix = app.empty() ? std::string() : app + '\0';
  if (from.empty())
    from = prefix;
  std::size_t examined = 0;
  while (page.refs.size() < page_sessions && examined < page_entries) {
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
          page.refs.push_back(
            session_ref{std::string(k.substr(0, nul)), std::string(rest[1]), std::string(rest[0])});
      } // else: a malformed entry (verify names it); prune leaves it
      from.assign(k.data(), k.size());
      from.push_back('\0'); // the next key after k
      limited = page.refs.size() >= page_sessions || examined >= page_entries;
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
  return page;
}

/// The deletes of one page, answered from session actors' threads.
struct page_deletes {
  std::vector<session_ref> refs;
  std::vector<char> deleted; ///< per ref, set by its answer
  std::atomic<std::size_t> left{0};
  std::mutex mtx;
  std::uint64_t failures = 0; ///< under mtx
  std::optional<error> first; ///< under mtx
};

struct prune_state {
  engine_core* core = nullptr;
  prune_request req;
  callback<prune_result> cb;
  prune_result out;
  std::string from; ///< where the walk resumes in by_update
  bool end = false; ///< the last page has been read
  std::shared_ptr<page_deletes> inflight;
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
    page = walk_page(**txn, st.out.cutoff, st.req.app_name, st.from);
  } catch (const store::kv_failure& f) {
    st.out.stopped = error{f.code, f.message};
    return finish(self);
  }
  st.end = page.end;
  if (st.req.dry_run || page.refs.empty()) {
    for (const auto& ref : page.refs)
      take(st, ref);
    if (st.req.progress && !page.refs.empty())
      st.req.progress(st.out.sessions);
    if (st.end)
      return finish(self);
    self->send(self, prune_step{});
    return;
  }
  auto d = std::make_shared<page_deletes>();
  d->refs = std::move(page.refs);
  d->deleted.assign(d->refs.size(), 0);
  d->left = d->refs.size();
  st.inflight = d;
  caf::actor me = caf::actor_cast<caf::actor>(self);
  for (std::size_t i = 0; i < d->refs.size(); ++i) {
    auto answered = [d, me, i](result<void> r) {
      if (r) {
        d->deleted[i] = 1;
      } else {
        std::lock_guard<std::mutex> guard(d->mtx);
        ++d->failures;
        if (!d->first)
          d->first = std::move(r).err();
      }
      if (d->left.fetch_sub(1, std::memory_order_acq_rel) == 1)
        caf::anon_send(me, prune_page_done{});
    };
    const auto& ref = d->refs[i];
    delete_cmd cmd{answered};
    auto key = session_registry_key(ref);
    auto make = [&core, &ref] { return spawn_session_actor(core, ref); };
    if (!core.sessions.route(key, std::move(cmd), make))
      answered(error{errc::unavailable, "the engine is closing"});
  }
}

void page_done(prune_actor* self) {
  auto& st = self->state;
  auto d = std::move(st.inflight);
  if (!d)
    return;
  // Every answer was given before the last one sent prune_page_done: the
  // countdown's acq_rel orders their writes before this message.
  std::optional<error> first;
  {
    std::lock_guard<std::mutex> guard(d->mtx);
    st.out.failed += d->failures;
    first = std::move(d->first);
  }
  for (std::size_t i = 0; i < d->refs.size(); ++i)
    if (d->deleted[i])
      take(st, d->refs[i]);
  if (st.req.progress)
    st.req.progress(st.out.sessions);
  if (first) {
    // Stop: a later page would likely fail the same way.
    st.out.stopped = std::move(first);
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
    [self](prune_page_done&) { page_done(self); },
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
