#!/bin/sh
# release/make_release.sh BUILD DIST EXPIRES_DAYS — the second half of
# `make release`: copies the three binaries built in BUILD into DIST
# (stripped), writes DIST/SHA256SUMS (sha256sum format, every file of the
# release) and DIST/SHA256SUMS.sig (mlxr-sign: minisign format, trusted
# comment with version, platform and expiry).
# The secret key: $MLXR_SIGN_KEY_FILE (a path outside this repository) or
# $MLXR_SIGN_KEY (the key file's text, e.g. from a CI secret).
set -eu
build=$1 dist=$2 days=$3
repo=$(cd "$(dirname "$0")/.." && pwd -P)

if [ -n "${MLXR_SIGN_KEY_FILE:-}" ]; then
	[ -f "$MLXR_SIGN_KEY_FILE" ] || { echo "release: MLXR_SIGN_KEY_FILE=$MLXR_SIGN_KEY_FILE is not a file" >&2; exit 1; }
	key=$(realpath "$MLXR_SIGN_KEY_FILE")
	case "$key" in
	"$repo"/*) echo "release: the secret key $key is inside the repository; keep it elsewhere" >&2; exit 1 ;;
	esac
elif [ -z "${MLXR_SIGN_KEY:-}" ]; then
	echo "release: set MLXR_SIGN_KEY_FILE (path of the secret key, outside the repository) or MLXR_SIGN_KEY" >&2
	exit 1
fi

version=$("$build/mlxr" --version | sed -n 's/^mlxr //p')
rm -rf "$dist"
mkdir -p "$dist"
for f in mlxr mlxr-worker mlxr-fetcher; do
	cp "$build/$f" "$dist/$f"
	strip --strip-debug "$dist/$f" 2>/dev/null || true
	chmod 0755 "$dist/$f"
done
(cd "$dist" && sha256sum mlxr mlxr-worker mlxr-fetcher > SHA256SUMS)
"$build/mlxr-sign" --version "$version" --expires-days "$days" "$dist/SHA256SUMS"
echo "release $version in $dist:"
(cd "$dist" && ls -l && cat SHA256SUMS)
