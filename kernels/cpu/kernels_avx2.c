#include "kernels/cpu/kinternal.h"
const kernel_table k_table_avx2 = {0};
