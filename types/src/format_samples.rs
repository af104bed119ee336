//! Sample files of Floe's persisted and wire formats, for tests: one
//! directory per release under `tests/formats/<version>/` at the top of the
//! repository (docs/upgrading.md). Each release's samples must still read,
//! with the same contents, in every later version; and this version writes
//! exactly its own samples, so a format cannot change by accident. The
//! samples of a released version are never rewritten: bump the workspace
//! version to the next release's before a format changes, then bless.
//!
//! `FLOE_BLESS_FORMATS=1` writes this version's samples.

use std::path::{Path, PathBuf};

/// The samples' root, from a crate's `CARGO_MANIFEST_DIR` (every crate sits
/// one level below the repository's top).
pub fn root(manifest_dir: &str) -> PathBuf {
    Path::new(manifest_dir).join("../tests/formats")
}

/// Every release that has samples under `root`, oldest first (by name).
pub fn releases(root: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(root)
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.path().is_dir())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Checks `written`, this version's (`version`) bytes of sample `name`,
/// against the sample of this version under `root`, writing it first when
/// `FLOE_BLESS_FORMATS` is set; then hands every release's sample of that
/// name to `read`, with the release's name. Panics (a test's failure) on
/// any difference.
pub fn check(root: &Path, version: &str, name: &str, written: &[u8], read: impl Fn(&str, Vec<u8>)) {
    let mine = root.join(version).join(name);
    if std::env::var_os("FLOE_BLESS_FORMATS").is_some() {
        if let Some(dir) = mine.parent() {
            std::fs::create_dir_all(dir).expect("the samples' directory");
        }
        std::fs::write(&mine, written).expect("a sample written");
    }
    let sample = std::fs::read(&mine).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (no sample of this version, {version}: FLOE_BLESS_FORMATS=1 writes it)",
            mine.display()
        )
    });
    assert!(
        sample == written,
        "{name}: this version writes other bytes than its sample ({} vs {} bytes). A format \
         changed: give it a new version, keep the old one readable, and bless the samples of \
         the next release (docs/upgrading.md)",
        written.len(),
        sample.len()
    );
    for release in releases(root) {
        if let Ok(bytes) = std::fs::read(root.join(&release).join(name)) {
            read(&release, bytes);
        }
    }
}
