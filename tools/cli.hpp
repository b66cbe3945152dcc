// SPDX-License-Identifier: Apache-2.0
// tools/cli.hpp: the one command-line parser of the agentstate tool. Every
// command declares its options and positionals on a command_line;
// parse_and_run (tools/cli.cpp) parses the arguments, answers --help from the
// declarations, and reports bad usage the same way for every command:
//
//   agentstate CMD: PROBLEM; run 'agentstate CMD --help' for usage
//
// one line on stderr, exit 2. Every other message of a command is one line
// on stderr in the same voice, "agentstate CMD: MESSAGE" (say()), and every
// command exits with the codes of its --help's "exit status:" list (0, 1 and
// 2 below for all; a command may add its own from 3 up). `--opt value` and
// `--opt=value` are the same.
// The parser is CLI11's (Debian libcli11-dev, header-only), behind the two
// classes below: only tools/cli.cpp includes CLI11, a heavy header, so the
// files that declare command lines compile without it.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace CLI {
class App;
class Option;
} // namespace CLI

namespace agentstate::tools {

/// One declared option, flag or positional of a command line. The setters
/// return the option, so declarations chain:
/// `cl.app.add_option("--store", dir, "...")->type_name("DIR")->group(g)`.
class cli_option {
public:
  explicit cli_option(CLI::Option* o) noexcept : o_(o) {}

  /// The word after the option's name in --help ("--store DIR").
  cli_option* type_name(const std::string& word);
  /// Lists the option in --help under a heading of its own.
  cli_option* group(const std::string& heading);
  /// A parse without it fails: "NAME is required".
  cli_option* required();
  /// Its value must be a whole number lo..hi; anything else is bad usage:
  /// "--poll-ms takes a whole number 1..60000, not '0'".
  cli_option* range(std::uint64_t lo, std::uint64_t hi);
  /// How many times it was given (0: not on the command line).
  std::size_t count() const;
  /// "--store" (the long name), or a positional's name ("DIR").
  std::string get_name() const;

  CLI::Option* cli() const noexcept { return o_; }

  /// The bounds a number option's value is checked against (range()); null
  /// for an option that takes text or none.
  struct bounds {
    std::uint64_t lo, hi;
  };
  std::shared_ptr<bounds> number_bounds;

private:
  CLI::Option* o_;
};

/// The declarations of one command line. `name` names it in errors. Each
/// add_ binds the option to `into`, set by a parse when the option is given
/// (a flag: true); `help` is its line in --help ('\n' where a line breaks).
/// An option's word in --help is its type_name(); without one it is "VALUE"
/// (text) or "N" (a number, a whole number 0.. the type's maximum).
class cli_app {
public:
  explicit cli_app(const std::string& name);
  ~cli_app();
  cli_app(const cli_app&) = delete;
  cli_app& operator=(const cli_app&) = delete;

  /// `name` is "--opt" (an option), "-o,--opt", or a word ("DIR": a positional).
  cli_option* add_option(const std::string& name, std::string& into, const std::string& help);
  cli_option* add_option(const std::string& name, std::vector<std::string>& into,
                         const std::string& help);
  cli_option* add_option(const std::string& name, std::uint32_t& into, const std::string& help);
  cli_option* add_option(const std::string& name, std::uint64_t& into, const std::string& help);
  cli_option* add_flag(const std::string& name, bool& into, const std::string& help);

  /// The option declared under `name` ("--etcd"); null when there is none.
  cli_option* get_option(const std::string& name) const;
  /// The options given, in the order of the command line (one entry per time given).
  std::vector<cli_option*> parse_order() const;

  CLI::App& cli() const noexcept { return *app_; }

private:
  std::unique_ptr<CLI::App> app_;
  std::vector<std::unique_ptr<cli_option>> options_;

  cli_option* keep(CLI::Option* o);
};

/// The exit codes every command shares (its --help's "exit status:" list
/// names what each means for it; codes from 3 up are a command's own, as
/// salvage's 3 and watch's 3 to 5).
enum exit_code : int {
  exit_ok = 0, ///< done
  exit_failed = 1, ///< the work failed: unreadable or damaged data, a refused
  ///< or unreachable store or server, an I/O error
  exit_usage = 2, ///< bad usage: the command line, not the data
};

/// One command's command line. `app` takes the declarations (add_option,
/// add_flag; ->group(...) to list options under a heading of their own);
/// `usage` (the synopsis lines), `description` (before the options),
/// `footer` (after them), `exits` and `environment` complete its --help. An
/// option given twice keeps its last value unless it is declared otherwise
/// (a repeatable option: repeatable()).
///
/// The --help layout, which cmake/manpages.cmake turns into the man page:
/// "usage: " and its continuation lines (the SYNOPSIS), the description,
/// "arguments:", "options:" and the groups, the footer, then "exit status:"
/// and "environment:" (in that order, last: the EXIT STATUS and ENVIRONMENT
/// sections).
struct command_line {
  explicit command_line(std::string command);

  std::string name; ///< "serve"
  cli_app app;
  std::string usage; ///< "agentstate serve (--store DIR | --memory) [options]" (lines)
  std::string description; ///< paragraphs, wrapped at 78 columns
  std::string footer; ///< paragraphs, wrapped at 78 columns
  /// What each exit code means, by code; starts as exit_ok "done",
  /// exit_failed "the work failed (stderr says why)", exit_usage "bad usage".
  std::vector<std::pair<int, std::string>> exits;
  /// The environment variables the command reads, with what each does
  /// (none: "environment:" says so).
  std::vector<std::pair<std::string, std::string>> environment;

  /// Sets (or adds, in order of code) what exit code `code` means.
  void exit_status(int code, const std::string& meaning);
};

/// What the tool's own command line (no command) asks for: --help, --version,
/// a parse error (`problem`, for usage_error), and the arguments that are
/// neither (unknown options and words, in order).
struct tool_args {
  bool help = false;
  bool version = false;
  std::string problem;
  std::vector<std::string> rest;
};

/// Parses the tool's own options, -h/--help and --version, from main's
/// arguments.
tool_args parse_tool_args(int argc, char** argv);

/// `o` as an option that may be given more than once, each time with one
/// value, every value kept in order (e.g. serve's --listen).
cli_option* repeatable(cli_option* o);

/// Declares the positional DIR, required, "the store directory": the store
/// that inspect, verify, backup, dump, export, import and prune work on.
cli_option* add_store_dir(command_line& cl, std::string& dir);

/// `--json`, "print one JSON object" (then ": " and `fields` when given, the
/// object's members): the one-object summary that inspect, verify, backup,
/// import, prune and salvage print instead of their text.
cli_option* add_json_flag(command_line& cl, bool& json, const std::string& fields = {});

/// A part of a store named by --app NAME, --user ID of that app and
/// --session ID of that user, as dump and watch take it. An option counts as given when it
/// is on the command line, even with an empty value.
struct scope_filter {
  std::string app, user, session;
  cli_option* app_opt = nullptr; ///< set by add_scope_filter, as the two below
  cli_option* user_opt = nullptr;
  cli_option* session_opt = nullptr;

  bool has_app() const { return app_opt && app_opt->count() > 0; }
  bool has_user() const { return user_opt && user_opt->count() > 0; }
  bool has_session() const { return session_opt && session_opt->count() > 0; }
  /// "" when the options given fit together, else the usage problem:
  /// "--user needs --app" or "--session needs --user".
  std::string problem() const;
};

/// Declares --app NAME, --user ID (needs --app) and --session ID (needs --user)
/// into `f`; `each` begins each one's help: "only this" makes "only this app",
/// "only this user of the app (needs --app)", ...
void add_scope_filter(command_line& cl, scope_filter& f, const std::string& each);

/// Prints the one line of bad usage for `command` ("" for the tool itself)
/// on stderr; returns exit_usage (2).
int usage_error(const std::string& command, const std::string& problem);

/// Prints one line on stderr in the tool's voice: "agentstate COMMAND: " and
/// the printf-formatted message, its line breaks made spaces and any
/// library's exception text put in the tool's words (plain_message).
void say(const std::string& command, const char* format, ...) __attribute__((format(printf, 2, 3)));

/// `message` without a library's internal exception text: nlohmann::json's
/// "[json.exception.parse_error.101] parse error at line 1, column 2: ..."
/// becomes "invalid JSON at column 2" (the position kept); its other
/// exceptions "a JSON value of the wrong type" or "a JSON value out of
/// range". Text without such a part comes back as it is.
std::string plain_message(const std::string& message);

/// Whether `dest` may take the new store `command` (backup, salvage) writes:
/// it does not exist, or is an empty directory. When not, says why on
/// stderr ("agentstate COMMAND: 'DEST' exists and is not empty").
bool dest_is_free(const char* command, const std::string& dest);

/// Whether standard error is a terminal: progress lines (with \r) are
/// written only then, never into a file or pipe.
bool progress_wanted() noexcept;

/// The redraw period of progress lines: $AGENTSTATE_PROGRESS_MS (whole
/// milliseconds, 0 to 3,600,000; 0 draws at every update), else 500 ms.
std::chrono::milliseconds progress_period() noexcept;

/// The "environment:" entry of every command that draws progress lines.
std::pair<std::string, std::string> progress_environment();

/// A progress line on stderr, redrawn in place (\r) at most once per
/// progress_period() (twice a second unless told), only when stderr is a
/// terminal (progress_wanted) and only after the first period. "what: n"
/// or, with a known total, "what: n of total". done() ends the line.
/// Single-threaded.
class progress_line {
public:
  void operator()(const char* what, std::uint64_t n, std::uint64_t total = 0);
  /// Same, with free text after the count (e.g. bytes read of a file).
  void show(const char* what, std::uint64_t n, std::uint64_t total, const std::string& extra);
  void done();
  ~progress_line() { done(); }

private:
  bool tty_ = progress_wanted();
  std::chrono::milliseconds period_ = progress_period();
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_{};
  bool shown_ = false;
};

} // namespace agentstate::tools
