// actors/engine_factory.hpp: opening an engine over a wrapped store. The
// fault-injection tests use it to put store/fault_kv.hpp between the engine
// and LMDB; engine::open is this with no wrapper.
#pragma once

#include <functional>
#include <memory>

#include "agentstate/engine.hpp"
#include "store/kv.hpp"

namespace agentstate::detail {

using store_wrapper =
  std::function<std::unique_ptr<store::kv_store>(std::unique_ptr<store::kv_store>)>;

struct engine_factory {
  /// As engine::open; the opened store is passed through `wrap` (if set)
  /// before the engine uses it.
  static result<std::unique_ptr<engine>> open(const options& opts, const store_wrapper& wrap);
};

} // namespace agentstate::detail
