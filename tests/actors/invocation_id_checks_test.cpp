// SPDX-License-Identifier: Apache-2.0
// The engine's API refuses an invocation id no event can carry (NUL, bad
// UTF-8, over 128 bytes) wherever one enters outside an event — end_invocation,
// get_session's invocation_id, a rewind's before_invocation_id and event_id —
// as the protocol does (regression: the API accepted a NUL id the protocol
// refused).
#include <doctest/doctest.h>

#include "support/test_support.hpp"

TEST_CASE_TEMPLATE("api: a NUL or oversized invocation id is refused by end_invocation, "
                   "get_session and rewinds",
                   S, agentstate::test::memory_store, agentstate::test::lmdb_store) {
  using namespace agentstate;
  test::test_engine t = test::open_engine(S::kind);
  engine& e = *t;
  auto ref = test::sref("app", "u", "s");
  MUST(e.create_session(test::create_req(ref)));
  MUST(e.append_event(test::append_req(ref, test::make_event(json{{"k", 1}}, "e1"))));
  const std::string nul("inv\0x", 5);
  const std::string bad_utf8("inv\xff", 4);
  const std::string huge(129, 'i');

  auto ended = e.end_invocation(ref, nul);
  CHECK(ended.code() == errc::invalid_argument);
  CHECK(ended.err().message.find("invocation_id") != std::string::npos);
  CHECK(e.end_invocation(ref, bad_utf8).code() == errc::invalid_argument);
  CHECK(e.end_invocation(ref, huge).code() == errc::too_large);
  CHECK(e.end_invocation(ref, "inv-1").ok());

  auto get = test::get_req(ref);
  get.invocation_id = nul;
  CHECK(e.get_session(get).code() == errc::invalid_argument);

  rewind_request rw;
  rw.ref = ref;
  rw.before_invocation_id = nul;
  CHECK(e.rewind_session(rw).code() == errc::invalid_argument);
  rw.before_invocation_id = "inv-1";
  rw.event_id = nul;
  CHECK(e.rewind_session(rw).code() == errc::invalid_argument);
  // Nothing was changed by the refusals.
  CHECK(test::get_existing(e, ref).version == 1);
}
