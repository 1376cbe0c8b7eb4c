//! Where decoded events go: newline-delimited JSON (`stream`), the dashboard (`top`).

pub(crate) mod json;
pub(crate) mod queued;
