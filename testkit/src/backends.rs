//! [`test_on_every_backend!`](crate::test_on_every_backend) and
//! [`test_on_backends!`](crate::test_on_backends): one `#[tokio::test]`
//! per scenario and backend, each on a fresh database.

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
