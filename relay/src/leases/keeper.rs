//! [`LeaseKeeper`]: which partitions this instance owns, and for how long.
//!
//! Every live relay heartbeats in `outbox_relays` and aims at
//! `ceil(partitions / live relays)` partitions. Renewal runs on its own task
//! every third of the lease, so a long publish never lets a lease lapse;
//! acquiring and releasing happen between batches only (see
//! [`LeaseKeeper::rebalance`]), and a partition is never given up while one
//! of its batches or marks is in flight: a rebalance that would release
//! one waits for the loop to settle them, and one that only renews or
//! acquires does not hold the loop up.
//!
//! An instance that cannot publish hands its partitions over
//! ([`LeaseKeeper::hand_over`]): it releases them and stops heartbeating,
//! so the live instances aim at every partition between them, until it
//! [`LeaseKeeper::rejoin`]s.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use super::LeaseStore;
use crate::error::Error;
use crate::event::Lease;

/// The leases held and how long they are surely valid.
#[derive(Debug, Clone, Default)]
pub struct LeaseSnapshot {
    /// Leases held, by partition number.
    pub leases: Vec<Lease>,
    /// Local time before which every lease in `leases` is valid: measured
    /// from before the statement that last extended them was sent.
    pub valid_until: Option<Instant>,
}

impl LeaseSnapshot {
    /// Partition numbers held.
    #[cfg(feature = "test-util")]
    pub fn partitions(&self) -> Vec<i32> {
        self.leases.iter().map(|lease| lease.partition_no).collect()
    }

    /// Whether the leases stay valid for at least `margin` from now.
    pub fn valid_for(&self, margin: Duration) -> bool {
        match self.valid_until {
            Some(valid_until) => Instant::now() + margin < valid_until,
            None => false,
        }
    }
}

/// Keeps this relay's partition leases.
pub struct LeaseKeeper {
    store: Arc<dyn LeaseStore>,
    relay_id: String,
    lease_duration: Duration,
    partition_count: i32,
    state: Mutex<LeaseSnapshot>,
    /// Set while this instance has handed its partitions over: it neither
    /// heartbeats nor acquires.
    standing_by: AtomicBool,
    /// Held by every heartbeat and by handing over, so that a renewal in
    /// flight cannot register the instance again after it stood down.
    membership: tokio::sync::Mutex<()>,
}

/// Whether [`LeaseKeeper::rebalance`] may give leases up now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Batches or marks may be in flight: keep a surplus and say so.
    Deferred,
    /// Nothing is in flight: release a surplus.
    Now,
}

/// What [`LeaseKeeper::rebalance`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rebalanced {
    /// The leases held are this relay's share (or as many as it could
    /// take).
    Done,
    /// This relay holds more than its share, and kept them
    /// ([`Release::Deferred`]).
    MustSettleFirst,
}

/// What [`LeaseKeeper::hand_over`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handover {
    /// The leases were released and the instance stands by.
    HandedOver {
        /// Partitions released.
        released: u64,
        /// Other live relay instances, which take the partitions over.
        other_relays: i64,
    },
    /// No other instance is live: the leases are kept.
    Alone,
}

impl LeaseKeeper {
    /// A keeper holding no lease yet.
    pub fn new(
        store: Arc<dyn LeaseStore>,
        relay_id: String,
        lease_duration: Duration,
        partition_count: i32,
    ) -> Self {
        LeaseKeeper {
            store,
            relay_id,
            lease_duration,
            partition_count,
            state: Mutex::new(LeaseSnapshot::default()),
            standing_by: AtomicBool::new(false),
            membership: tokio::sync::Mutex::new(()),
        }
    }

    /// Whether this instance has handed its partitions over and stands by.
    pub fn is_standing_by(&self) -> bool {
        self.standing_by.load(Ordering::Acquire)
    }

    /// This relay's id, the `lease_owner` of its leases.
    pub fn relay_id(&self) -> &str {
        &self.relay_id
    }

    /// How many partitions the table has.
    pub fn partition_count(&self) -> i32 {
        self.partition_count
    }

    /// How long a lease lasts without renewal.
    pub fn lease_duration(&self) -> Duration {
        self.lease_duration
    }

    /// How often leases are renewed: a third of the lease.
    pub fn renew_interval(&self) -> Duration {
        self.lease_duration / 3
    }

    /// The leases held now.
    pub fn snapshot(&self) -> LeaseSnapshot {
        self.lock().clone()
    }

    fn lock(&self) -> MutexGuard<'_, LeaseSnapshot> {
        // A panic while holding this lock cannot leave the snapshot half
        // written (every write replaces whole fields), so poisoning is moot.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Heartbeat and extend the leases held. Leases the database no longer
    /// grants are dropped and logged.
    pub async fn renew(&self) -> Result<(), Error> {
        self.as_member("renewing the leases", (), self.renew_held())
            .await
    }

    async fn renew_held(&self) -> Result<(), Error> {
        let asked = self.snapshot().leases;
        let started = Instant::now();
        self.store
            .heartbeat(&self.relay_id, self.lease_duration)
            .await?;
        let renewed = self
            .store
            .renew_leases(&self.relay_id, &asked, self.lease_duration)
            .await?;
        let mut state = self.lock();
        for lease in asked.iter().filter(|lease| !renewed.contains(lease)) {
            tracing::warn!(
                partition = lease.partition_no,
                lease_token = lease.lease_token,
                "partition lease lost; its in-flight events will be published again by its new owner"
            );
        }
        // Keep leases acquired since `asked` was read; drop the lost ones.
        state
            .leases
            .retain(|lease| renewed.contains(lease) || !asked.contains(lease));
        if !asked.is_empty() || state.valid_until.is_none() {
            state.valid_until = Some(started + self.lease_duration);
        }
        Ok(())
    }

    /// Acquire or release partitions to reach this relay's fair share.
    /// Call it only between batches. Acquiring needs nothing settled; a
    /// lease given up must have no batch or mark of its partition in
    /// flight, so with [`Release::Deferred`] a surplus is left held and
    /// reported ([`Rebalanced::MustSettleFirst`]): the caller settles what
    /// it has in flight and asks again with [`Release::Now`].
    pub async fn rebalance(&self, release: Release) -> Result<Rebalanced, Error> {
        self.as_member(
            "rebalancing the leases",
            Rebalanced::Done,
            self.rebalance_held(release),
        )
        .await
    }

    async fn rebalance_held(&self, release: Release) -> Result<Rebalanced, Error> {
        let started = Instant::now();
        let live_relays = self
            .store
            .heartbeat(&self.relay_id, self.lease_duration)
            .await?
            .max(1);
        let target =
            usize::try_from((i64::from(self.partition_count) + live_relays - 1) / live_relays)
                .unwrap_or(0);
        let held = self.snapshot().leases;
        if held.len() > target {
            if release == Release::Deferred {
                return Ok(Rebalanced::MustSettleFirst);
            }
            let mut sorted = held.clone();
            sorted.sort_by_key(|lease| lease.partition_no);
            let surplus = sorted.split_off(target);
            self.store.release_leases(&self.relay_id, &surplus).await?;
            tracing::info!(
                released = surplus.len(),
                live_relays,
                target,
                "released partitions to other relays"
            );
            self.lock().leases.retain(|lease| !surplus.contains(lease));
        } else if held.len() < target {
            let wanted = i64::try_from(target - held.len()).unwrap_or(0);
            let acquired = self
                .store
                .acquire_leases(&self.relay_id, wanted, self.lease_duration)
                .await?;
            if !acquired.is_empty() {
                tracing::info!(
                    acquired = acquired.len(),
                    partitions = ?acquired.iter().map(|lease| lease.partition_no).collect::<Vec<_>>(),
                    live_relays,
                    target,
                    "acquired partitions"
                );
                let mut state = self.lock();
                if state.leases.is_empty() {
                    state.valid_until = Some(started + self.lease_duration);
                }
                state.leases.extend(acquired);
                state.leases.sort_by_key(|lease| lease.partition_no);
            }
        }
        Ok(Rebalanced::Done)
    }

    /// Hand every partition to the other live instances: release the leases
    /// and stop heartbeating, so that the others aim at every partition.
    /// Keeps the leases when no other instance is live. Call it only
    /// between batches, with no mark in flight.
    pub async fn hand_over(&self) -> Result<Handover, Error> {
        let _membership = self.membership.lock().await;
        self.within_lease("handing the leases over", self.hand_over_held())
            .await
    }

    async fn hand_over_held(&self) -> Result<Handover, Error> {
        let live_relays = self
            .store
            .heartbeat(&self.relay_id, self.lease_duration)
            .await?;
        if live_relays <= 1 {
            return Ok(Handover::Alone);
        }
        self.standing_by.store(true, Ordering::Release);
        let held = self.snapshot().leases;
        *self.lock() = LeaseSnapshot::default();
        let released = self.store.release_leases(&self.relay_id, &held).await?;
        self.store.deregister(&self.relay_id).await?;
        Ok(Handover::HandedOver {
            released,
            other_relays: live_relays - 1,
        })
    }

    /// Run `work` (`what`, for its error) under the membership lock,
    /// within [`LeaseKeeper::within_lease`]; while this instance stands by,
    /// nothing: `standing_by` is the answer.
    async fn as_member<T>(
        &self,
        what: &str,
        standing_by: T,
        work: impl std::future::Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        let _membership = self.membership.lock().await;
        if self.is_standing_by() {
            return Ok(standing_by);
        }
        self.within_lease(what, work).await
    }

    /// Run `work`, statements on the lease and heartbeat rows, bounded by
    /// the lease duration. Past it, the leases it would extend or take have
    /// expired anyway; and a statement waiting that long on a lock (a
    /// session holding the rows, or a connection left inside a
    /// transaction) must not keep the batch loop, which waits on
    /// `membership`, from going on and saying why.
    async fn within_lease<T>(
        &self,
        what: &str,
        work: impl std::future::Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        tokio::time::timeout(self.lease_duration, work)
            .await
            .unwrap_or_else(|_elapsed| {
                Err(Error::DatabaseTimeout(format!(
                    "{what} did not finish within lease_duration ({} ms): the database may be \
                     holding a lock on outbox_partitions or outbox_relays",
                    self.lease_duration.as_millis()
                )))
            })
    }

    /// End standing by: the next [`LeaseKeeper::rebalance`] heartbeats and
    /// takes this instance's share again.
    pub fn rejoin(&self) {
        self.standing_by.store(false, Ordering::Release);
    }

    /// Give up every lease and the heartbeat (on shutdown).
    pub async fn release_all(&self) -> Result<(), Error> {
        let held = self.snapshot().leases;
        let released = self.store.release_leases(&self.relay_id, &held).await?;
        self.store.deregister(&self.relay_id).await?;
        *self.lock() = LeaseSnapshot::default();
        tracing::info!(released, "released all partition leases");
        Ok(())
    }
}
