// SPDX-License-Identifier: Apache-2.0
// tools/cli.hpp: the one command-line parser of the agentstate tool, on CLI11
// (Debian libcli11-dev, header-only). Every command declares its options and
// positionals on a command_line; parse_and_run (tools/cli.cpp) parses the
// arguments, answers --help from the declarations, and reports bad usage the
// same way for every command:
//
//   agentstate CMD: PROBLEM; run 'agentstate CMD --help' for usage
//
// one line on stderr, exit 2. `--opt value` and `--opt=value` are the same.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

namespace agentstate::tools {

/// One command's command line. `app` takes the declarations (add_option,
/// add_flag; ->group(...) to list options under a heading of their own);
/// `usage` (the synopsis lines), `description` (before the options) and
/// `footer` (after them) complete its --help. An option given twice keeps
/// its last value unless it is declared otherwise (a repeatable option:
/// repeatable()).
struct command_line {
  explicit command_line(std::string command);

  std::string name; ///< "serve"
  CLI::App app;
  std::string usage; ///< "agentstate serve (--store DIR | --memory) [options]" (lines)
  std::string description; ///< paragraphs, wrapped at 78 columns
  std::string footer; ///< paragraphs, wrapped at 78 columns
};

/// `o` as an option that may be given more than once, each time with one
/// value, every value kept in order (e.g. serve's --listen).
CLI::Option* repeatable(CLI::Option* o);

/// Declares the positional DIR, required, "the store directory": the store
/// that inspect, verify, backup, dump, export, import and prune work on.
CLI::Option* add_store_dir(command_line& cl, std::string& dir);

/// `--json`, "print one JSON object" (then ": " and `fields` when given, the
/// object's members): the one-object summary that inspect, verify, backup,
/// import, prune and salvage print instead of their text.
CLI::Option* add_json_flag(command_line& cl, bool& json, const std::string& fields = {});

/// A part of a store named by --app A, --user U of that app and --session S
/// of that user, as dump and watch take it. An option counts as given when it
/// is on the command line, even with an empty value.
struct scope_filter {
  std::string app, user, session;
  CLI::Option* app_opt = nullptr; ///< set by add_scope_filter, as the two below
  CLI::Option* user_opt = nullptr;
  CLI::Option* session_opt = nullptr;

  bool has_app() const { return app_opt && app_opt->count() > 0; }
  bool has_user() const { return user_opt && user_opt->count() > 0; }
  bool has_session() const { return session_opt && session_opt->count() > 0; }
  /// "" when the options given fit together, else the usage problem:
  /// "--user needs --app" or "--session needs --user".
  std::string problem() const;
};

/// Declares --app A, --user U (needs --app) and --session S (needs --user)
/// into `f`; `each` begins each one's help: "only this" makes "only this app",
/// "only this user of the app (needs --app)", ...
void add_scope_filter(command_line& cl, scope_filter& f, const std::string& each);

/// Prints the one line of bad usage for `command` ("" for the tool itself)
/// on stderr; returns 2.
int usage_error(const std::string& command, const std::string& problem);

/// Whether `dest` may take the new store `command` (backup, salvage) writes:
/// it does not exist, or is an empty directory. When not, prints why on
/// stderr ("<command>: 'DEST' exists and is not empty").
bool dest_is_free(const char* command, const std::string& dest);

/// Whether standard error is a terminal: progress lines (with \r) are
/// written only then, never into a file or pipe.
bool progress_wanted() noexcept;

/// A progress line on stderr, redrawn in place (\r) at most twice a second,
/// only when stderr is a terminal (progress_wanted) and only after the
/// first half second. "what: n" or, with a known total, "what: n of total".
/// done() ends the line. Single-threaded.
class progress_line {
public:
  void operator()(const char* what, std::uint64_t n, std::uint64_t total = 0);
  /// Same, with free text after the count (e.g. bytes read of a file).
  void show(const char* what, std::uint64_t n, std::uint64_t total, const std::string& extra);
  void done();
  ~progress_line() { done(); }

private:
  bool tty_ = progress_wanted();
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_{};
  bool shown_ = false;
};

} // namespace agentstate::tools
