// SPDX-License-Identifier: Apache-2.0
// The engine as a CAF actor in a host's actor system (agentstate/caf.hpp).
// The actor is dynamically typed inside (it also takes its own delivery
// messages) and handed out through the typed engine_actor interface. Engine
// callbacks run on engine threads, so they never touch the promise directly:
// they send the outcome back to this actor, which delivers it.
#include "agentstate/caf.hpp"

#include <condition_variable>
#include <mutex>
#include <type_traits>
#include <utility>

#include <caf/all.hpp>

namespace agentstate::detail {

/// An outcome on its way back to the actor that holds the promise.
struct delivery {
  caf::response_promise rp;
  caf::message value;
  caf::error err;
};

} // namespace agentstate::detail

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(agentstate::detail::delivery)

namespace agentstate {

caf::error to_caf_error(const error& x) {
  return caf::error(static_cast<std::uint8_t>(x.code), error_category,
                    caf::make_message(x.message));
}

void add_error_category(caf::actor_system_config& cfg) {
  cfg.add_error_category(error_category,
                         [](std::uint8_t code, caf::atom_value, const caf::message& ctx) {
                           std::string out = "agentstate.";
                           out += to_string(static_cast<errc>(code));
                           if (ctx.match_elements<std::string>()) {
                             out += ": ";
                             out += ctx.get_as<std::string>(0);
                           }
                           return out;
                         });
}

namespace {

template <class T>
struct tag {};

/// Defers the current request's answer; the returned callback answers it.
template <class T>
callback<T> answer_later(caf::event_based_actor* self, tag<T>) {
  auto rp = self->make_response_promise();
  auto me = caf::actor_cast<caf::actor>(self);
  return [rp, me](result<T> r) mutable {
    detail::delivery d{rp, {}, {}};
    if (!r) {
      d.err = to_caf_error(r.err());
    } else if constexpr (std::is_void_v<T>) {
      d.value = caf::make_message(caf::unit);
    } else {
      d.value = caf::make_message(std::move(*r));
    }
    caf::anon_send(me, std::move(d));
  };
}

caf::behavior engine_actor_impl(caf::event_based_actor* self, engine* eng) {
  return {
    [](detail::delivery& d) {
      if (d.err)
        d.rp.deliver(std::move(d.err));
      else
        d.rp.deliver(std::move(d.value));
    },
    [self, eng](create_request& r) {
      eng->create_session(std::move(r), answer_later(self, tag<session>{}));
    },
    [self, eng](get_request& r) {
      eng->get_session(std::move(r), answer_later(self, tag<std::optional<session>>{}));
    },
    [self, eng](list_request& r) {
      eng->list_sessions(std::move(r), answer_later(self, tag<session_page>{}));
    },
    [self, eng](delete_request& r) {
      eng->delete_session(std::move(r.ref), answer_later(self, tag<void>{}));
    },
    [self, eng](append_request& r) {
      eng->append_event(std::move(r), answer_later(self, tag<append_result>{}));
    },
    [self, eng](begin_invocation_request& r) {
      eng->begin_invocation(std::move(r.ref), std::move(r.invocation_id),
                            answer_later(self, tag<session>{}));
    },
    [self, eng](end_invocation_request& r) {
      eng->end_invocation(std::move(r.ref), std::move(r.invocation_id),
                          answer_later(self, tag<void>{}));
    },
    [self, eng](app_state_request& r) {
      eng->get_app_state(std::move(r.app_name), answer_later(self, tag<json>{}));
    },
    [self, eng](user_state_request& r) {
      eng->get_user_state(std::move(r.app_name), std::move(r.user_id),
                          answer_later(self, tag<json>{}));
    },
  };
}

// -- watch_to_actor ---------------------------------------------------------------
//
// Three parties share an actor_link: the watch's engine thread (its
// callbacks), the relay actor, and the handle. The callbacks hand each batch
// to the relay and wait until `dest` answered it (or the link stops); the
// relay turns a batch into a request to `dest` and reports the answer. The
// callbacks live in the engine's watcher, which the inner handle owns, so
// the link holds no owning pointer to the inner handle (a cycle): the relay
// reaches it through a weak_ptr to cancel the watch when `dest` is gone.

struct actor_link {
  std::mutex mtx;
  std::condition_variable cv;
  caf::actor relay; ///< cleared by on_end (the last message sent to it)
  std::weak_ptr<watch_handle> inner; ///< set once the watch started
  bool in_flight = false; ///< a batch went to the relay, unanswered
  /// dest gone or refusing, relay ended, or cancelled: a callback sends its
  /// batch and returns without waiting for the answer.
  bool stop = false;
  bool cancel_wanted = false; ///< the relay asked before `inner` was set

  // Releases a callback waiting for an answer; none waits after it.
  void halt() {
    std::lock_guard<std::mutex> lk(mtx);
    stop = true;
    cv.notify_all();
  }

  // Stops the link and cancels the watch (its on_end runs before this
  // returns, unless it ended already). Blocks only while the watch's delivery thread
  // finishes a step: a callback waiting for an answer is released first.
  void cancel_watch() {
    std::shared_ptr<watch_handle> h;
    {
      std::lock_guard<std::mutex> lk(mtx);
      stop = true;
      cv.notify_all();
      h = inner.lock();
      if (!h)
        cancel_wanted = true;
    }
    if (h)
      h->cancel();
  }
};

class actor_watch_handle final : public watch_handle {
public:
  actor_watch_handle(std::shared_ptr<actor_link> link, std::shared_ptr<watch_handle> inner)
    : link_(std::move(link)), inner_(std::move(inner)) {}
  ~actor_watch_handle() override { cancel(); }
  void cancel() override {
    link_->halt();
    inner_->cancel();
  }
  std::string cursor() const override { return inner_->cursor(); }

private:
  std::shared_ptr<actor_link> link_;
  std::shared_ptr<watch_handle> inner_;
};

caf::behavior relay_impl(caf::event_based_actor* self, caf::actor dest,
                         std::shared_ptr<actor_link> link) {
  self->monitor(dest);
  self->set_down_handler([self, link](caf::down_msg&) {
    // dest is gone: end the watch; its watch_end comes back here and ends
    // the relay.
    link->cancel_watch();
  });
  return {
    [self, dest, link](change_page& p) {
      auto answered = [link] {
        std::lock_guard<std::mutex> lk(link->mtx);
        link->in_flight = false;
        link->cv.notify_all();
      };
      self->request(dest, caf::infinite, std::move(p))
        .then([answered]() { answered(); },
              [answered, link](caf::error& e) {
                if (e == caf::sec::unexpected_response) // an answer with a value
                  answered();
                else // gone (request_receiver_down) or refusing: end the watch
                  link->cancel_watch();
              });
    },
    [self, dest](watch_end& e) {
      self->send(dest, std::move(e));
      self->quit();
    },
  };
}

} // namespace

engine_actor spawn_engine_actor(caf::actor_system& sys, engine& eng) {
  return caf::actor_cast<engine_actor>(sys.spawn(engine_actor_impl, &eng));
}

result<std::unique_ptr<watch_handle>> watch_to_actor(engine& eng, watch_request req,
                                                     caf::actor dest) {
  if (!dest)
    return error{errc::invalid_argument, "watch_to_actor needs a destination actor"};
  auto link = std::make_shared<actor_link>();
  caf::actor relay = dest->home_system().spawn(relay_impl, dest, link);
  // However the relay ends, no callback waits for it any longer.
  relay->attach_functor([link] { link->halt(); });
  link->relay = relay;
  auto on_changes = [link](change_page batch) {
    caf::actor r;
    {
      // Sent even once stopped: the watch's cursor moves past this batch, so
      // it must reach `dest` (before the watch_end) whenever `dest` lives.
      std::lock_guard<std::mutex> lk(link->mtx);
      if (!link->relay)
        return;
      link->in_flight = true;
      r = link->relay;
    }
    caf::anon_send(r, std::move(batch));
    std::unique_lock<std::mutex> lk(link->mtx);
    link->cv.wait(lk, [&] { return !link->in_flight || link->stop; });
  };
  auto on_end = [link](const watch_end& end) {
    caf::actor r;
    {
      std::lock_guard<std::mutex> lk(link->mtx);
      r = std::move(link->relay);
      link->relay = nullptr;
      link->stop = true;
    }
    if (r)
      caf::anon_send(r, end);
  };
  auto started = eng.watch(std::move(req), std::move(on_changes), std::move(on_end));
  if (!started) {
    link->halt();
    caf::anon_send_exit(relay, caf::exit_reason::user_shutdown);
    return std::move(started).err();
  }
  std::shared_ptr<watch_handle> inner = std::move(*started);
  bool cancel_now = false;
  {
    std::lock_guard<std::mutex> lk(link->mtx);
    link->inner = inner;
    cancel_now = link->cancel_wanted;
  }
  if (cancel_now) // dest terminated before the watch started
    inner->cancel();
  return std::unique_ptr<watch_handle>(
    std::make_unique<actor_watch_handle>(std::move(link), std::move(inner)));
}

} // namespace agentstate
