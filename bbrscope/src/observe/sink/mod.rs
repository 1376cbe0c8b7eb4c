//! Where decoded events go: newline-delimited JSON (`stream`), the dashboard (`top`).

pub mod json;
pub mod queued;
