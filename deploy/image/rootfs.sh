#!/bin/sh
# The root filesystem of Muster's image: the binary, the shared libraries it links (its `ldd`
# closure, the dynamic loader included), CA certificates and a passwd/group entry for the numeric
# user the manifests run it as. Nothing else: no shell, no package manager.
#
#   deploy/image/rootfs.sh BINARY OUT_DIR
#
# deploy/Dockerfile runs it in its builder stage; `cargo xtask container-test` runs it on the
# binary built on the host (same Debian release as the builder, so the same libraries).
set -eu
binary=$1
out=$2
mkdir -p "$out/etc/ssl/certs"
install -m 0755 "$binary" "$out/muster"
# Every library ldd resolves, plus the loader (the line without "=>"), at its own path.
ldd "$binary" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\/.*ld-linux/ { print $1 }' |
while read -r lib; do
    cp --parents -L "$lib" "$out"
done
cp -L /etc/ssl/certs/ca-certificates.crt "$out/etc/ssl/certs/ca-certificates.crt"
echo 'nonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin' > "$out/etc/passwd"
echo 'nonroot:x:65532:' > "$out/etc/group"
