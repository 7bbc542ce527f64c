#!/bin/sh
# Installs the Debian 12 packages mlxr builds and tests with. Idempotent:
# does nothing when every package is already installed. Needs root.
set -eu
PKGS="build-essential clang libclang-rt-14-dev llvm libsodium-dev libbearssl-dev \
libseccomp-dev libedit-dev libcjson-dev pkg-config python3 python3-venv tmux minisign openssl"
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ]; then
	echo "deps: need root to install:$missing" >&2
	exit 1
fi
echo "deps: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends $missing
