//! Facts about the running system that several commands need.

pub(crate) mod bpf;
pub(crate) mod cc;
pub mod cgroup;
pub(crate) mod experiment_lock;
pub(crate) mod hz;
pub(crate) mod kconfig;
pub(crate) mod name;
pub(crate) mod netlink;
pub(crate) mod netns;
pub(crate) mod privileges;
pub(crate) mod procfd;
pub mod qdisc;
pub(crate) mod route;
pub(crate) mod signal;
pub(crate) mod sockdiag;
pub mod start;
pub use bbrscope_common::sockopt;
pub(crate) mod sysctl;
