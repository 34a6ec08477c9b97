//! The publish of one batch, the two halves of the publisher's
//! [`Broker`](crate::publish::Broker): every `XADD` is handed to the
//! connection in one pipeline ([`RedisPublisher::hand_over_entries`]),
//! then the replies are awaited ([`RedisPublisher::await_replies`]).
//!
//! On one server, a pipeline is written to the connection when it is
//! handed over, so a later batch's pipeline is written, executed and
//! answered after it: the relay may send the next batch before this one is
//! answered. A cluster takes one pipeline per slot, each routed to its
//! node, so a batch becomes one pipeline per stream, sent together and
//! awaited before the next batch.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use redis::{RedisResult, Value};
use tokio::time::Instant;

use super::RedisPublisher;
use super::connection::{Link, Session};
use super::entry::{Entry, entry};
use super::outcome::{pipeline_failure, reply_outcome};
use crate::event::OutboundEvent;
use crate::publish::broker::settled;
use crate::publish::send_order::UnsettledSend;
use crate::publish::{Prepared, PublishFailure};

/// The reply to one pipeline.
type Reply = Pin<Box<dyn Future<Output = RedisResult<Vec<Value>>> + Send>>;

/// One pipeline on its way: the events it holds (by index in the batch,
/// in order) with their streams, and its reply.
struct Pipeline {
    events: Vec<(usize, String)>,
    reply: Reply,
}

/// A batch handed to the connection: each event's outcome once known, the
/// pipelines whose replies are awaited, and the connection they went on.
pub struct Pipelined {
    outcomes: Vec<Option<Result<(), PublishFailure>>>,
    pipelines: Vec<Pipeline>,
    session: Option<Arc<Session>>,
    deadline: Instant,
    /// Whether every pipeline was written and no event has failed so far.
    in_order: bool,
    /// Settled when the batch is dropped, after its replies were awaited:
    /// until then, no send goes out on a newer connection.
    _unsettled: Option<UnsettledSend>,
}

impl Pipelined {
    fn unsent(outcomes: Vec<Result<(), PublishFailure>>) -> Self {
        Pipelined {
            outcomes: outcomes.into_iter().map(Some).collect(),
            pipelines: Vec::new(),
            session: None,
            deadline: Instant::now(),
            in_order: false,
            _unsettled: None,
        }
    }

    /// Whether a later batch sent on the same connection is stored after
    /// this one (one server, every pipeline written, no failure known).
    pub(super) fn in_order_in_flight(&self) -> bool {
        self.in_order
            && !self
                .outcomes
                .iter()
                .any(|outcome| matches!(outcome, Some(Err(_))))
    }
}

impl RedisPublisher {
    /// Build the `XADD` of every event, and hand them to the connection in
    /// order, without waiting for the replies.
    pub(super) async fn hand_over_entries(&self, events: &[OutboundEvent]) -> Pipelined {
        let Prepared {
            messages: entries,
            outcomes,
        } = Prepared::each(events, |event| {
            entry(event, self.config.stream_of(&event.topic))
        });
        if outcomes.iter().all(Option::is_some) {
            return Pipelined::unsent(outcomes.into_iter().flatten().collect());
        }

        let fail_ready = |outcomes: Vec<Option<Result<(), PublishFailure>>>,
                          failure: &PublishFailure| {
            outcomes
                .into_iter()
                .map(|outcome| outcome.unwrap_or_else(|| Err(failure.clone())))
                .collect()
        };
        let session = match self.session().await {
            Ok(session) => session,
            Err(failure) => return Pipelined::unsent(fail_ready(outcomes, &failure)),
        };
        // Entries still unanswered on a replaced connection may be lost:
        // nothing goes out on this one before they are settled.
        let unsettled = match self.send_order.enter(session.generation, "redis") {
            Ok(unsettled) => unsettled,
            Err(failure) => return Pipelined::unsent(fail_ready(outcomes, &failure)),
        };

        let groups = group_entries(entries, session.is_cluster());
        let mut batch = Pipelined {
            outcomes,
            pipelines: Vec::with_capacity(groups.len()),
            session: Some(Arc::clone(&session)),
            deadline: Instant::now() + self.config.response_timeout,
            in_order: !session.is_cluster(),
            _unsettled: Some(unsettled),
        };
        for group in groups {
            let mut pipeline = redis::pipe();
            pipeline.ignore_errors();
            let mut indices = Vec::with_capacity(group.len());
            for (index, entry) in group {
                pipeline.add_command(entry.command);
                indices.push((index, entry.stream));
            }
            let mut reply = send_pipeline(session.link.clone(), pipeline);
            // The first poll writes the pipeline into the connection's
            // queue; the reply comes later.
            if let Poll::Ready(answered) = futures::poll!(&mut reply) {
                batch.in_order = false;
                reply = Box::pin(std::future::ready(answered));
            }
            batch.pipelines.push(Pipeline {
                events: indices,
                reply,
            });
        }
        batch
    }

    /// Await the replies of `batch` (handed over from `events`) and return
    /// one outcome per event, in order. A connection that failed or did not
    /// answer in time is replaced on the next send.
    pub(super) async fn await_replies(
        &self,
        mut batch: Pipelined,
        _events: &[OutboundEvent],
    ) -> Vec<Result<(), PublishFailure>> {
        let pipelines = std::mem::take(&mut batch.pipelines);
        let mut broken = None;
        for pipeline in pipelines {
            let answered = tokio::time::timeout_at(batch.deadline, pipeline.reply).await;
            let replies = match answered {
                Ok(Ok(replies)) if replies.len() == pipeline.events.len() => replies,
                Ok(Ok(replies)) => {
                    let (answered, sent) = (replies.len(), pipeline.events.len());
                    broken.get_or_insert(
                        "redis answered a pipeline with the wrong number of replies",
                    );
                    fail_all(&mut batch.outcomes, &pipeline.events, |stream| {
                        PublishFailure::Unavailable(format!(
                            "redis answered {answered} of the {sent} XADDs of a pipeline \
                             (this one to stream `{stream}`)"
                        ))
                    });
                    continue;
                }
                Ok(Err(error)) => {
                    if error.code().is_none() {
                        broken.get_or_insert("a pipeline failed on the connection");
                    }
                    fail_all(&mut batch.outcomes, &pipeline.events, |stream| {
                        pipeline_failure(&error, stream)
                    });
                    continue;
                }
                Err(_elapsed) => {
                    broken.get_or_insert("no reply within response_timeout");
                    let timeout = self.config.response_timeout.as_millis();
                    fail_all(&mut batch.outcomes, &pipeline.events, |stream| {
                        PublishFailure::Unavailable(format!(
                            "redis did not answer the XADD to stream `{stream}` within {timeout} ms"
                        ))
                    });
                    continue;
                }
            };
            for ((index, stream), reply) in pipeline.events.iter().zip(&replies) {
                batch.outcomes[*index] = Some(reply_outcome(reply, stream));
            }
        }
        if let (Some(reason), Some(session)) = (broken, &batch.session) {
            self.discard_session(session, reason);
        }
        settled(std::mem::take(&mut batch.outcomes), "redis")
    }
}

/// Fail every event of a pipeline, each with the failure `failure` gives
/// its stream.
fn fail_all(
    outcomes: &mut [Option<Result<(), PublishFailure>>],
    events: &[(usize, String)],
    failure: impl Fn(&str) -> PublishFailure,
) {
    for (index, stream) in events {
        outcomes[*index] = Some(Err(failure(stream)));
    }
}

/// The pipelines of a batch, each with its entries in batch order: one for
/// a server, one per stream for a cluster (a cluster pipeline must stay in
/// one slot).
fn group_entries(entries: Vec<Option<Entry>>, per_stream: bool) -> Vec<Vec<(usize, Entry)>> {
    let mut groups: Vec<Vec<(usize, Entry)>> = Vec::new();
    for (index, entry) in entries.into_iter().enumerate() {
        let Some(entry) = entry else { continue };
        let group = if per_stream {
            groups
                .iter()
                .position(|group| group[0].1.stream == entry.stream)
        } else {
            (!groups.is_empty()).then_some(0)
        };
        match group {
            Some(position) => groups[position].push((index, entry)),
            None => groups.push(vec![(index, entry)]),
        }
    }
    groups
}

/// The reply to `pipeline` sent on `link`. Its first poll writes the
/// pipeline into the connection's queue: it runs without the task's
/// cooperative budget, so that first poll always gets that far.
fn send_pipeline(link: Link, pipeline: redis::Pipeline) -> Reply {
    Box::pin(tokio::task::unconstrained(async move {
        match link {
            Link::Server(mut connection) => {
                pipeline.query_async::<Vec<Value>>(&mut connection).await
            }
            Link::Cluster(mut connection) => {
                pipeline.query_async::<Vec<Value>>(&mut connection).await
            }
        }
    }))
}
