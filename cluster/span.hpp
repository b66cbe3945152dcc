// SPDX-License-Identifier: Apache-2.0
// cluster/span.hpp: the answer of a request that a node runs across the
// cluster's nodes (protocol::route_refusal::span), made of the nodes' own
// answers: a listing's pages merged in order, change feeds merged under a
// cursor of their own (docs/cluster.md, "Across nodes"), and a session's
// answer with the app: state read at the app's home.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agentstate/json.hpp"
#include "protocol/rpc_session.hpp"

namespace agentstate::cluster {

/// An error answer of kind `kind` (code invalid_params for invalid_argument,
/// else engine_error).
protocol::span_answer span_error(const std::string& kind, const std::string& message);

/// The first part's error (parts in order), or nullopt when every part
/// succeeded.
std::optional<protocol::span_answer> first_error(std::vector<protocol::span_answer>& parts);

/// list_sessions of an app across nodes, `params` the request's: the parts'
/// pages (each listed with session_tokens, so every session carries the
/// token that continues after it) merged in the listing's order. A part with
/// more sessions than it sent bounds the page at its last one (nothing after
/// it is known), so every session of every part is listed exactly once
/// across the pages; the next page token is the last listed session's own.
/// The page holds at most page_size sessions and ends early (with a token)
/// before its sessions' JSON passes `max_bytes` (one session at least).
/// `offset` is invalid_argument; include_total adds the parts' totals; with
/// shared_state "once" the parts' app_state and the listed users'
/// user_states are joined. The first part's error, if any, is the answer.
/// With `keep`, a session of part i that keep(i, session) refuses is passed
/// over as if listed (the page may then hold fewer; its token still moves
/// past it): what a node holds of a shard it does not own.
protocol::span_answer
merge_pages(const json& params, std::vector<protocol::span_answer> parts, std::size_t max_bytes,
            const std::function<bool(std::size_t part, const json& session)>& keep = {});

/// A read across nodes answers cursors of their own: "nodes:" then
/// NODE=CURSOR for each node read so far (that node's own feed cursor),
/// comma-separated, in node id order. nullopt when `text` is not one.
std::optional<std::map<std::string, std::string>> parse_merged_cursor(std::string_view text);
std::string merged_cursor(const std::map<std::string, std::string>& at);

/// `merged` with node `node`'s entry set to `cursor` (that node's own feed
/// cursor), the other entries kept: what a watch across nodes answers after
/// relaying a change or batch of that node. An empty `merged`, or one that
/// is not a merged cursor, is taken as naming no node.
std::string with_node_cursor(std::string_view merged, const std::string& node,
                             const std::string& cursor);

/// read_changes across nodes, `params` the request's: parts[i] read node
/// ids[i]'s own feed after its entry of the request's merged cursor `from`
/// (from its oldest change without one). Changes are taken one from each
/// part in turn up to `limit`, so a busy node does not hold back the
/// others; each change's cursor, and the answer's, is the merged cursor as
/// of that change (a node's entry moves past what was taken from it, to its
/// part's cursor once all of it was), so resuming from any of them misses
/// and repeats nothing. at_head: every part at its head and all taken. A
/// `from` that is not a merged cursor is invalid_argument; a part's
/// cursor_expired answers with data.oldest as the merged cursor that
/// resumes at that node's oldest change.
protocol::span_answer merge_changes(const json& params, std::vector<protocol::span_answer> parts,
                                    const std::vector<std::string>& ids);

/// `state` (a session's merged state) with its app: keys replaced by
/// those of `app` (get_app_state's form: keys without the prefix).
void put_app_state(json& state, const json& app);

/// route_refusal::then of `method` on a session of app `app_name`: its
/// `result` with the app: state the step (get_app_state at the app's home)
/// read, in each session's `state` (or in the page's `app_state`), or the
/// step's error, saying what it was reading. Throws when the step's result
/// is not an object.
protocol::span_answer with_app_state(const std::string& method, const std::string& app_name,
                                     json result, protocol::span_answer step);

} // namespace agentstate::cluster
