// SPDX-License-Identifier: Apache-2.0
// agentstate.node: the engine inside the node process, for @agentstate/adk's in-process
// mode (src/inprocess.js). One `Engine` object per open store: an engine and one
// protocol stream (protocol/rpc_session.hpp) on it, so that every method, its checks,
// its ordering and its errors are exactly those of `agentstate serve`
// (docs/protocol.md), without a process or a pipe between them.
//
// Contract (seen from JavaScript):
//   new Engine(options, onReady)  starts opening the store on a thread of its own and
//       returns at once. options: { store?: DIR, memory?: true, durability?: 'sync' |
//       'nosync', threads?, spinWaitUs?, maxStoreBytes?, idleTimeoutMs?, sessionTtlMs?,
//       refreshTtl?, changeRetention?: { maxEntries?, maxAgeMs? }, limits?: {
//       maxEventBytes?, maxValueBytes?, maxStateBytes?, maxJsonDepth?, maxResponseBytes? }
//       }, checked by the caller (a value of the wrong type throws TypeError here).
//   submit(lines)  hands JSON-RPC request lines (one string, lines separated by '\n') to
//       the stream; never blocks (they queue for the stream's thread, which hands them in
//       in order, and is woken at most once per submit).
//   take()  -> [lines, events]: the response (and notification) lines and the lifecycle
//       events ({ type: 'open' | 'closed', kind?, message? }; kind set on failure)
//       produced since the last take(). onReady() is called, on the JavaScript thread,
//       once after each time something arrives when nothing was waiting: one call per
//       batch, however many completions it holds.
//   close()  stops taking lines; the stream's thread then answers every request handed
//       in, ends the stream's watches, closes the engine (which syncs and releases the
//       store) and reports { type: 'closed' } as the last event. Idempotent.
//   ref() / unref()  whether waiting for the next batch keeps node's event loop alive
//       (unreferenced at first). Not after the 'closed' event.
// A process that exits with an engine still open closes it from an environment cleanup
// hook (answers still owed are dropped; what was acknowledged is in the store).
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <napi.h>

#include "agentstate/engine.hpp"
#include "protocol/rpc_session.hpp"

namespace {

using namespace agentstate;

/// What the stream's thread hands to JavaScript: lines and lifecycle events,
/// delivered in batches through one thread-safe function.
struct outbox {
  struct event {
    std::string type; ///< "open" or "closed"
    std::string kind; ///< empty: success
    std::string message;
  };

  std::mutex mtx;
  std::vector<std::string> lines;
  std::vector<event> events;
  bool signalled = false; ///< onReady is queued and take() has not run since
  bool released = false; ///< the thread-safe function is released: nothing more
  Napi::ThreadSafeFunction ready;

  void push_line(std::string line) {
    std::lock_guard<std::mutex> g(mtx);
    lines.push_back(std::move(line));
    signal_locked();
  }

  void push_event(event e) {
    std::lock_guard<std::mutex> g(mtx);
    events.push_back(std::move(e));
    signal_locked();
  }

  /// The last event: pushed, then the thread-safe function is released (what
  /// was queued before is still delivered).
  void push_last(event e) {
    std::lock_guard<std::mutex> g(mtx);
    events.push_back(std::move(e));
    signal_locked();
    if (!released) {
      released = true;
      ready.Release();
    }
  }

  void signal_locked() {
    if (signalled || released)
      return;
    // The queue is unbounded: a non-blocking call fails only while the
    // environment is being torn down, and then nobody is left to answer.
    if (ready.NonBlockingCall() == napi_ok)
      signalled = true;
  }
};

/// An engine and its stream, shared by the JavaScript object and the
/// stream's thread.
struct state {
  options opts;
  std::shared_ptr<outbox> out = std::make_shared<outbox>();
  std::mutex mtx;
  std::condition_variable cv;
  std::deque<std::string> in; ///< lines not yet handed in
  bool closing = false;
  bool waiting = false; ///< the thread waits on cv
  std::thread thread;
  napi_env env = nullptr;
  bool hooked = false; ///< the environment cleanup hook is registered

  void submit(const std::string& lines) {
    std::lock_guard<std::mutex> g(mtx);
    if (closing)
      return;
    std::size_t start = 0;
    while (start <= lines.size()) {
      auto end = lines.find('\n', start);
      if (end == std::string::npos)
        end = lines.size();
      if (end > start)
        in.emplace_back(lines, start, end - start);
      start = end + 1;
    }
    if (waiting)
      cv.notify_one();
  }

  void close() {
    std::lock_guard<std::mutex> g(mtx);
    closing = true;
    cv.notify_one();
  }

  /// The stream's thread: open, hand lines in until closing, drain, close.
  void run() {
    auto opened = engine::open(opts);
    if (!opened) {
      out->push_event({"open", to_string(opened.code()), opened.err().message});
      wait_for_close();
      out->push_last({"closed", "", ""});
      return;
    }
    std::unique_ptr<engine> eng = std::move(*opened);
    out->push_event({"open", "", ""});
    {
      protocol::rpc_config cfg;
      cfg.max_line_depth = opts.limits.max_json_depth + 8;
      auto sink = out;
      protocol::rpc_session rpc(
        *eng, [sink](std::string line) { sink->push_line(std::move(line)); }, std::move(cfg));
      std::deque<std::string> batch;
      for (;;) {
        {
          std::unique_lock<std::mutex> g(mtx);
          waiting = true;
          cv.wait(g, [&] { return closing || !in.empty(); });
          waiting = false;
          if (in.empty())
            break;
          batch.swap(in);
        }
        for (auto& line : batch)
          rpc.handle_line(line);
        batch.clear();
      }
      rpc.end_watches();
      rpc.drain();
    }
    auto closed = eng->close();
    eng.reset();
    if (closed)
      out->push_last({"closed", "", ""});
    else
      out->push_last({"closed", to_string(closed.code()), closed.err().message});
  }

  void wait_for_close() {
    std::unique_lock<std::mutex> g(mtx);
    cv.wait(g, [&] { return closing; });
    in.clear();
  }

  /// Closes and waits for the thread (the environment is going away).
  static void cleanup(void* arg) {
    auto* self = static_cast<state*>(arg);
    self->hooked = false;
    self->close();
    if (self->thread.joinable())
      self->thread.join();
  }
};

// -- options -------------------------------------------------------------------

std::uint64_t count_of(const Napi::Object& o, const char* name, std::uint64_t fallback) {
  auto v = o.Get(name);
  if (v.IsUndefined())
    return fallback;
  if (!v.IsNumber())
    throw Napi::TypeError::New(o.Env(), std::string(name) + " must be a number");
  double d = v.As<Napi::Number>().DoubleValue();
  if (!(d >= 0) || d > 9007199254740991.0)
    throw Napi::TypeError::New(o.Env(), std::string(name) + " must be a count");
  return static_cast<std::uint64_t>(d);
}

options options_of(const Napi::Object& o) {
  options opts;
  auto env = o.Env();
  auto store = o.Get("store");
  auto memory = o.Get("memory");
  if (store.IsString()) {
    opts.dir = store.As<Napi::String>().Utf8Value();
  } else if (memory.IsBoolean() && memory.As<Napi::Boolean>().Value()) {
    opts.mode = durability::memory;
  } else {
    throw Napi::TypeError::New(env, "give store (a directory) or memory: true");
  }
  auto mode = o.Get("durability");
  if (!mode.IsUndefined()) {
    auto m = mode.ToString().Utf8Value();
    if (m == "nosync")
      opts.mode = opts.mode == durability::memory ? durability::memory : durability::nosync;
    else if (m != "sync")
      throw Napi::TypeError::New(env, "durability must be 'sync' or 'nosync'");
  }
  opts.threads = static_cast<std::size_t>(count_of(o, "threads", opts.threads));
  opts.spin_wait = std::chrono::microseconds(
    count_of(o, "spinWaitUs", static_cast<std::uint64_t>(opts.spin_wait.count())));
  opts.max_store_bytes = count_of(o, "maxStoreBytes", opts.max_store_bytes);
  opts.idle_timeout = std::chrono::milliseconds(
    count_of(o, "idleTimeoutMs", static_cast<std::uint64_t>(opts.idle_timeout.count())));
  opts.default_session_ttl = std::chrono::milliseconds(
    count_of(o, "sessionTtlMs", static_cast<std::uint64_t>(opts.default_session_ttl.count())));
  auto refresh = o.Get("refreshTtl");
  if (!refresh.IsUndefined())
    opts.refresh_ttl_on_append = refresh.ToBoolean().Value();
  auto retention = o.Get("changeRetention");
  if (retention.IsObject()) {
    auto r = retention.As<Napi::Object>();
    opts.change_retention.max_entries =
      count_of(r, "maxEntries", opts.change_retention.max_entries);
    auto age_ms = count_of(
      r, "maxAgeMs", static_cast<std::uint64_t>(opts.change_retention.max_age.count()) * 1000);
    opts.change_retention.max_age = std::chrono::seconds(age_ms / 1000);
  }
  auto lim = o.Get("limits");
  if (lim.IsObject()) {
    auto l = lim.As<Napi::Object>();
    auto& x = opts.limits;
    x.max_event_bytes = static_cast<std::size_t>(count_of(l, "maxEventBytes", x.max_event_bytes));
    x.max_value_bytes = static_cast<std::size_t>(count_of(l, "maxValueBytes", x.max_value_bytes));
    x.max_state_bytes = static_cast<std::size_t>(count_of(l, "maxStateBytes", x.max_state_bytes));
    x.max_json_depth = static_cast<std::size_t>(count_of(l, "maxJsonDepth", x.max_json_depth));
    x.max_response_bytes =
      static_cast<std::size_t>(count_of(l, "maxResponseBytes", x.max_response_bytes));
  }
  return opts;
}

// -- the JavaScript class ----------------------------------------------------------

class Engine : public Napi::ObjectWrap<Engine> {
public:
  static Napi::Function define(Napi::Env env) {
    return DefineClass(
      env, "Engine",
      {InstanceMethod<&Engine::submit>("submit"), InstanceMethod<&Engine::take>("take"),
       InstanceMethod<&Engine::close>("close"), InstanceMethod<&Engine::ref>("ref"),
       InstanceMethod<&Engine::unref>("unref")});
  }

  Engine(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Engine>(info) {
    auto env = info.Env();
    if (info.Length() < 2 || !info[0].IsObject() || !info[1].IsFunction())
      throw Napi::TypeError::New(env, "new Engine(options, onReady)");
    s_ = std::make_shared<state>();
    s_->opts = options_of(info[0].As<Napi::Object>());
    s_->env = env;
    s_->out->ready =
      Napi::ThreadSafeFunction::New(env, info[1].As<Napi::Function>(), "agentstate engine", 0, 1);
    s_->out->ready.Unref(env);
    // Registered after the thread-safe function, so it runs before that
    // function's own teardown (cleanup hooks run in reverse order).
    napi_add_env_cleanup_hook(env, &state::cleanup, s_.get());
    s_->hooked = true;
    auto s = s_;
    s_->thread = std::thread([s] { s->run(); });
  }

  ~Engine() override {
    if (!s_)
      return;
    if (s_->hooked) {
      napi_remove_env_cleanup_hook(s_->env, &state::cleanup, s_.get());
      s_->hooked = false;
    }
    s_->close();
    if (s_->thread.joinable())
      s_->thread.join();
  }

private:
  Napi::Value submit(const Napi::CallbackInfo& info) {
    if (info.Length() < 1 || !info[0].IsString())
      throw Napi::TypeError::New(info.Env(), "submit(lines: string)");
    s_->submit(info[0].As<Napi::String>().Utf8Value());
    return info.Env().Undefined();
  }

  Napi::Value take(const Napi::CallbackInfo& info) {
    auto env = info.Env();
    std::vector<std::string> lines;
    std::vector<outbox::event> events;
    {
      auto& o = *s_->out;
      std::lock_guard<std::mutex> g(o.mtx);
      lines.swap(o.lines);
      events.swap(o.events);
      o.signalled = false;
    }
    auto js_lines = Napi::Array::New(env, lines.size());
    for (std::size_t i = 0; i < lines.size(); ++i)
      js_lines.Set(static_cast<std::uint32_t>(i), Napi::String::New(env, lines[i]));
    auto js_events = Napi::Array::New(env, events.size());
    for (std::size_t i = 0; i < events.size(); ++i) {
      auto e = Napi::Object::New(env);
      e.Set("type", events[i].type);
      if (!events[i].kind.empty()) {
        e.Set("kind", events[i].kind);
        e.Set("message", events[i].message);
      }
      js_events.Set(static_cast<std::uint32_t>(i), e);
    }
    auto both = Napi::Array::New(env, 2);
    both.Set(0u, js_lines);
    both.Set(1u, js_events);
    return both;
  }

  // The cleanup hook stays until the destructor: a process that exits while
  // the thread is still closing waits for it there.
  Napi::Value close(const Napi::CallbackInfo& info) {
    s_->close();
    return info.Env().Undefined();
  }

  Napi::Value ref(const Napi::CallbackInfo& info) {
    s_->out->ready.Ref(info.Env());
    return info.Env().Undefined();
  }

  Napi::Value unref(const Napi::CallbackInfo& info) {
    s_->out->ready.Unref(info.Env());
    return info.Env().Undefined();
  }

  std::shared_ptr<state> s_;
};

Napi::Object init(Napi::Env env, Napi::Object exports) {
  exports.Set("Engine", Engine::define(env));
  return exports;
}

} // namespace

NODE_API_MODULE(agentstate, init)
