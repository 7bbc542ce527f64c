/* common/version.c — the version strings of this build (common/version.h). */
#include "common/version.h"

const char mlxr_version[] = MLXR_VERSION;
const char mlxr_platform[] = MLXR_PLATFORM;
