/* tests/unit/check.h: the smallest test harness that reports well.
 * CHECK() records a failure with file:line and keeps going; a test
 * program returns check_exit() from main (0 pass, 1 fail; 77 = skip). */
#ifndef DISKIMG_TESTS_CHECK_H
#define DISKIMG_TESTS_CHECK_H

#include <inttypes.h>
#include <stdio.h>

extern int check_failures;
extern const char *check_current;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: %s: check failed: %s\n", __FILE__, __LINE__, check_current,    \
                    #cond);                                                                        \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

#define CHECK_EQ(a, b)                                                                             \
    do {                                                                                           \
        long long va_ = (long long)(a), vb_ = (long long)(b);                                      \
        if (va_ != vb_) {                                                                          \
            fprintf(stderr, "%s:%d: %s: %s == %s failed: %lld != %lld\n", __FILE__, __LINE__,      \
                    check_current, #a, #b, va_, vb_);                                              \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

#define RUN(test)                                                                                  \
    do {                                                                                           \
        check_current = #test;                                                                     \
        int before_ = check_failures;                                                              \
        test();                                                                                    \
        printf("%s %s\n", check_failures == before_ ? "ok  " : "FAIL", #test);                     \
    } while (0)

#define CHECK_GLOBALS                                                                              \
    int check_failures;                                                                            \
    const char *check_current = "";

static inline int check_exit(void)
{
    return check_failures ? 1 : 0;
}

#endif
