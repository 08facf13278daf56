//! The compiler's messages for the mistakes a new user makes: each case under `tests/ui`
//! must fail to compile with the message in its `.stderr` file, which says what to derive
//! or implement. Regenerate the expected messages with `TRYBUILD=overwrite` after changing
//! a diagnostic, and read the diff.

#[test]
fn diagnostics_say_what_to_derive_or_implement() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/*.rs");
}
