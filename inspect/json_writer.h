// File: inspect/json_writer.h
//
// A small streaming JSON builder for inspect's `--json` output (one object
// per report). Strings are escaped per RFC 8259; bytes that are not valid
// UTF-8 become U+FFFD, so the output is always valid UTF-8 JSON. Non-finite
// doubles are written as null (JSON has no NaN or Infinity).
//
// Usage:
//   JsonWriter j;
//   j.BeginObject();
//   j.Key("steps"); j.Int(8);
//   j.Key("loss"); j.BeginArray(); j.Double(1.5); j.EndArray();
//   j.EndObject();
//   out << j.str() << "\n";
#ifndef COPPELIUS_INSPECT_JSON_WRITER_H_
#define COPPELIUS_INSPECT_JSON_WRITER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace coppelius {

// `text` as a quoted JSON string (invalid UTF-8 bytes become U+FFFD).
std::string JsonQuote(absl::string_view text);

class JsonWriter {
 public:
  void BeginObject();
  void EndObject();
  void BeginArray();
  void EndArray();
  // Inside an object: the next value's key.
  void Key(absl::string_view key);
  void String(absl::string_view value);
  void Int(int64_t value);
  void Uint(uint64_t value);
  // Shortest round-trip form (%.17g); null when not finite.
  void Double(double value);
  void Bool(bool value);
  void Null();

  // Key + value shorthands.
  void Field(absl::string_view key, absl::string_view value) {
    Key(key);
    String(value);
  }
  void Field(absl::string_view key, const char* value) {
    Key(key);
    String(value);
  }
  void FieldInt(absl::string_view key, int64_t value) {
    Key(key);
    Int(value);
  }
  void FieldUint(absl::string_view key, uint64_t value) {
    Key(key);
    Uint(value);
  }
  void FieldDouble(absl::string_view key, double value) {
    Key(key);
    Double(value);
  }
  void FieldBool(absl::string_view key, bool value) {
    Key(key);
    Bool(value);
  }
  void DoubleArray(absl::string_view key, const std::vector<double>& values);

  const std::string& str() const { return out_; }

 private:
  void BeforeValue();
  std::string out_;
  // Per open container: whether it already has an element.
  std::vector<bool> has_element_;
  bool after_key_ = false;
};

}  // namespace coppelius

#endif  // COPPELIUS_INSPECT_JSON_WRITER_H_
