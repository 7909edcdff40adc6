/* quiet_marks.h: included after <check.h> by the unit tests that assert in
 * loops over large inputs (the differential and property tests).
 *
 * A Check assertion that passes sends its file and line to the test's
 * runner (_mark_point, a write(2) each), so that a crash can be placed:
 * test_onepass made 6.4 million such writes a run, test_prefilter 2.1
 * million, most of their time, and most of the AddressSanitizer stage's in
 * CI (docs/testing.md, "How long CI takes"). Here a passing assertion does
 * nothing; a failing one fails as before, with its file, line and message.
 * A crash (a signal) is then placed at the test's start rather than at its
 * last passing assertion; AddressSanitizer's report names the place. */
#ifndef ST_TEST_QUIET_MARKS_H
#define ST_TEST_QUIET_MARKS_H

#include <check.h>

#undef mark_point
#define mark_point() ((void)0)
#define _mark_point(file, line) ((void)0)

#endif
