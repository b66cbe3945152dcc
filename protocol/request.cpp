// SPDX-License-Identifier: Apache-2.0
#include "protocol/request.hpp"

#include <string>
#include <utility>

namespace agentstate::protocol::detail {

namespace {

decoded_request refused(json id, int code, std::string message, errc kind) {
  decoded_request d;
  d.id = std::move(id);
  d.refusal = make_failure(code, std::move(message), kind);
  return d;
}

} // namespace

decoded_request decode_request(std::string_view line, std::size_t max_depth) {
  if (!line.empty() && line.back() == '\r')
    line.remove_suffix(1);
  auto parsed = parse_json(line, max_depth);
  if (!parsed) {
    auto kind = parsed.code() == errc::too_large ? errc::too_large : errc::invalid_argument;
    return refused(nullptr, rpc_code::parse_error, parsed.err().message, kind);
  }
  json& req = *parsed;
  if (!req.is_object())
    return refused(nullptr, rpc_code::invalid_request,
                   req.is_array() ? "batches (JSON arrays) are not supported: send one "
                                    "request object per line"
                                  : std::string("a request must be a JSON object, not ")
                                      + req.type_name(),
                   errc::invalid_argument);
  decoded_request d;
  d.notification = true;
  if (auto it = req.find("id"); it != req.end()) {
    if (!it->is_string() && !it->is_number() && !it->is_null())
      return refused(nullptr, rpc_code::invalid_request, "'id' must be a number or a string",
                     errc::invalid_argument);
    d.id = *it;
    d.notification = false;
  }
  if (auto it = req.find("jsonrpc"); it == req.end() || *it != "2.0")
    return refused(std::move(d.id), rpc_code::invalid_request, R"('jsonrpc' must be "2.0")",
                   errc::invalid_argument);
  auto m = req.find("method");
  if (m == req.end() || !m->is_string())
    return refused(std::move(d.id), rpc_code::invalid_request, "'method' must be a string",
                   errc::invalid_argument);
  // From here on a notification's problems go unanswered.
  const auto& name = m->get_ref<const std::string&>();
  auto prepare = find_method(name);
  if (!prepare) {
    if (d.notification)
      return d;
    return refused(std::move(d.id), rpc_code::method_not_found, "unknown method '" + name + "'",
                   errc::invalid_argument);
  }
  json params = json::object();
  if (auto it = req.find("params"); it != req.end() && !it->is_null()) {
    if (!it->is_object()) {
      if (d.notification)
        return d;
      return refused(std::move(d.id), rpc_code::invalid_params,
                     "'params' must be an object (parameters by name)", errc::invalid_argument);
    }
    params = std::move(*it);
  }
  auto p = prepare(params);
  if (auto f = std::get_if<rpc_failure>(&p)) {
    if (!d.notification)
      d.refusal = std::move(*f);
    return d;
  }
  d.run = std::move(std::get<prepared>(p));
  return d;
}

} // namespace agentstate::protocol::detail
