//! Building object-store endpoints from URLs.
//!
//! | URL | backend |
//! |---|---|
//! | `file:///abs/dir`, `file://./rel/dir`, or a plain path | a local folder; every put fsyncs the file and its directory before returning |
//! | `memory://` | in memory (tests) |
//! | `s3://bucket[/prefix]?endpoint=…&region=…&path_style=true&…` | S3, MinIO or any S3-compatible server; the bucket is created if missing |
//! | `hdfs://namenode:port[/dir]` | HDFS, with the `hdfs` cargo feature |
//!
//! An endpoint is named `id=URL` in a pool of several; a lone endpoint may
//! omit the id and is called `default`.

use std::path::PathBuf;
use std::sync::Arc;
#[cfg(feature = "s3")]
use std::time::Duration;

use object_store::ObjectStore;

use crate::error::{Result, StorageError};
use crate::ids::EndpointId;
use crate::pool::{PoolOptions, StoreKind, StorePool};

/// Settings of an S3 endpoint. Credentials and region fall back to the usual
/// `AWS_*` environment variables.
#[derive(Clone, PartialEq, Eq)]
pub struct S3Spec {
    pub bucket: String,
    pub prefix: Option<String>,
    pub endpoint: Option<String>,
    pub region: String,
    pub path_style: bool,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    pub session_token: Option<String>,
    pub create_bucket: bool,
}

impl std::fmt::Debug for S3Spec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Spec")
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("path_style", &self.path_style)
            .field("access_key_id", &self.access_key_id)
            .field(
                "secret_access_key",
                &self.secret_access_key.as_ref().map(|_| "***"),
            )
            .field("session_token", &self.session_token.as_ref().map(|_| "***"))
            .field("create_bucket", &self.create_bucket)
            .finish()
    }
}

/// What kind of store an endpoint is, parsed from its URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendSpec {
    Local { root: PathBuf },
    Memory,
    S3(S3Spec),
    Hdfs { url: String },
}

fn parse_bool(key: &str, v: &str) -> Result<bool> {
    match v {
        "true" | "1" | "yes" => Ok(true),
        "false" | "0" | "no" => Ok(false),
        _ => Err(StorageError::config(format!(
            "{key} must be true or false, not {v:?}"
        ))),
    }
}

impl BackendSpec {
    /// Parses a store URL (see the module docs).
    pub fn parse(url: &str) -> Result<Self> {
        let url = url.trim();
        if url.is_empty() {
            return Err(StorageError::config("empty store URL"));
        }
        if let Some(rest) = url.strip_prefix("file://") {
            if rest.is_empty() {
                return Err(StorageError::config("file:// URL needs a path"));
            }
            return Ok(BackendSpec::Local {
                root: PathBuf::from(rest),
            });
        }
        if url == "memory://" || url.starts_with("memory://") {
            return Ok(BackendSpec::Memory);
        }
        if url.starts_with("hdfs://") || url.starts_with("viewfs://") {
            return Ok(BackendSpec::Hdfs {
                url: url.to_string(),
            });
        }
        if url.starts_with("s3://") || url.starts_with("s3a://") {
            return Self::parse_s3(url);
        }
        if url.contains("://") {
            return Err(StorageError::config(format!(
                "unknown store URL scheme in {url:?} (use file://, s3://, memory:// or hdfs://)"
            )));
        }
        Ok(BackendSpec::Local {
            root: PathBuf::from(url),
        })
    }

    fn parse_s3(raw: &str) -> Result<Self> {
        let url = url::Url::parse(raw)
            .map_err(|e| StorageError::config(format!("bad S3 URL {raw:?}: {e}")))?;
        let bucket = url
            .host_str()
            .filter(|b| !b.is_empty())
            .ok_or_else(|| StorageError::config(format!("S3 URL {raw:?} has no bucket")))?
            .to_string();
        let prefix = Some(url.path().trim_matches('/').to_string()).filter(|p| !p.is_empty());
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let mut spec = S3Spec {
            bucket,
            prefix,
            endpoint: env("AWS_ENDPOINT_URL"),
            region: env("AWS_REGION")
                .or_else(|| env("AWS_DEFAULT_REGION"))
                .unwrap_or_else(|| "us-east-1".to_string()),
            path_style: false,
            access_key_id: env("AWS_ACCESS_KEY_ID"),
            secret_access_key: env("AWS_SECRET_ACCESS_KEY"),
            session_token: env("AWS_SESSION_TOKEN"),
            create_bucket: true,
        };
        for (k, v) in url.query_pairs() {
            let v = v.to_string();
            match k.as_ref() {
                "endpoint" => spec.endpoint = Some(v),
                "region" => spec.region = v,
                "path_style" => spec.path_style = parse_bool("path_style", &v)?,
                "access_key_id" => spec.access_key_id = Some(v),
                "secret_access_key" => spec.secret_access_key = Some(v),
                "session_token" => spec.session_token = Some(v),
                "create_bucket" => spec.create_bucket = parse_bool("create_bucket", &v)?,
                other => {
                    return Err(StorageError::config(format!(
                        "unknown S3 option {other:?} (known: endpoint, region, path_style, \
                         access_key_id, secret_access_key, session_token, create_bucket)"
                    )));
                }
            }
        }
        if spec.access_key_id.is_some() != spec.secret_access_key.is_some() {
            return Err(StorageError::config(
                "S3 access_key_id and secret_access_key go together",
            ));
        }
        Ok(BackendSpec::S3(spec))
    }

    /// What kind of store this is.
    pub fn kind(&self) -> StoreKind {
        match self {
            BackendSpec::Local { .. } => StoreKind::Local,
            BackendSpec::Memory => StoreKind::Memory,
            BackendSpec::S3(_) => StoreKind::S3,
            BackendSpec::Hdfs { .. } => StoreKind::Hdfs,
        }
    }

    /// Builds the store. For S3 this creates the bucket if it is missing.
    pub async fn open(&self, opts: &PoolOptions) -> Result<Arc<dyn ObjectStore>> {
        match self {
            BackendSpec::Memory => Ok(Arc::new(object_store::memory::InMemory::new())),
            BackendSpec::Local { root } => open_local(root, opts.direct_io),
            BackendSpec::S3(spec) => open_s3(spec, opts).await,
            BackendSpec::Hdfs { url } => open_hdfs(url),
        }
    }
}

/// A local folder. `object_store`'s `LocalFileSystem` with fsync on: a put
/// returns only after the file and its parent directories are on disk. With
/// `direct_io`, large puts and reads go around the page cache
/// ([`crate::direct`]).
fn open_local(root: &std::path::Path, direct_io: bool) -> Result<Arc<dyn ObjectStore>> {
    std::fs::create_dir_all(root).map_err(|e| {
        StorageError::with_source(
            crate::ErrorKind::Config,
            format!("cannot create store folder {}", root.display()),
            e,
        )
    })?;
    let fs = object_store::local::LocalFileSystem::new_with_prefix(root)
        .map_err(|e| StorageError::from_object_store(format!("open {}", root.display()), e))?
        .with_fsync(true)
        .with_automatic_cleanup(true);
    Ok(Arc::new(crate::local::LocalStore::new(fs, direct_io)))
}

#[cfg(feature = "hdfs")]
fn open_hdfs(url: &str) -> Result<Arc<dyn ObjectStore>> {
    let store = hdfs_native_object_store::HdfsObjectStoreBuilder::new()
        .with_url(url)
        .build()
        .map_err(|e| StorageError::from_object_store(format!("open {url}"), e))?;
    Ok(Arc::new(store))
}

#[cfg(not(feature = "hdfs"))]
fn open_hdfs(url: &str) -> Result<Arc<dyn ObjectStore>> {
    Err(StorageError::config(format!(
        "{url}: this build of Floe has no HDFS support (rebuild with --features hdfs)"
    )))
}

#[cfg(feature = "s3")]
async fn open_s3(spec: &S3Spec, opts: &PoolOptions) -> Result<Arc<dyn ObjectStore>> {
    use object_store::aws::AmazonS3Builder;
    use object_store::{BackoffConfig, ClientOptions, RetryConfig};

    let allow_http = spec
        .endpoint
        .as_deref()
        .is_some_and(|e| e.starts_with("http://"));
    // The pool does its own failover, so object_store retries little and
    // never longer than one attempt's deadline.
    let request_timeout = opts.write_timeout.max(opts.read_timeout);
    let client = ClientOptions::new()
        .with_allow_http(allow_http)
        .with_timeout(request_timeout)
        .with_connect_timeout(Duration::from_secs(2).min(request_timeout));
    let retry = RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(20),
            max_backoff: Duration::from_millis(500),
            base: 2.0,
        },
        max_retries: 1,
        retry_timeout: request_timeout,
    };
    let mut b = AmazonS3Builder::new()
        .with_bucket_name(&spec.bucket)
        .with_region(&spec.region)
        .with_virtual_hosted_style_request(!spec.path_style)
        .with_allow_http(allow_http)
        .with_client_options(client)
        .with_retry(retry);
    if let Some(ep) = &spec.endpoint {
        b = b.with_endpoint(ep);
    }
    match (&spec.access_key_id, &spec.secret_access_key) {
        (Some(k), Some(s)) => {
            b = b.with_access_key_id(k).with_secret_access_key(s);
            if let Some(t) = &spec.session_token {
                b = b.with_token(t);
            }
        }
        _ => b = b.with_skip_signature(true),
    }
    let store = b.build().map_err(|e| {
        StorageError::from_object_store(format!("configure s3://{}", spec.bucket), e)
    })?;
    if spec.create_bucket {
        ensure_bucket(spec, request_timeout).await?;
    }
    let store: Arc<dyn ObjectStore> = Arc::new(store);
    Ok(match &spec.prefix {
        Some(p) => Arc::new(object_store::prefix::PrefixStore::new(store, p.as_str())),
        None => store,
    })
}

#[cfg(not(feature = "s3"))]
async fn open_s3(spec: &S3Spec, _opts: &PoolOptions) -> Result<Arc<dyn ObjectStore>> {
    Err(StorageError::config(format!(
        "s3://{}: this build of Floe has no S3 support (rebuild with the s3 feature)",
        spec.bucket
    )))
}

/// Creates the bucket with the AWS SDK unless it exists.
#[cfg(feature = "s3")]
async fn ensure_bucket(spec: &S3Spec, timeout: Duration) -> Result<()> {
    use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region, timeout::TimeoutConfig};
    use aws_sdk_s3::types::{BucketLocationConstraint, CreateBucketConfiguration};

    let (Some(key), Some(secret)) = (&spec.access_key_id, &spec.secret_access_key) else {
        tracing::info!(bucket = %spec.bucket, "no S3 credentials; not checking that the bucket exists");
        return Ok(());
    };
    let creds = Credentials::new(key, secret, spec.session_token.clone(), None, "floe");
    let mut conf = aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(spec.region.clone()))
        .credentials_provider(creds)
        .force_path_style(spec.path_style)
        .timeout_config(TimeoutConfig::builder().operation_timeout(timeout).build());
    if let Some(ep) = &spec.endpoint {
        conf = conf.endpoint_url(ep);
    }
    let client = aws_sdk_s3::Client::from_conf(conf.build());
    let bucket = spec.bucket.as_str();
    let unavailable = |what: &str, e: String| {
        StorageError::new(
            crate::ErrorKind::Unavailable,
            format!("{what} bucket {bucket}: {e}"),
        )
    };
    match client.head_bucket().bucket(bucket).send().await {
        Ok(_) => return Ok(()),
        Err(e) => {
            let not_found = e.as_service_error().is_some_and(|s| s.is_not_found());
            if !not_found {
                return Err(unavailable(
                    "check",
                    format!("{}", aws_sdk_s3::error::DisplayErrorContext(&e)),
                ));
            }
        }
    }
    let mut req = client.create_bucket().bucket(bucket);
    if spec.region != "us-east-1" {
        req = req.create_bucket_configuration(
            CreateBucketConfiguration::builder()
                .location_constraint(BucketLocationConstraint::from(spec.region.as_str()))
                .build(),
        );
    }
    match req.send().await {
        Ok(_) => {
            tracing::info!(bucket, "created bucket");
            Ok(())
        }
        Err(e) => {
            let owned = e.as_service_error().is_some_and(|s| {
                s.is_bucket_already_owned_by_you() || s.is_bucket_already_exists()
            });
            if owned {
                Ok(())
            } else {
                Err(unavailable(
                    "create",
                    format!("{}", aws_sdk_s3::error::DisplayErrorContext(&e)),
                ))
            }
        }
    }
}

/// One endpoint of a pool: its stable id and where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointConfig {
    pub id: EndpointId,
    pub spec: BackendSpec,
}

impl EndpointConfig {
    /// Parses a list of `id=URL` (or one bare URL) into endpoint configs.
    pub fn parse_list<S: AsRef<str>>(items: &[S]) -> Result<Vec<Self>> {
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            let item = item.as_ref().trim();
            let (id, url) = match item.split_once('=') {
                Some((id, url))
                    if !id.contains("://")
                        && !id.is_empty()
                        && id
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') =>
                {
                    (id.to_string(), url)
                }
                _ if items.len() == 1 => ("default".to_string(), item),
                _ => {
                    return Err(StorageError::config(format!(
                        "with several endpoints each needs an id: write id=URL, not {item:?}"
                    )));
                }
            };
            out.push(EndpointConfig {
                id: EndpointId::new(id),
                spec: BackendSpec::parse(url)?,
            });
        }
        Ok(out)
    }
}

impl StorePool {
    /// Opens every endpoint and builds the pool.
    pub async fn open(endpoints: &[EndpointConfig], opts: PoolOptions) -> Result<StorePool> {
        opts.validate()?;
        let mut stores = Vec::with_capacity(endpoints.len());
        for ep in endpoints {
            stores.push((ep.id.clone(), ep.spec.open(&opts).await?));
        }
        let mut pool = StorePool::new(stores, opts)?;
        for ep in endpoints {
            let root = match &ep.spec {
                BackendSpec::Local { root } => Some(root.clone()),
                _ => None,
            };
            pool.set_kind(&ep.id, ep.spec.kind(), root);
        }
        Ok(pool)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_scheme() {
        assert_eq!(
            BackendSpec::parse("file:///tmp/x").unwrap(),
            BackendSpec::Local {
                root: "/tmp/x".into()
            }
        );
        assert_eq!(
            BackendSpec::parse("./floe-data").unwrap(),
            BackendSpec::Local {
                root: "./floe-data".into()
            }
        );
        assert_eq!(
            BackendSpec::parse("memory://").unwrap(),
            BackendSpec::Memory
        );
        let BackendSpec::S3(s3) = BackendSpec::parse(
            "s3://bkt/some/prefix/?endpoint=http://127.0.0.1:9000&region=eu-west-1&path_style=true&access_key_id=a&secret_access_key=b",
        )
        .unwrap() else {
            panic!("not s3")
        };
        assert_eq!(s3.bucket, "bkt");
        assert_eq!(s3.prefix.as_deref(), Some("some/prefix"));
        assert_eq!(s3.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
        assert_eq!(s3.region, "eu-west-1");
        assert!(s3.path_style);
        assert!(!format!("{s3:?}").contains("Some(\"b\")"));
        assert!(format!("{s3:?}").contains("***"));
    }

    #[test]
    fn rejects_bad_urls_with_clear_errors() {
        for bad in [
            "",
            "ftp://x",
            "s3://",
            "s3://b?bogus=1",
            "s3://b?path_style=maybe",
            "s3://b?access_key_id=only",
            "file://",
        ] {
            let err = BackendSpec::parse(bad).unwrap_err();
            assert_eq!(err.kind(), crate::ErrorKind::Config, "{bad}: {err}");
        }
    }

    #[test]
    fn several_endpoints_need_ids() {
        let ok = EndpointConfig::parse_list(&["a=memory://", "b=file:///tmp/y"]).unwrap();
        assert_eq!(ok[0].id.as_str(), "a");
        assert_eq!(ok[1].id.as_str(), "b");
        let single = EndpointConfig::parse_list(&["memory://"]).unwrap();
        assert_eq!(single[0].id.as_str(), "default");
        assert!(EndpointConfig::parse_list(&["memory://", "file:///tmp/z"]).is_err());
    }
}
