//! The library's tests that need no root: any user can run them (`cargo test --test library`),
//! and `make test` runs them as nobody, so that this stays true. What needs root — loading the
//! kernel programs, namespaces, real traffic — is in the black-box tests beside this folder,
//! which run the `bbrscope` binary.
//!
//! - [`dashboard`]: the dashboard rendered from recorded captures;
//! - [`layout`]: the source tree's layers, thin commands and unsafe doors;
//! - [`fuzz`]: parsers of outside input against random and mutated input;
//! - [`btf`]: the BTF reader against pahole, on the running kernel's BTF (world-readable).

mod btf;
mod dashboard;
mod fuzz;
mod layout;
