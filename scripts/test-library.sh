#!/bin/sh
# The library's root-free tests (bbrscope/tests/library). Called as root (`make test`), they run
# as nobody, so that a test needing root cannot slip in; called by anyone else, as that user.
set -e
cd "$(dirname "$0")/.."
bin=$(cargo test -p bbrscope --test library --no-run 2>&1 | sed -n 's/.*Executable .*(\(.*\))$/\1/p')
[ -x "$bin" ] || { echo "test-library: no test binary built ($bin)" >&2; exit 1; }
# The tests find their fixtures and sources from the package directory, as under `cargo test`.
cd bbrscope
export CARGO_MANIFEST_DIR="$PWD"
if [ "$(id -u)" = 0 ]; then
    exec setpriv --reuid=65534 --regid=65534 --clear-groups "../$bin" --test-threads=2
fi
exec "../$bin" --test-threads=2
