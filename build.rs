//! Rebuild when a migration changes: `sqlx::migrate!` embeds the files of
//! `migrations/` at compile time, and Cargo does not watch them otherwise.

fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
