//! [`test_on_every_backend!`](crate::test_on_every_backend),
//! [`test_on_backends!`](crate::test_on_backends) and
//! [`test_on_backends_for!`](crate::test_on_backends_for): one
//! `#[tokio::test]` per scenario and backend (and type), each on a fresh
//! database.

/// One test per scenario on PostgreSQL, MariaDB and SQLite, each on a
/// fresh [`TestDatabase`](crate::TestDatabase).
///
/// Each scenario is an `async fn` of the calling module, generic over the
/// backend, taking `&TestDatabase<DB>`. The macro writes the modules
/// `postgres`, `mysql` and `sqlite`, each with one multi-threaded
/// `#[tokio::test]` per scenario, so the tests are named
/// `postgres::scenario`, `mysql::scenario`, `sqlite::scenario`. The calling
/// crate needs `tokio` (with `macros` and `rt-multi-thread`).
///
/// Anything else that differs per backend (a store type, a SQL fragment)
/// comes from a trait the test file implements for `sqlx::Postgres`,
/// `sqlx::MySql` and `sqlx::Sqlite`.
///
/// ```ignore
/// async fn enqueue_commits<DB: outbox::Backend + outbox_testkit::TestBackend>(
///     db: &outbox_testkit::TestDatabase<DB>,
/// ) {
///     outbox::migrate(db.pool()).await.expect("migrate");
/// }
///
/// outbox_testkit::test_on_every_backend!(enqueue_commits);
/// ```
#[macro_export]
macro_rules! test_on_every_backend {
    ($($scenario:ident),+ $(,)?) => {
        $crate::test_on_backends!([postgres, mysql, sqlite] $($scenario),+);
    };
}

/// [`test_on_every_backend!`](crate::test_on_every_backend) on the listed
/// backends only (`postgres`, `mysql`, `sqlite`): for scenarios that one
/// backend cannot run, or runs in a test of its own.
///
/// ```ignore
/// outbox_testkit::test_on_backends!([postgres, sqlite] stores_the_span, keeps_the_callers);
/// ```
#[macro_export]
macro_rules! test_on_backends {
    ([$($backend:ident),+ $(,)?] $($scenario:ident),+ $(,)?) => {
        $crate::__scenario_modules!([$($backend),+] [$($scenario),+]);
    };
}

/// The modules of [`test_on_backends!`](crate::test_on_backends), the
/// scenario list passed along whole to each backend's module.
#[doc(hidden)]
#[macro_export]
macro_rules! __scenario_modules {
    ([$($backend:ident),+] $scenarios:tt) => {
        $(
            $crate::__scenario_module!($backend $scenarios);
        )+
    };
}

/// One backend's module of [`test_on_backends!`](crate::test_on_backends).
#[doc(hidden)]
#[macro_export]
macro_rules! __scenario_module {
    ($backend:ident [$($scenario:ident),+]) => {
        mod $backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $scenario() {
                    let db = $crate::$backend().await;
                    super::$scenario(&db).await;
                }
            )+
        }
    };
}

/// [`test_on_backends!`](crate::test_on_backends) for scenarios generic over
/// one more type, such as the broker adapter a suite runs on: one test per
/// listed type, backend and scenario, named `variant::backend::scenario`
/// in the calling module.
///
/// Each scenario is an `async fn` of the calling module, generic over that
/// type first and the backend second, taking `&TestDatabase<DB>`. The types
/// are named by paths that resolve anywhere in the crate (from `crate::`).
///
/// ```ignore
/// outbox_testkit::test_on_backends_for!(
///     [kafka: crate::kafka_side::KafkaSide, rabbitmq: crate::rabbitmq_side::RabbitMqSide]
///     [postgres, mysql, sqlite]
///     triple_delivery_applies_each_event_once,
/// );
/// ```
#[macro_export]
macro_rules! test_on_backends_for {
    ([$($variant:ident : $type:ty),+ $(,)?] $backends:tt $($scenario:ident),+ $(,)?) => {
        $crate::__typed_variant_modules!([$($variant: $type),+] $backends [$($scenario),+]);
    };
}

/// The type modules of [`test_on_backends_for!`](crate::test_on_backends_for),
/// the backend and scenario lists passed along whole to each.
#[doc(hidden)]
#[macro_export]
macro_rules! __typed_variant_modules {
    ([$($variant:ident : $type:ty),+] $backends:tt $scenarios:tt) => {
        $(
            mod $variant {
                $crate::__typed_scenario_modules!($type; $backends $scenarios);
            }
        )+
    };
}

/// The backend modules of one type of
/// [`test_on_backends_for!`](crate::test_on_backends_for).
#[doc(hidden)]
#[macro_export]
macro_rules! __typed_scenario_modules {
    ($type:ty; [$($backend:ident),+ $(,)?] $scenarios:tt) => {
        $(
            $crate::__typed_scenario_module!($type; $backend $scenarios);
        )+
    };
}

/// One backend's module of one type of
/// [`test_on_backends_for!`](crate::test_on_backends_for).
#[doc(hidden)]
#[macro_export]
macro_rules! __typed_scenario_module {
    ($type:ty; $backend:ident [$($scenario:ident),+]) => {
        mod $backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $scenario() {
                    let db = $crate::$backend().await;
                    super::super::$scenario::<$type, _>(&db).await;
                }
            )+
        }
    };
}
