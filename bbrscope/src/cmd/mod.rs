//! One module per subcommand.

pub mod advise;
pub mod apply;
pub mod demo;
pub mod docs;
pub mod experiment;
pub mod export;
pub mod replay;
pub mod revert;
pub mod status;
pub mod stream;
pub mod top;
