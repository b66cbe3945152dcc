// SPDX-License-Identifier: Apache-2.0
#include "tools/remote_flags.hpp"

#include <cstdlib>

#include "tools/watch_remote.hpp"

namespace agentstate::tools {

bool remote_flags::given() const {
  return tls || !tls_ca.empty() || !tls_cert.empty() || !tls_key.empty() || !token_file.empty();
}

void add_remote_flags(command_line& cl, remote_flags& f, const std::string& group,
                      const std::string& whom) {
  cl.app
    .add_option("--token-file", f.token_file,
                "authenticate with the token in FILE (its first word; default: "
                "$AGENTSTATE_TOKEN when set)")
    ->type_name("FILE")
    ->group(group);
  cl.app
    .add_flag("--tls", f.tls, "connect with TLS, verifying " + whom + " against the system's CAs")
    ->group(group);
  cl.app.add_option("--tls-ca", f.tls_ca, "TLS, verifying " + whom + " against this PEM CA file")
    ->type_name("FILE")
    ->group(group);
  cl.app.add_option("--tls-cert", f.tls_cert, "TLS client certificate (PEM; with --tls-key)")
    ->type_name("FILE")
    ->group(group);
  cl.app.add_option("--tls-key", f.tls_key, "its PEM private key")->type_name("FILE")->group(group);
}

std::vector<std::pair<std::string, std::string>> remote_environment(const std::string& when) {
  return {{"AGENTSTATE_TOKEN",
           when + "the token to authenticate with when no --token-file is given (never printed)"},
          {"SSL_CERT_FILE", "with --tls and no --tls-ca: OpenSSL's file of the system's CAs"},
          {"SSL_CERT_DIR", "with --tls and no --tls-ca: OpenSSL's directory of the system's CAs"}};
}

std::string remote_flags::problem() const {
  return tls_cert.empty() != tls_key.empty() ? "--tls-cert and --tls-key go together" : "";
}

result<client_options> client_options_of(const remote_flags& f) {
  client_options o;
  o.tls = f.tls || !f.tls_ca.empty() || !f.tls_cert.empty();
  o.tls_ca = f.tls_ca;
  o.tls_cert = f.tls_cert;
  o.tls_key = f.tls_key;
  if (!f.token_file.empty()) {
    auto t = read_token_file(f.token_file);
    if (!t)
      return std::move(t).err();
    o.token = std::move(*t);
  } else if (const char* env = std::getenv("AGENTSTATE_TOKEN"); env && *env) {
    o.token = env;
  }
  return o;
}

} // namespace agentstate::tools
