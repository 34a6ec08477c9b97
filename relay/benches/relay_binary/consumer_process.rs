//! A consumer in a process of its own, as users consume: the bench binary
//! started again with `--consume`, subscribed through librdkafka, with
//! lapin's `basic_consume`, reading a Redis stream with `XREAD BLOCK` or a
//! JetStream stream with an ordered consumer,
//! writing `event-id unix-nanoseconds` for every arrival to its standard
//! output; this process turns the lines back into arrival instants.
//!
//! The consumer stamps an arrival with the wall clock the moment its
//! client hands the message over; the reader here maps it onto its own
//! monotonic clock when it reads the line, so the pipe's delay does not
//! count.

use std::io::Write;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use crate::broker::Target;
use crate::support::consumers::{
    Arrivals, amqp_consume, kafka_consume, nats_consume, redis_consume,
};

/// The argument that makes the bench binary a consumer:
/// `--consume kafka BROKERS TOPIC`, `--consume rabbitmq URL QUEUE`,
/// `--consume redis URL STREAM` or `--consume nats URL STREAM`.
pub(crate) const CONSUME: &str = "--consume";

/// Start a consumer process of `target`; returns the arrivals it reports
/// and the task reading them, which owns the process: aborting the task
/// kills it.
pub(crate) fn spawn_consumer(
    target: &Target,
    amqp_url: &str,
) -> (Arrivals, tokio::task::JoinHandle<()>) {
    let (kind, address, source) = match target {
        Target::Topic { name, brokers } => ("kafka", brokers.as_str(), name.as_str()),
        Target::Exchange(exchange) => ("rabbitmq", amqp_url, exchange.queue.as_str()),
        Target::Stream { name, url } => ("redis", url.as_str(), name.as_str()),
        Target::JetStream { name, url } => ("nats", url.as_str(), name.as_str()),
    };
    let executable = std::env::current_exe().expect("the bench's own executable");
    let mut child = Command::new(executable)
        .args([CONSUME, kind, address, source])
        .stdout(Stdio::piped())
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start the consumer process");
    let stdout = child.stdout.take().expect("the consumer's standard output");
    let arrivals: Arrivals = Arc::default();
    let sink = Arc::clone(&arrivals);
    let task = tokio::spawn(async move {
        let _child = child;
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let Some((id, nanos)) = line.split_once(' ') else {
                continue;
            };
            let Ok(nanos) = nanos.parse::<u64>() else {
                continue;
            };
            let stamped = UNIX_EPOCH + Duration::from_nanos(nanos);
            let ago = SystemTime::now()
                .duration_since(stamped)
                .unwrap_or_default();
            let arrived = Instant::now().checked_sub(ago).unwrap_or_else(Instant::now);
            sink.lock().unwrap().entry(id.to_owned()).or_insert(arrived);
        }
    });
    (arrivals, task)
}

/// The consumer process's main: consume as `args` (after `--consume`) say
/// until killed, writing every arrival to standard output.
pub(crate) async fn consume(args: &[String]) {
    let [kind, address, source] = args else {
        panic!(
            "{CONSUME} kafka BROKERS TOPIC, {CONSUME} rabbitmq URL QUEUE, {CONSUME} redis URL STREAM or {CONSUME} nats URL STREAM"
        );
    };
    let report = |id: String, _: Instant| {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let mut out = std::io::stdout().lock();
        if writeln!(out, "{id} {nanos}")
            .and_then(|()| out.flush())
            .is_err()
        {
            // The bench is gone.
            std::process::exit(0);
        }
    };
    let task = match kind.as_str() {
        "kafka" => kafka_consume(address, source, report),
        "rabbitmq" => amqp_consume(address, source, report).await,
        "redis" => redis_consume(address, source, report).await,
        "nats" => nats_consume(address, source, report).await,
        other => panic!("unknown broker {other}: kafka, rabbitmq, redis or nats"),
    };
    let _ = task.await;
}
