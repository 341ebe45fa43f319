/*
 * sluice_test.h: a tiny test harness for the sluice C API (no external framework).
 *
 *   TEST(name) { ... }          registers a test (GCC/Clang constructor attribute)
 *   CHECK(cond)                 records a failure and continues; evaluates to cond
 *   CHECK_EQ(a, b)              integer equality, prints both values on failure
 *   CHECK_STREQ(a, b)           string equality, prints both strings on failure
 *   CHECK_OK(expr)              expr returns sluice_error_t*: asserts NULL, else prints
 *                               the code name and message and frees the error
 *   CHECK_ERR(expr, CODE)       asserts the error code and a non-empty message; frees it
 *   CHECK_ERR_MSG(expr, CODE, s) as CHECK_ERR, and the message contains s
 *   REQUIRE(cond), REQUIRE_OK(expr)  as CHECK/CHECK_OK but return from the test on failure
 *   SKIP("reason")              marks the test skipped and returns
 *
 * Every CHECK must run on the test's own (main) thread: host callbacks run on other
 * threads and must report through atomics that the test then CHECKs.
 *
 * Exactly one translation unit defines SLUICE_TEST_MAIN before including this header;
 * it gets the registry and main(). main() runs every test in (file, line) order, each
 * under an alarm (SLUICE_TEST_TIMEOUT seconds, default 120), checks that
 * sluice_live_handles() is unchanged across each test and across the whole run, and
 * ends with the line "N passed, M failed"; the exit status is non-zero on any failure.
 *
 * Usage: sluice_c_tests [--list] [FILTER...]    (a FILTER is a substring of test names)
 *        sluice_c_tests --child MODE            (internal: see CHILD() and st_run_child)
 */
#ifndef SLUICE_TEST_H
#define SLUICE_TEST_H

#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.h"

typedef void (*st_fn)(void);
typedef int (*st_child_fn)(void);

void st_register(const char *name, const char *file, int line, st_fn fn);
void st_register_child(const char *mode, st_child_fn fn);
bool st_check(bool ok, const char *expr, const char *file, int line);
bool st_check_eq(unsigned long long a, unsigned long long b, const char *ea, const char *eb,
                 const char *file, int line);
bool st_check_streq(const char *a, const char *b, const char *ea, const char *eb,
                    const char *file, int line);
bool st_check_ok(sluice_error_t *err, const char *expr, const char *file, int line);
bool st_check_err(sluice_error_t *err, uint32_t code, const char *code_name,
                  const char *substr, const char *expr, const char *file, int line);
void st_skip(const char *reason);
/* Number of failed checks so far in this process (for CHILD modes). */
int st_failures(void);
void st_fail_msg(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define ST_CAT2(a, b) a##b
#define ST_CAT(a, b) ST_CAT2(a, b)

#define TEST(name)                                                              \
    static void st_test_##name(void);                                           \
    __attribute__((constructor)) static void st_register_##name(void) {        \
        st_register(#name, __FILE__, __LINE__, st_test_##name);                 \
    }                                                                           \
    static void st_test_##name(void)

/* A mode the binary runs when re-executed as `--child MODE` (see st_run_child). The
 * body returns the process exit status. */
#define CHILD(mode)                                                             \
    static int st_child_##mode(void);                                           \
    __attribute__((constructor)) static void st_register_child_##mode(void) {  \
        st_register_child(#mode, st_child_##mode);                              \
    }                                                                           \
    static int st_child_##mode(void)

#define CHECK(cond) st_check((cond) ? true : false, #cond, __FILE__, __LINE__)
#define CHECK_EQ(a, b)                                                          \
    st_check_eq((unsigned long long)(a), (unsigned long long)(b), #a, #b, __FILE__, __LINE__)
#define CHECK_STREQ(a, b) st_check_streq((a), (b), #a, #b, __FILE__, __LINE__)
#define CHECK_OK(expr) st_check_ok((expr), #expr, __FILE__, __LINE__)
#define CHECK_ERR(expr, CODE)                                                   \
    st_check_err((expr), (CODE), #CODE, NULL, #expr, __FILE__, __LINE__)
#define CHECK_ERR_MSG(expr, CODE, substr)                                       \
    st_check_err((expr), (CODE), #CODE, (substr), #expr, __FILE__, __LINE__)
#define FAIL(...) st_fail_msg(__FILE__, __LINE__, __VA_ARGS__)

#define REQUIRE(cond)                                                           \
    do {                                                                        \
        if (!CHECK(cond)) return;                                               \
    } while (0)
#define REQUIRE_OK(expr)                                                        \
    do {                                                                        \
        if (!CHECK_OK(expr)) return;                                            \
    } while (0)
#define SKIP(reason)                                                            \
    do {                                                                        \
        st_skip(reason);                                                        \
        return;                                                                 \
    } while (0)

/* ------------------------------------------------------------------------------ */
#ifdef SLUICE_TEST_MAIN

#include <signal.h>
#include <stdarg.h>
#include <unistd.h>

#define ST_MAX_TESTS 512
#define ST_MAX_CHILDREN 32

struct st_test {
    const char *name;
    const char *file;
    int line;
    st_fn fn;
};

struct st_child_mode {
    const char *mode;
    st_child_fn fn;
};

static struct st_test st_tests[ST_MAX_TESTS];
static size_t st_ntests;
static struct st_child_mode st_children[ST_MAX_CHILDREN];
static size_t st_nchildren;
static bool st_registry_overflow;

static const char *st_current = "(none)";
static int st_current_failed;
static int st_current_skipped;
static int st_total_checks_failed;

void st_register(const char *name, const char *file, int line, st_fn fn) {
    if (st_ntests == ST_MAX_TESTS) {
        st_registry_overflow = true;
        return;
    }
    st_tests[st_ntests++] = (struct st_test){name, file, line, fn};
}

void st_register_child(const char *mode, st_child_fn fn) {
    if (st_nchildren == ST_MAX_CHILDREN) {
        st_registry_overflow = true;
        return;
    }
    st_children[st_nchildren++] = (struct st_child_mode){mode, fn};
}

static void st_mark_failed(void) {
    st_current_failed++;
    st_total_checks_failed++;
}

void st_fail_msg(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    fprintf(stdout, "    %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stdout, fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
    fflush(stdout);
    st_mark_failed();
}

bool st_check(bool ok, const char *expr, const char *file, int line) {
    if (!ok) st_fail_msg(file, line, "CHECK(%s) failed", expr);
    return ok;
}

bool st_check_eq(unsigned long long a, unsigned long long b, const char *ea, const char *eb,
                 const char *file, int line) {
    if (a == b) return true;
    st_fail_msg(file, line, "CHECK_EQ(%s, %s) failed: %llu (0x%llx) != %llu (0x%llx)", ea, eb,
                a, a, b, b);
    return false;
}

bool st_check_streq(const char *a, const char *b, const char *ea, const char *eb,
                    const char *file, int line) {
    if (a && b && strcmp(a, b) == 0) return true;
    st_fail_msg(file, line, "CHECK_STREQ(%s, %s) failed: \"%s\" != \"%s\"", ea, eb,
                a ? a : "(null)", b ? b : "(null)");
    return false;
}

bool st_check_ok(sluice_error_t *err, const char *expr, const char *file, int line) {
    if (err == NULL) return true;
    uint32_t code = sluice_error_code(err);
    st_fail_msg(file, line, "CHECK_OK(%s) failed: %s (%u): %s", expr,
                sluice_error_code_name(code), code, sluice_error_message(err));
    sluice_error_free(err);
    return false;
}

bool st_check_err(sluice_error_t *err, uint32_t code, const char *code_name,
                  const char *substr, const char *expr, const char *file, int line) {
    if (err == NULL) {
        st_fail_msg(file, line, "CHECK_ERR(%s, %s) failed: the call succeeded", expr, code_name);
        return false;
    }
    bool ok = true;
    uint32_t got = sluice_error_code(err);
    const char *msg = sluice_error_message(err);
    if (got != code) {
        st_fail_msg(file, line, "CHECK_ERR(%s, %s) failed: got %s (%u): %s", expr, code_name,
                    sluice_error_code_name(got), got, msg ? msg : "(null)");
        ok = false;
    } else if (msg == NULL || msg[0] == '\0') {
        st_fail_msg(file, line, "CHECK_ERR(%s, %s) failed: empty error message", expr,
                    code_name);
        ok = false;
    } else if (substr != NULL && strstr(msg, substr) == NULL) {
        st_fail_msg(file, line, "CHECK_ERR(%s, %s) failed: message \"%s\" does not contain \"%s\"",
                    expr, code_name, msg, substr);
        ok = false;
    }
    sluice_error_free(err);
    return ok;
}

int st_failures(void) { return st_total_checks_failed; }

void st_skip(const char *reason) {
    st_current_skipped = 1;
    fprintf(stdout, "    skipped: %s\n", reason);
    fflush(stdout);
}

static int st_cmp_tests(const void *pa, const void *pb) {
    const struct st_test *a = pa, *b = pb;
    int c = strcmp(a->file, b->file);
    if (c != 0) return c;
    return (a->line > b->line) - (a->line < b->line);
}

static volatile int st_passed, st_failed;

/* async-signal-safe decimal formatting */
static size_t st_fmt_int(char *buf, int v) {
    char tmp[16];
    size_t n = 0, k = 0;
    unsigned u = v < 0 ? 0u : (unsigned)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u && n < sizeof tmp);
    while (n) buf[k++] = tmp[--n];
    return k;
}

static void st_on_alarm(int sig) {
    (void)sig;
    /* async-signal-safe output only; the summary counts the hung test as failed */
    static const char pre[] = "\nTIMEOUT: test ";
    static const char post[] = " did not finish in time (SLUICE_TEST_TIMEOUT)\n";
    char line[64];
    size_t n = st_fmt_int(line, st_passed);
    memcpy(line + n, " passed, ", 9);
    n += 9;
    n += st_fmt_int(line + n, st_failed + 1);
    memcpy(line + n, " failed\n", 8);
    n += 8;
    ssize_t r = write(1, pre, sizeof pre - 1);
    r = write(1, st_current, strlen(st_current));
    r = write(1, post, sizeof post - 1);
    r = write(1, line, n);
    (void)r;
    _exit(3);
}

static bool st_selected(const char *name, int nfilters, char **filters) {
    if (nfilters == 0) return true;
    for (int i = 0; i < nfilters; i++)
        if (strstr(name, filters[i]) != NULL) return true;
    return false;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (st_registry_overflow) {
        fprintf(stdout, "too many tests or child modes registered\n");
        return 2;
    }
    if (argc >= 3 && strcmp(argv[1], "--child") == 0) {
        for (size_t i = 0; i < st_nchildren; i++)
            if (strcmp(st_children[i].mode, argv[2]) == 0) {
                st_current = argv[2];
                return st_children[i].fn();
            }
        fprintf(stdout, "unknown child mode %s\n", argv[2]);
        return 2;
    }
    qsort(st_tests, st_ntests, sizeof st_tests[0], st_cmp_tests);
    for (size_t i = 1; i < st_ntests; i++)
        for (size_t j = 0; j < i; j++)
            if (strcmp(st_tests[i].name, st_tests[j].name) == 0) {
                fprintf(stdout, "duplicate test name %s\n", st_tests[i].name);
                return 2;
            }
    if (argc >= 2 && strcmp(argv[1], "--list") == 0) {
        for (size_t i = 0; i < st_ntests; i++) printf("%s\n", st_tests[i].name);
        return 0;
    }
    unsigned timeout = 120;
    const char *t = getenv("SLUICE_TEST_TIMEOUT");
    if (t && atoi(t) > 0) timeout = (unsigned)atoi(t);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = st_on_alarm;
    sigaction(SIGALRM, &sa, NULL);

    int nfilters = argc - 1;
    char **filters = argv + 1;
    uint64_t live_start = sluice_live_handles();
    int skipped = 0;
#define passed st_passed
#define failed st_failed
    for (size_t i = 0; i < st_ntests; i++) {
        const struct st_test *tc = &st_tests[i];
        if (!st_selected(tc->name, nfilters, filters)) continue;
        st_current = tc->name;
        st_current_failed = 0;
        st_current_skipped = 0;
        printf("[ RUN  ] %s\n", tc->name);
        uint64_t live_before = sluice_live_handles();
        alarm(timeout);
        tc->fn();
        alarm(0);
        uint64_t live_after = sluice_live_handles();
        if (live_after != live_before)
            st_fail_msg(tc->file, tc->line,
                        "test %s changed sluice_live_handles() from %llu to %llu (leaked handles)",
                        tc->name, (unsigned long long)live_before,
                        (unsigned long long)live_after);
        if (st_current_failed) {
            failed++;
            printf("[ FAIL ] %s\n", tc->name);
        } else if (st_current_skipped) {
            skipped++;
            printf("[ SKIP ] %s\n", tc->name);
        } else {
            passed++;
            printf("[   OK ] %s\n", tc->name);
        }
    }
    /* The whole-run leak check counts as one more test. */
    st_current = "final_live_handles";
    st_current_failed = 0;
    uint64_t live_end = sluice_live_handles();
    if (live_end != live_start) {
        printf("[ FAIL ] final_live_handles: %llu at start, %llu at the end\n",
               (unsigned long long)live_start, (unsigned long long)live_end);
        failed++;
    } else {
        printf("[   OK ] final_live_handles (%llu)\n", (unsigned long long)live_end);
        passed++;
    }
    if (skipped) printf("%d skipped\n", skipped);
    printf("%d passed, %d failed\n", passed, failed);
    fflush(stdout);
    return failed ? 1 : 0;
#undef passed
#undef failed
}

#endif /* SLUICE_TEST_MAIN */
#endif /* SLUICE_TEST_H */
