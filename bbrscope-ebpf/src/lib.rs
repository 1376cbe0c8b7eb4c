#![no_std]
// Cargo needs a library target here so that bbrscope can name this crate as a build dependency
// (to rebuild when the kernel programs change); the programs themselves are in main.rs.
