// SPDX-License-Identifier: Apache-2.0
// examples/simulation.cpp: a message-driven market simulation whose agents
// coordinate only through shared state. Built with the project and run as a
// CTest smoke test (example_simulation).
//
// What it demonstrates:
//  * app: state as the shared world (app:stock, app:price) and user: state as
//    a wallet shared by the traders of one user (user:wallet, user:items);
//  * atomic read-modify-write (state().modify, resolved by the store writer in
//    commit order): a trader takes an item with a modify that never lets the
//    stock go below zero (it returns the value unchanged when the stock is
//    empty) and learns from the stored event's resolved value whether it got
//    it: the value names the order that last took an item. A wallet works the
//    same way: reserve, then pay, or refund when the stock was gone;
//  * two CAF styles: the market is an event_based actor that never blocks
//    (it sets app:price through the typed engine actor of caf.hpp, and
//    collects the traders' replies to its ticks), and each trader is a
//    detached actor (its own thread) that may use the blocking invocation API;
//  * the change feed as messages (watch_to_actor of caf.hpp): a board actor
//    follows the app: keys and the market reacts to it instead of polling:
//    it ticks the traders when the board saw the round's price committed.
//    Trading ends with a last app:open = false; commit order tells the board
//    that it has seen everything before it, so it quits, and the watch, whose
//    destination is gone, ends itself.
// At the end it checks the invariants: total bought == initial - final stock,
// no stored stock or wallet value below zero, no item sold twice, per user
// items == buys and coins + spent == budget; and the board's: it saw every
// round's price once, in order, the stock only fall to the stored value, and
// exactly read_changes of its scope. Any failed check exits 1.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "agentstate/caf.hpp"
#include "agentstate/invocation.hpp"
#include "example_support.hpp"

using namespace agentstate;

namespace {

const char* usage =
  "usage: simulation [--dir PATH] [--memory] [--users N] [--traders N] [--stock N] [--rounds N]\n"
  "  --dir PATH    store directory, kept afterwards (default: a temp dir, removed)\n"
  "  --memory      durability::memory (nothing on disk)\n"
  "  --users N     users (default 4); user u starts with 12 + 8u coins\n"
  "  --traders N   trader agents (sessions) per user (default 3)\n"
  "  --stock N     items in app:stock at the start (default 24)\n"
  "  --rounds N    at most N rounds; the price is 1 + round (default 10)\n";

using tick_atom = caf::atom_constant<caf::atom("tick")>;
using price_atom = caf::atom_constant<caf::atom("price")>;
enum code : int { bought, broke, sold_out, failed };
struct outcome {
  int code;
  int price; // the app:price the trader read at its begin
  int appends; // events it stored
};

} // namespace

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outcome)

namespace {

int budget_of(int user) {
  return 12 + 8 * user;
}

// The order named by a stored wallet or stock value ("" when there is none).
std::string order_in(const json& delta, const std::string& key) {
  auto it = delta.find(key);
  return it != delta.end() && it->is_object() ? it->value("last", "") : "";
}

event note(const std::string& author, const std::string& text) {
  event ev;
  ev.author = author;
  ev.content = json{{"parts", {{{"text", text}}}}};
  return ev;
}

// -- a trader: one session, one thread; one buy attempt per tick ---------------------
caf::behavior trader(caf::event_based_actor* self, engine* eng, session_ref ref) {
  return {[=](tick_atom, int round) -> outcome {
    auto inv = invocation::begin(*eng, ref); // blocking: fine on a detached actor
    if (!inv)
      return {failed, 0, 0};
    state& st = inv->state();
    const int price = st.get<int>("app:price", 0);
    const std::string order = ref.session_id + "/r" + std::to_string(round);
    auto take = [order](int amount, const char* field) { // modify fn: never below zero
      return [=](const json& cur) {
        if (cur.value(field, 0) < amount)
          return cur; // unchanged: the stored event shows someone else's order
        json next = cur;
        next[field] = cur.value(field, 0) - amount;
        next["last"] = order;
        return next;
      };
    };
    // 1. Reserve the price in the user's wallet (shared by the user's traders).
    st.modify("user:wallet", json{{"coins", 0}, {"last", ""}}, take(price, "coins"));
    auto r1 = inv->append(note("trader", "reserve " + std::to_string(price)));
    if (!r1)
      return {failed, price, 0};
    if (order_in(r1->ev.actions.state_delta, "user:wallet") != order)
      return {broke, price, 1};
    // 2. Take one item from the app's stock.
    st.modify("app:stock", json{{"left", 0}, {"last", ""}}, take(1, "left"));
    auto r2 = inv->append(note("trader", "take one for " + order));
    if (!r2)
      return {failed, price, 1};
    bool got = order_in(r2->ev.actions.state_delta, "app:stock") == order;
    // 3. Pay (count the item) or refund the reservation.
    auto add = [](int n) { return [n](const json& v) { return v.get<int>() + n; }; };
    if (got) {
      st.modify("user:items", 0, add(1));
      st.modify("user:spent", 0, add(price));
      st.modify("items", 0, add(1)); // this trader's own count (session key)
    } else {
      st.modify("user:wallet", json::object(), [price](const json& w) {
        json next = w;
        next["coins"] = w.value("coins", 0) + price;
        return next;
      });
    }
    auto r3 = inv->append(note("trader", got ? "paid" : "refunded"));
    inv->end();
    return {!r3 ? failed : got ? bought : sold_out, price, r3 ? 3 : 2};
  }};
}

// -- the market: an event_based actor that never blocks --------------------------------
struct tally {
  int rounds = 0, bought = 0, broke = 0, refunds = 0;
  std::vector<int> user_items, user_spent, trader_appends, trader_items;
  std::vector<std::string> failures;
  // What the board saw through the feed, in arrival order.
  std::vector<int> board_prices, board_stock;
  std::vector<std::string> board_cursors;
  bool board_closed = false; // it saw app:open = false
  std::vector<std::string> board_failures; // written by the board only
};

struct market_state {
  engine_actor h;
  session_ref ref; // the market's own session, which writes app:price
  std::vector<caf::actor> traders;
  std::vector<bool> active;
  int users = 0, max_rounds = 0, round = 0, awaiting = 0;
  tally* out = nullptr;
};
using market_actor = caf::stateful_actor<market_state>;

void next_round(market_actor* self);

void on_outcome(market_actor* self, std::size_t t, const outcome& o) {
  auto& s = self->state;
  tally& out = *s.out;
  out.trader_appends[t] += o.appends;
  if (o.price != 1 + s.round) // the app:price this round set, read by another session
    out.failures.push_back("trader " + std::to_string(t) + " saw price " + std::to_string(o.price)
                           + " in round " + std::to_string(s.round));
  if (o.code == bought) {
    ++out.bought;
    ++out.trader_items[t];
    ++out.user_items[t % s.users];
    out.user_spent[t % s.users] += o.price;
  } else {
    s.active[t] = false; // out of money or out of stock: this trader retires
    out.broke += o.code == broke;
    out.refunds += o.code == sold_out;
    if (o.code == failed)
      out.failures.push_back("trader " + std::to_string(t) + " failed");
  }
  if (--s.awaiting == 0)
    next_round(self);
}

// Stops the traders, the engine actor and the market.
void stop_all(market_actor* self) {
  auto& s = self->state;
  for (auto& t : s.traders)
    self->send_exit(t, caf::exit_reason::user_shutdown);
  self->send_exit(s.h, caf::exit_reason::user_shutdown);
  self->quit();
}

void next_round(market_actor* self) {
  auto& s = self->state;
  if (s.round == s.max_rounds || std::count(s.active.begin(), s.active.end(), true) == 0) {
    // Done: the closing bell (app:open = false) is the board's last change.
    append_request a;
    a.ref = s.ref;
    a.ev = note("market", "closed");
    a.ev.actions.state_delta = {{"app:open", false}};
    self->request(s.h, caf::infinite, std::move(a))
      .then([self](append_result&) { stop_all(self); },
            [self](caf::error& e) {
              self->state.out->failures.push_back("close: " + self->system().render(e));
              stop_all(self);
            });
    return;
  }
  s.out->rounds = ++s.round;
  // Publish this round's price (app: state); the ticks follow when the board
  // saw it committed (price_atom).
  append_request a;
  a.ref = s.ref;
  a.ev = note("market", "round " + std::to_string(s.round));
  a.ev.actions.state_delta = {{"app:price", 1 + s.round}};
  self->request(s.h, caf::infinite, std::move(a))
    .then([](append_result&) {},
          [self](caf::error& e) {
            self->state.out->failures.push_back("price: " + self->system().render(e));
            self->state.max_rounds = self->state.round; // stop
            next_round(self);
          });
}

// The board saw app:price = `price` committed: tick every active trader.
void on_price(market_actor* self, int price) {
  auto& s = self->state;
  if (price != 1 + s.round || s.awaiting != 0) {
    s.out->failures.push_back("the board reported price " + std::to_string(price) + " in round "
                              + std::to_string(s.round));
    s.max_rounds = s.round; // stop
    if (s.awaiting == 0)
      next_round(self);
    return;
  }
  for (std::size_t t = 0; t < s.traders.size(); ++t) {
    if (!s.active[t])
      continue;
    ++s.awaiting;
    self->request(s.traders[t], caf::infinite, tick_atom::value, s.round)
      .then([self, t](outcome& o) { on_outcome(self, t, o); },
            [self, t](caf::error&) {
              on_outcome(self, t, {failed, 0, 0});
            });
  }
}

caf::behavior market(market_actor* self, engine_actor h, session_ref ref,
                     std::vector<caf::actor> traders, int users, int rounds, tally* out) {
  auto& s = self->state;
  s.h = std::move(h);
  s.ref = std::move(ref);
  s.traders = std::move(traders);
  s.active.assign(s.traders.size(), true);
  s.users = users;
  s.max_rounds = rounds;
  s.out = out;
  out->user_items.assign(users, 0);
  out->user_spent.assign(users, 0);
  out->trader_appends.assign(s.traders.size(), 0);
  out->trader_items.assign(s.traders.size(), 0);
  return {[self](tick_atom) { next_round(self); },
          [self](price_atom, int price) { on_price(self, price); }};
}

// -- the board: follows the app: keys through the feed (watch_to_actor) -----------------
// Each change_page is a request: the next comes once this handler returned.
caf::behavior board(caf::event_based_actor* self, caf::actor market, tally* out) {
  return {
    [self, market, out](change_page& p) {
      for (auto& c : p.changes) {
        out->board_cursors.push_back(c.cursor);
        const json& d = c.state_delta;
        if (auto it = d.find("app:price"); it != d.end()) {
          out->board_prices.push_back(it->get<int>());
          self->send(market, price_atom::value, it->get<int>());
        }
        if (auto it = d.find("app:stock"); it != d.end())
          out->board_stock.push_back(it->value("left", -1));
        if (auto it = d.find("app:open"); it != d.end() && *it == false)
          out->board_closed = true;
      }
      // Every change before the closing bell has been seen (commit order):
      // quitting ends the watch.
      if (out->board_closed)
        self->quit();
    },
    [self, out](watch_end& e) { // an end before the closing bell: the watch failed
      out->board_failures.push_back(std::string("board: watch ended: ") + to_string(e.reason));
      self->quit();
    },
  };
}

} // namespace

int main(int argc, char** argv) {
  std::string dir;
  bool memory = false;
  int users = 4, traders = 3, stock = 24, rounds = 10;
  if (auto stop = examples::parse_args(
        argc, argv, "simulation", usage, dir, memory,
        {{"--users", &users}, {"--traders", &traders}, {"--stock", &stock}, {"--rounds", &rounds}}))
    return *stop;
  examples::example_store store("simulation", dir, memory);
  if (!store.ok())
    return 1;
  options opts = store.opts();
  auto opened = engine::open(opts);
  if (!opened) {
    std::fprintf(stderr, "simulation: open: %s\n", to_string(opened.err()).c_str());
    return 1;
  }
  engine& eng = **opened;
  const std::string app = examples::fresh_app_name("market");
  // The market's session seeds the app: state; each user's first trader seeds its wallet.
  session_ref market_ref{app, "market", "exchange"};
  json world = {
    {"app:stock", {{"left", stock}, {"last", ""}}}, {"app:price", 0}, {"app:open", true}};
  bool setup = eng.create_session({app, "market", "exchange", world}).ok();
  std::vector<session_ref> refs; // trader t belongs to user t % users
  for (int t = 0; t < users * traders; ++t) {
    refs.push_back({app, "u" + std::to_string(t % users), "t" + std::to_string(t)});
    json init = json::object();
    if (t < users)
      init["user:wallet"] = {{"coins", budget_of(t)}, {"last", ""}};
    setup = setup && eng.create_session({app, refs[t].user_id, refs[t].session_id, init}).ok();
  }
  auto start = eng.head_cursor(); // the board's feed starts after the setup
  if (!setup || !start) {
    std::fprintf(stderr, "simulation: creating the sessions failed\n");
    return 1;
  }
  watch_request board_feed; // the app's app: keys, set by any session
  board_feed.scope = watch_scope::app;
  board_feed.app_name = app;
  board_feed.from = *start;

  tally out;
  {
    caf::actor_system_config cc;
    add_error_category(cc);
    caf::actor_system sys{cc};
    engine_actor h = spawn_engine_actor(sys, eng);
    std::vector<caf::actor> agents;
    for (auto& ref : refs)
      agents.push_back(sys.spawn<caf::detached>(trader, &eng, ref));
    auto m = sys.spawn(market, h, market_ref, agents, users, rounds, &out);
    auto b = sys.spawn(board, m, &out);
    // The handle cancels the watch when it goes; the watch ends before that,
    // when the board quits (the relay, which await_all_actors_done waits for,
    // ends with it).
    auto feed = watch_to_actor(eng, board_feed, b);
    if (feed) {
      caf::anon_send(m, tick_atom::value);
    } else {
      out.failures.push_back("watch_to_actor: " + to_string(feed.err()));
      for (auto& a : agents)
        caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
      for (auto& a : {caf::actor_cast<caf::actor>(h), m, b})
        caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    }
    sys.await_all_actors_done(); // the market stops the rest, the board itself
  }

  // -- the invariants ----------------------------------------------------------------
  examples::checklist check;
  out.failures.insert(out.failures.end(), out.board_failures.begin(), out.board_failures.end());
  for (auto& f : out.failures)
    std::fprintf(stderr, "simulation: %s\n", f.c_str());
  check(out.failures.empty(),
        std::to_string(out.rounds) + " rounds, " + std::to_string(refs.size())
          + " traders: no errors, each saw its round's app:price");
  auto app_state = eng.get_app_state(app);
  int left = app_state ? app_state->value("stock", json::object()).value("left", -1) : -1;
  check(left >= 0 && out.bought == stock - left,
        std::to_string(out.bought) + " bought = " + std::to_string(stock) + " initial - "
          + std::to_string(left) + " left (" + std::to_string(out.broke)
          + " refused by the wallet, " + std::to_string(out.refunds) + " refunded)");
  int negative = 0, bad_session = 0;
  std::multiset<int> sold; // stock left after each successful take
  for (std::size_t t = 0; t < refs.size(); ++t) {
    get_request g;
    g.ref = refs[t];
    auto s = eng.get_session(g);
    if (!s || !*s) {
      ++bad_session;
      continue;
    }
    for (auto& ev : (*s)->events) {
      const json& d = ev.actions.state_delta;
      if (d.contains("app:stock")) {
        negative += d["app:stock"].value("left", -1) < 0;
        // A take event whose resolved value names its own order got an item.
        std::string text = response_text(ev).value_or("");
        if (text.rfind("take one for ", 0) == 0 && order_in(d, "app:stock") == text.substr(13))
          sold.insert(d["app:stock"].value("left", -1));
      }
      if (d.contains("user:wallet"))
        negative += d["user:wallet"].value("coins", -1) < 0;
    }
    bad_session += (*s)->version != std::uint64_t(out.trader_appends[t])
      || (*s)->state.value("items", 0) != out.trader_items[t];
  }
  check(negative == 0, "no stored app:stock or user:wallet value below zero");
  bool distinct = std::set<int>(sold.begin(), sold.end()).size() == sold.size();
  check(int(sold.size()) == out.bought && distinct
          && (sold.empty() || (*sold.begin() >= left && *sold.rbegin() < stock)),
        "no item sold twice (each take's stored stock value is unique)");
  check(bad_session == 0, "every trader's session: its events and items counted");
  int items = 0, bad_user = 0;
  for (int u = 0; u < users; ++u) {
    auto us = eng.get_user_state(app, "u" + std::to_string(u));
    int n = us ? us->value("items", 0) : -1, spent = us ? us->value("spent", 0) : -1;
    int coins = us ? us->value("wallet", json::object()).value("coins", -1) : -1;
    items += n;
    bad_user +=
      n != out.user_items[u] || spent != out.user_spent[u] || coins + spent != budget_of(u);
  }
  check(items == out.bought && bad_user == 0,
        "sum of user:items = " + std::to_string(items) + " buys; per user coins + spent = budget");
  // The board's view through the feed.
  std::vector<int> prices;
  for (int r = 1; r <= out.rounds; ++r)
    prices.push_back(1 + r);
  check(out.board_closed && out.board_prices == prices,
        "the board saw each of the " + std::to_string(prices.size())
          + " rounds' app:price once, in order, then the closing bell");
  int falls = 0;
  bool rises = false;
  for (std::size_t i = 1; i < out.board_stock.size(); ++i) {
    falls += out.board_stock[i] < out.board_stock[i - 1];
    rises = rises || out.board_stock[i] > out.board_stock[i - 1];
  }
  falls += !out.board_stock.empty() && out.board_stock.front() < stock;
  check(!rises && falls == out.bought
          && (out.board_stock.empty() ? left == stock : out.board_stock.back() == left),
        "the board saw app:stock only fall, " + std::to_string(falls) + " times, to the stored "
          + std::to_string(left));
  std::vector<std::string> logged;
  for (watch_request q = board_feed;;) {
    auto page = eng.read_changes(q, 1000);
    if (!page) {
      check(false, "read_changes: " + to_string(page.err()));
      break;
    }
    for (auto& c : page->changes)
      logged.push_back(c.cursor);
    q.from = page->cursor;
    if (page->at_head && page->changes.empty())
      break;
  }
  check(logged == out.board_cursors,
        "the board got read_changes' " + std::to_string(logged.size())
          + " app: changes, in commit order, each once");
  if (auto c = eng.close(); !c)
    check(false, "close: " + to_string(c.err()));
  return examples::report("simulation", app, store, check.failed);
}
