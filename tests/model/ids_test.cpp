// SPDX-License-Identifier: Apache-2.0
// Generated ids: version-4 UUIDs in 8-4-4-4-12 lowercase hex; session ids come
// from the OS's secure random source (model::make_secure_uuid), event and
// invocation ids from the fast per-thread generator (model::make_uuid).
#include <doctest/doctest.h>

#include <set>
#include <string>

#include "model/ids.hpp"
#include "support/test_support.hpp"

using namespace agentstate;

namespace {

bool is_v4_uuid(const std::string& s) {
  if (s.size() != 36)
    return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash != (s[i] == '-'))
      return false;
    if (!dash && !((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
      return false;
  }
  return s[14] == '4' && (s[19] == '8' || s[19] == '9' || s[19] == 'a' || s[19] == 'b');
}

} // namespace

TEST_CASE("ids: both generators make distinct version-4 UUIDs") {
  std::set<std::string> seen;
  for (int i = 0; i < 5000; ++i) {
    auto a = model::make_uuid();
    auto b = model::make_secure_uuid();
    CHECK(is_v4_uuid(a));
    CHECK(is_v4_uuid(b));
    CHECK(seen.insert(a).second);
    CHECK(seen.insert(b).second);
  }
}

TEST_CASE("ids: a session created without an id gets a version-4 UUID") {
  auto eng = test::open_engine(test::store_kind::lmdb);
  auto& e = *eng;
  auto a = MUST(e.create_session(test::create_req("app", "u", "")));
  auto b = MUST(e.create_session(test::create_req("app", "u", "")));
  CHECK(is_v4_uuid(a.id));
  CHECK(is_v4_uuid(b.id));
  CHECK(a.id != b.id);
}
