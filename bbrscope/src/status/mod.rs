//! `bbrscope status`: the one feature that looks across the others. It reads congestion control
//! as it stands per scope, what `apply` recorded (and whether the machine still has it), the
//! `experiment` running and what the last `advise` kept; the features themselves stay side by
//! side, none using another.
//!
//! [`gather()`] reads everything (and only reads); [`advice`] keeps `advise`'s findings for it;
//! `diag` counts live connections per algorithm.

pub(crate) mod advice;
mod diag;
mod gather;

pub(crate) use gather::{Namespace, Status, gather};
