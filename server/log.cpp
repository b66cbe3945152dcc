// SPDX-License-Identifier: Apache-2.0
#include "server/log.hpp"

#include <chrono>
#include <ctime>

namespace agentstate::server {

namespace {

const char* level_name(log_level l) {
  switch (l) {
    case log_level::info: return "info";
    case log_level::warn: return "warn";
    case log_level::error: return "error";
  }
  return "info";
}

// A logfmt value: bare when it holds no blank, quote, '=' or control
// character, else quoted with JSON escapes.
void append_text_value(std::string& out, const json& v) {
  if (!v.is_string()) {
    out += v.dump();
    return;
  }
  const auto& s = v.get_ref<const std::string&>();
  bool bare = !s.empty();
  for (unsigned char c : s)
    if (c <= 0x20 || c == '"' || c == '=' || c == '\\' || c >= 0x7f) {
      bare = false;
      break;
    }
  if (bare)
    out += s;
  else
    out += v.dump(-1, ' ', false, json::error_handler_t::replace);
}

} // namespace

std::string rfc3339_now() {
  auto now = std::chrono::system_clock::now();
  auto secs = std::chrono::system_clock::to_time_t(now);
  auto ms =
    std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  char buf[40];
  auto n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof buf - n, ".%03dZ", static_cast<int>(ms));
  return buf;
}

void logger::log(log_level level, std::string_view event, std::string_view message,
                 std::initializer_list<log_field> fields) {
  std::string line;
  try {
    auto ts = rfc3339_now();
    if (format_ == log_format::json) {
      json o = json::object();
      o["ts"] = ts;
      o["level"] = level_name(level);
      o["event"] = std::string(event);
      if (!message.empty())
        o["msg"] = std::string(message);
      for (const auto& f : fields)
        o[std::string(f.key)] = f.value;
      line = o.dump(-1, ' ', false, json::error_handler_t::replace);
    } else {
      line = "ts=" + ts + " level=" + level_name(level) + " event=" + std::string(event);
      if (!message.empty()) {
        line += " msg=";
        append_text_value(line, json(std::string(message)));
      }
      for (const auto& f : fields) {
        line += ' ';
        line.append(f.key.data(), f.key.size());
        line += '=';
        append_text_value(line, f.value);
      }
    }
    line += '\n';
  } catch (...) {
    return; // out of memory: the event is not logged
  }
  std::lock_guard<std::mutex> guard(mtx_);
  std::fwrite(line.data(), 1, line.size(), out_);
  std::fflush(out_);
}

} // namespace agentstate::server
