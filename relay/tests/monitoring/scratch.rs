//! [`Scratch`]: a test's own temporary directory, removed when dropped.

use std::path::PathBuf;

/// A directory under the system's temporary directory, for one test of
/// this process; removed with everything in it when dropped.
pub struct Scratch {
    directory: PathBuf,
}

impl Scratch {
    /// A fresh directory named after `test`.
    pub fn new(test: &str) -> Self {
        let directory =
            std::env::temp_dir().join(format!("outbox-monitoring-{}-{test}", std::process::id()));
        std::fs::create_dir_all(&directory).expect("create the scratch directory");
        Scratch { directory }
    }

    /// A file `name` holding `contents` in this directory.
    pub fn file(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.directory.join(name);
        std::fs::write(&path, contents).expect("write the scratch file");
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // Best effort: a directory left behind is only untidy.
        let _ = std::fs::remove_dir_all(&self.directory);
    }
}
