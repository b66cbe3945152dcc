// SPDX-License-Identifier: Apache-2.0
// `agentstate console`: the web console (docs/console.md) on a store no
// server holds: opens the store as `serve` would and serves only the console.
#include <pthread.h>
#include <signal.h>

#include <memory>
#include <string>

#include "agentstate/engine.hpp"
#include "console/console.hpp"
#include "protocol/auth.hpp"
#include "server/address.hpp"
#include "server/log.hpp"
#include "tools/cli.hpp"
#include "tools/commands.hpp"

namespace agentstate::tools {

namespace {

struct console_args {
  std::string store, http = "127.0.0.1:0", auth_file, tls_cert, tls_key, tls_ca, log_format;
  bool insecure = false, actions = false;
};

int console_usage_error(const std::string& message) {
  return usage_error("console", message);
}

int run_console(const console_args& a) {
  server::log_format fmt = server::log_format::text;
  if (a.log_format == "json")
    fmt = server::log_format::json;
  else if (!a.log_format.empty() && a.log_format != "text")
    return console_usage_error("--log-format must be text or json, not '" + a.log_format + "'");
  if (a.store.empty())
    return console_usage_error("--store needs a directory");
  if (a.tls_cert.empty() != a.tls_key.empty())
    return console_usage_error("TLS needs both --tls-cert and --tls-key");
  if (!a.tls_ca.empty() && a.tls_cert.empty())
    return console_usage_error("--tls-client-ca needs --tls-cert and --tls-key");
  if (auto spec = server::parse_listen(a.http);
      !spec || spec->type != server::listen_spec::kind::tcp)
    return console_usage_error("--http needs [HOST:]PORT, not '" + a.http + "'");
  server::logger log(fmt);
  console::console_config cfg;
  cfg.http = a.http;
  cfg.insecure = a.insecure;
  cfg.actions = a.actions;
  cfg.store_dir = a.store;
  if (!a.tls_cert.empty())
    cfg.tls = console::console_tls{a.tls_cert, a.tls_key, a.tls_ca};
  std::shared_ptr<protocol::token_source> tokens;
  if (!a.auth_file.empty()) {
    auto t = protocol::token_table::load(a.auth_file);
    if (!t) {
      log.error("startup_failed", "--auth-file " + a.auth_file + ": " + t.err().message);
      return exit_failed;
    }
    tokens = std::make_shared<protocol::token_source>(std::move(*t));
    cfg.tokens = tokens;
  }
  // SIGINT, SIGTERM and SIGHUP are taken by this thread (sigwait); every
  // thread started later inherits the mask.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  options o;
  o.dir = a.store;
  auto opened = engine::open(o);
  if (!opened) {
    log.error("startup_failed", "cannot open the store: " + to_string(opened.err()));
    return exit_failed;
  }
  auto& eng = **opened;
  int code = exit_ok;
  {
    auto srv = console::console_server::open(cfg, eng, log);
    if (!srv) {
      log.error("startup_failed", srv.err().message);
      code = exit_failed;
    } else {
      (*srv)->start();
      for (;;) {
        int sig = 0;
        if (::sigwait(&set, &sig) != 0)
          continue;
        if (sig == SIGHUP) {
          if (!tokens) {
            log.info("signal", "SIGHUP: no --auth-file to reload");
            continue;
          }
          auto t = protocol::token_table::load(a.auth_file);
          if (!t)
            log.warn("tokens_reload_failed", t.err().message);
          else
            tokens->replace(std::move(*t));
          continue;
        }
        log.info("signal", std::string(sig == SIGINT ? "SIGINT" : "SIGTERM") + " received");
        break;
      }
      (*srv)->stop();
    }
  }
  if (auto r = eng.close(); !r) {
    log.error("close_failed", to_string(r.err()));
    code = exit_failed;
  }
  return code;
}

runner define_console(command_line& cl) {
  auto a = std::make_shared<console_args>();
  cl.usage = "agentstate console --store DIR [--http ADDR] [options]";
  cl.description = R"(Serves the web console (see docs/console.md) for a store no server holds:
its apps, users, sessions, events and state in a browser, followed live.
The log names the address: 'console on http://HOST:PORT'. For a store a
server holds, give that server --http instead (agentstate serve).)";
  cl.footer = "SIGINT/SIGTERM: the console stops, the store is closed, exit 0. SIGHUP\n"
              "re-reads --auth-file.";
  cl.exit_status(exit_ok, "stopped by a signal, the store closed");
  cl.exit_status(exit_failed,
                 "the store cannot be opened or closed, the address cannot be bound, "
                 "or the token or TLS files cannot be read (the error is logged)");
  auto& app = cl.app;
  app.add_option("--store", a->store, "LMDB store directory (created if missing, as serve)")
    ->type_name("DIR")
    ->required();
  app
    .add_option("--http", a->http,
                "where to serve ([HOST:]PORT; default 127.0.0.1:0, a free\n"
                "port); a HOST beyond loopback needs --auth-file or\n"
                "--insecure")
    ->type_name("ADDR");
  app
    .add_option("--auth-file", a->auth_file,
                "tokens as for serve: a browser logs in with one and\n"
                "sees the apps it grants. Re-read on SIGHUP")
    ->type_name("FILE");
  app.add_flag("--http-actions", a->actions,
               "offer delete, rewind and fork on the apps a token grants\n"
               "(default: read-only)");
  app.add_flag("--insecure", a->insecure, "allow a non-loopback HOST without --auth-file");
  app.add_option("--tls-cert", a->tls_cert, "HTTPS: PEM certificate chain")->type_name("FILE");
  app.add_option("--tls-key", a->tls_key, "its PEM private key")->type_name("FILE");
  app.add_option("--tls-client-ca", a->tls_ca, "require client certificates signed by these CAs")
    ->type_name("FILE");
  app
    .add_option("--log-format", a->log_format,
                "text (default, logfmt) or json (one object per line)")
    ->type_name("FORMAT");
  return [a] { return run_console(*a); };
}

} // namespace

static const bool console_registered = register_command(
  {"console", "a store's sessions, events and state in a browser, live", define_console});

} // namespace agentstate::tools
