// SPDX-License-Identifier: Apache-2.0
// protocol/responses.hpp: the response line built in a raw result's own
// buffer (response_line(id, outcome&&)) is byte for byte the line of the
// general builder, whatever the id and the result.
#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "protocol/responses.hpp"

namespace {

using namespace agentstate;
using namespace agentstate::protocol::detail;

std::string moved_line(const json& id, const outcome& o) {
  outcome copy = o;
  return response_line(id, std::move(copy));
}

} // namespace

TEST_CASE("response_line: a raw result's line built in place equals the general line") {
  const std::vector<json> ids{json(0),
                              json(7),
                              json(-42),
                              json(std::numeric_limits<std::uint64_t>::max()),
                              json(std::numeric_limits<std::int64_t>::min()),
                              json("a-string"),
                              json("caf\xc3\xa9\"quoted\""),
                              json(nullptr)};
  const std::vector<std::string> texts{R"({"version":3})", "null", "[]",
                                       std::string(100000, ' ') + "1"};
  for (const auto& id : ids)
    for (const auto& text : texts) {
      outcome o = raw_result{text};
      INFO("id: ", id.dump());
      auto line = moved_line(id, o);
      CHECK(line == response_line(id, o));
      CHECK(json::parse(line)["id"] == id);
    }
}

TEST_CASE("response_line: other outcomes by move equal the general line") {
  rpc_failure f = make_failure(agentstate::protocol::rpc_code::invalid_params, "bad \xff bytes",
                               errc::invalid_argument);
  f.current_version = 4;
  for (const outcome& o : {outcome{json{{"a", 1}}}, outcome{f}})
    for (const json& id : {json(1), json("x")})
      CHECK(moved_line(id, o) == response_line(id, o));
}
