// SPDX-License-Identifier: Apache-2.0
// store/map_guard.hpp: a fault or LMDB assertion inside a guard point becomes
// a map_fault and the process goes on; a fault outside one reaches the
// handler installed before (a host's own crash handler keeps working); a
// value running past the pages the file backs is data_corrupt before anyone
// reads it. Regression for issue 18: `serve` ended by SIGABRT (LMDB's
// IS_LEAF assertion in mdb_cursor_next), SIGSEGV (mdb_cursor_get,
// mdb_cursor_del) and SIGBUS (a checksum read past the file's end) on
// damaged stores; the corruption tier runs serve on such stores.
#include "support/test_support.hpp"

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "store/lmdb_handle.hpp"
#include "store/map_guard.hpp"

using namespace agentstate;
namespace mg = agentstate::store::map_guard;

namespace {

// One page the process may not read: touching it raises SIGSEGV.
char* forbidden_page() {
  void* p = ::mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(p != MAP_FAILED);
  return static_cast<char*>(p);
}

int touch(const char* p) {
  return *static_cast<const volatile char*>(p);
}

// The guard's handlers are process-wide and doctest installs its own crash
// handler around every test case, so each case that faults runs in a fresh
// image of this binary (only that case, MAP_GUARD_CHILD set) and installs the
// guard itself. Returns the child's exit status (0: its checks passed).
bool in_child() {
  return std::getenv("MAP_GUARD_CHILD") != nullptr;
}
int run_fresh(const std::string& test_case) {
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::setenv("MAP_GUARD_CHILD", "1", 1);
    std::string filter = "--test-case=" + test_case;
    ::execl("/proc/self/exe", "map_guard_test", filter.c_str(), "--no-intro",
            static_cast<char*>(nullptr));
    ::_exit(2);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  return WEXITSTATUS(status);
}
#define FRESH_PROCESS(name)                                                                        \
  if (!in_child()) {                                                                               \
    CHECK(run_fresh(name) == 0);                                                                   \
    return;                                                                                        \
  }

} // namespace

TEST_CASE("a fault inside a guard point is a map_fault, and the process goes on") {
  FRESH_PROCESS("a fault inside a guard point*");
  mg::install();
  char* bad = forbidden_page();
  auto before = mg::caught();
  for (int i = 0; i < 3; ++i) { // the handler stays armed for later faults
    bool thrown = false;
    try {
      mg::guarded_call("reading a damaged page", [&] { return touch(bad); });
    } catch (const mg::map_fault& f) {
      thrown = true;
      CHECK(f.code == errc::data_corrupt);
      CHECK(f.message.find("reading a damaged page") != std::string::npos);
      CHECK(f.message.find("SIGSEGV") != std::string::npos);
    }
    CHECK(thrown);
    CHECK(mg::armed() == nullptr); // disarmed on the way out
  }
  CHECK(mg::caught() == before + 3);
  CHECK(mg::guarded_call("a clean call", [] { return 7; }) == 7);
  ::munmap(bad, 4096);
}

TEST_CASE("an LMDB assertion inside a guard point is a map_fault naming it") {
  bool thrown = false;
  try {
    mg::guarded_call("mdb_cursor_get", [] {
      mg::on_lmdb_assert("mdb.c:5921: Assertion 'IS_LEAF(mp)' failed in mdb_cursor_next()");
      return 0;
    });
  } catch (const mg::map_fault& f) {
    thrown = true;
    CHECK(f.message.find("IS_LEAF") != std::string::npos);
  }
  CHECK(thrown);
}

TEST_CASE("nested points: the inner one catches, the outer one is armed again") {
  FRESH_PROCESS("nested points*");
  mg::install();
  char* bad = forbidden_page();
  mg::point outer;
  if (sigsetjmp(outer.jump, 0) != 0)
    FAIL("the fault reached the outer point");
  mg::arm(&outer);
  CHECK_THROWS_AS(mg::guarded_call("inner", [&] { return touch(bad); }), mg::map_fault);
  CHECK(mg::armed() == &outer);
  mg::arm(nullptr);
  ::munmap(bad, 4096);
}

namespace {
void host_handler(int) {
  ::_exit(42);
}
} // namespace

TEST_CASE("a fault outside every guard point reaches the handler installed before") {
  // A host's SIGSEGV handler first, then the guard (as when a host with a
  // crash handler opens a store), then a fault outside any point.
  if (!in_child()) {
    CHECK(run_fresh("a fault outside every guard point*") == 42); // the host's handler ran
    return;
  }
  struct sigaction sa {};
  sa.sa_handler = host_handler;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGSEGV, &sa, nullptr);
  mg::install();
  touch(forbidden_page());
  ::_exit(1);
}

TEST_CASE("without any other handler, a fault outside a point ends the process by the signal") {
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    ::sigaction(SIGSEGV, &dfl, nullptr); // what the process had before doctest's and the guard's
    mg::install();
    // install() is once per process (the parent may have run it): either way
    // nothing that handles SIGSEGV is left, or the guard passes it on.
    touch(forbidden_page());
    ::_exit(1);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGSEGV);
}

TEST_CASE("a value running past the pages the file backs is data_corrupt") {
  using store::lmdb_detail::checked_view;
  static char map[4 * 4096];
  const std::size_t map_size = sizeof map, backed = 2 * 4096;
  MDB_val inside{100, map + 4000};
  CHECK(checked_view(inside, map, map_size, backed).size() == 100);
  MDB_val to_the_end{96, map + backed - 96};
  CHECK(checked_view(to_the_end, map, map_size, backed).size() == 96);
  MDB_val past{97, map + backed - 96};
  CHECK_THROWS_AS(checked_view(past, map, map_size, backed), store::kv_failure);
  MDB_val beyond{1, map + backed + 10};
  CHECK_THROWS_AS(checked_view(beyond, map, map_size, backed), store::kv_failure);
  MDB_val huge{~std::size_t{0} / 2, map + 10};
  CHECK_THROWS_AS(checked_view(huge, map, map_size, backed), store::kv_failure);
  // Outside the map (a write transaction's dirty page on the heap): as is.
  std::string heap(50, 'x');
  MDB_val dirty{heap.size(), heap.data()};
  CHECK(checked_view(dirty, map, map_size, backed).size() == 50);
  // No map found (no procfs): unchecked.
  CHECK(checked_view(past, nullptr, map_size, backed).size() == 97);
}

TEST_CASE("an LMDB store finds its map, so its values are checked") {
  test::temp_dir d;
  options o;
  o.dir = d.path().string();
  auto kv = store::open_lmdb_kv(o.dir, false, std::uint64_t{1} << 30, {}, false);
  REQUIRE(kv);
  // The map of data.mdb is in /proc/self/maps at the offset 0.
  CHECK(store::lmdb_detail::find_mapping(o.dir + "/data.mdb") != nullptr);
}
