// Copyright 2026 The GMLake Authors.

#include "tools/proto_json.h"

#include <cmath>

#include "absl/strings/escaping.h"
#include "google/protobuf/descriptor.h"

namespace gmlake {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

nlohmann::ordered_json Double(double v) {
  if (!std::isfinite(v)) return nullptr;
  return v;
}

// One value of `field` (element `index` of a repeated field, else -1).
nlohmann::ordered_json Value(const Message& m, const FieldDescriptor* field,
                             int index) {
  const Reflection* r = m.GetReflection();
  const bool rep = index >= 0;
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return rep ? r->GetRepeatedInt32(m, field, index) : r->GetInt32(m, field);
    case FieldDescriptor::CPPTYPE_INT64:
      return rep ? r->GetRepeatedInt64(m, field, index) : r->GetInt64(m, field);
    case FieldDescriptor::CPPTYPE_UINT32:
      return rep ? r->GetRepeatedUInt32(m, field, index)
                 : r->GetUInt32(m, field);
    case FieldDescriptor::CPPTYPE_UINT64:
      return rep ? r->GetRepeatedUInt64(m, field, index)
                 : r->GetUInt64(m, field);
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return Double(rep ? r->GetRepeatedDouble(m, field, index)
                        : r->GetDouble(m, field));
    case FieldDescriptor::CPPTYPE_FLOAT:
      return Double(rep ? r->GetRepeatedFloat(m, field, index)
                        : r->GetFloat(m, field));
    case FieldDescriptor::CPPTYPE_BOOL:
      return rep ? r->GetRepeatedBool(m, field, index) : r->GetBool(m, field);
    case FieldDescriptor::CPPTYPE_ENUM: {
      const int number = rep ? r->GetRepeatedEnumValue(m, field, index)
                             : r->GetEnumValue(m, field);
      const auto* value = field->enum_type()->FindValueByNumber(number);
      if (value == nullptr) return number;  // a newer peer's value
      return value->name();
    }
    case FieldDescriptor::CPPTYPE_STRING: {
      const std::string s =
          rep ? r->GetRepeatedString(m, field, index) : r->GetString(m, field);
      if (field->type() == FieldDescriptor::TYPE_BYTES) {
        return absl::Base64Escape(s);
      }
      return s;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return ProtoToJson(rep ? r->GetRepeatedMessage(m, field, index)
                             : r->GetMessage(m, field));
  }
  return nullptr;
}

}  // namespace

nlohmann::ordered_json ProtoToJson(const Message& message) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  const google::protobuf::Descriptor* d = message.GetDescriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* field = d->field(i);
    if (field->is_repeated()) {
      nlohmann::ordered_json list = nlohmann::ordered_json::array();
      const int n = message.GetReflection()->FieldSize(message, field);
      for (int j = 0; j < n; ++j) list.push_back(Value(message, field, j));
      out[field->name()] = std::move(list);
    } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE &&
               !message.GetReflection()->HasField(message, field)) {
      out[field->name()] = nullptr;
    } else {
      out[field->name()] = Value(message, field, -1);
    }
  }
  return out;
}

std::string ProtoToJsonText(const Message& message) {
  return ProtoToJson(message).dump(2) + "\n";
}

}  // namespace gmlake
