/* sluice.h must compile on its own as C11 with -Wall -Wextra -pedantic. */
#include <sluice.h>

int sluice_c_header_check(void);
int sluice_c_header_check(void) { return (int)sizeof(sluice_stream_t); }
