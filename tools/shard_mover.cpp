// SPDX-License-Identifier: Apache-2.0
#include "tools/shard_mover.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

#include "cluster/etcd.hpp"
#include "model/shard.hpp"

namespace agentstate::tools {

namespace {

constexpr const char* record_name = "cluster-moves.json";

/// What a node is in the middle of for one shard.
enum class role { fenced, importing };

struct mark {
  role what = role::fenced;
  std::uint32_t shards = 0; ///< the cluster's shard count when it was made
};

error io_failure(const std::string& what, const std::string& path) {
  return error{errc::io_error, what + " " + path + ": " + std::strerror(errno)};
}

/// Writes `text` to `path` durably: a temporary file, fsync, rename, and an
/// fsync of the directory.
result<void> write_durably(const std::string& dir, const std::string& path,
                           const std::string& text) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    return io_failure("cannot create", tmp);
  std::size_t done = 0;
  while (done < text.size()) {
    auto n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      auto e = io_failure("cannot write", tmp);
      ::close(fd);
      return e;
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    auto e = io_failure("cannot sync", tmp);
    ::close(fd);
    return e;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    return io_failure("cannot rename", tmp);
  int d = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d < 0)
    return io_failure("cannot open", dir);
  int synced = ::fsync(d);
  ::close(d);
  if (synced != 0)
    return io_failure("cannot sync", dir);
  return {};
}

hash_range shard_hash_range(std::uint32_t shard, std::uint32_t shards) {
  auto r = model::shard_range(shard, shards);
  return {r.lo, r.hi};
}

/// params' "chunk" (base64) as bytes, or why not.
result<std::string> chunk_param(const json& params) {
  auto chunk = params.find("chunk");
  if (chunk == params.end() || !chunk->is_string())
    return error{errc::invalid_argument, "'chunk' must be a string (a shard chunk, base64)"};
  std::string bytes;
  if (!cluster::unb64(chunk->get_ref<const std::string&>(), bytes))
    return error{errc::invalid_argument, "'chunk' is not base64"};
  return bytes;
}

/// params[name] as an unsigned number, or why not.
result<std::uint64_t> unsigned_param(const json& params, const char* name) {
  auto it = params.find(name);
  if (it == params.end() || !it->is_number_unsigned())
    return error{errc::invalid_argument,
                 std::string("'") + name + "' must be a number (0 or more)"};
  return it->get<std::uint64_t>();
}

} // namespace

struct shard_mover::impl {
  engine& eng;
  const cluster::node& node;
  std::string id, dir, path;
  server::logger& log;
  std::map<std::uint32_t, mark> marks; ///< by shard; the mover's thread only
  std::set<std::uint32_t> fenced_here; ///< fence_range calls made by this process

  std::mutex mtx;
  std::condition_variable cv;
  struct call_job {
    std::string method;
    json params;
    std::function<void(result<json>)> done;
  };
  std::deque<call_job> jobs;
  bool stopping = false;
  std::thread thread;

  impl(engine& e, const cluster::node& n, std::string node_id, std::string store_dir,
       server::logger& l)
    : eng(e), node(n), id(std::move(node_id)), dir(std::move(store_dir)), log(l) {
    if (!dir.empty())
      path = dir + "/" + record_name;
  }

  result<void> load() {
    if (path.empty())
      return {};
    std::error_code ec;
    if (!std::filesystem::exists(path, ec) && !ec)
      return {}; // no move under way
    std::ifstream in(path);
    if (!in)
      return io_failure("cannot read", path);
    std::stringstream text;
    text << in.rdbuf();
    json r = json::parse(text.str(), nullptr, false);
    auto bad = [this] {
      return error{errc::data_corrupt,
                   path
                     + " is not a record of shard moves (a JSON object with 'fenced' and "
                       "'importing': lists of {shard, shards})"};
    };
    if (!r.is_object())
      return bad();
    for (auto [name, what] : {std::pair{"fenced", role::fenced}, {"importing", role::importing}}) {
      auto list = r.find(name);
      if (list == r.end())
        continue;
      if (!list->is_array())
        return bad();
      for (auto& m : *list) {
        if (!m.is_object() || !m.contains("shard") || !m["shard"].is_number_unsigned()
            || !m.contains("shards") || !m["shards"].is_number_unsigned())
          return bad();
        auto shards = m["shards"].get<std::uint64_t>();
        auto shard = m["shard"].get<std::uint64_t>();
        if (shards == 0 || shards > 65536 || shard >= shards)
          return bad();
        marks[static_cast<std::uint32_t>(shard)] = {what, static_cast<std::uint32_t>(shards)};
      }
    }
    return {};
  }

  result<void> save() {
    if (path.empty())
      return {};
    json out = {{"fenced", json::array()}, {"importing", json::array()}};
    for (auto& [shard, m] : marks)
      out[m.what == role::fenced ? "fenced" : "importing"].push_back(
        {{"shard", shard}, {"shards", m.shards}});
    return write_durably(dir, path, out.dump() + "\n");
  }

  /// Waits up to 5 s for this node's view of shard `shard` to reach
  /// `epoch`; the view then.
  std::shared_ptr<const cluster::cluster_view> view_at(std::uint32_t shard, std::uint64_t epoch) {
    node.wait_for(
      [&](const cluster::cluster_view& v) {
        return shard < v.shards.size() && v.shards[shard].epoch >= epoch;
      },
      std::chrono::milliseconds(5000));
    return node.view();
  }

  /// A step's shard, its epoch while it moves, and this node's view once
  /// it has reached that epoch (view_at).
  struct step {
    std::uint32_t shard = 0;
    std::uint64_t epoch = 0;
    std::shared_ptr<const cluster::cluster_view> view;
    const cluster::shard_entry& entry() const { return view->shards[shard]; }
  };

  /// params' shard and epoch, with the view. Errors: invalid_argument.
  result<step> step_of(const json& params) {
    auto shard = unsigned_param(params, "shard");
    if (!shard)
      return std::move(shard).err();
    auto epoch = unsigned_param(params, "epoch");
    if (!epoch)
      return std::move(epoch).err();
    auto v = view_at(static_cast<std::uint32_t>(std::min<std::uint64_t>(*shard, 65536)), *epoch);
    if (*shard >= v->shards.size())
      return error{errc::invalid_argument,
                   "shard " + std::to_string(*shard) + " is beyond the cluster's "
                     + std::to_string(v->shards.size())};
    return step{static_cast<std::uint32_t>(*shard), *epoch, std::move(v)};
  }

  static std::string describe(const cluster::shard_entry& e) {
    return "owner '" + e.owner + "', epoch " + std::to_string(e.epoch)
      + (e.to.empty() ? std::string() : ", moving to '" + e.to + "'");
  }

  /// Records that this node `what`s shard `s` (of `shards`), durably,
  /// before it acts on it.
  result<void> mark_shard(std::uint32_t s, role what, std::uint32_t shards) {
    if (auto m = marks.find(s); m != marks.end() && m->second.what == what)
      return {};
    marks[s] = {what, shards};
    auto r = save();
    if (!r)
      marks.erase(s);
    return r;
  }

  /// Fences shard `s` in this engine once per process (a restart fences
  /// again from the record).
  result<void> fence_once(std::uint32_t s, std::uint32_t shards) {
    if (fenced_here.count(s))
      return {};
    if (auto r = eng.fence_range(shard_hash_range(s, shards)); !r)
      return r;
    fenced_here.insert(s);
    return {};
  }

  result<json> shard_export(const json& params) {
    std::string from;
    if (auto it = params.find("from"); it != params.end() && !it->is_null()) {
      if (!it->is_string())
        return error{errc::invalid_argument, "'from' must be a string (a previous 'next')"};
      from = it->get<std::string>();
    }
    std::size_t max_bytes = std::size_t{1} << 20;
    if (params.contains("max_bytes")) {
      auto m = unsigned_param(params, "max_bytes");
      if (!m || *m < 1024 || *m > (std::uint64_t{16} << 20))
        return error{errc::invalid_argument, "'max_bytes' must be 1024 to 16777216"};
      max_bytes = static_cast<std::size_t>(*m);
    }
    std::optional<std::uint64_t> since;
    if (params.contains("since")) {
      auto m = unsigned_param(params, "since");
      if (!m)
        return std::move(m).err();
      since = *m;
    }
    auto st = step_of(params);
    if (!st)
      return std::move(st).err();
    const auto s = st->shard;
    const auto& e = st->entry();
    if (e.owner != id || e.to.empty() || e.epoch != st->epoch)
      return error{errc::version_conflict,
                   "shard " + std::to_string(s) + " is not moving away from node '" + id
                     + "' at epoch " + std::to_string(st->epoch) + ": the map has " + describe(e)};
    const auto shards = st->view->settings.shards;
    const auto r = shard_hash_range(s, shards);
    json out = json::object();
    if (e.copying) {
      if (since)
        return error{errc::invalid_argument,
                     "'since' reads a shard this node no longer serves: shard " + std::to_string(s)
                       + " is still served here while its first copy is made"};
      if (from.empty()) { // the mark a catch-up counts from, before the first read
        auto mark = eng.range_mark();
        if (!mark)
          return std::move(mark).err();
        out["mark"] = *mark;
      }
    } else {
      if (auto m = mark_shard(s, role::fenced, shards); !m)
        return std::move(m).err();
      const bool first = !fenced_here.count(s);
      if (auto f = fence_once(s, shards); !f)
        return std::move(f).err();
      if (first)
        log.info("shard_fenced",
                 "shard " + std::to_string(s) + " is moving to node '" + e.to
                   + "': its writes are refused here",
                 {{"shard", s}, {"epoch", e.epoch}, {"to", e.to}});
    }
    auto c =
      since ? eng.read_range_since(r, *since, from, max_bytes) : eng.read_range(r, from, max_bytes);
    if (!c)
      return std::move(c).err();
    out["chunk"] = cluster::b64(c->bytes);
    out["next"] = c->next.empty() ? json(nullptr) : json(c->next);
    out["sessions"] = c->sessions;
    out["rows"] = c->rows;
    return out;
  }

  result<json> shard_import(const json& params) {
    auto bytes = chunk_param(params);
    if (!bytes)
      return std::move(bytes).err();
    auto st = step_of(params);
    if (!st)
      return std::move(st).err();
    const auto s = st->shard;
    const auto& e = st->entry();
    if (e.to != id || e.epoch != st->epoch)
      return error{errc::version_conflict,
                   "shard " + std::to_string(s) + " is not moving to node '" + id + "' at epoch "
                     + std::to_string(st->epoch) + ": the map has " + describe(e)};
    const auto shards = st->view->settings.shards;
    if (auto r = mark_shard(s, role::importing, shards); !r)
      return std::move(r).err();
    if (auto r = fence_once(s, shards); !r) // so nothing here writes, reaps or prunes it yet
      return std::move(r).err();
    if (auto r = eng.write_range(shard_hash_range(s, shards), *bytes); !r)
      return std::move(r).err();
    return json{{"shard", s}, {"bytes", bytes->size()}};
  }

  /// The digest of the shard's rows here: at its owner once it is not
  /// served (fenced), or at the node it moves to.
  result<json> shard_digest(const json& params) {
    auto st = step_of(params);
    if (!st)
      return std::move(st).err();
    const auto s = st->shard;
    const auto& e = st->entry();
    const auto shards = st->view->settings.shards;
    const bool source = e.owner == id && !e.to.empty() && !e.copying;
    if (e.epoch != st->epoch || !(source || e.to == id))
      return error{errc::version_conflict,
                   "shard " + std::to_string(s) + " is not moving to or from node '" + id
                     + "' at epoch " + std::to_string(st->epoch)
                     + " with its writes stopped: the map has " + describe(e)};
    if (source) {
      if (auto m = mark_shard(s, role::fenced, shards); !m)
        return std::move(m).err();
      if (auto f = fence_once(s, shards); !f)
        return std::move(f).err();
    }
    auto d = eng.digest_range(shard_hash_range(s, shards));
    if (!d)
      return std::move(d).err();
    return json{{"sessions", d->sessions}, {"rows", d->rows}, {"bytes", d->bytes}, {"crc", d->crc}};
  }

  /// Adds an adopted store's chunk of a shard this node serves to its rows
  /// (engine::merge_range).
  result<json> shard_adopt(const json& params) {
    auto bytes = chunk_param(params);
    if (!bytes)
      return std::move(bytes).err();
    auto st = step_of(params);
    if (!st)
      return std::move(st).err();
    const auto s = st->shard;
    const auto& e = st->entry();
    if (e.owner != id || !e.to.empty() || e.epoch != st->epoch)
      return error{errc::version_conflict,
                   "shard " + std::to_string(s) + " is not served by node '" + id + "' at epoch "
                     + std::to_string(st->epoch) + ": the map has " + describe(e)};
    auto m = eng.merge_range(shard_hash_range(s, st->view->settings.shards), *bytes);
    if (!m)
      return std::move(m).err();
    return json{{"added", m->added}, {"present", m->present}, {"sessions", m->sessions}};
  }

  /// Acts on each mark as view `v` has its shard. False when something
  /// failed (tried again later).
  bool reconcile(const cluster::cluster_view& v) {
    bool ok = true, changed = false;
    for (auto it = marks.begin(); it != marks.end();) {
      const auto s = it->first;
      const auto m = it->second;
      if (m.shards != v.settings.shards || s >= v.shards.size()) {
        log.error("shard_record",
                  "the record of shard moves names shard " + std::to_string(s) + " of "
                    + std::to_string(m.shards) + ", and the cluster has "
                    + std::to_string(v.settings.shards) + " shards: left as it is");
        ++it;
        continue;
      }
      const auto& e = v.shards[s];
      const auto r = shard_hash_range(s, m.shards);
      if (m.what == role::fenced) {
        if (e.owner == id && !e.to.empty()) {
          if (!fenced_here.count(s)) { // a restart while the move runs
            if (auto f = eng.fence_range(r); !f)
              ok = false;
            else
              fenced_here.insert(s);
          }
          ++it;
          continue;
        }
        if (e.owner != id) {
          auto dropped = eng.drop_range(r);
          if (!dropped) {
            log.error("shard_drop_failed",
                      "cannot drop the rows of shard " + std::to_string(s)
                        + ", which moved to node '" + e.owner + "': " + dropped.err().message,
                      {{"shard", s}, {"epoch", e.epoch}, {"owner", e.owner}});
            ok = false;
            ++it;
            continue;
          }
          log.info("shard_moved_away",
                   "shard " + std::to_string(s) + " moved to node '" + e.owner
                     + "': " + std::to_string(*dropped) + " sessions dropped here",
                   {{"shard", s}, {"epoch", e.epoch}, {"owner", e.owner}});
        } else {
          log.info("shard_move_undone",
                   "shard " + std::to_string(s) + " stays on this node: its writes are served",
                   {{"shard", s}, {"epoch", e.epoch}, {"owner", e.owner}});
        }
        if (auto u = eng.unfence_range(r); !u)
          ok = false;
        fenced_here.erase(s);
      } else {
        if (e.to == id) {
          if (!fenced_here.count(s)) { // a restart while the copy runs
            if (auto f = eng.fence_range(r); !f)
              ok = false;
            else
              fenced_here.insert(s);
          }
          ++it;
          continue;
        }
        if (e.owner == id) {
          if (auto w = eng.unfence_range(r); !w) // and wakes what waits in the outbox
            ok = false;
          fenced_here.erase(s);
          log.info("shard_moved_here",
                   "shard " + std::to_string(s) + " is served by this node from epoch "
                     + std::to_string(e.epoch),
                   {{"shard", s}, {"epoch", e.epoch}, {"owner", e.owner}});
        } else {
          auto dropped = eng.drop_range(r);
          if (!dropped) {
            ok = false;
            ++it;
            continue;
          }
          if (auto u = eng.unfence_range(r); !u)
            ok = false;
          fenced_here.erase(s);
          log.info("shard_copy_dropped",
                   "the copy of shard " + std::to_string(s) + " made here was abandoned ("
                     + describe(e) + "): " + std::to_string(*dropped) + " sessions dropped",
                   {{"shard", s}, {"epoch", e.epoch}, {"owner", e.owner}});
        }
      }
      it = marks.erase(it);
      changed = true;
    }
    if (changed)
      if (auto r = save(); !r) {
        log.error("shard_record", r.err().message);
        ok = false;
      }
    return ok;
  }

  void run() {
    std::int64_t seen = -1;
    bool retry = true;
    for (;;) {
      std::optional<call_job> job;
      {
        std::unique_lock<std::mutex> lock(mtx);
        // Woken by a call; otherwise looks at the map every 100 ms.
        cv.wait_for(lock, std::chrono::milliseconds(100),
                    [this] { return stopping || !jobs.empty(); });
        if (stopping)
          return;
        if (!jobs.empty()) {
          job = std::move(jobs.front());
          jobs.pop_front();
        }
      }
      if (job) {
        result<json> r = job->method == "shard_export" ? shard_export(job->params)
          : job->method == "shard_import"              ? shard_import(job->params)
          : job->method == "shard_digest"              ? shard_digest(job->params)
          : job->method == "shard_adopt"
          ? shard_adopt(job->params)
          : result<json>(error{errc::invalid_argument, "unknown method '" + job->method + "'"});
        job->done(std::move(r));
        retry = true;
      }
      auto v = node.view();
      if (!marks.empty() && (retry || v->revision != seen) && !v->shards.empty()) {
        retry = !reconcile(*v);
        seen = v->revision;
      }
    }
  }
};

shard_mover::shard_mover(std::unique_ptr<impl> p) : p_(std::move(p)) {}

shard_mover::~shard_mover() {
  stop();
}

result<std::unique_ptr<shard_mover>> shard_mover::start(engine& eng, const cluster::node& n,
                                                        std::string id, std::string store_dir,
                                                        server::logger& log) {
  auto p = std::make_unique<impl>(eng, n, std::move(id), std::move(store_dir), log);
  if (auto r = p->load(); !r)
    return std::move(r).err();
  // Until the map says how each move the record names ended, its shard is
  // fenced here: nothing writes, reaps or prunes rows this node may give up.
  for (auto& [shard, m] : p->marks)
    if (auto r = p->fence_once(shard, m.shards); !r)
      return std::move(r).err();
  auto* raw = p.get();
  p->thread = std::thread([raw] { raw->run(); });
  return std::unique_ptr<shard_mover>(new shard_mover(std::move(p)));
}

void shard_mover::call(const std::string& method, json params,
                       std::function<void(result<json>)> done) {
  {
    std::lock_guard<std::mutex> lock(p_->mtx);
    if (!p_->stopping) {
      p_->jobs.push_back({method, std::move(params), std::move(done)});
      p_->cv.notify_one();
      return;
    }
  }
  done(error{errc::unavailable, "this node is stopping"});
}

void shard_mover::stop() {
  std::deque<impl::call_job> left;
  {
    std::lock_guard<std::mutex> lock(p_->mtx);
    if (p_->stopping && !p_->thread.joinable())
      return;
    p_->stopping = true;
    p_->cv.notify_one();
  }
  if (p_->thread.joinable())
    p_->thread.join();
  {
    std::lock_guard<std::mutex> lock(p_->mtx);
    left.swap(p_->jobs);
  }
  // The calls that never ran are answered: the node is stopping.
  for (auto& job : left)
    job.done(error{errc::unavailable, "this node is stopping"});
}

} // namespace agentstate::tools
