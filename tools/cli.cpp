// SPDX-License-Identifier: Apache-2.0
// tools/cli.cpp: cli_app and cli_option on CLI11 (the one file of the tool
// that includes it), command_line's --help layout, parse_and_run, the one
// line of bad usage, and progress lines.
#include "tools/cli.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <sstream>

#include <CLI/CLI.hpp>

#include "tools/commands.hpp"

namespace agentstate::tools {

namespace {

/// "--store DIR", "-h, --help", "DIR": how an option is named in --help.
std::string option_label(const CLI::Option& o) {
  if (!o.nonpositional())
    return o.get_name();
  std::string out;
  for (auto& s : o.get_snames())
    out += (out.empty() ? "-" : ", -") + s;
  for (auto& l : o.get_lnames())
    out += (out.empty() ? "--" : ", --") + l;
  if (o.get_type_size() != 0 && !o.get_type_name().empty())
    out += " " + o.get_type_name();
  return out;
}

/// The width --help's lines keep to.
constexpr std::size_t help_columns = 78;

/// One item of a list in --help: "  LABEL" and `text` flowed into lines that
/// start at `column` and end by column 78 (a word longer than the room
/// stands alone on its line); a label too wide for the column has the text
/// start on the next line.
void flow_item(std::ostream& out, const std::string& label, const std::string& text,
               std::size_t column) {
  out << "  " << label;
  bool first = true;
  if (label.size() + 2 > column - 2) {
    out << "\n";
    first = false;
  }
  const std::size_t room = help_columns > column + 20 ? help_columns - column : 20;
  std::istringstream words(text);
  std::string word, line;
  auto flush = [&] {
    out << std::string(first ? column - 2 - label.size() : column, ' ') << line << "\n";
    line.clear();
    first = false;
  };
  while (words >> word) {
    if (!line.empty() && line.size() + 1 + word.size() > room)
      flush();
    line += (line.empty() ? "" : " ") + word;
  }
  if (!line.empty())
    flush();
  if (first)
    out << "\n";
}

/// The --help of one command: its usage lines, description, positionals
/// ("arguments:"), options by group ("options:" first, the help flag last),
/// footer. Everything but the prose is read from the declarations.
class help_format : public CLI::FormatterBase {
public:
  explicit help_format(const command_line& cl) : cl_(cl) {}

  std::string make_help(const CLI::App* app, std::string, CLI::AppFormatMode) const override {
    std::ostringstream out;
    std::istringstream usage(cl_.usage);
    std::string line;
    for (bool first = true; std::getline(usage, line); first = false)
      out << (first ? "usage: " : "       ") << line << "\n";
    if (!cl_.description.empty())
      out << "\n" << cl_.description << (cl_.description.back() == '\n' ? "" : "\n");

    std::vector<const CLI::Option*> positionals, options;
    const CLI::Option* help = app->get_help_ptr();
    for (auto* o : app->get_options()) {
      if (o == help || o->get_group().empty())
        continue;
      (o->nonpositional() ? options : positionals).push_back(o);
    }
    std::size_t width = 0;
    for (auto* o : positionals)
      width = std::max(width, option_label(*o).size());
    for (auto* o : options)
      width = std::max(width, option_label(*o).size());
    if (help)
      width = std::max(width, option_label(*help).size());
    const std::size_t column = std::min<std::size_t>(std::max<std::size_t>(width, 10), 22) + 4;

    auto item = [&](const CLI::Option& o) {
      flow_item(out, option_label(o), o.get_description(), column);
    };
    if (!positionals.empty()) {
      out << "\narguments:\n";
      for (auto* o : positionals)
        if (!o->get_description().empty())
          item(*o);
    }
    std::vector<std::string> groups;
    for (auto* o : options)
      if (std::find(groups.begin(), groups.end(), o->get_group()) == groups.end())
        groups.push_back(o->get_group());
    // The default group (CLI11 names it "Options") first, with the help flag.
    auto is_default = [](const std::string& g) { return g == "Options"; };
    std::stable_partition(groups.begin(), groups.end(), is_default);
    if (groups.empty() || !is_default(groups.front()))
      groups.insert(groups.begin(), "Options");
    for (auto& g : groups) {
      out << "\n" << (is_default(g) ? std::string("options") : g) << ":\n";
      for (auto* o : options)
        if (o->get_group() == g)
          item(*o);
      if (is_default(g) && help)
        item(*help);
    }
    if (!cl_.footer.empty())
      out << "\n" << cl_.footer << (cl_.footer.back() == '\n' ? "" : "\n");
    out << "\nexit status:\n";
    for (auto& [code, meaning] : cl_.exits)
      flow_item(out, std::to_string(code), meaning, 6);
    out << "\nenvironment:\n";
    std::size_t env_width = 0;
    for (auto& e : cl_.environment)
      env_width = std::max(env_width, e.first.size());
    for (auto& [name, meaning] : cl_.environment)
      flow_item(out, name, meaning, std::min<std::size_t>(env_width, 22) + 4);
    if (cl_.environment.empty())
      out << "  none: the command reads no environment variable\n";
    return out.str();
  }

private:
  const command_line& cl_;
};

/// A message on one line.
std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  while (!s.empty() && s.back() == ' ')
    s.pop_back();
  return s;
}

/// The number after `key` in `text` ("column 7" -> "7"); "" when absent.
std::string number_after(const std::string& text, const std::string& key) {
  auto at = text.find(key);
  if (at == std::string::npos)
    return "";
  at += key.size();
  auto end = text.find_first_not_of("0123456789", at);
  return text.substr(at, (end == std::string::npos ? text.size() : end) - at);
}

/// The bad usage a parse error of CLI11 means, in the tool's words (never
/// CLI11's text, which names its types: "1 required UINT missing").
std::string parse_problem(const CLI::App& app, const CLI::ParseError& e) {
  const std::string what = e.what();
  // CLI11 names the option a message is about by get_name(): first, or
  // after ": " ("Could not convert: --compact = maybe").
  const CLI::Option* about = nullptr;
  for (const CLI::Option* o : app.get_options()) {
    const std::string n = o->get_name();
    if (n.empty())
      continue;
    for (auto& form : {n + ":", n + " "})
      if (what.rfind(form, 0) == 0 || what.find(": " + form) != std::string::npos)
        about = o;
  }
  const std::string name = about ? about->get_name() : "an option";
  if (dynamic_cast<const CLI::RequiredError*>(&e)) {
    if (about)
      return name + " is required";
    for (const CLI::Option* o : app.get_options())
      if (o->get_required() && o->count() == 0)
        return o->get_name() + " is required";
    return "a required argument is missing";
  }
  // A flag is an option CLI11 expects no value of.
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e)) {
    if (about && about->get_expected_max() == 0)
      return name + " takes no value";
    return name + " needs a value"
      + (about && !about->get_type_name().empty() ? " (" + about->get_type_name() + ")" : "");
  }
  if (dynamic_cast<const CLI::ConversionError*>(&e)) {
    if (about && about->get_expected_max() == 0)
      return name + " takes no value";
    return name + " has a value it cannot take";
  }
  if (dynamic_cast<const CLI::ValidationError*>(&e)) {
    // Our validators' own words (number_check), after CLI11's "NAME: ".
    auto colon = what.find(": ");
    if (about && colon != std::string::npos)
      return name + " " + what.substr(colon + 2);
    return "an option has a value it cannot take";
  }
  return "the arguments cannot be read (one option or value is malformed)";
}

/// The check of a number option: a whole number within `b`, in the tool's
/// words. No description, so nothing is added to the option's word in
/// --help.
CLI::Validator number_check(std::shared_ptr<cli_option::bounds> b) {
  return CLI::Validator(
    [b](std::string& v) -> std::string {
      const bool whole =
        !v.empty() && v.size() <= 20 && v.find_first_not_of("0123456789") == std::string::npos;
      std::uint64_t n = 0;
      bool fits = whole;
      for (char c : whole ? v : std::string()) {
        const std::uint64_t d = static_cast<std::uint64_t>(c - '0');
        if (n > (std::numeric_limits<std::uint64_t>::max() - d) / 10) {
          fits = false;
          break;
        }
        n = n * 10 + d;
      }
      if (fits && n >= b->lo && n <= b->hi)
        return "";
      const bool any = b->lo == 0 && b->hi == std::numeric_limits<std::uint64_t>::max();
      return "takes a whole number"
        + (any ? std::string() : " " + std::to_string(b->lo) + ".." + std::to_string(b->hi))
        + ", not '" + v + "'";
    },
    "", "");
}

} // namespace

cli_option* cli_option::type_name(const std::string& word) {
  o_->type_name(word);
  return this;
}

cli_option* cli_option::group(const std::string& heading) {
  o_->group(heading);
  return this;
}

cli_option* cli_option::required() {
  o_->required();
  return this;
}

cli_option* cli_option::range(std::uint64_t lo, std::uint64_t hi) {
  if (!number_bounds) {
    number_bounds = std::make_shared<bounds>(bounds{lo, hi});
    o_->check(number_check(number_bounds));
  }
  number_bounds->lo = lo;
  number_bounds->hi = hi;
  return this;
}

std::size_t cli_option::count() const {
  return o_->count();
}

std::string cli_option::get_name() const {
  return o_->get_name();
}

cli_app::cli_app(const std::string& name) : app_(std::make_unique<CLI::App>("", name)) {}

cli_app::~cli_app() = default;

cli_option* cli_app::keep(CLI::Option* o) {
  options_.push_back(std::make_unique<cli_option>(o));
  return options_.back().get();
}

cli_option* cli_app::add_option(const std::string& name, std::string& into,
                                const std::string& help) {
  return keep(app_->add_option(name, into, help)->type_name("VALUE"));
}

cli_option* cli_app::add_option(const std::string& name, std::vector<std::string>& into,
                                const std::string& help) {
  return keep(app_->add_option(name, into, help)->type_name("VALUE"));
}

cli_option* cli_app::add_option(const std::string& name, std::uint32_t& into,
                                const std::string& help) {
  return keep(app_->add_option(name, into, help)->type_name("N"))
    ->range(0, std::numeric_limits<std::uint32_t>::max());
}

cli_option* cli_app::add_option(const std::string& name, std::uint64_t& into,
                                const std::string& help) {
  return keep(app_->add_option(name, into, help)->type_name("N"))
    ->range(0, std::numeric_limits<std::uint64_t>::max());
}

cli_option* cli_app::add_flag(const std::string& name, bool& into, const std::string& help) {
  return keep(app_->add_flag(name, into, help));
}

cli_option* cli_app::get_option(const std::string& name) const {
  const CLI::Option* o = app_->get_option_no_throw(name);
  for (auto& k : options_)
    if (k->cli() == o)
      return k.get();
  return nullptr;
}

std::vector<cli_option*> cli_app::parse_order() const {
  std::vector<cli_option*> out;
  for (const CLI::Option* o : app_->parse_order())
    for (auto& k : options_)
      if (k->cli() == o)
        out.push_back(k.get());
  return out;
}

command_line::command_line(std::string command)
  : name(std::move(command)), app("agentstate " + name) {
  CLI::App& a = app.cli();
  a.formatter(std::make_shared<help_format>(*this));
  a.set_help_flag("-h,--help", "print this help and exit");
  // Later values win (--dir a --dir b is b), as before CLI11; unknown
  // arguments are collected and reported by parse_and_run.
  a.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  a.allow_extras();
  exits = {{exit_ok, "done"},
           {exit_failed, "the work failed (one line on stderr says why)"},
           {exit_usage, "bad usage (one line on stderr names the problem)"}};
}

void command_line::exit_status(int code, const std::string& meaning) {
  auto at = std::find_if(exits.begin(), exits.end(), [code](auto& e) { return e.first >= code; });
  if (at != exits.end() && at->first == code)
    at->second = meaning;
  else
    exits.insert(at, {code, meaning});
}

tool_args parse_tool_args(int argc, char** argv) {
  tool_args out;
  CLI::App app("", "agentstate");
  app.set_help_flag("-h,--help");
  app.allow_extras();
  app.add_flag("--version", out.version);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    out.help = true;
    return out;
  } catch (const CLI::ParseError& e) {
    out.problem = parse_problem(app, e);
    return out;
  }
  out.rest = app.remaining();
  return out;
}

cli_option* repeatable(cli_option* o) {
  o->cli()->allow_extra_args(false)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  return o;
}

cli_option* add_store_dir(command_line& cl, std::string& dir) {
  return cl.app.add_option("DIR", dir, "the store directory")->required();
}

cli_option* add_json_flag(command_line& cl, bool& json, const std::string& fields) {
  return cl.app.add_flag("--json", json,
                         "print one JSON object" + (fields.empty() ? "" : ": " + fields));
}

std::string scope_filter::problem() const {
  if (has_user() && !has_app())
    return "--user needs --app";
  if (has_session() && !has_user())
    return "--session needs --user";
  return "";
}

void add_scope_filter(command_line& cl, scope_filter& f, const std::string& each) {
  f.app_opt = cl.app.add_option("--app", f.app, each + " app")->type_name("NAME");
  f.user_opt =
    cl.app.add_option("--user", f.user, each + " user of the app (needs --app)")->type_name("ID");
  f.session_opt =
    cl.app.add_option("--session", f.session, each + " session of the user (needs --user)")
      ->type_name("ID");
}

int usage_error(const std::string& command, const std::string& problem) {
  const std::string who = command.empty() ? "agentstate" : "agentstate " + command;
  std::fprintf(stderr, "%s: %s; run '%s --help' for usage\n", who.c_str(),
               one_line(plain_message(problem)).c_str(), who.c_str());
  return exit_usage;
}

void say(const std::string& command, const char* format, ...) {
  std::va_list args;
  va_start(args, format);
  std::va_list again;
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  std::string text(n > 0 ? static_cast<std::size_t>(n) : 0, '\0');
  if (n > 0)
    std::vsnprintf(text.data(), text.size() + 1, format, again);
  va_end(again);
  std::fprintf(stderr, "agentstate %s: %s\n", command.c_str(),
               one_line(plain_message(text)).c_str());
}

std::string plain_message(const std::string& message) {
  static const std::string mark = "[json.exception.";
  const auto at = message.find(mark);
  if (at == std::string::npos)
    return message;
  // nlohmann's text runs from its mark to the end of the message.
  std::string before = message.substr(0, at), theirs = message.substr(at + mark.size());
  static const std::string invalid = "invalid JSON: ";
  if (before.size() >= invalid.size()
      && before.compare(before.size() - invalid.size(), invalid.size(), invalid) == 0)
    before.resize(before.size() - invalid.size());
  std::string ours;
  if (theirs.rfind("parse_error", 0) == 0) {
    ours = "invalid JSON";
    const std::string line = number_after(theirs, "at line "),
                      column = number_after(theirs, ", column "),
                      byte = number_after(theirs, "at byte ");
    if (!column.empty())
      ours +=
        (line.empty() || line == "1" ? " at column " : " at line " + line + ", column ") + column;
    else if (!byte.empty())
      ours += " at byte " + byte;
    if (theirs.find("unexpected end of input") != std::string::npos)
      ours += " (the text ends early)";
  } else if (theirs.rfind("type_error", 0) == 0) {
    ours = "a JSON value of the wrong type";
  } else if (theirs.rfind("out_of_range", 0) == 0) {
    ours = "a JSON value out of range";
  } else {
    ours = "invalid JSON";
  }
  return before + ours;
}

bool dest_is_free(const char* command, const std::string& dest) {
  namespace fs = std::filesystem;
  std::error_code ec;
  auto st = fs::status(dest, ec);
  if (st.type() == fs::file_type::not_found)
    return true;
  const char* why = nullptr;
  if (ec)
    why = "cannot be read";
  else if (!fs::is_directory(st))
    why = "exists and is not a directory";
  else if (!fs::is_empty(dest, ec) || ec)
    why = ec ? "cannot be read" : "exists and is not empty";
  if (!why)
    return true;
  say(command, "'%s' %s%s%s", dest.c_str(), why, ec ? ": " : "", ec ? ec.message().c_str() : "");
  return false;
}

int parse_and_run(const command& c, const args& xs) {
  command_line cl(c.name);
  runner run = c.define(cl);
  std::vector<std::string> reversed(xs.rbegin(), xs.rend()); // CLI11 takes them last first
  CLI::App& app = cl.app.cli();
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return std::fflush(stdout) == 0 ? 0 : 1;
  } catch (const CLI::ParseError& e) {
    return usage_error(c.name, parse_problem(app, e));
  }
  for (auto& x : app.remaining()) {
    if (x == "--")
      continue;
    return usage_error(c.name,
                       x.size() > 1 && x[0] == '-' ? "unknown option '" + x + "'"
                                                   : "unexpected argument '" + x + "'");
  }
  return run();
}

bool progress_wanted() noexcept {
  return ::isatty(STDERR_FILENO) == 1;
}

std::chrono::milliseconds progress_period() noexcept {
  const char* v = std::getenv("AGENTSTATE_PROGRESS_MS");
  std::uint64_t ms = 0;
  if (!v || !*v || std::strlen(v) > 7)
    return std::chrono::milliseconds(500);
  for (const char* c = v; *c; ++c) {
    if (*c < '0' || *c > '9')
      return std::chrono::milliseconds(500);
    ms = ms * 10 + static_cast<std::uint64_t>(*c - '0');
  }
  return ms > 3'600'000 ? std::chrono::milliseconds(500) : std::chrono::milliseconds(ms);
}

std::pair<std::string, std::string> progress_environment() {
  return {"AGENTSTATE_PROGRESS_MS",
          "how often the progress line on a terminal is redrawn, in whole milliseconds "
          "(default 500; 0: at every update)"};
}

void progress_line::operator()(const char* what, std::uint64_t n, std::uint64_t total) {
  show(what, n, total, {});
}

void progress_line::show(const char* what, std::uint64_t n, std::uint64_t total,
                         const std::string& extra) {
  if (!tty_)
    return;
  auto now = std::chrono::steady_clock::now();
  if (now - start_ < period_ || now - last_ < period_)
    return;
  last_ = now;
  shown_ = true;
  if (total)
    std::fprintf(stderr, "\r%s: %llu of %llu%s\033[K", what, static_cast<unsigned long long>(n),
                 static_cast<unsigned long long>(total), extra.c_str());
  else
    std::fprintf(stderr, "\r%s: %llu%s\033[K", what, static_cast<unsigned long long>(n),
                 extra.c_str());
  std::fflush(stderr);
}

void progress_line::done() {
  if (shown_)
    std::fputs("\n", stderr);
  shown_ = false;
}

} // namespace agentstate::tools
