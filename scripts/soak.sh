#!/usr/bin/env bash
# A soak run of the relay: writers, three relays and a consumer for N
# minutes, with faults injected at random; prints one line at the end
# (lost, order violations, duplicates, faults injected) and fails when an
# event was lost or arrived out of order.
#
#   scripts/soak.sh [--minutes N] [--source S] [--broker B]
#                   [--no-service-faults] [--seed S] [--only F,...]
#
#   --minutes N            how long the writers and faults run (default 10)
#   --source S             polling (default) or logical: three relays on
#                          one slot, which the first of them creates after
#                          the writers started
#   --broker B             rabbitmq (default) or kafka (tansu)
#   --no-service-faults    only relay faults (SIGKILL, SIGSTOP/SIGCONT);
#                          without it PostgreSQL is restarted and the
#                          broker taken down (RabbitMQ stopped, tansu
#                          frozen) now and then: nothing else may use the
#                          services meanwhile
#   --seed S               replay the fault sequence of an earlier run
#   --only F,...           only these faults (sigkill, sigstop,
#                          postgres_restart, broker_stop), to find which
#                          one a failure comes with
#
# The services are the ones `scripts/test.sh --services-only` starts (or
# the OUTBOX_TEST_* variables name).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

MINUTES=10
SOURCE=polling
BROKER=rabbitmq
SERVICE_FAULTS=1
SEED=""
while [[ $# -gt 0 ]]; do
    case $1 in
        --minutes)
            [[ $# -ge 2 ]] || { echo "soak.sh: --minutes needs a number" >&2; exit 2; }
            MINUTES=$2
            shift 2
            ;;
        --source)
            [[ $# -ge 2 && ($2 == polling || $2 == logical) ]] ||
                { echo "soak.sh: --source needs polling or logical" >&2; exit 2; }
            SOURCE=$2
            shift 2
            ;;
        --broker)
            [[ $# -ge 2 && ($2 == rabbitmq || $2 == kafka) ]] ||
                { echo "soak.sh: --broker needs rabbitmq or kafka" >&2; exit 2; }
            BROKER=$2
            shift 2
            ;;
        --no-service-faults)
            SERVICE_FAULTS=0
            shift
            ;;
        --only)
            [[ $# -ge 2 ]] || { echo "soak.sh: --only needs fault names" >&2; exit 2; }
            export OUTBOX_SOAK_ONLY=$2
            shift 2
            ;;
        --seed)
            [[ $# -ge 2 ]] || { echo "soak.sh: --seed needs a number" >&2; exit 2; }
            SEED=$2
            shift 2
            ;;
        *)
            echo "soak.sh: unknown argument $1 (see the comment at the top)" >&2
            exit 2
            ;;
    esac
done

export OUTBOX_SOAK_MINUTES=$MINUTES OUTBOX_SOAK_SOURCE=$SOURCE OUTBOX_SOAK_BROKER=$BROKER
export OUTBOX_SOAK_SERVICE_FAULTS=$SERVICE_FAULTS
if [[ -n $SEED ]]; then
    export OUTBOX_SOAK_SEED=$SEED
fi
exec cargo test -p outbox-relay --test soak -- --ignored --nocapture --test-threads=1 soak
