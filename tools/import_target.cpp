// SPDX-License-Identifier: Apache-2.0
// `agentstate import`: JSON lines from `agentstate export` (a FILE or standard
// input) into an empty store, and the store an import writes into, for it and
// `import --from-adk-sqlite` (tools/adk) alike.
#include "tools/import_target.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <system_error>

#include "agentstate/json.hpp"
#include "agentstate/version.hpp"
#include "store/exchange.hpp"
#include "store/format.hpp"
#include "store/open.hpp"
#include "tools/adk/adk_sqlite.hpp"
#include "tools/cli.hpp"
#include "tools/commands.hpp"

namespace agentstate::tools {

std::unique_ptr<import_target> open_import_target(const std::string& dir_arg) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir_arg, ec);
  auto t = std::make_unique<import_target>();
  t->dir = fs::canonical(dir_arg, ec).string();
  if (ec) {
    say("import", "cannot use '%s': %s", dir_arg.c_str(), ec.message().c_str());
    return nullptr;
  }
  if (auto r = t->lock.acquire(t->dir); !r) {
    say("import", "%s", r.err().message.c_str());
    return nullptr;
  }
  auto kv = store::open_lmdb(t->dir, true, std::uint64_t{64} << 30);
  if (!kv) {
    say("import", "%s", kv.err().message.c_str());
    return nullptr;
  }
  if (auto r = store::init_meta(**kv, AGENTSTATE_VERSION_STRING); !r) {
    say("import", "%s", r.err().message.c_str());
    return nullptr;
  }
  t->kv = std::move(*kv);
  return t;
}

namespace {

// -- import ------------------------------------------------------------------------

struct import_options {
  std::string dir;
  std::string file; ///< FILE; "" or "-": standard input
  bool json = false;
  adk::import_args adk; ///< import --from-adk-sqlite
};

int run_import(const import_options& p);

runner define_import(command_line& cl) {
  auto o = std::make_shared<import_options>();
  cl.environment.push_back(progress_environment());
  cl.usage = "agentstate import DIR [FILE] [--json]\n"
             "agentstate import DIR [--json] < FILE\n"
             "agentstate import --from-adk-sqlite FILE DIR [--skip-oversized]";
  cl.description = R"(Reads JSON lines written by `agentstate export` from FILE (standard input
when FILE is absent or -) into the store in DIR, which is created if missing
and must hold no data. FILE is opened before DIR is touched: a FILE that
cannot be read leaves DIR as it was. Takes the store's lock: no engine may
have it open. Progress on stderr when it is a terminal.)";
  cl.footer = std::string(adk::import_help);
  cl.exit_status(exit_ok, "every record was imported");
  cl.exit_status(exit_failed,
                 "the import failed: FILE cannot be read, DIR cannot be used, is locked or "
                 "holds data, or a line is refused (the message names the line); "
                 "--from-adk-sqlite: FILE is no ADK session store this reads, or rows are "
                 "beyond agentstate's limits (each named) without --skip-oversized");
  add_store_dir(cl, o->dir);
  auto* file =
    cl.app.add_option("FILE", o->file, "the JSON lines to read (absent or -: standard input)");
  add_json_flag(cl, o->json,
                "imported_records, store (the\n"
                "--from-adk-sqlite summary is always JSON)");
  auto* from = cl.app
                 .add_option("--from-adk-sqlite", o->adk.file,
                             "read an ADK session store kept in SQLite instead of\n"
                             "JSON lines")
                 ->type_name("FILE");
  auto* skip = cl.app.add_flag("--skip-oversized", o->adk.skip_oversized,
                               "with --from-adk-sqlite: leave out the rows agentstate\n"
                               "cannot take and import the rest");
  return [o, from, skip, file] {
    if (from->count() > 0) {
      if (file->count() > 0)
        return usage_error("import",
                           "FILE '" + o->file
                             + "' is for JSON lines; --from-adk-sqlite names its "
                               "own file");
      o->adk.dir = o->dir;
      return adk::run_import(o->adk);
    }
    if (skip->count() > 0)
      return usage_error("import", "--skip-oversized needs --from-adk-sqlite");
    return run_import(*o);
  };
}

/// Makes FILE (unless "" or "-") the process's standard input, which the
/// import reads; false after saying why it cannot be read.
bool take_input(const std::string& file) {
  if (file.empty() || file == "-")
    return true;
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    say("import", "cannot read '%s': %s", file.c_str(), std::strerror(errno));
    return false;
  }
  struct stat st;
  const char* why = nullptr;
  if (::fstat(fd, &st) != 0)
    why = std::strerror(errno);
  else if (S_ISDIR(st.st_mode))
    why = "it is a directory, not a file of JSON lines";
  else if (::dup2(fd, STDIN_FILENO) < 0)
    why = std::strerror(errno);
  ::close(fd);
  if (why)
    say("import", "cannot read '%s': %s", file.c_str(), why);
  return why == nullptr;
}

int run_import(const import_options& p) {
  if (!take_input(p.file))
    return exit_failed;
  auto target = open_import_target(p.dir);
  if (!target)
    return exit_failed;
  const std::string& dir = target->dir;
  auto* kv = &target->kv;
  progress_line prog;
  // A file as standard input (FILE or `< FILE`) tells how far the read is
  // (its offset; the stream reads ahead of the records by its buffer).
  std::uint64_t input_bytes = 0;
  if (struct stat st; ::fstat(STDIN_FILENO, &st) == 0 && S_ISREG(st.st_mode))
    input_bytes = static_cast<std::uint64_t>(st.st_size);
  std::ios::sync_with_stdio(false);
  auto n = store::import_store(**kv, std::cin, [&](std::uint64_t k) {
    std::string extra;
    if (input_bytes) {
      auto at = ::lseek(STDIN_FILENO, 0, SEEK_CUR);
      char buf[64];
      std::snprintf(buf, sizeof buf, " (%.0f of %.0f MiB read)", at < 0 ? 0.0 : at / 1048576.0,
                    input_bytes / 1048576.0);
      extra = buf;
    }
    prog.show("records", k, 0, extra);
  });
  prog.done();
  if (!n) {
    say("import", "%s", n.err().message.c_str());
    return exit_failed;
  }
  if (p.json)
    std::printf("%s\n", json{{"imported_records", *n}, {"store", dir}}.dump().c_str());
  else
    std::printf("imported %llu records into %s\n", static_cast<unsigned long long>(*n),
                dir.c_str());
  return std::fflush(stdout) == 0 ? exit_ok : exit_failed;
}

const bool import_target_registered =
  register_command({"import", "JSON lines from export into an empty store", define_import});

} // namespace

} // namespace agentstate::tools
