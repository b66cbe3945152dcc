// SPDX-License-Identifier: Apache-2.0
// cluster/etcd.cpp: etcd_client over libcurl and the JSON gateway. The gateway
// carries keys and values in base64 and 64-bit numbers as JSON strings.
#include "cluster/etcd.hpp"

#include <curl/curl.h>
#include <openssl/evp.h>

#include <algorithm>
#include <mutex>
#include <utility>

#include "agentstate/json.hpp"

namespace agentstate::cluster {

namespace {

/// The most an answer of a non-watch request may hold: the cluster's keys are
/// small (settings, a node registry, one key per shard).
constexpr std::size_t max_answer_bytes = 64u << 20;
/// The most one watch line may hold before it is refused.
constexpr std::size_t max_watch_line_bytes = 64u << 20;

error unavailable(std::string what) {
  return error{errc::unavailable, "etcd: " + std::move(what)};
}

/// A gateway number: a JSON string of decimal digits, or absent (0).
bool read_int(const json& o, const char* name, std::int64_t& out) {
  auto it = o.find(name);
  if (it == o.end()) {
    out = 0;
    return true;
  }
  if (it->is_number_integer()) {
    out = it->get<std::int64_t>();
    return true;
  }
  if (!it->is_string())
    return false;
  const auto& s = it->get_ref<const std::string&>();
  if (s.empty() || s.size() > 19 || s.find_first_not_of("-0123456789") != std::string::npos)
    return false;
  out = std::stoll(s);
  return true;
}

bool read_kv(const json& o, etcd_kv& kv) {
  if (!o.is_object())
    return false;
  auto key = o.find("key");
  if (key == o.end() || !key->is_string() || !unb64(key->get<std::string>(), kv.key))
    return false;
  auto value = o.find("value");
  if (value != o.end()) {
    if (!value->is_string() || !unb64(value->get<std::string>(), kv.value))
      return false;
  } else {
    kv.value.clear();
  }
  return read_int(o, "create_revision", kv.create_revision)
    && read_int(o, "mod_revision", kv.mod_revision) && read_int(o, "version", kv.version)
    && read_int(o, "lease", kv.lease);
}

bool read_range(const json& o, etcd_range& r) {
  auto h = o.find("header");
  if (h == o.end() || !h->is_object() || !read_int(*h, "revision", r.revision))
    return false;
  r.kvs.clear();
  auto kvs = o.find("kvs");
  if (kvs == o.end())
    return true;
  if (!kvs->is_array())
    return false;
  for (auto& x : *kvs) {
    etcd_kv kv;
    if (!read_kv(x, kv))
      return false;
    r.kvs.push_back(std::move(kv));
  }
  return true;
}

json op_json(const etcd_op& op) {
  switch (op.what) {
    case etcd_op::kind::put: {
      json p = {{"key", b64(op.key)}, {"value", b64(op.value)}};
      if (op.lease != 0)
        p["lease"] = std::to_string(op.lease);
      return json{{"request_put", std::move(p)}};
    }
    case etcd_op::kind::del: {
      json d = {{"key", b64(op.key)}};
      if (!op.range_end.empty())
        d["range_end"] = b64(op.range_end);
      return json{{"request_delete_range", std::move(d)}};
    }
    case etcd_op::kind::range: {
      json r = {{"key", b64(op.key)}};
      if (!op.range_end.empty())
        r["range_end"] = b64(op.range_end);
      return json{{"request_range", std::move(r)}};
    }
  }
  return json::object();
}

json compare_json(const etcd_compare& c) {
  json o = {{"key", b64(c.key)}, {"result", "EQUAL"}};
  switch (c.what) {
    case etcd_compare::target::create_revision:
      o["target"] = "CREATE";
      o["create_revision"] = std::to_string(c.number);
      break;
    case etcd_compare::target::mod_revision:
      o["target"] = "MOD";
      o["mod_revision"] = std::to_string(c.number);
      break;
    case etcd_compare::target::value:
      o["target"] = "VALUE";
      o["value"] = b64(c.value);
      break;
  }
  return o;
}

void curl_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct body {
  std::string text;
  bool too_large = false;
};

extern "C" size_t collect(char* data, size_t size, size_t n, void* user) {
  auto* b = static_cast<body*>(user);
  if (b->text.size() + size * n > max_answer_bytes) {
    b->too_large = true;
    return 0;
  }
  b->text.append(data, size * n);
  return size * n;
}

/// The watch stream's state: bytes not yet a whole line, and what ended it.
struct watch_stream {
  std::string partial;
  const std::function<bool(std::int64_t, std::vector<etcd_event>&)>* on = nullptr;
  bool stopped = false; ///< `on` returned false
  bool canceled = false;
  bool compacted = false;
  std::string failure; ///< a line that was not the gateway's JSON, or an error line
  bool created = false;
};

/// Handles one line of the watch stream; false ends the stream.
bool watch_line(watch_stream& w, const std::string& line) {
  if (line.empty())
    return true;
  json doc = json::parse(line, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) {
    w.failure = "a watch line that is not JSON";
    return false;
  }
  if (doc.contains("error")) {
    w.failure = "the watch failed: " + doc["error"].dump();
    return false;
  }
  auto res = doc.find("result");
  if (res == doc.end() || !res->is_object()) {
    w.failure = "a watch line without a result";
    return false;
  }
  std::int64_t compact = 0;
  read_int(*res, "compact_revision", compact);
  if (compact > 0) {
    w.compacted = true;
    return false;
  }
  if (res->value("canceled", false)) {
    w.canceled = true;
    return false;
  }
  if (res->value("created", false))
    w.created = true;
  auto evs = res->find("events");
  if (evs == res->end())
    return true;
  std::int64_t revision = 0;
  auto h = res->find("header");
  if (h == res->end() || !h->is_object() || !read_int(*h, "revision", revision)
      || !evs->is_array()) {
    w.failure = "a watch line without a header or with malformed events";
    return false;
  }
  std::vector<etcd_event> batch;
  for (auto& e : *evs) {
    etcd_event ev;
    ev.deleted = e.is_object() && e.value("type", "") == "DELETE";
    if (!e.is_object() || !e.contains("kv") || !read_kv(e["kv"], ev.kv)) {
      w.failure = "a malformed watch event";
      return false;
    }
    batch.push_back(std::move(ev));
  }
  if (batch.empty())
    return true;
  // The header's revision is the store's when etcd sent the line; the
  // batch's own is its last event's (events come in revision order).
  if (batch.back().kv.mod_revision > 0)
    revision = batch.back().kv.mod_revision;
  if (!(*w.on)(revision, batch)) {
    w.stopped = true;
    return false;
  }
  return true;
}

extern "C" size_t watch_data(char* data, size_t size, size_t n, void* user) {
  auto* w = static_cast<watch_stream*>(user);
  w->partial.append(data, size * n);
  std::size_t start = 0;
  for (;;) {
    auto nl = w->partial.find('\n', start);
    if (nl == std::string::npos)
      break;
    std::string line = w->partial.substr(start, nl - start);
    start = nl + 1;
    if (!watch_line(*w, line))
      return 0;
  }
  w->partial.erase(0, start);
  if (w->partial.size() > max_watch_line_bytes) {
    w->failure = "a watch line over " + std::to_string(max_watch_line_bytes) + " bytes";
    return 0;
  }
  return size * n;
}

/// Sets `h` up to POST `payload` (which must outlive the transfer) to `url`,
/// handing the answer's bytes to `write` with `data`; http and https only.
void setup_post(CURL* h, const std::string& url, const std::string& payload,
                curl_write_callback write, void* data) {
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(h, CURLOPT_POST, 1L);
  curl_easy_setopt(h, CURLOPT_POSTFIELDS, payload.c_str());
  curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, static_cast<long>(payload.size()));
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, write);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, data);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
}

} // namespace

std::string b64(std::string_view s) {
  std::string out(4 * ((s.size() + 2) / 3), '\0');
  int n =
    EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                    reinterpret_cast<const unsigned char*>(s.data()), static_cast<int>(s.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

bool unb64(std::string_view s, std::string& out) {
  if (s.size() % 4 != 0)
    return false;
  out.assign(3 * s.size() / 4, '\0');
  int n =
    EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                    reinterpret_cast<const unsigned char*>(s.data()), static_cast<int>(s.size()));
  if (n < 0)
    return false;
  std::size_t pad = 0;
  if (!s.empty() && s.back() == '=')
    pad = s.size() >= 2 && s[s.size() - 2] == '=' ? 2 : 1;
  out.resize(static_cast<std::size_t>(n) - pad);
  return true;
}

std::string prefix_end(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    auto& c = reinterpret_cast<unsigned char&>(end.back());
    if (c < 0xff) {
      ++c;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0'); // every key: etcd's "\0" range end
}

struct etcd_client::impl {
  config cfg;
  std::mutex mtx;
  std::size_t preferred = 0; ///< the endpoint that answered last
  std::vector<CURL*> idle; ///< reusable handles (keep their connections)

  ~impl() {
    for (auto* h : idle)
      curl_easy_cleanup(h);
  }

  CURL* take() {
    {
      std::lock_guard<std::mutex> lock(mtx);
      if (!idle.empty()) {
        CURL* h = idle.back();
        idle.pop_back();
        return h;
      }
    }
    return curl_easy_init();
  }

  void give_back(CURL* h) {
    std::lock_guard<std::mutex> lock(mtx);
    if (idle.size() < 8)
      idle.push_back(h);
    else
      curl_easy_cleanup(h);
  }

  /// POSTs `request` to `path` at each endpoint in turn until one answers;
  /// the answer's JSON, or the error of the last endpoint tried.
  result<json> post(const std::string& path, const json& request) {
    const std::string payload = request.dump();
    std::size_t first;
    {
      std::lock_guard<std::mutex> lock(mtx);
      first = preferred;
    }
    error last = unavailable("no endpoint");
    for (std::size_t i = 0; i < cfg.endpoints.size(); ++i) {
      std::size_t at = (first + i) % cfg.endpoints.size();
      const std::string& ep = cfg.endpoints[at];
      CURL* h = take();
      if (!h)
        return unavailable("cannot make a curl handle");
      body b;
      std::string url = ep + path;
      curl_easy_reset(h);
      setup_post(h, url, payload, collect, &b);
      curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(cfg.timeout.count()));
      CURLcode rc = curl_easy_perform(h);
      long status = 0;
      curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
      give_back(h);
      if (rc != CURLE_OK) {
        last = unavailable(
          ep + ": "
          + (b.too_large ? "an answer over 64 MiB" : std::string(curl_easy_strerror(rc))));
        continue;
      }
      json doc = json::parse(b.text, nullptr, false);
      if (doc.is_discarded() || !doc.is_object()) {
        last = unavailable(ep + path + " answered HTTP " + std::to_string(status)
                           + " with a body that is not JSON");
        continue;
      }
      {
        std::lock_guard<std::mutex> lock(mtx);
        preferred = at;
      }
      if (status != 200 || doc.contains("error")) {
        std::string message = doc.value("message", doc.value("error", std::string("?")));
        if (message.find("lease not found") != std::string::npos)
          return error{errc::not_found, "etcd: " + message};
        return unavailable(ep + path + ": HTTP " + std::to_string(status) + ": " + message);
      }
      return doc;
    }
    return last;
  }
};

etcd_client::etcd_client(std::unique_ptr<impl> p) : p_(std::move(p)) {}
etcd_client::~etcd_client() = default;

result<std::vector<std::string>> etcd_client::parse_endpoints(const std::string& urls) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (;;) {
    auto comma = urls.find(',', start);
    std::string item =
      urls.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item.empty())
      return error{errc::invalid_argument,
                   "--etcd takes comma-separated client URLs (http://HOST:PORT), not '" + urls
                     + "'"};
    while (!item.empty() && item.back() == '/')
      item.pop_back();
    out.push_back(item);
    if (comma == std::string::npos)
      break;
    start = comma + 1;
  }
  return out;
}

result<std::unique_ptr<etcd_client>> etcd_client::make(config c) {
  if (c.endpoints.empty())
    return error{errc::invalid_argument, "etcd: no endpoint"};
  for (auto& ep : c.endpoints) {
    bool http = ep.rfind("http://", 0) == 0 && ep.size() > 7;
    bool https = ep.rfind("https://", 0) == 0 && ep.size() > 8;
    if (!http && !https)
      return error{errc::invalid_argument,
                   "etcd endpoint '" + ep + "' is not an http:// or https:// URL"};
  }
  curl_once();
  auto p = std::make_unique<impl>();
  p->cfg = std::move(c);
  return std::unique_ptr<etcd_client>(new etcd_client(std::move(p)));
}

result<etcd_range> etcd_client::range(const std::string& key, const std::string& range_end) {
  json req = {{"key", b64(key)}};
  if (!range_end.empty())
    req["range_end"] = b64(range_end);
  auto doc = p_->post("/v3/kv/range", req);
  if (!doc)
    return std::move(doc).err();
  etcd_range r;
  if (!read_range(*doc, r))
    return unavailable("a range answer that is not the gateway's shape");
  return r;
}

result<etcd_txn_result> etcd_client::txn(const std::vector<etcd_compare>& compares,
                                         const std::vector<etcd_op>& success,
                                         const std::vector<etcd_op>& failure) {
  json req = {{"compare", json::array()}, {"success", json::array()}, {"failure", json::array()}};
  for (auto& c : compares)
    req["compare"].push_back(compare_json(c));
  for (auto& op : success)
    req["success"].push_back(op_json(op));
  for (auto& op : failure)
    req["failure"].push_back(op_json(op));
  auto doc = p_->post("/v3/kv/txn", req);
  if (!doc)
    return std::move(doc).err();
  etcd_txn_result out;
  out.succeeded = doc->value("succeeded", false);
  auto h = doc->find("header");
  if (h == doc->end() || !h->is_object() || !read_int(*h, "revision", out.revision))
    return unavailable("a txn answer without a header");
  auto resps = doc->find("responses");
  if (resps != doc->end() && resps->is_array()) {
    for (auto& r : *resps) {
      auto rr = r.find("response_range");
      if (rr == r.end())
        continue;
      etcd_range range;
      if (!read_range(*rr, range))
        return unavailable("a txn range answer that is not the gateway's shape");
      out.ranges.push_back(std::move(range));
    }
  }
  return out;
}

result<std::int64_t> etcd_client::lease_grant(std::int64_t ttl_s) {
  auto doc = p_->post("/v3/lease/grant", json{{"TTL", std::to_string(ttl_s)}});
  if (!doc)
    return std::move(doc).err();
  std::int64_t id = 0;
  if (!read_int(*doc, "ID", id) || id == 0)
    return unavailable("a lease grant answer without an ID");
  return id;
}

result<std::int64_t> etcd_client::lease_keepalive(std::int64_t id) {
  auto doc = p_->post("/v3/lease/keepalive", json{{"ID", std::to_string(id)}});
  if (!doc)
    return std::move(doc).err();
  auto res = doc->find("result");
  std::int64_t ttl = 0;
  if (res == doc->end() || !res->is_object() || !read_int(*res, "TTL", ttl))
    return unavailable("a keepalive answer without a result");
  if (ttl <= 0)
    return error{errc::not_found, "etcd: lease " + std::to_string(id) + " expired"};
  return ttl;
}

result<void> etcd_client::lease_revoke(std::int64_t id) {
  auto doc = p_->post("/v3/lease/revoke", json{{"ID", std::to_string(id)}});
  if (!doc && doc.code() != errc::not_found)
    return std::move(doc).err();
  return {};
}

result<void>
etcd_client::watch(const std::string& key, const std::string& range_end,
                   std::int64_t start_revision,
                   const std::function<bool(std::int64_t, std::vector<etcd_event>&)>& on,
                   const std::atomic<bool>& stop, std::chrono::milliseconds poll) {
  json create = {{"key", b64(key)}};
  if (!range_end.empty())
    create["range_end"] = b64(range_end);
  if (start_revision > 0)
    create["start_revision"] = std::to_string(start_revision);
  const std::string payload = json{{"create_request", std::move(create)}}.dump();
  std::string ep;
  {
    std::lock_guard<std::mutex> lock(p_->mtx);
    ep = p_->cfg.endpoints[p_->preferred % p_->cfg.endpoints.size()];
  }
  const std::string url = ep + "/v3/watch";
  watch_stream w;
  w.on = &on;
  CURL* h = curl_easy_init();
  CURLM* m = curl_multi_init();
  if (!h || !m) {
    if (h)
      curl_easy_cleanup(h);
    if (m)
      curl_multi_cleanup(m);
    return unavailable("cannot make a curl handle");
  }
  setup_post(h, url, payload, watch_data, &w);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(p_->cfg.timeout.count()));
  curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_multi_add_handle(m, h);
  CURLcode done_rc = CURLE_OK;
  bool finished = false;
  while (!stop.load(std::memory_order_acquire)) {
    int running = 0;
    if (curl_multi_perform(m, &running) != CURLM_OK)
      break;
    int queued = 0;
    while (CURLMsg* msg = curl_multi_info_read(m, &queued)) {
      if (msg->msg == CURLMSG_DONE) {
        done_rc = msg->data.result;
        finished = true;
      }
    }
    if (finished || running == 0)
      break;
    curl_multi_poll(m, nullptr, 0, static_cast<int>(poll.count()), nullptr);
  }
  curl_multi_remove_handle(m, h);
  curl_easy_cleanup(h);
  curl_multi_cleanup(m);
  if (w.stopped || stop.load(std::memory_order_acquire))
    return {};
  if (w.compacted)
    return error{errc::cursor_expired, "etcd: the watch's start revision was compacted"};
  if (!w.failure.empty())
    return unavailable(ep + ": " + w.failure);
  if (w.canceled)
    return unavailable(ep + ": the watch was canceled");
  return unavailable(
    ep + ": the watch stream ended"
    + (done_rc != CURLE_OK ? std::string(": ") + curl_easy_strerror(done_rc) : std::string()));
}

} // namespace agentstate::cluster
