//! Floe's version, and which versions may work together during a rolling
//! upgrade (docs/upgrading.md, "What a version promises"): the roles that
//! register with the metadata service (brokers, proxies) say their version,
//! and the metadata node refuses one that the policy does not allow beside
//! its own.

use std::fmt;
use std::str::FromStr;

/// This build's version: `[workspace.package] version` of the top-level
/// `Cargo.toml`, which every crate takes.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// A semantic version, `X.Y.Z` or `X.Y.Z-PRE` (build metadata after `+` is
/// kept out of comparisons, as semver says).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    pub major: u64,
    pub minor: u64,
    pub patch: u64,
    pub pre: Option<String>,
}

/// A version string that is not `X.Y.Z[-PRE][+BUILD]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidVersion(pub String);

impl fmt::Display for InvalidVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} is not a version (X.Y.Z)", self.0)
    }
}

impl std::error::Error for InvalidVersion {}

impl FromStr for Version {
    type Err = InvalidVersion;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || InvalidVersion(s.chars().take(64).collect());
        let core = s.split_once('+').map_or(s, |(c, _)| c);
        let (core, pre) = match core.split_once('-') {
            Some((c, p)) if !p.is_empty() => (c, Some(p.to_string())),
            Some(_) => return Err(bad()),
            None => (core, None),
        };
        let mut parts = core.split('.');
        let mut number = || -> Result<u64, InvalidVersion> {
            let p = parts.next().ok_or_else(bad)?;
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            p.parse().map_err(|_| bad())
        };
        let v = Version {
            major: number()?,
            minor: number()?,
            patch: number()?,
            pre,
        };
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(v)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)?;
        if let Some(p) = &self.pre {
            write!(f, "-{p}")?;
        }
        Ok(())
    }
}

impl Version {
    /// This build's version.
    pub fn current() -> Version {
        // VERSION comes from Cargo, which only takes semantic versions; a
        // test below parses it.
        VERSION.parse().unwrap_or(Version {
            major: 0,
            minor: 0,
            patch: 0,
            pre: None,
        })
    }
}

/// Why a node of version `node` may not work with metadata nodes of
/// version `metadata`, or `None` when it may. The policy of
/// docs/upgrading.md: the metadata nodes are upgraded first, one minor
/// version at a time, and a major version is not crossed in a rolling
/// upgrade. So a node of the same major version is accepted when it is
/// at the metadata's minor version or one below it (patch versions and
/// pre-releases do not matter); a newer minor version means the metadata
/// nodes were not upgraded first, and an older one by two or more was
/// left behind by an earlier upgrade.
pub fn incompatibility(node: &Version, metadata: &Version) -> Option<String> {
    if node.major != metadata.major {
        return Some(format!(
            "version {node} cannot join metadata nodes of version {metadata}: a rolling upgrade \
             does not cross a major version (the CHANGELOG says how to upgrade)"
        ));
    }
    if node.minor > metadata.minor {
        return Some(format!(
            "version {node} is newer than the metadata nodes ({metadata}): upgrade the metadata \
             nodes first (docs/upgrading.md, \"Upgrade order\")"
        ));
    }
    if metadata.minor - node.minor > 1 {
        return Some(format!(
            "version {node} is more than one minor version behind the metadata nodes \
             ({metadata}): upgrade it to {}.{} or later",
            metadata.major,
            metadata.minor - 1
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        s.parse().unwrap()
    }

    #[test]
    fn versions_parse_as_semver_says() {
        assert_eq!(
            v("1.22.3"),
            Version {
                major: 1,
                minor: 22,
                patch: 3,
                pre: None
            }
        );
        assert_eq!(v("1.2.0-rc.1").pre.as_deref(), Some("rc.1"));
        assert_eq!(v("1.2.0+build.5"), v("1.2.0"));
        assert_eq!(v("1.2.0-rc.1").to_string(), "1.2.0-rc.1");
        for bad in [
            "",
            "1",
            "1.2",
            "1.2.3.4",
            "1..3",
            "a.b.c",
            "1.2.3-",
            "-1.2.3",
            "1.2.x",
            " 1.2.3",
            "99999999999999999999.0.0",
        ] {
            assert!(bad.parse::<Version>().is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn this_builds_version_parses() {
        assert_eq!(Version::current().to_string(), VERSION);
    }

    #[test]
    fn nodes_may_lag_the_metadata_by_one_minor_version_and_never_lead_it() {
        let meta = v("0.5.2");
        for ok in ["0.5.0", "0.5.9", "0.5.2-rc.1", "0.4.0", "0.4.7"] {
            assert_eq!(incompatibility(&v(ok), &meta), None, "{ok}");
        }
        let newer = incompatibility(&v("0.6.0"), &meta).unwrap();
        assert!(
            newer.contains("upgrade the metadata nodes first"),
            "{newer}"
        );
        let older = incompatibility(&v("0.3.9"), &meta).unwrap();
        assert!(older.contains("upgrade it to 0.4 or later"), "{older}");
        let major = incompatibility(&v("1.5.2"), &meta).unwrap();
        assert!(major.contains("major version"), "{major}");
        assert!(incompatibility(&v("0.5.2"), &v("1.0.0")).is_some());
    }
}
