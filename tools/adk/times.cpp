// SPDX-License-Identifier: Apache-2.0
#include "tools/adk/times.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "model/json_text.hpp"

namespace agentstate::tools::adk {

std::int64_t days_from_civil(std::int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<std::int64_t>(doe) - 719468;
}

// Parses "YYYY-MM-DD HH:MM:SS[.f{1,9}]" (or with 'T'), as UTC or local time.
std::optional<double> parse_datetime(const std::string& s, bool local) {
  int Y, M, D, h, m, sec, n = 0;
  if (std::sscanf(s.c_str(), "%4d-%2d-%2d%*1[ T]%2d:%2d:%2d%n", &Y, &M, &D, &h, &m, &sec, &n) != 6
      || n != 19 || M < 1 || M > 12 || D < 1 || D > 31 || h > 23 || m > 59 || sec > 60)
    return std::nullopt;
  std::int64_t frac_ns = 0;
  std::size_t i = 19;
  if (i < s.size() && s[i] == '.') {
    std::size_t digits = 0;
    std::int64_t scale = 100000000;
    for (++i; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i, ++digits) {
      frac_ns += (s[i] - '0') * scale;
      scale /= 10;
    }
    if (digits == 0 || digits > 9)
      return std::nullopt;
  }
  if (i != s.size())
    return std::nullopt;
  std::int64_t secs;
  if (local) {
    std::tm tm{};
    tm.tm_year = Y - 1900;
    tm.tm_mon = M - 1;
    tm.tm_mday = D;
    tm.tm_hour = h;
    tm.tm_min = m;
    tm.tm_sec = sec;
    tm.tm_isdst = -1;
    secs = static_cast<std::int64_t>(std::mktime(&tm));
  } else {
    secs = days_from_civil(Y, static_cast<unsigned>(M), static_cast<unsigned>(D)) * 86400 + h * 3600
      + m * 60 + sec;
  }
  // One rounding: the nearest double to secs + frac.
  if (frac_ns % 1000 == 0)
    return static_cast<double>(secs * 1000000 + frac_ns / 1000) / 1e6;
  return static_cast<double>(secs) + static_cast<double>(frac_ns) / 1e9;
}

// "YYYY-MM-DD HH:MM:SS.ffffff" of `t` (rounded to the microsecond), as UTC
// or local time: what SQLAlchemy writes for a naive datetime.
std::string format_datetime(double t, bool local) {
  auto total = static_cast<std::int64_t>(std::llround(t * 1e6));
  std::int64_t secs = total / 1000000, us = total % 1000000;
  if (us < 0) {
    us += 1000000;
    secs -= 1;
  }
  std::time_t tt = static_cast<std::time_t>(secs);
  std::tm tm{};
  if (local)
    localtime_r(&tt, &tm);
  else
    gmtime_r(&tt, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02d %02d:%02d:%02d.%06lld", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<long long>(us));
  return buf;
}

// Epoch seconds -> milliseconds as ADK-JS keeps them: an integer when that
// integer divided by 1000 gives `t` back exactly (everything ADK-JS wrote
// does), else the real number of milliseconds.
json to_millis(double t) {
  double ms = t * 1000.0;
  double r = std::nearbyint(ms);
  if (std::isfinite(r) && std::fabs(r) < 9e15 && r / 1000.0 == t)
    return static_cast<std::int64_t>(r);
  return ms;
}

// The JSON number text of `t` seconds in milliseconds, exactly: the decimal
// of `t` (which reads back as `t`) with its exponent raised by 3. A double
// of milliseconds cannot hold every double of seconds (at today's times
// ~1 in 40 would come back one unit in the last place off); this text can,
// and ADK-JS reads it as the nearest double of milliseconds.
std::string millis_text(double t) {
  json ms = to_millis(t);
  if (ms.is_number_integer())
    return ms.dump();
  std::string d = json(t).dump();
  auto e = d.find_first_of("eE");
  if (e == std::string::npos)
    return d + "e3";
  return d.substr(0, e) + "e" + std::to_string(std::stol(d.substr(e + 1)) + 3);
}

// The inverse of millis_text for any JSON number text of milliseconds:
// the nearest double to (that decimal) / 1000, rounded once.
std::optional<double> seconds_from_millis_text(std::string_view text) {
  auto e = text.find_first_of("eE");
  std::string mantissa(text.substr(0, e));
  long exp = 0;
  if (e != std::string_view::npos) {
    std::string x(text.substr(e + 1));
    char* end = nullptr;
    exp = std::strtol(x.c_str(), &end, 10);
    if (x.empty() || *end != '\0')
      return std::nullopt;
  }
  std::string shifted = mantissa + "e" + std::to_string(exp - 3);
  char* end = nullptr;
  double v = std::strtod(shifted.c_str(), &end);
  if (end != shifted.c_str() + shifted.size() || !std::isfinite(v))
    return std::nullopt;
  return v;
}

// The raw text of the last top-level member `key` of the JSON object
// `text`, which must be valid JSON (it is parsed before). nullopt when the
// object has no such member spelled without escapes.
std::optional<std::string_view> top_level_member(std::string_view text, std::string_view key) {
  std::size_t i = 0;
  auto ws = [&] {
    while (i < text.size()
           && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r'))
      ++i;
  };
  auto skip_string = [&] { // at the opening quote; leaves i after the closing one
    for (++i; i < text.size() && text[i] != '"'; ++i)
      if (text[i] == '\\')
        ++i;
    ++i;
  };
  ws();
  if (i >= text.size() || text[i] != '{')
    return std::nullopt;
  ++i;
  std::optional<std::string_view> found;
  for (;;) {
    ws();
    if (i >= text.size() || text[i] != '"')
      return found;
    std::size_t k0 = i + 1;
    skip_string();
    std::string_view k = text.substr(k0, i - 1 - k0);
    ws();
    ++i; // ':'
    ws();
    std::size_t v0 = i;
    if (i < text.size() && text[i] == '"') {
      skip_string();
    } else if (i < text.size() && (text[i] == '{' || text[i] == '[')) {
      int depth = 0;
      for (; i < text.size(); ++i) {
        if (text[i] == '"') {
          skip_string();
          --i;
        } else if (text[i] == '{' || text[i] == '[') {
          ++depth;
        } else if (text[i] == '}' || text[i] == ']') {
          if (--depth == 0) {
            ++i;
            break;
          }
        }
      }
    } else {
      while (i < text.size() && text[i] != ',' && text[i] != '}' && text[i] != ' '
             && text[i] != '\t' && text[i] != '\n' && text[i] != '\r')
        ++i;
    }
    if (k == key)
      found = text.substr(v0, i - v0);
    ws();
    if (i >= text.size() || text[i] != ',')
      return found;
    ++i;
  }
}

} // namespace agentstate::tools::adk
