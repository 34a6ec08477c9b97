//! A bench's command line: the value after a flag (`--events 5000`).

/// The value after `flag` on the command line, when there is one.
pub fn flag_value(flag: &str) -> Option<String> {
    let mut args = std::env::args().skip(1);
    args.position(|arg| arg == flag)?;
    args.next()
}
