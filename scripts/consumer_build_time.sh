#!/usr/bin/env bash
# The clean build time of a consumer service, as a new user meets it: a
# crate depending on outbox and outbox-inbox (this checkout) built from
# nothing, once with `postgres,rabbitmq` and once with every feature, one
# after the other, each in a target directory of its own.
#
#   scripts/consumer_build_time.sh   prints one line per build: features,
#                                    crates compiled, seconds
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$(pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# consumer NAME FEATURES: a service crate using the inbox with FEATURES.
consumer() {
    local dir=$WORK/$1
    mkdir -p "$dir/src"
    cat >"$dir/Cargo.toml" <<TOML
[package]
name = "consumer-$1"
version = "0.1.0"
edition = "2024"
publish = false

[dependencies]
outbox = { path = "$REPO", features = ["postgres"] }
outbox-inbox = { path = "$REPO/inbox", features = [$2] }
sqlx = { version = "0.9.1", default-features = false, features = ["runtime-tokio", "postgres"] }
tokio = { version = "1", features = ["full"] }

[workspace]
TOML
    echo 'fn main() {}' >"$dir/src/main.rs"
    cp "$REPO/Cargo.lock" "$dir/Cargo.lock"
    echo "$dir"
}

build() {
    local name=$1 features=$2 dir start end crates
    dir=$(consumer "$name" "$features")
    start=$(date +%s.%N)
    crates=$(cd "$dir" && CARGO_TARGET_DIR=$WORK/target-$name cargo build 2>&1 | grep -c '^ *Compiling' || true)
    end=$(date +%s.%N)
    printf '%-60s %4d crates  %6.1f s\n' "$features" "$crates" "$(echo "$end - $start" | bc)"
}

build slim '"postgres", "rabbitmq"'
build full '"postgres", "mysql", "sqlite", "kafka", "rabbitmq", "tls", "opentelemetry"'
