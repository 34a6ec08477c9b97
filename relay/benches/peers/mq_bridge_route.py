"""One mq-bridge route, from PostgreSQL to a RabbitMQ queue, until SIGTERM.

The `relay_binary` bench's `peers` case runs it beside the relay, in a
process of its own, with the Python package `mq-bridge` 1.2.0 (a Rust core):

    mq_bridge_route.py poll --database-url URL --table outbox --amqp-url URL --queue Q
    mq_bridge_route.py cdc --database-url URL --publication P --slot S --amqp-url URL --queue Q

`poll` reads mq-bridge's own queue table (`sqlx`, `delete_after_read`,
every 100 ms); `cdc` reads a publication through a replication slot made
beforehand (`postgres_cdc`, `create_slot: false`). Both publish to the
durable queue `Q` through the default exchange, persistent, with publisher
confirms; batches of 512, one at a time (`concurrency: 1`). The route's log
goes to stderr.
"""

import argparse
import logging
import signal
import sys
import threading

import mq_bridge


def input_endpoint(arguments):
    """The route's input, as the measurement we reproduce configured it."""
    if arguments.mode == "poll":
        return {
            "sqlx": {
                "url": arguments.database_url,
                "table": arguments.table,
                "delete_after_read": True,
                "polling_interval_ms": 100,
            }
        }
    return {
        "postgres_cdc": {
            "url": arguments.database_url,
            "publication": arguments.publication,
            "slot_name": arguments.slot,
            "create_slot": False,
        }
    }


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["poll", "cdc"])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--table", default="outbox", help="poll: the queue table")
    parser.add_argument("--publication", help="cdc: the publication")
    parser.add_argument("--slot", help="cdc: the replication slot, made beforehand")
    parser.add_argument("--amqp-url", required=True)
    parser.add_argument("--queue", required=True, help="the durable queue it publishes to")
    parser.add_argument("--log", default="info", help="mq-bridge's log level")
    arguments = parser.parse_args(argv)
    if arguments.mode == "cdc" and not (arguments.publication and arguments.slot):
        parser.error("cdc needs --publication and --slot")
    return arguments


def main(argv):
    arguments = parse(argv)
    logging.basicConfig(
        level=logging.DEBUG,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    mq_bridge.init_logging(arguments.log)
    config = {
        "input": input_endpoint(arguments),
        "output": {"amqp": {"url": arguments.amqp_url, "queue": arguments.queue}},
        "batch_size": 512,
        "concurrency": 1,
    }
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    route = mq_bridge.Route.from_config(config)
    route.start()
    print(f"mq-bridge {mq_bridge.__version__}: route {arguments.mode} started", file=sys.stderr, flush=True)
    while not stop.wait(0.2):
        pass
    route.stop()
    route.join()
    print("mq-bridge: route stopped", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
