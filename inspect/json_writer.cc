#include "inspect/json_writer.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/utf8.h"

namespace coppelius {


std::string JsonQuote(absl::string_view text) {
  std::string out = "\"";
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = text[i];
    if (c >= 0x80) {
      const size_t n = Utf8SequenceLength(text, i);
      if (n == 0) {
        out += "\xef\xbf\xbd";  // U+FFFD
        ++i;
      } else {
        out.append(text.data() + i, n);
        i += n;
      }
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  out += "\"";
  return out;
}

void JsonWriter::BeforeValue() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!has_element_.empty()) {
    if (has_element_.back()) out_ += ",";
    has_element_.back() = true;
  }
}

void JsonWriter::BeginObject() {
  BeforeValue();
  out_ += "{";
  has_element_.push_back(false);
}
void JsonWriter::EndObject() {
  out_ += "}";
  has_element_.pop_back();
}
void JsonWriter::BeginArray() {
  BeforeValue();
  out_ += "[";
  has_element_.push_back(false);
}
void JsonWriter::EndArray() {
  out_ += "]";
  has_element_.pop_back();
}
void JsonWriter::Key(absl::string_view key) {
  BeforeValue();
  out_ += JsonQuote(key);
  out_ += ":";
  after_key_ = true;
}
void JsonWriter::String(absl::string_view value) {
  BeforeValue();
  out_ += JsonQuote(value);
}
void JsonWriter::Int(int64_t value) {
  BeforeValue();
  absl::StrAppend(&out_, value);
}
void JsonWriter::Uint(uint64_t value) {
  BeforeValue();
  absl::StrAppend(&out_, value);
}
void JsonWriter::Double(double value) {
  BeforeValue();
  if (!std::isfinite(value)) {
    out_ += "null";
    return;
  }
  out_ += absl::StrFormat("%.17g", value);
}
void JsonWriter::Bool(bool value) {
  BeforeValue();
  out_ += value ? "true" : "false";
}
void JsonWriter::Null() {
  BeforeValue();
  out_ += "null";
}
void JsonWriter::DoubleArray(absl::string_view key,
                             const std::vector<double>& values) {
  Key(key);
  BeginArray();
  for (double v : values) Double(v);
  EndArray();
}

}  // namespace coppelius
