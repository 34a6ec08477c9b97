//! The publish of one batch, the two halves of the publisher's
//! [`Broker`](crate::publish::Broker): every record is handed to
//! librdkafka first ([`KafkaPublisher::hand_over_records`]), then every
//! delivery report is awaited ([`KafkaPublisher::await_reports`]), all
//! under one deadline. The two halves are separate so the relay can hand
//! the next batch over while this one's reports are awaited: one producer
//! keeps the records of a key in the order they were handed over, across
//! batches too.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::Ordering;
use std::time::Duration;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{DeliveryFuture, FutureRecord};
use tokio::time::Instant;

use super::KafkaPublisher;
use super::client::RelayProducer;
use super::headers::kafka_headers;
use super::topics::check_topic_name;
use crate::event::OutboundEvent;
use crate::publish::broker::settled;
use crate::publish::cloudevent::CloudEvent;
use crate::publish::send_order::UnsettledSend;
use crate::publish::{AggregateHolds, PublishFailure};

/// Extra time, past `message.timeout.ms`, before the publisher stops waiting
/// for a delivery report librdkafka should have produced by then.
pub(super) const DELIVERY_GRACE: Duration = Duration::from_secs(5);

/// How long to wait before retrying when librdkafka's queue is full and none
/// of this batch's records are in flight to wait for.
const QUEUE_FULL_PAUSE: Duration = Duration::from_millis(10);

/// A batch on its way: each event's outcome once it is known, and the
/// records handed to librdkafka whose delivery report is still awaited,
/// oldest first.
pub struct Batch {
    outcomes: Vec<Option<Result<(), PublishFailure>>>,
    in_flight: VecDeque<(usize, DeliveryFuture)>,
    /// When the batch stops waiting for delivery reports.
    deadline: Instant,
    /// The producer the records were handed to.
    producer: RelayProducer,
    /// Settled when the batch is dropped, after its reports were awaited:
    /// until then, no send goes out on a newer producer.
    _unsettled: Option<UnsettledSend>,
}

impl KafkaPublisher {
    /// Hand the record of every event to librdkafka, in order; an event
    /// that fails before it is handed over holds its key's later ones.
    pub(super) async fn hand_over_records(&self, events: &[OutboundEvent]) -> Batch {
        let mut outcomes = vec![None; events.len()];
        let cloud_events = cloud_events(events, &mut outcomes);

        let topics: HashSet<&str> = events
            .iter()
            .zip(&cloud_events)
            .filter(|(_, cloud_event)| cloud_event.is_some())
            .map(|(event, _)| event.topic.as_str())
            .collect();
        let topic_failures = self.resolve_topics(topics).await;

        let current = self.current_producer();
        let mut batch = Batch {
            outcomes,
            in_flight: VecDeque::with_capacity(events.len()),
            deadline: Instant::now() + self.delivery_wait,
            producer: current.producer,
            _unsettled: None,
        };
        // Records still unacknowledged on a replaced producer were purged
        // with it: nothing goes out on this one before they are settled.
        match self.send_order.enter(current.generation, "kafka") {
            Ok(unsettled) => batch._unsettled = Some(unsettled),
            Err(failure) => {
                for outcome in batch
                    .outcomes
                    .iter_mut()
                    .filter(|outcome| outcome.is_none())
                {
                    *outcome = Some(Err(failure.clone()));
                }
                return batch;
            }
        }
        // Records of one key go to one partition in the order they are
        // handed over; one that fails before that holds its key's later ones.
        let mut holds = AggregateHolds::default();
        for (index, (event, cloud_event)) in events.iter().zip(&cloud_events).enumerate() {
            if let Some(held) = holds.held(event) {
                batch.outcomes[index] = Some(Err(held));
                continue;
            }
            let Some(cloud_event) = cloud_event else {
                holds.note_failure(event);
                continue;
            };
            if let Some(failure) = topic_failures.get(&event.topic) {
                batch.outcomes[index] = Some(Err(failure.clone()));
                holds.note_failure(event);
                continue;
            }
            let record = FutureRecord::to(&event.topic)
                .key(event.aggregate_id.as_str())
                .payload(&*event.payload)
                .headers(kafka_headers(cloud_event, event));
            self.send_record(&mut batch, events, index, record).await;
            if matches!(batch.outcomes[index], Some(Err(_))) {
                holds.note_failure(event);
            }
        }
        batch
    }

    /// Await the delivery report of every record of `batch` (handed over
    /// from `events`), replace the producer if the broker said its state is
    /// broken, and return one outcome per event, in order.
    pub(super) async fn await_reports(
        &self,
        mut batch: Batch,
        events: &[OutboundEvent],
    ) -> Vec<Result<(), PublishFailure>> {
        while self.await_oldest(&mut batch, events).await {}

        self.replace_broken_producer(&batch.producer);
        settled(batch.outcomes, "kafka")
    }

    /// Hand the record of event `index` to librdkafka. While its queue is
    /// full, wait for the batch's oldest record to make room, until the
    /// deadline; a send that fails sets the event's outcome.
    async fn send_record(
        &self,
        batch: &mut Batch,
        events: &[OutboundEvent],
        index: usize,
        mut record: FutureRecord<'_, str, str>,
    ) {
        loop {
            match batch.producer.send_result(record) {
                Ok(delivery) => {
                    batch.in_flight.push_back((index, delivery));
                    return;
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), returned)) => {
                    record = returned;
                    if Instant::now() >= batch.deadline {
                        batch.outcomes[index] = Some(Err(PublishFailure::Unavailable(
                            "kafka producer queue stayed full until the delivery deadline"
                                .to_owned(),
                        )));
                        return;
                    }
                    if !self.await_oldest(batch, events).await {
                        tokio::time::sleep(QUEUE_FULL_PAUSE).await;
                    }
                }
                Err((error, _)) => {
                    batch.outcomes[index] = Some(Err(self.classify(&error, &events[index])));
                    return;
                }
            }
        }
    }

    /// Await the delivery report of the batch's oldest record in flight and
    /// set its outcome; false when none is in flight.
    async fn await_oldest(&self, batch: &mut Batch, events: &[OutboundEvent]) -> bool {
        let Some((index, delivery)) = batch.in_flight.pop_front() else {
            return false;
        };
        let event = &events[index];
        let outcome = self.await_delivery(delivery, batch.deadline, event).await;
        batch.outcomes[index] = Some(outcome);
        true
    }

    /// The outcome of one record: its delivery report, or unavailable when
    /// none arrives by `deadline`.
    async fn await_delivery(
        &self,
        delivery: DeliveryFuture,
        deadline: Instant,
        event: &OutboundEvent,
    ) -> Result<(), PublishFailure> {
        match tokio::time::timeout_at(deadline, delivery).await {
            Ok(Ok(Ok(_))) => {
                self.connected.store(true, Ordering::Relaxed);
                Ok(())
            }
            Ok(Ok(Err((error, _message)))) => Err(self.classify(&error, event)),
            Ok(Err(_canceled)) => Err(PublishFailure::Unavailable(
                "kafka producer was shut down before the delivery report".to_owned(),
            )),
            Err(_elapsed) => Err(PublishFailure::Unavailable(format!(
                "no kafka delivery report within {} ms",
                self.delivery_wait.as_millis()
            ))),
        }
    }
}

/// The CloudEvent of each event, or `None` with the event's outcome set
/// when it cannot be sent (an invalid topic name, an invalid event).
fn cloud_events(
    events: &[OutboundEvent],
    outcomes: &mut [Option<Result<(), PublishFailure>>],
) -> Vec<Option<CloudEvent>> {
    events
        .iter()
        .zip(outcomes)
        .map(|(event, outcome)| {
            let cloud_event = check_topic_name(&event.topic)
                .map_err(PublishFailure::Rejected)
                .and_then(|()| CloudEvent::from_outbound(event));
            match cloud_event {
                Ok(cloud_event) => Some(cloud_event),
                Err(failure) => {
                    *outcome = Some(Err(failure));
                    None
                }
            }
        })
        .collect()
}
