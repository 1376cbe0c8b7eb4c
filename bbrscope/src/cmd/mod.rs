//! One module per subcommand.

pub mod stream;
