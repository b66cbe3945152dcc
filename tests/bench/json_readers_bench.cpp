// SPDX-License-Identifier: Apache-2.0
// json_readers_bench: the two hand-written JSON readers against simdjson and
// nlohmann's parsers on the same inputs, in one run:
//  * the protocol's request reader (protocol/json_reader.cpp:
//    read_json_fast, and decode_request, which reads a line's known members
//    straight into the request) on request lines as `agentstate bench --via`
//    and an ADK client write them;
//  * the stored event text reader (model/stored_text_reader.cpp:
//    parse_stored_text, and decode_event_text into the event) on texts
//    encode_event_text writes.
// Each reader builds the same json value (nlohmann DOM parse, nlohmann SAX
// with a handler building the value, simdjson's DOM converted to json) or
// the same event (event_from_json of that value), which the bench checks
// before timing; simdjson's parse alone is listed too, as the floor of any
// reader built on it. simdjson reads a padded copy of the text made once
// (a server would keep its line buffers padded); the others read the text.
//
// usage: json_readers_bench [--min-ms N] [--no-instructions]
// Prints one JSON object: per input and reader, ns/op (the best of 5 timed
// rounds of at least N ms each, default 40) and, when valgrind is on PATH
// and the build found valgrind/callgrind.h, instructions/op (the bench runs
// itself under callgrind, counting a fixed number of calls per case).
#include <simdjson.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>

#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define JSON_READERS_BENCH_CALLGRIND 1
#else
#define JSON_READERS_BENCH_CALLGRIND 0
#endif

#include "agentstate/json.hpp"
#include "agentstate/types.hpp"
#include "model/event_text.hpp"
#include "protocol/json_reader.hpp"
#include "protocol/request.hpp"

using namespace agentstate;

namespace {

constexpr std::size_t max_depth = 64;

// -- inputs ---------------------------------------------------------------------------

struct input {
  std::string name;
  std::string kind; // "request" or "stored"
  std::string text;
};

// An ADK model event's content: a text part with escapes and non-ASCII
// characters, and a function call.
json adk_content() {
  return json{
    {"role", "model"},
    {"parts",
     {{{"text",
        "Here is the forecast you asked for:\n\"Sunny\", 24\xc2\xb0"
        "C in M\xc3\xbcnchen; tomorrow rain. "
          + std::string(240, 'x')}},
      {{"function_call",
        {{"id", "call-7"},
         {"name", "get_weather"},
         {"args", {{"city", "M\xc3\xbcnchen"}, {"days", 3}, {"units", "metric"}}}}}}}},
  };
}

json wide_state() {
  json s = json::object();
  for (int i = 0; i < 20; ++i)
    s["key_" + std::to_string(i)] = i % 3 == 0 ? json(i * 1.25)
      : i % 3 == 1                             ? json("value " + std::to_string(i))
                                               : json(i);
  return s;
}

event bench_event(std::size_t k) {
  event ev;
  ev.id = "0b6f3c3e-8a4e-4d1f-9a53-1c2d3e4f5a6b";
  ev.invocation_id = "inv-s42";
  ev.author = "bench";
  ev.timestamp = 1764250000.123456;
  ev.actions.state_delta = {
    {"score", static_cast<double>(k) / 2}, {"status", "s" + std::to_string(k % 7)}, {"step", k}};
  return ev;
}

std::string request_line(const std::string& method, const json& params) {
  // What a client's json.dumps / JSON.stringify writes: the envelope's
  // members in the order it built them.
  return R"({"jsonrpc":"2.0","id":1042,"method":")" + method + R"(","params":)" + params.dump()
    + "}";
}

std::vector<input> make_inputs() {
  std::vector<input> in;
  // As tools/bench/via_workloads.cpp writes them (put_append, put_get).
  in.push_back({"request/append_event (bench)", "request",
                R"({"jsonrpc":"2.0","id":1042,"method":"append_event","params":{)"
                R"("app_name":"bench","user_id":"u7","session_id":"s42","event":{)"
                R"("author":"bench","invocation_id":"inv-s42","actions":{"state_delta":)"
                R"({"score":21.5,"status":"s3","step":43}}}}})"});
  in.push_back(
    {"request/get_session", "request",
     R"({"jsonrpc":"2.0","id":1043,"method":"get_session","params":{)"
     R"("app_name":"bench","user_id":"u7","session_id":"s42","num_recent_events":20}})"});
  json adk_event = {{"id", "e-77"},
                    {"invocation_id", "inv-9"},
                    {"author", "weather_agent"},
                    {"timestamp", 1764250000.5},
                    {"content", adk_content()},
                    {"actions", {{"state_delta", {{"last_city", "M\xc3\xbcnchen"}}}}}};
  in.push_back(
    {"request/append_event (ADK content)", "request",
     request_line(
       "append_event",
       {{"app_name", "weather"}, {"user_id", "u1"}, {"session_id", "s1"}, {"event", adk_event}})});
  in.push_back(
    {"request/append_event (20-key state_delta)", "request",
     request_line(
       "append_event",
       {{"app_name", "bench"},
        {"user_id", "u7"},
        {"session_id", "s42"},
        {"event", {{"author", "bench"}, {"actions", {{"state_delta", wide_state()}}}}}})});
  // Stored texts as encode_event_text writes them.
  in.push_back({"stored/event (bench)", "stored", *model::encode_event_text(bench_event(43))});
  auto adk = bench_event(1);
  adk.content = adk_content();
  in.push_back({"stored/event (ADK content)", "stored", *model::encode_event_text(adk)});
  auto wide = bench_event(2);
  wide.actions.state_delta = wide_state();
  in.push_back({"stored/event (20-key state_delta)", "stored", *model::encode_event_text(wide)});
  return in;
}

// -- the readers ----------------------------------------------------------------------

// Builds the json value from nlohmann's SAX events, as its DOM parser does.
class dom_builder : public json::json_sax_t {
public:
  json root;

  bool null() override { return put(nullptr); }
  bool boolean(bool v) override { return put(v); }
  bool number_integer(number_integer_t v) override { return put(v); }
  bool number_unsigned(number_unsigned_t v) override { return put(v); }
  bool number_float(number_float_t v, const string_t&) override { return put(v); }
  bool string(string_t& v) override { return put(std::move(v)); }
  bool binary(binary_t& v) override { return put(json::binary(std::move(v))); }
  bool start_object(std::size_t) override {
    stack_.push_back(place(json::object()));
    return true;
  }
  bool key(string_t& k) override {
    slot_ = &stack_.back()->get_ref<json::object_t&>()[k];
    return true;
  }
  bool end_object() override {
    stack_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    stack_.push_back(place(json::array()));
    return true;
  }
  bool end_array() override {
    stack_.pop_back();
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const json::exception&) override {
    return false;
  }

private:
  template <class V>
  bool put(V&& v) {
    place(json(std::forward<V>(v)));
    return true;
  }
  json* place(json&& v) {
    if (stack_.empty()) {
      root = std::move(v);
      return &root;
    }
    if (stack_.back()->is_array()) {
      auto& a = stack_.back()->get_ref<json::array_t&>();
      a.push_back(std::move(v));
      return &a.back();
    }
    *slot_ = std::move(v);
    return slot_;
  }

  std::vector<json*> stack_;
  json* slot_ = nullptr;
};

json from_simdjson(simdjson::dom::element e) {
  using t = simdjson::dom::element_type;
  switch (e.type()) {
    case t::ARRAY: {
      json a = json::array();
      const simdjson::dom::array items = e.get_array().value_unsafe();
      for (auto item : items)
        a.push_back(from_simdjson(item));
      return a;
    }
    case t::OBJECT: {
      json o = json::object();
      auto& members = o.get_ref<json::object_t&>();
      const simdjson::dom::object fields = e.get_object().value_unsafe();
      for (auto field : fields)
        members[std::string(field.key)] = from_simdjson(field.value);
      return o;
    }
    case t::INT64: return e.get_int64().value_unsafe();
    case t::UINT64: return e.get_uint64().value_unsafe();
    case t::DOUBLE: return e.get_double().value_unsafe();
    case t::STRING: return std::string(e.get_string().value_unsafe());
    case t::BOOL: return e.get_bool().value_unsafe();
    case t::NULL_VALUE: return nullptr;
  }
  return nullptr;
}

struct reader {
  std::string name;
  std::string kind; // "request", "stored" or "" (both)
  // Reads the text; returns a size the caller sums (so nothing is elided)
  // or 0 when the reader refused the text. With `built` set, also stores
  // there what it built (an event as to_json(event)), for the check that
  // every reader builds the same.
  std::function<std::size_t(const std::string&, const simdjson::padded_string&, json* built)> run;
};

std::size_t keep(json&& j, json* built) {
  const auto n = j.size();
  if (built)
    *built = std::move(j);
  return n;
}

std::size_t keep(const event& ev, json* built) {
  if (built)
    *built = to_json(ev);
  return ev.id.size() + 1;
}

std::size_t keep(const result<event>& ev, json* built) {
  return ev ? keep(*ev, built) : 0;
}

std::vector<reader> make_readers() {
  static simdjson::dom::parser parser; // reused, as a server would
  using padded = simdjson::padded_string;
  std::vector<reader> r;
  r.push_back({"hand-written: read_json_fast -> json", "request",
               [](const std::string& s, const padded&, json* built) -> std::size_t {
                 json j;
                 return protocol::detail::read_json_fast(s, max_depth, j)
                   ? keep(std::move(j), built)
                   : 0;
               }});
  r.push_back({"hand-written: decode_request (members into the request)", "request",
               [](const std::string& s, const padded&, json* built) -> std::size_t {
                 auto d = protocol::detail::decode_request(s, max_depth);
                 if (!d.run || d.refusal)
                   return 0;
                 if (built) // not a json value: compared by what it reads, the same line
                   *built = json::parse(s);
                 return 1;
               }});
  r.push_back({"hand-written: parse_stored_text -> json", "stored",
               [](const std::string& s, const padded&, json* built) -> std::size_t {
                 json j;
                 return model::parse_stored_text(s, j) ? keep(std::move(j), built) : 0;
               }});
  r.push_back({"hand-written: decode_event_text -> event", "stored",
               [](const std::string& s, const padded&, json* built) -> std::size_t {
                 event ev;
                 return model::decode_event_text(s, ev) ? keep(ev, built) : 0;
               }});
  r.push_back({"nlohmann DOM: json::parse -> json", "",
               [](const std::string& s, const padded&, json* built) -> std::size_t {
                 return keep(json::parse(s), built);
               }});
  r.push_back({"nlohmann DOM: parse_json (depth callback) -> json", "",
               [](const std::string& s, const padded&, json* built) -> std::size_t {
                 auto j = parse_json(s, max_depth);
                 return j ? keep(std::move(*j), built) : 0;
               }});
  r.push_back({"nlohmann SAX: sax_parse, handler builds json", "",
               [](const std::string& s, const padded&, json* built) -> std::size_t {
                 dom_builder b;
                 return json::sax_parse(s, &b) ? keep(std::move(b.root), built) : 0;
               }});
  r.push_back({"simdjson DOM: parse only (no json built)", "",
               [](const std::string& s, const padded& p, json* built) -> std::size_t {
                 auto doc = parser.parse(p);
                 if (doc.error())
                   return 0;
                 if (built) // builds nothing: compared as the conversion below
                   *built = from_simdjson(doc.value_unsafe());
                 return 1;
               }});
  r.push_back({"simdjson DOM: parse, converted to json", "",
               [](const std::string&, const padded& p, json* built) -> std::size_t {
                 auto doc = parser.parse(p);
                 return doc.error() ? 0 : keep(from_simdjson(doc.value_unsafe()), built);
               }});
  r.push_back({"nlohmann DOM -> event_from_json -> event", "stored",
               [](const std::string& s, const padded&, json* built) -> std::size_t {
                 return keep(event_from_json(json::parse(s)), built);
               }});
  r.push_back({"simdjson DOM -> json -> event_from_json -> event", "stored",
               [](const std::string&, const padded& p, json* built) -> std::size_t {
                 auto doc = parser.parse(p);
                 return doc.error()
                   ? 0
                   : keep(event_from_json(from_simdjson(doc.value_unsafe())), built);
               }});
  return r;
}

struct bench_case {
  const input* in;
  const reader* rd;
  simdjson::padded_string padded;
};

// -- measuring ------------------------------------------------------------------------

volatile std::size_t sink;

double ns_per_op(const bench_case& c, double min_ms) {
  using clock = std::chrono::steady_clock;
  std::size_t n = 1;
  double best = 1e300;
  for (int round = 0; round < 5;) {
    const auto t0 = clock::now();
    std::size_t total = 0;
    for (std::size_t i = 0; i < n; ++i)
      total += c.rd->run(c.in->text, c.padded, nullptr);
    const double ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
    sink = total;
    if (ms < min_ms) { // too short to time: more calls, and this round does not count
      n *= 2;
      continue;
    }
    best = std::min(best, ms * 1e6 / static_cast<double>(n));
    ++round;
  }
  return best;
}

constexpr int callgrind_calls = 200;

// Under callgrind (--callgrind): each case's calls, after a warm-up, with
// collection on, dumped under the case's index.
[[maybe_unused]] void count_under_callgrind(std::vector<bench_case>& cases) {
#if JSON_READERS_BENCH_CALLGRIND
  for (std::size_t k = 0; k < cases.size(); ++k) {
    const auto& c = cases[k];
    std::size_t total = 0;
    for (int i = 0; i < 10; ++i)
      total += c.rd->run(c.in->text, c.padded, nullptr);
    CALLGRIND_ZERO_STATS;
    CALLGRIND_TOGGLE_COLLECT;
    for (int i = 0; i < callgrind_calls; ++i)
      total += c.rd->run(c.in->text, c.padded, nullptr);
    CALLGRIND_TOGGLE_COLLECT;
    sink = total;
    CALLGRIND_DUMP_STATS_AT(("case " + std::to_string(k)).c_str());
  }
#else
  (void)cases;
#endif
}

// Runs this program under callgrind and reads the per-case dumps: case
// index -> instructions per call. Empty when valgrind is missing or fails.
std::map<std::size_t, double> instructions_per_op(const char* self) {
  std::map<std::size_t, double> out;
  if (!JSON_READERS_BENCH_CALLGRIND || std::system("valgrind --version >/dev/null 2>&1") != 0)
    return out;
  char dir_template[] = "/tmp/json_readers_bench.XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (!dir)
    return out;
  const std::string prefix = std::string(dir) + "/cg";
  const std::string cmd = "valgrind --tool=callgrind --collect-atstart=no --callgrind-out-file="
    + prefix + " '" + self + "' --callgrind >/dev/null 2>&1";
  if (std::system(cmd.c_str()) == 0) {
    // Dump n (from 1) is written to <prefix>.<n>, in case order.
    for (std::size_t n = 1;; ++n) {
      std::ifstream f(prefix + "." + std::to_string(n));
      if (!f)
        break;
      std::string line, desc;
      double total = -1;
      while (std::getline(f, line)) {
        if (line.rfind("desc: Trigger: Client Request: case ", 0) == 0)
          desc = line.substr(std::string("desc: Trigger: Client Request: case ").size());
        else if (line.rfind("totals: ", 0) == 0 || line.rfind("summary: ", 0) == 0)
          total = std::strtod(line.c_str() + line.find(' ') + 1, nullptr);
      }
      if (!desc.empty() && total >= 0)
        out[std::stoul(desc)] = total / callgrind_calls;
    }
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  return out;
}

std::string quoted(const std::string& s) {
  return json(s).dump();
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0)
      return line.substr(line.find(':') + 2);
  return "unknown";
}

} // namespace

int main(int argc, char** argv) {
  double min_ms = 40;
  bool callgrind_child = false, instructions = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--callgrind")
      callgrind_child = true;
    else if (a == "--no-instructions")
      instructions = false;
    else if (a == "--min-ms" && i + 1 < argc)
      min_ms = std::atof(argv[++i]);
    else {
      std::fprintf(stderr, "usage: json_readers_bench [--min-ms N] [--no-instructions]\n");
      return 2;
    }
  }
  const auto inputs = make_inputs();
  const auto readers = make_readers();
  std::vector<bench_case> cases;
  for (const auto& in : inputs)
    for (const auto& rd : readers)
      if (rd.kind.empty() || rd.kind == in.kind)
        cases.push_back({&in, &rd, simdjson::padded_string(in.text)});
  // Every reader must read every input it is given (a refusal would time
  // the fallback, not the reader) and build what json::parse builds (an
  // event: what event_from_json(json::parse) gives).
  for (const auto& c : cases) {
    json built;
    const bool is_event = c.rd->name.find("-> event") != std::string::npos;
    const json want =
      is_event ? to_json(*event_from_json(json::parse(c.in->text))) : json::parse(c.in->text);
    if (c.rd->run(c.in->text, c.padded, &built) == 0 || built != want) {
      std::fprintf(stderr, "json_readers_bench: %s refused %s or read it differently\n",
                   c.rd->name.c_str(), c.in->name.c_str());
      return 1;
    }
  }
  if (callgrind_child) {
    count_under_callgrind(cases);
    return 0;
  }
  std::map<std::size_t, double> counts;
  if (instructions) {
    char self[4096];
    const auto len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len > 0) {
      self[len] = '\0';
      counts = instructions_per_op(self);
    }
  }
  std::string out = R"({"bench":"json_readers","cpu":)" + quoted(cpu_model()) + R"(,"simdjson":")"
    + std::to_string(simdjson::SIMDJSON_VERSION_MAJOR) + "."
    + std::to_string(simdjson::SIMDJSON_VERSION_MINOR) + "."
    + std::to_string(simdjson::SIMDJSON_VERSION_REVISION) + '"' + R"(,"simdjson_implementation":)"
    + quoted(simdjson::get_active_implementation()->name()) + R"(,"nlohmann_json":")"
    + std::to_string(NLOHMANN_JSON_VERSION_MAJOR) + "."
    + std::to_string(NLOHMANN_JSON_VERSION_MINOR) + "."
    + std::to_string(NLOHMANN_JSON_VERSION_PATCH) + R"(","results":[)";
  for (std::size_t k = 0; k < cases.size(); ++k) {
    const auto& c = cases[k];
    char ns[32];
    std::snprintf(ns, sizeof ns, "%.1f", ns_per_op(c, min_ms));
    out += k ? ",\n" : "\n";
    out += R"({"input":)" + quoted(c.in->name) + R"(,"bytes":)" + std::to_string(c.in->text.size())
      + R"(,"reader":)" + quoted(c.rd->name) + R"(,"ns_per_op":)" + ns;
    if (auto it = counts.find(k); it != counts.end())
      out += R"(,"instructions_per_op":)" + std::to_string(static_cast<long long>(it->second));
    out += '}';
  }
  out += "\n]}\n";
  std::fputs(out.c_str(), stdout);
  return 0;
}
