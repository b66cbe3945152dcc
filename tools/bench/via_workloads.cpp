// SPDX-License-Identifier: Apache-2.0
// Over 600 lines: workloads a, b and c via serve share the client loop, the serve child
// and the in-process counterparts that each compares with.
// tools/bench/via_workloads.cpp: workloads a, b, c and h through `agentstate
// serve` (via_workloads.hpp): the client loop on agentstate::rpc_client (over
// the child's pipes with rpc_client::adopt, or TCP), the same shapes
// in-process, and their lines.
#include "tools/bench/via_workloads.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agentstate/client.hpp"
#include "tools/bench/serve_client.hpp"
#include "tools/bench/session_load.hpp"

namespace agentstate::tools::bench {

std::optional<std::vector<std::string>> serve_store_args(run_ctx& x, const config& cfg,
                                                         std::unique_ptr<temp_store>& dir) {
  std::vector<std::string> args;
  if (cfg.mode == durability::memory) {
    args = {"--memory"};
  } else {
    dir = std::make_unique<temp_store>(cfg.base_dir);
    if (!dir->ok()) {
      x.errors.add("cannot create a temp dir under " + cfg.base_dir);
      return std::nullopt;
    }
    args = {"--store", dir->path(), "--durability", mode_name(cfg.mode)};
  }
  if (cfg.threads > 0) {
    args.push_back("--threads");
    args.push_back(std::to_string(cfg.threads));
  }
  return args;
}

namespace {

constexpr std::size_t pipeline_window = 256; // a and c's loads: appends in flight

// -- request params -----------------------------------------------------------------

// The bench's names are plain ASCII: no escaping needed.
void put_ref(std::string& out, const session_ref& r) {
  out += R"("app_name":")";
  out += r.app_name;
  out += R"(","user_id":")";
  out += r.user_id;
  out += R"(","session_id":")";
  out += r.session_id;
  out += '"';
}

void put_create(std::string& out, const session_ref& r) {
  out += '{';
  put_ref(out, r);
  out += '}';
}

// step_delta(k).dump(), written directly: the client pays a few string
// appends per request, where the in-process side builds the value once
// (check_step_text compares the two before each run).
void put_step_delta(std::string& out, std::size_t k) {
  out += R"({"score":)";
  out += std::to_string(k / 2);
  out += k % 2 ? ".5" : ".0";
  out += R"(,"status":"s)";
  out += std::to_string(k % 7);
  out += R"(","step":)";
  out += std::to_string(k);
  out += '}';
}

// make_append(ref, step_delta(k)) as append_event's params.
void put_append(std::string& out, const session_ref& r, std::size_t k) {
  out += '{';
  put_ref(out, r);
  out += R"(,"event":{"author":"bench","invocation_id":"inv-)";
  out += r.session_id;
  out += R"(","actions":{"state_delta":)";
  put_step_delta(out, k);
  out += "}}}";
}

// Whether put_step_delta writes step_delta(k).dump() for the first 1,000
// and the last 100 steps below n; the first difference goes to `errors`.
bool check_step_text(std::size_t n, error_log& errors) {
  for (std::size_t k = 0; k < n; k = (k + 1 == 1000 && n > 1100) ? n - 100 : k + 1) {
    std::string text;
    put_step_delta(text, k);
    if (auto want = step_delta(k).dump(); text != want) {
      errors.add("bench client: step " + std::to_string(k) + " written as " + text + ", not "
                 + want);
      return false;
    }
  }
  return true;
}

void put_get(std::string& out, const session_ref& r, std::optional<std::size_t> recent) {
  out += '{';
  put_ref(out, r);
  if (recent) {
    out += R"(,"num_recent_events":)";
    out += std::to_string(*recent);
  }
  out += '}';
}

std::string excerpt(std::string_view line) {
  return std::string(line.substr(0, 300)) + (line.size() > 300 ? "..." : "");
}

/// The number after the last "version": in a result's text, or -1 when there
/// is none.
std::int64_t last_version(std::string_view text) {
  static constexpr std::string_view key = R"("version":)";
  auto at = text.rfind(key);
  if (at == std::string_view::npos)
    return -1;
  std::int64_t n = 0;
  std::size_t digits = 0;
  for (auto p = at + key.size(); p < text.size() && text[p] >= '0' && text[p] <= '9'; ++p)
    if (++digits <= 18)
      n = n * 10 + (text[p] - '0');
  return digits == 0 || digits > 18 ? -1 : n;
}

/// What a call that failed says: the server's error object, or why the
/// client ended it.
std::string failure_of(const rpc_raw_reply& r) {
  if (r.answered && !r.error_object.is_null())
    return excerpt(r.error_object.dump());
  return "(not answered) " + r.value.err().message;
}

// -- the client loop ----------------------------------------------------------------

/// `jobs` jobs of `steps` requests each. Job j runs on stream j % streams;
/// each stream runs `chains` jobs at a time, each with up to `depth` of its
/// requests in flight (issued in step order); a chain takes its stream's next
/// job when every request of the current one is answered.
struct loop_shape {
  std::size_t jobs = 1, steps = 1, chains = 1, depth = 1;
};

/// Writes the params of request `step` of job `job` to `params` (empty).
using put_fn = std::function<void(std::string& params, std::size_t job, std::size_t step)>;
/// Checks the result text of request `step` of job `job`; "" when it is
/// right, else what is wrong.
using check_fn =
  std::function<std::string(std::size_t job, std::size_t step, std::string_view result)>;

struct loop_result {
  double seconds = 0;
  std::uint64_t answered = 0;
};

/// One run of run_loop. Stream i's state is touched only on its client's
/// I/O thread: its chains start in the answer to a ping, and every request
/// after is issued in the answer to an earlier one (call_raw_async).
class request_loop {
public:
  request_loop(std::vector<std::unique_ptr<rpc_client>>& clients, const loop_shape& shape,
               std::string method, const put_fn& put, const check_fn& check, samples& lat,
               error_log& errors)
    : clients_(clients), shape_(shape), method_(std::move(method)), put_(put), check_(check),
      lat_(lat), errors_(errors), streams_(clients.size()), chain_of_job_(shape.jobs, 0),
      sent_(shape.jobs * shape.steps) {}

  loop_result run() {
    const std::size_t total = shape_.jobs * shape_.steps;
    lat_.us.assign(total, 0.0);
    streams_left_ = streams_.size();
    auto t0 = steady::now();
    for (std::size_t i = 0; i < streams_.size(); ++i)
      clients_[i]->call_async("ping", nullptr, [this, i](rpc_reply r) {
        if (!r.value) {
          errors_.add("client: ping: " + r.value.err().message);
          failed_ = true;
          return finish(i);
        }
        start(i);
      });
    {
      std::unique_lock<std::mutex> lock(done_mtx_);
      done_cv_.wait(lock, [&] { return streams_left_ == 0; });
    }
    loop_result r;
    r.seconds = since(t0);
    std::uint64_t issued = 0;
    for (auto& s : streams_) {
      r.answered += s.answered;
      issued += s.issued;
    }
    if (r.answered < issued)
      lat_.us.resize(std::min<std::size_t>(lat_.us.size(), r.answered));
    return r;
  }

private:
  struct chain {
    std::size_t job = 0, next_step = 0, answered = 0;
    bool busy = false; ///< it has a job
  };
  struct stream {
    std::vector<chain> chains;
    std::size_t next_job = 0; ///< the stream's m-th job is m*S+i
    std::size_t active = 0; ///< busy chains
    std::uint64_t issued = 0, answered = 0;
    bool finished = false;
    std::string params;
  };

  void start(std::size_t i) {
    auto& s = streams_[i];
    s.chains.resize(shape_.chains);
    for (std::size_t ci = 0; ci < shape_.chains && !failed_ && !s.finished; ++ci)
      take_job(i, ci);
    if (s.active == 0)
      finish(i);
  }

  /// Gives chain `ci` of stream i its stream's next job; when none is left
  /// (or a request failed) the chain is idle from then on, and the stream
  /// finishes with its last busy chain.
  void take_job(std::size_t i, std::size_t ci) {
    auto& s = streams_[i];
    auto& c = s.chains[ci];
    const auto j = s.next_job * streams_.size() + i;
    if (failed_ || j >= shape_.jobs) {
      if (c.busy) {
        c.busy = false;
        if (--s.active == 0)
          finish(i);
      }
      return;
    }
    ++s.next_job;
    if (!c.busy) {
      c.busy = true;
      ++s.active;
    }
    c.job = j;
    c.next_step = c.answered = 0;
    chain_of_job_[j] = static_cast<std::uint32_t>(ci);
    issue(i, ci);
  }

  /// Issues chain ci's requests up to its depth. A call refused at once
  /// completes inside call_raw_async: the chain's counts are settled first.
  void issue(std::size_t i, std::size_t ci) {
    auto& s = streams_[i];
    for (;;) {
      auto& c = s.chains[ci];
      if (failed_ || c.next_step >= shape_.steps || c.next_step - c.answered >= shape_.depth)
        return;
      const std::size_t index = c.job * shape_.steps + c.next_step;
      s.params.clear();
      put_(s.params, c.job, c.next_step);
      ++c.next_step;
      ++s.issued;
      sent_[index] = steady::now();
      clients_[i]->call_raw_async(method_, s.params,
                                  [this, index](rpc_raw_reply r) { on_reply(index, r); });
    }
  }

  void on_reply(std::size_t index, const rpc_raw_reply& r) {
    const auto now = steady::now();
    const std::size_t job = index / shape_.steps, step = index % shape_.steps;
    const std::size_t i = job % streams_.size();
    auto& s = streams_[i];
    if (r.answered) {
      lat_.us[index] = us_between(sent_[index], now);
      ++s.answered;
    }
    if (!r.value) {
      errors_.add("request " + std::to_string(step) + " of job " + std::to_string(job)
                  + " failed: " + failure_of(r));
      failed_ = true;
    } else if (auto bad = check_(job, step, *r.value); !bad.empty()) {
      errors_.add("request " + std::to_string(step) + " of job " + std::to_string(job) + ": "
                  + bad);
      failed_ = true;
    }
    const auto ci = chain_of_job_[job];
    auto& c = s.chains[ci];
    ++c.answered;
    issue(i, ci);
    if (c.answered == c.next_step && (failed_ || c.next_step == shape_.steps))
      take_job(i, ci);
  }

  /// Stream i has no chain left; once per stream.
  void finish(std::size_t i) {
    if (streams_[i].finished)
      return;
    streams_[i].finished = true;
    std::lock_guard<std::mutex> g(done_mtx_);
    --streams_left_;
    done_cv_.notify_all();
  }

  std::vector<std::unique_ptr<rpc_client>>& clients_;
  const loop_shape shape_;
  const std::string method_;
  const put_fn& put_;
  const check_fn& check_;
  samples& lat_;
  error_log& errors_;
  std::vector<stream> streams_;
  std::vector<std::uint32_t> chain_of_job_;
  std::vector<steady::time_point> sent_;
  std::atomic<bool> failed_{false};
  std::mutex done_mtx_;
  std::condition_variable done_cv_;
  std::size_t streams_left_ = 0;
};

/// Runs `shape` of `method` calls over `clients`, one stream each; each
/// request's latency (call to answer) lands in `lat` at index
/// job*steps+step. A failed request or check is logged on `errors` and ends
/// its job; no new job starts after one.
loop_result run_loop(std::vector<std::unique_ptr<rpc_client>>& clients, const loop_shape& shape,
                     const char* method, const put_fn& put, const check_fn& check, samples& lat,
                     error_log& errors) {
  return request_loop(clients, shape, method, put, check, lat, errors).run();
}

// -- serve as a child ---------------------------------------------------------------

/// The running server and the clients connected to it.
struct served {
  std::unique_ptr<serve_child> child;
  std::vector<std::unique_ptr<rpc_client>> clients;
  double cpu0 = 0, client_cpu0 = 0;

  void cpu_start() {
    cpu0 = child->cpu_seconds();
    client_cpu0 = cpu_seconds();
  }
  /// server_cpu_us_per_<unit> and client_cpu_us_per_<unit> since cpu_start().
  void cpu_stop(ojson& out, double n, const char* unit) {
    double server = child->cpu_seconds() - cpu0, client = cpu_seconds() - client_cpu0;
    if (n <= 0)
      return;
    out[std::string("server_cpu_us_per_") + unit] = round_to(server * 1e6 / n, 1);
    out[std::string("client_cpu_us_per_") + unit] = round_to(client * 1e6 / n, 1);
  }
};

/// Starts serve on a fresh store (x.dir) with the run's durability, and
/// connects `connections` clients (tcp; stdio has one, on the child's pipes).
bool start_serve(run_ctx& x, const config& cfg, std::size_t connections, served& s) {
  auto store_args = serve_store_args(x, cfg, x.dir);
  if (!store_args)
    return false;
  std::vector<std::string> args = std::move(*store_args);
  const bool tcp = cfg.via == "tcp";
  if (tcp) {
    args.push_back("--listen");
    args.push_back("127.0.0.1:0");
  }
  std::string why;
  auto bin = cfg.serve_bin.empty() ? self_binary() : cfg.serve_bin;
  s.child = serve_child::start(bin, args, tcp, why);
  if (!s.child) {
    x.errors.add(why);
    return false;
  }
  client_options o;
  o.address = s.child->address();
  for (std::size_t i = 0; i < (tcp ? connections : 1); ++i) {
    auto c = tcp ? rpc_client::connect(o)
                 : rpc_client::adopt(s.child->stdout_fd(), s.child->stdin_fd(), o);
    if (!c) {
      x.errors.add("client: " + c.err().message);
      return false;
    }
    s.clients.push_back(std::move(*c));
  }
  return true;
}

/// serve's engine stats (the "stats" method), as a bench line's "serve_stats".
ojson serve_stats(served& s, error_log& errors) {
  auto r = s.clients.front()->call("stats", nullptr);
  if (!r.value) {
    errors.add("stats: " + r.value.err().message);
    return ojson();
  }
  return pick_stats(
    ojson::parse(r.value->dump()),
    {"appends", "commits", "batched_writes", "max_batch", "sessions_live", "mean_batch"});
}

/// Closes the clients and stops serve; its exit status must be 0.
void stop_serve(run_ctx& x, served& s) {
  s.clients.clear();
  if (!s.child)
    return;
  int code = s.child->stop();
  if (code != 0)
    x.errors.add("serve exited with status " + std::to_string(code)
                 + "; stderr: " + s.child->stderr_text());
  s.child.reset();
  x.dir.reset();
}

// -- in-process counterparts ---------------------------------------------------------

/// Appends events 0..n-1 (step_delta) to `ref` in order from this thread with
/// up to `window` in flight (async API); checks that append i gets version
/// i+1. Each ack latency lands in `lat`. Returns the wall-clock seconds.
double windowed_appends(run_ctx& x, const session_ref& ref, std::size_t n, std::size_t window,
                        samples& lat) {
  struct shared {
    std::mutex mtx;
    std::condition_variable cv;
    std::size_t in_flight = 0;
  };
  auto sh = std::make_shared<shared>();
  lat.us.assign(n, 0.0);
  auto t0 = steady::now();
  for (std::size_t i = 0; i < n && x.errors.count == 0; ++i) {
    {
      std::unique_lock<std::mutex> lock(sh->mtx);
      sh->cv.wait(lock, [&] { return sh->in_flight < window; });
      ++sh->in_flight;
    }
    auto t = steady::now();
    double* slot = &lat.us[i];
    x.eng->append_event(make_append(ref, step_delta(i)),
                        [&x, sh, t, slot, i](result<append_result> r) {
                          *slot = us_between(t, steady::now());
                          if (!r)
                            x.errors.add(r.err());
                          else if (r->version != i + 1)
                            x.errors.add("append " + std::to_string(i) + " got version "
                                         + std::to_string(r->version));
                          std::lock_guard<std::mutex> guard(sh->mtx);
                          --sh->in_flight;
                          sh->cv.notify_all();
                        });
  }
  std::unique_lock<std::mutex> lock(sh->mtx);
  sh->cv.wait(lock, [&] { return sh->in_flight == 0; });
  return since(t0);
}

/// The in-process figure a via workload compares serve with: `events`
/// appended by `appends(lat)` (returns its wall-clock seconds; timed between
/// x.cpu_start and x.cpu_stop), described by `of`. Moves the CPU figures out
/// of x.out (they describe the serve phase there) and snapshots the engine's
/// stats.
ojson in_process_figure(run_ctx& x, const char* of, double events,
                        const std::function<double(samples& lat)>& appends) {
  samples lat;
  x.cpu_start();
  double secs = appends(lat);
  x.cpu_stop(events);
  ojson in;
  in["of"] = of;
  in["events_per_s"] = round_to(events / secs, 0);
  put_latency(in, "", lat);
  in["cpu_us_per_event"] = x.out["cpu_us_per_event"];
  in.update(pick_stats(to_json(x.eng->stats()), {"mean_batch"}));
  x.out.erase("cpu_s");
  x.out.erase("cpu_us_per_event");
  x.out.erase("written_kb_per_event");
  x.snapshot_engine();
  return in;
}

/// A check_fn for appends whose job is one session: its append `step` must
/// answer version step+1.
std::string check_append_version(std::size_t, std::size_t step, std::string_view line) {
  auto v = last_version(line);
  if (v != std::int64_t(step) + 1)
    return "version " + std::to_string(v) + ", expected " + std::to_string(step + 1);
  return "";
}

/// One session's n pipelined appends through serve (the a shape).
loop_result pipelined_appends(served& s, const session_ref& ref, std::size_t n, samples& lat,
                              error_log& errors) {
  loop_shape shape{1, n, 1, pipeline_window};
  return run_loop(
    s.clients, shape, "append_event",
    [&](std::string& params, std::size_t, std::size_t k) { put_append(params, ref, k); },
    check_append_version, lat, errors);
}

bool create_one(served& s, const session_ref& ref, error_log& errors) {
  std::string params;
  put_create(params, ref);
  std::promise<rpc_raw_reply> got;
  s.clients.front()->call_raw_async("create_session", params,
                                    [&got](rpc_raw_reply r) { got.set_value(std::move(r)); });
  auto r = got.get_future().get();
  if (!r.value)
    errors.add("create_session failed: " + failure_of(r));
  return r.value.ok();
}

std::string target_a(const config& cfg, double& target) {
  if (cfg.mode == durability::memory) {
    target = 50000;
    return "events_per_s >= 50000";
  }
  target = 12000;
  return cfg.mode == durability::sync
    ? "events_per_s >= 12000 (10x the 1.2k/s of one session's appends awaited one by one)"
    : "events_per_s >= 12000 (the sync target; none is set for nosync)";
}

// Puts the served append figures of `r` into x.out beside the in-process
// figure `in` (events_per_s, latency, CPU, ratio_to_in_process, serve_stats);
// returns the served events per second.
double report_appends(run_ctx& x, served& s, const loop_result& r, const char* latency_of,
                      samples& lat, const ojson& in) {
  double eps = double(r.answered) / r.seconds;
  x.out["events_per_s"] = round_to(eps, 0);
  put_headline_latency(x.out, latency_of, lat);
  s.cpu_stop(x.out, double(r.answered), "event");
  x.out["in_process"] = in;
  if (in.contains("events_per_s"))
    x.out["ratio_to_in_process"] = round_to(eps / in["events_per_s"].get<double>(), 3);
  x.out["serve_stats"] = serve_stats(s, x.errors);
  return eps;
}

// -- the workloads -------------------------------------------------------------------

/// The sessions a via workload creates in-process before its figure: `count`
/// named by `ref_of`, `width` creates in flight.
struct in_process_sessions {
  std::size_t count, width;
  std::function<session_ref(std::size_t)> ref_of;
};

/// The two phases of via workloads a, b and c, in order. In-process: the
/// engine opened on a fresh store, `sessions` created and `figure()` run; its
/// result is what the serve phase compares with (null when open or a create
/// failed). Then the engine is closed and its store dropped. Through serve,
/// only when no error has been logged: serve started on a fresh store with
/// `connections` streams and `through_serve(s, in)` run, `in` being the
/// in-process result; serve is stopped in any case. Returns what
/// through_serve returned (false when it did not run).
bool in_process_then_serve(run_ctx& x, const config& cfg, const in_process_sessions& sessions,
                           const std::function<ojson()>& figure, std::size_t connections,
                           const std::function<bool(served& s, const ojson& in)>& through_serve) {
  ojson in;
  if (x.open()
      && create_sessions(x, sessions.count, sessions.width, sessions.ref_of, x.name_.c_str()))
    in = figure();
  x.close();
  x.dir.reset();
  bool ok = false;
  served s;
  if (x.errors.count == 0 && start_serve(x, cfg, connections, s))
    ok = through_serve(s, in);
  stop_serve(x, s);
  return ok;
}

ojson via_a(const config& cfg) {
  run_ctx x(cfg, "a");
  const std::size_t n = scaled(cfg, 20000, 10);
  const std::size_t window = std::min(pipeline_window, n);
  x.describe("one session, appends pipelined through serve",
             {{"via", cfg.via}, {"events", n}, {"in_flight", window}, {"connections", 1}});
  double target = 0;
  auto tdesc = target_a(cfg, target);
  if (!check_step_text(n, x.errors))
    return x.finish(tdesc, false);
  session_ref ref{"bench-a", "u0", "s0"};
  bool ok = in_process_then_serve(
    x, cfg, {1, 1, [&](std::size_t) { return ref; }},
    [&] {
      return in_process_figure(
        x, "the same appends on the async API, 256 in flight from one thread", double(n),
        [&](samples& lat) { return windowed_appends(x, ref, n, window, lat); });
    },
    1,
    [&](served& s, const ojson& in) {
      if (!create_one(s, ref, x.errors))
        return false;
      samples lat;
      s.cpu_start();
      auto r = pipelined_appends(s, ref, n, lat, x.errors);
      double eps = report_appends(
        x, s, r, "append ack through serve (call to answer), 256 in flight", lat, in);
      return eps >= target;
    });
  return x.finish(tdesc, ok && x.errors.count == 0);
}

ojson via_b(const config& cfg) {
  run_ctx x(cfg, "b");
  const std::size_t sessions = scaled(cfg, 1000, 8), per = 20, width = 64;
  const std::size_t users = std::min<std::size_t>(100, sessions);
  const std::size_t conns = cfg.via == "tcp" ? 8 : 1;
  x.describe("sessions over users, 20 appends each, 64 in flight, through serve",
             {{"via", cfg.via},
              {"sessions", sessions},
              {"users", users},
              {"events", sessions * per},
              {"in_flight", std::min(width, sessions)},
              {"connections", conns}});
  const char* tdesc = "ratio_to_in_process >= 0.7";
  if (!check_step_text(per, x.errors))
    return x.finish(tdesc, false);
  auto ref_of = [&](std::size_t j) {
    return session_ref{"bench-b", sid("u", j % users), sid("s", j)};
  };
  bool ok = in_process_then_serve(
    x, cfg, {sessions, width, ref_of},
    [&] {
      return in_process_figure(x, "workload b's async phase: 64 callback chains",
                               double(sessions * per), [&](samples& lat) {
                                 return append_loop(
                                   x, sessions, per, width, ref_of,
                                   [](std::size_t, std::size_t k) { return step_delta(k); }, lat,
                                   "b async");
                               });
    },
    conns,
    [&](served& s, const ojson& in) {
      const std::size_t chains = std::max<std::size_t>(1, width / s.clients.size());
      samples create_lat, lat;
      run_loop(
        s.clients, {sessions, 1, chains, 1}, "create_session",
        [&](std::string& params, std::size_t j, std::size_t) { put_create(params, ref_of(j)); },
        [](std::size_t, std::size_t, std::string_view) { return std::string(); }, create_lat,
        x.errors);
      if (x.errors.count != 0)
        return false;
      s.cpu_start();
      auto r = run_loop(
        s.clients, {sessions, per, chains, 1}, "append_event",
        [&](std::string& params, std::size_t j, std::size_t k) {
          put_append(params, ref_of(j), k);
        },
        check_append_version, lat, x.errors);
      double eps =
        report_appends(x, s, r, "append ack through serve (call to answer), 64 chains", lat, in);
      return in.contains("events_per_s") && eps / in["events_per_s"].get<double>() >= 0.7;
    });
  return x.finish(tdesc, ok && x.errors.count == 0);
}

ojson via_c(const config& cfg) {
  run_ctx x(cfg, "c");
  const std::size_t n = scaled(cfg, 10000, 10), full_reads = 200, recent_reads = 1000;
  const std::size_t recent = std::min<std::size_t>(10, n);
  x.describe("one session of N events: get_session through serve, awaited one at a time",
             {{"via", cfg.via},
              {"events", n},
              {"full_reads", full_reads},
              {"recent10_reads", recent_reads},
              {"connections", 1}});
  session_ref ref{"bench-c", "u0", "s0"};
  auto figure = [&] {
    samples load;
    windowed_appends(x, ref, n, std::min(pipeline_window, n), load);
    samples rec, full;
    auto read = [&](std::optional<std::int64_t> num, samples& s, std::size_t times) {
      get_request g;
      g.ref = ref;
      g.num_recent_events = num;
      timed_reads(
        x, g, times, s, [&](get_request r) { return x.eng->get_session_json(std::move(r)); },
        [](std::size_t, const std::string&) {});
    };
    read(std::int64_t(recent), rec, recent_reads);
    read(std::nullopt, full, full_reads);
    ojson in;
    in["of"] = "get_session_json on the engine, awaited one at a time";
    put_latency(in, "recent10_", rec);
    put_latency(in, "full_", full);
    x.snapshot_engine();
    return in;
  };
  auto through_serve = [&](served& s, const ojson& in) {
    if (!create_one(s, ref, x.errors))
      return false;
    samples load;
    auto r = pipelined_appends(s, ref, n, load, x.errors);
    x.out["events_per_s"] = round_to(double(r.answered) / r.seconds, 0);
    x.out["events_per_s_of"] = "loading the session through serve (256 appends in flight)";
    // Each kind's first response is parsed and its events counted; the rest
    // must have the same length (the session does not change).
    auto reads = [&](std::optional<std::size_t> num, std::size_t want, std::size_t times,
                     samples& lat) {
      std::size_t first_size = 0;
      run_loop(
        s.clients, {1, times, 1, 1}, "get_session",
        [&](std::string& params, std::size_t, std::size_t) { put_get(params, ref, num); },
        [&](std::size_t, std::size_t step, std::string_view result) -> std::string {
          if (step > 0)
            return result.size() == first_size ? "" : "the session's text changed between reads";
          first_size = result.size();
          auto res = ojson::parse(result, nullptr, false);
          if (res.is_discarded() || !res.is_object())
            return "not a session: " + excerpt(result);
          if (res.value("version", std::uint64_t{0}) != n || !res.contains("events")
              || res["events"].size() != want)
            return "expected version " + std::to_string(n) + " and " + std::to_string(want)
              + " events: " + excerpt(result);
          return "";
        },
        lat, x.errors);
    };
    samples rec, full;
    reads(recent, recent, recent_reads, rec);
    reads(std::nullopt, n, full_reads, full);
    put_headline_latency(x.out, "get_session num_recent_events=10 through serve (round trip)", rec);
    put_latency(x.out, "recent10_", rec);
    put_latency(x.out, "full_", full);
    x.out["in_process"] = in;
    if (in.contains("recent10_p50_us") && rec.p50() > 0) {
      x.out["ratio_to_in_process"] = round_to(in["recent10_p50_us"].get<double>() / rec.p50(), 3);
      x.out["full_ratio_to_in_process"] = round_to(in["full_p50_us"].get<double>() / full.p50(), 3);
    }
    x.out["ratio_of"] = "in-process p50 / through-serve p50 (1 = no protocol cost)";
    x.out["serve_stats"] = serve_stats(s, x.errors);
    return true;
  };
  in_process_then_serve(x, cfg, {1, 1, [&](std::size_t) { return ref; }}, figure, 1, through_serve);
  auto line = x.finish("none: reported next to the in-process reads", true);
  line["meets_target"] = nullptr;
  return line;
}

// The change feed through serve: one stream watches everything and appends
// one event at a time; each append's request write is timed to its answer
// (ack) and to its change's notification (delivery), whichever comes first.
ojson via_h(const config& cfg) {
  run_ctx x(cfg, "h");
  const std::size_t n = scaled(cfg, 2000, 10);
  x.describe("the change feed through serve: a watch of everything on the stream, then appends "
             "awaited one at a time (request and notification on one stream)",
             {{"via", cfg.via}, {"events", n}, {"connections", 1}});
  const char* tdesc = "p50_us <= 1000 (an append's call to its change's notification read)";
  if (!check_step_text(n, x.errors))
    return x.finish(tdesc, false);
  bool ok = false;
  served s;
  const session_ref ref{"bench-h", "u0", "s0"};
  // The loop's state, touched on the client's I/O thread only (the watch's
  // events and the answers; the first append goes out in a ping's answer),
  // but `done`, which the test thread waits for. Declared before the client
  // goes (stop_serve), which ends the watch with `lost`.
  samples deliver, ack;
  std::size_t sent = 0;
  bool want_change = false, want_answer = false, done = false;
  steady::time_point written;
  std::mutex done_mtx;
  std::condition_variable done_cv;
  std::function<void()> send_next;
  auto finish = [&] {
    std::lock_guard<std::mutex> g(done_mtx);
    done = true;
    done_cv.notify_all();
  };
  // The next append once both its predecessor's answer and change came.
  auto step = [&] {
    if (want_change || want_answer)
      return;
    if (sent < n && x.errors.count == 0)
      send_next();
    else
      finish();
  };
  auto stop = [&](const std::string& why) {
    x.errors.add(why);
    sent = n;
    want_change = false;
  };
  if (start_serve(x, cfg, 1, s) && create_one(s, ref, x.errors)) {
    rpc_client& c = *s.clients.front();
    send_next = [&] {
      std::string params;
      put_append(params, ref, sent);
      want_change = want_answer = true;
      ++sent;
      written = steady::now();
      c.call_raw_async("append_event", params, [&](rpc_raw_reply r) {
        auto now = steady::now();
        if (!r.value)
          stop("append failed: " + failure_of(r));
        else
          ack.us.push_back(us_between(written, now));
        want_answer = false;
        step();
      });
    };
    auto w = c.watch(json{{"scope", "all"}}, [&](const watch_event& ev) {
      auto now = steady::now();
      if (done)
        return;
      if (ev.what != watch_event::kind::changes) {
        stop("the watch ended: "
             + (ev.what == watch_event::kind::lost ? ev.why.message : ev.params.dump()));
        return step();
      }
      if (ev.params["changes"].empty())
        return; // progress
      if (!want_change)
        stop("a change nobody waited for: " + excerpt(ev.params.dump()));
      deliver.us.push_back(us_between(written, now));
      want_change = false;
      step();
    });
    if (!w.value)
      x.errors.add("watch failed: " + w.value.err().message);
    s.cpu_start();
    auto t0 = steady::now();
    if (w.value)
      c.call_async("ping", nullptr, [&](rpc_reply r) {
        if (!r.value) {
          x.errors.add("client: ping: " + r.value.err().message);
          return finish();
        }
        send_next();
      });
    else
      finish();
    {
      std::unique_lock<std::mutex> lock(done_mtx);
      done_cv.wait(lock, [&] { return done; });
    }
    double secs = since(t0);
    x.out["events_per_s"] = round_to(double(ack.us.size()) / secs, 0);
    put_headline_latency(x.out,
                         "delivery: an append's call to its change's notification read "
                         "(ack_: to its answer read; one append at a time)",
                         deliver);
    put_latency(x.out, "ack_", ack);
    s.cpu_stop(x.out, double(ack.us.size()), "event");
    x.out["serve_stats"] = serve_stats(s, x.errors);
    if (deliver.us.size() != n)
      x.errors.add("delivered " + std::to_string(deliver.us.size()) + " of " + std::to_string(n)
                   + " changes");
    ok = !deliver.us.empty() && deliver.p50() <= 1000;
  }
  stop_serve(x, s);
  return x.finish(tdesc, ok && x.errors.count == 0);
}

} // namespace

ojson via_workload(char w, const config& cfg) {
  switch (w) {
    case 'a': return via_a(cfg);
    case 'b': return via_b(cfg);
    case 'h': return via_h(cfg);
    default: return via_c(cfg);
  }
}

} // namespace agentstate::tools::bench
