//! The event and handler of the suite: credits to accounts, numbered per
//! account, recorded as one `effects` row per application (no unique key:
//! a second application shows as a second row). [`Ledger`] is what a
//! scenario sees of the handler and how it makes it misbehave.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox::Event;
use outbox_inbox::{BoxError, DecodeError, Delivery, Handler, InboxBackend, IncomingEvent};
use outbox_testkit::TestBackend;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::broker::Message;

/// The table the handler writes; `event_id` is `account/seq`, `applied`
/// numbers the handler runs in the order they started.
pub const CREATE_EFFECTS: &str = "CREATE TABLE effects (event_id VARCHAR(64) NOT NULL, \
     account VARCHAR(64) NOT NULL, seq BIGINT NOT NULL, applied BIGINT NOT NULL)";

/// The event of the suite: a credit to an account, numbered per account.
#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(
    type = "account.credited",
    aggregate = "account",
    topic = "accounts",
    source = "/accounts"
)]
pub struct AccountCredited {
    #[event(aggregate_id)]
    pub account: String,
    pub seq: i64,
}

/// Credit number `seq` of `account`, as the relay publishes it, with an
/// event id of its own.
pub fn credit(account: &str, seq: i64) -> Message {
    let event = AccountCredited {
        account: account.to_owned(),
        seq,
    };
    Message::of(&event, &Uuid::now_v7().to_string())
}

/// The `effects` key of credit `seq` of `account`.
pub fn effect_key(account: &str, seq: i64) -> String {
    format!("{account}/{seq}")
}

/// How the handler fails for one event.
#[derive(Debug, Clone, Copy)]
pub enum Failure {
    /// Every attempt.
    Always,
    /// Its first `first` attempts, and every attempt made before `effects`
    /// effects of other accounts are committed.
    UntilOthersApplied { first: u32, effects: i64 },
}

/// A handler's own error type, wrapping the database error that caused
/// it: the delivery policy must find a lost connection behind it.
#[derive(Debug, thiserror::Error)]
#[error("cannot record credit {credit}")]
struct LedgerError {
    credit: String,
    #[source]
    source: sqlx::Error,
}

/// Holds handler runs inside their transactions, after the first
/// `passing` runs, until it opens. Open from the start unless closed.
#[derive(Debug, Default)]
pub struct Gate {
    closed: AtomicBool,
    passing: AtomicU64,
    runs: AtomicU64,
    held: AtomicU64,
}

impl Gate {
    /// Let the next `passing` runs through, then hold every later run.
    pub fn close_after(&self, passing: u64) {
        self.passing.store(passing, Ordering::SeqCst);
        self.closed.store(true, Ordering::SeqCst);
    }

    /// Let every held and later run through.
    pub fn open(&self) {
        self.closed.store(false, Ordering::SeqCst);
    }

    /// Runs held right now.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::SeqCst)
    }

    async fn pass(&self) {
        let run = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        if !self.closed.load(Ordering::SeqCst) || run <= self.passing.load(Ordering::SeqCst) {
            return;
        }
        self.held.fetch_add(1, Ordering::SeqCst);
        while self.closed.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.held.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What the handler saw, and how it misbehaves.
#[derive(Debug, Default)]
pub struct Ledger {
    /// Deliveries decoded (every delivery reaches `decode`), per consumer.
    decodes: Mutex<HashMap<usize, u64>>,
    /// Deliveries decoded into a credit, per effect key.
    deliveries: Mutex<HashMap<String, u32>>,
    /// Handler runs started, numbering them.
    started: AtomicU64,
    /// Handler runs per effect key.
    runs: Mutex<HashMap<String, u32>>,
    /// Failed handler runs per effect key.
    failures: Mutex<HashMap<String, u32>>,
    /// How the handler fails, per effect key.
    failing: Mutex<HashMap<String, Failure>>,
    /// Where handler runs wait inside their transactions.
    pub gate: Gate,
}

impl Ledger {
    /// A ledger whose handler fails for `account`'s credit `seq` as
    /// `failure` says.
    pub fn fail(&self, account: &str, seq: i64, failure: Failure) {
        self.failing
            .lock()
            .expect("failing")
            .insert(effect_key(account, seq), failure);
    }

    /// Deliveries decoded so far.
    pub fn decodes(&self) -> u64 {
        self.decodes.lock().expect("decodes").values().sum()
    }

    /// Deliveries decoded so far by the handler of consumer `consumer`.
    pub fn decodes_by(&self, consumer: usize) -> u64 {
        let decodes = self.decodes.lock().expect("decodes");
        decodes.get(&consumer).copied().unwrap_or(0)
    }

    /// Deliveries of `account`'s credit `seq` that decoded.
    pub fn deliveries(&self, account: &str, seq: i64) -> u32 {
        let deliveries = self.deliveries.lock().expect("deliveries");
        deliveries
            .get(&effect_key(account, seq))
            .copied()
            .unwrap_or(0)
    }

    /// Handler runs for `account`'s credit `seq`.
    pub fn runs(&self, account: &str, seq: i64) -> u32 {
        let runs = self.runs.lock().expect("runs");
        runs.get(&effect_key(account, seq)).copied().unwrap_or(0)
    }

    /// Handler runs for every event.
    pub fn all_runs(&self) -> u32 {
        self.runs.lock().expect("runs").values().sum()
    }

    /// Failed handler runs for `account`'s credit `seq`.
    pub fn failures(&self, account: &str, seq: i64) -> u32 {
        let failures = self.failures.lock().expect("failures");
        failures
            .get(&effect_key(account, seq))
            .copied()
            .unwrap_or(0)
    }

    /// The handler, recording into this ledger.
    pub fn handler(self: &Arc<Self>) -> LedgerHandler {
        self.handler_of(0)
    }

    /// The handler of consumer number `consumer`, whose decodes are
    /// counted apart ([`Ledger::decodes_by`]).
    pub fn handler_of(self: &Arc<Self>, consumer: usize) -> LedgerHandler {
        LedgerHandler {
            ledger: Arc::clone(self),
            consumer,
        }
    }

    /// Count a run of `key`; returns its attempt number (from 1).
    fn count_run(&self, key: &str) -> u32 {
        let mut runs = self.runs.lock().expect("runs");
        let run = runs.entry(key.to_owned()).or_insert(0);
        *run += 1;
        *run
    }

    fn count_failure(&self, key: &str) {
        *self
            .failures
            .lock()
            .expect("failures")
            .entry(key.to_owned())
            .or_insert(0) += 1;
    }

    /// Whether attempt `attempt` of `credit` fails, asking the database
    /// through `tx` where the rule depends on other effects.
    async fn fails<DB: TestBackend>(
        &self,
        tx: &mut DB::Connection,
        credit: &AccountCredited,
        attempt: u32,
    ) -> Result<bool, sqlx::Error> {
        let rule = self
            .failing
            .lock()
            .expect("failing")
            .get(&effect_key(&credit.account, credit.seq))
            .copied();
        Ok(match rule {
            None => false,
            Some(Failure::Always) => true,
            Some(Failure::UntilOthersApplied { first, effects }) => {
                let sql = format!(
                    "SELECT COUNT(*) FROM effects WHERE account <> '{}'",
                    credit.account
                );
                attempt <= first || DB::fetch_i64(tx, &sql).await? < effects
            }
        })
    }
}

/// The handler over a [`Ledger`].
pub struct LedgerHandler {
    ledger: Arc<Ledger>,
    consumer: usize,
}

impl<DB: InboxBackend + TestBackend> Handler<DB> for LedgerHandler {
    type Event = AccountCredited;

    fn decode(&self, incoming: &IncomingEvent) -> Result<AccountCredited, DecodeError> {
        *self
            .ledger
            .decodes
            .lock()
            .expect("decodes")
            .entry(self.consumer)
            .or_insert(0) += 1;
        let credit = incoming.decode::<AccountCredited>()?;
        *self
            .ledger
            .deliveries
            .lock()
            .expect("deliveries")
            .entry(effect_key(&credit.account, credit.seq))
            .or_insert(0) += 1;
        Ok(credit)
    }

    /// Record the effect, wait at the gate, then use the transaction once
    /// more (which fails when the connection was cut meanwhile), and fail
    /// where the ledger says so.
    async fn handle(
        &self,
        tx: &mut DB::Connection,
        credit: &AccountCredited,
        _delivery: &Delivery<'_>,
    ) -> Result<(), BoxError> {
        {
            let ledger = &self.ledger;
            let key = effect_key(&credit.account, credit.seq);
            let failed = |source| LedgerError {
                credit: key.clone(),
                source,
            };
            let attempt = ledger.count_run(&key);
            let started = ledger.started.fetch_add(1, Ordering::SeqCst);
            let fails = ledger
                .fails::<DB>(&mut *tx, credit, attempt)
                .await
                .map_err(failed)?;
            let insert = format!(
                "INSERT INTO effects (event_id, account, seq, applied) \
                 VALUES ('{key}', '{}', {}, {started})",
                credit.account, credit.seq
            );
            DB::execute(&mut *tx, &insert).await.map_err(failed)?;
            ledger.gate.pass().await;
            DB::execute(&mut *tx, "SELECT 1").await.map_err(failed)?;
            if fails {
                ledger.count_failure(&key);
                return Err(format!("{key} attempt {attempt} fails on purpose").into());
            }
            Ok(())
        }
    }
}
