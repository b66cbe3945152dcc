// SPDX-License-Identifier: Apache-2.0
// engine::fence_range, read_range, read_range_since, digest_range,
// write_range, merge_range, drop_range, resume_range:
// a range of the shard hash leaving one store for another
// (store/shard_copy.hpp does the rows; docs/cluster.md, "Moving a shard").
#include <algorithm>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "actors/core.hpp"
#include "actors/range_chunks.hpp"
#include "agentstate/engine.hpp"
#include "model/text.hpp"
#include "store/change_log.hpp"
#include "store/keys.hpp"
#include "store/outbox.hpp"
#include "store/shard_copy.hpp"

namespace agentstate {

using namespace detail;

namespace {

constexpr char hex_digits[] = "0123456789abcdef";

/// A position as text: the phase's digit, then the key in hex.
std::string encode_position(const store::shard_position& p) {
  std::string out(1, static_cast<char>('0' + static_cast<int>(p.phase)));
  out.reserve(1 + 2 * p.after.size());
  for (unsigned char c : p.after) {
    out += hex_digits[c >> 4];
    out += hex_digits[c & 15];
  }
  return out;
}

result<store::shard_position> decode_position(const std::string& text) {
  store::shard_position p;
  if (text.empty())
    return p;
  auto bad = [] {
    return error{errc::invalid_argument,
                 "'from' is not a position a read of this range answered as 'next'"};
  };
  if (text[0] < '0' || text[0] > '2' || text.size() % 2 != 1)
    return bad();
  p.phase = static_cast<store::shard_phase>(text[0] - '0');
  for (std::size_t i = 1; i < text.size(); i += 2) {
    int hi = model::hex_digit(text[i]), lo = model::hex_digit(text[i + 1]);
    if (hi < 0 || lo < 0)
      return bad();
    p.after += static_cast<char>(hi * 16 + lo);
  }
  return p;
}

/// The chunk's sessions and rows.
void count_chunk_rows(const store::shard_chunk& c, range_chunk& out) {
  for (const auto& span : c.spans)
    for (const auto& row : span.rows) {
      ++out.rows;
      if (span.phase == store::shard_phase::sessions && row.t == store::table::sessions)
        ++out.sessions;
    }
}

/// The chunk of range `r` in `bytes`. Errors: decode_chunk's;
/// invalid_argument (a chunk of another range).
result<store::shard_chunk> decode_for(hash_range r, std::string_view bytes) {
  auto c = store::decode_chunk(bytes);
  if (c && !(c->range == to_model(r)))
    return error{errc::invalid_argument, "the chunk is of another range of the shard hash"};
  return c;
}

/// A chunk as the engine's callers get it: serialised, counted, with the
/// next position as text.
range_chunk to_range_chunk(const store::shard_chunk& c) {
  range_chunk out;
  count_chunk_rows(c, out);
  if (c.next.phase != store::shard_phase::done)
    out.next = encode_position(c.next);
  out.bytes = store::encode_chunk(c);
  return out;
}

} // namespace

result<range_chunk> detail::read_chunk(store::shard_reader& reader, const std::string& from,
                                       std::size_t max_bytes) {
  auto at = decode_position(from);
  if (!at)
    return std::move(at).err();
  store::shard_limits limits;
  limits.max_bytes = std::max<std::size_t>(max_bytes, 1);
  auto c = reader.next(*at, limits);
  if (!c)
    return std::move(c).err();
  return to_range_chunk(*c);
}

bool detail::range_fenced(engine_core& core, std::string_view app, std::string_view user) {
  const auto h = model::user_hash(app, user);
  std::lock_guard<std::mutex> lk(core.commit_mtx);
  for (const auto& r : core.range_fences)
    if (r.contains(h))
      return true;
  return false;
}

result<void> engine::fence_range(hash_range r) {
  if (core_->closed.load())
    return closing();
  std::lock_guard<std::mutex> lk(core_->commit_mtx);
  add_fence(*core_, to_model(r));
  return {};
}

result<void> engine::unfence_range(hash_range r) {
  {
    std::lock_guard<std::mutex> lk(core_->commit_mtx);
    auto& f = core_->range_fences;
    f.erase(std::remove(f.begin(), f.end(), to_model(r)), f.end());
  }
  return resume_range(r);
}

result<range_chunk> engine::read_range(hash_range r, const std::string& from,
                                       std::size_t max_bytes) {
  if (core_->closed.load())
    return closing();
  auto reader = store::shard_reader::open(*core_->kv, to_model(r));
  if (!reader)
    return std::move(reader).err();
  return read_chunk(**reader, from, max_bytes);
}

result<std::uint64_t> engine::range_mark() {
  if (core_->closed.load())
    return closing();
  try {
    auto txn = core_->kv->begin_read();
    return store::read_log_last(*txn);
  } catch (const store::kv_failure& f) {
    return error{f.code, f.message};
  }
}

result<range_chunk> engine::read_range_since(hash_range r, std::uint64_t since,
                                             const std::string& from, std::size_t max_bytes) {
  if (core_->closed.load())
    return closing();
  auto at = decode_position(from);
  if (!at)
    return std::move(at).err();
  try {
    auto txn = core_->kv->begin_read();
    const auto range = to_model(r);
    store::shard_touched t;
    std::optional<error> whole;
    auto scanned = store::scan_changes(*txn, since, [&](const store::change_row& c) {
      if (c.kind == change_kind::remove_app) {
        whole = error{errc::condition_failed,
                      "app '" + std::string(c.app) + "' was deleted since change "
                        + std::to_string(since) + ": read the whole range again"};
        return false;
      }
      if (!range.contains(model::user_hash(c.app, c.user)))
        return true;
      if (c.kind == change_kind::remove_user) {
        whole = error{errc::condition_failed,
                      "user '" + std::string(c.user) + "' of app '" + std::string(c.app)
                        + "' was deleted since change " + std::to_string(since)
                        + ": read the whole range again"};
        return false;
      }
      t.sessions.push_back(
        store::shard_index_key(c.app, c.user, store::session_key(c.app, c.user, c.id)));
      t.users.push_back(store::user_scope_key(c.app, c.user));
      return true;
    });
    if (!scanned)
      return std::move(scanned).err();
    if (whole)
      return *whole;
    for (auto* keys : {&t.sessions, &t.users}) {
      std::sort(keys->begin(), keys->end());
      keys->erase(std::unique(keys->begin(), keys->end()), keys->end());
    }
    store::shard_reader reader(*txn, range);
    store::shard_limits limits;
    limits.max_bytes = std::max<std::size_t>(max_bytes, 1);
    auto c = reader.next_touched(t, *at, limits);
    if (!c)
      return std::move(c).err();
    return to_range_chunk(*c);
  } catch (const store::kv_failure& f) {
    return error{f.code, f.message};
  }
}

result<range_digest> engine::digest_range(hash_range r) {
  if (core_->closed.load())
    return closing();
  auto reader = store::shard_reader::open(*core_->kv, to_model(r));
  if (!reader)
    return std::move(reader).err();
  auto d = (*reader)->digest();
  if (!d)
    return std::move(d).err();
  return range_digest{d->sessions, d->rows, d->bytes, d->crc};
}

result<void> engine::write_range(hash_range r, std::string_view chunk) {
  if (core_->closed.load())
    return closing();
  auto c = decode_for(r, chunk);
  if (!c)
    return std::move(c).err();
  if (auto f = fence_range(r); !f)
    return f;
  std::lock_guard<std::mutex> lk(core_->commit_mtx);
  auto done = store::shard_writer::apply(*core_->kv, *c);
  // Cached records, event ids and scope values may be stale now.
  core_->fence_epoch.fetch_add(1);
  return done;
}

result<engine::range_merge> engine::merge_range(hash_range r, std::string_view chunk) {
  if (core_->closed.load())
    return closing();
  auto c = decode_for(r, chunk);
  if (!c)
    return std::move(c).err();
  std::lock_guard<std::mutex> lk(core_->commit_mtx);
  auto done = store::shard_writer::merge(*core_->kv, *c);
  if (!done)
    return std::move(done).err();
  core_->fence_epoch.fetch_add(1); // cached misses may be sessions now
  return range_merge{done->added, done->present, done->sessions};
}

result<std::uint64_t> engine::drop_range(hash_range r) {
  std::uint64_t sessions = 0;
  store::shard_position at;
  for (;;) {
    if (core_->closed.load())
      return closing();
    // Read from a fresh snapshot each step: the spans to empty, and what
    // they hold now. The snapshot ends before the write (a store whose
    // writes wait for its readers, as the memory store's do).
    result<store::shard_chunk> c = error{errc::internal, "not read"};
    {
      auto reader = store::shard_reader::open(*core_->kv, to_model(r));
      if (!reader)
        return std::move(reader).err();
      c = (*reader)->next(at);
    }
    if (!c)
      return std::move(c).err();
    range_chunk counted;
    count_chunk_rows(*c, counted);
    sessions += counted.sessions;
    for (auto& span : c->spans)
      span.rows.clear(); // an empty span deletes what the store holds in it
    {
      std::lock_guard<std::mutex> lk(core_->commit_mtx);
      auto done = store::shard_writer::apply(*core_->kv, *c);
      core_->fence_epoch.fetch_add(1);
      if (!done)
        return std::move(done).err();
    }
    if (c->next.phase == store::shard_phase::done)
      return sessions;
    at = c->next;
  }
}

result<void> engine::resume_range(hash_range r) {
  if (core_->closed.load())
    return closing();
  std::vector<std::string> waiting;
  try {
    auto txn = core_->kv->begin_read();
    auto got = store::outbox_sessions(*txn);
    if (!got)
      return std::move(got).err();
    const auto range = to_model(r);
    for (auto& skey : *got) {
      auto parts = store::split_key(skey, 3);
      if (parts.size() == 3 && range.contains(model::user_hash(parts[0], parts[1])))
        waiting.push_back(std::move(skey));
    }
  } catch (const store::kv_failure& f) {
    return error{f.code, f.message};
  }
  wake_sessions(*core_, waiting);
  return {};
}

} // namespace agentstate
