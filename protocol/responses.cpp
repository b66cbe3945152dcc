// SPDX-License-Identifier: Apache-2.0
#include "protocol/responses.hpp"

#include <utility>

namespace agentstate::protocol::detail {

namespace {

std::string dump_lossy(const json& x) {
  // Values came from the validating parser or the engine; `replace` only
  // guards against a message quoting bytes of a malformed line.
  return x.dump(-1, ' ', false, json::error_handler_t::replace);
}

} // namespace

rpc_failure make_failure(int code, std::string message, errc kind) {
  return rpc_failure{code, std::move(message), to_string(kind), std::nullopt};
}

rpc_failure from_engine(const error& e) {
  return rpc_failure{rpc_code::engine_error, e.message, to_string(e.code), e.current_version};
}

rpc_failure internal_failure(const char* where, const char* what) {
  return make_failure(rpc_code::engine_error, std::string("server error in ") + where + ": " + what,
                      errc::internal);
}

std::string response_line(const json& id, const outcome& o) {
  std::string out = R"({"jsonrpc":"2.0","id":)";
  out += dump_lossy(id);
  if (auto r = std::get_if<json>(&o)) {
    out += R"(,"result":)";
    out += dump_lossy(*r);
  } else if (auto raw = std::get_if<raw_result>(&o)) {
    out += R"(,"result":)";
    out += raw->text;
  } else {
    const auto& f = std::get<rpc_failure>(o);
    json data{{"kind", f.kind}};
    if (f.current_version)
      data["current_version"] = *f.current_version;
    json err{{"code", f.code}, {"message", f.message}, {"data", std::move(data)}};
    out += R"(,"error":)";
    out += dump_lossy(err);
  }
  out += '}';
  return out;
}

outcome to_outcome(result<void>& r) {
  if (!r)
    return from_engine(r.err());
  return outcome{json(nullptr)};
}

} // namespace agentstate::protocol::detail
