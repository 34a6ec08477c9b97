//! Compile-time tests of `#[derive(Event)]`: what it accepts (`tests/ui/pass`)
//! and the errors it reports (`tests/ui/fail`, with the expected `.stderr`).
//!
//! Regenerate the expected output with `TRYBUILD=overwrite cargo test --test derive_ui`,
//! then review every changed `.stderr`.

#[test]
fn derive_ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}
