#!/usr/bin/env bash
# The feature combinations users build, each linted on its own:
# `cargo clippy -p PACKAGE --lib --no-default-features --features SET`.
#
#   scripts/check_features.sh       every combination below
#
# A combination that fails to build, or warns, fails the run and is named.
# Each database alone, each broker alone, the service's pair
# (postgres + rabbitmq), none and all, per library; and the relay's binary
# without the brokers it may leave out; then that binary refuses, by
# feature name, the database and brokers it was built without.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

ALL_OUTBOX="postgres,mysql,sqlite,kafka,rabbitmq,backoff,opentelemetry"
ALL_INBOX="postgres,mysql,sqlite,kafka,rabbitmq,redis,nats,tls,opentelemetry"
ALL_RELAY="postgres,mysql,sqlite,kafka,rabbitmq,redis,nats,logical,tls"

# package|features|targets
COMBINATIONS=(
    "outbox||--lib"
    "outbox|postgres|--lib"
    "outbox|mysql|--lib"
    "outbox|sqlite|--lib"
    "outbox|$ALL_OUTBOX|--lib"
    "outbox-inbox||--lib"
    "outbox-inbox|postgres|--lib"
    "outbox-inbox|mysql|--lib"
    "outbox-inbox|sqlite|--lib"
    "outbox-inbox|kafka|--lib"
    "outbox-inbox|rabbitmq|--lib"
    "outbox-inbox|redis|--lib"
    "outbox-inbox|nats|--lib"
    "outbox-inbox|postgres,rabbitmq|--lib"
    "outbox-inbox|$ALL_INBOX|--lib"
    "outbox-relay||--lib"
    "outbox-relay|postgres|--lib"
    "outbox-relay|mysql|--lib"
    "outbox-relay|sqlite|--lib"
    "outbox-relay|kafka|--lib"
    "outbox-relay|rabbitmq|--lib"
    "outbox-relay|redis|--lib"
    "outbox-relay|postgres,redis|--lib"
    "outbox-relay|nats|--lib"
    "outbox-relay|postgres,nats|--lib"
    "outbox-relay|logical|--lib"
    "outbox-relay|postgres,rabbitmq|--lib"
    "outbox-relay|$ALL_RELAY|--lib"
    "outbox-relay|cli,logical|--bins"
    "outbox-relay|cli,logical,rabbitmq|--bins"
)

for combination in "${COMBINATIONS[@]}"; do
    IFS='|' read -r package features targets <<<"$combination"
    printf '[check_features.sh] %s %s --no-default-features --features "%s"\n' \
        "$package" "$targets" "$features" >&2
    if ! cargo clippy -q -p "$package" "$targets" --no-default-features --features "$features" \
        -- -D warnings; then
        printf '[check_features.sh] ERROR: %s with features "%s" does not build cleanly\n' \
            "$package" "$features" >&2
        exit 1
    fi
done
printf '[check_features.sh] %d feature combinations build cleanly\n' "${#COMBINATIONS[@]}" >&2

# A service on PostgreSQL and RabbitMQ builds neither librdkafka nor the
# MySQL and SQLite drivers.
printf '[check_features.sh] outbox-inbox with "postgres,rabbitmq" pulls in no other driver\n' >&2
unwanted=$(cargo tree -q -e normal -p outbox-inbox --no-default-features \
    --features postgres,rabbitmq --prefix none \
    | grep -E '^(rdkafka-sys|sqlx-mysql|sqlx-sqlite|libsqlite3-sys|aws-lc-sys) ' | sort -u || true)
if [[ -n $unwanted ]]; then
    printf '[check_features.sh] ERROR: outbox-inbox (postgres,rabbitmq) depends on:\n%s\n' \
        "$unwanted" >&2
    exit 1
fi

# A binary built without a database or a broker refuses it by name, before
# it connects to anything. (It replaces target/debug/outbox-relay; the tests
# relink the one with every feature.)
printf '[check_features.sh] the relay binary with only "cli,logical,rabbitmq" refuses the rest\n' >&2
cargo build -q -p outbox-relay --bin outbox-relay --no-default-features \
    --features cli,logical,rabbitmq
SLIM=${CARGO_TARGET_DIR:-target}/debug/outbox-relay
# refused WHAT ARGS...: the binary must fail, naming WHAT's feature.
refused() {
    local feature=$1 output
    shift
    if output=$("$SLIM" run "$@" 2>&1); then
        printf '[check_features.sh] ERROR: outbox-relay run %s started without the `%s` feature\n' \
            "$*" "$feature" >&2
        exit 1
    fi
    if [[ $output != *"needs the \`$feature\` feature of outbox-relay"* ]]; then
        printf '[check_features.sh] ERROR: outbox-relay run %s did not name the `%s` feature:\n%s\n' \
            "$*" "$feature" "$output" >&2
        exit 1
    fi
}
PG=postgres://postgres@127.0.0.1:5432/test
refused kafka --database-url "$PG" --broker kafka://127.0.0.1:9092
refused redis --database-url "$PG" --broker redis://127.0.0.1:6379
refused nats --database-url "$PG" --broker nats://127.0.0.1:4222
refused tls --database-url "$PG" --broker amqps://guest:guest@127.0.0.1:5671/%2f
refused sqlite --database-url sqlite://outbox-not-built.db --broker stdout
refused mysql --database-url mysql://root@127.0.0.1:3306/test --broker stdout
if [[ -e outbox-not-built.db ]]; then
    printf '[check_features.sh] ERROR: the refused SQLite URL created its file\n' >&2
    exit 1
fi
printf '[check_features.sh] a missing feature is refused by name\n' >&2
