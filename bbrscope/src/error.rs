//! The one error type with a meaning of its own: the invocation cannot work as given (bad value,
//! missing privilege or kernel feature). `main` prints it on one line and exits with status 2;
//! every other error is a runtime failure (status 1).

use std::fmt;

#[derive(Debug)]
pub struct UsageError(String);

impl UsageError {
    pub(crate) fn new(msg: impl Into<String>) -> Self {
        UsageError(msg.into())
    }
}

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// A finished command whose outcome has an exit status of its own (already reported on stdout):
/// e.g. an experiment stopped by its guardrail (3), or one whose service set its own algorithm (2).
#[derive(Debug)]
pub struct Exit(pub u8);

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "exit status {}", self.0)
    }
}

impl std::error::Error for Exit {}

/// Shorthand for returning a [`UsageError`] from a function returning `anyhow::Result`.
macro_rules! usage {
    ($($arg:tt)*) => {
        return Err($crate::error::UsageError::new(format!($($arg)*)).into())
    };
}
pub(crate) use usage;

/// A clap error as one line, keeping what matters: the message, the argument it names on the
/// following line(s), and clap's tip ("a similar argument exists: '--port'"); the usage block
/// and the pointer to --help are dropped (main adds its own).
pub fn one_line(rendered: &str) -> String {
    let mut parts: Vec<String> = Vec::new();
    for line in rendered.lines() {
        let t = line.trim();
        if t.starts_with("Usage:") || t.starts_with("For more information") {
            break;
        }
        if t.is_empty() {
            continue;
        }
        let t = t.strip_prefix("error: ").unwrap_or(t);
        match parts.last_mut() {
            // "...were not provided:" followed by the argument names.
            Some(prev) if prev.ends_with(':') => {
                prev.push(' ');
                prev.push_str(t);
            }
            _ => parts.push(t.to_string()),
        }
    }
    if parts.is_empty() { "invalid arguments".to_string() } else { parts.join("; ") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clap_errors_keep_the_argument_and_the_tip() {
        let missing = "error: the following required arguments were not provided:\n  <ALGORITHM>\n\nUsage: bbrscope apply <ALGORITHM>\n\nFor more information, try '--help'.\n";
        assert_eq!(one_line(missing), "the following required arguments were not provided: <ALGORITHM>");
        let typo = "error: unexpected argument '--prot' found\n\n  tip: a similar argument exists: '--port'\n\nUsage: bbrscope stream --port <PORT>\n";
        assert_eq!(one_line(typo), "unexpected argument '--prot' found; tip: a similar argument exists: '--port'");
        let value = "error: invalid value 'x' for '--speed <SPEED>': 'x' is not a speed\n\nFor more information, try '--help'.\n";
        assert_eq!(one_line(value), "invalid value 'x' for '--speed <SPEED>': 'x' is not a speed");
    }
}
