#!/usr/bin/env bash
# The relay's peak memory over a backlog of large payloads: the release
# binary, as a separate process with the default configuration, drains
# EVENTS events of about CHARS bytes each, written by plain SQL in
# transactions of 10 before it starts, and the peak resident size
# (VmHWM) is read from /proc. Prints one line; fails when the peak is
# above --max-mib (256) or, on RabbitMQ, when an event did not arrive
# exactly once or an aggregate's events arrived out of order.
#
#   scripts/payload_memory.sh --source poll|logical --broker stdout|rabbitmq|kafka
#                             [--events 1500] [--chars 900000] [--max-mib 256]
#
# The services are those of `scripts/test.sh --services-only`. The
# RabbitMQ consumer is Python's pika (installed with pip when missing).
#
# On Kafka and RabbitMQ the bench's `payloads` case checks the same bound
# with a consumer on both brokers and the raw client beside (BENCHMARKS.md,
# "Payload sizes"); this script is for the stdout broker, which the bench
# does not drive, and for one quick run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

source_kind=poll broker=stdout events=1500 chars=900000 max_mib=256
while [ $# -gt 0 ]; do
  case "$1" in
    --source) source_kind=$2; shift 2;;
    --broker) broker=$2; shift 2;;
    --events) events=$2; shift 2;;
    --chars) chars=$2; shift 2;;
    --max-mib) max_mib=$2; shift 2;;
    *) echo "payload_memory.sh: unknown argument $1" >&2; exit 2;;
  esac
done
case "$source_kind" in poll|logical) ;; *) echo "--source is poll or logical, not $source_kind" >&2; exit 2;; esac
case "$broker" in stdout|rabbitmq|kafka) ;; *) echo "--broker is stdout, rabbitmq or kafka, not $broker" >&2; exit 2;; esac

admin_url=${OUTBOX_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}
amqp_url=${OUTBOX_TEST_AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/%2f}
kafka_brokers=${OUTBOX_TEST_KAFKA_BROKERS:-127.0.0.1:9092}
psql -Atqc 'SELECT 1' "$admin_url" >/dev/null || { echo "PostgreSQL is not reachable at $admin_url: run scripts/test.sh --services-only" >&2; exit 1; }

cargo build --release -q -p outbox-relay
bin=target/release/outbox-relay
work=$(mktemp -d)
name=payload_memory_$$
url=${admin_url%/*}/$name
slot=${name}_slot
relay_pid=""
consumer_pid=""
cleanup() {
  [ -n "$relay_pid" ] && kill -9 "$relay_pid" 2>/dev/null || true
  [ -n "$consumer_pid" ] && kill "$consumer_pid" 2>/dev/null || true
  psql -qc "SELECT pg_drop_replication_slot('$slot') FROM pg_replication_slots WHERE slot_name = '$slot'" "$url" >/dev/null 2>&1 || true
  psql -qc "DROP DATABASE IF EXISTS $name WITH (FORCE)" "$admin_url" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
psql -qc "CREATE DATABASE $name" "$admin_url" >/dev/null

if [ "$source_kind" = logical ]; then
  "$bin" migrate --database-url "$url" --source logical --slot "$slot" >/dev/null 2>&1
else
  "$bin" migrate --database-url "$url" >/dev/null 2>&1
fi
repeats=$(( chars / 32 ))
for ((first = 1; first <= events; first += 10)); do
  last=$(( first + 9 > events ? events : first + 9 ))
  psql -qc "INSERT INTO outbox_events (event_id, event_type, source, aggregate_type, aggregate_id, topic, payload)
            SELECT gen_random_uuid(), 'blob.written', '/payload-memory', 'blob', 'blob-' || (g % 10), '$name',
                   jsonb_build_object('n', g, 'blob', repeat(md5(g::text), $repeats))
            FROM generate_series($first, $last) AS g" "$url"
done
written_lsn=$(psql -Atqc "SELECT pg_current_wal_lsn()" "$url")

: > "$work/relay.toml"
case "$broker" in
  stdout) broker_url=stdout;;
  kafka) broker_url=kafka://$kafka_brokers
         printf '[kafka]\ncreate_missing_topics = true\n' > "$work/relay.toml";;
  rabbitmq)
    broker_url=$amqp_url
    python3 -c 'import pika' 2>/dev/null || pip install -q pika
    cat > "$work/consume.py" <<'PY'
import json, sys, pika
url, exchange, out = sys.argv[1:4]
connection = pika.BlockingConnection(pika.URLParameters(url))
channel = connection.channel()
channel.exchange_declare(exchange, "topic", durable=True)
queue = channel.queue_declare("", exclusive=True).method.queue
channel.queue_bind(queue, exchange, "#")
open(out + ".ready", "w").close()
seen, last, duplicates, disorder = set(), {}, 0, 0
def write():
    with open(out, "w") as file:
        file.write(f"{len(seen)} {duplicates} {disorder}\n")
def received(chan, method, properties, body):
    global duplicates, disorder
    number = json.loads(body)["n"]
    key = (properties.headers or {}).get("cloudEvents:partitionkey")
    duplicates += number in seen
    seen.add(number)
    disorder += key in last and last[key] > number
    last[key] = number
    write()
    chan.basic_ack(method.delivery_tag)
channel.basic_qos(prefetch_count=20)
channel.basic_consume(queue, received)
channel.start_consuming()
PY
    python3 "$work/consume.py" "$amqp_url" "$name" "$work/consumed" &
    consumer_pid=$!
    for _ in $(seq 100); do [ -e "$work/consumed.ready" ] && break; sleep 0.1; done
    [ -e "$work/consumed.ready" ] || { echo "the RabbitMQ consumer did not start" >&2; exit 1; };;
esac

args=(run --database-url "$url" --broker "$broker_url" --config "$work/relay.toml")
[ "$source_kind" = logical ] && args+=(--source logical --slot "$slot")
started=$(date +%s.%N)
"$bin" "${args[@]}" > /dev/null 2> "$work/relay.log" &
relay_pid=$!

drained() {
  if [ "$source_kind" = poll ]; then
    [ "$(psql -Atqc "SELECT count(*) FROM outbox_events WHERE state <> 'published'" "$url")" = 0 ] || return 1
  else
    # Streamed events stay pending: drained once the slot confirmed the
    # position the last insert committed before.
    [ "$(psql -Atqc "SELECT confirmed_flush_lsn >= '$written_lsn' FROM pg_replication_slots WHERE slot_name = '$slot'" "$url")" = t ] || return 1
  fi
  [ "$broker" != rabbitmq ] || [ "$(cut -d' ' -f1 "$work/consumed" 2>/dev/null)" = "$events" ]
}
for _ in $(seq 1200); do
  drained && break
  kill -0 "$relay_pid" 2>/dev/null || { echo "the relay exited:"; tail -20 "$work/relay.log"; exit 1; }
  sleep 0.5
done
finished=$(date +%s.%N)
peak_kib=$(awk '/VmHWM/ {print $2}' "/proc/$relay_pid/status")
cpu_seconds=$(awk '{printf "%.2f", ($14 + $15) / 100}' "/proc/$relay_pid/stat")
drained || { echo "not drained within 10 minutes"; tail -20 "$work/relay.log"; exit 1; }
kill -TERM "$relay_pid"; wait "$relay_pid" || true; relay_pid=""
seconds=$(echo "$finished - $started" | bc)
mb=$(( events * chars / 1000000 ))
line="$source_kind → $broker: $events events of ~$chars bytes ($mb MB), drained in ${seconds}s (relay cpu ${cpu_seconds}s), peak RSS $(( peak_kib / 1024 )) MiB"
status=0
if [ "$broker" = rabbitmq ]; then
  read -r distinct duplicates disorder < "$work/consumed"
  line="$line; consumer: $distinct distinct, $duplicates duplicates, $disorder out of order"
  [ "$distinct" = "$events" ] && [ "$disorder" = 0 ] || status=1
fi
if grep -q ERROR "$work/relay.log"; then
  line="$line; the relay logged errors:"$'\n'"$(grep ERROR "$work/relay.log" | head -5)"
  status=1
fi
[ $(( peak_kib / 1024 )) -le "$max_mib" ] || { line="$line — above $max_mib MiB"; status=1; }
echo "$line"
exit $status
