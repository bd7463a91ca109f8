/* Does not compile. */
#include <apf/submission.h>
const int apf_abi_version = APF_ABI_VERSION;
int get_batch_size(const char *w) { return undeclared_variable; }
