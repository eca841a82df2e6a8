#!/bin/sh
# Copies this machine's libffi headers (ffi.h, ffitarget.h) into .deps/ffi/include, an
# ignored folder, so that a machine with only the libffi runtime (libffi.so.8, no
# libffi-dev) can build build/hcrun once the folder is carried there.
set -eu
cd "$(dirname "$0")/../.."
dest=.deps/ffi/include
inc=$(pkg-config --variable=includedir libffi 2>/dev/null || true)
src=""
for d in "$inc" /usr/include /usr/include/*-linux-gnu /usr/local/include; do
  if [ -n "$d" ] && [ -f "$d/ffi.h" ] && [ -f "$d/ffitarget.h" ]; then src=$d; break; fi
done
if [ -z "$src" ]; then
  echo "vendor_ffi_headers: ffi.h not found (install libffi-dev)" >&2
  exit 1
fi
mkdir -p "$dest"
cp "$src/ffi.h" "$src/ffitarget.h" "$dest/"
echo "copied $src/ffi.h and $src/ffitarget.h to $dest/"
