use outbox::{Event, EventType};
use serde::Serialize;

#[derive(Serialize, Event)]
#[event(
    type = "user.renamed",
    version = 4,
    aggregate = "user",
    topic = "users",
    source = "/users"
)]
struct UserRenamed(String, #[event(aggregate_id)] u64);

fn main() {
    assert_eq!(UserRenamed::EVENT_TYPE, "user.renamed");
    assert_eq!(UserRenamed::EVENT_VERSION, 4);
    assert_eq!(UserRenamed::AGGREGATE_TYPE, "user");
    assert_eq!(UserRenamed::TOPIC, "users");
    assert_eq!(UserRenamed::SOURCE, "/users");

    let event = UserRenamed("Ada".to_owned(), 42);
    assert_eq!(event.aggregate_id(), "42");
    assert_eq!(event.payload().unwrap().get(), r#"["Ada",42]"#);
}
