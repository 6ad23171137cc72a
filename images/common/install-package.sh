#!/bin/sh
# install-package.sh PACKAGE BINARY DEST_DIR [--with-siblings]
#
# Installs the executable named BINARY from PACKAGE (a .tar.gz archive from the
# TopsRider/topscloud release, laid out however it is) into DEST_DIR.
# --with-siblings also installs the executables next to it (e.g. a runtime's hooks).
set -eu

package=$1
binary=$2
dest=$3
siblings=${4:-}

work=$(mktemp -d)
tar -xzf "$package" -C "$work"
found=$(find "$work" -type f -name "$binary" | head -n 1)
if [ -z "$found" ]; then
    echo "install-package.sh: $(basename "$package") holds no file named $binary" >&2
    exit 1
fi
mkdir -p "$dest"
if [ "$siblings" = --with-siblings ]; then
    find "$(dirname "$found")" -maxdepth 1 -type f -perm -u+x -exec install -m 0755 {} "$dest"/ \;
fi
install -m 0755 "$found" "$dest/$binary"
rm -rf "$work"
