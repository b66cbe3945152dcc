// SPDX-License-Identifier: Apache-2.0
// tools/bench/session_load.cpp: the requests and loops of session_load.hpp.
#include "tools/bench/session_load.hpp"

#include <utility>

#include "tools/bench/progress.hpp"

namespace agentstate::tools::bench {

std::string sid(const char* prefix, std::size_t i) {
  return prefix + std::to_string(i);
}

json step_delta(std::size_t i) {
  return json{{"step", i}, {"status", "s" + std::to_string(i % 7)}, {"score", double(i) * 0.5}};
}

append_request make_append(const session_ref& ref, json delta) {
  append_request r;
  r.ref = ref;
  r.ev.author = "bench";
  r.ev.invocation_id = "inv-" + ref.session_id;
  r.ev.actions.state_delta = std::move(delta);
  return r;
}

void issue_create(run_ctx& x, const session_ref& ref, step_done_fn done) {
  create_request c{ref.app_name, ref.user_id, ref.session_id, json::object()};
  x.eng->create_session(std::move(c), [&x, done](result<session> r) {
    if (!r)
      x.errors.add(r.err());
    done(r.ok());
  });
}

void issue_append(run_ctx& x, append_request req, double* latency_us, step_done_fn done) {
  auto t = steady::now();
  x.eng->append_event(std::move(req), [&x, done, t, latency_us](result<append_result> r) {
    *latency_us = us_between(t, steady::now());
    if (!r)
      x.errors.add(r.err());
    done(r.ok());
  });
}

bool create_sessions(run_ctx& x, std::size_t n, std::size_t width,
                     const std::function<session_ref(std::size_t)>& ref_of, const char* label) {
  progress prog(x.eng.get(), std::string(label) + " create", n);
  run_closed_loop(
    n, 1, width,
    [&](std::size_t j, std::size_t, step_done_fn done) {
      issue_create(x, ref_of(j), std::move(done));
    },
    &prog);
  return x.errors.count == 0;
}

double append_loop(run_ctx& x, std::size_t jobs, std::size_t steps, std::size_t width,
                   const std::function<session_ref(std::size_t)>& ref_of,
                   const std::function<json(std::size_t, std::size_t)>& delta_of, samples& lat,
                   const char* label) {
  lat.us.assign(jobs * steps, 0.0);
  progress prog(x.eng.get(), std::string(label) + " append", jobs * steps);
  auto t0 = steady::now();
  run_closed_loop(
    jobs, steps, width,
    [&](std::size_t j, std::size_t k, step_done_fn done) {
      issue_append(x, make_append(ref_of(j), delta_of(j, k)), &lat.us[j * steps + k],
                   std::move(done));
    },
    &prog);
  return since(t0);
}

} // namespace agentstate::tools::bench
