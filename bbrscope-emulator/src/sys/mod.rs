//! The emulator's door to the OS: the calls rustix does not cover safely, each `unsafe` with its
//! SAFETY note (as bbrscope/src/sys/ is the product's).

pub(crate) mod thread;
pub(crate) mod tun;
