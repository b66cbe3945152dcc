// SPDX-License-Identifier: Apache-2.0
// The engine as a CAF actor in a host's actor system (agentstate/caf.hpp).
// The actor is dynamically typed inside (it also takes its own delivery
// messages) and handed out through the typed engine_actor interface. Engine
// callbacks run on engine threads, so they never touch the promise directly:
// they send the outcome back to this actor, which delivers it.
#include "agentstate/caf.hpp"

#include <type_traits>

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

} // namespace

engine_actor spawn_engine_actor(caf::actor_system& sys, engine& eng) {
  return caf::actor_cast<engine_actor>(sys.spawn(engine_actor_impl, &eng));
}

} // namespace agentstate
