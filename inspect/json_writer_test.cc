#include "inspect/json_writer.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace coppelius {
namespace {

TEST(JsonQuote, EscapesByHand) {
  EXPECT_EQ(JsonQuote("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(JsonQuote("\n\t\x01"), "\"\\n\\t\\u0001\"");
  EXPECT_EQ(JsonQuote("\x7f"), "\"\\u007f\"");
  // Valid UTF-8 passes through: "é" (c3 a9), "€" (e2 82 ac), U+1F600.
  EXPECT_EQ(JsonQuote("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"),
            "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"");
  // Ill-formed bytes become U+FFFD (ef bf bd), one per byte.
  EXPECT_EQ(JsonQuote("\xff"), "\"\xef\xbf\xbd\"");
  EXPECT_EQ(JsonQuote("a\xc3"), "\"a\xef\xbf\xbd\"");
  EXPECT_EQ(JsonQuote("\xed\xa0\x80"),  // a surrogate
            "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"");
  EXPECT_EQ(JsonQuote("\xc0\xaf"),  // overlong '/'
            "\"\xef\xbf\xbd\xef\xbf\xbd\"");
}

TEST(JsonWriter, NestedStructure) {
  JsonWriter j;
  j.BeginObject();
  j.FieldInt("a", -3);
  j.Key("b");
  j.BeginArray();
  j.Double(1.5);
  j.Double(std::nan(""));
  j.Double(std::numeric_limits<double>::infinity());
  j.BeginObject();
  j.EndObject();
  j.BeginArray();
  j.EndArray();
  j.EndArray();
  j.FieldBool("c", true);
  j.Key("d");
  j.Null();
  j.FieldUint("e", 18446744073709551615ull);
  j.Field("f", "x");
  j.EndObject();
  EXPECT_EQ(j.str(),
            "{\"a\":-3,\"b\":[1.5,null,null,{},[]],\"c\":true,\"d\":null,"
            "\"e\":18446744073709551615,\"f\":\"x\"}");
}

TEST(JsonWriter, DoublesRoundTrip) {
  JsonWriter j;
  j.BeginArray();
  j.Double(0.1);
  j.EndArray();
  // %.17g of 0.1.
  EXPECT_EQ(j.str(), "[0.10000000000000001]");
}

}  // namespace
}  // namespace coppelius
