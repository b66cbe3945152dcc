// store/event_text.hpp: the stored text of an event, written straight from
// the `event` struct.
#pragma once

#include <string>
#include <string_view>

#include "agentstate/error.hpp"
#include "agentstate/types.hpp"

namespace agentstate::store {

/// True when `s` is strict UTF-8: no overlong forms, no surrogates, nothing
/// above U+10FFFF (what nlohmann's encoder and the protocol accept).
bool valid_utf8(std::string_view s) noexcept;

/// The event as compact JSON text, byte for byte what
/// `dump_json(to_json(ev))` gives (members in key order, nlohmann's number
/// and string forms), without building the intermediate DOM: the append path
/// stores this text and the text read path splices it unparsed.
/// Errors: invalid_argument when a string is not valid UTF-8. Never throws.
/// Cost: one pass over the event; allocates only the returned string.
result<std::string> encode_event_text(const event& ev);

} // namespace agentstate::store
