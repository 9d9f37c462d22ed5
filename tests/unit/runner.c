/*
 * The shared main() of the unit tests: run the one suite this executable
 * was built for and exit non-zero if any test failed.  Check forks each
 * test, so an assertion (SIGABRT) fails only its own test; set
 * CK_FORK=no to run under gdb or valgrind.
 */
#include <stdlib.h>

#include "unit.h"

int
main(void)
{
    SRunner *sr = srunner_create(UNIT_SUITE());
    int failed;

    srunner_run_all(sr, CK_ENV); /* CK_VERBOSITY=verbose lists each test */
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
