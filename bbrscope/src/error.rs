//! The one error type with a meaning of its own: the invocation cannot work as given (bad value,
//! missing privilege or kernel feature). `main` prints it on one line and exits with status 2;
//! every other error is a runtime failure (status 1).

use std::fmt;

#[derive(Debug)]
pub struct UsageError(String);

impl UsageError {
    pub fn new(msg: impl Into<String>) -> Self {
        UsageError(msg.into())
    }
}

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Shorthand for returning a [`UsageError`] from a function returning `anyhow::Result`.
macro_rules! usage {
    ($($arg:tt)*) => {
        return Err($crate::error::UsageError::new(format!($($arg)*)).into())
    };
}
pub(crate) use usage;
