#include "checkpoint/envelope.h"

#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace coppelius {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

#define EXPECT_STATUS(expr, status_code, substr)              \
  do {                                                        \
    const absl::Status _s = (expr);                           \
    EXPECT_EQ(_s.code(), absl::StatusCode::status_code) << _s; \
    EXPECT_THAT(std::string(_s.message()), HasSubstr(substr)); \
  } while (0)

uint64_t U64At(const std::string& b, size_t off) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[off + i]);
  return v;
}

Preamble SamplePreamble() {
  Preamble p;
  p.header_bytes = 300;
  p.payload_offset = 4096;
  p.payload_bytes = 1200;
  p.chunk_bytes = 512;
  for (size_t i = 0; i < kSha256Bytes; ++i) p.header_sha256[i] = i + 1;
  return p;
}

TEST(PayloadOffsetFor, AlignsTo4096) {
  EXPECT_EQ(PayloadOffsetFor(1), 4096u);
  EXPECT_EQ(PayloadOffsetFor(4096 - 128), 4096u);
  EXPECT_EQ(PayloadOffsetFor(4096 - 127), 8192u);
}

TEST(Preamble, ByteLayoutMatchesFormatsDoc) {
  const std::string b = EncodePreamble(SamplePreamble());
  ASSERT_EQ(b.size(), 128u);
  EXPECT_EQ(b.substr(0, 8), "COPPCKPT");
  EXPECT_EQ(b.substr(8, 4), std::string("\x01\x00\x00\x00", 4));
  EXPECT_EQ(b.substr(12, 4), std::string("\x80\x00\x00\x00", 4));
  EXPECT_EQ(b.substr(16, 8), std::string("\x2c\x01\0\0\0\0\0\0", 8));  // 300
  EXPECT_EQ(U64At(b, 24), 4096u);
  EXPECT_EQ(U64At(b, 32), 1200u);
  EXPECT_EQ(U64At(b, 40), 512u);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(b[48 + i], i + 1);
  // Bytes 80..111: SHA-256 of bytes 0..79 (SHA-256 itself is checked against
  // FIPS vectors in sha256_test).
  const Sha256Digest d = Sha256(b.data(), 80);
  EXPECT_EQ(std::memcmp(b.data() + 80, d.data(), 32), 0);
  EXPECT_EQ(b.substr(112), std::string(16, '\0'));
}

TEST(Preamble, RoundTrip) {
  const Preamble p = SamplePreamble();
  const std::string b = EncodePreamble(p);
  absl::StatusOr<Preamble> q = DecodePreamble(b, 4096 + 1200, "f");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->version, 1u);
  EXPECT_EQ(q->header_bytes, 300u);
  EXPECT_EQ(q->payload_offset, 4096u);
  EXPECT_EQ(q->payload_bytes, 1200u);
  EXPECT_EQ(q->chunk_bytes, 512u);
  EXPECT_EQ(q->header_sha256, p.header_sha256);
}

TEST(Preamble, EveryFlippedByteIsRefused) {
  const std::string good = EncodePreamble(SamplePreamble());
  for (size_t i = 0; i < good.size(); ++i) {
    for (unsigned char mask : {0x01, 0x80}) {
      std::string b = good;
      b[i] ^= mask;
      absl::StatusOr<Preamble> q = DecodePreamble(b, 4096 + 1200, "ckpt");
      EXPECT_FALSE(q.ok()) << "byte " << i;
      EXPECT_THAT(std::string(q.status().message()), HasSubstr("ckpt"));
    }
  }
}

TEST(Preamble, SpecificErrors) {
  Preamble p = SamplePreamble();
  const uint64_t size = 4096 + 1200;
  EXPECT_STATUS(DecodePreamble("COPP", 4, "f").status(), kDataLoss,
                "truncated");
  std::string b = EncodePreamble(p);
  b[0] = 'X';
  EXPECT_STATUS(DecodePreamble(b, size, "f").status(), kDataLoss, "magic");
  p.version = 2;
  EXPECT_STATUS(DecodePreamble(EncodePreamble(p), size, "f").status(),
                kFailedPrecondition, "version 2");
  p = SamplePreamble();
  EXPECT_STATUS(DecodePreamble(EncodePreamble(p), size + 1, "f").status(),
                kDataLoss, "trailing bytes");
  EXPECT_STATUS(DecodePreamble(EncodePreamble(p), size - 1, "f").status(),
                kDataLoss, "truncated");
  // Header pointing past the end of the file.
  p.header_bytes = 5000;
  p.payload_offset = PayloadOffsetFor(5000);
  EXPECT_STATUS(DecodePreamble(EncodePreamble(p), 2000, "f").status(),
                kDataLoss, "past the end");
  // Huge declared sizes.
  p = SamplePreamble();
  p.header_bytes = uint64_t{1} << 62;
  EXPECT_STATUS(DecodePreamble(EncodePreamble(p), size, "f").status(),
                kDataLoss, "header_bytes");
  p = SamplePreamble();
  p.payload_bytes = ~uint64_t{0} - 100;
  EXPECT_STATUS(DecodePreamble(EncodePreamble(p), size, "f").status(),
                kDataLoss, "overflow");
  p = SamplePreamble();
  p.payload_offset = 8192;
  EXPECT_STATUS(DecodePreamble(EncodePreamble(p), size, "f").status(),
                kDataLoss, "payload_offset");
  p = SamplePreamble();
  p.chunk_bytes = 0;
  EXPECT_STATUS(DecodePreamble(EncodePreamble(p), size, "f").status(),
                kDataLoss, "chunk_bytes");
}

CheckpointIdentity Id() {
  CheckpointIdentity id;
  id.state = "s";
  id.learner = "l";
  id.data = "d";
  id.initialization = "i";
  id.model = "m";
  id.payload_bytes = 24;
  id.chunk_bytes = 10;
  id.run_steps = 3;
  return id;
}

TEST(CompareIdentity, NamesEachFieldAndBothValues) {
  const CheckpointIdentity e = Id();
  EXPECT_TRUE(CompareIdentity(e, e, "f").ok());
  struct Case {
    const char* field;
    void (*mutate)(CheckpointIdentity&);
    const char* value;
  };
  const Case cases[] = {
      {"state", [](CheckpointIdentity& x) { x.state = "S2"; }, "\"S2\""},
      {"learner", [](CheckpointIdentity& x) { x.learner = "L2"; }, "\"L2\""},
      {"data", [](CheckpointIdentity& x) { x.data = "D2"; }, "\"D2\""},
      {"initialization",
       [](CheckpointIdentity& x) { x.initialization = "I2"; }, "\"I2\""},
      {"model", [](CheckpointIdentity& x) { x.model = "M2"; }, "\"M2\""},
      {"payload_bytes", [](CheckpointIdentity& x) { x.payload_bytes = 36; },
       "36"},
      {"chunk_bytes", [](CheckpointIdentity& x) { x.chunk_bytes = 11; }, "11"},
      {"run_steps", [](CheckpointIdentity& x) { x.run_steps = 4; }, "4"},
  };
  for (const Case& c : cases) {
    CheckpointIdentity a = e;
    c.mutate(a);
    EXPECT_FALSE(a == e);
    const absl::Status s = CompareIdentity(a, e, "ck.bin");
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    const bool text = c.value[0] == '"';
    EXPECT_THAT(std::string(s.message()),
                AllOf(HasSubstr("ck.bin"),
                      HasSubstr(std::string("field ") + c.field +
                                (text ? " has " : " is ") + c.value)))
        << s;
  }
}

// A checkpoint of another config (here tiny's identity against
// Coppelius's, as SPEC §6 and trainer/model_config.cc spell them): one
// short line naming the fields, the first differing part of each text
// identity and both numbers (break-it: the line held every identity in full,
// 1.1 KB); long parts (a digest) cut to 16 bytes after their "name=".
TEST(CompareIdentity, OtherConfigInOneShortLine) {
  CheckpointIdentity run;
  run.state = "coppelius-raw-pmv-f32-v1|parameter-order:p-then-m-then-v|"
              "payload=692465664";
  run.learner = "coppelius-objective:next-token-cross-entropy-mean|halves=bf16";
  run.data = "coppelius-token-stream|vocabulary=12288|context=1024|header=16|"
             "token=4";
  run.initialization = "coppelius-initialization:random-normal|seed=20260925";
  run.model = "coppelius-model:decoder-pre-norm|vocabulary=12288|"
              "context=1024|width=512|layers=16|heads=8|head-size=64|"
              "mlp:swiglu|hidden=1408|norm:layernorm-weight-bias";
  run.payload_bytes = 692465664;
  run.chunk_bytes = 4194304;
  run.run_steps = 10000;
  CheckpointIdentity file = run;
  file.state = "coppelius-raw-pmv-f32-v1|parameter-order:p-then-m-then-v|"
               "payload=1605120";
  file.data = "coppelius-token-stream|vocabulary=512|context=64|header=16|"
              "token=4";
  file.model = "coppelius-model:decoder-pre-norm|vocabulary=512|context=64|"
               "width=64|layers=2|heads=4|head-size=16|mlp:swiglu|"
               "hidden=176|norm:layernorm-weight-bias";
  file.payload_bytes = 1605120;
  file.run_steps = 8;
  absl::Status s = CompareIdentity(file, run, "tiny.ckpt");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "tiny.ckpt: checkpoint refused: 5 identity fields differ: state "
            "has \"payload=1605120\", the run expects \"payload=692465664\"; "
            "data has \"vocabulary=512\", the run expects "
            "\"vocabulary=12288\" (+1 more part); model has "
            "\"vocabulary=512\", the run expects \"vocabulary=12288\" (+6 "
            "more parts); payload_bytes is 1605120, the run expects "
            "692465664; run_steps is 8, the run expects 10000");
  // One field: its values alone; a digest part cut short; a part missing.
  file = run;
  file.initialization =
      "coppelius-initialization:random-normal|seed=20260925|sha256="
      "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
  s = CompareIdentity(file, run, "d.ckpt");
  EXPECT_EQ(s.message(),
            "d.ckpt: checkpoint refused: identity field initialization has "
            "\"sha256=0123456789abcdef\"... (71 bytes), the run expects "
            "nothing");
}

TEST(MakeHeader, RefusesBadArguments) {
  CheckpointIdentity id = Id();
  std::vector<Sha256Digest> three(3);
  EXPECT_TRUE(MakeHeader(id, 5, three, {}).ok());
  EXPECT_STATUS(MakeHeader(id, 5, std::vector<Sha256Digest>(2), {}).status(),
                kInvalidArgument, "chunk digests");
  id.payload_bytes = 25;
  EXPECT_STATUS(MakeHeader(id, 5, three, {}).status(), kInvalidArgument,
                "multiple of 12");
  id = Id();
  id.chunk_bytes = 0;
  EXPECT_STATUS(MakeHeader(id, 5, three, {}).status(), kInvalidArgument,
                "chunk_bytes");
  EnvelopeProvenance bad_parent;
  bad_parent.parent_header_sha256 = "short";
  EXPECT_STATUS(MakeHeader(Id(), 5, three, bad_parent).status(),
                kInvalidArgument, "parent_header_sha256");
  // A header the reader would refuse (text not UTF-8) is never made.
  id = Id();
  id.model = "model\xff";
  EXPECT_STATUS(MakeHeader(id, 5, three, {}).status(), kInvalidArgument,
                "model_identity");
  // ... except the machine's host name, whose other bytes become '?'.
  EnvelopeProvenance odd_host;
  odd_host.host = "h\xc3\xa9.\xff";
  absl::StatusOr<CheckpointHeader> h = MakeHeader(Id(), 5, three, odd_host);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->host(), "h??.?");
}

TEST(EncodeEnvelopePrefix, LayoutAndHeaderRoundTrip) {
  std::vector<Sha256Digest> digests(3);
  digests[1][0] = 0xab;
  EnvelopeProvenance prov;
  prov.writer = "envelope_test";
  prov.created_unix_nanos = 123;
  prov.host = "h";
  absl::StatusOr<CheckpointHeader> h = MakeHeader(Id(), 42, digests, prov);
  ASSERT_TRUE(h.ok()) << h.status();
  absl::StatusOr<std::string> prefix = EncodeEnvelopePrefix(*h);
  ASSERT_TRUE(prefix.ok()) << prefix.status();
  ASSERT_EQ(prefix->size(), 4096u);
  absl::StatusOr<Preamble> p = DecodePreamble(*prefix, 4096 + 24, "f");
  ASSERT_TRUE(p.ok()) << p.status();
  const std::string header_bytes = prefix->substr(128, p->header_bytes);
  EXPECT_EQ(Sha256(header_bytes), p->header_sha256);
  EXPECT_EQ(prefix->substr(128 + p->header_bytes),
            std::string(4096 - 128 - p->header_bytes, '\0'));
  CheckpointHeader parsed;
  ASSERT_TRUE(parsed.ParseFromString(header_bytes));
  EXPECT_TRUE(ValidateHeader(parsed, *p, "f").ok());
  EXPECT_EQ(parsed.update_count(), 42u);
  EXPECT_EQ(parsed.parameter_count(), 2u);
  EXPECT_EQ(parsed.writer(), "envelope_test");
  EXPECT_EQ(parsed.created_unix_nanos(), 123u);
  EXPECT_TRUE(IdentityOfHeader(parsed) == Id());
  ASSERT_EQ(parsed.chunk_sha256_size(), 3);
  EXPECT_EQ(static_cast<unsigned char>(parsed.chunk_sha256(1)[0]), 0xab);
}

TEST(ValidateHeader, RefusesTextFieldsThatAreNotUtf8) {
  std::vector<Sha256Digest> digests(3);
  const CheckpointHeader h = *MakeHeader(Id(), 1, digests, {});
  Preamble p;
  p.payload_bytes = 24;
  p.chunk_bytes = 10;
  // Well-formed (the Unicode Standard, table 3-7): e-acute, the euro sign,
  // U+FFFD, U+10FFFF, U+1F600.
  for (const char* text : {"caf\xc3\xa9", "\xe2\x82\xac", "\xef\xbf\xbd",
                           "\xf4\x8f\xbf\xbf", "a\xf0\x9f\x98\x80" "b", ""}) {
    CheckpointHeader x = h;
    x.set_host(text);
    EXPECT_TRUE(ValidateHeader(x, p, "f").ok()) << text;
  }
  // Ill-formed, with the offset of the byte that begins no sequence: a lone
  // continuation byte, 0xff, an overlong '/', a surrogate (U+D800), above
  // U+10FFFF, a sequence cut short at the end.
  const std::pair<std::string, size_t> cases[] = {
      {"ab\x80", 2},          {"seed=\xff" "1", 5},   {"\xc0\xaf", 0},
      {"x\xed\xa0\x80", 1}, {"\xf4\x90\x80\x80", 0}, {"ok\xe2\x82", 2},
  };
  for (const auto& [text, at] : cases) {
    CheckpointHeader x = h;
    x.set_initialization_identity(text);
    const absl::Status s = ValidateHeader(x, p, "f");
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_EQ(s.message(),
              absl::StrFormat("f: header field initialization_identity is "
                              "not UTF-8: its byte %d of %d (0x%02x) begins "
                              "no well-formed sequence, expected UTF-8 text",
                              at, text.size(),
                              static_cast<unsigned char>(text[at])));
  }
  // Every text field is checked, by name.
  CheckpointHeader x = h;
  x.set_writer("\xfe");
  EXPECT_STATUS(ValidateHeader(x, p, "f"), kDataLoss, "field writer ");
  x = h;
  x.set_model_identity("m\xc3");
  EXPECT_STATUS(ValidateHeader(x, p, "f"), kDataLoss, "field model_identity ");
}

TEST(ValidateHeader, RefusesInconsistentFields) {
  std::vector<Sha256Digest> digests(3);
  CheckpointHeader h = *MakeHeader(Id(), 1, digests, {});
  Preamble p;
  p.payload_bytes = 24;
  p.chunk_bytes = 10;
  EXPECT_TRUE(ValidateHeader(h, p, "f").ok());
  CheckpointHeader x = h;
  x.set_payload_bytes(36);
  EXPECT_STATUS(ValidateHeader(x, p, "f"), kDataLoss, "payload_bytes");
  x = h;
  x.set_chunk_bytes(12);
  EXPECT_STATUS(ValidateHeader(x, p, "f"), kDataLoss, "chunk_bytes");
  x = h;
  x.set_plane_count(2);
  EXPECT_STATUS(ValidateHeader(x, p, "f"), kDataLoss, "plane_count");
  x = h;
  x.set_bytes_per_scalar(2);
  EXPECT_STATUS(ValidateHeader(x, p, "f"), kDataLoss, "bytes_per_scalar");
  x = h;
  x.set_parameter_count(3);
  EXPECT_STATUS(ValidateHeader(x, p, "f"), kDataLoss, "parameter_count");
  x = h;
  x.add_chunk_sha256(std::string(32, 'x'));
  EXPECT_STATUS(ValidateHeader(x, p, "f"), kDataLoss, "4 digests");
  x = h;
  x.set_chunk_sha256(2, "short");
  EXPECT_STATUS(ValidateHeader(x, p, "f"), kDataLoss, "chunk_sha256[2]");
}

}  // namespace
}  // namespace coppelius
