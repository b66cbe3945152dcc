// SPDX-License-Identifier: Apache-2.0
// detail::event_id_index, the session actor's A6 lookup: every id added is
// among its own candidates, also when hashes collide; a pair added twice is
// kept once.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "actors/id_index.hpp"

using agentstate::detail::event_id_index;

namespace {

std::vector<std::uint64_t> candidates(const event_id_index& index, std::string_view id) {
  std::vector<std::uint64_t> out;
  index.candidates(id, [&](std::uint64_t v) {
    out.push_back(v);
    return true;
  });
  std::sort(out.begin(), out.end());
  return out;
}

std::uint64_t same_hash(std::string_view) {
  return 7;
}

} // namespace

TEST_CASE("id index: each id's version is among its candidates") {
  event_id_index index;
  for (std::uint64_t v = 1; v <= 1000; ++v)
    index.add("event-" + std::to_string(v), v);
  CHECK(index.size() == 1000);
  for (std::uint64_t v = 1; v <= 1000; ++v) {
    auto c = candidates(index, "event-" + std::to_string(v));
    INFO("version ", v);
    CHECK(std::find(c.begin(), c.end(), v) != c.end());
  }
  CHECK(candidates(index, "never-added").empty());
}

TEST_CASE("id index: colliding hashes give every colliding version") {
  event_id_index index(&same_hash);
  index.add("a", 1);
  index.add("b", 2);
  index.add("c", 5);
  // The caller tells them apart by reading each candidate's stored id.
  CHECK(candidates(index, "b") == std::vector<std::uint64_t>{1, 2, 5});
  CHECK(candidates(index, "zzz") == std::vector<std::uint64_t>{1, 2, 5});
}

TEST_CASE("id index: a pair added twice is kept once; a new version of an id is kept too") {
  event_id_index index;
  index.add("x", 3);
  index.add("x", 3); // a commit seen by the index's build and then answered
  CHECK(index.size() == 1);
  CHECK(candidates(index, "x") == std::vector<std::uint64_t>{3});
  index.add("x", 1); // the id again after a delete and re-create
  CHECK(candidates(index, "x") == std::vector<std::uint64_t>{1, 3});
}

TEST_CASE("id index: candidates stops when the visitor returns false") {
  event_id_index index(&same_hash);
  for (std::uint64_t v = 1; v <= 5; ++v)
    index.add(std::to_string(v), v);
  int seen = 0;
  index.candidates("1", [&](std::uint64_t) { return ++seen < 2; });
  CHECK(seen == 2);
}
