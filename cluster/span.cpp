// SPDX-License-Identifier: Apache-2.0
// cluster/span.cpp: answers of requests across nodes, merged (span.hpp).
#include "cluster/span.hpp"

#include <stdexcept>

#include <algorithm>
#include <utility>

#include "cluster/coordinator.hpp"

namespace agentstate::cluster {

namespace {

constexpr std::string_view merged_cursor_head = "nodes:";

/// A page token's position in its listing: the hex of the index key after
/// the listing's prefix (between the format and shape bytes and the CRC).
/// Hex keeps byte order, so positions compare as the store's keys do.
std::string_view token_position(const json& token) {
  if (!token.is_string())
    return {};
  std::string_view t = token.get_ref<const std::string&>();
  return t.size() < 12 ? std::string_view() : t.substr(4, t.size() - 12);
}

} // namespace

protocol::span_answer span_error(const std::string& kind, const std::string& message) {
  int code = kind == "invalid_argument" ? protocol::rpc_code::invalid_params
                                        : protocol::rpc_code::engine_error;
  return {nullptr, json{{"code", code}, {"message", message}, {"data", {{"kind", kind}}}}};
}

std::optional<protocol::span_answer> first_error(std::vector<protocol::span_answer>& parts) {
  for (auto& p : parts)
    if (!p.error.is_null())
      return protocol::span_answer{nullptr, std::move(p.error)};
  return std::nullopt;
}

protocol::span_answer
merge_pages(const json& params, std::vector<protocol::span_answer> parts, std::size_t max_bytes,
            const std::function<bool(std::size_t part, const json& session)>& keep) {
  if (auto e = first_error(parts))
    return *e;
  if (params.value("offset", std::uint64_t{0}) > 0)
    return span_error("invalid_argument",
                      "'offset' is not served for a listing across nodes: page with "
                      "'page_token' (or list one user's sessions)");
  const bool desc = params.value("order", std::string()) == "desc";
  const std::size_t page_size = params.value("page_size", std::size_t{100});
  const bool keep_tokens = params.value("session_tokens", false);
  const bool once = params.value("shared_state", std::string()) == "once";
  struct item {
    std::string_view position;
    json* session;
    const json* user_states;
    bool kept;
  };
  std::vector<item> all;
  // A copy: the session it comes from gives up its token when listed.
  std::optional<std::string> bound;
  std::uint64_t total = 0;
  json app_state = json::object();
  for (std::size_t i = 0; i < parts.size(); ++i) {
    auto& page = parts[i].result;
    auto& sessions = page.at("sessions");
    for (auto& s : sessions)
      all.push_back(
        {token_position(s.at("page_token")), &s, &page["user_states"], !keep || keep(i, s)});
    if (!page.at("next_page_token").is_null() && !sessions.empty()) {
      auto last = token_position(sessions.back().at("page_token"));
      if (!bound || (desc ? last > *bound : last < *bound))
        bound = std::string(last);
    }
    if (auto t = page.find("total"); t != page.end())
      total += t->get<std::uint64_t>();
    if (once)
      app_state.update(page["app_state"]);
  }
  std::stable_sort(all.begin(), all.end(), [desc](const item& a, const item& b) {
    return desc ? a.position > b.position : a.position < b.position;
  });
  json out = json::array(), user_states = json::object();
  json last_token;
  std::size_t bytes = 0;
  bool more = bound.has_value();
  for (auto& it : all) {
    if (bound && (desc ? it.position < *bound : it.position > *bound))
      break; // beyond what a part with more has sent
    if (!it.kept) {
      last_token = (*it.session)["page_token"];
      continue;
    }
    if (out.size() == page_size) {
      more = true;
      break;
    }
    auto size = it.session->dump().size();
    if (!out.empty() && bytes + size > max_bytes) {
      more = true;
      break;
    }
    bytes += size;
    last_token = (*it.session)["page_token"];
    if (!keep_tokens)
      it.session->erase("page_token");
    const auto& user = it.session->at("user_id").get_ref<const std::string&>();
    if (once && it.user_states->is_object() && it.user_states->contains(user))
      user_states[user] = (*it.user_states)[user];
    out.push_back(std::move(*it.session));
  }
  json result{{"sessions", std::move(out)},
              {"next_page_token", more ? std::move(last_token) : json(nullptr)}};
  if (params.value("include_total", false))
    result["total"] = total;
  if (once) {
    result["app_state"] = std::move(app_state);
    result["user_states"] = std::move(user_states);
  }
  return {std::move(result), nullptr};
}

std::optional<std::map<std::string, std::string>> parse_merged_cursor(std::string_view text) {
  std::map<std::string, std::string> out;
  if (text.substr(0, merged_cursor_head.size()) != merged_cursor_head)
    return std::nullopt;
  text.remove_prefix(merged_cursor_head.size());
  while (!text.empty()) {
    auto comma = text.find(',');
    auto entry = text.substr(0, comma);
    auto eq = entry.find('=');
    if (eq == std::string_view::npos || eq == 0 || eq + 1 == entry.size())
      return std::nullopt;
    auto id = std::string(entry.substr(0, eq));
    if (!check_name("node id", id).empty()
        || entry.substr(eq + 1).find_first_of("=,") != std::string_view::npos
        || !out.emplace(std::move(id), std::string(entry.substr(eq + 1))).second)
      return std::nullopt;
    if (comma == std::string_view::npos)
      break;
    text.remove_prefix(comma + 1);
  }
  return out;
}

std::string merged_cursor(const std::map<std::string, std::string>& at) {
  std::string out(merged_cursor_head);
  for (auto& [id, cursor] : at) {
    if (out.size() > merged_cursor_head.size())
      out += ',';
    out += id + '=' + cursor;
  }
  return out;
}

std::string with_node_cursor(std::string_view merged, const std::string& node,
                             const std::string& cursor) {
  auto at = parse_merged_cursor(merged).value_or(std::map<std::string, std::string>());
  at[node] = cursor;
  return merged_cursor(at);
}

protocol::span_answer merge_changes(const json& params, std::vector<protocol::span_answer> parts,
                                    const std::vector<std::string>& ids) {
  std::map<std::string, std::string> at;
  if (auto from = params.find("from"); from != params.end()) {
    auto parsed =
      from->is_string() ? parse_merged_cursor(from->get_ref<const std::string&>()) : std::nullopt;
    if (!parsed)
      return span_error("invalid_argument",
                        "'from' is not a cursor of a read across nodes (one starting \"nodes:\", "
                        "as such a read answers it)");
    at = std::move(*parsed);
  }
  for (std::size_t i = 0; i < parts.size(); ++i) {
    auto& e = parts[i].error;
    if (e.is_null())
      continue;
    // A node's oldest cursor becomes the merged cursor that resumes there.
    if (auto* data = e.contains("data") ? &e["data"] : nullptr; data
        && data->value("kind", "") == "cursor_expired" && data->contains("oldest")
        && (*data)["oldest"].is_string()) {
      auto oldest = at;
      oldest[ids[i]] = (*data)["oldest"].get<std::string>();
      (*data)["oldest"] = merged_cursor(oldest);
    }
    return {nullptr, std::move(e)};
  }
  const std::size_t limit = params.value("limit", std::size_t{100});
  std::vector<std::size_t> next(parts.size(), 0);
  json out = json::array();
  bool taken = true;
  while (taken && out.size() < limit) {
    taken = false;
    for (std::size_t i = 0; i < parts.size() && out.size() < limit; ++i) {
      auto& changes = parts[i].result.at("changes");
      if (next[i] == changes.size())
        continue;
      auto& c = changes[next[i]++];
      const json& moved_to =
        next[i] == changes.size() ? parts[i].result.at("cursor") : c.at("cursor");
      if (moved_to.is_string())
        at[ids[i]] = moved_to.get<std::string>();
      c["cursor"] = merged_cursor(at);
      out.push_back(std::move(c));
      taken = true;
    }
  }
  bool at_head = true;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    auto& r = parts[i].result;
    if (next[i] == r.at("changes").size() && r.at("cursor").is_string())
      at[ids[i]] = r.at("cursor").get<std::string>(); // past what it examined
    at_head = at_head && next[i] == r.at("changes").size() && r.value("at_head", false);
  }
  return {json{{"changes", std::move(out)}, {"cursor", merged_cursor(at)}, {"at_head", at_head}},
          nullptr};
}

void put_app_state(json& state, const json& app) {
  for (auto it = state.begin(); it != state.end();)
    if (it.key().rfind("app:", 0) == 0)
      it = state.erase(it);
    else
      ++it;
  for (auto it = app.begin(); it != app.end(); ++it)
    state["app:" + it.key()] = it.value();
}

protocol::span_answer with_app_state(const std::string& method, const std::string& app_name,
                                     json result, protocol::span_answer step) {
  if (!step.error.is_null()) {
    json e = std::move(step.error);
    if (e.is_object() && e.contains("message") && e["message"].is_string())
      e["message"] = "reading app '" + app_name
        + "''s app: state at its home shard's node: " + e["message"].get<std::string>()
        + (method == "create_session" || method == "fork_session"
             ? " (the " + method + " itself was done)"
             : "");
    return {nullptr, std::move(e)};
  }
  const json& app = step.result;
  if (!app.is_object())
    throw std::runtime_error("the app's home answered get_app_state with no object");
  if (auto st = result.find("state"); st != result.end() && st->is_object())
    put_app_state(*st, app);
  if (auto ss = result.find("sessions"); ss != result.end() && ss->is_array()) {
    if (result.contains("app_state")) {
      json prefixed = json::object();
      put_app_state(prefixed, app);
      result["app_state"] = std::move(prefixed);
    } else {
      for (auto& x : *ss)
        if (auto st = x.find("state"); st != x.end() && st->is_object())
          put_app_state(*st, app);
    }
  }
  return {std::move(result), nullptr};
}

} // namespace agentstate::cluster
