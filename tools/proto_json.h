// Copyright 2026 The GMLake Authors.
//
// ProtoToJson: a protobuf message as the JSON a program wants from
// `gmlakectl --json`. Protobuf's own JSON mapping writes 64-bit integers as
// strings ("leased_chunks": "3"), for JavaScript's 53-bit numbers; byte
// counts and chunk counts are numbers, and jq, Python and Go read 64-bit
// JSON integers exactly. So, walking the message by reflection:
//   * field names as in the .proto (created_bytes, not createdBytes);
//   * every field, set or not (a program need not know the defaults);
//   * integers of every width as JSON integers; doubles as numbers (NaN and
//     infinities, which JSON lacks, as null);
//   * enums by name, bytes in base64, repeated fields as arrays, messages
//     as objects, in field-number order.

#ifndef GMLAKE_TOOLS_PROTO_JSON_H_
#define GMLAKE_TOOLS_PROTO_JSON_H_

#include <string>

#include "google/protobuf/message.h"
#include "nlohmann/json.hpp"

namespace gmlake {

nlohmann::ordered_json ProtoToJson(const google::protobuf::Message& message);

// ProtoToJson(message), indented by two, with a trailing newline.
std::string ProtoToJsonText(const google::protobuf::Message& message);

}  // namespace gmlake

#endif  // GMLAKE_TOOLS_PROTO_JSON_H_
