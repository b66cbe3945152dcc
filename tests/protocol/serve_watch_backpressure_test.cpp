// SPDX-License-Identifier: Apache-2.0
// test-name: tools_serve_watch_backpressure_test
// The change feed against a client that stops reading (the real binary over
// TCP): its watches wait on the change log instead of queueing, so the serve
// child's memory stays flat while another client appends many times the
// output budget; once it reads again, each watch delivers every change once,
// in commit order, up to the last append. Memory is the child's RssAnon
// (its heap, where queued notifications would live); VmRSS is printed too,
// but it also counts the store's mapped file pages, which grow with the log.
// Not over stdio: there the stalled reader is the only client, and its own
// appends' answers (which carry the event) fill the same output budget, so
// serve stops reading its requests long before notifications could pile up.
#include "server/net_support.hpp"
#include "support/change_feed.hpp"
#include "support/sampler.hpp"

#include <algorithm>
#include <atomic>
#include <map>
#include <set>

namespace {

using namespace agentstate;
using namespace agentstate::test;
using namespace agentstate::test::net;
using namespace std::chrono_literals;

json append_params(const std::string& session, int n, const std::string& blob) {
  auto p = sref_params("app", session);
  p["event"] = json{{"author", "agent"},
                    {"invocation_id", "i"},
                    {"actions", {{"state_delta", {{"n", n}, {"blob", blob}}}}}};
  return p;
}

/// The cursor of `cursors` furthest in commit order (appends pipelined over
/// several sessions commit in any order).
std::string newest(const std::map<int, std::string>& cursors) {
  std::string best;
  for (auto& [n, c] : cursors)
    if (best.empty() || seq_of(c) > seq_of(best))
      best = c;
  return best;
}

/// A number from a file of /proc/sys (the largest of its fields), or 0.
std::uint64_t sysctl_max(const std::string& path) {
  std::ifstream in(path);
  std::uint64_t v = 0, best = 0;
  while (in >> v)
    best = std::max(best, v);
  return best;
}

/// One watch's deliveries as the stalled client reads them.
struct delivered {
  std::vector<std::string> cursors; ///< of each change, in arrival order
  std::map<std::string, json> n_of; ///< state_delta.n by cursor
  std::string cursor; ///< the last notification's cursor
};

/// Pipelines `count` appends (n = first .. first+count-1) over `sessions`,
/// at most `window` unanswered; returns each answer's cursor by n.
std::map<int, std::string> append_many(client& c, int first, int count, int sessions,
                                       const std::string& blob, int window = 64) {
  std::map<int, std::string> cursors;
  int sent = 0, answered = 0;
  while (answered < count) {
    while (sent < count && sent - answered < window) {
      int n = first + sent;
      REQUIRE(c.send_line(
        rpc(n, "append_event", append_params("s" + std::to_string(n % sessions), n, blob))));
      ++sent;
    }
    auto r = c.next(20s * slowdown);
    REQUIRE(r);
    INFO("response: ", r->dump().substr(0, 400));
    REQUIRE(r->contains("result"));
    cursors[(*r)["id"].get<int>()] = (*r)["result"]["cursor"].get<std::string>();
    ++answered;
  }
  return cursors;
}

/// Reads `c` until every watch's cursor has reached `until` (a cursor of
/// this store); adds what arrives to `got`, returns the bytes read and
/// raises `longest` to the longest line's.
std::uint64_t read_until(raw_socket& c, std::map<std::string, delivered>& got,
                         const std::string& until, std::uint64_t& longest) {
  std::uint64_t bytes = 0;
  auto behind = [&] {
    for (auto& [id, d] : got)
      if (d.cursor.empty() || seq_of(d.cursor) < seq_of(until))
        return true;
    return false;
  };
  while (behind()) {
    auto raw = c.next_raw(20s * slowdown);
    REQUIRE(raw);
    bytes += raw->size() + 1;
    longest = std::max<std::uint64_t>(longest, raw->size() + 1);
    auto line = parse_json(*raw, 512);
    REQUIRE(line.ok());
    INFO("line: ", raw->substr(0, 400));
    REQUIRE((*line)["method"] == "changes");
    auto& p = (*line)["params"];
    auto it = got.find(p["watch_id"].get<std::string>());
    REQUIRE(it != got.end());
    for (auto& ch : p["changes"]) {
      auto cur = ch["cursor"].get<std::string>();
      it->second.cursors.push_back(cur);
      it->second.n_of[cur] = ch["state_delta"]["n"];
    }
    it->second.cursor = p["cursor"].get<std::string>();
  }
  return bytes;
}

} // namespace

TEST_CASE("serve --listen: watches of a client that stops reading wait on the change log; "
          "memory stays flat; reading again delivers every change once, in commit order") {
  // A small output budget (its minimum is 1024): a watch's notifications wait
  // while more than half of it is unread.
  const std::size_t budget = 64 * 1024;
  const int watches = 4, sessions = 4, warmup = 200, appends = 8000;
  const std::string blob(1024, 'x');

  temp_dir dir;
  server_process srv({"--listen", "127.0.0.1:0", "--store", (dir.path() / "store").string(),
                      "--durability", "nosync", "--max-output-bytes", std::to_string(budget)},
                     (dir.path() / "stderr.txt").string());
  const int port = srv.port();
  client writer(port), probe(port);
  // Raw: it stops reading. Its receive buffer is the kernel's own, sized
  // as it reads. Regression (bug "the stalled client waited over 20 s for
  // a line"): a small fixed buffer (SO_RCVBUF) made the kernel drop what
  // overflowed it while the client was slow to read, and the server's
  // retransmission timeouts backed off to seconds; seen once in about ten
  // runs beside four busy loops.
  raw_socket stalled(port);
  REQUIRE(writer.connected());
  REQUIRE(stalled.connected());
  REQUIRE(probe.connected());
  for (int i = 0; i < sessions; ++i)
    REQUIRE(ok(writer.call("create_session", sref_params("app", "s" + std::to_string(i)))));

  std::map<std::string, delivered> got;
  std::map<std::string, std::string> start_of;
  for (int i = 0; i < watches; ++i) {
    auto w = stalled.call("watch", json{{"scope", "all"}}, i);
    REQUIRE(ok(w));
    auto id = (*w)["result"]["watch_id"].get<std::string>();
    start_of[id] = (*w)["result"]["cursor"].get<std::string>();
    got[id];
  }
  REQUIRE(got.size() == std::size_t(watches));

  // Warm-up with the client reading: the watches' threads, the notification
  // path and the allocator's arenas exist before the baseline.
  auto cursors = append_many(writer, 0, warmup, sessions, blob);
  std::uint64_t longest = 0;
  read_until(stalled, got, newest(cursors), longest);

  // The stalled client reads nothing from here. A sampler follows the
  // child's memory (anonymous: the heap, where queued notifications would
  // live; VmRSS also counts the store's mapped file pages, which grow with
  // the log itself) and the server's queued output.
  const long anon_base = srv.status("RssAnon"), rss_base = srv.status("VmRSS");
  REQUIRE(anon_base > 0);
  std::atomic<long> anon_peak{anon_base}, rss_peak{rss_base};
  std::atomic<std::uint64_t> queued_peak{0};
  // The sampling period (5 ms) is the measurement's resolution.
  test::sampler sampling(
    [&] {
      anon_peak = std::max(anon_peak.load(), srv.status("RssAnon"));
      rss_peak = std::max(rss_peak.load(), srv.status("VmRSS"));
      auto st = probe.call("stats", nullptr, "stats");
      if (ok(st))
        queued_peak = std::max<std::uint64_t>(
          queued_peak, (*st)["result"]["server"]["queued_output_bytes"].get<std::uint64_t>());
    },
    5ms);
  auto t0 = std::chrono::steady_clock::now();
  auto more = append_many(writer, warmup, appends, sessions, blob);
  cursors.insert(more.begin(), more.end());
  // The sampling goes on for 100 samples while the watches run into the
  // budget after the last append.
  REQUIRE(sampling.wait_more(100, 60s));
  sampling.stop();
  const int samples = sampling.count();
  auto write_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const long anon_growth = anon_peak - anon_base, rss_growth = rss_peak - rss_base;
  const std::string last = newest(cursors);
  REQUIRE(cursors.size() == std::size_t(warmup + appends));

  // What the client's kernel could hold while it read nothing: its receive
  // buffer grows only as it reads.
  int rcvbuf = 0;
  socklen_t len = sizeof rcvbuf;
  REQUIRE(::getsockopt(stalled.fd(), SOL_SOCKET, SO_RCVBUF, &rcvbuf, &len) == 0);
  // The stalled client reads again: every watch reaches the last append.
  std::map<std::string, delivered> held;
  for (auto& [id, d] : got)
    held[id].cursor = d.cursor; // where each stood when reading stopped
  auto t1 = std::chrono::steady_clock::now();
  const std::uint64_t held_bytes = read_until(stalled, held, last, longest);
  auto read_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  // Then each is ended: anything still on the stream (a repeat) arrives
  // before its watch_ended.
  for (auto& [id, d] : held)
    REQUIRE(stalled.send_line(rpc("u" + id, "unwatch", json{{"watch_id", id}})));
  std::set<std::string> ended, answered;
  while (answered.size() < held.size()) {
    auto line = stalled.next(20s * slowdown);
    REQUIRE(line);
    INFO("line: ", line->dump().substr(0, 400));
    if (line->contains("id")) {
      REQUIRE(ok(line));
      answered.insert((*line)["id"].get<std::string>());
    } else if ((*line)["method"] == "watch_ended") {
      CHECK((*line)["params"]["reason"] == "cancelled");
      CHECK((*line)["params"]["resume_from"] == last);
      ended.insert((*line)["params"]["watch_id"].get<std::string>());
    } else {
      CHECK((*line)["params"]["changes"].empty()); // no change twice
    }
  }
  CHECK(ended.size() == held.size());

  // What the log holds after the watches' start, paged with read_changes;
  // it is every append (nothing else was written after the watches began).
  std::vector<std::string> log;
  for (std::string from = start_of.begin()->second;;) {
    auto page =
      writer.call("read_changes", json{{"scope", "all"}, {"from", from}, {"limit", 10000}});
    REQUIRE(ok(page));
    for (auto& ch : (*page)["result"]["changes"])
      log.push_back(ch["cursor"].get<std::string>());
    from = (*page)["result"]["cursor"].get<std::string>();
    if ((*page)["result"]["at_head"] == true)
      break;
  }
  std::vector<std::string> by_seq;
  for (auto& [n, c] : cursors)
    by_seq.push_back(c);
  std::sort(by_seq.begin(), by_seq.end(),
            [](const std::string& a, const std::string& b) { return seq_of(a) < seq_of(b); });
  REQUIRE(log == by_seq);

  for (auto& [watch_id, d] : got) {
    const std::string id = watch_id;
    INFO("watch ", id);
    CHECK(start_of[id] == start_of.begin()->second);
    auto& h = held[id];
    std::vector<std::string> all = d.cursors;
    all.insert(all.end(), h.cursors.begin(), h.cursors.end());
    CHECK(all.size() == log.size());
    CHECK(all == log); // each change once, in commit order, up to the last
    std::map<std::string, json> n_of = d.n_of;
    n_of.insert(h.n_of.begin(), h.n_of.end());
    for (auto& [n, c] : cursors)
      if (n_of[c] != n) {
        CHECK(n_of[c] == n);
        break;
      }
  }

  // What unbounded queueing would have held: what the watches sent after
  // reading stopped, less what the kernel's socket buffers can take (the
  // client's receive buffer as it was then, the server's send buffer at its
  // largest).
  const std::uint64_t kernel = std::uint64_t(rcvbuf) + sysctl_max("/proc/sys/net/ipv4/tcp_wmem");
  const std::uint64_t unbounded = held_bytes > kernel ? held_bytes - kernel : 0;
  // The bound: the output budget, one page of 256 changes per watch in
  // flight (as changes, as JSON and as its line), and allocator slack.
  const std::uint64_t bound = 16ull << 20;
  MESSAGE("stalled client: ", watches, " watches, ", appends, " appends of ", blob.size(), " B in ",
          write_s, " s; undelivered notifications ", held_bytes >> 20, " MiB, read in ", read_s,
          " s (kernel buffers ", kernel >> 10,
          " KiB; unbounded queueing needs >= ", unbounded >> 20, " MiB); RssAnon ", anon_base >> 10,
          " MiB +", anon_growth, " KiB peak (bound ", bound >> 20, " MiB), VmRSS ", rss_base >> 10,
          " MiB +", rss_growth, " KiB peak; queued output peak ", queued_peak.load(), " B (budget ",
          budget, " B, longest line ", longest, " B), ", samples, " samples");
  REQUIRE(samples > 100);
  CHECK(unbounded >= 3 * bound);
  if (!sanitized_build)
    CHECK(std::uint64_t(anon_growth) * 1024 < bound);
  // Regression (bug "stats showed queued_output_bytes near 2^64"): the
  // server-wide count was raised only after a line was handed to its
  // connection, so an I/O thread could write the line and lower the count
  // first; seen here once in nine loaded runs as 2^64 - 285,715.
  CHECK(queued_peak < (std::uint64_t{1} << 62));
  // Each watch checks for room before it adds a line, so the stalled stream
  // holds at most the budget and one line per watch; the writer's and the
  // probe's answers in flight (64 appends', one stats') count too.
  CHECK(queued_peak <= budget + watches * longest + (1u << 20));
  CHECK(srv.alive());
}
