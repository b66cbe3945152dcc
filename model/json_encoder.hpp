// SPDX-License-Identifier: Apache-2.0
// model/json_encoder.hpp: a buffer for JSON text, meant to live once per
// thread (thread_local) so that encoding a value allocates only its result.
#pragma once

#include <cstddef>
#include <string>

namespace agentstate::model {

struct json_encoder {
  std::string buf;

  /// A copy of what was written since buf was last cleared. A buffer grown
  /// past 64 KiB (a large value) is released instead of kept for the thread.
  std::string take() {
    std::string out(buf);
    if (buf.capacity() > (std::size_t{1} << 16))
      std::string().swap(buf);
    return out;
  }
};

} // namespace agentstate::model
