// SPDX-License-Identifier: Apache-2.0
// test-name: state_state_api_test
// docs/semantics.md I1, N1, N2: the delta-aware state view (agentstate/state.hpp),
// rule by rule. Pure: no engine, no store.
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "agentstate/state.hpp"

using namespace agentstate;

namespace {

using names = std::vector<std::string>;

json plus(const json& v, int n) {
  return v.get<int>() + n;
}

std::function<json(const json&)> add(int n) {
  return [n](const json& v) { return plus(v, n); };
}

bool mentions(const error& e, const std::string& s) {
  return e.message.find(s) != std::string::npos;
}

// derived_view must have no writers (N1: derived: keys are engine-written).
template <class T, class = void>
struct has_set : std::false_type {};
template <class T>
struct has_set<T, std::void_t<decltype(std::declval<T&>().set("x", json(1)))>> : std::true_type {};
template <class T, class = void>
struct has_remove : std::false_type {};
template <class T>
struct has_remove<T, std::void_t<decltype(std::declval<T&>().remove("x"))>> : std::true_type {};

} // namespace

TEST_CASE("I1: a state over a non-object is empty; over an object it reads it") {
  CHECK(state{}.all() == json::object());
  CHECK(state{json::array({1, 2})}.all() == json::object());
  CHECK(state{json(5)}.keys().empty());
  state st{json{{"a", 1}}};
  CHECK(st.all() == json{{"a", 1}});
  CHECK_FALSE(st.dirty());
  CHECK(st.pending().empty());
}

TEST_CASE("I1: typed get with a fallback") {
  const state st{json{{"n", 3}, {"name", "Ada"}, {"flag", true}, {"obj", {{"a", 1}}}}};
  CHECK(st.get<int>("n", 0) == 3);
  CHECK(st.get<int>("missing", 7) == 7);
  CHECK(st.get<std::string>("name", std::string("x")) == "Ada");
  // Present but another type: the fallback.
  CHECK(st.get<std::string>("n", std::string("fb")) == "fb");
  CHECK(st.get<int>("obj", -1) == -1);
  // Untyped: the json value, null or the json fallback when missing.
  CHECK(st.get("name") == json("Ada"));
  CHECK(st.get("missing").is_null());
  CHECK(st.get("missing", json{{"d", 1}}) == json{{"d", 1}});
  CHECK(st.get("obj") == json{{"a", 1}});
  REQUIRE(st.find("n") != nullptr);
  CHECK(*st.find("n") == 3);
  CHECK(st.find("missing") == nullptr);
}

TEST_CASE("I1: get_as errors: not_found and invalid_argument, naming the key") {
  const state st{json{{"n", 3}, {"name", "Ada"}}};
  auto ok = st.get_as<int>("n");
  REQUIRE(ok.ok());
  CHECK(*ok == 3);

  auto missing = st.get_as<int>("nope");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.code() == errc::not_found);
  CHECK(mentions(missing.err(), "'nope'"));

  auto wrong = st.get_as<std::string>("n");
  REQUIRE_FALSE(wrong.ok());
  CHECK(wrong.code() == errc::invalid_argument);
  CHECK(mentions(wrong.err(), "'n'"));
  CHECK(mentions(wrong.err(), "number"));

  auto arr = st.get_as<std::vector<int>>("name");
  CHECK(arr.code() == errc::invalid_argument);
  CHECK(mentions(arr.err(), "string"));
}

TEST_CASE("I1: state_key<T> reads with its fallback and writes typed values") {
  const state_key<int> visits{"user:visits", 0};
  const state_key<std::string> lang{"user:lang", "en"};
  state st{json{{"user:lang", "fr"}}};
  CHECK(st.get(visits) == 0);
  CHECK(st.get(lang) == "fr");
  REQUIRE(st.set(visits, st.get(visits) + 1).ok());
  REQUIRE(st.set(visits, st.get(visits) + 1).ok());
  CHECK(st.get(visits) == 2);
  CHECK(st.get("user:visits") == json(2));
  CHECK(st.pending().set == json{{"user:visits", 2}});
  REQUIRE(st.remove(lang.name).ok());
  CHECK(st.get(lang) == "en");
  // A present value of another type reads as the fallback.
  REQUIRE(st.set("user:visits", json("many")).ok());
  CHECK(st.get(visits) == 0);
}

TEST_CASE("I1: reads see pending writes; set, remove and contains") {
  state st{json{{"a", 1}, {"user:b", 2}}};
  CHECK(st.contains("a"));
  CHECK_FALSE(st.contains("c"));

  REQUIRE(st.set("c", json("new")).ok());
  REQUIRE(st.set("a", json(10)).ok());
  CHECK(st.contains("c"));
  CHECK(st.get("c") == json("new"));
  CHECK(st.get<int>("a", 0) == 10);
  CHECK(st.dirty());
  CHECK(st.pending().set == json{{"a", 10}, {"c", "new"}});
  CHECK(st.pending().remove.empty());

  REQUIRE(st.remove("user:b").ok());
  CHECK_FALSE(st.contains("user:b"));
  CHECK(st.find("user:b") == nullptr);
  CHECK(st.get("user:b", json(-1)) == json(-1));
  // Removing a missing key is still recorded (another writer may have set it).
  REQUIRE(st.remove("zzz").ok());
  CHECK_FALSE(st.contains("zzz"));
  // Removes come out sorted and unique.
  REQUIRE(st.remove("user:b").ok());
  CHECK(st.pending().remove == names{"user:b", "zzz"});
  CHECK(st.pending().set == json{{"a", 10}, {"c", "new"}});
  CHECK(st.keys() == names{"a", "c"});
  CHECK(st.all() == json{{"a", 10}, {"c", "new"}});
}

TEST_CASE("I1: a set after a remove, and a remove after a set, supersede each other") {
  state st{json{{"k", 1}}};
  REQUIRE(st.remove("k").ok());
  REQUIRE(st.set("k", json(2)).ok());
  CHECK(st.get("k") == json(2));
  CHECK(st.pending().set == json{{"k", 2}});
  CHECK(st.pending().remove.empty());

  REQUIRE(st.remove("k").ok());
  CHECK_FALSE(st.contains("k"));
  CHECK(st.pending().set == json::object());
  CHECK(st.pending().remove == names{"k"});
}

TEST_CASE("N1: derived: writes are refused and nothing is recorded") {
  state st{json{{"derived:score", 1}, {"a", 1}}};
  auto s = st.set("derived:score", json(2));
  CHECK(s.code() == errc::invalid_argument);
  CHECK(mentions(s.err(), "'derived:score'"));
  CHECK(st.remove("derived:score").code() == errc::invalid_argument);
  CHECK(st.modify("derived:score", 0, add(1)).code() == errc::invalid_argument);
  CHECK(st.merge(json{{"derived:x", 1}}).code() == errc::invalid_argument);
  CHECK(st.rename("a", "derived:a").code() == errc::invalid_argument);
  CHECK(st.rename("derived:score", "b").code() == errc::invalid_argument);
  // An empty key is refused too.
  CHECK(st.set("", json(1)).code() == errc::invalid_argument);
  CHECK(st.remove("").code() == errc::invalid_argument);
  CHECK(st.modify("", 0, add(1)).code() == errc::invalid_argument);
  CHECK_FALSE(st.dirty());
  CHECK(st.all() == json{{"a", 1}, {"derived:score", 1}});
}

TEST_CASE("N1: derived fallback, a direct key wins") {
  state st{json{{"derived:score", 1},
                {"derived:rank", 5},
                {"derived:app:x", 9},
                {"derived:session:y", 9},
                {"derived:bg:z", 9},
                {"derived:user:u", 9},
                {"derived:temp:t", 9},
                {"derived:ns:w", 7}}};
  // A missing unprefixed key reads its derived: value.
  CHECK(st.get<int>("score", 0) == 1);
  CHECK(st.contains("rank"));
  CHECK(st.get_as<int>("rank").value() == 5);
  // A key with an unknown ':' namespace is a plain session key: it falls back.
  CHECK(st.get<int>("ns:w", 0) == 7);
  // Keys of an N1 namespace never fall back.
  CHECK_FALSE(st.contains("app:x"));
  CHECK_FALSE(st.contains("session:y"));
  CHECK_FALSE(st.contains("bg:z"));
  CHECK_FALSE(st.contains("user:u"));
  CHECK_FALSE(st.contains("temp:t"));
  CHECK_FALSE(st.contains("derived:derived:score"));
  // A direct key wins, pending or snapshot.
  REQUIRE(st.set("score", json(2)).ok());
  CHECK(st.get<int>("score", 0) == 2);
  CHECK(st.get<int>("derived:score", 0) == 1);
  // Removing the direct key uncovers the derived value again.
  REQUIRE(st.remove("score").ok());
  CHECK(st.get<int>("score", 0) == 1);
  state snap{json{{"derived:score", 1}, {"score", 3}}};
  CHECK(snap.get<int>("score", 0) == 3);
  // keys()/all() list what is there, without synthesized fallbacks.
  CHECK(snap.keys() == names{"derived:score", "score"});
}

TEST_CASE("N2: scoped accessors for app, user, session, temp, turn and bg") {
  using accessor = scoped_state (state::*)();
  const std::vector<std::pair<accessor, std::string>> scopes = {
    {&state::app, "app:"},   {&state::user, "user:"}, {&state::session, "session:"},
    {&state::temp, "temp:"}, {&state::turn, "turn:"}, {&state::bg, "bg:"}};
  for (const auto& [get_scope, prefix] : scopes) {
    CAPTURE(prefix);
    state st{json{{prefix + "old", 1}, {"other", 2}, {"derived:" + prefix + "d", 3}}};
    scoped_state sc = (st.*get_scope)();
    CHECK(sc.prefix() == prefix);
    CHECK(sc.contains("old"));
    CHECK_FALSE(sc.contains("other"));
    CHECK_FALSE(sc.contains("d")); // no derived fallback for prefixed keys
    REQUIRE(sc.find("old") != nullptr);
    CHECK(*sc.find("old") == 1);
    CHECK(sc.get("old") == json(1));
    CHECK(sc.get("nope", json("fb")) == json("fb"));
    CHECK(sc.get<int>("old", 0) == 1);
    CHECK(sc.get<int>("nope", 42) == 42);

    REQUIRE(sc.set("b", json("x")).ok());
    CHECK(st.get(prefix + "b") == json("x"));
    CHECK(st.pending().set == json{{prefix + "b", "x"}});
    REQUIRE(st.set(prefix + "a", json(true)).ok());
    CHECK(sc.get<bool>("a", false));
    CHECK(sc.keys() == names{"a", "b", "old"});
    CHECK(sc.all() == json{{"a", true}, {"b", "x"}, {"old", 1}});

    REQUIRE(sc.remove("old").ok());
    CHECK_FALSE(st.contains(prefix + "old"));
    CHECK(st.pending().remove == names{prefix + "old"});
    CHECK(sc.keys() == names{"a", "b"});
    CHECK(st.get("other") == json(2)); // untouched
  }
}

TEST_CASE("N2: scoped writes follow the state's rules") {
  state st;
  CHECK(st.session().set("k", json(1)).ok());
  CHECK(st.get("session:k") == json(1));
  // The session: and plain namespaces are distinct keys.
  CHECK_FALSE(st.contains("k"));
  CHECK(st.keys() == names{"session:k"});
  CHECK(st.app().keys().empty());
}

TEST_CASE("N2: derived() is a read-only view of derived: keys") {
  static_assert(!has_set<derived_view>::value, "derived_view must not write");
  static_assert(!has_remove<derived_view>::value, "derived_view must not remove");
  static_assert(has_set<scoped_state>::value, "the detector works");

  const state st{json{{"derived:score", 1}, {"derived:tags", {"a"}}, {"score", 2}, {"x", 3}}};
  derived_view d = st.derived();
  CHECK(d.contains("score"));
  CHECK_FALSE(d.contains("x"));
  REQUIRE(d.find("score") != nullptr);
  CHECK(*d.find("score") == 1); // the derived value, not the direct one
  CHECK(d.get("tags") == json{"a"});
  CHECK(d.get("nope", json(0)) == json(0));
  CHECK(d.keys() == names{"score", "tags"});
  CHECK(d.all() == json{{"score", 1}, {"tags", {"a"}}});
}

TEST_CASE("I1: modify previews its result and records the op, not a set") {
  state st{json{{"user:visits", 2}}};
  int calls = 0;
  auto r = st.modify("user:visits", 0, [&calls](const json& v) {
    ++calls;
    return plus(v, 1);
  });
  REQUIRE(r.ok());
  CHECK(*r == 3);
  CHECK(calls == 1);
  CHECK(st.get<int>("user:visits", 0) == 3); // reads see the preview
  CHECK(st.dirty());
  CHECK(st.pending().set == json::object());
  CHECK(st.pending().remove.empty());
  REQUIRE(st.pending().modify.size() == 1);
  const state_modify& m = st.pending().modify[0];
  CHECK(m.key == "user:visits");
  CHECK(m.fallback == json(0));
  // It is the same function: the store writer re-runs it on the committed value.
  REQUIRE(m.fn);
  CHECK(m.fn(json(40)) == json(41));
  CHECK(calls == 2);

  // A second modify builds on the preview and is recorded in call order.
  auto r2 = st.modify("user:visits", 0, add(10));
  REQUIRE(r2.ok());
  CHECK(*r2 == 13);
  REQUIRE(st.pending().modify.size() == 2);
  CHECK(st.pending().modify[1].fn(json(0)) == json(10));

  // A missing key starts from the fallback, which is recorded.
  auto r3 = st.modify("app:n", 100, add(1));
  REQUIRE(r3.ok());
  CHECK(*r3 == 101);
  REQUIRE(st.pending().modify.size() == 3);
  CHECK(st.pending().modify[2].key == "app:n");
  CHECK(st.pending().modify[2].fallback == json(100));
  CHECK(st.pending().set == json::object());
}

TEST_CASE("I1: modify starts from the direct value, not the derived fallback") {
  state st{json{{"derived:n", 50}}};
  auto r = st.modify("n", 1, add(1));
  REQUIRE(r.ok());
  CHECK(*r == 2);
  CHECK(st.get<int>("n", 0) == 2);
  CHECK(st.derived().get("n") == json(50));
}

TEST_CASE("I1: modify on temp: and turn: keys is recorded as a set") {
  state st{json{{"temp:n", 1}}};
  auto r = st.modify("temp:n", 0, add(1));
  REQUIRE(r.ok());
  CHECK(*r == 2);
  auto r2 = st.modify("turn:m", 10, add(5));
  REQUIRE(r2.ok());
  CHECK(*r2 == 15);
  CHECK(st.pending().modify.empty());
  CHECK(st.pending().set == json{{"temp:n", 2}, {"turn:m", 15}});
  CHECK(st.get("temp:n") == json(2));
}

TEST_CASE("I1: modify after a set or a remove of the key is recorded as a set") {
  state st{json{{"k", 1}, {"j", 7}}};
  REQUIRE(st.set("k", json(5)).ok());
  auto r = st.modify("k", 0, add(1));
  REQUIRE(r.ok());
  CHECK(*r == 6);
  CHECK(st.pending().modify.empty());
  CHECK(st.pending().set == json{{"k", 6}});

  // After a remove the key is missing: fn sees the fallback.
  REQUIRE(st.remove("j").ok());
  auto r2 = st.modify("j", 10, add(1));
  REQUIRE(r2.ok());
  CHECK(*r2 == 11);
  CHECK(st.pending().modify.empty());
  CHECK(st.pending().set == json{{"j", 11}, {"k", 6}});
  CHECK(st.pending().remove.empty());
  CHECK(st.get("j") == json(11));
}

TEST_CASE("I1: a set or remove after a modify supersedes the recorded modify") {
  state st{json{{"a", 1}, {"b", 1}, {"c", 1}}};
  REQUIRE(st.modify("a", 0, add(1)).ok());
  REQUIRE(st.modify("b", 0, add(1)).ok());
  REQUIRE(st.modify("c", 0, add(1)).ok());
  REQUIRE(st.pending().modify.size() == 3);
  REQUIRE(st.set("a", json(100)).ok());
  REQUIRE(st.remove("b").ok());
  REQUIRE(st.pending().modify.size() == 1);
  CHECK(st.pending().modify[0].key == "c");
  CHECK(st.pending().set == json{{"a", 100}});
  CHECK(st.pending().remove == names{"b"});
  CHECK(st.get("a") == json(100));
  CHECK_FALSE(st.contains("b"));
  CHECK(st.get("c") == json(2));
}

TEST_CASE("I1: a throwing or empty modify fn is an error naming the key; nothing recorded") {
  state st{json{{"n", 1}}};
  auto r = st.modify("n", 0, [](const json&) -> json { throw std::runtime_error("boom"); });
  REQUIRE_FALSE(r.ok());
  CHECK(r.code() == errc::invalid_argument);
  CHECK(mentions(r.err(), "'n'"));
  CHECK(mentions(r.err(), "boom"));

  auto r2 = st.modify("n", 0, [](const json&) -> json { throw 42; });
  CHECK(r2.code() == errc::invalid_argument);
  CHECK(mentions(r2.err(), "'n'"));

  // nlohmann's own exceptions inside fn are caught too.
  auto r3 = st.modify("n", 0, [](const json& v) -> json { return v.get<std::string>(); });
  CHECK(r3.code() == errc::invalid_argument);

  auto r4 = st.modify("n", 0, nullptr);
  CHECK(r4.code() == errc::invalid_argument);
  CHECK(mentions(r4.err(), "'n'"));

  CHECK_FALSE(st.dirty());
  CHECK(st.get("n") == json(1));
  CHECK(st.all() == json{{"n", 1}});
}

TEST_CASE("I1: commit returns the change and folds it into the snapshot") {
  state st{json{{"a", 1}, {"b", 2}, {"user:n", 5}}};
  REQUIRE(st.set("a", json(10)).ok());
  REQUIRE(st.set("c", json(3)).ok());
  REQUIRE(st.remove("b").ok());
  REQUIRE(st.modify("user:n", 0, add(1)).ok());

  state_change c = st.commit();
  CHECK(c.set == json{{"a", 10}, {"c", 3}});
  CHECK(c.remove == names{"b"});
  REQUIRE(c.modify.size() == 1);
  CHECK(c.modify[0].key == "user:n");
  CHECK(c.modify[0].fn(json(0)) == json(1));
  CHECK_FALSE(c.empty());

  CHECK_FALSE(st.dirty());
  CHECK(st.pending().empty());
  CHECK(st.all() == json{{"a", 10}, {"c", 3}, {"user:n", 6}});
  // Part of the snapshot now: a rollback does not undo it.
  st.rollback();
  CHECK(st.all() == json{{"a", 10}, {"c", 3}, {"user:n", 6}});
  // A second commit is empty.
  CHECK(st.commit().empty());
}

TEST_CASE("I1: rollback restores removed keys") {
  state st{json{{"a", 1}, {"user:b", {{"deep", true}}}, {"temp:t", "x"}}};
  REQUIRE(st.remove("a").ok());
  REQUIRE(st.user().remove("b").ok());
  REQUIRE(st.clear_prefix("temp:").value() == 1);
  CHECK(st.keys().empty());
  st.rollback();
  CHECK_FALSE(st.dirty());
  CHECK(st.get("a") == json(1));
  CHECK(st.get("user:b") == json{{"deep", true}});
  CHECK(st.get("temp:t") == json("x"));
  CHECK(st.keys() == names{"a", "temp:t", "user:b"});
}

TEST_CASE("I1: rollback reverts sets and modify previews") {
  state st{json{{"a", 1}, {"n", 5}}};
  REQUIRE(st.set("a", json(2)).ok());
  REQUIRE(st.set("new", json(3)).ok());
  REQUIRE(st.modify("n", 0, add(1)).ok());
  REQUIRE(st.get("n") == json(6));
  st.rollback();
  CHECK_FALSE(st.dirty());
  CHECK(st.pending().set == json::object());
  CHECK(st.pending().modify.empty());
  CHECK(st.get("a") == json(1));
  CHECK(st.get("n") == json(5));
  CHECK_FALSE(st.contains("new"));
  CHECK(st.all() == json{{"a", 1}, {"n", 5}});
}

TEST_CASE("I1: apply_committed folds in a committed change; pending writes still win") {
  state st{json{{"a", 1}, {"gone", 1}, {"k", 0}, {"r", 0}}};
  REQUIRE(st.set("k", json("mine")).ok());
  REQUIRE(st.remove("r").ok());
  st.apply_committed(json{{"a", 2}, {"k", "theirs"}, {"r", "theirs"}, {"b", 3}}, {"gone"});
  CHECK(st.get("a") == json(2));
  CHECK(st.get("b") == json(3));
  CHECK_FALSE(st.contains("gone"));
  CHECK(st.get("k") == json("mine")); // pending set wins
  CHECK_FALSE(st.contains("r")); // pending remove wins
  // Pending is untouched.
  CHECK(st.pending().set == json{{"k", "mine"}});
  CHECK(st.pending().remove == names{"r"});
  // Underneath, the snapshot holds the committed values.
  st.rollback();
  CHECK(st.all() == json{{"a", 2}, {"b", 3}, {"k", "theirs"}, {"r", "theirs"}});
  // A non-object delta is ignored; removes still apply.
  st.apply_committed(json::array({1}), {"a"});
  CHECK(st.all() == json{{"b", 3}, {"k", "theirs"}, {"r", "theirs"}});
}

TEST_CASE("I1: drop_invocation_keys drops temp: and turn: keys, snapshot and pending") {
  state st{json{{"temp:a", 1}, {"turn:b", 2}, {"x", 3}, {"temp:gone", 4}}};
  REQUIRE(st.set("temp:c", json(5)).ok());
  REQUIRE(st.modify("turn:d", 0, add(1)).ok()); // recorded as a set
  REQUIRE(st.remove("temp:gone").ok());
  REQUIRE(st.set("y", json(6)).ok());
  REQUIRE(st.remove("x").ok());
  REQUIRE(st.modify("user:n", 0, add(1)).ok());
  st.drop_invocation_keys();
  CHECK(st.keys() == names{"user:n", "y"});
  CHECK(st.pending().set == json{{"y", 6}});
  CHECK(st.pending().remove == names{"x"});
  REQUIRE(st.pending().modify.size() == 1);
  CHECK(st.pending().modify[0].key == "user:n");
  st.rollback();
  CHECK(st.all() == json{{"x", 3}}); // the temp: snapshot keys are gone too
}

TEST_CASE("I1: merge sets every member, all or nothing") {
  state st{json{{"a", 1}}};
  REQUIRE(st.merge(json{{"a", 2}, {"user:b", 3}}).ok());
  CHECK(st.get("a") == json(2));
  CHECK(st.get("user:b") == json(3));
  CHECK(st.pending().set == json{{"a", 2}, {"user:b", 3}});

  // One bad key: nothing of this merge is applied.
  auto bad = st.merge(json{{"c", 1}, {"derived:z", 1}, {"zz", 1}});
  CHECK(bad.code() == errc::invalid_argument);
  CHECK(mentions(bad.err(), "derived:z"));
  auto empty_key = st.merge(json{{"", 1}, {"c", 1}});
  CHECK(empty_key.code() == errc::invalid_argument);
  CHECK_FALSE(st.contains("c"));
  CHECK_FALSE(st.contains("zz"));

  // Not an object.
  CHECK(st.merge(json::array({1, 2})).code() == errc::invalid_argument);
  CHECK(st.merge(json(nullptr)).code() == errc::invalid_argument);
  CHECK(st.merge(json::object()).ok());
  CHECK(st.pending().set == json{{"a", 2}, {"user:b", 3}});
  CHECK(st.pending().remove.empty());
}

TEST_CASE("I1: rename moves a value: a set of `to` and a remove of `from`") {
  state st{json{{"a", {{"v", 1}}}, {"derived:d", 1}, {"same", 5}}};
  REQUIRE(st.rename("a", "user:a").ok());
  CHECK_FALSE(st.contains("a"));
  CHECK(st.get("user:a") == json{{"v", 1}});
  CHECK(st.pending().set == json{{"user:a", {{"v", 1}}}});
  CHECK(st.pending().remove == names{"a"});

  // A pending value can be renamed again.
  REQUIRE(st.rename("user:a", "app:a").ok());
  CHECK(st.get("app:a") == json{{"v", 1}});
  CHECK(st.pending().set == json{{"app:a", {{"v", 1}}}});
  CHECK(st.pending().remove == names{"a", "user:a"});

  // Missing (or only removed) `from`: not_found naming it.
  auto missing = st.rename("nope", "x");
  CHECK(missing.code() == errc::not_found);
  CHECK(mentions(missing.err(), "'nope'"));
  CHECK(st.rename("a", "x").code() == errc::not_found);
  // A derived: fallback value is not moved.
  CHECK(st.rename("d", "x").code() == errc::not_found);
  CHECK_FALSE(st.contains("x"));
  // Into derived: is refused.
  CHECK(st.rename("app:a", "derived:a").code() == errc::invalid_argument);
  CHECK(st.contains("app:a"));

  // from == to: a no-op success.
  state st2{json{{"same", 5}}};
  CHECK(st2.rename("same", "same").ok());
  CHECK_FALSE(st2.dirty());
  CHECK(st2.get("same") == json(5));
}

TEST_CASE("I1: clear_prefix removes every present key with the prefix") {
  state st{json{{"user:a", 1}, {"user:b", 2}, {"usera", 3}, {"x", 4}, {"derived:user:q", 5}}};
  REQUIRE(st.set("user:c", json(6)).ok());
  auto n = st.clear_prefix("user:");
  REQUIRE(n.ok());
  CHECK(*n == 3);
  CHECK(st.keys() == names{"derived:user:q", "usera", "x"});
  CHECK(st.pending().set == json::object());
  CHECK(st.pending().remove == names{"user:a", "user:b", "user:c"});

  auto none = st.clear_prefix("nomatch");
  REQUIRE(none.ok());
  CHECK(*none == 0);
  CHECK(st.pending().remove == names{"user:a", "user:b", "user:c"});
}

TEST_CASE("I1: clear_prefix refuses derived: and any prefix of it") {
  for (std::string p : {"derived:", "", "d", "derived", "derived:x"}) {
    CAPTURE(p);
    state st{json{{"derived:x", 1}, {"d", 2}, {"a", 3}}};
    auto r = st.clear_prefix(p);
    CHECK(r.code() == errc::invalid_argument);
    CHECK_FALSE(st.dirty());
    CHECK(st.keys() == names{"a", "d", "derived:x"});
  }
  state st{json{{"dx", 1}, {"derived:x", 2}}};
  auto r = st.clear_prefix("dx");
  REQUIRE(r.ok());
  CHECK(*r == 1);
  CHECK(st.keys() == names{"derived:x"});
}

TEST_CASE("I1: pick returns the present keys among those asked for") {
  state st{json{{"a", 1}, {"b", 2}, {"derived:s", 9}, {"user:u", 3}}};
  REQUIRE(st.set("c", json(4)).ok());
  REQUIRE(st.remove("b").ok());
  CHECK(st.pick({"a", "b", "c", "missing", "user:u"}) == json{{"a", 1}, {"c", 4}, {"user:u", 3}});
  // An unprefixed key reads through its derived: fallback, under the asked name.
  CHECK(st.pick({"s"}) == json{{"s", 9}});
  CHECK(st.pick({}) == json::object());
}

TEST_CASE("I1: snapshot_values and diff_values round trip") {
  state st{json{{"a", 1}, {"b", {1, 2}}, {"c", "keep"}, {"user:d", true}}};
  const json before = snapshot_values(st);
  CHECK(before == st.all());
  REQUIRE(st.set("a", json(2)).ok());
  REQUIRE(st.remove("b").ok());
  REQUIRE(st.set("e", json::object()).ok());
  REQUIRE(st.modify("user:d", false, [](const json& v) { return !v.get<bool>(); }).ok());
  const json after = snapshot_values(st);
  CHECK(after == json{{"a", 2}, {"c", "keep"}, {"e", json::object()}, {"user:d", false}});

  state_change d = diff_values(before, after);
  CHECK(d.set == json{{"a", 2}, {"e", json::object()}, {"user:d", false}});
  CHECK(d.remove == names{"b"});
  CHECK(d.modify.empty());

  // Applying the diff to `before` yields `after`, as a committed change ...
  state replay{before};
  replay.apply_committed(d.set, d.remove);
  CHECK(replay.all() == after);
  // ... and as pending writes.
  state replay2{before};
  REQUIRE(replay2.merge(d.set).ok());
  for (const auto& k : d.remove)
    REQUIRE(replay2.remove(k).ok());
  CHECK(replay2.all() == after);

  // Equal snapshots: an empty change.
  CHECK(diff_values(after, after).empty());
  // Named keys: pick semantics.
  CHECK(snapshot_values(st, {"a", "b", "zz"}) == json{{"a", 2}});
}

TEST_CASE("I1: diff_values treats non-objects as empty") {
  state_change add_all = diff_values(json(nullptr), json{{"a", 1}, {"b", 2}});
  CHECK(add_all.set == json{{"a", 1}, {"b", 2}});
  CHECK(add_all.remove.empty());
  state_change rm_all = diff_values(json{{"b", 1}, {"a", 1}}, json::array({1}));
  CHECK(rm_all.set == json::object());
  CHECK(rm_all.remove == names{"a", "b"});
  CHECK(diff_values(json(1), json("x")).empty());
}

TEST_CASE("I1: keys() and all() merge snapshot, removes and pending writes, sorted") {
  state st{json{{"m", 1}, {"b", 2}, {"z", 3}}};
  REQUIRE(st.set("a", json(0)).ok());
  REQUIRE(st.remove("m").ok());
  REQUIRE(st.modify("z", 0, add(1)).ok());
  CHECK(st.keys() == names{"a", "b", "z"});
  CHECK(st.all() == json{{"a", 0}, {"b", 2}, {"z", 4}});
}

TEST_CASE("I1: no member throws on hostile values") {
  state st{json{{"arr", {1, 2}}, {"obj", {{"k", nullptr}}}, {"s", "text"}}};
  CHECK_NOTHROW(st.get_as<int>("arr"));
  CHECK(st.get_as<int>("obj").code() == errc::invalid_argument);
  CHECK(st.get_as<std::vector<int>>("arr").value() == std::vector<int>{1, 2});
  CHECK_NOTHROW(st.get<std::string>("obj", std::string()));
  CHECK(st.modify("s", 0, add(1)).code() == errc::invalid_argument); // fn's type_error
  CHECK_FALSE(st.dirty());
}
