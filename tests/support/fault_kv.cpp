// SPDX-License-Identifier: Apache-2.0
#include "support/fault_kv.hpp"

#include <string>

namespace agentstate::store {

void fault_plan::on_call(fault_target t, const char* what) {
  if (t != target || disarmed.load())
    return;
  auto n = calls.fetch_add(1) + 1;
  if (fail_at == 0 || n < fail_at || (!forever && n != fail_at))
    return;
  injected.fetch_add(1);
  throw kv_failure{code,
                   std::string("injected fault in ") + what + " (call " + std::to_string(n) + ")"};
}

void fault_plan::hold_writes() {
  std::lock_guard<std::mutex> lk(hold_mtx_);
  held_ = true;
}

void fault_plan::release_writes() {
  {
    std::lock_guard<std::mutex> lk(hold_mtx_);
    held_ = false;
  }
  hold_cv_.notify_all();
}

void fault_plan::wait_while_held() {
  std::unique_lock<std::mutex> lk(hold_mtx_);
  if (!held_)
    return;
  writes_held.fetch_add(1);
  hold_cv_.wait(lk, [this] { return !held_; });
  writes_held.fetch_sub(1);
}

namespace {

// The read calls of a transaction, forwarded unchanged to the wrapped one.
template <class Base>
class forwarding_reads : public Base {
public:
  explicit forwarding_reads(std::unique_ptr<Base> inner) : inner_(std::move(inner)) {}
  std::optional<std::string_view> get(table t, std::string_view key) override {
    return inner_->get(t, key);
  }
  void scan(table t, std::string_view prefix, std::string_view from,
            const kv_visitor& fn) override {
    inner_->scan(t, prefix, from, fn);
  }
  void scan_back(table t, std::string_view prefix, std::string_view from,
                 const kv_visitor& fn) override {
    inner_->scan_back(t, prefix, from, fn);
  }
  std::uint64_t txn_id() const override { return inner_->txn_id(); }
  bool legacy_values() const override { return inner_->legacy_values(); }

protected:
  std::unique_ptr<Base> inner_;
};

using faulty_read = forwarding_reads<kv_read>;

class faulty_write : public forwarding_reads<kv_write> {
public:
  faulty_write(std::unique_ptr<kv_write> inner, std::shared_ptr<fault_plan> plan)
    : forwarding_reads(std::move(inner)), plan_(std::move(plan)) {}
  void put(table t, std::string_view key, std::string_view value) override {
    plan_->on_call(fault_target::writes, "put");
    inner_->put(t, key, value);
  }
  bool del(table t, std::string_view key) override {
    plan_->on_call(fault_target::writes, "del");
    return inner_->del(t, key);
  }
  void drop_table(std::string_view name) override {
    plan_->on_call(fault_target::writes, "drop_table");
    inner_->drop_table(name);
  }
  void absorb_table(table t) override {
    plan_->on_call(fault_target::writes, "absorb_table");
    inner_->absorb_table(t);
  }
  void begin_nested() override {
    plan_->on_call(fault_target::writes, "begin_nested");
    inner_->begin_nested();
  }
  void commit_nested() override {
    plan_->on_call(fault_target::writes, "commit_nested");
    inner_->commit_nested();
  }
  void abort_nested() noexcept override { inner_->abort_nested(); }
  void commit() override {
    // A failed commit ends the transaction, as in LMDB: abort the inner one.
    try {
      plan_->on_call(fault_target::writes, "commit");
    } catch (...) {
      inner_.reset();
      throw;
    }
    inner_->commit();
  }

private:
  std::shared_ptr<fault_plan> plan_;
};

class faulty_kv : public kv_store {
public:
  faulty_kv(std::unique_ptr<kv_store> inner, std::shared_ptr<fault_plan> plan)
    : inner_(std::move(inner)), plan_(std::move(plan)) {}
  std::unique_ptr<kv_read> begin_read() override {
    plan_->on_call(fault_target::reads, "begin_read");
    return std::make_unique<faulty_read>(inner_->begin_read());
  }
  std::unique_ptr<kv_write> begin_write() override {
    plan_->wait_while_held();
    auto inner = inner_->begin_write(); // taken first: one writer at a time
    plan_->on_call(fault_target::writes, "begin_write");
    return std::make_unique<faulty_write>(std::move(inner), plan_);
  }
  void sync() override { inner_->sync(); }
  bool nests() const override { return inner_->nests(); }
  kv_info info() override { return inner_->info(); }
  void copy_to_fd(int fd, bool compact) override { inner_->copy_to_fd(fd, compact); }
  void copy_to(const std::string& dest, bool compact) override { inner_->copy_to(dest, compact); }

private:
  std::unique_ptr<kv_store> inner_;
  std::shared_ptr<fault_plan> plan_;
};

} // namespace

std::unique_ptr<kv_store> make_faulty_kv(std::unique_ptr<kv_store> inner,
                                         std::shared_ptr<fault_plan> plan) {
  return std::make_unique<faulty_kv>(std::move(inner), std::move(plan));
}

} // namespace agentstate::store
