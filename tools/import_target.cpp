// SPDX-License-Identifier: Apache-2.0
#include "tools/import_target.hpp"

#include <cstdio>
#include <filesystem>
#include <system_error>

#include "agentstate/version.hpp"
#include "store/format.hpp"
#include "store/open.hpp"

namespace agentstate::tools {

std::unique_ptr<import_target> open_import_target(const std::string& dir_arg) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir_arg, ec);
  auto t = std::make_unique<import_target>();
  t->dir = fs::canonical(dir_arg, ec).string();
  if (ec) {
    std::fprintf(stderr, "import: cannot use '%s': %s\n", dir_arg.c_str(), ec.message().c_str());
    return nullptr;
  }
  if (auto r = t->lock.acquire(t->dir); !r) {
    std::fprintf(stderr, "import: %s\n", r.err().message.c_str());
    return nullptr;
  }
  auto kv = store::open_lmdb(t->dir, true, std::uint64_t{64} << 30);
  if (!kv) {
    std::fprintf(stderr, "import: %s\n", kv.err().message.c_str());
    return nullptr;
  }
  if (auto r = store::init_meta(**kv, AGENTSTATE_VERSION_STRING); !r) {
    std::fprintf(stderr, "import: %s\n", r.err().message.c_str());
    return nullptr;
  }
  t->kv = std::move(*kv);
  return t;
}

} // namespace agentstate::tools
