// Test-only helper for inspect_cli_test.sh:
//   make_testdata DIR                     writes inspect/testdata.h's
//                                         synthetic tiny files into DIR
//   make_testdata corrupt CKPT OFFSET     flips the payload byte at OFFSET
#include <cstdlib>
#include <iostream>
#include <string>

#include "inspect/testdata.h"

int main(int argc, char** argv) {
  absl::Status s;
  if (argc == 2) {
    s = coppelius::inspect_testing::WriteInspectTestFiles(argv[1]);
  } else if (argc == 4 && std::string(argv[1]) == "corrupt") {
    s = coppelius::inspect_testing::CorruptPayloadByte(
        argv[2], std::strtoull(argv[3], nullptr, 10));
  } else {
    std::cerr << "usage: make_testdata DIR | make_testdata corrupt CKPT OFFSET"
              << std::endl;
    return 2;
  }
  if (!s.ok()) {
    std::cerr << "make_testdata: " << s.ToString() << std::endl;
    return 1;
  }
  return 0;
}
