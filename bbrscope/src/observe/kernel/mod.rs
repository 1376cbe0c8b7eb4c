//! Everything that touches the kernel's BPF side: reading its layout (BTF), loading and attaching
//! bbrscope's programs, reading their ring buffer and counters.

pub(crate) mod bbr_version;
pub mod btf;
pub mod existing;
pub(crate) mod hooks;
pub mod layout;
pub mod loader;
pub(crate) mod log;
