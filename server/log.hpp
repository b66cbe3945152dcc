// SPDX-License-Identifier: Apache-2.0
// server/log.hpp: the structured log of `agentstate serve` on standard error,
// one line per event (docs/protocol.md, "Logs"). Two formats:
//   text: logfmt, `ts=2025-05-01T10:00:00.123Z level=info event=listening
//         msg="listening on 127.0.0.1:7400" address=127.0.0.1:7400`
//   json: one object per line with the same members.
// Contract for callers: never pass a token or request contents as a field.
#pragma once

#include <cstdio>
#include <initializer_list>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "agentstate/json.hpp"

namespace agentstate::server {

enum class log_format { text, json };
enum class log_level { info, warn, error };

/// One `key=value` of an event; the value is a string, number or bool.
struct log_field {
  std::string_view key;
  json value;
};

/// Thread safety: log() may be called from any thread; lines never
/// interleave. Cost: one formatted line and one fwrite+fflush per event.
class logger {
public:
  explicit logger(log_format f = log_format::text, std::FILE* out = stderr)
    : format_(f), out_(out) {}

  void log(log_level level, std::string_view event, std::string_view message,
           std::initializer_list<log_field> fields = {});

  void info(std::string_view event, std::string_view message,
            std::initializer_list<log_field> fields = {}) {
    log(log_level::info, event, message, fields);
  }
  void warn(std::string_view event, std::string_view message,
            std::initializer_list<log_field> fields = {}) {
    log(log_level::warn, event, message, fields);
  }
  void error(std::string_view event, std::string_view message,
             std::initializer_list<log_field> fields = {}) {
    log(log_level::error, event, message, fields);
  }

  log_format format() const { return format_; }

private:
  log_format format_;
  std::FILE* out_;
  std::mutex mtx_;
};

/// The current time as RFC 3339 UTC with milliseconds.
std::string rfc3339_now();

} // namespace agentstate::server
