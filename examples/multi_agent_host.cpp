// SPDX-License-Identifier: Apache-2.0
// examples/multi_agent_host.cpp: an agent host running scripted agents (no
// LLM) on many sessions at once, from a pool of threads. Built with the
// project and run as a CTest smoke test (example_multi_agent_host).
//
// What it demonstrates (docs/semantics.md I1-I3, N1):
//  * one invocation per conversation round (invocation::begin takes the
//    session's lease, inv.end() releases it), in which a user message and four
//    agents take turns: planner -> researcher -> writer -> editor;
//  * each agent's instruction is a template rendered by inv.inject() over the
//    invocation's state: {user:name}, {app:style}, {topic}, {temp:plan}, ...;
//  * output_key (I3) in every scope: the planner's reply goes to temp:plan
//    (seen by the researcher in the same invocation, never stored), the
//    researcher has an output schema (has_schema: its JSON reply is stored
//    parsed under "notes"), the writer's reply is the session key "draft", and
//    the editor's is user:headline, shared by all sessions of the user;
//  * a derived key registered in options: derived:draft_words, the engine's
//    word count of "draft", read back through the state view as "draft_words";
//  * an atomic counter (state().modify) of rounds across all sessions: app:turns.
// Every line it prints is a checked claim; any failed check exits 1.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "agentstate/engine.hpp"
#include "agentstate/invocation.hpp"
#include "example_support.hpp"

using namespace agentstate;

namespace {

const char* usage =
  "usage: multi_agent_host [--dir PATH] [--memory] [--sessions N] [--users N]\n"
  "                        [--rounds N] [--threads N]\n"
  "  --dir PATH     store directory, kept afterwards (default: a temp dir, removed)\n"
  "  --memory       durability::memory (nothing on disk)\n"
  "  --sessions N   sessions (default 40), spread over --users N users (default 8)\n"
  "  --rounds N     invocations per session (default 2)\n"
  "  --threads N    host threads driving the sessions (default 8)\n";

int word_count(const std::string& s) {
  std::istringstream in(s);
  std::string w;
  int n = 0;
  while (in >> w)
    ++n;
  return n;
}

// -- the scripted agents: rendered instruction + state -> reply text ----------------
using agent_fn = std::string (*)(const std::string& instruction, const state& st);

struct agent {
  std::string name;
  std::string instruction; // a template (I2)
  output_key out; // where the reply is recorded (I3)
  agent_fn run;
};

std::string plan(const std::string&, const state& st) {
  return "plan r" + std::to_string(st.get<int>("round", 0)) + ": survey " + st.get("topic", "?")
    + ", keep two facts, write one paragraph";
}
std::string research(const std::string&, const state& st) { // has_schema: JSON text
  std::string topic = st.get("topic", "?");
  json sources = st.get("app:sources", json::array());
  return json{{"plan", st.get("temp:plan", "")},
              {"facts", {topic + " grew last year", topic + " is contested"}},
              {"source", sources.empty() ? json("none") : sources[0]}}
    .dump();
}
std::string write(const std::string& instruction, const state& st) {
  // The rendered instruction starts "Write for <name> ...": greet that reader.
  std::string reader = instruction.substr(10, instruction.find(" about ") - 10);
  std::string text = "Dear " + reader + ", round " + std::to_string(st.get<int>("round", 0))
    + " on " + st.get("topic", "?") + ":";
  for (auto& f : st.get("notes", json::object()).value("facts", json::array()))
    text += " " + f.get<std::string>() + ".";
  return text;
}
std::string edit(const std::string&, const state& st) {
  // "draft_words" misses as a plain key and falls back to derived:draft_words (N1).
  return st.get("topic", "?") + " in " + std::to_string(st.get<int>("draft_words", 0)) + " words ("
    + st.get("session:id", "?") + ")";
}

const std::vector<agent> agents = {
  {"planner",
   "You plan for {user:name} in the {app:style} style. Topic: {topic}. "
   "Round {round}. Earlier plan: {temp:plan?}",
   {"temp:plan"},
   plan},
  {"researcher",
   "Research for {user:name}. Plan: {temp:plan}. Sources: {app:sources}",
   {"notes", /*has_schema=*/true},
   research},
  {"writer", "Write for {user:name} about {topic} from these notes: {notes}", {"draft"}, write},
  {"editor", "Headline for {user:name}, {app:style} style: {draft}", {"user:headline"}, edit},
};
constexpr int events_per_round = 5; // the user's message + one reply per agent

event reply(const std::string& author, const std::string& role, const std::string& text) {
  event ev;
  ev.author = author;
  ev.content = json{{"role", role}, {"parts", json::array({json{{"text", text}}})}};
  return ev;
}

} // namespace

int main(int argc, char** argv) {
  std::string dir;
  bool memory = false;
  int sessions = 40, users = 8, rounds = 2, threads = 8;
  if (auto stop = examples::parse_args(argc, argv, "multi_agent_host", usage, dir, memory,
                                       {{"--sessions", &sessions},
                                        {"--users", &users},
                                        {"--rounds", &rounds},
                                        {"--threads", &threads}}))
    return *stop;
  users = std::min(users, sessions);

  examples::example_store store("multi_agent_host", dir, memory);
  if (!store.ok())
    return 1;
  options opts = store.opts();
  opts.derived.push_back(derived_key{"draft_words", {"draft"}, [](const json& in) -> json {
                                       return word_count(in.value("draft", ""));
                                     }});
  auto opened = engine::open(opts);
  if (!opened) {
    std::fprintf(stderr, "multi_agent_host: open: %s\n", to_string(opened.err()).c_str());
    return 1;
  }
  engine& eng = **opened;
  // A fresh app name per run, so a kept --dir can be reused.
  const std::string app = examples::fresh_app_name("newsroom");
  const std::vector<std::string> names = {"Ada",   "Brian",  "Chen",  "Dana",
                                          "Emeka", "Fatima", "Goran", "Hana"};
  const std::vector<std::string> topics = {"solar power", "rail freight", "coral reefs",
                                           "chess engines", "sourdough"};
  auto user_of = [&](int s) { return "u" + std::to_string(s % users); };
  auto ref_of = [&](int s) { return session_ref{app, user_of(s), "s" + std::to_string(s)}; };

  std::mutex mu;
  std::vector<std::string> errors; // guarded by mu
  auto fail = [&](int s, const std::string& what, const error& e) {
    std::lock_guard<std::mutex> lock(mu);
    errors.push_back("s" + std::to_string(s) + " " + what + ": " + to_string(e));
  };

  // One host thread runs every round of a session, then takes the next session.
  std::atomic<int> next{0};
  auto worker = [&] {
    for (int s; (s = next.fetch_add(1)) < sessions;) {
      session_ref ref = ref_of(s);
      json init = {{"topic", topics[s % topics.size()]},
                   {"session:id", ref.session_id},
                   {"user:name", names[(s % users) % names.size()]},
                   {"app:style", "plain"},
                   {"app:sources", {"agency wire", "archive"}}};
      if (auto c = eng.create_session({app, ref.user_id, ref.session_id, init}); !c)
        return fail(s, "create", c.err());
      for (int r = 1; r <= rounds; ++r) {
        auto inv = invocation::begin(eng, ref); // waits for the session's lease
        if (!inv)
          return fail(s, "begin", inv.err());
        event msg = reply("user", "user", "Please write about " + topics[s % topics.size()]);
        msg.actions.state_delta = {{"round", r}};
        if (auto a = inv->append(msg); !a)
          return fail(s, "append", a.err());
        for (auto& ag : agents) {
          auto instruction = inv->inject(ag.instruction);
          if (!instruction)
            return fail(s, ag.name + " template", instruction.err());
          if (ag.name == "editor") { // carried by the editor's event, resolved at commit
            auto m =
              inv->state().modify("app:turns", 0, [](const json& n) { return n.get<int>() + 1; });
            if (!m)
              return fail(s, "modify", m.err());
          }
          event ev = reply(ag.name, "model", ag.run(*instruction, inv->state()));
          if (auto a = inv->append_final(ev, ag.out); !a)
            return fail(s, ag.name + " append", a.err());
        }
        if (auto e = inv->end(); !e)
          return fail(s, "end", e.err());
      }
    }
  };
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back(worker);
  for (auto& t : pool)
    t.join();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // -- check what the summary claims ------------------------------------------------
  examples::checklist check;
  for (auto& e : errors)
    std::fprintf(stderr, "multi_agent_host: %s\n", e.c_str());
  check(errors.empty(),
        std::to_string(sessions) + " sessions x " + std::to_string(rounds) + " rounds on "
          + std::to_string(threads) + " threads, no errors");
  int bad_count = 0, temp_stored = 0, bad_plan = 0, bad_words = 0, bad_reader = 0, bad_head = 0;
  std::vector<std::string> headline_of_user(users);
  std::vector<int> words_of(sessions, -1);
  for (int s = 0; s < sessions; ++s) {
    get_request g;
    g.ref = ref_of(s);
    auto got = eng.get_session(g);
    if (!got || !*got) {
      ++bad_count;
      continue;
    }
    const session& ss = **got;
    bad_count += ss.version != std::uint64_t(rounds * events_per_round)
      || ss.events.size() != std::size_t(rounds * events_per_round);
    for (auto& ev : ss.events)
      for (auto it = ev.actions.state_delta.begin(); it != ev.actions.state_delta.end(); ++it)
        temp_stored += it.key().rfind("temp:", 0) == 0;
    temp_stored += ss.state.contains("temp:plan");
    // The researcher saw the planner's temp: reply of the last round.
    bad_plan += ss.state.value("notes", json::object())
                  .value("plan", "")
                  .rfind("plan r" + std::to_string(rounds) + ":", 0)
      != 0;
    std::string draft = ss.state.value("draft", "");
    words_of[s] = ss.state.value("derived:draft_words", -1);
    bad_words += word_count(draft) == 0 || words_of[s] != word_count(draft);
    bad_reader += draft.rfind("Dear " + names[(s % users) % names.size()] + ",", 0) != 0;
    // Every session of a user sees the same user:headline.
    std::string head = ss.state.value("user:headline", "");
    std::string& seen = headline_of_user[s % users];
    bad_head += head.empty() || (!seen.empty() && seen != head);
    seen = head;
  }
  int events = sessions * rounds * events_per_round;
  check(bad_count == 0,
        "every session holds " + std::to_string(rounds * events_per_round) + " events ("
          + std::to_string(events) + " in all, " + std::to_string(int(events / secs))
          + " events/s)");
  check(temp_stored == 0, "temp:plan never stored (in no event delta, in no session state)");
  check(bad_plan == 0, "each session's notes (has_schema JSON) carry the last round's temp:plan");
  check(bad_reader == 0, "each draft greets the {user:name} its template rendered");
  check(bad_words == 0, "derived:draft_words = word count of every session's draft");
  int foreign = 0;
  for (int u = 0; u < users; ++u) {
    auto us = eng.get_user_state(app, "u" + std::to_string(u));
    std::string head = us ? us->value("headline", "") : "";
    // The headline names the session that wrote it last: one of this user's.
    auto open = head.rfind("(s"), close = head.rfind(')');
    int writer = open == std::string::npos ? -1 : std::atoi(head.c_str() + open + 2);
    foreign += head != headline_of_user[u] || close != head.size() - 1 || writer < 0
      || writer >= sessions || writer % users != u
      || head.find(" in " + std::to_string(words_of[writer]) + " words") == std::string::npos;
  }
  check(bad_head == 0 && foreign == 0,
        std::to_string(users)
          + " users: user:headline (with its draft's derived word count) "
            "shared by all of a user's sessions");
  auto appstate = eng.get_app_state(app);
  check(appstate && appstate->value("turns", 0) == sessions * rounds,
        "app:turns = " + std::to_string(sessions * rounds) + " (atomic modify, no lost update)");
  if (auto c = eng.close(); !c)
    check(false, "close: " + to_string(c.err()));
  return examples::report("multi_agent_host", app, store, check.failed);
}
