// The text helpers every parser shares (src/core/text.h) and the one rule for a rank's share of
// its host's cores (edp/core/threads.h): the exact texts they accept and refuse.
#include "core/text.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "edp/core/threads.h"

namespace text = edp::text;

TEST(Text, TrimRemovesTheGivenCharactersAtBothEndsOnly) {
  EXPECT_EQ(text::trim("  a b\t\r\n"), "a b");
  EXPECT_EQ(text::trim("\v\fx\f"), "x");
  EXPECT_EQ(text::trim(" \t\n "), "");
  EXPECT_EQ(text::trim(""), "");
  EXPECT_EQ(text::trim("abc"), "abc");
  // Blanks and tabs only (EDP_ALLOWED_WORKERS): a newline stays.
  EXPECT_EQ(text::trim(" \t4\n", " \t"), "4\n");
  EXPECT_EQ(text::trim("\n4", " \t"), "\n4");
}

TEST(Text, JoinPutsTheSeparatorBetweenItems) {
  EXPECT_EQ(text::join(std::vector<std::string>{}), "");
  EXPECT_EQ(text::join(std::vector<std::string>{"a"}), "a");
  EXPECT_EQ(text::join(std::vector<std::string>{"a", "", "c"}), "a,,c");
  EXPECT_EQ(text::join(std::vector<std::string>{"a", "b"}, ", "), "a, b");
  EXPECT_EQ(text::join(std::vector<int>{3, -1, 10}), "3,-1,10");
}

TEST(Text, ParseIntTakesTheWholeTextOrNothing) {
  int64_t v = 7;
  EXPECT_TRUE(text::parse_int("42", v));
  EXPECT_EQ(v, 42);
  EXPECT_TRUE(text::parse_int("-9223372036854775808", v));
  EXPECT_EQ(v, INT64_MIN);
  EXPECT_TRUE(text::parse_int("+5", v));
  EXPECT_EQ(v, 5);
  v = 7;
  for (const char* bad : {"", "4x", "1.5", "9223372036854775808", "x", "4 "}) {
    EXPECT_FALSE(text::parse_int(bad, v)) << bad;
    EXPECT_EQ(v, 7) << bad;
  }
  double d = 0;
  EXPECT_TRUE(text::parse_double("2.5e3", d));
  EXPECT_EQ(d, 2500.0);
  EXPECT_FALSE(text::parse_double("", d));
  EXPECT_FALSE(text::parse_double("1.5x", d));
}

TEST(Text, ParseDigitsTakesUpToNineDigitsAndNothingElse) {
  int v = -1;
  EXPECT_TRUE(text::parse_digits("0", v));
  EXPECT_EQ(v, 0);
  EXPECT_TRUE(text::parse_digits("999999999", v));
  EXPECT_EQ(v, 999999999);
  EXPECT_TRUE(text::parse_digits("007", v));
  EXPECT_EQ(v, 7);
  v = -1;
  for (const char* bad : {"", "1234567890", "+3", "-3", " 3", "3 ", "3a", "1.0"}) {
    EXPECT_FALSE(text::parse_digits(bad, v)) << bad;
    EXPECT_EQ(v, -1) << bad;
  }
}

TEST(Threads, ShareOfCoresIsAnEqualShareAndAtLeastOne) {
  EXPECT_EQ(edp::share_of_cores(8, 2), 4);
  EXPECT_EQ(edp::share_of_cores(8, 3), 2);
  EXPECT_EQ(edp::share_of_cores(2, 4), 1);
  EXPECT_EQ(edp::share_of_cores(8, 0), 8);  // no rank counted yet: this one alone
  EXPECT_EQ(edp::share_of_cores(0, 1), 1);
}
