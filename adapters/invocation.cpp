// SPDX-License-Identifier: Apache-2.0
// The invocation handle: a state view over engine::begin_invocation's
// snapshot, appends that carry its pending change, output_key.
#include "agentstate/invocation.hpp"

#include <algorithm>
#include <future>

#include "agentstate/scope.hpp"
#include "model/ids.hpp"

namespace agentstate {

// -- output_key (I3) -------------------------------------------------------------

std::optional<std::string> response_text(const event& ev) {
  if (!ev.content || !ev.content->is_object())
    return std::nullopt;
  auto parts = ev.content->find("parts");
  if (parts == ev.content->end() || !parts->is_array() || parts->empty())
    return std::nullopt;
  std::string text;
  for (auto& part : *parts) {
    if (!part.is_object())
      continue;
    auto thought = part.find("thought");
    if (thought != part.end() && thought->is_boolean() && thought->get<bool>())
      continue;
    auto t = part.find("text");
    if (t != part.end() && t->is_string())
      text += t->get_ref<const std::string&>();
  }
  return text;
}

result<void> apply_output_key(event& ev, const output_key& out, std::size_t max_json_depth) {
  if (out.key.empty())
    return error{errc::invalid_argument, "output_key must not be empty"};
  if (is_derived(out.key))
    return error{errc::invalid_argument,
                 "output_key '" + out.key + "' is a derived: key, which clients cannot write"};
  if (ev.partial.value_or(false))
    return {};
  auto text = response_text(ev);
  if (!text)
    return {};
  if (!out.has_schema) {
    ev.actions.state_delta[out.key] = std::move(*text);
    return {};
  }
  if (std::all_of(text->begin(), text->end(),
                  [](unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }))
    return {};
  auto parsed = parse_json(*text, max_json_depth);
  if (!parsed)
    return error{parsed.code(),
                 "output_key '" + out.key
                   + "': the response is not the declared JSON: " + parsed.err().message};
  ev.actions.state_delta[out.key] = std::move(*parsed);
  return {};
}

// -- invocation -------------------------------------------------------------------

struct invocation::impl {
  engine* eng = nullptr;
  session_ref ref;
  std::string id;
  std::uint64_t version = 0;
  agentstate::state st;
  bool live = true;
};

namespace {

template <class T, class Start>
result<T> wait_for(Start&& start) {
  std::promise<result<T>> p;
  auto f = p.get_future();
  start([&p](result<T> r) { p.set_value(std::move(r)); });
  return f.get();
}

error ended(const std::string& id) {
  return error{errc::invalid_argument, "invocation '" + id + "' has ended"};
}

} // namespace

invocation::invocation(std::shared_ptr<impl> p) : p_(std::move(p)) {}
invocation::invocation(invocation&&) noexcept = default;

invocation& invocation::operator=(invocation&& other) noexcept {
  if (this != &other) {
    if (p_ && p_->live)
      p_->eng->end_invocation(p_->ref, p_->id, [](result<void>) {});
    p_ = std::move(other.p_);
  }
  return *this;
}

invocation::~invocation() {
  if (p_ && p_->live)
    p_->eng->end_invocation(p_->ref, p_->id, [](result<void>) {});
}

void invocation::begin(engine& eng, session_ref ref, std::string invocation_id,
                       callback<invocation> cb) {
  auto* e = &eng;
  auto r = ref;
  if (invocation_id.empty())
    invocation_id = model::make_uuid();
  auto id = invocation_id;
  eng.begin_invocation(
    std::move(ref), std::move(invocation_id),
    [e, r = std::move(r), id = std::move(id), cb = std::move(cb)](result<session> s) mutable {
      if (!s)
        return cb(std::move(s).err());
      auto p = std::make_shared<impl>();
      p->eng = e;
      p->ref = std::move(r);
      p->version = s->version;
      p->st = agentstate::state(std::move(s->state));
      p->id = std::move(id);
      cb(invocation(std::move(p)));
    });
}

result<invocation> invocation::begin(engine& eng, session_ref ref, std::string invocation_id) {
  return wait_for<invocation>([&](callback<invocation> cb) {
    begin(eng, std::move(ref), std::move(invocation_id), std::move(cb));
  });
}

const std::string& invocation::id() const {
  return p_->id;
}
const session_ref& invocation::ref() const {
  return p_->ref;
}
std::uint64_t invocation::version() const {
  return p_->version;
}
bool invocation::live() const {
  return p_ && p_->live;
}
agentstate::state& invocation::state() {
  return p_->st;
}
const agentstate::state& invocation::state() const {
  return p_->st;
}

void invocation::append(event ev, callback<append_result> cb) {
  if (!live())
    return cb(ended(p_ ? p_->id : std::string()));
  auto& p = *p_;
  if (!ev.invocation_id.empty() && ev.invocation_id != p.id)
    return cb(error{errc::invalid_argument,
                    "event names invocation '" + ev.invocation_id + "', not this invocation '"
                      + p.id + "'"});
  ev.invocation_id = p.id;
  const state_change& change = p.st.pending();
  append_request req;
  req.ref = p.ref;
  // What the event itself sets and removes (temp: keys included) is folded
  // into state() on success, after the pending change.
  json own_delta = ev.actions.state_delta.is_object() ? ev.actions.state_delta : json::object();
  auto own_removes = ev.actions.state_remove;
  json delta = change.set;
  for (auto it = own_delta.begin(); it != own_delta.end(); ++it)
    delta[it.key()] = it.value();
  std::vector<std::string> removes;
  for (auto& k : change.remove)
    if (!own_delta.contains(k))
      removes.push_back(k);
  for (auto& k : own_removes) {
    delta.erase(k);
    removes.push_back(k);
  }
  ev.actions.state_delta = std::move(delta);
  ev.actions.state_remove = std::move(removes);
  req.modify = change.modify;
  req.ev = std::move(ev);
  p.eng->append_event(std::move(req),
                      [self = p_, own_delta = std::move(own_delta),
                       own_removes = std::move(own_removes),
                       cb = std::move(cb)](result<append_result> r) mutable {
                        if (r) {
                          auto& st = self->st;
                          st.commit();
                          st.apply_committed(own_delta, own_removes);
                          st.apply_committed(r->ev.actions.state_delta, r->ev.actions.state_remove);
                          self->version = r->version;
                        }
                        cb(std::move(r));
                      });
}

result<append_result> invocation::append(event ev) {
  return wait_for<append_result>(
    [&](callback<append_result> cb) { append(std::move(ev), std::move(cb)); });
}

result<append_result> invocation::append_final(event ev, const output_key& out) {
  if (!live())
    return ended(p_ ? p_->id : std::string());
  if (auto r = apply_output_key(ev, out, p_->eng->opts().limits.max_json_depth); !r)
    return std::move(r).err();
  return append(std::move(ev));
}

result<std::string> invocation::inject(std::string_view tmpl,
                                       const artifact_lookup& artifacts) const {
  json view = p_->st.all();
  // N1's derived fallback: "x" renders derived:x unless x itself is present.
  // Only identifiers can be template names, so prefixed keys are unaffected.
  std::vector<std::pair<std::string, json>> fallbacks;
  for (auto it = view.begin(); it != view.end(); ++it)
    if (is_derived(it.key())) {
      auto name = it.key().substr(derived_prefix.size());
      if (name.find(':') == std::string::npos && !view.contains(name))
        fallbacks.emplace_back(std::move(name), it.value());
    }
  for (auto& [k, v] : fallbacks)
    view[k] = std::move(v);
  return inject_state(tmpl, view, artifacts);
}

result<void> invocation::refresh() {
  if (!live())
    return ended(p_ ? p_->id : std::string());
  auto& p = *p_;
  get_request req;
  req.ref = p.ref;
  req.num_recent_events = 0;
  req.invocation_id = p.id;
  auto s = p.eng->get_session(std::move(req));
  if (!s)
    return std::move(s).err();
  if (!*s)
    return error{errc::not_found, "session '" + p.ref.session_id + "' not found"};
  agentstate::state fresh(std::move((**s).state));
  const state_change& change = p.st.pending();
  for (auto it = change.set.begin(); it != change.set.end(); ++it)
    if (auto r = fresh.set(it.key(), it.value()); !r)
      return r;
  for (auto& k : change.remove)
    if (auto r = fresh.remove(k); !r)
      return r;
  for (auto& m : change.modify)
    if (auto r = fresh.modify(m.key, m.fallback, m.fn); !r)
      return std::move(r).err();
  p.st = std::move(fresh);
  p.version = (**s).version;
  return {};
}

void invocation::end(callback<void> cb) {
  if (!live())
    return cb(result<void>{});
  auto& p = *p_;
  p.live = false;
  p.st.rollback();
  p.st.drop_invocation_keys();
  p.eng->end_invocation(p.ref, p.id, std::move(cb));
}

result<void> invocation::end() {
  return wait_for<void>([&](callback<void> cb) { end(std::move(cb)); });
}

} // namespace agentstate
