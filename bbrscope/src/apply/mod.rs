//! The configurator behind `bbrscope apply`, `status` and `revert`: switching congestion
//! control for the system, a network namespace, a cgroup or a route, safely (pre-checks, a
//! recorded way back, rollback on failure), with proof on real sockets.
//!
//! [`transaction`] is one `apply` over all its scopes. [`plan`] only reads; [`run`] changes
//! ([`change`]) and records ([`state`]), one run at a time ([`lock`]) and not to be cut short by
//! Ctrl-C ([`interrupt`]); the other modules each know one part of the system.

pub mod algo;
pub mod cgroup;
pub mod change;
pub mod diag;
pub mod files;
pub mod lock;
pub mod plan;
pub mod qdisc;
pub mod run;
pub mod scope;
pub mod state;
pub mod status;
pub mod sysctl_d;
pub mod transaction;
pub mod verify;

#[cfg(test)]
mod testroot;
