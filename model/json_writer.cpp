// SPDX-License-Identifier: Apache-2.0
#include "model/json_writer.hpp"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "model/json_text.hpp"

namespace agentstate::model {

namespace {

// -- doubles: Grisu2 (Loitsch, "Printing floating-point numbers quickly and
// accurately with integers", 2010), with the parameters whose digits
// json::dump() writes: the target exponent range [-60, -32], cached powers
// of ten every 8 decimal exponents from 10^-300, boundaries narrowed by one
// unit each side, and the last digit moved toward the value while that
// keeps it inside the boundaries and brings it closer.

// f * 2^e.
struct fp {
  std::uint64_t f;
  int e;
};

// The 64 high bits of the 128-bit product, rounded half up.
fp multiply(fp a, fp b) {
  const auto p = static_cast<unsigned __int128>(a.f) * b.f;
  const auto hi = static_cast<std::uint64_t>(p >> 64);
  const auto lo = static_cast<std::uint64_t>(p);
  return {hi + (lo >> 63), a.e + b.e + 64};
}

// REQUIRES: x.f != 0.
fp normalized(fp x) {
  const int shift = __builtin_clzll(x.f);
  return {x.f << shift, x.e - shift};
}

// 10^k ~ f * 2^e, f rounded to nearest with its top bit set, for k = -300,
// -292, ..., 324.
struct cached_power {
  std::uint64_t f;
  int e;
  int k;
};
constexpr cached_power cached_powers[] = {
  {0xAB70FE17C79AC6CA, -1060, -300}, {0xFF77B1FCBEBCDC4F, -1034, -292},
  {0xBE5691EF416BD60C, -1007, -284}, {0x8DD01FAD907FFC3C, -980, -276},
  {0xD3515C2831559A83, -954, -268},  {0x9D71AC8FADA6C9B5, -927, -260},
  {0xEA9C227723EE8BCB, -901, -252},  {0xAECC49914078536D, -874, -244},
  {0x823C12795DB6CE57, -847, -236},  {0xC21094364DFB5637, -821, -228},
  {0x9096EA6F3848984F, -794, -220},  {0xD77485CB25823AC7, -768, -212},
  {0xA086CFCD97BF97F4, -741, -204},  {0xEF340A98172AACE5, -715, -196},
  {0xB23867FB2A35B28E, -688, -188},  {0x84C8D4DFD2C63F3B, -661, -180},
  {0xC5DD44271AD3CDBA, -635, -172},  {0x936B9FCEBB25C996, -608, -164},
  {0xDBAC6C247D62A584, -582, -156},  {0xA3AB66580D5FDAF6, -555, -148},
  {0xF3E2F893DEC3F126, -529, -140},  {0xB5B5ADA8AAFF80B8, -502, -132},
  {0x87625F056C7C4A8B, -475, -124},  {0xC9BCFF6034C13053, -449, -116},
  {0x964E858C91BA2655, -422, -108},  {0xDFF9772470297EBD, -396, -100},
  {0xA6DFBD9FB8E5B88F, -369, -92},   {0xF8A95FCF88747D94, -343, -84},
  {0xB94470938FA89BCF, -316, -76},   {0x8A08F0F8BF0F156B, -289, -68},
  {0xCDB02555653131B6, -263, -60},   {0x993FE2C6D07B7FAC, -236, -52},
  {0xE45C10C42A2B3B06, -210, -44},   {0xAA242499697392D3, -183, -36},
  {0xFD87B5F28300CA0E, -157, -28},   {0xBCE5086492111AEB, -130, -20},
  {0x8CBCCC096F5088CC, -103, -12},   {0xD1B71758E219652C, -77, -4},
  {0x9C40000000000000, -50, 4},      {0xE8D4A51000000000, -24, 12},
  {0xAD78EBC5AC620000, 3, 20},       {0x813F3978F8940984, 30, 28},
  {0xC097CE7BC90715B3, 56, 36},      {0x8F7E32CE7BEA5C70, 83, 44},
  {0xD5D238A4ABE98068, 109, 52},     {0x9F4F2726179A2245, 136, 60},
  {0xED63A231D4C4FB27, 162, 68},     {0xB0DE65388CC8ADA8, 189, 76},
  {0x83C7088E1AAB65DB, 216, 84},     {0xC45D1DF942711D9A, 242, 92},
  {0x924D692CA61BE758, 269, 100},    {0xDA01EE641A708DEA, 295, 108},
  {0xA26DA3999AEF774A, 322, 116},    {0xF209787BB47D6B85, 348, 124},
  {0xB454E4A179DD1877, 375, 132},    {0x865B86925B9BC5C2, 402, 140},
  {0xC83553C5C8965D3D, 428, 148},    {0x952AB45CFA97A0B3, 455, 156},
  {0xDE469FBD99A05FE3, 481, 164},    {0xA59BC234DB398C25, 508, 172},
  {0xF6C69A72A3989F5C, 534, 180},    {0xB7DCBF5354E9BECE, 561, 188},
  {0x88FCF317F22241E2, 588, 196},    {0xCC20CE9BD35C78A5, 614, 204},
  {0x98165AF37B2153DF, 641, 212},    {0xE2A0B5DC971F303A, 667, 220},
  {0xA8D9D1535CE3B396, 694, 228},    {0xFB9B7CD9A4A7443C, 720, 236},
  {0xBB764C4CA7A44410, 747, 244},    {0x8BAB8EEFB6409C1A, 774, 252},
  {0xD01FEF10A657842C, 800, 260},    {0x9B10A4E5E9913129, 827, 268},
  {0xE7109BFBA19C0C9D, 853, 276},    {0xAC2820D9623BF429, 880, 284},
  {0x80444B5E7AA7CF85, 907, 292},    {0xBF21E44003ACDD2D, 933, 300},
  {0x8E679C2F5E44FF8F, 960, 308},    {0xD433179D9C8CB841, 986, 316},
  {0x9E19DB92B4E31BA9, 1013, 324},
};

constexpr int min_target_exponent = -60;
constexpr int cached_power_count = sizeof cached_powers / sizeof cached_powers[0];

// The first cached power c (the smallest) with c.e + e + 64 >= -60: its
// index estimated from log10(2) ~ 78913 / 2^18, then corrected.
const cached_power& cached_power_for(int e) {
  const int need = min_target_exponent - e - 64; // c.e >= need
  // 10^k has binary exponent ~ k * log2(10) - 63.
  const int k = ((need + 63) * 78913) / (1 << 18);
  int i = (k + 300) / 8;
  i = i < 0 ? 0 : i >= cached_power_count ? cached_power_count - 1 : i;
  while (i > 0 && cached_powers[i - 1].e >= need)
    --i;
  while (i + 1 < cached_power_count && cached_powers[i].e < need)
    ++i;
  return cached_powers[i];
}

// Moves the last digit down by one step of `ten` while the digits stay
// above the lower boundary (rest + ten <= delta) and get closer to the
// value, which lies `dist` below the upper boundary.
void round_toward_value(char* digits, int len, std::uint64_t dist, std::uint64_t delta,
                        std::uint64_t rest, std::uint64_t ten) {
  while (rest < dist && delta - rest >= ten
         && (rest + ten < dist || dist - rest > rest + ten - dist)) {
    --digits[len - 1];
    rest += ten;
  }
}

// The decimal digits of a finite v > 0: returns their count and sets
// `exponent` so that v ~ digits * 10^exponent. `digits` holds at least 18.
int grisu2_digits(double v, char* digits, int& exponent) {
  std::uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  const std::uint64_t fraction = bits & ((std::uint64_t{1} << 52) - 1);
  const int biased = static_cast<int>(bits >> 52) & 0x7ff;
  const fp x =
    biased == 0 ? fp{fraction, 1 - 1075} : fp{fraction | (std::uint64_t{1} << 52), biased - 1075};
  // The boundaries halfway to the neighbouring doubles; the lower one is
  // nearer when x is a power of two above the smallest normal exponent.
  const bool lower_nearer = fraction == 0 && biased > 1;
  const fp upper = normalized(fp{2 * x.f + 1, x.e - 1});
  fp lower = lower_nearer ? fp{4 * x.f - 1, x.e - 2} : fp{2 * x.f - 1, x.e - 1};
  lower.f <<= lower.e - upper.e;
  lower.e = upper.e;
  const fp value = normalized(x);

  const cached_power* c = &cached_power_for(upper.e);
  const fp scale{c->f, c->e};
  const fp w = multiply(value, scale);
  fp lo = multiply(lower, scale);
  fp hi = multiply(upper, scale);
  ++lo.f;
  --hi.f;
  exponent = -c->k;

  std::uint64_t delta = hi.f - lo.f;
  std::uint64_t dist = hi.f - w.f;
  const int shift = -hi.e;
  const std::uint64_t one = std::uint64_t{1} << shift;
  auto integral = static_cast<std::uint32_t>(hi.f >> shift);
  std::uint64_t fractional = hi.f & (one - 1);

  int len = 0;
  int remaining = 1; // digits of the integral part still to write
  std::uint32_t pow10 = 1;
  while (std::uint64_t{pow10} * 10 <= integral) {
    pow10 *= 10;
    ++remaining;
  }
  while (remaining > 0) {
    digits[len++] = static_cast<char>('0' + integral / pow10);
    integral %= pow10;
    --remaining;
    const std::uint64_t rest = (std::uint64_t{integral} << shift) + fractional;
    if (rest <= delta) {
      exponent += remaining;
      round_toward_value(digits, len, dist, delta, rest, std::uint64_t{pow10} << shift);
      return len;
    }
    pow10 /= 10;
  }
  int fraction_digits = 0;
  for (;;) {
    fractional *= 10;
    digits[len++] = static_cast<char>('0' + (fractional >> shift));
    fractional &= one - 1;
    ++fraction_digits;
    delta *= 10;
    dist *= 10;
    if (fractional <= delta)
      break;
  }
  exponent -= fraction_digits;
  round_toward_value(digits, len, dist, delta, fractional, one);
  return len;
}

// -- strings

// The number of bytes from s[i] on that begin a strict UTF-8 sequence
// (all of it when the sequence is whole): 0 when s[i] cannot start one.
std::size_t utf8_prefix(std::string_view s, std::size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0xc2 || c > 0xf4)
    return 0;
  const std::size_t len = c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
  // The second byte's range excludes overlong forms, surrogates and code
  // points above U+10FFFF.
  unsigned char lo = 0x80, hi = 0xbf;
  if (c == 0xe0)
    lo = 0xa0;
  else if (c == 0xed)
    hi = 0x9f;
  else if (c == 0xf0)
    lo = 0x90;
  else if (c == 0xf4)
    hi = 0x8f;
  std::size_t k = 1;
  while (k < len && i + k < s.size()) {
    const auto cc = static_cast<unsigned char>(s[i + k]);
    if (k == 1 ? (cc < lo || cc > hi) : (cc & 0xc0) != 0x80)
      break;
    ++k;
  }
  return k;
}

template <class Int>
void append_int(std::string& out, Int v) {
  char digits[24];
  const auto end = std::to_chars(digits, digits + sizeof digits, v).ptr;
  out.append(digits, end);
}

bool append_string(std::string& out, std::string_view s, utf8_policy policy) {
  if (policy == utf8_policy::strict)
    return append_escaped(out, s);
  append_escaped_lossy(out, s);
  return true;
}

} // namespace

void append_double(std::string& out, double v) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  char text[32];
  char* p = text;
  if (std::signbit(v)) {
    *p++ = '-';
    v = -v;
  }
  if (v == 0) {
    std::memcpy(p, "0.0", 3);
    out.append(text, static_cast<std::size_t>(p + 3 - text));
    return;
  }
  char digits[24];
  int exponent;
  const int k = grisu2_digits(v, digits, exponent);
  const int point = k + exponent; // digits before the decimal point
  if (k <= point && point <= 15) { // integral: digits, zeros, ".0"
    std::memcpy(p, digits, static_cast<std::size_t>(k));
    p += k;
    std::memset(p, '0', static_cast<std::size_t>(point - k));
    p += point - k;
    *p++ = '.';
    *p++ = '0';
  } else if (0 < point && point <= 15) { // the point inside the digits
    std::memcpy(p, digits, static_cast<std::size_t>(point));
    p += point;
    *p++ = '.';
    std::memcpy(p, digits + point, static_cast<std::size_t>(k - point));
    p += k - point;
  } else if (-4 < point && point <= 0) { // "0.", up to 3 zeros, the digits
    *p++ = '0';
    *p++ = '.';
    std::memset(p, '0', static_cast<std::size_t>(-point));
    p += -point;
    std::memcpy(p, digits, static_cast<std::size_t>(k));
    p += k;
  } else { // d[.ddd]e+NN, at least two exponent digits
    *p++ = digits[0];
    if (k > 1) {
      *p++ = '.';
      std::memcpy(p, digits + 1, static_cast<std::size_t>(k - 1));
      p += k - 1;
    }
    *p++ = 'e';
    int e = point - 1;
    *p++ = e < 0 ? '-' : '+';
    e = e < 0 ? -e : e;
    if (e >= 100) {
      *p++ = static_cast<char>('0' + e / 100);
      e %= 100;
    }
    *p++ = static_cast<char>('0' + e / 10);
    *p++ = static_cast<char>('0' + e % 10);
  }
  out.append(text, static_cast<std::size_t>(p - text));
}

void append_escaped_lossy(std::string& out, std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  static constexpr std::string_view replacement = "\xef\xbf\xbd";
  out += '"';
  std::size_t run = 0; // start of the bytes not yet copied
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (plain_bytes[c]) {
      ++i;
      continue;
    }
    if (c >= 0x80) {
      if (const auto len = utf8_sequence(s, i)) {
        i += len;
        continue;
      }
      out.append(s.data() + run, i - run);
      out += replacement;
      // A byte that cannot start a sequence is dropped; the byte that broke
      // a sequence off is looked at again.
      const auto prefix = utf8_prefix(s, i);
      i += prefix == 0 ? 1 : prefix;
      run = i;
      continue;
    }
    out.append(s.data() + run, i - run);
    run = ++i;
    out += '\\';
    if (const char e = escape_letter[c]) {
      out += e;
    } else {
      out += "u00";
      out += hex[c >> 4];
      out += hex[c & 0xf];
    }
  }
  out.append(s.data() + run, s.size() - run);
  out += '"';
}

bool append_json(std::string& out, const json& x, utf8_policy policy) {
  switch (x.type()) {
    case json::value_t::object: {
      const auto& members = x.get_ref<const json::object_t&>();
      out += '{';
      bool first = true;
      for (const auto& [key, value] : members) {
        if (!first)
          out += ',';
        first = false;
        if (!append_string(out, key, policy))
          return false;
        out += ':';
        if (!append_json(out, value, policy))
          return false;
      }
      out += '}';
      return true;
    }
    case json::value_t::array: {
      const auto& items = x.get_ref<const json::array_t&>();
      out += '[';
      bool first = true;
      for (const auto& item : items) {
        if (!first)
          out += ',';
        first = false;
        if (!append_json(out, item, policy))
          return false;
      }
      out += ']';
      return true;
    }
    case json::value_t::string: return append_string(out, x.get_ref<const std::string&>(), policy);
    case json::value_t::boolean: out += x.get<bool>() ? "true" : "false"; return true;
    case json::value_t::number_integer: append_int(out, x.get<std::int64_t>()); return true;
    case json::value_t::number_unsigned: append_int(out, x.get<std::uint64_t>()); return true;
    case json::value_t::number_float: append_double(out, x.get<double>()); return true;
    case json::value_t::binary: {
      // Only built in code (parsed text has no binary values): written as
      // json::dump() writes one, an object of its bytes and subtype.
      const auto& bin = x.get_binary();
      out += R"({"bytes":[)";
      for (std::size_t i = 0; i < bin.size(); ++i) {
        if (i)
          out += ',';
        append_int(out, static_cast<unsigned>(bin[i]));
      }
      out += R"(],"subtype":)";
      if (bin.has_subtype())
        append_int(out, static_cast<unsigned>(bin.subtype()));
      else
        out += "null";
      out += '}';
      return true;
    }
    case json::value_t::discarded: out += "<discarded>"; return true;
    case json::value_t::null: out += "null"; return true;
  }
  out += "null";
  return true;
}

} // namespace agentstate::model
