#!/usr/bin/env bash
# Count the public items of each library crate, per module: every page
# rustdoc writes for an item (struct, enum, trait, fn, type, constant,
# macro), re-exports counted once, where they are defined.
#
#   scripts/public_items.sh            build the docs, print the counts
#   scripts/public_items.sh --no-build print the counts of the docs built
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [[ ${1:-} != --no-build ]]; then
    cargo doc -q --no-deps --all-features -p outbox -p outbox-inbox -p outbox-relay >&2
fi
DOC=${CARGO_TARGET_DIR:-target}/doc
# item_pages CRATE: the item pages of CRATE, without rustdoc's redirects
# (a private module's item re-exported elsewhere gets a redirect page).
item_pages() {
    find "$DOC/$1" -name '*.html' \
        | grep -E '/(struct|enum|trait|fn|type|constant|macro|static|union|traitalias)\.[^/]+\.html$' \
        | xargs grep -L 'http-equiv="refresh"' || true
}
for crate in outbox outbox_inbox outbox_relay; do
    pages=$(item_pages "$crate")
    printf '%s %d\n' "$crate" "$(grep -c . <<<"$pages" || true)"
    sed -E "s|^$DOC/||; s|/[^/]+\.html$||" <<<"$pages" | sort | uniq -c | sort -rn \
        | head -"${TOP:-12}" | awk '{ printf "    %-40s %d\n", $2, $1 }'
done
