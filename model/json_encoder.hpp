// SPDX-License-Identifier: Apache-2.0
// model/json_encoder.hpp: nlohmann's serializer writing into a buffer of its
// own, meant to live once per thread (thread_local): json::dump() builds a
// serializer per call (a 512-byte indent string, a shared output adapter, a
// localeconv() call), which costs more than a small value's text. The
// serializer keeps no state between dumps.
#pragma once

#include <cstddef>
#include <string>

#include "agentstate/json.hpp"

namespace agentstate::model {

struct json_encoder {
  std::string buf;
  nlohmann::detail::serializer<json> ser{nlohmann::detail::output_adapter<char, std::string>(buf),
                                         ' '};

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
