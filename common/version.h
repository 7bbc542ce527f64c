/* common/version.h — the one version number of mlxr.
 *
 * MLXR_VERSION is the release version, "MAJOR.MINOR.PATCH" (digits only:
 * release/version.c compares them numerically; `mlxr upgrade` refuses any
 * release whose signed version is not strictly newer). `make release` reads
 * it from here and signs it into SHA256SUMS.sig's trusted comment.
 *
 * Only common/version.c expands the macro; everything else reads
 * mlxr_version, so a test build can override the number for that one
 * object (make MLXR_VERSION=1.2.3, see the Makefile's release variables)
 * without a second copy of the constant anywhere. */
#ifndef MLXR_VERSION_H
#define MLXR_VERSION_H

#ifndef MLXR_VERSION
#define MLXR_VERSION "0.1.0"
#endif

/* The platform a build's binaries are for: signed into the release's
 * trusted comment, so a release for another platform is refused. */
#if defined(__linux__) && defined(__x86_64__)
#define MLXR_PLATFORM "linux-x86_64"
#elif defined(__linux__) && defined(__aarch64__)
#define MLXR_PLATFORM "linux-aarch64"
#elif defined(__APPLE__) && defined(__aarch64__)
#define MLXR_PLATFORM "macos-arm64"
#else
#define MLXR_PLATFORM "unknown"
#endif

extern const char mlxr_version[];  /* MLXR_VERSION of this build */
extern const char mlxr_platform[]; /* MLXR_PLATFORM of this build */

#endif
