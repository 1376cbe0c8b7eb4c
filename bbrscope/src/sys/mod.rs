//! Facts about the running system that several commands need.

pub mod bpf;
pub mod cc;
pub mod cgroup;
pub mod hz;
pub mod kconfig;
pub mod name;
pub mod netlink;
pub mod netns;
pub mod privileges;
pub mod procfd;
pub mod route;
pub mod signal;
pub mod sockdiag;
pub mod start;
pub mod thread;
pub mod tun;
pub use bbrscope_common::sockopt;
pub mod sysctl;
