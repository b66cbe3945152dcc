// SPDX-License-Identifier: Apache-2.0
// tools/serve_cluster_flags.cpp: serve's cluster options (docs/cluster.md).
#include "tools/serve_cluster.hpp"

#include "cluster/node.hpp"
#include "tools/cli.hpp"

namespace agentstate::tools {

void add_cluster_flags(command_line& cl, cluster_flags& f) {
  const std::string group = "cluster (docs/cluster.md)";
  cl.app.add_option("--cluster", f.cluster, "join this cluster as a node (with --etcd, --node-id)")
    ->type_name("NAME")
    ->group(group);
  cl.app.add_option("--etcd", f.etcd, "etcd's client URLs, comma-separated")
    ->type_name("URLS")
    ->group(group);
  cl.app.add_option("--node-id", f.node_id, "this node's id in the cluster, for good")
    ->type_name("ID")
    ->group(group);
  cl.app
    .add_option("--advertise", f.advertise,
                "HOST:PORT others reach this node at (default: the\nfirst TCP --listen)")
    ->type_name("HOST:PORT")
    ->group(group);
  cl.app
    .add_flag("--no-forward", f.no_forward,
              "answer a request for another node's shard with\n"
              "`moved` (its owner's address) instead of forwarding it")
    ->group(group);
  cl.app
    .add_option("--node-token-file", f.node_token_file,
                "with --auth-file: the token this node presents to\n"
                "the other nodes (one granting '*')")
    ->type_name("FILE")
    ->group(group);
  cl.app
    .add_option("--peer-tls-ca", f.peer_tls_ca,
                "with TLS: the CAs the other nodes' certificates are\n"
                "checked against")
    ->type_name("FILE")
    ->group(group);
  cl.app
    .add_option("--lease-ttl-s", f.lease_ttl_s,
                "the node's lease in etcd, in seconds (default 5):\n"
                "it stops serving this long after it last reached etcd")
    ->type_name("N")
    ->group(group);
  cl.app
    .add_option("--lag-timeout-ms", f.lag_timeout_ms,
                "with replicas: a follower that has not applied what this\n"
                "node sent within this long leaves the shard's in-sync set\n"
                "(default 1000)")
    ->type_name("MS")
    ->group(group);
}

std::string check_cluster_flags(const cli_app& app, cluster_flags& f, bool tcp_listener) {
  for (const char* name :
       {"--cluster", "--etcd", "--node-id", "--advertise", "--no-forward", "--lease-ttl-s",
        "--node-token-file", "--peer-tls-ca", "--lag-timeout-ms"})
    if (app.get_option(name)->count() > 0)
      f.given = true;
  if (!f.given)
    return "";
  if (f.cluster.empty() || f.etcd.empty() || f.node_id.empty())
    return "a cluster node needs --cluster, --etcd and --node-id";
  if (!tcp_listener)
    return "a cluster node needs a TCP --listen that clients and other nodes reach";
  if (f.peers_need_token && f.node_token_file.empty())
    return "a node with --auth-file reaches the other nodes (app: state at its home, "
           "forwarding) with --node-token-file FILE: a token the other nodes grant '*'";
  if (f.peers_use_tls && f.peer_tls_ca.empty())
    return "a node with TLS reaches the other nodes (app: state at its home, forwarding) with "
           "--peer-tls-ca FILE: the CAs of the other nodes' certificates";
  if (f.lease_ttl_s < 1 || f.lease_ttl_s > 3600)
    return "--lease-ttl-s must be an integer 1..3600";
  if (f.lag_timeout_ms < 10 || f.lag_timeout_ms > 600000)
    return "--lag-timeout-ms must be an integer 10..600000";
  if (auto why = cluster::check_name("cluster name", f.cluster); !why.empty())
    return why;
  if (auto why = cluster::check_name("node id", f.node_id); !why.empty())
    return why;
  return "";
}

} // namespace agentstate::tools
