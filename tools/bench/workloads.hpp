// SPDX-License-Identifier: Apache-2.0
// tools/bench/workloads.hpp: the workloads of `agentstate bench`, one file
// each (workload_a.cpp .. workload_j.cpp). Each runs on the calling thread
// against a fresh store (none in memory mode) that it removes before
// returning, and returns its one JSON line (run_ctx::finish): the workload's
// figures, its target and meets_target, and "errors" (nonzero when an engine
// call or a correctness check failed; then also "first_error"). Sizes are
// those of `agentstate bench --help` times cfg.scale. Missed targets are
// reported, never thrown; no workload throws for a failed engine call.
#pragma once

#include "tools/bench/measures.hpp"
#include "tools/bench/run.hpp"

namespace agentstate::tools::bench {

/// One session, sequential awaited appends (blocking API): events/s and ack
/// latency; then the engine's bare round trip ("round_trip"); in sync mode
/// also the ratio to the disk's LMDB commit limit.
ojson workload_a(const config& cfg);

/// Sessions over 100 users, 20 appends each, 64 in flight (async API); then
/// the same on a fresh store from 64 threads on the blocking API ("blocking").
ojson workload_b(const config& cfg);

/// One session of many events: get_session latency whole and of the last 10
/// events, typed and as JSON text (get_session_json, checked against typed).
ojson workload_c(const config& cfg);

/// Sessions x 100 events: RSS growth over the pre-run baseline per 100k events.
ojson workload_d(const config& cfg);

/// Many sessions of one event each (idle_timeout 1 s): load rate, random full
/// reads, peak RSS, close time, and (not in memory mode) reopen time.
ojson workload_e(const config& cfg);

/// Sessions of one app: list_sessions latency of the first page and of a
/// page 90% of the way through, by token; checks the walk counts them all.
ojson workload_f(const config& cfg);

/// Sessions of several users all writing one user: key per user and one app:
/// key; "correct" says the final values are the last acknowledged writes,
/// as read from every scope and session (and after reopen when durable).
ojson workload_g(const config& cfg);

/// The change feed: a watch's delivery latency beside the append's ack;
/// workload b's appends with 0 and with 100 session watches (the ratio);
/// catch-up reads of the whole log.
ojson workload_h(const config& cfg);

/// A session's past: rewind_session and rewind_plan latency on sessions of
/// N and 10N events, and get_session as_of_version half way through them.
ojson workload_i(const config& cfg);

/// A large session deleted while other sessions append: their ack p99
/// during its purge beside the same appends before it.
ojson workload_j(const config& cfg);

/// A cluster's overhead (workload_k.cpp): b's appends through one serve, and
/// through three `serve --cluster` nodes (forwarded by one node; routed to
/// each shard's owner), in one run. Starts its own etcd (needs it on PATH).
ojson workload_k(const config& cfg);

} // namespace agentstate::tools::bench
