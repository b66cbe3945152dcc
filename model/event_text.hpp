// SPDX-License-Identifier: Apache-2.0
// model/event_text.hpp: the stored text of an event, written straight from
// the `event` struct and read straight back into it; and the reader of the
// stored JSON form that state values share.
#pragma once

#include <string>
#include <string_view>

#include "agentstate/error.hpp"
#include "agentstate/types.hpp"

namespace agentstate::model {

/// The event as compact JSON text, byte for byte what
/// `dump_json(to_json(ev))` gives (members in key order, nlohmann's number
/// and string forms), without building the intermediate DOM: the append path
/// stores this text and the text read path splices it unparsed.
/// Errors: invalid_argument when a string is not valid UTF-8. Never throws.
/// Cost: one pass over the event; allocates only the returned string.
result<std::string> encode_event_text(const event& ev);

/// Reads JSON text in the form the engine writes it into `out`: compact, an
/// object's keys in strictly increasing byte order, integers of at most 18
/// digits, finite doubles, no \u escape of a surrogate, strict UTF-8, at
/// most 64 levels deep. Whenever it returns true, `out` is identical (number
/// types included) to json::parse(text). It returns false for every text
/// outside that form, malformed ones included, leaving `out` unspecified:
/// the caller then parses with nlohmann, which decides what the text means or
/// that it is corrupt.
/// Cost: one pass; one allocation per container and per long string, none
/// per character; recursion, ~300 bytes of stack per level (~20 KB at 64).
/// Throws only std::bad_alloc.
bool parse_stored_text(std::string_view text, json& out);

/// Decodes the event whose stored text is `text` straight into `ev`, which
/// must be default-constructed (no intermediate DOM for the event and its
/// actions). Whenever it returns true, `ev` is identical to
/// event_from_json(json::parse(text)). It returns false, leaving `ev`
/// partly written, when the text is outside the form parse_stored_text reads
/// or would not decode (a member of the wrong type); the caller then resets
/// `ev` and takes that general path, which decides.
/// Throws only std::bad_alloc.
bool decode_event_text(std::string_view text, event& ev);

} // namespace agentstate::model
