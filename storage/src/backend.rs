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
    /// Unsigned requests (a public bucket): only when asked for with
    /// `skip_signature=true`, never for want of credentials.
    pub skip_signature: bool,
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
            .field("skip_signature", &self.skip_signature)
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
                "unknown store URL scheme in {:?} (use file://, s3://, memory:// or hdfs://)",
                redact_url(url)
            )));
        }
        Ok(BackendSpec::Local {
            root: PathBuf::from(url),
        })
    }

    fn parse_s3(raw: &str) -> Result<Self> {
        let url = url::Url::parse(raw)
            .map_err(|e| StorageError::config(format!("bad S3 URL {:?}: {e}", redact_url(raw))))?;
        let bucket = url
            .host_str()
            .filter(|b| !b.is_empty())
            .ok_or_else(|| {
                StorageError::config(format!("S3 URL {:?} has no bucket", redact_url(raw)))
            })?
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
            skip_signature: false,
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
                "skip_signature" => spec.skip_signature = parse_bool("skip_signature", &v)?,
                other => {
                    return Err(StorageError::config(format!(
                        "unknown S3 option {other:?} (known: endpoint, region, path_style, \
                         access_key_id, secret_access_key, session_token, create_bucket, \
                         skip_signature)"
                    )));
                }
            }
        }
        if spec.access_key_id.is_some() != spec.secret_access_key.is_some() {
            return Err(StorageError::config(
                "S3 access_key_id and secret_access_key go together",
            ));
        }
        if spec.access_key_id.is_none() && !spec.skip_signature {
            // The shared credentials file, as every AWS SDK reads it.
            if let Some(p) = profile_credentials(&env)? {
                spec.access_key_id = Some(p.0);
                spec.secret_access_key = Some(p.1);
                spec.session_token = p.2;
            }
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

    /// The URI other programs (query engines, Iceberg readers) name this
    /// endpoint's objects under, with a trailing slash: `file:///abs/dir/`,
    /// `s3://bucket/prefix/`, `hdfs://…/`, `memory://`. A local folder's
    /// path is made absolute (it exists once the endpoint is open).
    pub fn base_uri(&self) -> String {
        match self {
            BackendSpec::Local { root } => {
                let abs = std::fs::canonicalize(root).unwrap_or_else(|_| root.clone());
                format!(
                    "file://{}/",
                    abs.display().to_string().trim_end_matches('/')
                )
            }
            BackendSpec::Memory => "memory://".to_string(),
            BackendSpec::S3(s) => match &s.prefix {
                Some(p) => format!("s3://{}/{p}/", s.bucket),
                None => format!("s3://{}/", s.bucket),
            },
            BackendSpec::Hdfs { url } => format!("{}/", url.trim_end_matches('/')),
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

/// A store URL with the values of its secret options (`secret_access_key`,
/// `session_token`) and any user info replaced by `***`, for messages.
pub fn redact_url(url: &str) -> String {
    let (head, query) = match url.split_once('?') {
        Some((h, q)) => (h, Some(q)),
        None => (url, None),
    };
    let head = match head.split_once("://") {
        Some((scheme, rest)) => match rest.split_once('@') {
            Some((_, host)) => format!("{scheme}://***@{host}"),
            None => head.to_string(),
        },
        None => head.to_string(),
    };
    let Some(query) = query else { return head };
    let pairs: Vec<String> = query
        .split('&')
        .map(|p| match p.split_once('=') {
            Some((k, _)) if k == "secret_access_key" || k == "session_token" => format!("{k}=***"),
            _ => p.to_string(),
        })
        .collect();
    format!("{head}?{}", pairs.join("&"))
}

/// The static keys of the AWS profile `AWS_PROFILE` (else `default`) in
/// the shared credentials file (`AWS_SHARED_CREDENTIALS_FILE`, else
/// `~/.aws/credentials`), if it has them: key id, secret, session token.
fn profile_credentials(
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<(String, String, Option<String>)>> {
    let path = match env("AWS_SHARED_CREDENTIALS_FILE") {
        Some(p) => PathBuf::from(p),
        None => match env("HOME") {
            Some(h) => PathBuf::from(h).join(".aws").join("credentials"),
            None => return Ok(None),
        },
    };
    let profile = env("AWS_PROFILE").unwrap_or_else(|| "default".to_string());
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(StorageError::config(format!(
                "cannot read the AWS credentials file {}: {e}",
                path.display()
            )));
        }
    };
    Ok(parse_profile(&text, &profile))
}

/// A profile's static keys in an AWS credentials file (INI).
fn parse_profile(text: &str, profile: &str) -> Option<(String, String, Option<String>)> {
    let mut inside = false;
    let (mut key, mut secret, mut token) = (None, None, None);
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(section) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let section = section.trim();
            inside = section == profile || section == format!("profile {profile}");
            continue;
        }
        if !inside {
            continue;
        }
        if let Some((k, v)) = line.split_once('=') {
            let v = v.trim().to_string();
            match k.trim() {
                "aws_access_key_id" => key = Some(v),
                "aws_secret_access_key" => secret = Some(v),
                "aws_session_token" => token = Some(v),
                _ => {}
            }
        }
    }
    Some((key?, secret?, token))
}

/// The `AWS_*` variables of the credential chain after static keys: web
/// identity (IRSA and the like), container credentials (ECS, EKS Pod
/// Identity), instance metadata. Other `AWS_*` variables are not read.
#[cfg(feature = "s3")]
const CHAIN_VARS: &[&str] = &[
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_ARN",
    "AWS_ROLE_SESSION_NAME",
    "AWS_ENDPOINT_URL_STS",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
    "AWS_METADATA_ENDPOINT",
    "AWS_IMDSV1_FALLBACK",
];

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
    let from_chain = spec.access_key_id.is_none() && !spec.skip_signature;
    match (&spec.access_key_id, &spec.secret_access_key) {
        (Some(k), Some(s)) => {
            b = b.with_access_key_id(k).with_secret_access_key(s);
            if let Some(t) = &spec.session_token {
                b = b.with_token(t);
            }
        }
        _ if spec.skip_signature => b = b.with_skip_signature(true),
        _ => {
            for var in CHAIN_VARS {
                if let Ok(v) = std::env::var(var)
                    && !v.is_empty()
                    && let Ok(key) = var.to_ascii_lowercase().parse()
                {
                    b = b.with_config(key, v);
                }
            }
        }
    }
    let store = b.build().map_err(|e| {
        StorageError::from_object_store(format!("configure s3://{}", spec.bucket), e)
    })?;
    // Credentials from the chain are had once now: none is an error at
    // start, never unsigned requests.
    let chain = if from_chain {
        let got = tokio::time::timeout(
            Duration::from_secs(15),
            store.credentials().get_credential(),
        )
        .await
        .map_err(|_| "no answer within 15 s".to_string())
        .and_then(|r| r.map_err(|e| e.to_string()));
        match got {
            Ok(c) => Some(c),
            Err(e) => {
                return Err(StorageError::config(format!(
                    "s3://{}: no S3 credentials: none in the store URL, AWS_ACCESS_KEY_ID and \
                     AWS_SECRET_ACCESS_KEY or the shared credentials file, and the web identity, \
                     container and instance-metadata providers gave none ({e}); for a public \
                     bucket give skip_signature=true",
                    spec.bucket
                )));
            }
        }
    } else {
        None
    };
    if spec.create_bucket {
        let mut with_keys = spec.clone();
        if let Some(c) = chain {
            with_keys.access_key_id = Some(c.key_id.clone());
            with_keys.secret_access_key = Some(c.secret_key.clone());
            with_keys.session_token = c.token.clone();
        }
        ensure_bucket(&with_keys, request_timeout).await?;
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

/// Attempts of each bucket request at start: a store answering 500 or 503
/// for a moment (or a dropped connection) does not stop a process from
/// starting; a refusal (403) or a bad endpoint fails at once.
#[cfg(feature = "s3")]
const BUCKET_ATTEMPTS: u32 = 8;

/// Creates the bucket with the AWS SDK unless it exists.
#[cfg(feature = "s3")]
async fn ensure_bucket(spec: &S3Spec, timeout: Duration) -> Result<()> {
    use aws_sdk_s3::config::retry::RetryConfig;
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
        .retry_config(
            RetryConfig::standard()
                .with_max_attempts(BUCKET_ATTEMPTS)
                .with_initial_backoff(Duration::from_millis(50))
                .with_max_backoff(Duration::from_secs(2)),
        )
        .timeout_config(
            // A hung endpoint still fails within two timeouts, retries and all.
            TimeoutConfig::builder()
                .operation_attempt_timeout(timeout)
                .operation_timeout(timeout.saturating_mul(2))
                .build(),
        );
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
            pool.set_kind(&ep.id, ep.spec.kind(), root, ep.spec.base_uri());
        }
        Ok(pool)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An S3 endpoint on 127.0.0.1 that answers each request with the
    /// next status of `statuses` (then 200), and counts the requests.
    #[cfg(feature = "s3")]
    async fn flaky_s3(
        statuses: Vec<u16>,
    ) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        use std::sync::atomic::Ordering;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let (statuses, count) = (statuses.clone(), count.clone());
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 16 * 1024];
                    let mut have = 0;
                    loop {
                        let Ok(n) = conn.read(&mut buf[have..]).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        have += n;
                        // Each request is a HEAD or a bodiless PUT: it ends with its headers.
                        while let Some(end) = buf[..have].windows(4).position(|w| w == b"\r\n\r\n")
                        {
                            let i = count.fetch_add(1, Ordering::SeqCst);
                            let status = statuses.get(i).copied().unwrap_or(200);
                            let reply = format!(
                                "HTTP/1.1 {status} X\r\ncontent-length: 0\r\nx-amz-request-id: {i}\r\n\r\n"
                            );
                            if conn.write_all(reply.as_bytes()).await.is_err() {
                                return;
                            }
                            buf.copy_within(end + 4..have, 0);
                            have -= end + 4;
                        }
                    }
                });
            }
        });
        (format!("http://{addr}"), seen)
    }

    #[cfg(feature = "s3")]
    fn spec_at(endpoint: &str) -> S3Spec {
        match BackendSpec::parse(&format!(
            "s3://bkt?region=us-east-1&access_key_id=a&secret_access_key=b&path_style=true&endpoint={endpoint}"
        ))
        .unwrap()
        {
            BackendSpec::S3(s) => s,
            other => panic!("{other:?}"),
        }
    }

    #[cfg(feature = "s3")]
    #[tokio::test]
    async fn a_store_failing_for_a_moment_at_start_is_retried_a_refusal_is_not() {
        use std::sync::atomic::Ordering;
        let (url, seen) = flaky_s3(vec![500, 503, 500]).await;
        ensure_bucket(&spec_at(&url), Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(
            seen.load(Ordering::SeqCst),
            4,
            "three failures, then the bucket"
        );

        let (url, seen) = flaky_s3(vec![403; 20]).await;
        let e = ensure_bucket(&spec_at(&url), Duration::from_secs(5))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::Unavailable);
        assert_eq!(seen.load(Ordering::SeqCst), 1, "a refusal is final");
    }

    #[test]
    fn base_uris_name_objects_for_other_programs() {
        let dir = tempfile::tempdir().unwrap();
        let local = BackendSpec::Local {
            root: dir.path().to_path_buf(),
        };
        let abs = std::fs::canonicalize(dir.path()).unwrap();
        assert_eq!(local.base_uri(), format!("file://{}/", abs.display()));
        let s3 =
            BackendSpec::parse("s3://bkt/some/prefix?region=x&access_key_id=a&secret_access_key=b")
                .unwrap();
        assert_eq!(s3.base_uri(), "s3://bkt/some/prefix/");
        assert_eq!(
            BackendSpec::parse("s3://bkt?region=x").unwrap().base_uri(),
            "s3://bkt/"
        );
    }

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

    #[test]
    fn a_profile_of_the_shared_credentials_file_gives_its_keys() {
        let text = "# keys\n[default]\naws_access_key_id = AKD\naws_secret_access_key=SD\n\n\
                    [profile ci]\naws_access_key_id=AKC\naws_secret_access_key = SC\naws_session_token=T\n\
                    [half]\naws_access_key_id=X\n";
        assert_eq!(
            parse_profile(text, "default"),
            Some(("AKD".into(), "SD".into(), None))
        );
        assert_eq!(
            parse_profile(text, "ci"),
            Some(("AKC".into(), "SC".into(), Some("T".into())))
        );
        assert_eq!(parse_profile(text, "half"), None);
        assert_eq!(parse_profile(text, "missing"), None);
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let file = dir.path().join("credentials");
        std::fs::write(&file, text).unwrap_or_else(|e| panic!("{e}"));
        let f = file.to_string_lossy().to_string();
        let env = move |k: &str| match k {
            "AWS_SHARED_CREDENTIALS_FILE" => Some(f.clone()),
            "AWS_PROFILE" => Some("ci".to_string()),
            _ => None,
        };
        assert_eq!(
            profile_credentials(&env).unwrap_or_else(|e| panic!("{e}")),
            Some(("AKC".into(), "SC".into(), Some("T".into())))
        );
        let none = |k: &str| {
            (k == "AWS_SHARED_CREDENTIALS_FILE").then(|| "/nonexistent/creds".to_string())
        };
        assert_eq!(
            profile_credentials(&none).unwrap_or_else(|e| panic!("{e}")),
            None
        );
    }

    #[test]
    fn unsigned_requests_only_when_asked_for() {
        let BackendSpec::S3(s) =
            BackendSpec::parse("s3://b?skip_signature=true").unwrap_or_else(|e| panic!("{e}"))
        else {
            panic!("not s3")
        };
        assert!(s.skip_signature);
        assert!(BackendSpec::parse("s3://b?skip_signature=maybe").is_err());
    }

    #[test]
    fn secrets_in_store_urls_are_redacted_in_messages() {
        let url =
            "s3://b/p?endpoint=http://h:9000&access_key_id=AK&secret_access_key=SK&session_token=T";
        let r = redact_url(url);
        assert!(!r.contains("SK") && !r.contains("=T"), "{r}");
        assert!(
            r.contains("access_key_id=AK") && r.contains("secret_access_key=***"),
            "{r}"
        );
        assert_eq!(redact_url("s3://user:pw@b"), "s3://***@b");
        let err = BackendSpec::parse("s3://?secret_access_key=SK")
            .map(|_| ())
            .unwrap_err();
        assert!(!err.to_string().contains("SK"), "{err}");
    }
}
