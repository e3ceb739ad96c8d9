// `sparrow run`'s argument checks that need no model: they come before the model is loaded.
#include <gtest/gtest.h>

#include <string>

#include "cli_test_util.hpp"

namespace {

TEST(RunCli, TokenListsWithEmptyFieldsAreRefusedBeforeLoading) {
  // An empty field of a comma list is a lost id, not something to skip; the check runs before
  // the model load (the directory does not exist, and the message is about the ids).
  for (const char* ids : {"1,,2", "1,2,", ",1", "' , '"}) {
    int code = 0;
    const std::string out =
        sparrow::test::run_cli(std::string("run -m /nonexistent/model --tokens ") + ids, code);
    EXPECT_EQ(code, 2) << ids << "\n" << out;
    EXPECT_NE(out.find("empty id"), std::string::npos) << ids << "\n" << out;
    EXPECT_EQ(out.find("cannot load model"), std::string::npos) << ids << "\n" << out;
  }
  // Well-formed lists (commas, commas and spaces, spaces) get as far as loading the model.
  for (const char* ids : {"1,2,3", "'1, 2, 3'", "'1 2 3'"}) {
    int code = 0;
    const std::string out =
        sparrow::test::run_cli(std::string("run -m /nonexistent/model --tokens ") + ids, code);
    EXPECT_EQ(code, 1) << ids << "\n" << out;
    EXPECT_NE(out.find("cannot load model"), std::string::npos) << ids << "\n" << out;
  }
  int code = 0;
  const std::string out = sparrow::test::run_cli("run -m /nonexistent/model --tokens 1,x", code);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("'x' is not a token id"), std::string::npos) << out;
}

}  // namespace
