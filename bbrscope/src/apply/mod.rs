//! The configurator behind `bbrscope apply` and `revert`: switching congestion control for the
//! system, a network namespace, a cgroup or a route, safely (pre-checks, a recorded way back,
//! rollback on failure), with proof on real sockets. (`status` reads its record from outside.)
//!
//! [`transaction`] is one `apply` over all its scopes, [`revert`] one `revert` over the recorded
//! scopes it names. [`plan`] only reads, through [`machine`] (which unit tests fake); [`run`] changes
//! ([`change`]) and records ([`state`]), one run at a time ([`lock`]) and not to be cut short by
//! Ctrl-C ([`interrupt`]); the other modules each know one part of the system.

pub mod algo;
pub mod cgroup;
pub(crate) mod change;
pub(crate) mod files;
pub(crate) mod lock;
pub(crate) mod machine;
pub(crate) mod plan;
pub(crate) mod revert;
pub(crate) mod run;
pub(crate) mod scope;
pub(crate) mod state;
pub mod sysctl_d;
pub(crate) mod transaction;
pub(crate) mod verify;

#[cfg(test)]
mod testroot;
