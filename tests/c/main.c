/* The harness's main(); the tests live in test_*.c. */
#define SLUICE_TEST_MAIN
#include "sluice_test.h"
