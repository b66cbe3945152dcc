// SPDX-License-Identifier: Apache-2.0
// tools/remote_flags.hpp: how a command reaches a running server or node
// (watch ADDR, prune --address, cluster move and drain): --token-file,
// --tls, --tls-ca, --tls-cert, --tls-key, and $AGENTSTATE_TOKEN.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "agentstate/client.hpp"
#include "agentstate/error.hpp"
#include "tools/cli.hpp"

namespace agentstate::tools {

struct remote_flags {
  std::string token_file, tls_ca, tls_cert, tls_key;
  bool tls = false;

  /// Whether any of them is given.
  bool given() const;
  /// The usage problem of the flags together ("" : none).
  std::string problem() const;
};

/// Declares them under the heading `group`; `whom` names what they reach in
/// their help ("the server", "the nodes").
void add_remote_flags(command_line& cl, remote_flags& f, const std::string& group,
                      const std::string& whom);

/// The environment variables they read, each meaning prefixed by `when`
/// ("--address: "), for command_line::environment.
std::vector<std::pair<std::string, std::string>> remote_environment(const std::string& when);

/// client_options with the token and TLS settings `f` gives (the address
/// left empty): TLS when any TLS flag is given; the token of --token-file,
/// else $AGENTSTATE_TOKEN when set. REQUIRES: f.problem() is "". Errors: the
/// token file's.
result<client_options> client_options_of(const remote_flags& f);

} // namespace agentstate::tools
