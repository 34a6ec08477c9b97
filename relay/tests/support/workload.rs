//! Events to enqueue, and the checks every delivery test makes.

use std::collections::{HashMap, HashSet};

use outbox_testkit::Received;
use serde::Serialize;

/// The payload of the events the end-to-end tests publish; the topic is
/// chosen per test, so events are enqueued as `OutboxMessage`s.
#[derive(Serialize, Clone)]
pub struct ShipmentMoved {
    pub shipment: String,
    pub sequence: u64,
}

/// `count` events numbered from `first_sequence`, spread round-robin over
/// `aggregates` aggregates on `topic`.
pub fn shipment_messages(
    topic: &str,
    first_sequence: u64,
    count: u64,
    aggregates: u64,
) -> Vec<outbox::OutboxMessage> {
    (first_sequence..first_sequence + count)
        .map(|sequence| {
            let event = ShipmentMoved {
                shipment: format!("s-{}", sequence % aggregates),
                sequence,
            };
            outbox::OutboxMessage::new(
                "shipment.moved",
                "/shipments",
                "shipment",
                event.shipment.clone(),
                topic,
                serde_json::value::to_raw_value(&event).expect("payload"),
            )
        })
        .collect()
}

/// Enqueue `count` events spread round-robin over `aggregates` aggregates
/// on `topic`, in transactions of `per_transaction`. Returns the event ids
/// in enqueue (id) order.
pub async fn enqueue_events<DB: outbox::Backend>(
    pool: &sqlx::Pool<DB>,
    topic: &str,
    count: u64,
    aggregates: u64,
    per_transaction: u64,
) -> Vec<uuid::Uuid> {
    let mut event_ids = Vec::with_capacity(count as usize);
    let mut sequence = 0;
    while sequence < count {
        let in_transaction = per_transaction.min(count - sequence);
        let messages = shipment_messages(topic, sequence, in_transaction, aggregates);
        sequence += in_transaction;
        let mut tx = pool.begin().await.expect("begin");
        let ids = outbox::OutboxWriter::new()
            .enqueue_messages(&mut tx, messages)
            .await
            .expect("enqueue");
        tx.commit().await.expect("commit");
        event_ids.extend(ids);
    }
    event_ids
}

/// What a consumer received against what was enqueued.
#[derive(Debug, Default)]
pub struct DeliveryReport {
    /// Enqueued events that never arrived.
    pub missing: Vec<uuid::Uuid>,
    /// Aggregates whose events first arrived out of enqueue order, one line
    /// each time it happened.
    pub out_of_order: Vec<String>,
    /// Arrivals of an event that had already arrived.
    pub duplicates: usize,
    /// Received ids that were never enqueued.
    pub unknown: Vec<String>,
}

/// Compare `received` with `enqueued` (in enqueue order): which events are
/// missing, which aggregates' first arrivals broke enqueue order, and how
/// many arrivals were duplicates.
pub fn delivery_report(enqueued: &[uuid::Uuid], received: &[Received]) -> DeliveryReport {
    let position: HashMap<String, usize> = enqueued
        .iter()
        .enumerate()
        .map(|(index, id)| (id.to_string(), index))
        .collect();
    let mut report = DeliveryReport::default();
    let mut seen = HashSet::new();
    let mut last_first_position: HashMap<String, usize> = HashMap::new();
    for message in received {
        let Some(&index) = position.get(&message.ce_id) else {
            report.unknown.push(message.ce_id.clone());
            continue;
        };
        if !seen.insert(message.ce_id.clone()) {
            report.duplicates += 1;
            continue;
        }
        if let Some(&previous) = last_first_position.get(&message.aggregate_id)
            && previous > index
        {
            report.out_of_order.push(format!(
                "aggregate {}: event #{index} first arrived after #{previous}",
                message.aggregate_id
            ));
        }
        last_first_position.insert(message.aggregate_id.clone(), index);
    }
    report.missing = enqueued
        .iter()
        .filter(|id| !seen.contains(&id.to_string()))
        .copied()
        .collect();
    report
}

/// Check that every enqueued event arrived and that each aggregate's first
/// occurrences arrived in enqueue order. Returns the number of duplicates.
pub fn check_delivery(enqueued: &[uuid::Uuid], received: &[Received]) -> usize {
    let report = delivery_report(enqueued, received);
    assert!(
        report.unknown.is_empty(),
        "received events that were never enqueued: {:?}",
        &report.unknown[..report.unknown.len().min(5)]
    );
    assert!(
        report.out_of_order.is_empty(),
        "published out of order: {:?}",
        &report.out_of_order[..report.out_of_order.len().min(5)]
    );
    assert!(
        report.missing.is_empty(),
        "{} of {} events never arrived, e.g. {:?}",
        report.missing.len(),
        enqueued.len(),
        &report.missing[..report.missing.len().min(5)]
    );
    report.duplicates
}

/// The events a relay's log says it counted as not sent (its debug line
/// "broker unavailable", written for every such event): a confirm that
/// came too late, a lost connection or producer. At least once lets the
/// relay publish these twice, and no other.
pub fn counted_not_sent(log: &str) -> HashSet<String> {
    log.lines()
        .filter(|line| line.contains("broker unavailable"))
        .filter_map(|line| line.split("event_id=").nth(1))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// Events received more than once that none of the relays (by their
/// `logs`) counted as not sent: duplicates at least once does not explain.
pub fn unexplained_duplicates(received: &[Received], logs: &[String]) -> Vec<String> {
    let not_sent: HashSet<String> = logs.iter().flat_map(|log| counted_not_sent(log)).collect();
    let mut seen = HashSet::new();
    let unexplained: std::collections::BTreeSet<String> = received
        .iter()
        .filter(|message| !seen.insert(message.ce_id.as_str()))
        .filter(|message| !not_sent.contains(&message.ce_id))
        .map(|message| message.ce_id.clone())
        .collect();
    unexplained.into_iter().collect()
}

/// How one writer commits: one event per transaction over aggregates of its
/// own (a producer serializes the writes of one aggregate), with a pause
/// between commits.
#[derive(Clone, Copy)]
pub struct WriterPlan {
    /// The writer's number, part of its aggregates' ids.
    pub writer: u64,
    /// Aggregates the writer spreads its events over.
    pub aggregates: u64,
    /// Events the writer commits at least, whenever it is stopped.
    pub at_least: u64,
    /// Pause after each commit.
    pub pause: std::time::Duration,
}

/// What a writer committed.
#[derive(Default)]
pub struct Written {
    /// Event ids in commit order, the uncertain ones included.
    pub events: Vec<uuid::Uuid>,
    /// Events whose commit failed after they were inserted (the database
    /// went away): committed or not, the table tells.
    pub uncertain: Vec<uuid::Uuid>,
    /// Transactions that failed.
    pub failures: u64,
}

impl Written {
    /// The events that are in the table, in commit order: `events` less
    /// the uncertain ones the table does not hold.
    pub async fn committed<DB: outbox::Backend + outbox_testkit::TestBackend>(
        mut self,
        db: &outbox_testkit::TestDatabase<DB>,
    ) -> Vec<uuid::Uuid> {
        let mut missing = HashSet::new();
        for id in &self.uncertain {
            let sql = format!("SELECT COUNT(*) FROM outbox_events WHERE event_id = '{id}'");
            if db.count(&sql).await == 0 {
                missing.insert(*id);
            }
        }
        self.events.retain(|id| !missing.contains(id));
        self.events
    }
}

/// Start `writers` writers on `target`, numbered from 0, each as `plan`
/// says (its `writer` number aside), until `stop` is cancelled.
pub fn spawn_writers<DB: outbox::Backend>(
    pool: &sqlx::Pool<DB>,
    target: &str,
    writers: u64,
    plan: WriterPlan,
    stop: &tokio_util::sync::CancellationToken,
) -> Vec<tokio::task::JoinHandle<Written>> {
    (0..writers)
        .map(|writer| {
            tokio::spawn(write_until_stopped(
                pool.clone(),
                target.to_owned(),
                WriterPlan { writer, ..plan },
                stop.clone(),
            ))
        })
        .collect()
}

/// Wait for `writers` to finish; what each wrote, in writer order.
pub async fn join_writers(writers: Vec<tokio::task::JoinHandle<Written>>) -> Vec<Written> {
    let mut written = Vec::with_capacity(writers.len());
    for writer in writers {
        written.push(writer.await.expect("writer task"));
    }
    written
}

/// The events of writers that all committed without a failure, in writer
/// then commit order.
pub fn events_without_failures(written: Vec<Written>) -> Vec<uuid::Uuid> {
    let mut events = Vec::new();
    for (writer, written) in written.into_iter().enumerate() {
        assert_eq!(
            written.failures, 0,
            "a transaction of writer {writer} failed"
        );
        events.extend(written.events);
    }
    events
}

/// The events of `written` that are in the table (see
/// [`Written::committed`]), in writer then commit order.
pub async fn committed_events<DB: outbox::Backend + outbox_testkit::TestBackend>(
    written: Vec<Written>,
    db: &outbox_testkit::TestDatabase<DB>,
) -> Vec<uuid::Uuid> {
    let mut events = Vec::new();
    for written in written {
        events.extend(written.committed(db).await);
    }
    events
}

/// One writer: commits events to `target` as `plan` says until `stop` is
/// cancelled and it has committed `plan.at_least`. A failed transaction is
/// counted and the writer goes on after a short pause, so it keeps writing
/// through a database restart.
pub async fn write_until_stopped<DB: outbox::Backend>(
    pool: sqlx::Pool<DB>,
    target: String,
    plan: WriterPlan,
    stop: tokio_util::sync::CancellationToken,
) -> Written {
    let mut written = Written::default();
    let mut sequence = 0;
    while !stop.is_cancelled() || (written.events.len() as u64) < plan.at_least {
        let event = ShipmentMoved {
            shipment: format!("w{}-{}", plan.writer, sequence % plan.aggregates),
            sequence,
        };
        sequence += 1;
        let message = outbox::OutboxMessage::new(
            "shipment.moved",
            "/shipments",
            "shipment",
            event.shipment.clone(),
            target.as_str(),
            serde_json::value::to_raw_value(&event).expect("payload"),
        );
        match commit_one(&pool, message).await {
            Ok(ids) => written.events.extend(ids),
            Err((error, inserted)) => {
                eprintln!("writer {}: {error}", plan.writer);
                written.failures += 1;
                written.events.extend(&inserted);
                written.uncertain.extend(inserted);
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
        tokio::time::sleep(plan.pause).await;
    }
    written
}

/// Enqueue `message` in a transaction of its own. On failure, the error and
/// the ids inserted before it (their commit is uncertain).
async fn commit_one<DB: outbox::Backend>(
    pool: &sqlx::Pool<DB>,
    message: outbox::OutboxMessage,
) -> Result<Vec<uuid::Uuid>, (String, Vec<uuid::Uuid>)> {
    let mut tx = pool
        .begin()
        .await
        .map_err(|error| (format!("begin: {error}"), Vec::new()))?;
    let ids = outbox::OutboxWriter::new()
        .enqueue_messages(&mut tx, vec![message])
        .await
        .map_err(|error| (format!("enqueue: {error}"), Vec::new()))?;
    tx.commit()
        .await
        .map_err(|error| (format!("commit: {error}"), ids.clone()))?;
    Ok(ids)
}
