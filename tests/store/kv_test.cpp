// SPDX-License-Identifier: Apache-2.0
// test-tiers: tsan
// The kv seam's contract, run against both implementations (LMDB in a temp
// dir and the in-memory store).
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "store/kv.hpp"
#include "support/test_support.hpp"

using namespace agentstate;
using namespace agentstate::store;

namespace {

struct kv_fixture {
  std::unique_ptr<agentstate::test::temp_dir> dir;
  std::unique_ptr<kv_store> kv;
};

std::vector<kv_fixture> both() {
  std::vector<kv_fixture> out;
  out.push_back({nullptr, make_memory_kv()});
  auto dir = std::make_unique<agentstate::test::temp_dir>();
  auto kv = open_lmdb_kv(dir->str(), false, std::uint64_t{1} << 30);
  out.push_back({std::move(dir), std::move(kv)});
  return out;
}

std::vector<std::string> keys(kv_read& r, table t, std::string prefix, std::string from = {}) {
  std::vector<std::string> out;
  r.scan(t, prefix, from, [&](std::string_view k, std::string_view) {
    out.emplace_back(k);
    return true;
  });
  return out;
}

std::vector<std::string> keys_back(kv_read& r, table t, std::string prefix, std::string from = {}) {
  std::vector<std::string> out;
  r.scan_back(t, prefix, from, [&](std::string_view k, std::string_view) {
    out.emplace_back(k);
    return true;
  });
  return out;
}

} // namespace

TEST_CASE("kv: put, get, delete and commit are visible to later reads") {
  for (auto& f : both()) {
    {
      auto w = f.kv->begin_write();
      w->put(table::meta, "a", "1");
      w->put(table::meta, "b", "2");
      CHECK(w->del(table::meta, "b"));
      CHECK_FALSE(w->del(table::meta, "zz"));
      w->commit();
    }
    auto r = f.kv->begin_read();
    CHECK(r->get(table::meta, "a").value() == "1");
    CHECK_FALSE(r->get(table::meta, "b").has_value());
    CHECK_FALSE(r->get(table::sessions, "a").has_value()); // tables are separate
  }
}

TEST_CASE("kv: an aborted write transaction leaves nothing") {
  for (auto& f : both()) {
    {
      auto w = f.kv->begin_write();
      w->put(table::meta, "a", "1");
    } // destroyed without commit
    auto r = f.kv->begin_read();
    CHECK_FALSE(r->get(table::meta, "a").has_value());
  }
}

TEST_CASE("kv: a nested transaction's abort undoes only its own writes") {
  for (auto& f : both()) {
    {
      auto w = f.kv->begin_write();
      w->put(table::meta, "keep", "1");
      w->put(table::meta, "over", "old");
      w->begin_nested();
      w->put(table::meta, "gone", "x");
      w->put(table::meta, "over", "new");
      w->del(table::meta, "keep");
      w->abort_nested();
      w->begin_nested();
      w->put(table::meta, "kept", "y");
      w->commit_nested();
      w->commit();
    }
    auto r = f.kv->begin_read();
    CHECK(r->get(table::meta, "keep").value() == "1");
    CHECK(r->get(table::meta, "over").value() == "old");
    CHECK_FALSE(r->get(table::meta, "gone").has_value());
    CHECK(r->get(table::meta, "kept").value() == "y");
  }
}

TEST_CASE("kv: an abort undoes a key inserted, overwritten, deleted and inserted again in one "
          "transaction, and a deleted key overwritten in a nested one") {
  for (auto& f : both()) {
    {
      auto w = f.kv->begin_write();
      w->put(table::meta, "old", "1");
      w->put(table::meta, "other", "o");
      w->commit();
    }
    {
      auto w = f.kv->begin_write();
      w->put(table::meta, "k", "a"); // inserted
      w->put(table::meta, "k", "b"); // overwritten
      CHECK(w->del(table::meta, "k"));
      w->put(table::meta, "k", "c"); // inserted again
      w->begin_nested();
      CHECK(w->del(table::meta, "old"));
      w->put(table::meta, "old", "2");
      CHECK(w->del(table::meta, "k"));
      w->put(table::meta, "new", "n");
      w->abort_nested();
      CHECK(w->get(table::meta, "k").value() == "c");
      CHECK(w->get(table::meta, "old").value() == "1");
      CHECK_FALSE(w->get(table::meta, "new").has_value());
      w->put(table::meta, "old", "3");
      CHECK(w->del(table::meta, "other"));
    } // destroyed without commit
    auto r = f.kv->begin_read();
    CHECK_FALSE(r->get(table::meta, "k").has_value());
    CHECK(r->get(table::meta, "old").value() == "1");
    CHECK(r->get(table::meta, "other").value() == "o");
    CHECK(keys(*r, table::meta, "") == std::vector<std::string>{"old", "other"});
  }
}

// Every table holds the same keys, so a scan that strayed into another table
// (in LMDB six tables share one database, told apart by a key byte) would see
// more than its own.
TEST_CASE("kv: scans respect prefix, start key, order and table, including 0xff bytes") {
  for (auto& f : both()) {
    const std::vector<std::string> all = {"a", "ab", "abc", "ab\xff", "ab\xff\xff", "ac", "b"};
    {
      auto w = f.kv->begin_write();
      for (std::size_t i = 0; i < table_count; ++i)
        for (auto& k : all)
          w->put(static_cast<table>(i), k, "v" + std::to_string(i));
      w->commit();
    }
    auto r = f.kv->begin_read();
    for (std::size_t i = 0; i < table_count; ++i) {
      auto t = static_cast<table>(i);
      INFO("table ", table_name(t));
      CHECK(keys(*r, t, "ab") == std::vector<std::string>{"ab", "abc", "ab\xff", "ab\xff\xff"});
      CHECK(keys(*r, t, "ab", "abc") == std::vector<std::string>{"abc", "ab\xff", "ab\xff\xff"});
      CHECK(keys_back(*r, t, "ab")
            == std::vector<std::string>{"ab\xff\xff", "ab\xff", "abc", "ab"});
      CHECK(keys_back(*r, t, "ab\xff") == std::vector<std::string>{"ab\xff\xff", "ab\xff"});
      CHECK(keys_back(*r, t, "b") == std::vector<std::string>{"b"});
      // A start key bounds the reverse scan from above (inclusive), whether it
      // is stored or falls between keys; one past the prefix starts at its last.
      CHECK(keys_back(*r, t, "ab", "abc") == std::vector<std::string>{"abc", "ab"});
      CHECK(keys_back(*r, t, "ab", "abb") == std::vector<std::string>{"ab"});
      CHECK(keys_back(*r, t, "ab", "ab\xff") == std::vector<std::string>{"ab\xff", "abc", "ab"});
      CHECK(keys_back(*r, t, "ab", "ac")
            == std::vector<std::string>{"ab\xff\xff", "ab\xff", "abc", "ab"});
      CHECK(keys_back(*r, t, "", "zzz").size() == all.size());
      CHECK(keys_back(*r, t, "b", "b") == std::vector<std::string>{"b"});
      CHECK(keys(*r, t, "zz").empty());
      CHECK(keys_back(*r, t, "zz").empty());
      CHECK(keys(*r, t, "") == all);
      auto back = keys_back(*r, t, "");
      CHECK(std::vector<std::string>(back.rbegin(), back.rend()) == all);
      CHECK(r->get(t, "ab\xff").value_or("") == "v" + std::to_string(i));
      CHECK_FALSE(r->get(t, "zz"));
      CHECK(f.kv->info().entries[i] == all.size());
      // A visitor returning false stops the scan.
      int n = 0;
      r->scan(t, "", {}, [&](auto, auto) { return ++n < 2; });
      CHECK(n == 2);
    }
    r.reset();
    // A delete touches its own table only.
    {
      auto w = f.kv->begin_write();
      CHECK(w->del(table::by_update, "ab"));
      CHECK_FALSE(w->del(table::by_update, "ab"));
      w->commit();
    }
    auto info = f.kv->info();
    for (std::size_t i = 0; i < table_count; ++i)
      CHECK(info.entries[i] == all.size() - (static_cast<table>(i) == table::by_update));
  }
}

TEST_CASE("kv: both stores order keys with long shared prefixes as unsigned bytes") {
  // Keys built from a few shared prefixes of 0..40 bytes and random tails
  // over bytes that order differently signed and unsigned (0x00, 0x7f,
  // 0x80, 0xff): differences at every offset, and keys that are prefixes
  // of others. The memory store must order them as LMDB does.
  std::uint64_t seed = 0x9e3779b97f4a7c15ULL;
  auto next = [&] {
    seed ^= seed << 13;
    seed ^= seed >> 7;
    seed ^= seed << 17;
    return seed;
  };
  const char alphabet[] = {'\x00', '\x01', 'a', 'b', '\x7f', '\x80', '\xfe', '\xff'};
  std::vector<std::string> prefixes;
  for (std::size_t len : {0, 1, 7, 8, 9, 15, 16, 17, 24, 31, 40}) {
    std::string p;
    for (std::size_t i = 0; i < len; ++i)
      p += alphabet[next() % sizeof alphabet];
    prefixes.push_back(p);
  }
  std::set<std::string> want;
  while (want.size() < 3000) {
    std::string k = prefixes[next() % prefixes.size()];
    for (std::size_t i = next() % 20; i > 0; --i)
      k += alphabet[next() % sizeof alphabet];
    if (!k.empty()) // LMDB has no empty key
      want.insert(k);
  }
  for (auto& f : both()) {
    {
      auto w = f.kv->begin_write();
      for (auto& k : want)
        w->put(table::events, k, k);
      w->commit();
    }
    auto r = f.kv->begin_read();
    auto all = keys(*r, table::events, "");
    CHECK(all == std::vector<std::string>(want.begin(), want.end()));
    for (auto& p : prefixes) {
      std::vector<std::string> with;
      for (auto& k : want)
        if (k.compare(0, p.size(), p) == 0)
          with.push_back(k);
      CHECK(keys(*r, table::events, p) == with);
      CHECK(keys_back(*r, table::events, p)
            == std::vector<std::string>(with.rbegin(), with.rend()));
    }
    for (auto& k : want)
      CHECK(r->get(table::events, k).value_or("-") == k);
  }
}

TEST_CASE("kv: transaction ids grow with commits and read snapshots report theirs") {
  for (auto& f : both()) {
    std::uint64_t before = f.kv->begin_read()->txn_id();
    std::uint64_t writing;
    {
      auto w = f.kv->begin_write();
      writing = w->txn_id();
      w->put(table::meta, "x", "1");
      w->commit();
    }
    CHECK(writing > before);
    CHECK(f.kv->begin_read()->txn_id() == writing);
  }
}

TEST_CASE("kv: an LMDB read transaction is a snapshot that later commits do not change") {
  agentstate::test::temp_dir dir;
  auto kv = open_lmdb_kv(dir.str(), false, std::uint64_t{1} << 30);
  {
    auto w = kv->begin_write();
    w->put(table::meta, "k", "old");
    w->commit();
  }
  auto r = kv->begin_read();
  {
    auto w = kv->begin_write();
    w->put(table::meta, "k", "new");
    w->commit();
  }
  CHECK(r->get(table::meta, "k").value() == "old");
  CHECK(kv->begin_read()->get(table::meta, "k").value() == "new");
}

TEST_CASE("kv: LMDB map full surfaces as storage_full and aborts only that write") {
  agentstate::test::temp_dir dir;
  auto kv = open_lmdb_kv(dir.str(), false, std::uint64_t{1} << 20); // 1 MiB
  std::string big(64 * 1024, 'x');
  bool full = false;
  int stored = 0;
  for (int i = 0; i < 64 && !full; ++i) {
    try {
      auto w = kv->begin_write();
      w->put(table::events, "k" + std::to_string(i), big);
      w->commit();
      ++stored;
    } catch (const kv_failure& e) {
      CHECK(e.code == errc::storage_full);
      full = true;
    }
  }
  CHECK(full);
  auto r = kv->begin_read();
  for (int i = 0; i < stored; ++i)
    CHECK(r->get(table::events, "k" + std::to_string(i)).has_value());
}

namespace {

// Resident file-backed bytes of this process (statm's "shared" column).
std::uint64_t file_resident() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  REQUIRE(f != nullptr);
  unsigned long long size = 0, resident = 0, shared = 0;
  REQUIRE(std::fscanf(f, "%llu %llu %llu", &size, &resident, &shared) == 3);
  std::fclose(f);
  return shared * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

constexpr int resident_rows = 64 * 1024; // 64 MiB of 1,000-byte values

std::string resident_value(int i) {
  std::string v(1000, static_cast<char>('a' + i % 26));
  std::memcpy(v.data(), &i, sizeof i);
  return v;
}

void fill(kv_store& kv) {
  for (int i = 0; i < resident_rows;) {
    auto w = kv.begin_write();
    for (int end = i + 4096; i < end; ++i)
      w->put(table::events, "k" + std::to_string(1000000 + i), resident_value(i));
    w->commit();
  }
}

// Reads every row through the map; returns how many hold the expected bytes.
int read_all(kv_store& kv) {
  int good = 0, i = 0;
  auto r = kv.begin_read();
  r->scan(table::events, "k", {}, [&](std::string_view, std::string_view v) {
    good += v == resident_value(i++);
    return true;
  });
  return good;
}

// Waits (a bounded poll) until a check of the resident bound that began
// after this call has ended (kv_store::resident_checks), a check that saw
// every page mapped before the call; false only past a hang guard far
// beyond any period here.
bool check_after_now(kv_store& kv) {
  auto from = kv.resident_checks();
  return agentstate::test::eventually([&] { return kv.resident_checks() >= from + 2; },
                                      std::chrono::seconds(60));
}

} // namespace

TEST_CASE("kv: an LMDB store's mapped pages are dropped from RSS beyond the resident bound") {
  constexpr std::uint64_t mib = std::uint64_t{1} << 20;
  // Control: unbounded, reading 64 MiB of rows leaves them resident.
  {
    agentstate::test::temp_dir dir;
    auto kv = open_lmdb_kv(dir.str(), false, std::uint64_t{1} << 30);
    fill(*kv);
    auto before = file_resident();
    REQUIRE(read_all(*kv) == resident_rows);
    auto after = file_resident();
    INFO("unbounded: resident file-backed grew by ", (after - before) / mib, " MiB");
    CHECK(after > before + 48 * mib);
    CHECK(kv->resident_trims() == 0);
  }
  // Bounded at 8 MiB, checked every 20 ms: the pages are dropped, the data
  // reads back intact afterwards, and readers never notice.
  auto at_open = file_resident();
  agentstate::test::temp_dir dir;
  auto kv = open_lmdb_kv(dir.str(), false, std::uint64_t{1} << 30,
                         resident_bound{8 * mib, std::chrono::milliseconds(20)});
  fill(*kv);
  for (int round = 0; round < 3; ++round)
    REQUIRE(read_all(*kv) == resident_rows);
  // The resident trimmer runs on its own thread.
  CHECK(agentstate::test::eventually([&] { return kv->resident_trims() > 0; },
                                     std::chrono::seconds(10), std::chrono::milliseconds(10)));
  // Within a few periods of the last read, the pages are gone again.
  std::uint64_t now = 0;
  INFO("bounded: resident file-backed is ", (now - std::min(now, at_open)) / mib,
       " MiB over its value at open");
  CHECK(agentstate::test::eventually(
    [&] {
      now = file_resident();
      return now < at_open + 8 * mib + 16 * mib;
    },
    std::chrono::seconds(5), std::chrono::milliseconds(20)));
  CHECK(read_all(*kv) == resident_rows);
}

TEST_CASE("kv: a burst of transactions checks the resident bound before the period ends") {
  constexpr std::uint64_t mib = std::uint64_t{1} << 20;
  agentstate::test::temp_dir dir;
  // A period of an hour: only the per-transaction trigger can cause a trim.
  auto kv = open_lmdb_kv(dir.str(), false, std::uint64_t{1} << 30,
                         resident_bound{8 * mib, std::chrono::hours(1)});
  fill(*kv); // 16 write transactions
  REQUIRE(read_all(*kv) == resident_rows); // maps every page: over the bound
  // Two triggers' worth of cheap read transactions: they wake the thread at
  // least once (a wake-up lost to the race with its wait is repeated 64
  // later), so a check comes long before the hour, and it trims.
  for (int reads = 1; reads <= 2 * 64; ++reads) {
    auto r = kv->begin_read();
    REQUIRE(r->get(table::events, "k" + std::to_string(1000000 + reads)).value()
            == resident_value(reads));
  }
  REQUIRE(agentstate::test::eventually([&] { return kv->resident_checks() > 0; },
                                       std::chrono::seconds(60)));
  CHECK(kv->resident_trims() > 0);
} // the destructor wakes the thread at once, not after the hour

// LMDB writes a run of pages with lseek + writev on its descriptor of the
// data file. The trimmer finds where the file's data ends with
// lseek(SEEK_DATA/SEEK_HOLE); done on LMDB's descriptor, that moved the
// offset between LMDB's lseek and writev, the run landed elsewhere and bench e
// corrupted its store (segfaults, created sessions "not found"). Caught
// before release. The check: an offset parked on LMDB's descriptor survives
// many trims.
TEST_CASE("kv: trims never move the file offset of LMDB's descriptor") {
  constexpr std::uint64_t mib = std::uint64_t{1} << 20;
  agentstate::test::temp_dir dir;
  auto kv = open_lmdb_kv(dir.str(), false, std::uint64_t{1} << 30,
                         resident_bound{mib, std::chrono::milliseconds(2)});
  fill(*kv);
  // LMDB's descriptor of data.mdb (read-write; its meta descriptor is
  // write-only and the trimmer's own is read-only).
  namespace fs = std::filesystem;
  auto data = fs::canonical(fs::path(dir.str()) / "data.mdb");
  int fd = -1;
  for (auto& e : fs::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    auto target = fs::read_symlink(e.path(), ec);
    if (ec || target != data)
      continue;
    int n = std::stoi(e.path().filename().string());
    int fl = ::fcntl(n, F_GETFL);
    if (fl >= 0 && (fl & O_ACCMODE) == O_RDWR)
      fd = n;
  }
  REQUIRE(fd >= 0);
  constexpr off_t parked = 12345;
  REQUIRE(::lseek(fd, parked, SEEK_SET) == parked);
  // Each round maps every page, over the bound, and ends once a check that
  // began after its reads has ended: at least one trim falls in each round.
  auto before = kv->resident_trims();
  for (int round = 0; round < 5; ++round) {
    REQUIRE(read_all(*kv) == resident_rows);
    REQUIRE(check_after_now(*kv));
  }
  CHECK(kv->resident_trims() >= before + 5);
  CHECK(::lseek(fd, 0, SEEK_CUR) == parked);
}

TEST_CASE("kv: a large file the host maps after open causes no trims once it stops growing") {
  constexpr std::uint64_t mib = std::uint64_t{1} << 20;
  agentstate::test::temp_dir dir;
  auto kv = open_lmdb_kv(dir.str(), false, std::uint64_t{1} << 30,
                         resident_bound{8 * mib, std::chrono::milliseconds(20)});
  {
    auto w = kv->begin_write(); // a small store: ~1 MiB, far under the bound
    for (int i = 0; i < 1000; ++i)
      w->put(table::events, "k" + std::to_string(1000000 + i), resident_value(i));
    w->commit();
  }
  // The host maps and touches 64 MiB of its own file.
  std::string path = dir.str() + "/host-file";
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    REQUIRE(f != nullptr);
    std::string chunk(mib, 'h');
    for (int i = 0; i < 64; ++i)
      REQUIRE(std::fwrite(chunk.data(), 1, chunk.size(), f) == chunk.size());
    std::fclose(f);
  }
  int fd = ::open(path.c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  void* host = ::mmap(nullptr, 64 * mib, PROT_READ, MAP_SHARED, fd, 0);
  REQUIRE(host != MAP_FAILED);
  std::uint64_t sum = 0;
  for (std::uint64_t off = 0; off < 64 * mib; off += 4096)
    sum += static_cast<const unsigned char*>(host)[off];
  CHECK(sum == 'h' * (64 * mib / 4096));
  // The small store is read once before the trimmer settles, so that no read
  // after that maps more than its ~1 MiB over a settled trimmer's baseline:
  // the pages it read stay mapped, or a trim that dropped them re-anchored
  // the baseline without them.
  auto scan_small = [&] {
    auto r = kv->begin_read();
    int n = 0;
    r->scan(table::events, "k", {}, [&](std::string_view, std::string_view) { return ++n, true; });
    CHECK(n == 1000);
  };
  scan_small();
  // Settled once a check that began after both reads has ended. While the
  // host's mapping grew, each bound's worth of growth could cost a needless
  // trim (each re-anchors the baseline).
  REQUIRE(check_after_now(*kv));
  auto settled = kv->resident_trims();
  CHECK(settled <= 64 / 8 + 1);
  // Twenty checks of the trimmer while the small store is read: the host's
  // pages stay mapped (the engine never touches them), and the store is not
  // trimmed again: the bug this guards against trimmed at every check.
  auto checks = kv->resident_checks();
  for (int round = 0; round < 20; ++round) {
    scan_small();
    auto seen = kv->resident_checks();
    REQUIRE(agentstate::test::eventually([&] { return kv->resident_checks() > seen; },
                                         std::chrono::seconds(60)));
  }
  CHECK(kv->resident_checks() >= checks + 20);
  CHECK(kv->resident_trims() == settled);
  ::munmap(host, 64 * mib);
  ::close(fd);
}
