//! A temporary directory standing in for / in tests of the file logic.

use std::path::Path;

pub(super) struct TempRoot(tempfile::TempDir);

impl TempRoot {
    pub(super) fn new() -> Self {
        TempRoot(tempfile::Builder::new().prefix("bbrscope-root-").tempdir().expect("temporary directory"))
    }

    pub(super) fn path(&self) -> &Path {
        self.0.path()
    }

    pub(super) fn write(&self, rel: &str, text: &str) {
        let p = self.0.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
}
