#!/bin/sh
# The root-free tests: the library's (bbrscope/tests/library) and the unit tests of apply's
# rules (plan, state, scope, files: bbrscope/src/apply, the machine faked). Called as root
# (`make test`), they run as nobody, so that a test needing root cannot slip in; called by anyone
# else, as that user.
set -e
cd "$(dirname "$0")/.."
built() {
    bin=$(cargo test -p bbrscope "$@" --no-run 2>&1 | sed -n 's/.*Executable .*(\(.*\))$/\1/p')
    [ -x "$bin" ] || { echo "test-library: no test binary built for $* ($bin)" >&2; exit 1; }
    echo "../$bin"
}
library=$(built --test library)
units=$(built --lib)
# The tests find their fixtures and sources from the package directory, as under `cargo test`.
cd bbrscope
export CARGO_MANIFEST_DIR="$PWD"
as=""
if [ "$(id -u)" = 0 ]; then
    as="setpriv --reuid=65534 --regid=65534 --clear-groups"
fi
$as "$library" --test-threads=2
exec $as "$units" apply:: --test-threads=2
