// SPDX-License-Identifier: Apache-2.0
// The README's code is code that runs. Every C++, JavaScript and CMake block
// of README.md is preceded by a line `<!-- snippet: PATH#NAME -->` and equals,
// line for line, the region of PATH between the comment lines `[readme:NAME]`
// and `[/readme:NAME]` (`//` or `#` comments), after removing the region's
// common indentation. The files quoted are built and run by tests
// (example_quickstart, js_adk_session_service, the package tests). The Quick
// start's test command is the one .ci/run runs.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace {

const std::string source_dir = AGENTSTATE_SOURCE_DIR;

std::optional<std::vector<std::string>> read_lines(const std::string& rel) {
  std::ifstream in(source_dir + "/" + rel, std::ios::binary);
  if (!in)
    return std::nullopt;
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  return lines;
}

std::string trim(const std::string& s) {
  auto a = s.find_first_not_of(" \t");
  if (a == std::string::npos)
    return {};
  auto b = s.find_last_not_of(" \t");
  return s.substr(a, b - a + 1);
}

bool is_marker(const std::string& line, const std::string& tag, const std::string& name) {
  auto t = trim(line);
  return t == "// [" + tag + name + "]" || t == "# [" + tag + name + "]";
}

// The lines of region `name` of `file`, without their common indentation;
// an error text when the file or the region is missing.
struct region {
  std::vector<std::string> lines;
  std::string error;
};

region read_region(const std::string& file, const std::string& name) {
  auto lines = read_lines(file);
  if (!lines)
    return {{}, file + ": cannot be read"};
  auto begin = std::find_if(lines->begin(), lines->end(),
                            [&](const std::string& l) { return is_marker(l, "readme:", name); });
  if (begin == lines->end())
    return {{}, file + ": no line `// [readme:" + name + "]`"};
  auto end = std::find_if(begin + 1, lines->end(),
                          [&](const std::string& l) { return is_marker(l, "/readme:", name); });
  if (end == lines->end())
    return {{}, file + ": region '" + name + "' has no end line `// [/readme:" + name + "]`"};
  std::vector<std::string> body(begin + 1, end);
  std::size_t indent = std::string::npos;
  for (auto& l : body)
    if (!trim(l).empty())
      indent = std::min(indent, l.find_first_not_of(' '));
  for (auto& l : body)
    l = trim(l).empty() ? std::string() : l.substr(indent);
  return {body, {}};
}

struct block {
  std::size_t line = 0; // 1-based line of the opening fence
  std::string lang;
  std::string marker; // "PATH#NAME", empty when none
  std::vector<std::string> lines;
};

std::vector<block> fenced_blocks(const std::vector<std::string>& readme) {
  std::vector<block> out;
  for (std::size_t i = 0; i < readme.size(); ++i) {
    if (readme[i].rfind("```", 0) != 0)
      continue;
    block b;
    b.line = i + 1;
    b.lang = trim(readme[i].substr(3));
    for (std::size_t j = i; j-- > 0;) {
      auto t = trim(readme[j]);
      if (t.empty())
        continue;
      const std::string open = "<!-- snippet: ", close = " -->";
      if (t.rfind(open, 0) == 0 && t.size() > open.size() + close.size()
          && t.compare(t.size() - close.size(), close.size(), close) == 0)
        b.marker = t.substr(open.size(), t.size() - open.size() - close.size());
      break;
    }
    std::size_t k = i + 1;
    for (; k < readme.size() && readme[k].rfind("```", 0) != 0; ++k)
      b.lines.push_back(readme[k]);
    out.push_back(std::move(b));
    i = k;
  }
  return out;
}

bool quoted_language(const std::string& lang) {
  for (const char* l : {"cpp", "c++", "js", "mjs", "javascript", "cmake"})
    if (lang == l)
      return true;
  return false;
}

// An empty text when `b` equals its region; else what differs.
std::string compare(const block& b) {
  auto hash = b.marker.find('#');
  if (hash == std::string::npos)
    return "marker '" + b.marker + "' is not PATH#NAME";
  auto file = b.marker.substr(0, hash), name = b.marker.substr(hash + 1);
  auto r = read_region(file, name);
  if (!r.error.empty())
    return r.error;
  for (std::size_t i = 0; i < std::max(r.lines.size(), b.lines.size()); ++i) {
    std::string want = i < r.lines.size() ? r.lines[i] : "(end of region)";
    std::string got = i < b.lines.size() ? b.lines[i] : "(end of block)";
    if (want != got)
      return file + "#" + name + ", line " + std::to_string(i + 1)
        + " of the block:\n  README: " + got + "\n  source: " + want;
  }
  return {};
}

} // namespace

TEST_CASE("README: every C++, JS and CMake block is a marked region of a file that runs") {
  auto readme = read_lines("README.md");
  REQUIRE(readme);
  auto blocks = fenced_blocks(*readme);
  int quoted = 0;
  for (auto& b : blocks) {
    INFO("README.md:", b.line, " (```", b.lang, ")");
    if (!quoted_language(b.lang)) {
      CHECK(b.marker.empty()); // a marker on a block that is not checked would mislead
      continue;
    }
    REQUIRE_MESSAGE(!b.marker.empty(), "no `<!-- snippet: PATH#NAME -->` line before it");
    auto diff = compare(b);
    CHECK_MESSAGE(diff.empty(), diff);
    ++quoted;
  }
  CHECK(quoted >= 4); // the C++ quick start and invocation, CMake, ADK-JS
}

TEST_CASE("README: a snippet marker is followed by its block") {
  auto readme = read_lines("README.md");
  REQUIRE(readme);
  for (std::size_t i = 0; i < readme->size(); ++i) {
    if (trim((*readme)[i]).rfind("<!-- snippet:", 0) != 0)
      continue;
    INFO("README.md:", i + 1);
    REQUIRE(i + 1 < readme->size());
    CHECK((*readme)[i + 1].rfind("```", 0) == 0);
  }
}

TEST_CASE("README: the Quick start's test command is what CI runs") {
  auto readme = read_lines("README.md");
  auto ci = read_lines(".ci/run");
  REQUIRE(readme);
  REQUIRE(ci);
  std::vector<std::string> commands;
  for (auto& l : *readme)
    if (l.rfind("tools/setup.sh ", 0) == 0)
      commands.push_back(l);
  REQUIRE(commands.size() == 2); // build and run the demo; build and test
  // Command 1 installs only what the build and the demo need; command 2 the tests' too.
  CHECK(commands[0].rfind("tools/setup.sh && ", 0) == 0);
  CHECK(commands[1].rfind("tools/setup.sh --all && ", 0) == 0);
  CHECK(commands[0].find("build/bin/agentstate demo") != std::string::npos);
  CHECK(commands[1].find("ctest --test-dir build -L quick") != std::string::npos);
  CHECK(std::find(ci->begin(), ci->end(), commands[1]) != ci->end());
}

TEST_CASE("the snippet check fails on a block that differs from its region") {
  block b;
  b.marker = "examples/quickstart.cpp#quickstart";
  auto r = read_region("examples/quickstart.cpp", "quickstart");
  REQUIRE(r.error.empty());
  REQUIRE(r.lines.size() > 3);
  b.lines = r.lines;
  CHECK(compare(b).empty());
  b.lines[2] += " ";
  CHECK(compare(b).find("line 3 of the block") != std::string::npos);
  b.lines = r.lines;
  b.lines.pop_back();
  CHECK(compare(b).find("(end of block)") != std::string::npos);
  b.marker = "examples/quickstart.cpp#no_such_region";
  CHECK(compare(b).find("no line") != std::string::npos);
  b.marker = "no/such/file.cpp#x";
  CHECK(compare(b).find("cannot be read") != std::string::npos);
}
