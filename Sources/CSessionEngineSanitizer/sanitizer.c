// The one out-of-line function of the target; the annotations themselves are inline in the header.

#include "CSessionEngineSanitizer.h"

int se_sanitizer_thread_sanitizer_compiled(void) {
#if defined(SE_SANITIZER_THREAD_COMPILED)
    return 1;
#else
    return 0;
#endif
}
