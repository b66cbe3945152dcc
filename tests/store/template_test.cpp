// SPDX-License-Identifier: Apache-2.0
// docs/semantics.md I2: inject_state, rule by rule.
#include <doctest/doctest.h>

#include "agentstate/template.hpp"

using namespace agentstate;

namespace {

const json state = {{"name", "Ada"},     {"n", 3},
                    {"flag", true},      {"none", nullptr},
                    {"obj", {{"a", 1}}}, {"app:brand", "acme"},
                    {"user:lang", "en"}, {"temp:draft", "d1"}};

std::string render(std::string_view t) {
  auto r = inject_state(t, state, [](std::string_view name) -> std::optional<std::string> {
    if (name == "notes.txt")
      return std::string("hello file");
    return std::nullopt;
  });
  REQUIRE(r.ok());
  return *r;
}

} // namespace

TEST_CASE("I2 {name} is replaced by the state value; strings raw, others compact JSON") {
  CHECK(render("Hi {name}, n={n}, f={flag}, o={obj}") == R"(Hi Ada, n=3, f=true, o={"a":1})");
  CHECK(render("null renders empty: [{none}]") == "null renders empty: []");
  CHECK(render("{ name }") == "Ada");
}

TEST_CASE("I2 prefixed names: one app:, user: or temp: prefix") {
  CHECK(render("{app:brand}/{user:lang}/{temp:draft}") == "acme/en/d1");
}

TEST_CASE("I2 {name?} is optional; a missing required key is an error naming it") {
  CHECK(render("[{missing?}]") == "[]");
  auto r = inject_state("x {missing} y", state);
  CHECK(r.code() == errc::not_found);
  CHECK(r.err().message.find("'missing'") != std::string::npos);
}

TEST_CASE("I2 {artifact.file} renders the artifact's text") {
  CHECK(render("{artifact.notes.txt}") == "hello file");
  CHECK(render("[{artifact.none.txt?}]") == "[]");
  CHECK(inject_state("{artifact.none.txt}", state).code() == errc::not_found);
}

TEST_CASE("I2 anything else in braces is left verbatim") {
  CHECK(render(R"(json {"a": 1} stays)") == R"(json {"a": 1} stays)");
  CHECK(render("{a-b} {a:b:c} {} {1x} {app:} {x:y}") == "{a-b} {a:b:c} {} {1x} {app:} {x:y}");
  CHECK(render("unclosed {name") == "unclosed {name");
  CHECK(render("nested {{name}}") == "nested {Ada}");
  CHECK(render("}{") == "}{");
}
