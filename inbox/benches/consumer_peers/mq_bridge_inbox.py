"""mq-bridge's inbox: one route from a RabbitMQ queue to PostgreSQL, until stdin closes.

The `consumer_peers` bench of outbox-inbox runs it in a process of its own,
with the Python package `mq-bridge` 1.2.0 (a Rust core), configured as
an inbox beside ours:

    mq_bridge_inbox.py --database-url URL --amqp-url URL --queue Q

- input: `amqp` on the existing durable queue `Q`, `prefetch_count` 1000,
  with the `deduplication` middleware: its store is the table `mqb_dedup`
  in the same PostgreSQL database, keyed on the payload's `order_id`
  (`${payload:order_id}`), entries kept 7 days (the inbox's default
  window);
- output: `sqlx` into the table `invoices`, `columns: auto` (each top-level
  JSON field of the payload into the column of the same name: `order_id`,
  `amount_cents`), which mq-bridge writes as one multi-row `INSERT` per
  batch with the columns' types cast;
- `batch_size` 512, `concurrency` 1 (the default);
- both PostgreSQL connections without TLS (`sslmode=disable`, see
  `without_tls`): mq-bridge's sockets lack TCP_NODELAY, which costs
  ~45 ms a statement over TLS (~2,200 deliveries/s here instead of ~5,700-6,200).

It prints `started` once the route runs, and when stdin closes it stops
the route, prints `stopped stop_seconds=S cpu_seconds=C` (C: the
process's user + system CPU, every thread) and exits at once. mq-bridge
requeues the deliveries it still holds when it stops, so the bench closes
stdin only once the queue is empty, acknowledgements included. Its log (level `--log`, default warn) goes to
stderr.
"""

import argparse
import logging
import os
import sys
import threading
import time

import mq_bridge

# Seconds the deduplication store keeps a key: the inbox's default window.
DEDUP_TTL_SECONDS = 7 * 24 * 3600


def without_tls(database_url):
    """`database_url` with `sslmode=disable`, unless it names an `sslmode`.

    mq-bridge's sqlx 0.9.0 leaves TCP_NODELAY off on its PostgreSQL
    sockets; over TLS (sqlx's default `sslmode=prefer`, and the bench's
    server offers TLS) each statement then waits out Nagle and the
    server's delayed ACK, ~45 ms apiece, which held the route to ~2,200
    deliveries/s. Plain TCP does not stall that way."""
    base, _, query = database_url.partition("?")
    if "sslmode=" in query:
        return database_url
    return f"{base}?" + (f"{query}&" if query else "") + "sslmode=disable"


def dedup_store(database_url):
    """The deduplication store: table `mqb_dedup` of the database at `database_url`."""
    base, _, query = database_url.partition("?")
    return f"{base}/mqb_dedup" + (f"?{query}" if query else "")


def route_config(arguments):
    return {
        "input": {
            "amqp": {
                "url": arguments.amqp_url,
                "queue": arguments.queue,
                "prefetch_count": arguments.prefetch,
            },
            "middlewares": [
                {
                    "deduplication": {
                        "store": dedup_store(without_tls(arguments.database_url)),
                        "key": "${payload:order_id}",
                        "ttl_seconds": DEDUP_TTL_SECONDS,
                    }
                }
            ],
        },
        "output": {
            "sqlx": {
                "url": without_tls(arguments.database_url),
                "table": "invoices",
                "columns": "auto",
            }
        },
        "batch_size": arguments.batch_size,
    }


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--amqp-url", required=True)
    parser.add_argument("--queue", required=True, help="the durable queue, loaded beforehand")
    parser.add_argument("--prefetch", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--log", default="warn", help="mq-bridge's log level")
    return parser.parse_args(argv)


def main(argv):
    arguments = parse(argv)
    logging.basicConfig(
        level=logging.DEBUG,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    mq_bridge.init_logging(arguments.log)
    stop = threading.Event()

    def wait_for_stdin_to_close():
        sys.stdin.read()
        stop.set()

    threading.Thread(target=wait_for_stdin_to_close, daemon=True).start()
    route = mq_bridge.Route.from_config(route_config(arguments))
    route.start()
    print("started", flush=True)
    stop.wait()
    stopping = time.monotonic()
    route.stop()
    route.join()
    stop_seconds = time.monotonic() - stopping
    times = os.times()
    print(
        f"stopped stop_seconds={stop_seconds:.6f} cpu_seconds={times.user + times.system:.6f}",
        flush=True,
    )
    # Skip the interpreter's finalization: the run is over.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
