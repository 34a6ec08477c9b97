//! The unit tests of a bench without a test harness: `cargo test` runs
//! the bench's binary without `--bench`, and it runs its own tests.

/// Run `tests` (each a name and its function) of the bench `bench`,
/// printing each one as it passes; a failure panics.
pub fn run<'a>(bench: &str, tests: impl IntoIterator<Item = &'a (&'a str, fn())>) {
    let mut passed = 0;
    for (name, test) in tests {
        test();
        println!("test {name} ... ok");
        passed += 1;
    }
    println!("{bench}: {passed} unit tests passed; `cargo bench` runs the benchmark");
}
